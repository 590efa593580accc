package servertest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// These tests run Electors against a real leasehold server (embedded etcd,
// HTTPS, watch cache) and wait with deadlines on the real clock.

// member runs one Elector against the server.
type member struct {
	e       *election.Elector
	started chan election.Term
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	result  error
}

func startMember(t testing.TB, cs kubernetes.Interface, lease, id string, retry time.Duration) *member {
	t.Helper()
	m := &member{started: make(chan election.Term, 10), done: make(chan error, 1)}
	e, err := election.New(election.Config{
		Client: cs.CoordinationV1(), Namespace: "default", Name: lease, Identity: id,
		RetryPeriod:     retry,
		ReleaseOnCancel: true,
		Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context, term election.Term) {
			m.started <- term
			<-ctx.Done()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.e = e
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- e.Run(ctx) }()
	t.Cleanup(func() { m.stop() })
	return m
}

func (m *member) stop() error {
	m.once.Do(func() {
		m.cancel()
		m.result = <-m.done
	})
	return m.result
}

// waitObserved waits until m has read the Lease (and so is watching it).
func waitObserved(t testing.TB, m *member) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); m.e.Leader() == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Lease was never observed")
		}
	}
}

func waitStart(t testing.TB, ms ...*member) (*member, election.Term) {
	t.Helper()
	cases := make(chan struct {
		m    *member
		term election.Term
	}, len(ms))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range ms {
		go func() {
			select {
			case term := <-m.started:
				cases <- struct {
					m    *member
					term election.Term
				}{m, term}
			case <-ctx.Done():
			}
		}()
	}
	select {
	case c := <-cases:
		return c.m, c.term
	case <-ctx.Done():
		t.Fatal("nobody started leading")
		return nil, election.Term{}
	}
}

func TestServerHandover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv := apiservertest.Start(t, apiservertest.Options{})
	cs := srv.Client(t, "")

	// RetryPeriod 8s: a contender that polled would take up to 8s to notice
	// a release.
	a := startMember(t, cs, "job", "a", 8*time.Second)
	if _, term := waitStart(t, a); term.FencingToken != 0 {
		t.Errorf("a: token %d, want 0", term.FencingToken)
	}
	b := startMember(t, cs, "job", "b", 8*time.Second)
	c := startMember(t, cs, "job", "c", 8*time.Second)
	waitObserved(t, b)
	waitObserved(t, c)

	begin := time.Now()
	if err := a.stop(); err != nil {
		t.Errorf("a: Run = %v", err)
	}
	next, term := waitStart(t, b, c)
	if took := time.Since(begin); took > 4*time.Second {
		t.Errorf("takeover after release took %v; through a watch it takes one event and one write", took)
	}
	if term.FencingToken != 1 {
		t.Errorf("%s: token %d, want 1", term.Identity, term.FencingToken)
	}

	// Move leadership to the other standby with spec.preferredHolder.
	other := map[*member]*member{b: c, c: b}[next]
	otherID := map[*member]string{b: "c", c: "b"}[next]
	l, err := cs.CoordinationV1().Leases("default").Get(context.Background(), "job", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API accepts preferredHolder only with a strategy.
	l.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
	l.Spec.PreferredHolder = ptr.To(otherID)
	if _, err := cs.CoordinationV1().Leases("default").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, term := waitStart(t, other); term.FencingToken != 2 || term.Identity != otherID {
		t.Errorf("after handover: %+v, want %s with token 2", term, otherID)
	}
	if err := next.stop(); err != election.ErrHandedOver {
		t.Errorf("previous leader: Run = %v, want ErrHandedOver", err)
	}
}

