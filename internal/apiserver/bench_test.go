package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/registry"
)

// The benchmarks run the real handler in-process (no network, no TLS) over
// a real embedded etcd, so they measure the server's own path: decode →
// validate → store (an etcd transaction) → encode. The client side of each
// request (encoding the lease, decoding the reply) is in the loop too, as
// small as a client can make it. Run with -benchtime to taste, e.g.
//
//	go test -run '^$' -bench . -benchmem ./internal/apiserver/

func benchServer(b *testing.B) *apiservertest.Server {
	b.Helper()
	log := slog.New(slog.NewTextHandler(&fuzzLog, &slog.HandlerOptions{Level: slog.LevelError}))
	return apiservertest.Start(b, apiservertest.Options{Logger: log})
}

// benchCodec encodes request bodies and decodes replies in one format.
type benchCodec struct {
	mediaType string
	enc       runtime.Encoder
	dec       runtime.Decoder
}

func newBenchCodec(b *testing.B, mediaType string) benchCodec {
	info, ok := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		b.Fatalf("no serializer for %s", mediaType)
	}
	return benchCodec{
		mediaType: mediaType,
		enc:       registry.Codecs.EncoderForVersion(info.Serializer, coordinationv1.SchemeGroupVersion),
		dec:       info.Serializer,
	}
}

// leaseUpdater renews one lease through the handler, as a node heartbeat
// does: PUT with the resourceVersion of the last reply and a new renewTime.
type leaseUpdater struct {
	h     http.Handler
	codec benchCodec
	lease *coordinationv1.Lease
	url   *url.URL
	buf   bytes.Buffer
}

func newLeaseUpdater(b *testing.B, s *apiservertest.Server, codec benchCodec, name string, owners ...metav1.OwnerReference) *leaseUpdater {
	l := newLease(name, "bench-holder")
	l.Namespace = "default"
	l.OwnerReferences = owners
	created, err := s.Client(b, protobuf).CoordinationV1().Leases("default").Create(context.Background(), l, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return &leaseUpdater{
		h: s.API.Handler(), codec: codec, lease: created,
		url: &url.URL{Path: fuzzLeases + "/" + name},
	}
}

func (u *leaseUpdater) renew() error {
	now := metav1.NewMicroTime(time.Now())
	u.lease.Spec.RenewTime = &now
	u.buf.Reset()
	if err := u.codec.enc.Encode(u.lease, &u.buf); err != nil {
		return err
	}
	rec, err := u.do(http.MethodPut, u.buf.Bytes())
	if err != nil {
		return err
	}
	obj, _, err := u.codec.dec.Decode(rec.Body.Bytes(), nil, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	u.lease = obj.(*coordinationv1.Lease)
	return nil
}

func (u *leaseUpdater) do(method string, body []byte) (*httptest.ResponseRecorder, error) {
	req := (&http.Request{
		Method: method, URL: u.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":  {u.codec.mediaType},
			"Accept":        {u.codec.mediaType},
			"Authorization": {"Bearer " + apiservertest.AdminToken},
		},
		Body: http.NoBody, Host: "leasehold.test", RemoteAddr: "127.0.0.1:40000", RequestURI: u.url.RequestURI(),
	}).WithContext(context.Background())
	if body != nil {
		req.Body, req.ContentLength = readCloser{bytes.NewReader(body)}, int64(len(body))
	}
	rec := httptest.NewRecorder()
	// As net/http's HTTP/2 server does, serve each request on a goroutine
	// of its own, which starts with a small stack.
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.h.ServeHTTP(rec, req)
	}()
	<-done
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, u.url.Path, rec.Code, truncate(rec.Body.Bytes()))
	}
	return rec, nil
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// benchNames numbers the leases benchmarks create, which must not collide
// when the framework runs a benchmark function more than once.
var benchNames atomic.Int64

func reportOpsPerSecond(b *testing.B, ops int64) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(ops)/s, "ops/s")
	}
}

