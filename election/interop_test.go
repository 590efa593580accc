package election

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// exclusion checks that terms of leadership never overlap and that their
// fencing tokens strictly increase.
type exclusion struct {
	t      *testing.T
	mu     sync.Mutex
	holder string
	token  int64
	terms  map[string]int // by kind of contender
}

func (x *exclusion) enter(kind, id string, token int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.holder != "" {
		x.t.Errorf("%v: %s started leading while %s leads", time.Now(), id, x.holder)
	}
	if len(x.terms) > 0 && token <= x.token {
		x.t.Errorf("%v: %s leads with token %d after token %d", time.Now(), id, token, x.token)
	}
	x.holder, x.token = id, token
	x.terms[kind]++
}

func (x *exclusion) exit(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.holder == id {
		x.holder = ""
	}
}

// TestInteropWithClientGo runs leasehold Electors and client-go
// LeaderElectors on one Lease for twenty (virtual) minutes of graceful
// restarts and network partitions, and checks that no two ever lead at the
// same time and that fencing tokens strictly increase. Both kinds use the
// real clock, which the synctest bubble makes virtual.
func TestInteropWithClientGo(t *testing.T) {
	klog.SetLogger(logr.Discard())
	const (
		leaseDuration = 3 * time.Second
		renewDeadline = 2 * time.Second
		retryPeriod   = 500 * time.Millisecond
		length        = 20 * time.Minute
	)
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI()
		x := &exclusion{t: t, terms: map[string]int{}}
		rng := rand.New(rand.NewPCG(1, 2))
		ctx, finish := context.WithCancel(t.Context())

		type runner struct {
			conn *conn
			mu   sync.Mutex
			stop func() // graceful stop of the current run
		}
		var runners []*runner
		var wg sync.WaitGroup

		// leasehold contenders: one Elector each, run again after every term.
		for i := range 3 {
			r := &runner{}
			id := fmt.Sprintf("leasehold-%d", i)
			r.conn = api.connect()
			e, err := New(Config{
				Client: r.conn.CoordinationV1(), Namespace: testNamespace, Name: testLease, Identity: id,
				LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
				ReleaseOnCancel: i != 0,
				Callbacks: Callbacks{OnStartedLeading: func(ctx context.Context, term Term) {
					x.enter("leasehold", id, term.FencingToken)
					<-ctx.Done()
					x.exit(id)
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
			runners = append(runners, r)
			wg.Go(func() {
				for ctx.Err() == nil {
					runCtx, cancel := context.WithCancel(ctx)
					r.mu.Lock()
					r.stop = cancel
					r.mu.Unlock()
					e.Run(runCtx)
					cancel()
				}
			})
		}

		// client-go contenders: a new LeaderElector, with a new identity, per
		// run, as a restarted process would have.
		for i := range 2 {
			r := &runner{conn: api.connect()}
			runners = append(runners, r)
			wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					id := fmt.Sprintf("client-go-%d-%d", i, n)
					runCtx, cancel := context.WithCancel(ctx)
					quit, exited := make(chan struct{}), make(chan struct{})
					var leading atomic.Bool
					r.mu.Lock()
					var once sync.Once
					r.stop = func() {
						// A process shutting down: stop the work, then the
						// elector.
						once.Do(func() {
							if leading.Load() {
								close(quit)
								<-exited
							}
							cancel()
						})
					}
					r.mu.Unlock()
					le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
						Lock: &resourcelock.LeaseLock{
							LeaseMeta:  metav1.ObjectMeta{Namespace: testNamespace, Name: testLease},
							Client:     r.conn.CoordinationV1(),
							LockConfig: resourcelock.ResourceLockConfig{Identity: id},
						},
						LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
						// Not ReleaseOnCancel: when a renewal fails, client-go
						// then releases the Lease before it cancels
						// OnStartedLeading's ctx, so a successor can start
						// while the work still runs (this test caught it).
						ReleaseOnCancel: false,
						Callbacks: leaderelection.LeaderCallbacks{
							OnStartedLeading: func(ctx context.Context) {
								defer close(exited)
								leading.Store(true)
								x.enter("client-go", id, int64(transitionsOf(api.get(t, testLease))))
								select {
								case <-ctx.Done():
								case <-quit:
								}
								x.exit(id)
							},
							OnStoppedLeading: func() {},
						},
					})
					if err != nil {
						t.Error(err)
						cancel()
						return
					}
					le.Run(runCtx)
					cancel()
					if leading.Load() {
						<-exited
					}
				}
			})
		}

		// Chaos: graceful restarts and partitions of random contenders.
		for start := time.Now(); time.Since(start) < length; {
			time.Sleep(time.Duration(rng.Int64N(int64(3 * time.Second))))
			r := runners[rng.IntN(len(runners))]
			if rng.IntN(2) == 0 {
				r.mu.Lock()
				stop := r.stop
				r.mu.Unlock()
				if stop != nil {
					stop()
				}
				continue
			}
			if r.conn.down.Load() {
				continue
			}
			r.conn.down.Store(true)
			d := time.Duration(rng.Int64N(int64(4 * leaseDuration)))
			time.AfterFunc(d, func() { r.conn.down.Store(false) })
		}
		finish()
		for _, r := range runners {
			r.conn.down.Store(false)
		}
		wg.Wait()
		t.Logf("terms: %v, last token %d", x.terms, x.token)
		if x.terms["leasehold"] < 5 || x.terms["client-go"] < 5 {
			t.Errorf("terms %v: want at least 5 of each kind", x.terms)
		}
	})
}
