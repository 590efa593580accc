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
)

var (
	leasesGV = coordinationv1.SchemeGroupVersion
	coreGV   = corev1.SchemeGroupVersion
)

// TestRequestMetricLabels: the request metrics name only the verbs,
// resources and subresources the server serves, whatever the request asks
// for, so that no request adds series of its own, and a path that is not
// UTF-8 is counted rather than making the Prometheus client panic.
func TestRequestMetricLabels(t *testing.T) {
	tests := []struct {
		method, target string
		want           requestLabels
	}{
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/a/leases/x", requestLabels{"get", leasesGV, "leases", ""}},
		{"PUT", "/api/v1/nodes/n1/status", requestLabels{"update", coreGV, "nodes", "status"}},
		{"PUT", "/api/v1/namespaces/a/finalize", requestLabels{"update", coreGV, "namespaces", "finalize"}},
		{"GET", "/api/v1/nodes/n1/bogus", requestLabels{"get", coreGV, "nodes", ""}},
		{"GET", "/apis/coordination.k8s.io/v1/leases?watch=1", requestLabels{"watch", leasesGV, "leases", ""}},
		{"BREW", "/apis/coordination.k8s.io/v1/leases", requestLabels{"other", leasesGV, "leases", ""}},
		{"GET", "/apis/x12345/v1/y12345", requestLabels{verb: "list"}},
		{"GET", "/apis/coordination.k8s.io/v9/leases", requestLabels{verb: "list"}},
		{"GET", "/api/v1/%A7", requestLabels{verb: "list"}},
		{"DELETE", "/api/v1/namespaces/%FF/%FE/%FD/x", requestLabels{verb: "delete"}},
		{"GET", "/version", requestLabels{verb: "nonresource"}},
		{"GET", "/%A7", requestLabels{verb: "nonresource"}},
	}
	for _, tt := range tests {
		info := parseRequest(httptest.NewRequest(tt.method, tt.target, nil))
		if got := labelsOf(info); got != tt.want {
			t.Errorf("%s %s: labels %+v, want %+v", tt.method, tt.target, got, tt.want)
		}
		observeRequest(info, 404, time.Millisecond)
	}
	for _, c := range []prometheus.Collector{requestsTotal, requestDuration} {
		ch := make(chan prometheus.Metric, 1000)
		c.Collect(ch)
		close(ch)
		for m := range ch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			for _, lp := range pb.Label {
				if v := lp.GetValue(); !utf8.ValidString(v) || strings.Contains(v, "12345") || v == "brew" || v == "bogus" || v == "v9" {
					t.Errorf("a series labelled %s=%q", lp.GetName(), v)
				}
			}
		}
	}
}
