package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const (
	period = time.Second
	grace  = 10 * time.Second
)

// event is one Event the controller recorded.
type event struct {
	ref            corev1.ObjectReference
	typ, reason    string
	action, note   string
	relatedPresent bool
}

// recorder keeps the controller's Events.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) Eventf(regarding, related runtime.Object, typ, reason, action, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{
		ref: *regarding.(*corev1.ObjectReference), typ: typ, reason: reason, action: action,
		note: fmt.Sprintf(note, args...), relatedPresent: related != nil,
	})
}

// reasons lists the reasons of the Events about node, in order.
func (r *recorder) reasons(node string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.ref.Name == node {
			out = append(out, e.reason)
		}
	}
	return out
}

func (r *recorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// env is a controller running on a fake clientset and a fake clock.
type env struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	client *fake.Clientset
	rec    *recorder
	c      *Controller
	stop   func()
	// watches receives one value for each watch the fake clientset has
	// started and registered.
	watches chan struct{}
	// zones configures the controllers start makes.
	zones Zones
	// cutOff, when set, is the controllers' Config.CutOff.
	cutOff func() time.Time
	// startup, when set, is the controllers' Config.StartupGracePeriod.
	startup time.Duration
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// newEnv makes a fake clientset holding objs and a fake clock at t0, and
// starts a controller on them.
func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	e := newStoppedEnv(t, objs...)
	e.start()
	return e
}

// newStoppedEnv is newEnv without starting the controller, for tests that
// add reactors first.
func newStoppedEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	e := &env{t: t, clock: clocktesting.NewFakeClock(t0), client: fake.NewClientset(objs...), watches: make(chan struct{}, 64)}
	// The fake clientset delivers only the changes made after a watch is
	// registered, and cannot resume one: a change made between the
	// feed's list and its watch would never reach it. So start() waits
	// for the watches, which this reactor registers itself.
	e.client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := e.client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err == nil {
			select {
			case e.watches <- struct{}{}:
			default: // nobody counts these
			}
		}
		return true, w, err
	})
	return e
}

// start starts a new controller on e's clientset and clock and waits for its
// first pass.
func (e *env) start() {
	e.t.Helper()
	e.rec = &recorder{}
	c, err := New(Config{
		Client: e.client, MonitorPeriod: period, GracePeriod: grace, StartupGracePeriod: e.startup,
		Clock: e.clock, Logger: testLogger(e.t), Recorder: e.rec, Zones: e.zones, CutOff: e.cutOff,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.c = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	}
	e.t.Cleanup(e.stop)
	e.waitFor("the first pass", func(c *Controller) bool { return c.passes >= 1 })
	for range 2 { // nodes and leases
		select {
		case <-e.watches:
		case <-time.After(time.Minute):
			e.t.Fatal("gave up waiting for the feeds' watches")
		}
	}
}

// waitFor blocks until cond, evaluated under the controller's mutex, holds.
// It wakes on each change of the controller's state, never on a timer; the
// timeout only ends a test that would otherwise hang.
func (e *env) waitFor(what string, cond func(c *Controller) bool) {
	e.t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		e.c.mu.Lock()
		ok := cond(e.c)
		changed := e.c.changedLocked()
		e.c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			e.t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// step advances the fake clock by d, which must reach the next tick, as a
// controller that keeps running sees it: in steps of a period, each
// followed by its pass, the first step longer (up to two periods) so that
// the last pass is at the end of d. One jump of more than half the grace
// period would be a controller that did not run meanwhile (freeze).
func (e *env) step(d time.Duration) {
	e.t.Helper()
	first, rest := d, 0
	if d >= 2*period {
		rest = int(d/period) - 1
		first = d - time.Duration(rest)*period
	}
	e.freeze(first)
	for range rest {
		e.freeze(period)
	}
}

// freeze advances the fake clock by d in one jump, which must reach the
// next tick, and waits for the one pass it triggers: for d longer than a
// period, a controller that did not run meanwhile.
func (e *env) freeze(d time.Duration) {
	e.t.Helper()
	e.c.mu.Lock()
	passes := e.c.passes
	e.c.mu.Unlock()
	e.clock.Step(d)
	e.waitFor("a pass", func(c *Controller) bool { return c.passes > passes })
}

// graceFrom renews alive at from (now) and half a grace period later, and
// checks that quiet, which does not renew, is Ready until a grace period
// from then and Unknown at the next pass, while alive stays Ready.
func (e *env) graceFrom(from time.Time, alive, quiet string) {
	e.t.Helper()
	e.renew(alive, from)
	e.step(grace / 2)
	e.renew(alive, e.clock.Now())
	e.step(grace / 2)
	e.wantReady(quiet, corev1.ConditionTrue, agentReason)
	e.step(period)
	e.wantReady(quiet, corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantReady(alive, corev1.ConditionTrue, agentReason)
}

// renew updates the lease of node to renewTime, as an agent does, and waits
// until the controller has seen it.
func (e *env) renew(node string, renewTime time.Time) {
	e.t.Helper()
	leases := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: renewTime}
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("the renewal to be seen", func(c *Controller) bool {
		h := c.health[node]
		return h != nil && h.lease.known() && h.lease.renew.Equal(renewTime)
	})
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// wantReady checks the node's Ready status and reason and that it carries
// the unreachable NoSchedule taint exactly when Ready is Unknown.
func (e *env) wantReady(name string, status corev1.ConditionStatus, reason string) {
	e.t.Helper()
	n := e.node(name)
	c := readyCondition(n)
	if c == nil {
		e.t.Fatalf("node %s has no Ready condition", name)
	}
	if c.Status != status || c.Reason != reason {
		e.t.Errorf("node %s Ready=%s reason %s, want Ready=%s reason %s", name, c.Status, c.Reason, status, reason)
	}
	var unreachable []corev1.TaintEffect
	for _, tn := range n.Spec.Taints {
		if tn.Key == corev1.TaintNodeUnreachable {
			unreachable = append(unreachable, tn.Effect)
		}
	}
	// NoExecute comes at its zone's pace, or not at all while every node
	// is down (TestZones* check it); NoSchedule comes at once.
	var want []corev1.TaintEffect
	if status == corev1.ConditionUnknown {
		want = []corev1.TaintEffect{corev1.TaintEffectNoSchedule}
		unreachable = slices.DeleteFunc(unreachable, func(e corev1.TaintEffect) bool { return e == corev1.TaintEffectNoExecute })
	}
	if !slices.Equal(unreachable, want) {
		e.t.Errorf("node %s unreachable taints %v, want %v", name, unreachable, want)
	}
}

func (e *env) wantEvents(node string, want ...string) {
	e.t.Helper()
	if got := e.rec.reasons(node); !slices.Equal(got, want) {
		e.t.Errorf("events about %s: %v, want %v", node, got, want)
	}
}

const agentReason = "LeaseholdAgentReady"

// TestUnsharedNodesNotKept: a node feed that decodes copies for the
// controller alone (the client's here; leasehold's own for a resource served
// without a watch cache) leaves no node in the table, and a pass reads a
// node only once it has something to write to it.
func TestUnsharedNodesNotKept(t *testing.T) {
	e := newStoppedEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	var gets atomic.Int32
	e.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil
	})
	e.start()
	for i := 1; i <= int(2*grace/period); i++ {
		e.renew("web-1", t0.Add(time.Duration(i)*period))
		e.step(period)
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("%d reads of a Ready node with nothing to write", n)
	}
	e.wantReady("web-1", corev1.ConditionTrue, agentReason) // a read of its own
	before := gets.Load()
	e.c.mu.Lock()
	st := e.c.health["web-1"].node
	e.c.mu.Unlock()
	if st.obj != nil || st.sum == nil || st.sum.uid != "uid-web-1" || st.sum.ready != corev1.ConditionTrue || !st.sum.taintsMatch || st.sum.unknown {
		t.Errorf("table holds %+v (summary %+v), want a summary of a Ready node without the node", st, st.sum)
	}

	// Silent: read, then marked Unknown and tainted.
	e.step(grace + period)
	if gets.Load() == before {
		t.Error("marked Unknown without reading the node")
	}
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
}

func readyNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: agentReason,
				LastHeartbeatTime: metav1.NewTime(t0.Add(-time.Minute)), LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "Fine"},
			{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated"},
		}},
	}
}

