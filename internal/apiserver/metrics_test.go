package apiserver

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/leasehold/leasehold/internal/version"
)

var (
	leasesGV = coordinationv1.SchemeGroupVersion
	coreGV   = corev1.SchemeGroupVersion
)

// TestRequestMetricLabels: the request metrics label a request as
// kube-apiserver does (its verbs, dry runs and scopes) and count only
// requests for the resources and subresources the server serves, whatever
// the request asks for, so that no request adds series of its own, and a
// path that is not UTF-8 is left out rather than making the Prometheus
// client panic.
func TestRequestMetricLabels(t *testing.T) {
	tests := []struct {
		method, target, contentType string
		want                        requestLabels
		counted                     bool
	}{
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/a/leases/x", "", requestLabels{"GET", "", leasesGV, "leases", "", "resource"}, true},
		{"HEAD", "/apis/coordination.k8s.io/v1/namespaces/a/leases/x", "", requestLabels{"GET", "", leasesGV, "leases", "", "resource"}, true},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/a/leases", "", requestLabels{"LIST", "", leasesGV, "leases", "", "namespace"}, true},
		{"GET", "/apis/coordination.k8s.io/v1/leases", "", requestLabels{"LIST", "", leasesGV, "leases", "", "cluster"}, true},
		{"GET", "/apis/coordination.k8s.io/v1/leases?watch=1", "", requestLabels{"WATCH", "", leasesGV, "leases", "", "cluster"}, true},
		{"GET", "/apis/coordination.k8s.io/v1/watch/namespaces/a/leases", "", requestLabels{"WATCH", "", leasesGV, "leases", "", "namespace"}, true},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/a/leases", "application/json", requestLabels{"POST", "", leasesGV, "leases", "", "resource"}, true},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/a/leases?dryRun=All&dryRun=All", "", requestLabels{"POST", "All", leasesGV, "leases", "", "resource"}, true},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/a/leases?dryRun=Some12345", "", requestLabels{"POST", "invalid", leasesGV, "leases", "", "resource"}, true},
		{"PUT", "/api/v1/nodes/n1/status", "", requestLabels{"PUT", "", coreGV, "nodes", "status", "resource"}, true},
		{"PUT", "/api/v1/namespaces/a/finalize", "", requestLabels{"PUT", "", coreGV, "namespaces", "finalize", "resource"}, true},
		{"PATCH", "/api/v1/nodes/n1", "application/merge-patch+json", requestLabels{"PATCH", "", coreGV, "nodes", "", "resource"}, true},
		{"PATCH", "/api/v1/nodes/n1", "application/apply-patch+yaml", requestLabels{"APPLY", "", coreGV, "nodes", "", "resource"}, true},
		{"DELETE", "/apis/coordination.k8s.io/v1/namespaces/a/leases/x", "", requestLabels{"DELETE", "", leasesGV, "leases", "", "resource"}, true},
		{"DELETE", "/apis/coordination.k8s.io/v1/namespaces/a/leases", "", requestLabels{"DELETE", "", leasesGV, "leases", "", "namespace"}, true},
		{"BREW", "/apis/coordination.k8s.io/v1/leases", "", requestLabels{"other", "", leasesGV, "leases", "", "cluster"}, true},
		{"GET", "/api/v1/nodes/n1/bogus", "", requestLabels{}, false},
		{"GET", "/apis/x12345/v1/y12345", "", requestLabels{}, false},
		{"GET", "/apis/coordination.k8s.io/v9/leases", "", requestLabels{}, false},
		{"GET", "/api/v1/%A7", "", requestLabels{}, false},
		{"DELETE", "/api/v1/namespaces/%FF/%FE/%FD/x", "", requestLabels{}, false},
		{"GET", "/version", "", requestLabels{}, false},
		{"GET", "/%A7", "", requestLabels{}, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		if tt.contentType != "" {
			r.Header.Set("Content-Type", tt.contentType)
		}
		info := parseRequest(r)
		if got, counted := labelsOf(r, info); got != tt.want || counted != tt.counted {
			t.Errorf("%s %s: labels %+v (counted %v), want %+v (%v)", tt.method, tt.target, got, counted, tt.want, tt.counted)
		}
		observeRequest(r, info, 404, 100, time.Millisecond, false)
		observeRequest(r, info, 503, 100, time.Millisecond, true) // not 429: TestInFlightLimitPerUser counts those
	}
	for _, c := range []prometheus.Collector{requestsTotal, requestDuration, requestSLIDuration, responseSizes, requestTerminations} {
		ch := make(chan prometheus.Metric, 1000)
		c.Collect(ch)
		close(ch)
		for m := range ch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			for _, lp := range pb.Label {
				if v := lp.GetValue(); !utf8.ValidString(v) || strings.Contains(v, "12345") || strings.EqualFold(v, "brew") || v == "bogus" || v == "v9" {
					t.Errorf("a series labelled %s=%q", lp.GetName(), v)
				}
			}
		}
	}
}

// TestWatermark: apiserver_current_inflight_requests reads the most
// requests in flight at once since the last read, and then those still in
// flight.
func TestWatermark(t *testing.T) {
	var w watermark
	w.inc()
	w.inc()
	w.inc()
	w.dec()
	w.dec()
	if got := w.read(); got != 3 {
		t.Errorf("first read %v, want the 3 at once", got)
	}
	if got := w.read(); got != 1 {
		t.Errorf("second read %v, want the 1 still in flight", got)
	}
	w.dec()
	w.read()
	if got := w.read(); got != 0 {
		t.Errorf("with none in flight: %v", got)
	}
}

// TestBuildInfo: kubernetes_build_info is 1, labelled with /version.
func TestBuildInfo(t *testing.T) {
	ch := make(chan prometheus.Metric, 1)
	BuildInfo().Collect(ch)
	var pb dto.Metric
	if err := (<-ch).Write(&pb); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, l := range pb.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if pb.GetGauge().GetValue() != 1 || labels["git_version"] != version.Info().GitVersion || labels["minor"] != version.Info().Minor || len(labels) != 9 {
		t.Errorf("kubernetes_build_info %v %v", pb.GetGauge().GetValue(), labels)
	}
}
