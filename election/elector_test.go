package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// Every test runs in a synctest bubble so that synctest.Wait tells when the
// Electors have settled; time is the fake clock's, stepped explicitly.

func TestAcquireMissingLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()

		term := a.mustStart()
		if want := (Term{Identity: "a", FencingToken: 0, AcquiredAt: t0}); term != want {
			t.Errorf("term = %+v, want %+v", term, want)
		}
		if !a.e.IsLeader() || a.e.Leader() != "a" {
			t.Errorf("IsLeader, Leader = %v, %q; want true, a", a.e.IsLeader(), a.e.Leader())
		}
		if got, ok := a.e.Term(); !ok || got != term {
			t.Errorf("Term() = %+v, %v; want %+v, true", got, ok, term)
		}
		l := api.get(t, testLease)
		if holderOf(l) != "a" || *l.Spec.LeaseDurationSeconds != 15 || transitionsOf(l) != 0 ||
			!l.Spec.AcquireTime.Time.Equal(t0) || !l.Spec.RenewTime.Time.Equal(t0) {
			t.Errorf("lease spec = %+v", l.Spec)
		}
		if got := a.leadersSeen(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("OnNewLeader got %q, want [a]", got)
		}
		if err := a.stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if a.e.IsLeader() {
			t.Error("IsLeader after Run returned")
		}
	})
}

func TestAcquireReleasedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		if _, err := api.create(releaseRecord(heldLease("old", 4, t0), t0)); err != nil {
			t.Fatal(err)
		}
		a := newContender(t, api, clk, "a", nil).start()
		if term := a.mustStart(); term.FencingToken != 5 {
			t.Errorf("token = %d, want 5 (released lease had 4 transitions)", term.FencingToken)
		}
		a.stop()
	})
}

func TestAcquireExpiredLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		// renewTime far in the past: expiry must not trust it.
		if _, err := api.create(heldLease("old", 2, t0.Add(-time.Hour))); err != nil {
			t.Fatal(err)
		}
		a := newContender(t, api, clk, "a", nil).start()
		a.mustNotStart()
		advance(clk, 15*time.Second-time.Millisecond, 100*time.Millisecond)
		a.mustNotStart()
		advance(clk, time.Millisecond, time.Millisecond)
		term := a.mustStart()
		if term.FencingToken != 3 || !term.AcquiredAt.Equal(t0.Add(15*time.Second)) {
			t.Errorf("term = %+v, want token 3 acquired at t0+15s", term)
		}
		if got := a.leadersSeen(); !slices.Equal(got, []string{"old", "a"}) {
			t.Errorf("OnNewLeader got %q, want [old a]", got)
		}
		a.stop()
	})
}

func TestOwnIdentityInRecordWaitsForExpiry(t *testing.T) {
	// A record naming this identity may belong to a previous incarnation
	// still at work: it is treated like anyone's, and the new term gets a
	// new token.
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		if _, err := api.create(heldLease("a", 7, t0)); err != nil {
			t.Fatal(err)
		}
		a := newContender(t, api, clk, "a", nil).start()
		advance(clk, 14*time.Second, time.Second)
		a.mustNotStart()
		advance(clk, time.Second, time.Second)
		if term := a.mustStart(); term.FencingToken != 8 {
			t.Errorf("token = %d, want 8", term.FencingToken)
		}
		a.stop()
	})
}

func TestRenew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		advance(clk, 2*time.Second, 100*time.Millisecond)
		l := api.get(t, testLease)
		if !l.Spec.RenewTime.Time.Equal(t0.Add(2*time.Second)) || !l.Spec.AcquireTime.Time.Equal(t0) || transitionsOf(l) != 0 {
			t.Errorf("after one renewal: spec = %+v", l.Spec)
		}
		advance(clk, time.Minute, 500*time.Millisecond)
		a.mustNotEnd()
		if l := api.get(t, testLease); !l.Spec.RenewTime.Time.Equal(t0.Add(62*time.Second)) || holderOf(l) != "a" {
			t.Errorf("after a minute: spec = %+v", l.Spec)
		}
		if got := a.conn.updates.Load(); got != 31 {
			t.Errorf("%d renewals in 62s, want 31 (one per RetryPeriod)", got)
		}
		a.stop()
	})
}

func TestRenewFailsUntilDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		b := newContender(t, api, clk, "b", nil).start()
		advance(clk, 2*time.Second, 100*time.Millisecond) // renewal sent at t0+2s succeeds
		a.conn.down.Store(true)

		// The last successful renewal was sent at t0+2s: a's work must stop
		// at t0+12s, not a moment later, and b, which saw that renewal at
		// t0+2s, must not take over before t0+17s.
		advance(clk, 10*time.Second-time.Millisecond, 100*time.Millisecond)
		a.mustNotEnd()
		advance(clk, time.Millisecond, time.Millisecond)
		a.mustEndFor(ErrRenewDeadlinePassed)
		if a.e.IsLeader() {
			t.Error("a: IsLeader after its ctx was cancelled")
		}
		if err := a.waitResult(); !errors.Is(err, ErrLeadershipLost) {
			t.Errorf("a: Run = %v, want ErrLeadershipLost", err)
		}
		select {
		case <-a.stopped:
		default:
			t.Error("a: OnStoppedLeading not called")
		}
		advance(clk, 5*time.Second-time.Millisecond, 100*time.Millisecond)
		b.mustNotStart()
		advance(clk, time.Millisecond, time.Millisecond)
		if term := b.mustStart(); term.FencingToken != 1 {
			t.Errorf("b: token = %d, want 1", term.FencingToken)
		}
		b.stop()
	})
}

// TestRequestTimeoutKeepsTheTerm: a renewal that gets no answer (a server
// frozen with its connection open) ends at RequestTimeout, and the next one,
// which a client failing over sends to another server, keeps the term.
// Without RequestTimeout the renewal waits out the RenewDeadline and the
// term ends.
func TestRequestTimeoutKeepsTheTerm(t *testing.T) {
	for _, timeout := range []time.Duration{0, 2 * time.Second} {
		t.Run(fmt.Sprint("RequestTimeout=", timeout), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
				var unanswered atomic.Int32
				a := newContender(t, api, clk, "a", func(c *Config) {
					c.RequestTimeout = timeout
					c.Client = unansweredLeases{c.Client, &unanswered}
				}).start()
				a.mustStart()
				unanswered.Store(1)                                // the renewal sent at t0+2s
				advance(clk, 12*time.Second, 100*time.Millisecond) // past its RenewDeadline
				if timeout == 0 {
					a.mustEnd()
					return
				}
				a.mustNotEnd()
				l, err := a.conn.CoordinationV1().Leases(testNamespace).Get(t.Context(), testLease, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := l.Spec.RenewTime.Time, t0.Add(10*time.Second); got.Before(want) {
					t.Errorf("renewTime %v, want %v or later", got, want)
				}
				if err := a.stop(); err != nil {
					t.Errorf("Run = %v", err)
				}
			})
		})
	}
}

// unansweredLeases leaves the next n updates unanswered until their context
// ends, as a server that froze with its connection open.
type unansweredLeases struct {
	coordinationv1client.LeasesGetter
	n *atomic.Int32
}

func (u unansweredLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return unansweredLease{u.LeasesGetter.Leases(namespace), u.n}
}

type unansweredLease struct {
	coordinationv1client.LeaseInterface
	n *atomic.Int32
}

func (u unansweredLease) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if u.n.Add(-1) >= 0 {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	return u.LeaseInterface.Update(ctx, l, opts)
}

func TestRenewDeadlineCountsFromSendTime(t *testing.T) {
	// A renewal acknowledged late extends leadership from when it was sent.
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		// Hold back the answer to the first renewal.
		release, held := make(chan struct{}), false
		a.conn.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if held {
				return false, nil, nil
			}
			held = true
			<-release
			l, err := api.update(action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease))
			return true, l, err
		})
		advance(clk, 2*time.Second, 100*time.Millisecond) // renewal sent at t0+2s, held
		advance(clk, 5*time.Second, 100*time.Millisecond)
		a.conn.down.Store(true)
		close(release) // acknowledged at t0+7s
		// Valid until t0+2s+10s, not t0+7s+10s.
		advance(clk, 5*time.Second-time.Millisecond, 100*time.Millisecond)
		a.mustNotEnd()
		advance(clk, time.Millisecond, time.Millisecond)
		a.mustEnd()
		if err := a.waitResult(); !errors.Is(err, ErrLeadershipLost) {
			t.Errorf("Run = %v, want ErrLeadershipLost", err)
		}
	})
}

func TestReleaseOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = true }).start()
		first := a.mustStart()
		b := newContender(t, api, clk, "b", nil).start()
		advance(clk, 3*time.Second, 500*time.Millisecond)

		if err := a.stop(); err != nil {
			t.Errorf("a: Run = %v, want nil", err)
		}
		a.mustEnd()
		// b sees the release through its watch: no time passes.
		term := b.mustStart()
		if term.FencingToken != first.FencingToken+1 || !term.AcquiredAt.Equal(clk.Now()) {
			t.Errorf("b: term = %+v, want token %d at %v", term, first.FencingToken+1, clk.Now())
		}
		if got := b.leadersSeen(); !slices.Equal(got, []string{"a", "", "b"}) {
			t.Errorf("b: OnNewLeader got %q, want [a \"\" b]", got)
		}
		b.stop()
	})
}

func TestReleaseRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = true }).start()
		a.mustStart()
		advance(clk, 5*time.Second, time.Second)
		a.stop()
		l := api.get(t, testLease)
		now := clk.Now()
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "" || *l.Spec.LeaseDurationSeconds != 1 ||
			!l.Spec.AcquireTime.Time.Equal(now) || !l.Spec.RenewTime.Time.Equal(now) || transitionsOf(l) != 0 {
			t.Errorf("released spec = %+v", l.Spec)
		}
	})
}

func TestCancelWithoutRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		b := newContender(t, api, clk, "b", nil).start()
		if err := a.stop(); err != nil {
			t.Errorf("a: Run = %v", err)
		}
		if h := holderOf(api.get(t, testLease)); h != "a" {
			t.Errorf("holder = %q, want a (not released)", h)
		}
		advance(clk, 15*time.Second-time.Millisecond, time.Second)
		b.mustNotStart()
		advance(clk, time.Millisecond, time.Millisecond)
		b.mustStart()
		b.stop()
	})
}

// TestTakeInFlightAsCtxEnds: ctx ends (SIGTERM, say) while a take is in
// flight, as when a standby is stopped as the Lease comes free; no term
// begins. Either the server writes the take but its answer is lost, or it
// answers the take: the take's request is not cancelled with ctx, since the
// server could write it after a read had found the Lease free, with no one
// to give it back. With ReleaseOnCancel the Lease is given back at once;
// without it, it is left to expire.
func TestTakeInFlightAsCtxEnds(t *testing.T) {
	takes := map[string]func(a *contender, api *fakeAPI, l *coordinationv1.Lease) (*coordinationv1.Lease, error){
		"answer lost": func(a *contender, api *fakeAPI, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
			if _, err := api.create(l); err != nil {
				return nil, err
			}
			a.cancel()
			return nil, context.Canceled
		},
		"answered": func(a *contender, api *fakeAPI, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
			a.cancel()
			return api.create(l)
		},
	}
	for name, take := range takes {
		for _, release := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ReleaseOnCancel=%v", name, release), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
					a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = release })
					a.conn.PrependReactor("create", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
						l, err := take(a, api, action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease))
						return true, l, err
					})
					a.start()
					if err := a.waitResult(); err != nil {
						t.Errorf("a: Run = %v, want nil", err)
					}
					a.mustNotStart()
					want := "a"
					if release {
						want = ""
					}
					if h := holderOf(api.get(t, testLease)); h != want {
						t.Errorf("holder = %q, want %q", h, want)
					}
				})
			})
		}
	}
}

