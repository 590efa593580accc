package embedded

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics gathers the embedded member's own metrics (etcd_disk_wal_fsync_…,
// etcd_disk_backend_commit_…, etcd_mvcc_…, etcd_server_…), which etcd
// registers with Prometheus' default registry when its packages load. Only
// the families named etcd_ are kept: the default registry also holds Go's
// and the process's collectors, which the caller registers itself.
//
// They mean something only in a process that runs a member: in one that
// talks to an external cluster they stay at zero, and that cluster serves
// its own.
func Metrics() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		all, err := prometheus.DefaultGatherer.Gather()
		kept := all[:0]
		for _, mf := range all {
			if strings.HasPrefix(mf.GetName(), "etcd_") {
				kept = append(kept, mf)
			}
		}
		return kept, err
	})
}