func nodeLease(name string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease, UID: types.UID("lease-" + name)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime:            &metav1.MicroTime{Time: renew},
		},
	}
}

func TestNew(t *testing.T) {
	client := fake.NewClientset()
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"defaults", Config{Client: client}, false},
		{"no client", Config{}, true},
		{"grace equals period", Config{Client: client, MonitorPeriod: time.Second, GracePeriod: time.Second}, true},
		{"grace below period", Config{Client: client, MonitorPeriod: 10 * time.Second, GracePeriod: time.Second}, true},
		{"grace below default period", Config{Client: client, GracePeriod: time.Second}, true},
		{"negative period", Config{Client: client, MonitorPeriod: -time.Second, GracePeriod: time.Second}, true},
		{"short", Config{Client: client, MonitorPeriod: 200 * time.Millisecond, GracePeriod: 2 * time.Second}, false},
		{"negative workers", Config{Client: client, Workers: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New: err %v, want error %v", err, tt.wantErr)
			}
			if err == nil && tt.cfg.MonitorPeriod == 0 && (c.period != DefaultMonitorPeriod || c.grace != DefaultGracePeriod || c.workers != DefaultWorkers) {
				t.Errorf("defaults %v/%v/%d workers, want %v/%v/%d", c.period, c.grace, c.workers, DefaultMonitorPeriod, DefaultGracePeriod, DefaultWorkers)
			}
		})
	}
}

// TestGraceBoundary lets a node's lease go silent for just under, exactly,
// and just over the grace period, passes running every period meanwhile.
func TestGraceBoundary(t *testing.T) {
	tests := []struct {
		name    string
		silent  time.Duration
		expired bool
		// marked is when the pass that marks the node runs: the first
		// after the grace period.
		marked time.Duration
	}{
		{"just under", grace - time.Nanosecond, false, 0},
		{"exactly", grace, false, 0},
		{"just over", grace + time.Nanosecond, true, grace + time.Nanosecond},
		{"long over", 3 * grace, true, grace + period},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
			e.step(tt.silent)
			if !tt.expired {
				e.wantReady("web-1", corev1.ConditionTrue, agentReason)
				e.wantEvents("web-1", EventRegisteredNode)
				return
			}
			e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
			e.wantEvents("web-1", EventRegisteredNode, EventNodeNotReady)
			n := e.node("web-1")
			marked := t0.Add(tt.marked)
			for _, c := range n.Status.Conditions {
				switch c.Type {
				case corev1.NodeReady, corev1.NodeMemoryPressure:
					if c.Status != corev1.ConditionUnknown || !c.LastTransitionTime.Time.Equal(marked) {
						t.Errorf("%s = %s since %v, want Unknown since %v", c.Type, c.Status, c.LastTransitionTime, marked)
					}
				case corev1.NodeNetworkUnavailable:
					if c.Status != corev1.ConditionFalse {
						t.Errorf("NetworkUnavailable = %s, want it left False", c.Status)
					}
				}
			}
			for _, tn := range n.Spec.Taints {
				if tn.Effect == corev1.TaintEffectNoExecute && (tn.TimeAdded == nil || !tn.TimeAdded.Time.Equal(marked)) {
					t.Errorf("NoExecute taint added at %v, want %v", tn.TimeAdded, marked)
				}
			}
			if got := testutil.ToFloat64(e.c.metrics.nodes.WithLabelValues(stateUnknown)); got != 1 {
				t.Errorf("unknown nodes gauge %v, want 1", got)
			}
			if got := testutil.ToFloat64(e.c.metrics.transitions.WithLabelValues(stateUnknown)); got != 1 {
				t.Errorf("transitions to unknown %v, want 1", got)
			}
			// Further passes change nothing.
			rv := n.ResourceVersion
			e.step(period)
			if got := e.node("web-1").ResourceVersion; got != rv {
				t.Errorf("node rewritten by a later pass: resourceVersion %s, want %s", got, rv)
			}
			e.wantEvents("web-1", EventRegisteredNode, EventNodeNotReady)
		})
	}
}

