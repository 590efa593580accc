package nodelifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// zonedNode is a Ready node in region r1 and zone, or in no zone when zone
// is "".
func zonedNode(name, zone string) *corev1.Node {
	n := readyNode(name)
	if zone != "" {
		n.Labels = map[string]string{corev1.LabelTopologyRegion: "r1", corev1.LabelTopologyZone: zone}
	}
	return n
}

// fleet makes count nodes named prefix-1… in zone, with fresh leases.
func fleet(prefix, zone string, count int) (names []string, objs []runtime.Object) {
	for i := 1; i <= count; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		names = append(names, name)
		objs = append(objs, zonedNode(name, zone), nodeLease(name, t0))
	}
	return names, objs
}

// beat renews the leases of alive and then steps one period, as their
// agents would.
func (e *env) beat(alive []string) {
	e.t.Helper()
	now := e.clock.Now()
	for _, name := range alive {
		e.renew(name, now)
	}
	e.step(period)
}

// beats is beat n times.
func (e *env) beats(n int, alive []string) {
	e.t.Helper()
	for range n {
		e.beat(alive)
	}
}

// noExecuteOn returns which of names carry a lifecycle NoExecute taint.
func (e *env) noExecuteOn(names []string) []string {
	e.t.Helper()
	var got []string
	for _, name := range names {
		if hasNoExecute(e.node(name)) {
			got = append(got, name)
		}
	}
	return got
}

// unknownOn returns which of names are Ready=Unknown with the unreachable
// NoSchedule taint.
func (e *env) unknownOn(names []string) []string {
	e.t.Helper()
	var got []string
	for _, name := range names {
		n := e.node(name)
		if readyStatus(n) == corev1.ConditionUnknown && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoSchedule
		}) {
			got = append(got, name)
		}
	}
	return got
}

// zoneOf returns the state and counts of the zone named name.
func (e *env) zoneOf(name string) (state zoneState, ready, notReady, waiting int, ok bool) {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	for _, z := range e.c.zones {
		if z.name == name {
			return z.state, z.ready, z.notReady, z.waiting, true
		}
	}
	return 0, 0, 0, 0, false
}

func (e *env) wantZone(name string, state zoneState, ready, notReady int) {
	e.t.Helper()
	s, r, nr, _, ok := e.zoneOf(name)
	if !ok {
		e.t.Fatalf("no zone %q", name)
	}
	if s != state || r != ready || nr != notReady {
		e.t.Errorf("zone %q: %v with %d ready and %d not, want %v with %d and %d", name, s, r, nr, state, ready, notReady)
	}
}

// silence renews the leases of alive each period until the pass that
// marks the nodes of dead Unknown, which must come one grace period after
// their last renewal.
func (e *env) silence(alive, dead []string) {
	e.t.Helper()
	for i := 1; ; i++ {
		e.beat(alive)
		got := e.unknownOn(dead)
		switch {
		case slices.Equal(got, dead) && i >= int(grace/period):
			return
		case len(got) > 0 && i < int(grace/period):
			e.t.Fatalf("%v Unknown after %d passes, within the grace period", got, i)
		case i > int(grace/period)+1:
			e.t.Fatalf("Unknown and tainted NoSchedule after %d passes: %v, want %v", i, got, dead)
		}
	}
}

// TestZonesNoExecuteAtRate: in a zone that is not disrupted, nodes not
// Ready get the NoSchedule taint in the pass that marks them and the
// NoExecute one at the zone's rate, one pass after each grant.
func TestZonesNoExecuteAtRate(t *testing.T) {
	names, objs := fleet("web", "a", 10)
	e := newStoppedEnv(t, objs...)
	e.zones = DefaultZones()
	e.zones.EvictionRate = 0.5 // a grant every two passes
	e.start()
	alive, dead := names[3:], names[:3]
	e.beats(2, names)
	e.wantZone("r1/a", zoneNormal, 10, 0)

	e.silence(alive, dead)
	if got := e.noExecuteOn(names); len(got) != 0 {
		t.Errorf("NoExecute in the marking pass: %v", got)
	}
	e.wantZone("r1/a", zoneNormal, 7, 3)
	var counts []int
	for range 6 {
		e.beat(alive)
		counts = append(counts, len(e.noExecuteOn(dead)))
	}
	// The bucket is full when they are marked: one grant at once, then
	// one every two seconds, each written at the next pass.
	if want := []int{1, 1, 2, 2, 3, 3}; !slices.Equal(counts, want) {
		t.Errorf("nodes tainted NoExecute after each pass: %v, want %v", counts, want)
	}
	if got := e.noExecuteOn(alive); len(got) != 0 {
		t.Errorf("Ready nodes tainted NoExecute: %v", got)
	}
	if got := testutil.ToFloat64(e.c.metrics.noExecuteTaints.WithLabelValues("r1/a")); got != 3 {
		t.Errorf("noexecute_taints_total{zone=r1/a} = %v, want 3", got)
	}
	if _, _, _, waiting, _ := e.zoneOf("r1/a"); waiting != 0 {
		t.Errorf("%d nodes still waiting", waiting)
	}

	// Back: both taints go at once.
	e.beat(names)
	e.beat(names)
	if got := e.noExecuteOn(names); len(got) != 0 {
		t.Errorf("NoExecute after the renewals resumed: %v", got)
	}
	if got := e.unknownOn(names); len(got) != 0 {
		t.Errorf("still Unknown: %v", got)
	}
	e.wantZone("r1/a", zoneNormal, 10, 0)
}

