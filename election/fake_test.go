package election

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/leakcheck"
)

// TestMain fails the package if a test leaves an Elector or Candidate goroutine behind.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m, "leasehold/election.(*Elector)", "leasehold/election.(*Candidate)"))
}

var leasesResource = coordinationv1.SchemeGroupVersion.WithResource("leases")

// fakeAPI is an in-memory coordination API with what the fake clientset's
// tracker lacks: resourceVersions on objects and compare-and-swap updates,
// like the real server. Its resourceVersions are the tracker's own counter,
// so watches resume from them correctly.
type fakeAPI struct {
	tracker k8stesting.ObjectTracker
	mu      sync.Mutex
	rv      int64 // the tracker's counter: it starts at 1
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{tracker: k8stesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder()), rv: 1}
}

func (a *fakeAPI) create(l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	l = l.DeepCopy()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rv++
	l.ResourceVersion = strconv.FormatInt(a.rv, 10)
	if err := a.tracker.Create(leasesResource, l, l.Namespace); err != nil {
		a.rv--
		return nil, err
	}
	return l.DeepCopy(), nil
}

func (a *fakeAPI) update(l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	l = l.DeepCopy()
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, err := a.tracker.Get(leasesResource, l.Namespace, l.Name)
	if err != nil {
		return nil, err
	}
	if l.ResourceVersion != cur.(*coordinationv1.Lease).ResourceVersion {
		return nil, apierrors.NewConflict(leasesResource.GroupResource(), l.Name, errors.New("the object has been modified"))
	}
	a.rv++
	l.ResourceVersion = strconv.FormatInt(a.rv, 10)
	if err := a.tracker.Update(leasesResource, l, l.Namespace); err != nil {
		a.rv--
		return nil, err
	}
	return l.DeepCopy(), nil
}

// get returns the stored Lease (nil when absent).
func (a *fakeAPI) get(t *testing.T, name string) *coordinationv1.Lease {
	t.Helper()
	obj, err := a.tracker.Get(leasesResource, testNamespace, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return obj.(*coordinationv1.Lease)
}

// edit applies f to the stored Lease, as an operator would.
func (a *fakeAPI) edit(t *testing.T, name string, f func(*coordinationv1.Lease)) {
	t.Helper()
	l := a.get(t, name)
	f(l)
	if _, err := a.update(l); err != nil {
		t.Fatalf("edit lease: %v", err)
	}
}

// conn is one contender's connection to a fakeAPI, with faults to inject.
type conn struct {
	*fake.Clientset
	// down fails every request, as a partitioned or paused process sees.
	down atomic.Bool
	// noWatch refuses watches (as for an identity without the verb).
	noWatch atomic.Bool
	// conflicts is the number of upcoming updates to fail with a conflict.
	conflicts atomic.Int32
	// updates counts update requests.
	updates atomic.Int32
}

func (a *fakeAPI) connect() *conn {
	c := &conn{Clientset: &fake.Clientset{}}
	c.AddReactor("*", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if c.down.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	c.AddReactor("create", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l, err := a.create(action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease))
		return true, l, err
	})
	c.AddReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		c.updates.Add(1)
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if c.conflicts.Add(-1) >= 0 {
			return true, nil, apierrors.NewConflict(leasesResource.GroupResource(), l.Name, errors.New("injected conflict"))
		}
		l, err := a.update(l)
		return true, l, err
	})
	c.AddReactor("*", "*", k8stesting.ObjectReaction(a.tracker))
	c.AddWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if c.down.Load() || c.noWatch.Load() {
			return true, nil, apierrors.NewForbidden(leasesResource.GroupResource(), "", errors.New("watch refused"))
		}
		opts := action.(k8stesting.WatchActionImpl).ListOptions
		w, err := a.tracker.Watch(action.GetResource(), action.GetNamespace(), opts)
		return true, w, err
	})
	return c
}

const (
	testNamespace = "default"
	testLease     = "job"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// heldLease returns a Lease held by holder, renewed at renew.
func heldLease(holder string, transitions int32, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          ptr.To(metav1.NewMicroTime(renew)),
			RenewTime:            ptr.To(metav1.NewMicroTime(renew)),
			LeaseTransitions:     ptr.To(transitions),
		},
	}
}