// TestRenewalsKeepNodeReady renews the lease every period for several grace
// periods.
func TestRenewalsKeepNodeReady(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	for i := 1; i <= int(3*grace/period); i++ {
		e.renew("web-1", t0.Add(time.Duration(i)*period))
		e.step(period)
	}
	e.wantReady("web-1", corev1.ConditionTrue, agentReason)
	e.wantEvents("web-1", EventRegisteredNode)
	if got := testutil.ToFloat64(e.c.metrics.nodes.WithLabelValues(stateReady)); got != 1 {
		t.Errorf("ready nodes gauge %v, want 1", got)
	}
}

// TestPassVisitsWhatNeedsIt: the first pass visits every node; after it, a
// pass visits only a node the feed changed and a node whose lease went
// silent, never the Ready nodes that keep renewing.
func TestPassVisitsWhatNeedsIt(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0), readyNode("web-2"), nodeLease("web-2", t0),
		readyNode("web-3"), nodeLease("web-3", t0))
	wantVisits := func(when string, want int) {
		t.Helper()
		e.c.mu.Lock()
		got := e.c.visits
		e.c.mu.Unlock()
		if got != want {
			t.Fatalf("%s: the pass visited %d nodes, want %d", when, got, want)
		}
	}
	wantVisits("first pass", 3)
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		e.renew(name, t0.Add(period))
	}
	e.step(period)
	wantVisits("all renewing", 0)

	n := e.node("web-2")
	n.Labels = map[string]string{"role": "db"}
	e.c.mu.Lock()
	seen := e.c.nodeEvents
	e.c.mu.Unlock()
	if _, err := e.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the feed to see web-2 changed", func(c *Controller) bool { return c.nodeEvents > seen })
	e.renew("web-1", t0.Add(2*period))
	e.renew("web-2", t0.Add(2*period))
	e.step(period)
	wantVisits("web-2 changed", 1)

	// web-3's lease was last seen changing at t0: it expires in the pass at
	// t0+grace+period, and web-1 and web-2 keep renewing.
	for i := 3; i <= int(grace/period)+1; i++ {
		e.renew("web-1", t0.Add(time.Duration(i)*period))
		e.renew("web-2", t0.Add(time.Duration(i)*period))
		e.step(period)
		if i <= int(grace/period) {
			wantVisits(fmt.Sprintf("pass at t0+%ds", i), 0)
		}
	}
	wantVisits("web-3 expired", 1)
	e.wantReady("web-3", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantReady("web-1", corev1.ConditionTrue, agentReason)
}

// TestResume lets a node expire, then renews its lease again.
func TestResume(t *testing.T) {
	node := readyNode("web-1")
	node.Spec.Taints = []corev1.Taint{{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	e := newEnv(t, node, nodeLease("web-1", t0))
	e.step(grace + period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)

	e.renew("web-1", t0.Add(time.Hour))
	e.step(period)
	e.wantReady("web-1", corev1.ConditionTrue, ReasonNodeLeaseRenewed)
	e.wantEvents("web-1", EventRegisteredNode, EventNodeNotReady, EventNodeReady)
	n := e.node("web-1")
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "example.com/dedicated" {
		t.Errorf("taints %v, want only the user's", n.Spec.Taints)
	}
	if c := readyCondition(n); !c.LastTransitionTime.Time.Equal(e.clock.Now()) {
		t.Errorf("Ready lastTransitionTime %v, want %v", c.LastTransitionTime, e.clock.Now())
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeMemoryPressure && c.Status != corev1.ConditionUnknown {
			t.Errorf("MemoryPressure = %s, want it left Unknown for its owner to report", c.Status)
		}
	}

	// It expires again when the renewals stop again: a grace period from
	// the pass that found it Ready, since leaving the state where no node
	// was Ready gives every node a fresh one.
	e.step(grace)
	e.wantReady("web-1", corev1.ConditionTrue, ReasonNodeLeaseRenewed)
	e.step(period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantEvents("web-1", EventRegisteredNode, EventNodeNotReady, EventNodeReady, EventNodeNotReady)
}

// TestLeaseRecreated counts a deleted and recreated lease as a renewal.
func TestLeaseRecreated(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	e.step(grace + period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)

	leases := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if err := leases.Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the deletion to be seen", func(c *Controller) bool { return !c.health["web-1"].lease.known() })
	// The same renewTime as before: only the new lease makes it a change.
	l := nodeLease("web-1", t0)
	l.UID = "lease-web-1-again"
	if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the new lease to be seen", func(c *Controller) bool { return c.health["web-1"].lease.known() })
	e.step(period)
	e.wantReady("web-1", corev1.ConditionTrue, ReasonNodeLeaseRenewed)
}

// TestLeaseGoneWhileNotWatching: a relist of the leases that no longer
// holds one forgets it, as its deletion would have; the node's grace period
// runs on from its last renewal seen, and a lease that comes back is a
// renewal.
func TestLeaseGoneWhileNotWatching(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0), readyNode("web-2"), nodeLease("web-2", t0), nodeLease("stray", t0))
	e.c.forgetUnlistedLeases(func(uid types.UID) bool { return uid == "lease-web-2" })
	e.c.mu.Lock()
	web1, web2 := *e.c.health["web-1"], *e.c.health["web-2"]
	_, stray := e.c.health["stray"]
	e.c.mu.Unlock()
	if web1.lease.known() || web1.uid == "" {
		t.Errorf("web-1 is %+v, want its node kept and its lease forgotten", web1)
	}
	if !web2.lease.known() {
		t.Errorf("web-2 is %+v, want its lease kept", web2)
	}
	if stray {
		t.Error("the lease of no node is still in the table")
	}
	e.step(grace + period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.renew("web-1", t0)
	e.step(period)
	e.wantReady("web-1", corev1.ConditionTrue, ReasonNodeLeaseRenewed)
}

// TestNodeGoneWhileNotWatching: a relist of the nodes that no longer holds
// one makes the next pass forget it, as its deletion would have.
func TestNodeGoneWhileNotWatching(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0), readyNode("web-2"), nodeLease("web-2", t0))
	e.c.nodeHandler(false).Relisted(func(uid types.UID) bool { return uid == "uid-web-2" })
	e.renew("web-2", t0.Add(period))
	e.step(period)
	e.c.mu.Lock()
	_, web1 := e.c.health["web-1"]
	_, web2 := e.c.health["web-2"]
	e.c.mu.Unlock()
	if web1 || !web2 {
		t.Fatalf("web-1 known %v, web-2 known %v; want only web-2", web1, web2)
	}
	e.wantEvents("web-1", EventRegisteredNode, EventRemovingNode)
	e.wantEvents("web-2", EventRegisteredNode)
}

