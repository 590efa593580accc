package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/bench"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

func TestList(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	client := kubernetes.NewForConfigOrDie(s.Config)
	const leases = 25
	for i := range leases {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("list-%d", i), Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("list"), LeaseDurationSeconds: ptr.To[int32](40)},
		}
		if _, err := client.CoordinationV1().Leases(l.Namespace).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := len(all.Items) // the server may keep leases of its own there

	tests := []struct {
		name            string
		chunkSize       int64
		resourceVersion string
		accept          string
		pages           float64
	}{
		{"unpaginated", 0, "", "", 1},
		{"in chunks", 10, "", "", float64((items + 9) / 10)},
		{"one chunk", 1000, "", "", 1},
		{"any version", 0, "0", "", 1},
		{"json", 0, "0", "json", 1},
		{"json in chunks", 10, "", "json", float64((items + 9) / 10)},
	}
	bytesPerList := map[string]float64{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var progress syncbuf.Buffer
			c := common(t, s, &progress)
			c.Duration = time.Second
			l, err := bench.NewList(bench.ListConfig{Common: c, ChunkSize: tt.chunkSize, ResourceVersion: tt.resourceVersion, Accept: tt.accept})
			if err != nil {
				t.Fatal(err)
			}
			r, err := l.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, r, "list", &progress, "list")
			lr := r.List
			if lr == nil {
				t.Fatal("no list report")
			}
			if lr.Items != items || lr.PagesPerList != tt.pages || lr.ChunkSize != tt.chunkSize || lr.Namespace != corev1.NamespaceNodeLease {
				t.Errorf("list report %+v, want %d items in %v pages", lr, items, tt.pages)
			}
			if lr.BytesPerList < float64(items*50) {
				t.Errorf("%v bytes per list of %d leases", lr.BytesPerList, items)
			}
			if lr.Received.Count != r.Ops || lr.Received.P50 <= 0 || lr.Received.Max > r.Latency.Max {
				t.Errorf("received %+v, for %d lists of latency %+v", lr.Received, r.Ops, r.Latency)
			}
			bytesPerList[tt.name] = lr.BytesPerList
			if want := float64(r.Ops) * float64(items) / r.Seconds; lr.ItemsPerSecond < want*0.99 || lr.ItemsPerSecond > want*1.01 {
				t.Errorf("ItemsPerSecond %v, want %v", lr.ItemsPerSecond, want)
			}
		})
	}
	// The same leases are larger in JSON than in protobuf.
	if p, j := bytesPerList["any version"], bytesPerList["json"]; j < 1.3*p {
		t.Errorf("%v bytes a list in JSON, %v in protobuf: was JSON asked for?", j, p)
	}
}

func TestNewListRejects(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	tests := []struct {
		name string
		cfg  bench.ListConfig
	}{
		{"no REST config", bench.ListConfig{}},
		{"negative chunk size", bench.ListConfig{Common: bench.Common{REST: s.Config}, ChunkSize: -1}},
		{"unknown format", bench.ListConfig{Common: bench.Common{REST: s.Config}, Accept: "yaml"}},
		{"negative duration", bench.ListConfig{Common: bench.Common{REST: s.Config, Duration: -time.Second}}},
		{"negative etcd pid", bench.ListConfig{Common: bench.Common{REST: s.Config, EtcdPID: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := bench.NewList(tt.cfg); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// TestListCompression asks for the lists gzipped, as client-go does, unless
// DisableCompression; a server that compresses then sends them so.
func TestListCompression(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{ResponseCompression: true})
	client := kubernetes.NewForConfigOrDie(s.Config)
	for _, name := range []string{"pad-a", "pad-b"} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pad": strings.Repeat("x", 100_000)}}}
		if _, err := client.CoordinationV1().Leases("default").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, disable := range []bool{false, true} {
		var gzipped, plain atomic.Int64
		c := common(t, s, &syncbuf.Buffer{})
		c.Duration = 300 * time.Millisecond
		c.REST = rest.CopyConfig(s.Config)
		c.REST.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if err == nil && strings.HasSuffix(r.URL.Path, "/leases") {
					if resp.Uncompressed { // Go's transport took the gzip off
						gzipped.Add(1)
					} else {
						plain.Add(1)
					}
				}
				return resp, err
			})
		}
		l, err := bench.NewList(bench.ListConfig{Common: c, Namespace: "default", DisableCompression: disable})
		if err != nil {
			t.Fatal(err)
		}
		r, err := l.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if r.List.Items != 2 {
			t.Errorf("%d items a list, want 2", r.List.Items)
		}
		if g, p := gzipped.Load(), plain.Load(); (disable && (g != 0 || p == 0)) || (!disable && (g == 0 || p != 0)) {
			t.Errorf("DisableCompression %v: %d lists gzipped, %d not", disable, g, p)
		}
		if r.Parameters["gzip"] != strconv.FormatBool(!disable) {
			t.Errorf("the report's parameters %v", r.Parameters)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
