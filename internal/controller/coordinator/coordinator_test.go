package coordinator

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Client: client}, true},
		{"no client", Config{}, false},
		{"fractional lease duration", Config{Client: client, LeaseDuration: 1500 * time.Millisecond}, false},
		{"timeout shorter than an election", Config{Client: client, ElectionDuration: time.Minute, CandidateTimeout: time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); (err == nil) != tt.ok {
				t.Errorf("New: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// fakeCluster drives a Coordinator on a fake clientset and a fake clock,
// playing the candidates' part by hand.
type fakeCluster struct {
	t      *testing.T
	client *fake.Clientset
	clk    *clocktesting.FakeClock
}

func (f *fakeCluster) candidate(name, version string) {
	f.t.Helper()
	c := lc(name, version, version, 0)
	c.Spec.RenewTime = ptr.To(metav1.NewMicroTime(f.clk.Now()))
	if _, err := f.client.CoordinationV1beta1().LeaseCandidates(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeCluster) getCandidate(name string) *coordinationv1beta1.LeaseCandidate {
	f.t.Helper()
	c, err := f.client.CoordinationV1beta1().LeaseCandidates("default").Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// renew answers a ping (or renews unasked), as a Candidate does.
func (f *fakeCluster) renew(name string) {
	f.t.Helper()
	c := f.getCandidate(name)
	c.Spec.RenewTime = ptr.To(metav1.NewMicroTime(f.clk.Now()))
	if _, err := f.client.CoordinationV1beta1().LeaseCandidates("default").Update(context.Background(), c, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeCluster) pinged(name string) bool {
	f.t.Helper()
	c := f.getCandidate(name)
	return c != nil && c.Spec.PingTime != nil && c.Spec.PingTime.Time.Equal(f.clk.Now())
}

func (f *fakeCluster) lease() *coordinationv1.Lease {
	f.t.Helper()
	l, err := f.client.CoordinationV1().Leases("default").Get(context.Background(), "job", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

func (f *fakeCluster) step(d time.Duration) {
	synctest.Wait()
	f.clk.Step(d)
	synctest.Wait()
}

func TestCoordinatorElectsAndCollects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeCluster{t: t, client: fake.NewClientset(), clk: clocktesting.NewFakeClock(t0)}
		f.candidate("a", "1.3.0")
		f.candidate("b", "1.2.0")
		co, err := New(Config{Client: f.client, Clock: f.clk})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- co.Run(ctx) }()
		// The informers' cache-sync polling runs on the bubble's virtual
		// time; this lets it run (it takes no real time).
		time.Sleep(time.Second)
		synctest.Wait()

		// Candidates that existed before the coordinator started are
		// pinged: it has not seen them renew.
		if !f.pinged("a") || !f.pinged("b") {
			t.Fatalf("candidates not pinged: %+v, %+v", f.getCandidate("a").Spec, f.getCandidate("b").Spec)
		}
		if f.lease() != nil {
			t.Fatal("lease created before the candidates answered")
		}
		// Only a answers; after the election duration it is elected.
		f.step(time.Second)
		f.renew("a")
		f.step(time.Second)
		if f.lease() != nil {
			t.Fatal("lease created before every candidate answered or the election ended")
		}
		f.step(3 * time.Second)
		l := f.lease()
		if l == nil || holderOf(l) != "a" || *l.Spec.LeaseTransitions != 0 || !l.Spec.AcquireTime.Time.Equal(f.clk.Now()) {
			t.Fatalf("lease %+v, want created for a at t0+5s", l)
		}

		// b renews by itself: it is the better candidate, just seen alive,
		// and a holds a fresh Lease: b becomes the preferred holder.
		f.renew("b")
		f.step(0)
		l = f.lease()
		if holderOf(l) != "a" || preferredOf(l) != "b" {
			t.Fatalf("lease %+v, want held by a, preferred b", l.Spec)
		}
		// a releases (handover); everyone renewed within the election
		// duration, so b is elected at once.
		l.Spec.HolderIdentity = ptr.To("")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		if _, err := f.client.CoordinationV1().Leases("default").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.step(0)
		l = f.lease()
		if holderOf(l) != "b" || preferredOf(l) != "" || *l.Spec.LeaseTransitions != 1 {
			t.Fatalf("lease %+v, want held by b, transitions 1", l.Spec)
		}

		// b stops renewing the Lease: 15 s after the coordinator saw the
		// last change, it pings; only a answers and is elected.
		f.step(15*time.Second - time.Millisecond)
		if f.pinged("a") || f.pinged("b") {
			t.Fatal("pinged before the lease expired")
		}
		f.step(time.Millisecond)
		if !f.pinged("a") || !f.pinged("b") {
			t.Fatal("not pinged once the lease expired")
		}
		f.renew("a")
		f.step(5 * time.Second)
		if l := f.lease(); holderOf(l) != "a" || *l.Spec.LeaseTransitions != 2 {
			t.Fatalf("lease %+v, want held by a, transitions 2", l.Spec)
		}

		// b never renews again: 30 minutes after it was last seen alive it
		// is deleted; a, renewing, is kept.
		for range 6 {
			f.step(5 * time.Minute)
			f.renew("a")
			// a renews its Lease too.
			l := f.lease()
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(f.clk.Now()))
			if _, err := f.client.CoordinationV1().Leases("default").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		f.step(time.Second)
		if f.getCandidate("b") != nil {
			t.Error("stale candidate b not collected")
		}
		if f.getCandidate("a") == nil {
			t.Error("live candidate a collected")
		}

		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		default:
			t.Fatal("Run did not return")
		}
	})
}

// TestLeaseHandler checks the coordinator's table of leases against what
// its feed hands it: a deletion forgets only the version of the lease it
// names, and a list after a watch gap forgets the leases it lacks.
func TestLeaseHandler(t *testing.T) {
	co, err := New(Config{Client: fake.NewClientset(), Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	co.leases = map[types.NamespacedName]*leaseState{}
	named := func(name string, uid types.UID) *coordinationv1.Lease {
		l := lease("a", "", 0)
		l.Name, l.UID = name, uid
		return l
	}
	has := func() []string {
		var out []string
		for k, s := range co.leases {
			out = append(out, k.Name+"/"+string(s.obj.UID))
		}
		slices.Sort(out)
		return out
	}
	h := co.leaseHandler()
	h.Seen(named("x", "1"), true)
	h.Seen(named("y", "2"), true)
	h.Seen(named("z", "3"), false)
	h.Gone(named("x", "old")) // an earlier lease of the same name
	if got, want := has(), []string{"x/1", "y/2", "z/3"}; !slices.Equal(got, want) {
		t.Fatalf("after deleting another x: %v, want %v", got, want)
	}
	h.Gone(named("x", "1"))
	if got, want := has(), []string{"y/2", "z/3"}; !slices.Equal(got, want) {
		t.Fatalf("after deleting x: %v, want %v", got, want)
	}
	h.Relisted(func(uid types.UID) bool { return uid == "3" })
	if got, want := has(), []string{"z/3"}; !slices.Equal(got, want) {
		t.Fatalf("after a list of z alone: %v, want %v", got, want)
	}
}

// TestNotInNodeLeases checks that the lease feed lists and watches every
// namespace but kube-node-lease.
func TestNotInNodeLeases(t *testing.T) {
	var seen []string
	lw := notInNodeLeases(&cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			seen = append(seen, "list "+o.FieldSelector)
			return &coordinationv1.LeaseList{}, nil
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			seen = append(seen, "watch "+o.FieldSelector)
			return watch.NewEmptyWatch(), nil
		},
	})
	withCtx := cache.ToListerWatcherWithContext(lw)
	if _, err := withCtx.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := withCtx.WatchWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"list metadata.namespace!=kube-node-lease", "watch metadata.namespace!=kube-node-lease"}
	if !slices.Equal(seen, want) {
		t.Errorf("selectors %q, want %q", seen, want)
	}
}
