package election

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
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
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var candidatesResource = coordinationv1beta1.SchemeGroupVersion.WithResource("leasecandidates")

// candidateAPI is an in-memory LeaseCandidate API with resourceVersions,
// UIDs and compare-and-swap updates, like the real server.
type candidateAPI struct {
	tracker k8stesting.ObjectTracker
	mu      sync.Mutex
	rv      int64
	uids    int
	// down fails every request.
	down bool
	// updates counts update requests.
	updates int
}

func newCandidateAPI() *candidateAPI {
	return &candidateAPI{tracker: k8stesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder()), rv: 1}
}

func (a *candidateAPI) client() *fake.Clientset {
	c := &fake.Clientset{}
	c.AddReactor("*", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.down {
			return true, nil, errors.New("connection refused")
		}
		switch action.GetVerb() {
		case "update":
			return a.updateReaction(action.(k8stesting.UpdateAction))
		case "create":
			lc := action.(k8stesting.CreateAction).GetObject().(*coordinationv1beta1.LeaseCandidate).DeepCopy()
			a.rv++
			a.uids++
			lc.ResourceVersion = strconv.FormatInt(a.rv, 10)
			lc.UID = types.UID("uid-" + strconv.Itoa(a.uids))
			if err := a.tracker.Create(candidatesResource, lc, lc.Namespace); err != nil {
				a.rv--
				return true, nil, err
			}
			return true, lc.DeepCopy(), nil
		case "delete":
			action := action.(k8stesting.DeleteAction)
			cur, err := a.tracker.Get(candidatesResource, action.GetNamespace(), action.GetName())
			if err != nil {
				return true, nil, err
			}
			if p := action.GetDeleteOptions().Preconditions; p != nil && p.UID != nil && *p.UID != cur.(*coordinationv1beta1.LeaseCandidate).UID {
				return true, nil, apierrors.NewConflict(candidatesResource.GroupResource(), action.GetName(), errors.New("UID precondition failed"))
			}
			a.rv++
			return true, nil, a.tracker.Delete(candidatesResource, action.GetNamespace(), action.GetName())
		}
		return false, nil, nil
	})
	c.AddReactor("*", "*", k8stesting.ObjectReaction(a.tracker))
	c.AddWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.down {
			return true, nil, errors.New("connection refused")
		}
		w, err := a.tracker.Watch(action.GetResource(), action.GetNamespace())
		return true, w, err
	})
	return c
}

func (a *candidateAPI) updateReaction(action k8stesting.UpdateAction) (bool, runtime.Object, error) {
	a.updates++
	lc := action.GetObject().(*coordinationv1beta1.LeaseCandidate).DeepCopy()
	cur, err := a.tracker.Get(candidatesResource, lc.Namespace, lc.Name)
	if err != nil {
		return true, nil, err
	}
	if lc.ResourceVersion != cur.(*coordinationv1beta1.LeaseCandidate).ResourceVersion {
		return true, nil, apierrors.NewConflict(candidatesResource.GroupResource(), lc.Name, errors.New("the object has been modified"))
	}
	a.rv++
	lc.ResourceVersion = strconv.FormatInt(a.rv, 10)
	if err := a.tracker.Update(candidatesResource, lc, lc.Namespace); err != nil {
		return true, nil, err
	}
	return true, lc.DeepCopy(), nil
}

func (a *candidateAPI) setDown(down bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.down = down
}

func (a *candidateAPI) updateCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.updates
}

// get returns the stored LeaseCandidate (nil when absent).
func (a *candidateAPI) get(t *testing.T, name string) *coordinationv1beta1.LeaseCandidate {
	t.Helper()
	obj, err := a.tracker.Get(candidatesResource, testNamespace, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*coordinationv1beta1.LeaseCandidate)
}