// TestServerMixedContenders runs leasehold and client-go contenders on one
// Lease, restarting them at random, and checks they never lead together.
func TestServerMixedContenders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	klog.SetLogger(logr.Discard())
	srv := apiservertest.Start(t, apiservertest.Options{})
	const ld, rd, rp = 4 * time.Second, 2 * time.Second, 500 * time.Millisecond

	var (
		mu     sync.Mutex
		holder string
		token  int64 = -1
		terms  int
	)
	enter := func(id string, tok int64) {
		mu.Lock()
		defer mu.Unlock()
		if holder != "" {
			t.Errorf("%s started leading while %s leads", id, holder)
		}
		if tok <= token {
			t.Errorf("%s: token %d after %d", id, tok, token)
		}
		holder, token = id, tok
		terms++
		t.Logf("%s leads with token %d", id, tok)
	}
	exit := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if holder == id {
			holder = ""
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		cs := srv.Client(t, "")
		if i%2 == 0 {
			// A leasehold contender: one Elector, Run again and again for
			// 1-3s, alternately releasing and not.
			id := fmt.Sprintf("leasehold-%d", i)
			var e [2]*election.Elector
			for k := range e {
				var err error
				e[k], err = election.New(election.Config{
					Client: cs.CoordinationV1(), Namespace: "default", Name: "mixed", Identity: id,
					LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp, ReleaseOnCancel: k == 0,
					Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context, term election.Term) {
						enter(id, term.FencingToken)
						<-ctx.Done()
						exit(id)
					}},
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					runCtx, stop := context.WithTimeout(ctx, time.Duration(1+(i+n)%3)*time.Second)
					e[n%2].Run(runCtx)
					stop()
				}
			})
			continue
		}
		// A client-go contender: a new process, with a new identity, every
		// 5-7s.
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("client-go-%d-%d", i, n)
				runCtx, stop := context.WithTimeout(ctx, time.Duration(5+(i+n)%3)*time.Second)
				le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
					Lock: &resourcelock.LeaseLock{
						LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: "mixed"},
						Client:     cs.CoordinationV1(),
						LockConfig: resourcelock.ResourceLockConfig{Identity: id},
					},
					LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp,
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(ctx context.Context) {
							l, err := cs.CoordinationV1().Leases("default").Get(ctx, "mixed", metav1.GetOptions{})
							if err != nil {
								t.Error(err)
								return
							}
							enter(id, int64(*l.Spec.LeaseTransitions))
							<-ctx.Done()
							exit(id)
						},
						OnStoppedLeading: func() {},
					},
				})
				if err != nil {
					t.Error(err)
					stop()
					return
				}
				le.Run(runCtx)
				stop()
			}
		})
	}
	wg.Wait()
	if terms < 3 {
		t.Errorf("%d terms, want several", terms)
	}
}

// BenchmarkGracefulFailover measures the time from a leader cancelling Run
// (with ReleaseOnCancel) until a standby starts leading, against a real
// server, for leasehold's Elector and for client-go's, with the default
// durations.
func BenchmarkGracefulFailover(b *testing.B) {
	klog.SetLogger(logr.Discard())
	srv := apiservertest.Start(b, apiservertest.Options{})
	cs := srv.Client(b, "")

	b.Run("leasehold", func(b *testing.B) {
		prev := startMember(b, cs, "bench-leasehold", "m0", 0)
		waitStart(b, prev)
		next := startMember(b, cs, "bench-leasehold", "m1", 0)
		waitObserved(b, next)
		var total time.Duration
		for i := 0; b.Loop(); i++ {
			begin := time.Now()
			prev.stop()
			waitStart(b, next)
			total += time.Since(begin)
			prev, next = next, startMember(b, cs, "bench-leasehold", fmt.Sprintf("m%d", i+2), 0)
			waitObserved(b, next)
		}
		b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
	})

	b.Run("client-go", func(b *testing.B) {
		type cg struct {
			cancel  context.CancelFunc
			started chan struct{}
			done    chan struct{}
		}
		start := func(id string) *cg {
			c := &cg{started: make(chan struct{}, 1), done: make(chan struct{})}
			ctx, cancel := context.WithCancel(context.Background())
			c.cancel = cancel
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: &resourcelock.LeaseLock{
					LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: "bench-client-go"},
					Client:     cs.CoordinationV1(),
					LockConfig: resourcelock.ResourceLockConfig{Identity: id},
				},
				LeaseDuration: election.DefaultLeaseDuration, RenewDeadline: election.DefaultRenewDeadline,
				RetryPeriod: election.DefaultRetryPeriod, ReleaseOnCancel: true,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { c.started <- struct{}{} },
					OnStoppedLeading: func() {},
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			go func() { le.Run(ctx); close(c.done) }()
			return c
		}
		prev := start("g0")
		<-prev.started
		next := start("g1")
		var total time.Duration
		for i := 0; b.Loop(); i++ {
			begin := time.Now()
			prev.cancel()
			<-prev.done
			<-next.started
			total += time.Since(begin)
			prev, next = next, start(fmt.Sprintf("g%d", i+2))
		}
		prev.cancel()
		next.cancel()
		<-prev.done
		<-next.done
		b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
	})
}
