package nodelifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
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
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchmarkMonitorPeriod(b, nodes) })
	}
}

func benchmarkMonitorPeriod(b *testing.B, nodes int) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	leases := make([]*coordinationv1.Lease, nodes)
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		if err := indexer.Add(readyNode(name)); err != nil {
			b.Fatal(err)
		}
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
	touchAll(c, indexer)
	c.monitor(ctx, indexer) // registers every node
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
		c.monitor(ctx, indexer)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/node")
}

// touchAll marks every node of store for the next pass, as the node
// informer's first notifications do when Run starts.
func touchAll(c *Controller, store cache.Store) {
	for _, name := range store.ListKeys() {
		c.dirty[name] = struct{}{}
	}
}