func TestWindDownKeepsRenewing(t *testing.T) {
	// Cancelling Run cancels the work's ctx, but the Lease stays held and
	// renewed until OnStartedLeading returns, and only then is released.
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = true })
		a.hold = make(chan struct{})
		a.start()
		a.mustStart()
		b := newContender(t, api, clk, "b", nil).start()
		a.cancel()
		a.mustEnd()
		if a.e.IsLeader() {
			t.Error("IsLeader while winding down")
		}
		advance(clk, time.Minute, 500*time.Millisecond)
		b.mustNotStart()
		if l := api.get(t, testLease); holderOf(l) != "a" || !l.Spec.RenewTime.Time.Equal(t0.Add(time.Minute)) {
			t.Errorf("while winding down: spec = %+v", l.Spec)
		}
		close(a.hold)
		if err := a.waitResult(); err != nil {
			t.Errorf("a: Run = %v", err)
		}
		b.mustStart()
		b.stop()
	})
}

func TestObserveOtherLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		if _, err := api.create(heldLease("other", 0, t0)); err != nil {
			t.Fatal(err)
		}
		b := newContender(t, api, clk, "b", nil).start()
		// "other" renews every 2s for a minute, with its clock an hour
		// behind: skew does not matter.
		for i := range 30 {
			advance(clk, 2*time.Second, 500*time.Millisecond)
			api.edit(t, testLease, func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour + time.Duration(i)*time.Second)))
			})
		}
		b.mustNotStart()
		if b.e.Leader() != "other" || b.e.IsLeader() {
			t.Errorf("Leader, IsLeader = %q, %v; want other, false", b.e.Leader(), b.e.IsLeader())
		}
		api.edit(t, testLease, func(l *coordinationv1.Lease) { *l = *releaseRecord(l, t0) })
		if term := b.mustStart(); term.FencingToken != 1 {
			t.Errorf("token = %d, want 1", term.FencingToken)
		}
		if got := b.leadersSeen(); !slices.Equal(got, []string{"other", "", "b"}) {
			t.Errorf("OnNewLeader got %q", got)
		}
		b.stop()
	})
}

func TestPreferredHolderHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		first := a.mustStart()
		b := newContender(t, api, clk, "b", nil).start()
		c := newContender(t, api, clk, "c", nil).start()
		advance(clk, 3*time.Second, 500*time.Millisecond)

		api.edit(t, testLease, func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = ptr.To("c") })
		a.mustEnd()
		if err := a.waitResult(); !errors.Is(err, ErrHandedOver) {
			t.Errorf("a: Run = %v, want ErrHandedOver", err)
		}
		term := c.mustStart()
		b.mustNotStart()
		if term.FencingToken != first.FencingToken+1 {
			t.Errorf("c: token = %d, want %d", term.FencingToken, first.FencingToken+1)
		}
		l := api.get(t, testLease)
		if holderOf(l) != "c" || l.Spec.PreferredHolder != nil {
			t.Errorf("after handover: holder %q, preferredHolder %v; want c, nil", holderOf(l), l.Spec.PreferredHolder)
		}
		advance(clk, 10*time.Second, 500*time.Millisecond)
		b.mustNotStart()
		b.stop()
		c.stop()
	})
}

func TestPreferredHolderAbsent(t *testing.T) {
	// A release reserved for a contender that never takes it is taken by
	// another once the released record (1s) has expired.
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		b := newContender(t, api, clk, "b", nil).start()
		synctest.Wait()
		api.edit(t, testLease, func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = ptr.To("ghost") })
		if err := a.waitResult(); !errors.Is(err, ErrHandedOver) {
			t.Errorf("a: Run = %v, want ErrHandedOver", err)
		}
		b.mustNotStart()
		advance(clk, time.Second-time.Millisecond, 100*time.Millisecond)
		b.mustNotStart()
		advance(clk, time.Millisecond, time.Millisecond)
		b.mustStart()
		if l := api.get(t, testLease); l.Spec.PreferredHolder != nil {
			t.Errorf("preferredHolder = %q, want cleared", *l.Spec.PreferredHolder)
		}
		b.stop()
	})
}

