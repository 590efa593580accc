package embedded

import (
	"context"
	"strings"
	"testing"
)

// TestMetrics: the member's own metrics count its work, and nothing but
// etcd's families comes through (the default registry's Go and process
// collectors would clash with the caller's).
func TestMetrics(t *testing.T) {
	e, err := Start(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Client().Put(context.Background(), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	fams, err := Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range fams {
		if !strings.HasPrefix(mf.GetName(), "etcd_") {
			t.Errorf("family %s is not etcd's", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				values[mf.GetName()] += float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				values[mf.GetName()] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				values[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	if values["etcd_server_has_leader"] != 1 {
		t.Errorf("etcd_server_has_leader = %v, want 1", values["etcd_server_has_leader"])
	}
	for _, name := range []string{"etcd_disk_wal_fsync_duration_seconds", "etcd_server_proposals_committed_total", "etcd_mvcc_put_total"} {
		if values[name] < 1 {
			t.Errorf("%s = %v after a put, want at least 1", name, values[name])
		}
	}
}