// TestLeaseGoneBeforeNodeRegistered: a node seen but not yet registered by
// a pass stays known when its lease goes, and the pass registers it.
func TestLeaseGoneBeforeNodeRegistered(t *testing.T) {
	rec := &recorder{}
	c, err := New(Config{Client: fake.NewClientset(), Clock: clocktesting.NewFakeClock(t0), GracePeriod: grace, Recorder: rec, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	c.recorder = c.events // as Run sets it
	c.observeLease(nodeLease("web-1", t0), true)
	seeAll(c, []*corev1.Node{readyNode("web-1")}, true)
	c.forgetLease("web-1")
	c.monitor(context.Background())
	if got, want := rec.reasons("web-1"), []string{EventRegisteredNode}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if h := c.health["web-1"]; h == nil || h.uid != "uid-web-1" || h.lease.known() {
		t.Errorf("web-1 is %+v, want registered without a lease", h)
	}
}

// TestNodeDeleted removes a node: RemovingNode, and its state is dropped.
func TestNodeDeleted(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0), readyNode("web-2"), nodeLease("web-2", t0))
	if err := e.client.CoreV1().Nodes().Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Waits until a pass no longer finds the node (the feed may lag a
	// pass behind the deletion); web-2 keeps renewing meanwhile, so however
	// many passes that takes it stays Ready.
	for i := 1; ; i++ {
		e.renew("web-2", t0.Add(time.Duration(i)*period))
		e.step(period)
		e.c.mu.Lock()
		_, known := e.c.health["web-1"]
		e.c.mu.Unlock()
		if !known {
			break
		}
	}
	e.wantEvents("web-1", EventRegisteredNode, EventRemovingNode)
	e.wantEvents("web-2", EventRegisteredNode)
	for _, ev := range e.rec.all() {
		if ev.reason == EventRemovingNode && ev.ref != (corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "web-1", UID: "uid-web-1"}) {
			t.Errorf("RemovingNode about %+v", ev.ref)
		}
	}
	if got := testutil.ToFloat64(e.c.metrics.nodes.WithLabelValues(stateReady)); got != 1 {
		t.Errorf("ready nodes gauge %v, want 1", got)
	}
}

// TestNodeReplaced deletes a node and creates another of the same name
// between two passes: it is registered anew with a fresh grace period.
func TestNodeReplaced(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	e.step(period)
	nodes := e.client.CoreV1().Nodes()
	e.c.mu.Lock()
	seen := e.c.nodeEvents
	e.c.mu.Unlock()
	if err := nodes.Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n := readyNode("web-1")
	n.UID = "uid-web-1-again"
	if _, err := nodes.Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Passes read what the feed saw. Stepping the clock before it shows the new
	// node would let the old one expire, and the fake clientset, which has
	// no resourceVersions, would let the controller's write of the old node
	// replace the new one.
	e.waitFor("the feed to see the node replaced", func(c *Controller) bool { return c.nodeEvents >= seen+2 })
	e.step(period)
	e.c.mu.Lock()
	if h := e.c.health["web-1"]; h == nil || h.uid != n.UID {
		t.Errorf("after a pass the controller knows web-1 as %+v, want uid %s", h, n.UID)
	}
	e.c.mu.Unlock()
	// The grace period runs from the new node's registration.
	e.step(grace)
	e.wantReady("web-1", corev1.ConditionTrue, agentReason)
	reasons := e.rec.reasons("web-1")
	if len(reasons) != 3 || reasons[1] != EventRemovingNode || reasons[2] != EventRegisteredNode {
		t.Errorf("events %v, want RegisteredNode, RemovingNode, RegisteredNode", reasons)
	}
	e.step(period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
}

// TestRemoteRenewTimeNotTrusted feeds renewTimes from far in the future and
// the past: only their changes count, never their values.
func TestRemoteRenewTimeNotTrusted(t *testing.T) {
	future := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	past := time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		initial time.Time
		renews  []time.Time // one per period, then silence
	}{
		{"frozen in the future", future, nil},
		{"frozen in the past", past, nil},
		{"renewed in the past", past, []time.Time{past.Add(time.Second), past.Add(2 * time.Second), past.Add(3 * time.Second)}},
		{"renewed in the future", future, []time.Time{future.Add(time.Hour), future.Add(2 * time.Hour)}},
		{"clock jumping back", t0, []time.Time{t0.Add(-time.Hour), t0.Add(-2 * time.Hour), t0.Add(-3 * time.Hour)}},
		{"clock jumping around", t0, []time.Time{future, past, t0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, readyNode("web-1"), nodeLease("web-1", tt.initial))
			// Renewals, one every period, keep the node alive well beyond
			// one grace period...
			for i := 0; len(tt.renews) > 0 && i < int(2*grace/period); i++ {
				e.renew("web-1", tt.renews[i%len(tt.renews)].Add(time.Duration(i/len(tt.renews))*time.Microsecond))
				e.step(period)
				e.wantReady("web-1", corev1.ConditionTrue, agentReason)
				if t.Failed() {
					return
				}
			}
			// ...and once they stop, the node expires one grace period
			// after the last one was seen, by the controller's clock,
			// whatever the value says.
			silent := time.Duration(0)
			if len(tt.renews) > 0 {
				silent = period
			}
			e.step(grace - silent)
			e.wantReady("web-1", corev1.ConditionTrue, agentReason)
			e.step(period)
			e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
		})
	}
}