// ping sets spec.pingTime, as a coordinator does.
func (a *candidateAPI) ping(t *testing.T, c *fake.Clientset, name string, at time.Time) {
	t.Helper()
	lc := a.get(t, name)
	lc.Spec.PingTime = ptr.To(metav1.NewMicroTime(at))
	if _, err := c.CoordinationV1beta1().LeaseCandidates(testNamespace).Update(context.Background(), lc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

func candidateConfig(client *fake.Clientset, clk *clocktesting.FakeClock) CandidateConfig {
	return CandidateConfig{
		Client: client.CoordinationV1beta1(), Namespace: testNamespace, LeaseName: testLease,
		Identity: "a", BinaryVersion: "1.2.3", Clock: clk,
	}
}

// runCandidate runs c until the returned stop is called; stop returns Run's
// result.
func runCandidate(t *testing.T, c *Candidate) (stop func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error {
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			return err
		default:
			t.Fatal("Candidate.Run did not return")
			return nil
		}
	}
}

func TestCandidateConfigValidation(t *testing.T) {
	client := fake.NewClientset()
	base := CandidateConfig{Client: client.CoordinationV1beta1(), Namespace: "default", LeaseName: "job", Identity: "host_1", BinaryVersion: "1.2.3"}
	tests := []struct {
		name    string
		edit    func(*CandidateConfig)
		wantErr string
	}{
		{"valid", func(*CandidateConfig) {}, ""},
		{"emulation below binary", func(c *CandidateConfig) { c.EmulationVersion = "1.1.0" }, ""},
		{"no client", func(c *CandidateConfig) { c.Client = nil }, "client must be set"},
		{"no lease name", func(c *CandidateConfig) { c.LeaseName = "" }, "leaseName must be set"},
		{"bad identity", func(c *CandidateConfig) { c.Identity = "a/b" }, "not a valid LeaseCandidate name"},
		{"no binary version", func(c *CandidateConfig) { c.BinaryVersion = "" }, "binaryVersion must be set"},
		{"bad binary version", func(c *CandidateConfig) { c.BinaryVersion = "one" }, "binaryVersion"},
		{"emulation above binary", func(c *CandidateConfig) { c.EmulationVersion = "1.3.0" }, "must not exceed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.edit(&cfg)
			_, err := NewCandidate(cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCandidatePublishesRenewsAndWithdraws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newCandidateAPI(), clocktesting.NewFakeClock(t0)
		client := api.client()
		cfg := candidateConfig(client, clk)
		cfg.EmulationVersion = "1.2.0"
		c, err := NewCandidate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := runCandidate(t, c)
		synctest.Wait()
		lc := api.get(t, "a")
		if lc == nil {
			t.Fatal("LeaseCandidate not created")
		}
		want := coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: testLease, BinaryVersion: "1.2.3", EmulationVersion: "1.2.0",
			Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NewMicroTime(t0)),
		}
		if lc.Spec.LeaseName != want.LeaseName || lc.Spec.BinaryVersion != want.BinaryVersion || lc.Spec.EmulationVersion != want.EmulationVersion ||
			lc.Spec.Strategy != want.Strategy || !lc.Spec.RenewTime.Equal(want.RenewTime) || lc.Spec.PingTime != nil {
			t.Errorf("spec = %+v, want %+v", lc.Spec, want)
		}

		advance(clk, DefaultCandidateRenewInterval-time.Second, time.Minute)
		if n := api.updateCount(); n != 0 {
			t.Errorf("%d renewals before the renew interval, want 0", n)
		}
		advance(clk, time.Second, time.Second)
		if got := api.get(t, "a").Spec.RenewTime; !got.Time.Equal(t0.Add(DefaultCandidateRenewInterval)) {
			t.Errorf("renewTime = %v, want t0+%v", got, DefaultCandidateRenewInterval)
		}
		if err := stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
		if api.get(t, "a") != nil {
			t.Error("LeaseCandidate still exists after Run returned")
		}
	})
}

func TestCandidateAnswersPings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newCandidateAPI(), clocktesting.NewFakeClock(t0)
		client := api.client()
		c, err := NewCandidate(candidateConfig(client, clk))
		if err != nil {
			t.Fatal(err)
		}
		stop := runCandidate(t, c)
		advance(clk, 3*time.Second, time.Second)

		// A ping is answered at once, whatever the clocks say: this
		// coordinator's clock is an hour behind the candidate's.
		for i, ping := range []time.Time{t0.Add(-time.Hour), t0.Add(-time.Hour + time.Second)} {
			api.ping(t, client, "a", ping)
			synctest.Wait()
			lc := api.get(t, "a")
			if !lc.Spec.RenewTime.Time.Equal(clk.Now()) || !lc.Spec.PingTime.Time.Equal(ping) {
				t.Errorf("ping %d: renewTime %v pingTime %v; want renewTime %v (now), pingTime kept", i, lc.Spec.RenewTime, lc.Spec.PingTime, clk.Now())
			}
			clk.Step(time.Second)
		}
		if n := api.updateCount(); n != 4 {
			t.Errorf("%d updates, want 4 (two pings, two answers)", n)
		}
		stop()
	})
}

