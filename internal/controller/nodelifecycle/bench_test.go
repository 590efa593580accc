package nodelifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkMonitorPeriod is the controller's work in one monitor period
// (5 s) of a fleet of 10 000 or 100 000 healthy nodes renewing their leases
// every 10 s: the clock moves 5 s, half of the leases' renewals reach it,
// then a pass runs, in which nothing needs writing. With the default grace
// period (50 s) a tenth of the nodes come up in the due queue each period
// and go back with their newer probe time.
func BenchmarkMonitorPeriod(b *testing.B) {
	for _, nodes := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchmarkMonitorPeriod(b, nodes, true) })
	}
}

// BenchmarkMonitorPeriodCopies is BenchmarkMonitorPeriod with a node feed
// whose objects are the controller's own copies (Nodes served without a
// watch cache): the table holds a summary of each node, and a pass of
// healthy nodes reads none.
func BenchmarkMonitorPeriodCopies(b *testing.B) {
	for _, nodes := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchmarkMonitorPeriod(b, nodes, false) })
	}
}

func benchmarkMonitorPeriod(b *testing.B, nodes int, shared bool) {
	all := make([]*corev1.Node, nodes)
	leases := make([]*coordinationv1.Lease, nodes)
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		all[i] = readyNode(name)
		leases[i] = nodeLease(name, t0)
	}
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(Config{
		Client: fake.NewClientset(), Clock: clk, Recorder: &recorder{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	c.recorder = c.events
	ctx := context.Background()
	for _, l := range leases {
		c.observeLease(l, true)
	}
	seeAll(c, all, shared)
	c.monitor(ctx) // registers every node
	renewals := 0
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(DefaultMonitorPeriod)
		for range nodes / 2 {
			l := leases[renewals%nodes]
			renewals++
			l.Spec.RenewTime.Time = t0.Add(time.Duration(renewals) * time.Millisecond)
			c.observeLease(l, false)
		}
		c.monitor(ctx)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/node")
}

// seeAll hands every node to the controller as the node feed's first list
// does when Run starts, the feed sharing its objects or not.
func seeAll(c *Controller, nodes []*corev1.Node, shared bool) {
	seen := c.nodeHandler(shared).Seen
	for _, n := range nodes {
		seen(n, true)
	}
}

// BenchmarkScheduleTaintsCheck is what the node feed's callback adds to
// each node update it sees, to tell whether the node's NoSchedule taints
// need a visit before the next pass: for a healthy node (an agent's
// status post, most updates of a fleet) and for a cordoned node whose
// taint is in place.
func BenchmarkScheduleTaintsCheck(b *testing.B) {
	healthy := readyNode("web-1")
	cordoned := readyNode("web-2")
	cordoned.Spec.Unschedulable = true
	cordoned.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
	for _, c := range []struct {
		name string
		n    *corev1.Node
	}{{"healthy", healthy}, {"cordoned", cordoned}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if scheduleTaintsDisagree(c.n) {
					b.Fatal("the node's taints disagree with it")
				}
			}
		})
	}
}