// TestFreshGraceAfterRestart stops the controller and starts a new one on the
// same objects: nodes whose leases are long silent, and one already marked
// Unknown, get a full grace period from the new controller's start.
func TestFreshGraceAfterRestart(t *testing.T) {
	stale := t0.Add(-time.Hour)
	e := newEnv(t, readyNode("dead"), nodeLease("dead", stale), readyNode("alive"), nodeLease("alive", stale), readyNode("quiet"), nodeLease("quiet", stale))
	e.step(grace / 2)
	e.renew("alive", t0.Add(grace/2))
	e.renew("quiet", t0.Add(grace/2))
	e.step(grace/2 + period)
	e.wantReady("dead", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantReady("alive", corev1.ConditionTrue, agentReason)
	e.wantReady("quiet", corev1.ConditionTrue, agentReason)
	e.stop()

	// The server is down for a long time; nobody renews.
	e.clock.Step(time.Hour)
	e.start()
	e.wantEvents("dead", EventRegisteredNode)
	e.wantEvents("alive", EventRegisteredNode)

	// A full grace period from the restart: nothing changes, the Unknown
	// node is not made Ready (no renewal was seen).
	for i := 0; i < int(grace/period); i++ {
		if i == int(grace/period)/2 {
			e.renew("alive", t0.Add(2*time.Hour))
		}
		e.step(period)
	}
	e.wantReady("dead", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantReady("alive", corev1.ConditionTrue, agentReason)
	e.wantReady("quiet", corev1.ConditionTrue, agentReason)
	e.step(period)
	e.wantReady("quiet", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantReady("alive", corev1.ConditionTrue, agentReason)
	e.wantEvents("quiet", EventRegisteredNode, EventNodeNotReady)
	e.wantEvents("dead", EventRegisteredNode)

	// A renewal of the dead node's lease brings it back.
	e.renew("dead", t0.Add(3*time.Hour))
	e.step(period)
	e.wantReady("dead", corev1.ConditionTrue, ReasonNodeLeaseRenewed)
	e.wantEvents("dead", EventRegisteredNode, EventNodeReady)
}

// TestFreshGraceAfterAbsence stops the controller's process for longer
// than the grace period while it runs (SIGSTOP, a stalled machine): the
// first pass after it must not blame the nodes for the renewals it could
// not see, and gives every node a fresh grace period, as a restart does.
// An absence of less than half the grace period changes nothing.
func TestFreshGraceAfterAbsence(t *testing.T) {
	e := newEnv(t, readyNode("alive"), nodeLease("alive", t0), readyNode("quiet"), nodeLease("quiet", t0), readyNode("dead"), nodeLease("dead", t0.Add(-time.Hour)))
	e.step(period)
	e.renew("alive", t0.Add(period))
	e.renew("quiet", t0.Add(period))
	e.step(grace)
	e.wantReady("dead", corev1.ConditionUnknown, ReasonNodeStatusUnknown)

	// Stopped for three grace periods; the renewals made meanwhile reach
	// the feeds only after the pass.
	e.freeze(3 * grace)
	thawed := e.clock.Now()
	e.wantReady("alive", corev1.ConditionTrue, agentReason)
	e.wantReady("quiet", corev1.ConditionTrue, agentReason)
	e.wantEvents("alive", EventRegisteredNode)
	e.wantEvents("quiet", EventRegisteredNode)
	e.waitFor("the absence to be counted", func(c *Controller) bool { return c.absences == 1 })

	// A grace period from the thaw: the node that renewed is Ready, the
	// one that did not is Unknown, and the dead one stays Unknown
	// without a renewal.
	e.graceFrom(thawed, "alive", "quiet")
	e.wantReady("dead", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantEvents("quiet", EventRegisteredNode, EventNodeNotReady)

	// A shorter absence is not noticed: the silence it holds counts.
	e.renew("alive", e.clock.Now())
	e.step(grace / 2)
	e.freeze(grace/2 + period)
	e.wantReady("alive", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	if got := e.c.absences; got != 1 {
		t.Errorf("%d absences counted, want 1", got)
	}
}

// TestNoVerdictWhileCutOffFromEtcd: while the server does not follow
// etcd's leases (Config.CutOff), a pass judges no node, however long the
// silence; when it follows again after more than half a grace period,
// every node gets a fresh grace period. A shorter cut is not noticed: the
// silence it holds counts.
func TestNoVerdictWhileCutOffFromEtcd(t *testing.T) {
	var cut atomic.Pointer[time.Time]
	cut.Store(&time.Time{})
	e := newStoppedEnv(t, readyNode("alive"), nodeLease("alive", t0), readyNode("quiet"), nodeLease("quiet", t0))
	e.cutOff = func() time.Time { return *cut.Load() }
	e.start()
	e.step(period)
	e.renew("alive", e.clock.Now())
	e.renew("quiet", e.clock.Now())

	// Cut off for three grace periods: no renewal is seen, no node marked.
	since := e.clock.Now()
	cut.Store(&since)
	e.step(3 * grace)
	e.wantReady("alive", corev1.ConditionTrue, agentReason)
	e.wantReady("quiet", corev1.ConditionTrue, agentReason)
	cut.Store(&time.Time{})
	e.step(period)
	e.waitFor("the fresh grace period", func(c *Controller) bool { return c.cutOffs == 1 })

	// A grace period from then: the node that renewed is Ready, the one
	// that did not is Unknown.
	e.graceFrom(e.clock.Now(), "alive", "quiet")
	e.wantEvents("alive", EventRegisteredNode)
	e.wantEvents("quiet", EventRegisteredNode, EventNodeNotReady)

	// A cut of less than half a grace period: no fresh grace period, and
	// a node silent for longer than the grace period across it is marked
	// at the first pass after it.
	e.renew("alive", e.clock.Now())
	e.step(grace / 2)
	since = e.clock.Now()
	cut.Store(&since)
	e.step(grace/2 - 2*period)
	e.wantReady("alive", corev1.ConditionTrue, agentReason)
	cut.Store(&time.Time{})
	e.step(2 * period)
	e.wantReady("alive", corev1.ConditionTrue, agentReason) // silent for exactly the grace period
	e.step(period)
	e.wantReady("alive", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	if got := e.c.cutOffs; got != 1 {
		t.Errorf("%d fresh grace periods after a cut, want 1", got)
	}
}

// TestStartupGracePeriod: a node that never posted a Ready condition gets
// the startup grace period, as kube-controller-manager gives it, and one
// that did the ordinary one.
func TestStartupGracePeriod(t *testing.T) {
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", UID: "uid-bare"}}
	e := newStoppedEnv(t, readyNode("web-1"), bare)
	e.startup = 3 * grace
	e.start()
	e.step(grace + period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	if n := e.node("bare"); readyStatus(n) != "" {
		t.Fatalf("bare node marked %s within its startup grace period", readyStatus(n))
	}
	e.step(2 * grace)
	e.wantReady("bare", corev1.ConditionUnknown, ReasonNodeStatusNeverUpdated)
}

// TestNodeWithoutLease marks a node that never had a lease Unknown after the
// grace period, and one without any Ready condition too.
func TestNodeWithoutLease(t *testing.T) {
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", UID: "uid-bare"}}
	e := newEnv(t, readyNode("web-1"), bare)
	e.step(grace + period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantReady("bare", corev1.ConditionUnknown, ReasonNodeStatusNeverUpdated)
	e.wantEvents("bare", EventRegisteredNode)

	// A lease appearing for it (an agent starting) counts as a renewal.
	if _, err := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(context.Background(), nodeLease("bare", t0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the new lease", func(c *Controller) bool { return c.health["bare"].lease.known() })
	e.step(period)
	e.wantReady("bare", corev1.ConditionTrue, ReasonNodeLeaseRenewed)
}

// TestConflictRetried makes the first status update and the first spec
// update conflict with a change made meanwhile: each is retried after a
// fresh GET and the concurrent change is kept.
func TestConflictRetried(t *testing.T) {
	e := newStoppedEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	nodesGVR := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	var mu sync.Mutex
	conflicts := map[string]bool{} // subresource → conflicted once
	var actions []string
	e.client.PrependReactor("*", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			return false, nil, nil
		}
		actions = append(actions, a.GetVerb()+"/"+a.GetSubresource())
		if a.GetVerb() != "update" || conflicts[a.GetSubresource()] {
			return false, nil, nil
		}
		conflicts[a.GetSubresource()] = true
		// Someone else changes the node first.
		obj, err := e.client.Tracker().Get(nodesGVR, "", "web-1")
		if err != nil {
			return true, nil, err
		}
		n := obj.(*corev1.Node).DeepCopy()
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["example.com/changed-during-update"+a.GetSubresource()] = "yes"
		if err := e.client.Tracker().Update(nodesGVR, n, ""); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(nodesGVR.GroupResource(), "web-1", errors.New("the object has been modified"))
	})
	e.start()
	e.step(grace + period)
	mu.Lock()
	got := slices.Clone(actions)
	mu.Unlock()
	// The feed through the client decodes copies, which the controller
	// does not keep: it reads the node before its first write.
	want := []string{"get/", "update/status", "get/", "update/status", "update/", "get/", "update/"}
	if !slices.Equal(got, want) {
		t.Errorf("node actions %v, want %v", got, want)
	}
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	n := e.node("web-1")
	for _, l := range []string{"example.com/changed-during-updatestatus", "example.com/changed-during-update"} {
		if n.Labels[l] != "yes" {
			t.Errorf("label %s lost, labels %v", l, n.Labels)
		}
	}
	if got := testutil.ToFloat64(e.c.metrics.writeErrors); got != 0 {
		t.Errorf("write errors %v, want 0", got)
	}
}

// TestConflictGivesUp makes every status update conflict: the controller
// gives up after a few attempts and tries again at the next pass.
func TestConflictGivesUp(t *testing.T) {
	e := newStoppedEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	var mu sync.Mutex
	fail := true
	updates := 0
	e.client.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		updates++
		if fail {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "web-1", errors.New("modified"))
		}
		return false, nil, nil
	})
	e.start()
	e.step(grace + period)
	mu.Lock()
	if updates != maxWriteAttempts {
		t.Errorf("%d update attempts, want %d", updates, maxWriteAttempts)
	}
	fail = false
	mu.Unlock()
	if got := testutil.ToFloat64(e.c.metrics.writeErrors); got != 1 {
		t.Errorf("write errors %v, want 1", got)
	}
	e.wantEvents("web-1", EventRegisteredNode)
	e.step(period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantEvents("web-1", EventRegisteredNode, EventNodeNotReady)
}

// TestEvents checks what the Events say and about what.
func TestEvents(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	e.step(grace + period)
	e.renew("web-1", t0.Add(time.Hour))
	e.step(period)
	if err := e.client.CoreV1().Nodes().Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for len(e.rec.reasons("web-1")) < 4 {
		e.step(period)
	}
	want := []struct{ reason, action, note string }{
		// kube-controller-manager's words.
		{EventRegisteredNode, "Register", "Node web-1 event: Registered Node web-1 in Controller"},
		{EventNodeNotReady, "StatusChange", "Node web-1 status is now: NodeNotReady"},
		{EventNodeReady, "StatusChange", "Node web-1 status is now: NodeReady"},
		{EventRemovingNode, "Remove", "Node web-1 event: Removing Node web-1 from Controller"},
	}
	got := e.rec.all()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "web-1", UID: "uid-web-1"} // by uid, as Kubernetes' controller
	for i, w := range want {
		g := got[i]
		if g.reason != w.reason || g.action != w.action || g.note != w.note || g.typ != corev1.EventTypeNormal {
			t.Errorf("event %d: %s %s %s %q, want Normal %s %s %q", i, g.typ, g.reason, g.action, g.note, w.reason, w.action, w.note)
		}
		if g.ref != ref || g.relatedPresent {
			t.Errorf("event %d about %+v (related %v), want %+v", i, g.ref, g.relatedPresent, ref)
		}
	}
}

// value reads a gauge's or counter's value.

// TestCordonEvents: a node cordoned gets the unschedulable taint and the
// kubelet's NodeNotSchedulable event; passes that change nothing more
// record nothing more. (The fake clientset keeps no resourceVersions, so
// the controller cannot tell an uncordon from its own write here: the
// e2e test TestCordonTaint uncordons on a real server.)
func TestCordonEvents(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	n := e.node("web-1")
	n.Spec.Unschedulable = true
	if _, err := e.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Passes, renewing the lease as an agent would, until the feed has
	// brought the cordon and the controller acted on it, and a few more.
	at, extra := t0, 3
	for i := 0; i < 20 && extra > 0; i++ {
		if len(e.rec.reasons("web-1")) >= 2 {
			extra--
		}
		at = at.Add(period)
		e.renew("web-1", at)
		e.step(period)
	}
	e.wantEvents("web-1", EventRegisteredNode, EventNodeNotSchedulable)
	if !hasUnschedulableTaint(e.node("web-1")) {
		t.Fatalf("a cordoned node without the unschedulable taint: %+v", e.node("web-1").Spec.Taints)
	}
	got := e.rec.all()
	if n := got[len(got)-1]; n.note != "Node web-1 status is now: NodeNotSchedulable" || n.action != "StatusChange" || n.typ != corev1.EventTypeNormal {
		t.Errorf("the NodeNotSchedulable event: %+v", n)
	}
}

// TestScheduleTaintsAtOnce: a node cordoned, or reporting a pressure
// condition or Ready False, gets its NoSchedule taint without waiting for
// the next pass, as Kubernetes' controller taints a node on its update;
// the NoExecute taint of Ready False still waits for a pass to grant it.
func TestScheduleTaintsAtOnce(t *testing.T) {
	// web-2 stays Ready, so that the zone is not fully disrupted.
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0), readyNode("web-2"), nodeLease("web-2", t0))
	// resourceVersions, which the fake clientset does not keep, for the
	// controller to tell its own writes from others'.
	rv := 0
	e.client.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv++
		a.(k8stesting.UpdateAction).GetObject().(*corev1.Node).ResourceVersion = strconv.Itoa(rv)
		return false, nil, nil
	})
	change := func(what string, f func(n *corev1.Node), status bool, want ...corev1.Taint) {
		t.Helper()
		e.c.mu.Lock()
		passes := e.c.passes
		e.c.mu.Unlock()
		n := e.node("web-1")
		f(n)
		nodes := e.client.CoreV1().Nodes()
		var err error
		if status {
			_, err = nodes.UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		} else {
			_, err = nodes.Update(context.Background(), n, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []corev1.Taint
		e.waitFor(what+": the taints", func(c *Controller) bool {
			got = e.node("web-1").Spec.Taints
			return len(got) == len(want) && c.promptVisits > 0
		})
		for i := range want {
			if got[i].Key != want[i].Key || got[i].Effect != want[i].Effect {
				t.Fatalf("%s: taints %+v, want %+v", what, got, want)
			}
		}
		e.c.mu.Lock()
		defer e.c.mu.Unlock()
		if e.c.passes != passes {
			t.Fatalf("%s: %d passes ran; the clock did not move, so none should have", what, e.c.passes-passes)
		}
	}
	unschedulable := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	change("cordon", func(n *corev1.Node) { n.Spec.Unschedulable = true }, false, unschedulable)
	change("memory pressure", func(n *corev1.Node) { setCondition(n, corev1.NodeMemoryPressure, corev1.ConditionTrue) }, true,
		unschedulable, corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule})
	change("uncordon, no pressure", func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		setCondition(n, corev1.NodeMemoryPressure, corev1.ConditionFalse)
	}, false)
	change("Ready False", func(n *corev1.Node) { setCondition(n, corev1.NodeReady, corev1.ConditionFalse) }, true,
		corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
	// Passes grant the NoExecute taint (one grants, the next taints).
	for i := 1; i <= 2; i++ {
		e.renew("web-1", t0.Add(time.Duration(i)*period))
		e.renew("web-2", t0.Add(time.Duration(i)*period))
		e.step(period)
	}
	if ts := e.node("web-1").Spec.Taints; len(ts) != 2 || ts[1].Key != corev1.TaintNodeNotReady || ts[1].Effect != corev1.TaintEffectNoExecute {
		t.Fatalf("after a pass, taints %+v; want not-ready NoSchedule and NoExecute", ts)
	}
}

func setCondition(n *corev1.Node, typ corev1.NodeConditionType, status corev1.ConditionStatus) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			n.Status.Conditions[i].Status = status
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, Status: status})
}

