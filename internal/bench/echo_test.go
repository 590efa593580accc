package bench_test

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/bench"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

func TestEchoHandler(t *testing.T) {
	h := bench.EchoHandler()
	body := []byte("k8s\x00 any bytes at all")
	for _, tt := range []struct {
		method string
		code   int
	}{{http.MethodPost, http.StatusCreated}, {http.MethodPut, http.StatusOK}, {http.MethodPatch, http.StatusOK}} {
		r := httptest.NewRequest(tt.method, "/apis/coordination.k8s.io/v1/namespaces/default/leases/x", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.code || !bytes.Equal(w.Body.Bytes(), body) || w.Header().Get("Content-Type") != "application/vnd.kubernetes.protobuf" {
			t.Errorf("%s: %d %q %q, want %d and the body back", tt.method, w.Code, w.Header().Get("Content-Type"), w.Body.String(), tt.code)
		}
	}
	for _, tt := range []struct {
		method string
		code   int32
		status string
		reason metav1.StatusReason
	}{{http.MethodDelete, 0, metav1.StatusSuccess, ""}, {http.MethodGet, http.StatusNotFound, metav1.StatusFailure, metav1.StatusReasonNotFound}} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tt.method, "/api/v1/nodes/x", nil))
		var st metav1.Status
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
			t.Fatalf("%s: %v: %s", tt.method, err, w.Body.String())
		}
		if want := max(int(tt.code), http.StatusOK); w.Code != want || st.Kind != "Status" || st.Status != tt.status || st.Reason != tt.reason || st.Code != tt.code {
			t.Errorf("%s: %d %+v", tt.method, w.Code, st)
		}
	}
}

// The throughput and fleet scenarios run against the echo server without
// errors: every answer they get from it is one they take.
func TestEchoScenarios(t *testing.T) {
	srv := httptest.NewUnstartedServer(bench.EchoHandler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg := &rest.Config{
		Host:            srv.URL,
		BearerToken:     "echo",
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})},
	}
	common := func(progress *syncbuf.Buffer) bench.Common {
		return bench.Common{
			REST: cfg, Connections: 2, Duration: time.Second,
			Progress: progress, ProgressInterval: 250 * time.Millisecond,
		}
	}

	var progress syncbuf.Buffer
	r := runThroughput(t, bench.ThroughputConfig{Common: common(&progress), Clients: 4})
	checkReport(t, r, "throughput", &progress, "throughput")

	progress = syncbuf.Buffer{}
	const nodes = 50
	r = runFleet(t, bench.FleetConfig{
		Common: common(&progress), Nodes: nodes, Interval: 200 * time.Millisecond, LeaseDuration: time.Second,
		NodeStatusReportPeriod: 400 * time.Millisecond, NodePrefix: "echo-",
	})
	checkReport(t, r, "fleet", &progress, "fleet")
	if r.Fleet == nil || r.Fleet.Nodes != nodes || r.Fleet.StatusPosts == 0 || r.Fleet.Conflicts != 0 {
		t.Errorf("fleet report %+v", r.Fleet)
	}
}
