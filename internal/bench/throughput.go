package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/store/embedded"
)

// DefaultClients is the throughput scenario's default concurrency.
const DefaultClients = 100

// ThroughputConfig configures the throughput scenario. Zero values mean
// defaults.
type ThroughputConfig struct {
	Common
	// Clients is the number of concurrent clients, each updating a lease of
	// its own as fast as it can; default 100.
	Clients int
	// Namespace holds the leases; default "default".
	Namespace string
	// EtcdEndpoints name a bare etcd to compare with: after the API server,
	// the same number of clients put lease-sized values into it for the
	// same duration.
	EtcdEndpoints []string
	// EtcdEmbedded starts a bare single-member etcd in this process for the
	// comparison, with its data in EtcdDir (default a new directory under
	// the system's temporary directory, removed afterwards). It excludes
	// EtcdEndpoints.
	EtcdEmbedded bool
	EtcdDir      string
	// Keep leaves the leases in place; by default they are deleted at the
	// end.
	Keep bool
}

// Throughput measures sustained lease updates per second and their
// latency, and optionally the bare etcd doing the same number of puts.
type Throughput struct {
	cfg ThroughputConfig
}

// NewThroughput validates cfg.
func NewThroughput(cfg ThroughputConfig) (*Throughput, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Clients == 0 {
		cfg.Clients = DefaultClients
	}
	if cfg.Clients < 0 {
		return nil, fmt.Errorf("bench: clients %d must be positive", cfg.Clients)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = metav1.NamespaceDefault
	}
	if cfg.EtcdEmbedded && len(cfg.EtcdEndpoints) > 0 {
		return nil, fmt.Errorf("bench: an embedded etcd and etcd endpoints exclude each other")
	}
	return &Throughput{cfg: cfg}, nil
}

func (t *Throughput) params() map[string]string {
	p := map[string]string{
		"clients":     strconv.Itoa(t.cfg.Clients),
		"connections": strconv.Itoa(t.cfg.Connections),
		"duration":    t.cfg.Duration.String(),
		"namespace":   t.cfg.Namespace,
	}
	switch {
	case t.cfg.EtcdEmbedded:
		p["etcd"] = "embedded"
	case len(t.cfg.EtcdEndpoints) > 0:
		p["etcd"] = strings.Join(t.cfg.EtcdEndpoints, ",")
	}
	return p
}

// Run creates the leases, updates them for the duration, then runs the etcd
// comparison if one is configured, and reports.
func (t *Throughput) Run(ctx context.Context) (*Report, error) {
	cfg := &t.cfg
	p, err := newPool(cfg.REST, cfg.Connections, "throughput")
	if err != nil {
		return nil, err
	}
	leases, err := t.createLeases(ctx, p)
	if err != nil {
		return nil, err
	}
	if !cfg.Keep {
		defer t.deleteLeases(p, len(leases))
	}

	var m meter
	clk := cfg.Clock
	start := clk.Now()
	procs := cfg.startMeters(ctx, start)
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	progressDone := make(chan struct{})
	go func() { progress(runCtx, &cfg.Common, "throughput", &m, nil); close(progressDone) }()
	var wg sync.WaitGroup
	for i, l := range leases {
		c := p.get(i)
		wg.Go(func() { t.updateLoop(runCtx, c, l, &m) })
	}
	wg.Wait()
	cancel()
	<-progressDone
	end := clk.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	snap := m.lat.Snapshot()
	secs := end.Sub(start).Seconds()
	r := &Report{
		Scenario: "throughput", Server: cfg.REST.Host, Parameters: t.params(), StartedAt: start, Seconds: secs,
		Ops: m.ops.Load(), Errors: m.errs.Load(), OpsPerSecond: float64(m.ops.Load()) / secs,
		Latency: snap.Percentiles(), ErrorSamples: m.errorSamples(),
	}
	procs.stop(ctx, end, m.ops.Load(), r)

	if cfg.EtcdEmbedded || len(cfg.EtcdEndpoints) > 0 {
		value, err := encodeLease(leases[0])
		if err != nil {
			return nil, err
		}
		e, err := t.runEtcd(ctx, value)
		if err != nil {
			return nil, fmt.Errorf("etcd comparison: %w", err)
		}
		if e.OpsPerSecond > 0 {
			e.Ratio = r.OpsPerSecond / e.OpsPerSecond
		}
		r.Etcd = e
	}
	return r, nil
}

// leaseName names client i's lease.
func leaseName(prefix string, i int) string { return prefix + strconv.Itoa(i) }

// createLeases creates one lease per client, or takes over a lease of that
// name left by an earlier run.
func (t *Throughput) createLeases(ctx context.Context, p *pool) ([]*coordinationv1.Lease, error) {
	out := make([]*coordinationv1.Lease, t.cfg.Clients)
	err := parallel(ctx, t.cfg.Clients, 16, func(i int) error {
		l, err := ensureLease(ctx, p.get(i), t.cfg.Namespace, leaseName("leasehold-bench-throughput-", i), t.cfg.Clock.Now())
		out[i] = l
		return err
	})
	return out, err
}

