package nodelifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkMonitorPass is one monitor pass over 10 000 or 100 000 healthy nodes whose
// leases keep being renewed: the pass a large fleet costs every 5 s, in
// which nothing needs writing.
func BenchmarkMonitorPass(b *testing.B) {
	for _, nodes := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchmarkMonitorPass(b, nodes) })
	}
}

func benchmarkMonitorPass(b *testing.B, nodes int) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range nodes {
		if err := indexer.Add(readyNode(fmt.Sprintf("node-%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	c, err := New(Config{
		Client: fake.NewClientset(), Clock: clocktesting.NewFakeClock(t0), Recorder: &recorder{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	c.recorder = c.events
	ctx := context.Background()
	c.monitor(ctx, indexer) // registers every node
	for _, h := range c.health {
		h.renewed = true // as after the first renewal of each lease
	}
	b.ReportAllocs()
	for b.Loop() {
		c.monitor(ctx, indexer)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/node")
}