// TestZonesPartialDisruption: a zone with at least the unhealthy share of
// its nodes not Ready (and more than two) gives no NoExecute taint while
// it is small, and the secondary rate's once it is large.
func TestZonesPartialDisruption(t *testing.T) {
	for _, tt := range []struct {
		name      string
		threshold int
		want      []int // nodes tainted NoExecute after each of 8 passes
	}{
		{"small zone", DefaultLargeClusterSizeThreshold, []int{0, 0, 0, 0, 0, 0, 0, 0}},
		// A grant every four passes. The normal rate's bucket was full when
		// the rate dropped, so the new one starts full too: a grant at
		// once, written at the next pass.
		{"large zone", 4, []int{1, 1, 1, 1, 2, 2, 2, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			names, objs := fleet("web", "a", 5)
			e := newStoppedEnv(t, objs...)
			e.zones = Zones{EvictionRate: 10, SecondaryEvictionRate: 0.25, LargeClusterSizeThreshold: tt.threshold, UnhealthyZoneThreshold: DefaultUnhealthyZoneThreshold}
			e.start()
			alive, dead := names[3:], names[:3]
			e.silence(alive, dead)
			e.wantZone("r1/a", zonePartial, 2, 3)
			var counts []int
			for range 8 {
				e.beat(alive)
				counts = append(counts, len(e.noExecuteOn(dead)))
			}
			if !slices.Equal(counts, tt.want) {
				t.Errorf("nodes tainted NoExecute after each pass: %v, want %v", counts, tt.want)
			}
			if got := testutil.ToFloat64(e.c.metrics.zoneStates.WithLabelValues("r1/a", "partial_disruption")); got != 1 {
				t.Errorf("zone_state{partial_disruption} = %v, want 1", got)
			}
		})
	}
}

// TestZonesFullDisruption: a zone with no node Ready is tainted at the
// normal rate while another zone has one; once no zone has one the
// NoExecute taints go, and none comes, until a node is Ready again, when
// every node gets a fresh grace period.
func TestZonesFullDisruption(t *testing.T) {
	a, objs := fleet("a", "a", 3)
	b, objsB := fleet("b", "b", 3)
	e := newStoppedEnv(t, append(objs, objsB...)...)
	e.zones = DefaultZones()
	e.zones.EvictionRate = 10
	e.start()

	// Zone a goes down alone: its nodes get NoExecute at the next pass.
	e.silence(b, a)
	e.wantZone("r1/a", zoneFull, 0, 3)
	e.wantZone("r1/b", zoneNormal, 3, 0)
	e.beat(b)
	if got := e.noExecuteOn(a); !slices.Equal(got, a) {
		t.Fatalf("NoExecute on %v, want %v", got, a)
	}

	// Then b: no zone has a Ready node. The pass that marks b's nodes
	// finds it; the next removes a's NoExecute taints, and b's nodes get
	// none.
	e.silence(nil, b)
	e.beats(3, nil)
	all := append(slices.Clone(a), b...)
	if got := e.noExecuteOn(all); len(got) != 0 {
		t.Errorf("NoExecute on %v with no node Ready anywhere", got)
	}
	if got := e.unknownOn(all); !slices.Equal(got, all) {
		t.Errorf("Unknown with NoSchedule: %v, want %v", got, all)
	}

	// b-1 comes back: every node gets a fresh grace period from that
	// pass, and the silent ones their NoExecute only after it.
	e.beat(b[:1])
	if got := e.unknownOn(b[:1]); len(got) != 0 {
		t.Fatalf("b-1 still Unknown")
	}
	e.wantZone("r1/b", zoneNormal, 1, 2)
	// A silent node written in that grace period (labelled here; in a
	// large fleet, the echo of the write that took its NoExecute taint
	// away may come this late) is visited: it waits all the same.
	touched := e.node(a[0])
	touched.Labels["example.com/touched"] = "true"
	e.update(touched)
	e.beats(int(grace/period)-1, b[:1])
	if got := e.noExecuteOn(all); len(got) != 0 {
		t.Errorf("NoExecute on %v within the fresh grace period", got)
	}
	e.beats(3, b[:1])
	if got, want := e.noExecuteOn(all), append(slices.Clone(a), b[1:]...); !slices.Equal(got, want) {
		t.Errorf("NoExecute on %v after the fresh grace period, want %v", got, want)
	}
}

