package apiserver

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/leasehold/leasehold/internal/registry"
)

// lastWritten is the newest timestamp of an object's managedFields: when
// it was last written, truncated to the second.
func lastWritten(entries []metav1.ManagedFieldsEntry) (time.Time, bool) {
	var last time.Time
	for _, e := range entries {
		if e.Time != nil && e.Time.After(last) {
			last = e.Time.Time
		}
	}
	return last, !last.IsZero()
}

// renewalCheckpoint returns the store.UpdateOptions.Defer of an update
// that may be a node lease's renewal, when
// Config.NodeLeaseCheckpointInterval is set: a renewal that changes only
// spec.renewTime, less than the interval (and half the lease's duration)
// after the stored renewTime, and less than the interval (and a second)
// after the stored lease was written by the server's clock, is answered
// with the stored lease bearing the new renewTime, at the stored
// resourceVersion, and not written. The agent renews from that answer, so
// its next renewal names the stored resourceVersion and passes its
// precondition; the first renewal at or past the interval is written, as a
// checkpoint.
//
// What every reader sees is the stored lease, whose renewTime is at most
// the interval plus one renewal interval behind the agent's latest: a node
// lifecycle controller on any replica, or one that starts after a restart,
// sees the lease change at least that often, so a live node is never
// judged gone as long as that is shorter than its grace period (serve
// checks the interval against --node-monitor-grace-period). A node that
// stops is judged gone up to the interval earlier than with every renewal
// written. Nothing is kept in memory: a restart or a replica failover
// loses only the answered renewals, which nothing but their agent saw
// (docs/PERFORMANCE.md, "Renewals between checkpoints").
func (s *Server) renewalCheckpoint(req *request, dryRun bool) func(updated, cur runtime.Object) runtime.Object {
	if s.cfg.NodeLeaseCheckpointInterval <= 0 || dryRun || req.res != registry.Leases || req.info.subresource != "" || req.info.namespace != corev1.NamespaceNodeLease {
		return nil
	}
	return func(updated, cur runtime.Object) runtime.Object {
		if !req.renewal {
			return nil
		}
		l, c := updated.(*coordinationv1.Lease), cur.(*coordinationv1.Lease)
		if l.Spec.RenewTime == nil || c.Spec.RenewTime == nil {
			return nil
		}
		interval := s.cfg.NodeLeaseCheckpointInterval
		if d := c.Spec.LeaseDurationSeconds; d != nil && time.Duration(*d)*time.Second/2 < interval {
			interval = time.Duration(*d) * time.Second / 2
		}
		if since := l.Spec.RenewTime.Sub(c.Spec.RenewTime.Time); since < 0 || since >= interval {
			return nil
		}
		// And by the server's clock, whatever the agent's does (a clock
		// that runs slow would have its renewTimes keep within the
		// interval for longer): the stored lease's newest managedFields
		// timestamp is when it was written, as every write sets its
		// manager's, truncated to the second, which the check allows for.
		written, ok := lastWritten(c.ManagedFields)
		if !ok || s.clock.Since(written) >= interval+time.Second {
			return nil
		}
		// The cached lease is shared: answer with a copy of its top
		// level, which the response's encoding may set the kind of.
		answer := *c
		answer.Spec.RenewTime = l.Spec.RenewTime
		req.deferred = true
		return &answer
	}
}
