package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/syncbuf"
)

// The expressions of kube-apiserver's rules and alerts that the README
// says read leasehold's series as they are: the read error budget's burn
// rate (kubernetes-mixin's recording rule, slow requests by scope plus
// 5xx, over all reads) and the alert on client certificates about to
// lapse. An empty answer means a name or a label the rules select is not
// there.
const (
	readBurnRate = `(
  sum(rate(apiserver_request_sli_duration_seconds_count{job="apiserver",verb=~"LIST|GET",subresource!~"proxy|attach|log|exec|portforward"}[1m]))
  - ((sum(rate(apiserver_request_sli_duration_seconds_bucket{job="apiserver",verb=~"LIST|GET",subresource!~"proxy|attach|log|exec|portforward",scope=~"resource|",le="1"}[1m])) or vector(0))
     + sum(rate(apiserver_request_sli_duration_seconds_bucket{job="apiserver",verb=~"LIST|GET",subresource!~"proxy|attach|log|exec|portforward",scope="namespace",le="5"}[1m]))
     + sum(rate(apiserver_request_sli_duration_seconds_bucket{job="apiserver",verb=~"LIST|GET",subresource!~"proxy|attach|log|exec|portforward",scope="cluster",le="30"}[1m])))
  + (sum(rate(apiserver_request_total{job="apiserver",verb=~"LIST|GET",code=~"5.."}[1m])) or vector(0))
) / sum(rate(apiserver_request_total{job="apiserver",verb=~"LIST|GET"}[1m]))`
	clientCertLeft = `histogram_quantile(0.01, sum without (namespace, service, endpoint) (rate(apiserver_client_certificate_expiration_seconds_bucket{job="apiserver"}[1m])))`
)

// TestPrometheus scrapes the real binary with a real Prometheus, as the
// README's Monitoring section sets it up (a client certificate in
// system:monitoring, the job named apiserver), and evaluates the
// expressions of kube-apiserver's rules against it.
func TestPrometheus(t *testing.T) {
	prometheus := os.Getenv("LEASEHOLD_PROMETHEUS")
	if prometheus == "" {
		var err error
		if prometheus, err = exec.LookPath("prometheus"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("prometheus is required with CI=true: none on the PATH and LEASEHOLD_PROMETHEUS is not set")
			}
			t.Skip("skipping: no prometheus on the PATH and LEASEHOLD_PROMETHEUS is not set")
		}
	}
	s := shared(t)
	dir := t.TempDir()
	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "prometheus", "--group", "system:monitoring", "--out-dir", dir)
	config := fmt.Sprintf(`scrape_configs:
  - job_name: apiserver
    scheme: https
    scrape_interval: 1s
    tls_config:
      ca_file: %s
      cert_file: %s
      key_file: %s
    static_configs:
      - targets: [%q]
`, filepath.Join(s.dataDir, "ca.crt"), filepath.Join(dir, "prometheus.crt"), filepath.Join(dir, "prometheus.key"), s.listen)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddrs(t, 1)[0]
	cmd := exec.Command(prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", out.String())
		}
	})

	query := func(expr string) ([]float64, error) {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Error  string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, err
		}
		if r.Status != "success" {
			return nil, fmt.Errorf("%s: %s", r.Status, r.Error)
		}
		var values []float64
		for _, res := range r.Data.Result {
			str, _ := res.Value[1].(string)
			v, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, err
			}
			values = append(values, v)
		}
		return values, nil
	}
	// One value from each expression, once enough scrapes are in for the
	// rates. Reads of every scope go on meanwhile: the burn rate sums one
	// term a scope, as kube-apiserver's rules do, and a sum of no series
	// is no value.
	for _, c := range []struct {
		what, expr string
		ok         func(float64) bool
	}{
		{"the target is up", `up{job="apiserver"}`, func(v float64) bool { return v == 1 }},
		{"lists of leases across namespaces counted", `sum(apiserver_request_total{job="apiserver",verb="LIST",resource="leases",scope="cluster",code="200"})`, func(v float64) bool { return v > 0 }},
		{"namespaces counted", `apiserver_storage_objects{job="apiserver",resource="namespaces"}`, func(v float64) bool { return v >= 4 }},
		{"the read burn rate", readBurnRate, func(v float64) bool { return v >= 0 && v <= 1 }},
		{"a client certificate's time left", clientCertLeft, func(v float64) bool { return v > 7*86400 }},
	} {
		eventually(t, 60*time.Second, func() error {
			s.kubectl(t, "get", "lease", "-A")
			s.kubectl(t, "get", "lease", "-n", "kube-system")
			s.kubectl(t, "get", "namespace", "default")
			values, err := query(c.expr)
			if err != nil {
				return fmt.Errorf("%s: %v", c.what, err)
			}
			if len(values) != 1 || !c.ok(values[0]) {
				return fmt.Errorf("%s: %s = %v", c.what, c.expr, values)
			}
			return nil
		})
	}
}
