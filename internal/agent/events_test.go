package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/leasehold/leasehold/internal/registry"
)

var eventsGVR = eventsv1.SchemeGroupVersion.WithResource("events")

// events returns the Events stored in c, oldest first, as "Type Reason:
// note", after checking each as the server would.
func events(t *testing.T, c *fake.Clientset) []string {
	t.Helper()
	objs, err := c.Tracker().List(eventsGVR, eventsv1.SchemeGroupVersion.WithKind("Event"), metav1.NamespaceDefault)
	if err != nil {
		t.Fatal(err)
	}
	list := objs.(*eventsv1.EventList).Items
	slices.SortFunc(list, func(a, b eventsv1.Event) int { return strings.Compare(a.Name, b.Name) })
	var out []string
	for _, e := range list {
		if errs := registry.ValidateEventV1(&e); len(errs) > 0 {
			t.Errorf("the server would refuse event %s: %v", e.Name, errs)
		}
		if e.ReportingController != ReportingController || e.ReportingInstance != nodeName ||
			e.Regarding != (corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: nodeName}) ||
			!strings.HasPrefix(e.Name, nodeName+".") {
			t.Errorf("event %s: %+v", e.Name, e)
		}
		out = append(out, e.Type+" "+e.Reason+": "+e.Note)
	}
	return out
}

func expectEvents(t *testing.T, c *fake.Clientset, want ...string) {
	t.Helper()
	if got := events(t, c); !slices.Equal(got, want) {
		t.Fatalf("events\n got %q\nwant %q", got, want)
	}
}

// TestNoEventsOfARoutineStart: registering a node, and adopting it again
// on the same boot, records nothing: not the kubelet's Starting (see the
// package doc) nor a pressure event for a first status.
func TestNoEventsOfARoutineStart(t *testing.T) {
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	h.resume()
	h.expectWait(10 * time.Second)
	h.stop()
	again := newHarness(t, c)
	again.clock.SetTime(t0.Add(time.Hour))
	again.agent.nodeInfo = h.agent.nodeInfo
	again.run()
	again.expectWait(10 * time.Second)
	expectEvents(t, c)
}

// TestRebootedEvent: a Node last reported from another boot of the machine
// gets a Rebooted warning with the new boot id, as the kubelet gives it.
func TestRebootedEvent(t *testing.T) {
	existing := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "existing"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}}}
	c := newClient(existing)
	h := newHarness(t, c)
	h.agent.nodeInfo.BootID = "boot-2"
	h.run()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "create nodes", "get nodes", "update nodes", "get leases", "get nodes", "create leases", "update nodes/status", "create events")
	expectEvents(t, c, "Warning Rebooted: Node web-1 has been rebooted, boot id: boot-2")
	e, err := c.Tracker().Get(eventsGVR, metav1.NamespaceDefault, fmt.Sprintf("%s.%x", nodeName, t0.UnixNano()))
	if err != nil || !e.(*eventsv1.Event).EventTime.Time.Equal(t0) || e.(*eventsv1.Event).Action != "Reboot" {
		t.Errorf("the Rebooted event: %+v, %v", e, err)
	}
}