// contender runs one Elector and records what its callbacks see.
type contender struct {
	t    *testing.T
	id   string
	e    *Elector
	conn *conn

	started chan Term     // a term started
	ended   chan Term     // OnStartedLeading's ctx was cancelled
	causes  chan error    // and why (context.Cause)
	stopped chan struct{} // OnStoppedLeading
	leaders chan string   // OnNewLeader
	hold    chan struct{} // when non-nil, OnStartedLeading returns only once closed

	cancel context.CancelFunc
	result chan error // what Run returned
}

// newContender makes a contender; start runs it.
func newContender(t *testing.T, api *fakeAPI, clk *clocktesting.FakeClock, id string, configure func(*Config)) *contender {
	t.Helper()
	c := &contender{
		t: t, id: id, conn: api.connect(),
		started: make(chan Term, 10),
		ended:   make(chan Term, 10),
		causes:  make(chan error, 10),
		stopped: make(chan struct{}, 10),
		leaders: make(chan string, 100),
	}
	cfg := Config{
		Client:    c.conn.CoordinationV1(),
		Namespace: testNamespace,
		Name:      testLease,
		Identity:  id,
		Clock:     clk,
		Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context, term Term) {
				c.started <- term
				<-ctx.Done()
				c.causes <- context.Cause(ctx)
				c.ended <- term
				if c.hold != nil {
					<-c.hold
				}
			},
			OnStoppedLeading: func() { c.stopped <- struct{}{} },
			OnNewLeader:      func(id string) { c.leaders <- id },
		},
	}
	if configure != nil {
		configure(&cfg)
	}
	t.Cleanup(func() {
		// After a failed test, let OnStartedLeading return (ctx is done).
		if c.hold != nil {
			select {
			case <-c.hold:
			default:
				close(c.hold)
			}
		}
	})
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.e = e
	return c
}

// start runs the Elector until stop, or the end of the test.
func (c *contender) start() *contender {
	ctx, cancel := context.WithCancel(c.t.Context())
	c.cancel = cancel
	c.result = make(chan error, 1)
	go func() { c.result <- c.e.Run(ctx) }()
	return c
}

// stop cancels Run and returns its result.
func (c *contender) stop() error {
	c.t.Helper()
	c.cancel()
	return c.waitResult()
}

func (c *contender) waitResult() error {
	c.t.Helper()
	synctest.Wait()
	select {
	case err := <-c.result:
		return err
	default:
		c.t.Fatalf("%s: Run did not return", c.id)
		return nil
	}
}

// mustStart returns the term that started since the last call.
func (c *contender) mustStart() Term {
	c.t.Helper()
	synctest.Wait()
	select {
	case term := <-c.started:
		return term
	default:
		c.t.Fatalf("%s: did not start leading", c.id)
		return Term{}
	}
}

func (c *contender) mustNotStart() {
	c.t.Helper()
	synctest.Wait()
	select {
	case term := <-c.started:
		c.t.Fatalf("%s: started leading (token %d), want not", c.id, term.FencingToken)
	default:
	}
}

func (c *contender) mustEnd() {
	c.t.Helper()
	synctest.Wait()
	select {
	case <-c.ended:
	default:
		c.t.Fatalf("%s: OnStartedLeading's ctx not cancelled", c.id)
	}
}

// mustEndFor is mustEnd, the term's ctx cancelled for cause.
func (c *contender) mustEndFor(cause error) {
	c.t.Helper()
	c.mustEnd()
	if got := <-c.causes; !errors.Is(got, cause) {
		c.t.Errorf("%s: the term ended for %v, want %v", c.id, got, cause)
	}
}

func (c *contender) mustNotEnd() {
	c.t.Helper()
	synctest.Wait()
	select {
	case <-c.ended:
		c.t.Fatalf("%s: OnStartedLeading's ctx cancelled, want not", c.id)
	default:
	}
}

// leadersSeen drains the identities given to OnNewLeader.
func (c *contender) leadersSeen() []string {
	synctest.Wait()
	var got []string
	for {
		select {
		case id := <-c.leaders:
			got = append(got, id)
		default:
			return got
		}
	}
}

// advance steps clk by total in steps of step, letting every goroutine
// settle after each.
func advance(clk *clocktesting.FakeClock, total, step time.Duration) {
	for total > 0 {
		d := min(step, total)
		synctest.Wait()
		clk.Step(d)
		total -= d
	}
	synctest.Wait()
}