// TestRunAgain runs the same controller twice, as for two terms of
// leadership, and refuses overlapping runs.
func TestRunAgain(t *testing.T) {
	e := newEnv(t, readyNode("web-1"), nodeLease("web-1", t0))
	if err := e.c.Run(context.Background()); err == nil {
		t.Error("a second concurrent Run returned nil, want an error")
	}
	e.step(grace)
	e.stop()

	c := e.c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	e.c.mu.Lock()
	passes := c.passes
	e.c.mu.Unlock()
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	e.waitFor("the first pass of the second run", func(c *Controller) bool { return c.passes > passes })
	// A fresh grace period from the second run's start.
	e.step(grace)
	e.wantReady("web-1", corev1.ConditionTrue, agentReason)
	e.step(period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
	e.wantEvents("web-1", EventRegisteredNode, EventRegisteredNode, EventNodeNotReady)
}

// TestMonitorPassStopsWithItsContext: a pass whose context ends (the
// controller stops) writes nothing more, counts as no pass and forgets no
// node, rather than trying, failing and logging each remaining node.
func TestMonitorPassStopsWithItsContext(t *testing.T) {
	c, client, _ := silentNodes(t, 3, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.monitor(ctx)
	if a := client.Actions(); len(a) != 0 {
		t.Fatalf("a pass after its context ended made %d requests, the first %s %s", len(a), a[0].GetVerb(), a[0].GetResource().Resource)
	}
	if c.passes != 1 || len(c.health) != 3 {
		t.Fatalf("after a stopped pass: %d passes, %d nodes known; want 1 and 3", c.passes, len(c.health))
	}
}

// TestPassVisitsInParallel: a pass visits up to Workers nodes at once. The
// node status writes of two silent nodes wait for each other, so with one
// visit at a time the first would wait in vain.
func TestPassVisitsInParallel(t *testing.T) {
	meet := &meeting{want: 2, all: make(chan struct{})}
	c, client, seen := silentNodes(t, 2, 2, meet.arrive)
	c.monitor(context.Background())
	if meet.alone.Load() {
		t.Fatal("a status write waited in vain for a second one: the pass visited one node at a time")
	}
	for _, n := range seen {
		got, err := client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := readyStatus(got); s != corev1.ConditionUnknown {
			t.Errorf("%s: Ready=%s after the pass, want Unknown", n.Name, s)
		}
	}
}

// silentNodes returns a controller of count registered Ready nodes, with
// workers (0 for the default), whose leases have been silent for twice the
// grace period: its next pass marks every one. beforeStatus, if set, is
// called before each node status write. It also returns the fake clientset
// the controller writes through, with no action recorded yet, and the
// nodes.
func silentNodes(t *testing.T, count, workers int, beforeStatus func()) (*Controller, *fake.Clientset, []*corev1.Node) {
	t.Helper()
	var nodes []runtime.Object
	var seen []*corev1.Node
	for i := range count {
		n := readyNode(fmt.Sprintf("node-%d", i))
		nodes = append(nodes, n)
		seen = append(seen, n.DeepCopy())
	}
	fc := fake.NewClientset(nodes...)
	var client kubernetes.Interface = fc
	if beforeStatus != nil {
		client = hookClient{Interface: fc, beforeStatus: beforeStatus}
	}
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(Config{Client: client, Clock: clk, GracePeriod: grace, Workers: workers, Recorder: &recorder{}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	c.recorder = c.events // as Run sets it
	seeAll(c, seen, true)
	c.monitor(context.Background()) // registers the nodes
	fc.ClearActions()
	clk.Step(2 * grace)
	return c, fc, seen
}

// meeting holds each caller of arrive until want callers have arrived, or
// gives up after a while and records that it did.
type meeting struct {
	want    int
	arrived atomic.Int32
	all     chan struct{}
	alone   atomic.Bool
}

func (m *meeting) arrive() {
	if m.arrived.Add(1) == int32(m.want) {
		close(m.all)
	}
	select {
	case <-m.all:
	case <-time.After(10 * time.Second):
		m.alone.Store(true)
	}
}

// TestGaugeDuringPass: the nodes gauge counts a node marked Unknown as soon
// as it is, not at the end of the pass, which after thousands of nodes went
// silent at once lasts minutes.
func TestGaugeDuringPass(t *testing.T) {
	var c *Controller
	var unknownAt []float64 // the gauge at each status write
	c, _, _ = silentNodes(t, 3, 1, func() {
		unknownAt = append(unknownAt, testutil.ToFloat64(c.metrics.nodes.WithLabelValues(stateUnknown)))
	})
	c.monitor(context.Background())
	if want := []float64{0, 1, 2}; !slices.Equal(unknownAt, want) {
		t.Errorf("unknown nodes at each status write of the pass: %v, want %v", unknownAt, want)
	}
	if got := testutil.ToFloat64(c.metrics.nodes.WithLabelValues(stateUnknown)); got != 3 {
		t.Errorf("unknown nodes after the pass: %v, want 3", got)
	}
}

// hookClient is a clientset that calls beforeStatus before each node
// status write.
type hookClient struct {
	kubernetes.Interface
	beforeStatus func()
}

func (c hookClient) CoreV1() corev1client.CoreV1Interface {
	return hookCore{CoreV1Interface: c.Interface.CoreV1(), beforeStatus: c.beforeStatus}
}

type hookCore struct {
	corev1client.CoreV1Interface
	beforeStatus func()
}

func (c hookCore) Nodes() corev1client.NodeInterface {
	return hookNodes{NodeInterface: c.CoreV1Interface.Nodes(), beforeStatus: c.beforeStatus}
}

type hookNodes struct {
	corev1client.NodeInterface
	beforeStatus func()
}

func (n hookNodes) UpdateStatus(ctx context.Context, node *corev1.Node, opts metav1.UpdateOptions) (*corev1.Node, error) {
	n.beforeStatus()
	return n.NodeInterface.UpdateStatus(ctx, node, opts)
}

// TestStatusHeartbeatsKeepNodeReady: a node without a lease that posts its
// status with a new Ready heartbeat, as kubelets did before leases, is
// alive for as long as it does, as Kubernetes' controller counts it; once
// it stops, it is Unknown a grace period later.
func TestStatusHeartbeatsKeepNodeReady(t *testing.T) {
	e := newEnv(t, readyNode("web-1"))
	post := func() {
		t.Helper()
		n := e.node("web-1")
		now := metav1.NewTime(e.clock.Now())
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].LastHeartbeatTime = now
			}
		}
		if _, err := e.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the status post to be seen", func(c *Controller) bool {
			h := c.health["web-1"]
			return h != nil && h.heartbeat.Equal(now.Time)
		})
	}
	for range int(3 * grace / period) {
		post()
		e.step(period)
	}
	e.wantReady("web-1", corev1.ConditionTrue, agentReason)
	e.step(grace + period)
	e.wantReady("web-1", corev1.ConditionUnknown, ReasonNodeStatusUnknown)
}

// A change makes no channel while no test waits for one, and wakes the
// test that does.
func TestUpdateWakesOnlyWaiters(t *testing.T) {
	c := &Controller{}
	if n := testing.AllocsPerRun(100, func() { c.update(func() { c.passes++ }) }); n != 0 {
		t.Errorf("%v allocations a change with no one waiting", n)
	}
	c.mu.Lock()
	changed := c.changedLocked()
	c.mu.Unlock()
	select {
	case <-changed:
		t.Fatal("woken before any change")
	default:
	}
	c.update(func() { c.passes++ })
	select {
	case <-changed:
	default:
		t.Fatal("a change did not wake the waiter")
	}
}
