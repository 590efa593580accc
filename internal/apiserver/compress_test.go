package apiserver_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestResponseCompression gzips what kube-apiserver gzips: a response body
// over 128 KiB, a list or one object, for a client whose Accept-Encoding
// names gzip; the rest goes as it is. The audit event keeps the response
// uncompressed.
func TestResponseCompression(t *testing.T) {
	var auditOut syncbuf.Buffer
	logger, flush := auditLog(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n", &auditOut)
	s := apiservertest.Start(t, apiservertest.Options{ResponseCompression: true, Audit: logger})
	plain := apiservertest.Start(t, apiservertest.Options{})

	// Two leases of 100 KB each: each alone is under the threshold, their
	// list over it; and one of 200 KB, over it alone.
	for _, srv := range []*apiservertest.Server{s, plain} {
		leases := srv.Client(t, "").CoordinationV1().Leases("default")
		for name, size := range map[string]int{"a": 100_000, "b": 100_000} {
			l := newLease(name, "h")
			l.Annotations = map[string]string{"pad": strings.Repeat("x", size)}
			if _, err := leases.Create(testContext(t), l, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		big := newLease("big", "h")
		big.Namespace = "kube-system"
		big.Annotations = map[string]string{"pad": strings.Repeat("y", 200_000)}
		if _, err := srv.Client(t, "").CoordinationV1().Leases("kube-system").Create(testContext(t), big, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	tlsConfig, err := rest.TLSConfigFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	// DisableCompression: the test sees the body as it came.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	get := func(srv *apiservertest.Server, path, accept, acceptEncoding string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, body := roundTrip(t, client, req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return resp, body
	}
	const list = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	const one = "/apis/coordination.k8s.io/v1/namespaces/default/leases/a"
	const bigOne = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/big"
	tests := []struct {
		name           string
		srv            *apiservertest.Server
		path, accept   string
		acceptEncoding string
		gzipped        bool
		items          int  // of a list or a Table; -1 for one object
		everyCore      bool // a list of parallelGzipItems items or more
	}{
		{"a list over 128 KiB", s, list, "", "gzip", true, 2, false},
		{"a list over 128 KiB in protobuf", s, list, protobuf, "gzip", true, 2, false},
		{"among other encodings", s, list, "", "deflate, gzip , br", true, 2, false},
		{"not asked for", s, list, "", "", false, 2, false},
		{"only with a weight", s, list, "", "gzip;q=1.0", false, 2, false},
		{"a list under it", s, "/apis/coordination.k8s.io/v1/namespaces/kube-public/leases", "", "gzip", false, 0, false},
		{"one object under it", s, one, "", "gzip", false, -1, false},
		{"one object over it", s, bigOne, "", "gzip", true, -1, false},
		{"the server's compression off", plain, list, "", "gzip", false, 2, false},
		{"a list gzipped on every core", s, list, "", "gzip", true, 2, true},
		{"a list gzipped on every core, in protobuf", s, list, protobuf, "gzip", true, 2, true},
		{"a Table gzipped on every core", s, list, "application/json;as=Table;v=v1;g=meta.k8s.io", "gzip", true, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.everyCore {
				defer apiserver.SetParallelGzipItems(2)()
			}
			resp, body := get(tt.srv, tt.path, tt.accept, tt.acceptEncoding)
			encoding := resp.Header.Get("Content-Encoding")
			if tt.gzipped != (encoding == "gzip") {
				t.Fatalf("Content-Encoding %q with %d bytes, want gzipped %v", encoding, len(body), tt.gzipped)
			}
			if tt.gzipped {
				if v := resp.Header.Get("Vary"); v != "Accept-Encoding" {
					t.Errorf("Vary %q, want Accept-Encoding", v)
				}
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				whole, err := io.ReadAll(zr)
				if err != nil {
					t.Fatal(err)
				}
				if len(whole) < 2*len(body) {
					t.Errorf("%d bytes gzipped to %d", len(whole), len(body))
				}
				body = whole
			}
			if strings.Contains(tt.accept, "as=Table") {
				var table metav1.Table
				if err := json.Unmarshal(body, &table); err != nil || len(table.Rows) != tt.items {
					t.Errorf("got a Table of %d rows (%v), want %d", len(table.Rows), err, tt.items)
				}
				return
			}
			obj, err := runtime.Decode(registry.Codecs.UniversalDeserializer(), body)
			if err != nil {
				t.Fatalf("decoding %d bytes: %v", len(body), err)
			}
			if tt.items < 0 {
				if _, ok := obj.(*coordinationv1.Lease); !ok {
					t.Errorf("got a %T, want a Lease", obj)
				}
			} else if l, ok := obj.(*coordinationv1.LeaseList); !ok || len(l.Items) != tt.items {
				t.Errorf("got %T, want a LeaseList of %d", obj, tt.items)
			}
		})
	}

	// client-go asks for gzip unless told not to, and reads it.
	l, err := s.Client(t, protobuf).CoordinationV1().Leases("default").List(testContext(t), metav1.ListOptions{})
	if err != nil || len(l.Items) != 2 {
		t.Errorf("client-go's list: %v items, %v", len(l.Items), err)
	}
	restore := apiserver.SetParallelGzipItems(2)
	l, err = s.Client(t, protobuf).CoordinationV1().Leases("default").List(testContext(t), metav1.ListOptions{})
	restore()
	if err != nil || len(l.Items) != 2 {
		t.Errorf("client-go's list, gzipped on every core: %v items, %v", len(l.Items), err)
	}

	s.Stop()
	flush()
	sc := bufio.NewScanner(strings.NewReader(auditOut.String()))
	sc.Buffer(nil, 8<<20)
	found := false
	for sc.Scan() {
		var ev struct {
			Verb, Stage, RequestURI string
			ResponseObject          *struct {
				Kind        string
				Items, Rows []json.RawMessage
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Verb == "list" && ev.Stage == "ResponseComplete" && ev.RequestURI == list {
			found = true
			if r := ev.ResponseObject; r == nil || len(r.Items) != 2 && !(r.Kind == "Table" && len(r.Rows) == 2) {
				t.Errorf("the audit event of a gzipped list has responseObject %v, want the list of 2, or its Table", ev.ResponseObject)
			}
		}
	}
	if !found {
		t.Error("no audit event for the lists")
	}
}
