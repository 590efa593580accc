package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Watch scenario defaults.
const (
	DefaultWatchers = 10
	DefaultWriters  = 10
	watchPrefix     = "leasehold-bench-watch-"
	// drainTimeout bounds the wait, after the writers stop, for the
	// watchers to receive what is still on its way.
	drainTimeout = 5 * time.Second
)

// WatchConfig configures the watch scenario. Zero values mean defaults.
type WatchConfig struct {
	Common
	// Watchers watch every lease in Namespace; default 10.
	Watchers int
	// Writers each renew a lease of their own; default 10.
	Writers int
	// Rate is the writers' total renewals per second, spread evenly; 0
	// lets each write as fast as the server answers.
	Rate float64
	// Namespace holds the leases; default kube-node-lease.
	Namespace string
	// Keep leaves the leases in place; by default they are deleted at the
	// end.
	Keep bool
}

// Watch measures how long renewals take to reach many watchers.
type Watch struct {
	cfg WatchConfig
}

// NewWatch validates cfg.
func NewWatch(cfg WatchConfig) (*Watch, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Watchers == 0 {
		cfg.Watchers = DefaultWatchers
	}
	if cfg.Writers == 0 {
		cfg.Writers = DefaultWriters
	}
	if cfg.Namespace == "" {
		cfg.Namespace = corev1.NamespaceNodeLease
	}
	switch {
	case cfg.Watchers < 0:
		return nil, fmt.Errorf("bench: watchers %d must be positive", cfg.Watchers)
	case cfg.Writers < 0:
		return nil, fmt.Errorf("bench: writers %d must be positive", cfg.Writers)
	case cfg.Rate < 0:
		return nil, fmt.Errorf("bench: rate %v must not be negative", cfg.Rate)
	}
	return &Watch{cfg: cfg}, nil
}

func (w *Watch) params() map[string]string {
	rate := "unpaced"
	if w.cfg.Rate > 0 {
		rate = strconv.FormatFloat(w.cfg.Rate, 'f', -1, 64) + "/s"
	}
	return map[string]string{
		"watchers":    strconv.Itoa(w.cfg.Watchers),
		"writers":     strconv.Itoa(w.cfg.Writers),
		"rate":        rate,
		"connections": strconv.Itoa(w.cfg.Connections),
		"duration":    w.cfg.Duration.String(),
		"namespace":   w.cfg.Namespace,
	}
}

// acks remembers, per lease, when the writer had the answer to its last
// few writes, by resourceVersion.
type acks struct {
	mu    sync.Mutex
	rv    [4]uint64
	at    [4]int64 // unix nanoseconds
	count int
}

func (a *acks) store(rv uint64, at time.Time) {
	a.mu.Lock()
	a.rv[a.count%len(a.rv)], a.at[a.count%len(a.at)] = rv, at.UnixNano()
	a.count++
	a.mu.Unlock()
}

// lookup returns when the write of rv was acknowledged, if it was yet.
func (a *acks) lookup(rv uint64) (int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.rv {
		if a.rv[i] == rv && a.at[i] != 0 {
			return a.at[i], true
		}
	}
	return 0, false
}