// BenchmarkLeaseUpdate renews a lease through the handler: sequentially in
// protobuf and JSON, and from many goroutines at once, each renewing its own
// lease (the heartbeat load of a fleet), where etcd batches the writes.
func BenchmarkLeaseUpdate(b *testing.B) {
	s := benchServer(b)
	for _, mt := range []string{protobuf, "application/json"} {
		b.Run(shortMediaType(mt), func(b *testing.B) {
			u := newLeaseUpdater(b, s, newBenchCodec(b, mt), fmt.Sprintf("update-%s-%d", shortMediaType(mt), benchNames.Add(1)))
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				if err := u.renew(); err != nil {
					b.Fatal(err)
				}
				n++
			}
			reportOpsPerSecond(b, n)
		})
	}
	b.Run("protobuf-parallel", func(b *testing.B) {
		codec := newBenchCodec(b, protobuf)
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(16) // 16 goroutines per core: many nodes renewing at once
		b.RunParallel(func(pb *testing.PB) {
			u := newLeaseUpdater(b, s, codec, fmt.Sprintf("parallel-%d", benchNames.Add(1)))
			for pb.Next() {
				if err := u.renew(); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
		reportOpsPerSecond(b, n.Load())
	})
	// A fleet's node leases, renewed in turn: each is owned by its node, so
	// its managedFields name a UID of its own, as in kube-node-lease.
	b.Run("protobuf-fleet", func(b *testing.B) {
		const leases = 2000
		codec := newBenchCodec(b, protobuf)
		fleet := make([]*leaseUpdater, leases)
		for i := range fleet {
			name := fmt.Sprintf("fleet-%d", benchNames.Add(1))
			fleet[i] = newLeaseUpdater(b, s, codec, name, metav1.OwnerReference{
				APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))})
			// The first renewal makes this updater the owner of renewTime;
			// the ones measured are the steady state after it.
			if err := fleet[i].renew(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		var n int64
		for b.Loop() {
			if err := fleet[n%leases].renew(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		reportOpsPerSecond(b, n)
	})
}

// BenchmarkLeaseGet reads a lease through the handler (from etcd, as a
// get without resourceVersion does).
func BenchmarkLeaseGet(b *testing.B) {
	s := benchServer(b)
	for _, mt := range []string{protobuf, "application/json"} {
		b.Run(shortMediaType(mt), func(b *testing.B) {
			codec := newBenchCodec(b, mt)
			u := newLeaseUpdater(b, s, codec, fmt.Sprintf("get-%s-%d", shortMediaType(mt), benchNames.Add(1)))
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				rec, err := u.do(http.MethodGet, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := codec.dec.Decode(rec.Body.Bytes(), nil, &coordinationv1.Lease{}); err != nil {
					b.Fatal(err)
				}
				n++
			}
			reportOpsPerSecond(b, n)
		})
	}
}

// BenchmarkWatchFanout measures one lease update reaching N watchers: each
// op is one update (through client-go over HTTPS, protobuf) and the wait
// until every watcher has received its event.
func BenchmarkWatchFanout(b *testing.B) {
	s := benchServer(b)
	for _, watchers := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			leases := s.Client(b, protobuf).CoordinationV1().Leases("default")
			name := fmt.Sprintf("fanout-%d-%d", watchers, benchNames.Add(1))
			l, err := leases.Create(ctx, newLease(name, "h"), metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			// Every watcher reports each revision it sees; the update loop
			// waits for all of them.
			seen := make(chan int64, watchers*4)
			var wg sync.WaitGroup
			for range watchers {
				w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion, FieldSelector: "metadata.name=" + name})
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer w.Stop()
					for ev := range w.ResultChan() {
						if ev.Type != watch.Modified {
							continue
						}
						rv, _ := strconv.ParseInt(ev.Object.(*coordinationv1.Lease).ResourceVersion, 10, 64)
						select {
						case seen <- rv:
						case <-ctx.Done():
							return
						}
					}
				}()
			}
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
				if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
					b.Fatal(err)
				}
				want, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
				for got := 0; got < watchers; {
					select {
					case rv := <-seen:
						if rv == want {
							got++
						}
					case <-time.After(wait):
						b.Fatalf("%d of %d watchers saw revision %d", got, watchers, want)
					}
				}
				n++
			}
			reportOpsPerSecond(b, n)
			cancel()
			wg.Wait()
		})
	}
}

func shortMediaType(mt string) string {
	if mt == protobuf {
		return "protobuf"
	}
	return "json"
}

// BenchmarkLeaseList is one unpaginated list of 10 000 leases through the
// handler, from the watch cache (resourceVersion=0), in protobuf as
// client-go asks for it and in JSON as kubectl -o json; the reply is read
// by the recorder but not decoded.
func BenchmarkLeaseList(b *testing.B) {
	const leases = 10000
	s := benchServer(b)
	ns := fmt.Sprintf("bench-list-%d", benchNames.Add(1))
	c := s.Client(b, protobuf)
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < leases; i += 32 {
				l := newLease(fmt.Sprintf("node-%05d", i), fmt.Sprintf("node-%05d", i))
				l.Namespace = ns
				if _, err := c.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	h := s.API.Handler()
	list := func(b *testing.B, ns, mt, acceptEncoding string, minBytes int) {
		u := &url.URL{Path: "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases", RawQuery: "resourceVersion=0"}
		req := (&http.Request{
			Method: http.MethodGet, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Accept": {mt}, "Accept-Encoding": {acceptEncoding}, "Authorization": {"Bearer " + apiservertest.AdminToken}},
			Body:   http.NoBody, Host: "leasehold.test", RemoteAddr: "127.0.0.1:40000", RequestURI: u.RequestURI(),
		}).WithContext(ctx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.Len() < minBytes {
			b.Fatalf("HTTP %d, %d bytes: %s", rec.Code, rec.Body.Len(), truncate(rec.Body.Bytes()))
		}
	}
	for _, mt := range []string{protobuf, "application/json"} {
		b.Run(shortMediaType(mt), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				list(b, ns, mt, "", leases*100)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/leases, "ns/lease")
		})
	}
	// A short list, as a controller or a script polls one: the one lease of
	// a namespace, asking for gzip as client-go does (too short to be
	// gzipped). Its cost is mostly the request's, whatever the list holds.
	short := fmt.Sprintf("bench-short-%d", benchNames.Add(1))
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: short}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	one := newLease("node-0", "node-0")
	one.Namespace = short
	if _, err := c.CoordinationV1().Leases(short).Create(ctx, one, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Run("protobuf-one-lease", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			list(b, short, protobuf, "gzip", 100)
		}
	})
	// The same leases in pages of 500, as client-go's pager and kubectl
	// read them: a consistent list, each later page at the first's
	// revision. Through a client, so the figure includes its decoding.
	b.Run("protobuf-pages-of-500", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			opts, n := metav1.ListOptions{Limit: 500}, 0
			for {
				page, err := c.CoordinationV1().Leases(ns).List(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				n += len(page.Items)
				if page.Continue == "" {
					break
				}
				opts.Continue = page.Continue
			}
			if n != leases {
				b.Fatalf("listed %d leases, want %d", n, leases)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/leases, "ns/lease")
	})
}