func TestCandidateAnswersPingFromBeforeStart(t *testing.T) {
	// A LeaseCandidate left by an earlier run, pinged after its last
	// renewal: the new run renews at once (it would anyway) and then
	// leaves the same ping alone.
	synctest.Test(t, func(t *testing.T) {
		api, clk := newCandidateAPI(), clocktesting.NewFakeClock(t0)
		client := api.client()
		old := &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "a"},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: testLease, BinaryVersion: "1.2.3", EmulationVersion: "1.2.3", Strategy: coordinationv1.OldestEmulationVersion,
				RenewTime: ptr.To(metav1.NewMicroTime(t0.Add(-time.Minute))), PingTime: ptr.To(metav1.NewMicroTime(t0.Add(-time.Second))),
			},
		}
		if _, err := client.CoordinationV1beta1().LeaseCandidates(testNamespace).Create(context.Background(), old, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c, err := NewCandidate(candidateConfig(client, clk))
		if err != nil {
			t.Fatal(err)
		}
		stop := runCandidate(t, c)
		advance(clk, time.Minute, time.Second)
		if n := api.updateCount(); n != 1 {
			t.Errorf("%d updates, want 1", n)
		}
		if lc := api.get(t, "a"); !lc.Spec.RenewTime.Time.Equal(t0) {
			t.Errorf("renewTime = %v, want t0", lc.Spec.RenewTime)
		}
		stop()
	})
}

func TestCandidateRecreatedAfterDeletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newCandidateAPI(), clocktesting.NewFakeClock(t0)
		client := api.client()
		c, err := NewCandidate(candidateConfig(client, clk))
		if err != nil {
			t.Fatal(err)
		}
		stop := runCandidate(t, c)
		advance(clk, time.Second, time.Second)
		first := api.get(t, "a").UID
		if err := client.CoordinationV1beta1().LeaseCandidates(testNamespace).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		lc := api.get(t, "a")
		if lc == nil || lc.UID == first || !lc.Spec.RenewTime.Time.Equal(clk.Now()) {
			t.Fatalf("after deletion: %+v, want a new LeaseCandidate renewed now", lc)
		}
		stop()
	})
}

func TestCandidateRetriesWhenServerDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newCandidateAPI(), clocktesting.NewFakeClock(t0)
		client := api.client()
		api.setDown(true)
		c, err := NewCandidate(candidateConfig(client, clk))
		if err != nil {
			t.Fatal(err)
		}
		stop := runCandidate(t, c)
		advance(clk, 5*time.Second, 500*time.Millisecond)
		if api.get(t, "a") != nil {
			t.Fatal("created while the server is down")
		}
		api.setDown(false)
		advance(clk, DefaultCandidateRetryPeriod, 500*time.Millisecond)
		if api.get(t, "a") == nil {
			t.Fatal("not created within RetryPeriod of the server coming back")
		}
		stop()
	})
}

func TestCandidateNameTakenByAnotherLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newCandidateAPI(), clocktesting.NewFakeClock(t0)
		client := api.client()
		other := &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "a"},
			Spec:       coordinationv1beta1.LeaseCandidateSpec{LeaseName: "other", BinaryVersion: "1.0.0", Strategy: coordinationv1.OldestEmulationVersion},
		}
		if _, err := client.CoordinationV1beta1().LeaseCandidates(testNamespace).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c, err := NewCandidate(candidateConfig(client, clk))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Run(t.Context())
		var wrong *wrongLeaseError
		if !errors.As(err, &wrong) {
			t.Errorf("Run = %v, want a wrong-lease error", err)
		}
		if lc := api.get(t, "a"); lc == nil || lc.Spec.LeaseName != "other" {
			t.Errorf("the other lease's candidate was changed: %+v", lc)
		}
	})
}

func TestDecideCoordinated(t *testing.T) {
	held := func(holder, preferred string) *coordinationv1.Lease {
		l := heldLease(holder, 3, t0)
		if preferred != "" {
			l.Spec.PreferredHolder = ptr.To(preferred)
		}
		return l
	}
	tests := []struct {
		name string
		obs  observation
		want action
	}{
		{"not read", observation{}, actWait},
		{"missing: the coordinator creates it", observation{known: true}, actWait},
		{"held by another", observation{known: true, lease: held("b", ""), at: t0}, actWait},
		{"released", observation{known: true, lease: held("", ""), at: t0}, actWait},
		{"released to self", observation{known: true, lease: held("", "a"), at: t0}, actWait},
		{"elected", observation{known: true, lease: held("a", ""), at: t0}, actConfirm},
		{"elected, preferred self", observation{known: true, lease: held("a", "a"), at: t0}, actConfirm},
		{"elected but handed on", observation{known: true, lease: held("a", "b"), at: t0}, actWait},
		{"elected long ago: the compare-and-swap decides", observation{known: true, lease: held("a", ""), at: t0.Add(-time.Hour)}, actConfirm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideCoordinated("a", tt.obs); got.act != tt.want {
				t.Errorf("got %v (%s), want %v", got.act, got.why, tt.want)
			}
		})
	}
}