// TestZonesExcluded: a node labelled node.kubernetes.io/exclude-disruption
// does not count in its zone's state, so its being Ready does not keep the
// others' zone from being fully disrupted.
func TestZonesExcluded(t *testing.T) {
	names, objs := fleet("web", "a", 2)
	probe := zonedNode("probe", "a")
	probe.Labels[LabelExcludeDisruption] = ""
	e := newStoppedEnv(t, append(objs, probe, nodeLease("probe", t0))...)
	e.zones = DefaultZones()
	e.zones.EvictionRate = 10
	e.start()
	e.silence([]string{"probe"}, names)
	e.beats(3, []string{"probe"})
	e.wantZone("r1/a", zoneFull, 0, 2)
	if got := e.noExecuteOn(names); len(got) != 0 {
		t.Errorf("NoExecute on %v, though no counted node is Ready", got)
	}
}

// TestZonesExcludedOnly: a zone whose nodes are all excluded is not
// judged: its nodes get NoExecute at the normal rate, and it does not keep
// the state where no counted node is Ready anywhere from setting in.
func TestZonesExcludedOnly(t *testing.T) {
	names, objs := fleet("web", "a", 2)
	probe := zonedNode("probe", "x")
	probe.Labels[LabelExcludeDisruption] = ""
	e := newStoppedEnv(t, append(objs, probe, nodeLease("probe", t0))...)
	e.zones = DefaultZones()
	e.zones.EvictionRate = 10
	e.start()
	e.silence(names, []string{"probe"})
	e.beat(names)
	if got := e.noExecuteOn([]string{"probe"}); len(got) != 1 {
		t.Errorf("the excluded node of a zone of its own has no NoExecute taint")
	}
	if _, r, nr, _, ok := e.zoneOf("r1/x"); !ok || r+nr != 0 {
		t.Errorf("zone r1/x counts %d nodes; want it kept, counting none", r+nr)
	}

	e.silence(nil, names)
	e.beats(2, nil)
	if got := e.noExecuteOn(append(names, "probe")); len(got) != 0 {
		t.Errorf("NoExecute on %v with no counted node Ready", got)
	}
}

// TestZonesFollowNodes: counts follow the nodes as they move between
// zones, go and come; a zone is forgotten with its last node.
func TestZonesFollowNodes(t *testing.T) {
	e := newEnv(t, zonedNode("x", "a"), nodeLease("x", t0), zonedNode("y", "a"), nodeLease("y", t0), zonedNode("z", ""), nodeLease("z", t0))
	e.wantZone("r1/a", zoneNormal, 2, 0)
	e.wantZone("", zoneNormal, 1, 0)

	n := e.node("y")
	n.Labels[corev1.LabelTopologyZone] = "b"
	e.update(n)
	e.beat([]string{"x", "y", "z"})
	e.wantZone("r1/a", zoneNormal, 1, 0)
	e.wantZone("r1/b", zoneNormal, 1, 0)

	e.deleteNode("z")
	e.beat([]string{"x", "y"})
	if _, _, _, _, ok := e.zoneOf(""); ok {
		t.Error("the zone of no labels is still kept without a node")
	}
	if got := testutil.CollectAndCount(e.c.metrics.zoneNodes); got != 2 {
		t.Errorf("zone_nodes has %d series, want 2", got)
	}
}

func TestZonesValidate(t *testing.T) {
	client := fake.NewClientset()
	for _, z := range []Zones{
		{EvictionRate: -1, UnhealthyZoneThreshold: 0.5},
		{SecondaryEvictionRate: -0.1, UnhealthyZoneThreshold: 0.5},
		{LargeClusterSizeThreshold: -1, UnhealthyZoneThreshold: 0.5},
		{EvictionRate: 1, UnhealthyZoneThreshold: 0},
		{EvictionRate: 1, UnhealthyZoneThreshold: 1.5},
	} {
		if _, err := New(Config{Client: client, Zones: z}); err == nil {
			t.Errorf("New accepted %+v", z)
		}
	}
	if _, err := New(Config{Client: client, Zones: Zones{UnhealthyZoneThreshold: 1}}); err != nil {
		t.Errorf("no NoExecute taints at all refused: %v", err)
	}
}

// update writes n and waits until the node feed has seen it.
func (e *env) update(n *corev1.Node) {
	e.t.Helper()
	e.afterNodeEvent(func() error {
		_, err := e.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
}

// deleteNode deletes the node name and waits until the feed has seen it.
func (e *env) deleteNode(name string) {
	e.t.Helper()
	e.afterNodeEvent(func() error {
		return e.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func (e *env) afterNodeEvent(f func() error) {
	e.t.Helper()
	e.c.mu.Lock()
	seen := e.c.nodeEvents
	e.c.mu.Unlock()
	if err := f(); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("the node feed to see the change", func(c *Controller) bool { return c.nodeEvents > seen })
}