// TestPressureEvents: a pressure condition that changes records the
// kubelet's event for its new status; the first post of a new node records
// none, and an adopted node's conditions count as posted.
func TestPressureEvents(t *testing.T) {
	c := newClient()
	h := start(t, c)
	h.expectWait(10 * time.Second)
	expectEvents(t, c)

	h.setHost(func(s *HostStats) { s.MemoryAvailable, s.FsAvailable = 50<<20, 1<<30 })
	h.resume()
	h.expectWait(10 * time.Second)
	expectEvents(t, c,
		"Normal NodeHasInsufficientMemory: Node web-1 status is now: NodeHasInsufficientMemory",
		"Normal NodeHasDiskPressure: Node web-1 status is now: NodeHasDiskPressure")
	h.setHost(func(s *HostStats) { *s = healthyHost })
	for range int(DefaultPressureTransitionPeriod / (10 * time.Second)) {
		h.resume()
		h.expectWait(10 * time.Second)
	}
	expectEvents(t, c,
		"Normal NodeHasInsufficientMemory: Node web-1 status is now: NodeHasInsufficientMemory",
		"Normal NodeHasDiskPressure: Node web-1 status is now: NodeHasDiskPressure",
		"Normal NodeHasSufficientMemory: Node web-1 status is now: NodeHasSufficientMemory",
		"Normal NodeHasNoDiskPressure: Node web-1 status is now: NodeHasNoDiskPressure")
	h.stop()

	// A new agent on the same node finds disk pressure that was not there:
	// it compares with what the Node says. Unknown (set by the node
	// lifecycle controller) counts as nothing known.
	n := h.node(c)
	for i, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeMemoryPressure {
			n.Status.Conditions[i].Status = corev1.ConditionUnknown
		}
	}
	if err := c.Tracker().Update(nodesGVR, n, ""); err != nil {
		t.Fatal(err)
	}
	c2 := sameServer(c)
	again := newHarness(t, c2)
	again.agent.nodeInfo = h.agent.nodeInfo
	again.clock.SetTime(t0.Add(time.Hour))
	again.setHost(func(s *HostStats) { s.FsAvailable, s.MemoryAvailable = 1<<30, 50<<20 })
	again.run()
	again.expectWait(10 * time.Second)
	got := events(t, c)
	if want := []string{"Normal NodeHasDiskPressure: Node web-1 status is now: NodeHasDiskPressure"}; !slices.Equal(got[4:], want) {
		t.Fatalf("events after the restart: %q, want the four before and %q", got, want)
	}
}

// TestEventsWaitForServer: an Event a server could not take for want of
// service is written at the next pass that succeeds; one it refused is
// dropped.
func TestEventsWaitForServer(t *testing.T) {
	c := newClient()
	var unavailable, forbidden atomic.Bool
	failing(c, "create", "events", apierrors.NewServiceUnavailable("busy"), &unavailable)
	failing(c, "create", "events", apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "", errors.New("no")), &forbidden)
	h := start(t, c)
	h.expectWait(10 * time.Second)
	calls(c)

	unavailable.Store(true)
	h.setHost(func(s *HostStats) { s.MemoryAvailable = 50 << 20 })
	h.resume()
	h.expectWait(10 * time.Second) // a pass with its event waiting is a pass that succeeded
	expectCalls(t, c, "update leases", "update nodes/status", "create events")
	expectEvents(t, c)
	unavailable.Store(false)
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases", "create events")
	expectEvents(t, c, "Normal NodeHasInsufficientMemory: Node web-1 status is now: NodeHasInsufficientMemory")

	forbidden.Store(true)
	h.setHost(func(s *HostStats) { s.FsAvailable = 1 << 30 })
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases", "update nodes/status", "create events")
	h.resume()
	h.expectWait(10 * time.Second)
	expectCalls(t, c, "update leases")
	if len(h.agent.events) != 0 {
		t.Errorf("%d events still wait", len(h.agent.events))
	}
	expectEvents(t, c, "Normal NodeHasInsufficientMemory: Node web-1 status is now: NodeHasInsufficientMemory")
}

// TestEventsBounded: at most maxPendingEvents wait; the oldest go first.
func TestEventsBounded(t *testing.T) {
	h := newHarness(t, newClient())
	for i := range maxPendingEvents + 3 {
		h.agent.record(corev1.EventTypeNormal, "R", "A", "event %d", i)
	}
	if n := len(h.agent.events); n != maxPendingEvents || h.agent.events[0].note != "event 3" {
		t.Fatalf("%d events wait, the first %q", n, h.agent.events[0].note)
	}
	// Names stay unique though the clock stands still.
	if h.agent.events[0].name == h.agent.events[1].name {
		t.Errorf("two events named %s", h.agent.events[0].name)
	}
}