// Run creates the writers' leases, opens the watches, writes for the
// duration, waits for the watchers to catch up, and reports.
func (w *Watch) Run(ctx context.Context) (*Report, error) {
	cfg := &w.cfg
	clk := cfg.Clock
	p, err := newPool(cfg.REST, cfg.Connections, "watch")
	if err != nil {
		return nil, err
	}
	leases := make([]*coordinationv1.Lease, cfg.Writers)
	err = parallel(ctx, cfg.Writers, 16, func(i int) error {
		l, err := ensureLease(ctx, p.get(i), cfg.Namespace, leaseName(watchPrefix, i), clk.Now())
		leases[i] = l
		return err
	})
	if err != nil {
		return nil, err
	}
	if !cfg.Keep {
		defer w.deleteLeases(p)
	}
	list, err := p.get(0).CoordinationV1().Leases(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("listing leases: %w", err)
	}

	var (
		writes                     meter
		fromWrite, fromAck         Histogram
		delivered, beforeAck, rest atomic.Uint64
		ackTable                   = make([]acks, cfg.Writers)
	)
	start := clk.Now()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchers, opened sync.WaitGroup
	opened.Add(cfg.Watchers)
	for i := range cfg.Watchers {
		c := p.get(i)
		watchers.Go(func() {
			open := c.CoordinationV1().Leases(cfg.Namespace).Watch
			var once sync.Once
			defer once.Do(opened.Done) // a watch that never opened
			err := follow(watchCtx, clk, open, list.ResourceVersion, &rest, func() { once.Do(opened.Done) }, func(ev watch.Event) {
				w.deliver(ev, start, ackTable, &delivered, &beforeAck, &fromWrite, &fromAck)
			})
			if err != nil {
				writes.fail(err)
			}
		})
	}

	opened.Wait()
	begin := clk.Now()
	procs := cfg.startMeters(ctx, begin)
	runCtx, stopRun := context.WithTimeout(ctx, cfg.Duration)
	defer stopRun()
	progressDone := make(chan struct{})
	var prevDelivered uint64
	prevAt, prevSnap := begin, fromWrite.Snapshot()
	extra := func() string {
		now, d, snap := clk.Now(), delivered.Load(), fromWrite.Snapshot()
		s := fmt.Sprintf("delivered/s %9.0f  delivery p99 %8.2fms", float64(d-prevDelivered)/now.Sub(prevAt).Seconds(), ms(snap.Sub(prevSnap).Quantile(0.99)))
		prevDelivered, prevAt, prevSnap = d, now, snap
		return s
	}
	go func() { progress(runCtx, &cfg.Common, "watch", &writes, extra); close(progressDone) }()
	var writers sync.WaitGroup
	var s *schedule
	if cfg.Rate > 0 {
		s = &schedule{start: begin, n: cfg.Writers, interval: time.Duration(float64(cfg.Writers) / cfg.Rate * float64(time.Second))}
	}
	for i, l := range leases {
		c := p.get(i)
		writers.Go(func() { w.writeLoop(runCtx, ctx, c, i, l, s, &writes, &ackTable[i]) })
	}
	writers.Wait()
	stopRun()
	<-progressDone
	end := clk.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	// Let the watchers receive what is still in flight.
	expected := writes.ops.Load() * uint64(cfg.Watchers)
	deadline := clk.Now().Add(drainTimeout)
	for delivered.Load() < expected && clk.Now().Before(deadline) {
		sleepUntil(ctx, clk, clk.Now().Add(10*time.Millisecond))
	}
	stopWatch()
	watchers.Wait()

	secs := end.Sub(begin).Seconds()
	ops := writes.ops.Load()
	d := delivered.Load()
	r := &Report{
		Scenario: "watch", Server: cfg.REST.Host, Parameters: w.params(), StartedAt: begin, Seconds: secs,
		Ops: ops, Errors: writes.errs.Load(), OpsPerSecond: float64(ops) / secs, TargetOpsPerSecond: cfg.Rate,
		Latency: writes.lat.Snapshot().Percentiles(), ErrorSamples: writes.errorSamples(),
		Watch: &WatchReport{
			Watchers: cfg.Watchers, Writers: cfg.Writers, Delivered: d, Expected: expected,
			DeliveredPerSecond: float64(d) / secs, FromWrite: fromWrite.Snapshot().Percentiles(),
			FromAck: fromAck.Snapshot().Percentiles(), BeforeAck: beforeAck.Load(), Restarts: rest.Load(),
		},
	}
	if expected > d {
		r.Watch.Lost = expected - d
	}
	procs.stop(ctx, end, ops, r)
	return r, nil
}

// deliver accounts for one watch event of a writer's lease written during
// the run.
func (w *Watch) deliver(ev watch.Event, start time.Time, ackTable []acks, delivered, beforeAck *atomic.Uint64, fromWrite, fromAck *Histogram) {
	if ev.Type != watch.Modified {
		return
	}
	l, ok := ev.Object.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(start) {
		return
	}
	i, ok := strings.CutPrefix(l.Name, watchPrefix)
	if !ok {
		return
	}
	idx, err := strconv.Atoi(i)
	if err != nil || idx < 0 || idx >= len(ackTable) {
		return
	}
	now := w.cfg.Clock.Now()
	delivered.Add(1)
	fromWrite.Record(now.Sub(l.Spec.RenewTime.Time))
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	if at, ok := ackTable[idx].lookup(rv); ok {
		fromAck.Record(now.Sub(time.Unix(0, at)))
	} else {
		beforeAck.Add(1)
	}
}

// writeLoop renews writer i's lease from its cached copy until ctx ends,
// on schedule s when the writes are paced, else as fast as it can. A write
// under way when ctx ends is finished (under reqCtx), so that every write
// the server may have applied is counted and its events expected.
func (w *Watch) writeLoop(ctx, reqCtx context.Context, c kubernetes.Interface, i int, l *coordinationv1.Lease, s *schedule, m *meter, ack *acks) {
	leases := c.CoordinationV1().Leases(l.Namespace)
	clk := w.cfg.Clock
	var rt metav1.MicroTime
	for k := int64(0); ctx.Err() == nil; {
		if s != nil && !sleepUntil(ctx, clk, s.due(i, k, 0)) {
			return
		}
		begin := clk.Now()
		rt.Time = begin
		l.Spec.RenewTime = &rt
		got, err := leases.Update(reqCtx, l, metav1.UpdateOptions{})
		if reqCtx.Err() != nil {
			return
		}
		now := clk.Now()
		if s != nil {
			k, _ = s.next(i, k, now)
		}
		if err != nil {
			m.fail(err)
			if fresh, err := ensureLease(ctx, c, l.Namespace, l.Name, begin); err == nil {
				l = fresh
			}
			continue
		}
		if rv, err := strconv.ParseUint(got.ResourceVersion, 10, 64); err == nil {
			ack.store(rv, now)
		}
		m.ok(now.Sub(begin))
		l = got
	}
}

func (w *Watch) deleteLeases(p *pool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := parallel(ctx, w.cfg.Writers, 16, func(i int) error {
		return p.get(i).CoordinationV1().Leases(w.cfg.Namespace).Delete(ctx, leaseName(watchPrefix, i), metav1.DeleteOptions{})
	})
	if err != nil {
		w.cfg.Logger.Warn("deleting the benchmark leases", "err", err)
	}
}
