package apiserver_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestRequestMetrics: through a real server, the request metrics count what
// kube-apiserver's count: requests that were authorized, each with its
// verb, dry run and scope, and those refused by the in-flight limit; not
// those refused by authentication or authorization, which the
// authentication and authorization attempts count instead. A watch is
// long-running while it is open.
func TestRequestMetrics(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	admin := s.Client(t, "")
	alice := clientFor(t, s, aliceToken)
	unknown := clientFor(t, s, "no-such-token")

	type series struct {
		name   string
		labels map[string]string
	}
	leases := func(verb, dryRun, scope, code string) series {
		return series{"apiserver_request_total", map[string]string{"verb": verb, "dry_run": dryRun, "group": "coordination.k8s.io", "version": "v1",
			"resource": "leases", "subresource": "", "scope": scope, "component": "apiserver", "code": code}}
	}
	result := func(name, r string) series { return series{name, map[string]string{"result": r}} }
	// kube-apiserver counts a few non-resource requests: the roots of the
	// health endpoints, and aggregated discovery.
	nonResource := func(path, component string) series {
		return series{"apiserver_request_total", map[string]string{"verb": "GET", "dry_run": "", "group": "", "version": "", "resource": "",
			"subresource": path, "scope": "", "component": component, "code": "200"}}
	}
	counts := map[string]struct {
		series
		want float64
	}{
		"the 401":     {leases("LIST", "", "namespace", "401"), 0},
		"the 403":     {leases("LIST", "", "namespace", "403"), 0},
		"the dry run": {leases("POST", "All", "resource", "201"), 1},
		"the apply":   {leases("APPLY", "", "resource", "201"), 1},
		// A list that selects one lease by name is still of the
		// namespace, as kube-apiserver's route scopes it.
		"the named list":          {leases("LIST", "", "namespace", "200"), 1},
		"no list of one resource": {leases("LIST", "", "resource", "200"), 0},
		"unknown tokens":          {result("authentication_attempts", "error"), 1},
		"no credentials":          {result("authentication_attempts", "failure"), 1},
		"denials":                 {result("authorization_attempts_total", "no-opinion"), 1},
		"/readyz":                 {nonResource("/readyz", ""), 1},
		"no single check":         {nonResource("/readyz/etcd", ""), 0},
		"aggregated /api":         {nonResource("api", "apiserver"), 1},
		"aggregated /apis":        {nonResource("apis", "apiserver"), 1},
	}
	before := map[string]float64{}
	for what, c := range counts {
		before[what] = metricValue(t, apiserver.Collectors(), c.name, c.labels)
	}

	if _, err := unknown.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("a list with an unknown token: %v, want 401", err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	req, _ := http.NewRequest("GET", s.URL+"/apis/coordination.k8s.io/v1/namespaces/default/leases", nil)
	if resp, body := roundTrip(t, client, req); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a list without credentials: %s %q, want 401", resp.Status, body)
	}
	if _, err := alice.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice's list: %v, want 403", err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "metered", Namespace: "default"}}
	creates := func() float64 {
		return metricValue(t, apiserver.Collectors(), "apiserver_request_sli_duration_seconds", map[string]string{"verb": "POST", "resource": "leases", "scope": "resource"})
	}
	createsBefore := creates()
	if _, err := admin.CoordinationV1().Leases("default").Create(ctx, lease, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases("default").Patch(ctx, "metered", types.ApplyPatchType,
		[]byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"metered"},"spec":{"holderIdentity":"a"}}`),
		metav1.PatchOptions{FieldManager: "metrics-test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=metered"}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/readyz", "/readyz/etcd", "/apis"} { // /apis unaggregated: not counted
		req, _ := http.NewRequest("GET", s.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
		if resp, body := roundTrip(t, client, req); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %q", path, resp.Status, body)
		}
	}
	if _, _, err := admin.Discovery().ServerGroupsAndResources(); err != nil { // aggregated
		t.Fatal(err)
	}
	for what, c := range counts {
		if got := metricValue(t, apiserver.Collectors(), c.name, c.labels) - before[what]; got != c.want {
			t.Errorf("%s: counted %v times, want %v (%s %v)", what, got, c.want, c.name, c.labels)
		}
	}
	if n := creates() - createsBefore; n != 0 {
		t.Errorf("the dry run's latency is in the SLI histogram (%v observations more)", n)
	}

	// A read's response size is observed as sent: here a lease in JSON.
	sizes := func() (reads, bytes float64) {
		for _, m := range matchingSeries(t, apiserver.Collectors(), "apiserver_response_sizes", map[string]string{"verb": "GET", "resource": "leases", "scope": "resource"}) {
			reads, bytes = reads+float64(m.GetHistogram().GetSampleCount()), bytes+m.GetHistogram().GetSampleSum()
		}
		return reads, bytes
	}
	reads, bytes := sizes()
	get, _ := http.NewRequest("GET", s.URL+"/apis/coordination.k8s.io/v1/namespaces/default/leases/metered", nil)
	get.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
	resp, body := roundTrip(t, client, get)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a get of the lease: %s %s", resp.Status, body)
	}
	if n, sum := sizes(); n != reads+1 || sum != bytes+float64(len(body)) {
		t.Errorf("after a get of %d bytes, apiserver_response_sizes went from %v reads of %v bytes to %v of %v", len(body), reads, bytes, n, sum)
	}

	watches := func() float64 {
		return metricValue(t, apiserver.Collectors(), "apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "group": "coordination.k8s.io",
			"version": "v1", "resource": "leases", "subresource": "", "scope": "namespace", "component": "apiserver"})
	}
	base := watches()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := admin.CoordinationV1().Leases("default").Watch(wctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the watch counted as long-running", func() (bool, error) { return watches() == base+1, nil })
	// Each event sent to the watcher is counted, with its size.
	sent := func() (float64, float64) {
		gvr := map[string]string{"group": "coordination.k8s.io", "version": "v1", "resource": "leases"}
		return metricValue(t, apiserver.Collectors(), "apiserver_watch_events_total", gvr), metricValue(t, apiserver.Collectors(), "apiserver_watch_events_sizes", gvr)
	}
	sentBefore, sizedBefore := sent()
	if _, err := admin.CoordinationV1().Leases("default").Patch(ctx, "metered", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"b"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() { // the state first, as ADDED events
		if ev.Type == watch.Modified {
			break
		}
	}
	if n, sized := sent(); n < sentBefore+1 || sized < sizedBefore+1 {
		t.Errorf("after an event to the watcher, apiserver_watch_events_total went from %v to %v and its sizes' count from %v to %v", sentBefore, n, sizedBefore, sized)
	}
	w.Stop()
	cancel()
	poll(t, "the watch no longer counted once closed", func() (bool, error) { return watches() == base, nil })
}

// metricValue sums the series of the metric name whose labels include
// labels: a counter's or a gauge's value, a histogram's number of
// observations.
func metricValue(t *testing.T, collectors []prometheus.Collector, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, m := range matchingSeries(t, collectors, name, labels) {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// matchingSeries gathers collectors and returns the series of the metric
// name whose labels include labels.
func matchingSeries(t *testing.T, collectors []prometheus.Collector, name string, labels map[string]string) []*dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					continue series
				}
			}
			out = append(out, m)
		}
	}
	return out
}
