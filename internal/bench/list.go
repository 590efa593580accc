package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// listErrorPause is the wait after a failed list before the next, so that
// a server that refuses at once is not asked in a tight loop.
const listErrorPause = 100 * time.Millisecond

// ListConfig configures the list scenario. Zero values mean defaults.
type ListConfig struct {
	Common
	// Namespace holds the leases listed; default kube-node-lease.
	Namespace string
	// ChunkSize is the number of leases asked for per page, as kubectl's
	// --chunk-size; 0 (the default) lists them all in one response.
	ChunkSize int64
	// ResourceVersion of the lists: "" (the default) the most recent, a
	// consistent read, as kubectl asks; "0" any, which a server may answer
	// from its cache.
	ResourceVersion string
	// Accept is the format asked for: "protobuf" (the default, as
	// Kubernetes' own components ask) or "json" (as client-go does unless
	// told otherwise, and kubectl).
	Accept string
	// DisableCompression asks for lists as they are, as client-go's
	// rest.Config.DisableCompression does; by default they are asked for
	// gzipped, as Go's HTTP client asks, which a server then spends CPU
	// on (leasehold serve and kube-apiserver gzip responses over 128 KiB).
	DisableCompression bool
}

// listAccept maps ListConfig.Accept to the media types asked for.
var listAccept = map[string]string{"protobuf": Protobuf, "json": "application/json"}

// List measures full lists of a namespace's leases, one at a time, as
// `kubectl get leases` or an informer's first list does them.
type List struct {
	cfg ListConfig
}

// NewList validates cfg.
func NewList(cfg ListConfig) (*List, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Namespace == "" {
		cfg.Namespace = corev1.NamespaceNodeLease
	}
	if cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("bench: chunk size %d must not be negative", cfg.ChunkSize)
	}
	if cfg.Accept == "" {
		cfg.Accept = "protobuf"
	}
	if _, ok := listAccept[cfg.Accept]; !ok {
		return nil, fmt.Errorf("bench: accept %q: want protobuf or json", cfg.Accept)
	}
	return &List{cfg: cfg}, nil
}

func (l *List) params() map[string]string {
	rv := l.cfg.ResourceVersion
	if rv == "" {
		rv = "most recent"
	}
	return map[string]string{
		"namespace":       l.cfg.Namespace,
		"chunkSize":       strconv.FormatInt(l.cfg.ChunkSize, 10),
		"resourceVersion": rv,
		"accept":          l.cfg.Accept,
		"gzip":            strconv.FormatBool(!l.cfg.DisableCompression),
		"duration":        l.cfg.Duration.String(),
	}
}

// listCounters are what the lists returned, beside the meter's counts.
type listCounters struct {
	lastItems, items, pages, bytes atomic.Int64
	// received is the time from a list's start until its last page was
	// read, before the client decodes it.
	received Histogram
}

// Run lists the namespace's leases over and over for the duration, one
// list (all its pages) at a time, and reports. The list under way when the
// duration ends is finished and counted.
func (l *List) Run(ctx context.Context) (*Report, error) {
	cfg := &l.cfg
	clk := cfg.Clock
	rc0 := cfg.REST
	if cfg.DisableCompression {
		rc0 = rest.CopyConfig(rc0)
		rc0.DisableCompression = true
	}
	p, err := newPool(rc0, 1, "list")
	if err != nil {
		return nil, err
	}
	rc := p.get(0).CoordinationV1().RESTClient()

	var (
		m meter
		c listCounters
	)
	begin := clk.Now()
	procs := cfg.startMeters(ctx, begin)
	runCtx, stopRun := context.WithTimeout(ctx, cfg.Duration)
	defer stopRun()
	progressDone := make(chan struct{})
	extra := func() string {
		return fmt.Sprintf("items %8d  per list %s", c.lastItems.Load(), byteSize(float64(c.bytes.Load())/float64(max(1, m.ops.Load()))))
	}
	go func() { progress(runCtx, &cfg.Common, "list", &m, extra); close(progressDone) }()
	for runCtx.Err() == nil {
		start := clk.Now()
		items, pages, n, received, err := l.listOnce(ctx, rc)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			m.fail(err)
			sleepUntil(runCtx, clk, clk.Now().Add(listErrorPause))
			continue
		}
		m.ok(clk.Now().Sub(start))
		c.received.Record(received)
		c.lastItems.Store(int64(items))
		c.items.Add(int64(items))
		c.pages.Add(int64(pages))
		c.bytes.Add(n)
	}
	stopRun()
	<-progressDone
	end := clk.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	secs := end.Sub(begin).Seconds()
	ops := m.ops.Load()
	r := &Report{
		Scenario: "list", Server: cfg.REST.Host, Parameters: l.params(), StartedAt: begin, Seconds: secs,
		Ops: ops, Errors: m.errs.Load(), OpsPerSecond: float64(ops) / secs,
		Latency: m.lat.Snapshot().Percentiles(), ErrorSamples: m.errorSamples(),
		List: &ListReport{
			Namespace: cfg.Namespace, ChunkSize: cfg.ChunkSize, Items: int(c.lastItems.Load()),
			ItemsPerSecond: float64(c.items.Load()) / secs,
			Received:       c.received.Snapshot().Percentiles(),
		},
	}
	if ops > 0 {
		r.List.PagesPerList = float64(c.pages.Load()) / float64(ops)
		r.List.BytesPerList = float64(c.bytes.Load()) / float64(ops)
	}
	procs.stop(ctx, end, ops, r)
	return r, nil
}

// listOnce lists every lease of the namespace, page after page, decoding
// each page as a client would; it returns the leases, pages and response
// bytes seen, and the time spent receiving the pages (decoding left out).
func (l *List) listOnce(ctx context.Context, rc rest.Interface) (items, pages int, bytes int64, received time.Duration, err error) {
	clk := l.cfg.Clock
	opts := metav1.ListOptions{Limit: l.cfg.ChunkSize, ResourceVersion: l.cfg.ResourceVersion}
	for {
		start := clk.Now()
		// Do reads the whole body; Into decodes it.
		res := rc.Get().Namespace(l.cfg.Namespace).Resource("leases").VersionedParams(&opts, scheme.ParameterCodec).
			SetHeader("Accept", listAccept[l.cfg.Accept]).Do(ctx)
		received += clk.Now().Sub(start)
		raw, err := res.Raw()
		if err != nil {
			return items, pages, bytes, received, fmt.Errorf("listing leases (page %d): %w", pages+1, err)
		}
		var list coordinationv1.LeaseList
		if err := res.Into(&list); err != nil {
			return items, pages, bytes, received, fmt.Errorf("decoding page %d: %w", pages+1, err)
		}
		items += len(list.Items)
		pages++
		bytes += int64(len(raw))
		if list.Continue == "" {
			return items, pages, bytes, received, nil
		}
		// A continued list reads at the revision of its first page.
		opts.Continue, opts.ResourceVersion = list.Continue, ""
	}
}

// byteSize prints a size in bytes, KiB or MiB, whichever reads best.
func byteSize(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f bytes", b)
}