func TestConfirmRecord(t *testing.T) {
	now := t0.Add(time.Minute)
	tests := []struct {
		name            string
		transitions     int32
		lastToken       int64
		wantTransitions int32
		wantAcquire     time.Time
	}{
		{"first term", 3, -1, 3, t0},
		{"new assignment", 5, 3, 5, t0},
		{"same record after a lost term", 5, 5, 6, now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := heldLease("a", tt.transitions, t0)
			cur.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
			got := confirmRecord(cur, "a", 15, now, tt.lastToken)
			if transitionsOf(got) != tt.wantTransitions || !got.Spec.AcquireTime.Time.Equal(tt.wantAcquire) ||
				!got.Spec.RenewTime.Time.Equal(now) || holderOf(got) != "a" || *got.Spec.Strategy != coordinationv1.OldestEmulationVersion {
				t.Errorf("got %+v, want transitions %d, acquireTime %v, renewTime now, strategy kept", got.Spec, tt.wantTransitions, tt.wantAcquire)
			}
		})
	}
}

// assign writes the Lease as a coordinator elects holder.
func assign(t *testing.T, api *fakeAPI, holder string) {
	t.Helper()
	l := api.get(t, testLease)
	if l == nil {
		l = heldLease(holder, 0, clockless)
		l.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
		if _, err := api.create(l); err != nil {
			t.Fatal(err)
		}
		return
	}
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.LeaseTransitions = ptr.To(transitionsOf(l) + 1)
	l.Spec.PreferredHolder = nil
	if _, err := api.update(l); err != nil {
		t.Fatal(err)
	}
}

// clockless is a time no test clock shows: the coordinator's clock.
var clockless = t0.Add(-24 * time.Hour)

func coordinated(c *Config) { c.Coordinated = true; c.ReleaseOnCancel = true }

func TestCoordinatedWaitsToBeElected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", coordinated).start()
		b := newContender(t, api, clk, "b", coordinated).start()
		advance(clk, time.Minute, time.Second)
		a.mustNotStart()
		b.mustNotStart()
		if api.get(t, testLease) != nil {
			t.Fatal("a coordinated contender created the Lease")
		}

		assign(t, api, "b")
		term := b.mustStart()
		a.mustNotStart()
		if term.FencingToken != 0 {
			t.Errorf("token %d, want 0 (as the coordinator wrote)", term.FencingToken)
		}
		l := api.get(t, testLease)
		if holderOf(l) != "b" || !l.Spec.RenewTime.Time.Equal(clk.Now()) || *l.Spec.LeaseDurationSeconds != 15 {
			t.Errorf("after confirmation: %+v, want renewed by b now with its duration", l.Spec)
		}

		// b keeps renewing; a, not elected, never takes the Lease, even
		// after it would have expired.
		advance(clk, time.Minute, 500*time.Millisecond)
		a.mustNotStart()
		b.mustNotEnd()

		// The coordinator prefers a: b hands over, and a waits for the
		// coordinator to name it.
		api.edit(t, testLease, func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = ptr.To("a") })
		b.mustEnd()
		if err := b.waitResult(); !errors.Is(err, ErrHandedOver) {
			t.Errorf("b: Run = %v, want ErrHandedOver", err)
		}
		if l := api.get(t, testLease); holderOf(l) != "" || preferredOf(l) != "a" {
			t.Errorf("after handover: holder %q preferred %q; want released to a", holderOf(l), preferredOf(l))
		}
		a.mustNotStart()
		assign(t, api, "a")
		if term := a.mustStart(); term.FencingToken != 1 {
			t.Errorf("a: token %d, want 1", term.FencingToken)
		}
		if err := a.stop(); err != nil {
			t.Errorf("a: Run = %v", err)
		}
		if l := api.get(t, testLease); holderOf(l) != "" {
			t.Errorf("after cancel: holder %q, want released", holderOf(l))
		}
	})
}

func TestCoordinatedLostTermGetsNewToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, clk := newFakeAPI(), clocktesting.NewFakeClock(t0)
		a := newContender(t, api, clk, "a", coordinated).start()
		assign(t, api, "a")
		first := a.mustStart()
		a.conn.down.Store(true)
		advance(clk, DefaultRenewDeadline, 500*time.Millisecond)
		a.mustEnd()
		if err := a.waitResult(); !errors.Is(err, ErrLeadershipLost) {
			t.Fatalf("Run = %v, want ErrLeadershipLost", err)
		}
		a.conn.down.Store(false)
		// Nobody else was elected: the record still names a, and a's next
		// term has a new token.
		a.start()
		advance(clk, 3*time.Second, 500*time.Millisecond)
		if term := a.mustStart(); term.FencingToken != first.FencingToken+1 {
			t.Errorf("token %d, want %d", term.FencingToken, first.FencingToken+1)
		}
		a.stop()
	})
}
