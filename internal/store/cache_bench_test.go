package store

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkGetWhileListing measures what a cache of 100 000 leases makes
// its other users wait while full lists of them run back to back: the
// reads of single objects (each renewal's guess of the current object)
// and the changes from etcd (1 000 a second, as a fleet of 10 000 nodes
// renewing every 10 s makes). It reports the reads' latency percentiles
// and the lists made. With churn, a tenth of the changes add a lease and
// a tenth remove it again.
func BenchmarkGetWhileListing(b *testing.B) {
	b.Run("renewals", func(b *testing.B) { benchmarkGetWhileListing(b, false) })
	b.Run("churn", func(b *testing.B) { benchmarkGetWhileListing(b, true) })
}

func benchmarkGetWhileListing(b *testing.B, churn bool) {
	const n = 100000
	s, k, ctx := runLeaseStore(b, "bench", Config{}, func(*Kind) {})
	if err := s.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	c := k.cache
	keys := make([]string, n)
	values := make([][]byte, n)
	c.mu.Lock()
	for i := range n {
		l := sampleLease()
		l.Name = fmt.Sprintf("leasehold-bench-node-%d", i)
		keys[i] = k.Key(l.Namespace, l.Name)
		c.items[keys[i]] = l
		v, err := k.encode(l.DeepCopy())
		if err != nil {
			b.Fatal(err)
		}
		values[i] = v.bytes()
	}
	c.order.rebuild(c.items)
	c.mu.Unlock()
	opts := ListOptions{Namespace: "kube-node-lease"}
	if _, err := c.list(ctx, opts, 0); err != nil { // sorts the keys once
		b.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	lists := 0
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.list(ctx, opts, 0); err != nil {
				b.Error(err)
				return
			}
			lists++
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			j := (i * 7919) % n
			ev := &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(keys[j]), Value: values[j]}}
			if churn && i%10 == 0 {
				ev.Kv.Key = fmt.Appendf(nil, "%s-churn-%d", keys[j], i)
			} else if churn && i%10 == 5 {
				ev.Type, ev.Kv.Key = clientv3.EventTypeDelete, fmt.Appendf(nil, "%s-churn-%d", keys[(i-5)*7919%n], i-5)
			}
			c.mu.RLock()
			ev.Kv.ModRevision = c.rv + 1
			c.mu.RUnlock()
			c.apply([]*clientv3.Event{ev})
		}
	})
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t := time.Now()
		if _, err := c.get(keys[(i*104729)%n]); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t)
		if i%64 == 0 {
			time.Sleep(20 * time.Microsecond) // a renewal's other work
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)*999/1000].Nanoseconds()), "p999-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
	b.ReportMetric(float64(lists)/b.Elapsed().Seconds(), "lists/s")
}