// ensureLease creates a lease held by its own name, or reads the one that
// exists.
func ensureLease(ctx context.Context, c kubernetes.Interface, ns, name string, now time.Time) (*coordinationv1.Lease, error) {
	leases := c.CoordinationV1().Leases(ns)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"leasehold.io/bench": "true"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To(int32(40)),
			RenewTime:            &metav1.MicroTime{Time: now},
		},
	}
	got, err := leases.Create(ctx, l, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = leases.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("lease %s/%s: %w", ns, name, err)
	}
	return got, nil
}

func (t *Throughput) deleteLeases(p *pool, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := parallel(ctx, n, 16, func(i int) error {
		err := p.get(i).CoordinationV1().Leases(t.cfg.Namespace).Delete(ctx, leaseName("leasehold-bench-throughput-", i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		t.cfg.Logger.Warn("deleting the benchmark leases", "err", err)
	}
}

// updateLoop renews l from its cached copy as fast as the server answers,
// until ctx ends. The renewTime is the only field it changes; the object
// the server returns becomes the next cached copy.
func (t *Throughput) updateLoop(ctx context.Context, c kubernetes.Interface, l *coordinationv1.Lease, m *meter) {
	leases := c.CoordinationV1().Leases(l.Namespace)
	clk := t.cfg.Clock
	var rt metav1.MicroTime
	for ctx.Err() == nil {
		begin := clk.Now()
		rt.Time = begin
		l.Spec.RenewTime = &rt
		got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if ctx.Err() != nil {
			return // cut off by the end of the run: not counted
		}
		if err != nil {
			m.fail(err)
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				if fresh, err := ensureLease(ctx, c, l.Namespace, l.Name, begin); err == nil {
					l = fresh
				}
			}
			continue
		}
		m.ok(clk.Since(begin))
		l = got
	}
}

// encodeLease returns l as the API server stores it: Kubernetes protobuf
// in its envelope.
func encodeLease(l *coordinationv1.Lease) ([]byte, error) {
	c := l.DeepCopy()
	c.APIVersion, c.Kind = coordinationv1.SchemeGroupVersion.String(), "Lease"
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(c, &buf); err != nil {
		return nil, fmt.Errorf("encoding a lease: %w", err)
	}
	return buf.Bytes(), nil
}

// runEtcd puts value under one key per client into the bare etcd, as fast
// as it answers, for the duration.
func (t *Throughput) runEtcd(ctx context.Context, value []byte) (*EtcdReport, error) {
	cfg := &t.cfg
	endpoints := cfg.EtcdEndpoints
	if cfg.EtcdEmbedded {
		dir := cfg.EtcdDir
		if dir == "" {
			d, err := os.MkdirTemp("", "leasehold-bench-etcd-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(d)
			dir = d
		}
		e, err := embedded.Start(embedded.Config{Dir: dir, Name: "bench", Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		defer e.Close()
		endpoints = e.Endpoints()
	}
	clients := make([]*clientv3.Client, cfg.Connections)
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[i] = c
	}
	const prefix = "/leasehold-bench/leases/"
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		clients[0].Delete(dctx, prefix, clientv3.WithPrefix())
	}()

	var m meter
	clk := cfg.Clock
	start := clk.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	progressDone := make(chan struct{})
	go func() { progress(runCtx, &cfg.Common, "raw etcd", &m, nil); close(progressDone) }()
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		c := clients[i%len(clients)]
		key := leaseName(prefix, i)
		val := string(value)
		wg.Go(func() {
			for runCtx.Err() == nil {
				begin := clk.Now()
				_, err := c.Put(runCtx, key, val)
				if runCtx.Err() != nil {
					return
				}
				if err != nil {
					m.fail(err)
					continue
				}
				m.ok(clk.Since(begin))
			}
		})
	}
	wg.Wait()
	cancel()
	<-progressDone
	end := clk.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	secs := end.Sub(start).Seconds()
	return &EtcdReport{
		Endpoint: strings.Join(endpoints, ","), ValueBytes: len(value), Seconds: secs,
		Ops: m.ops.Load(), Errors: m.errs.Load(), OpsPerSecond: float64(m.ops.Load()) / secs,
		Latency: m.lat.Snapshot().Percentiles(), ErrorSamples: m.errorSamples(),
	}, nil
}

// parallel calls f(0) … f(n-1) on at most width goroutines and returns the
// first error; after an error the calls not yet started are skipped.
func parallel(ctx context.Context, n, width int, f func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	for range min(width, n) {
		wg.Go(func() {
			for {
				mu.Lock()
				if first != nil || next >= n || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