func TestPreferredHolderIsSelf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		api.edit(t, testLease, func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = ptr.To("a") })
		advance(clk, 30*time.Second, time.Second)
		a.mustNotEnd()
		if l := api.get(t, testLease); holderOf(l) != "a" || l.Spec.PreferredHolder == nil {
			t.Errorf("spec = %+v, want held by a, preferredHolder kept", l.Spec)
		}
		a.stop()
	})
}

func TestConflictRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		if _, err := api.create(releaseRecord(heldLease("old", 0, t0), t0)); err != nil {
			t.Fatal(err)
		}
		a := newContender(t, api, clk, "a", nil)
		a.conn.conflicts.Store(2)
		a.start()
		if term := a.mustStart(); term.FencingToken != 1 {
			t.Errorf("token = %d, want 1", term.FencingToken)
		}
		// A conflicting renewal is retried at once, without losing the term.
		a.conn.conflicts.Store(1)
		advance(clk, 2*time.Second, time.Second)
		if l := api.get(t, testLease); !l.Spec.RenewTime.Time.Equal(t0.Add(2 * time.Second)) {
			t.Errorf("renewTime = %v, want t0+2s", l.Spec.RenewTime)
		}
		a.mustNotEnd()
		a.stop()
	})
}

func TestRaceForFreeLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		var cs []*contender
		for _, id := range []string{"a", "b", "c", "d"} {
			cs = append(cs, newContender(t, api, clk, id, nil).start())
		}
		advance(clk, 20*time.Second, 500*time.Millisecond)
		leaders := 0
		for _, c := range cs {
			select {
			case <-c.started:
				leaders++
			default:
			}
		}
		if leaders != 1 {
			t.Errorf("%d leaders, want 1", leaders)
		}
		for _, c := range cs {
			c.stop()
		}
	})
}

func TestLeaseTakenWhileLeading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		api.edit(t, testLease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("intruder") })
		a.mustEndFor(ErrLeaseHeldByAnother)
		if err := a.waitResult(); !errors.Is(err, ErrLeadershipLost) {
			t.Errorf("Run = %v, want ErrLeadershipLost", err)
		}
	})
}

func TestLeaseDeletedWhileLeading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", nil).start()
		a.mustStart()
		if err := api.tracker.Delete(leasesResource, testNamespace, testLease); err != nil {
			t.Fatal(err)
		}
		a.mustEndFor(ErrLeaseHeldByAnother)
		if err := a.waitResult(); !errors.Is(err, ErrLeadershipLost) {
			t.Errorf("Run = %v, want ErrLeadershipLost", err)
		}
		// Run again: the Lease is recreated.
		a.start()
		a.mustStart()
		a.stop()
	})
}

func TestRunAgainIncrementsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = true }).start()
		var tokens []int64
		for range 3 {
			tokens = append(tokens, a.mustStart().FencingToken)
			a.stop()
			a.start()
		}
		a.stop()
		if !slices.Equal(tokens, []int64{0, 1, 2}) {
			t.Errorf("tokens %v, want [0 1 2]", tokens)
		}
	})
}

func TestPollingWithoutWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = true }).start()
		a.mustStart()
		b := newContender(t, api, clk, "b", nil)
		b.conn.noWatch.Store(true)
		b.start()
		advance(clk, 5*time.Second, 500*time.Millisecond)
		a.stop()
		b.mustNotStart() // b learns of the release only at its next poll
		advance(clk, 2*time.Second, 100*time.Millisecond)
		b.mustStart()
		b.stop()
	})
}

func TestWatchResumesAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = true }).start()
		a.mustStart()
		b := newContender(t, api, clk, "b", nil)
		var watches []watch.Interface
		b.conn.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
			w, err := api.tracker.Watch(action.GetResource(), action.GetNamespace(), action.(k8stesting.WatchActionImpl).ListOptions)
			watches = append(watches, w)
			return true, w, err
		})
		b.start()
		advance(clk, 3*time.Second, 500*time.Millisecond)
		watches[len(watches)-1].Stop() // the server ends the watch
		synctest.Wait()
		if len(watches) != 2 {
			t.Fatalf("%d watches opened, want 2 (resumed at once)", len(watches))
		}
		a.stop()
		b.mustStart() // through the resumed watch, at once
		b.stop()
	})
}

func TestObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		o := newContender(t, api, clk, "observer", func(c *Config) { c.Callbacks.OnStartedLeading = nil })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- o.e.Observe(ctx) }()
		a := newContender(t, api, clk, "a", func(c *Config) { c.ReleaseOnCancel = true }).start()
		a.mustStart()
		a.stop()
		b := newContender(t, api, clk, "b", nil).start()
		b.mustStart()
		b.stop()
		if got := o.leadersSeen(); !slices.Equal(got, []string{"a", "", "b"}) {
			t.Errorf("OnNewLeader got %q, want [a \"\" b]", got)
		}
		if err := o.e.Run(ctx); err == nil {
			t.Error("Run without OnStartedLeading succeeded")
		}
		cancel()
		synctest.Wait()
		if err := <-done; err != nil {
			t.Errorf("Observe = %v", err)
		}
	})
}

// TestContextForCause: a request's context ended by its deadline on the
// elector's clock says so in its cause, so that a client failing over
// between servers (leasehold elect --server) tells it from a caller that
// gave up; one its caller cancelled says that.
func TestContextForCause(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	e := &Elector{clock: clk}
	ctx, cancel := e.contextFor(context.Background(), time.Second)
	defer cancel()
	clk.Step(time.Second) // the timer was set before contextFor returned
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != context.DeadlineExceeded {
		t.Errorf("the cause after the deadline: %v; want %v", cause, context.DeadlineExceeded)
	}
	ctx, cancel = e.contextFor(context.Background(), time.Second)
	cancel()
	if cause := context.Cause(ctx); cause != context.Canceled {
		t.Errorf("the cause after a cancel: %v; want %v", cause, context.Canceled)
	}
}

// blockingHandler is a log handler that blocks every warning until
// release is closed, as a logger writing to a pipe nobody reads.
type blockingHandler struct {
	release chan struct{}
}

func (h blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h blockingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h blockingHandler) WithGroup(string) slog.Handler            { return h }
func (h blockingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		<-h.release
	}
	return nil
}

// TestTermEndsWhileLoggerBlocks: the term ends at the renew deadline even
// when the elector's warnings cannot be written (the first failed renewal's
// blocks its loop): the watchdog ends it.
func TestTermEndsWhileLoggerBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		h := blockingHandler{release: make(chan struct{})}
		a := newContender(t, api, clk, "a", func(c *Config) { c.Logger = slog.New(h) }).start()
		a.mustStart()
		a.conn.down.Store(true)
		advance(clk, 10*time.Second, 100*time.Millisecond)
		a.mustEndFor(ErrRenewDeadlinePassed) // the warnings still blocked
		close(h.release)
		if err := a.waitResult(); !errors.Is(err, ErrLeadershipLost) {
			t.Errorf("Run = %v, want ErrLeadershipLost", err)
		}
	})
}

// TestCutOff: a request that its deadline on the elector's clock cut off
// says it went unanswered; one whose caller gave up, or that failed
// otherwise, says what it said.
func TestCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		e := &Elector{clock: clk}
		rctx, cancel := e.contextFor(context.Background(), time.Second)
		defer cancel()
		synctest.Wait()
		clk.Step(time.Second)
		<-rctx.Done()
		if err := cutOff(rctx, fmt.Errorf("get: %w", rctx.Err())); err == nil || err.Error() != "no answer in time: get: context canceled" || !errors.Is(err, context.Canceled) {
			t.Errorf("cut off by its deadline: %v", err)
		}
		parent, stop := context.WithCancel(context.Background())
		rctx, cancel = e.contextFor(parent, time.Second)
		defer cancel()
		stop()
		<-rctx.Done()
		if err := cutOff(rctx, rctx.Err()); err != context.Canceled {
			t.Errorf("given up by its caller: %v", err)
		}
		if err := cutOff(rctx, errors.New("boom")); err.Error() != "boom" {
			t.Errorf("another failure: %v", err)
		}
	})
}
