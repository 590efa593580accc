package agent

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// renewLease writes the node's Lease with a fresh renewTime, starting from
// the cached copy. It reads the lease only when it has no copy or the copy
// is stale (Conflict), and recreates it when it is gone: a server that
// answers NotFound, or one that creates a missing Lease on the PUT, as
// kube-apiserver does.
func (a *Agent) renewLease(ctx context.Context, c kubernetes.Interface) error {
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	for attempt := 0; ; attempt++ {
		if a.lease == nil {
			l, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return a.createLease(ctx, c)
			}
			if err != nil {
				return fmt.Errorf("reading the lease: %w", err)
			}
			a.lease = l
		}

		l := a.lease.DeepCopy()
		a.setLease(l)
		got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		switch {
		case err == nil && got.UID != l.UID:
			// The lease was gone, and the renewal created it again. Its
			// owner is the Node as the agent last saw it; if that Node is
			// gone too, the agent registers it again and renews at once,
			// so that the lease names the new one.
			a.log.Warn("node lease was deleted, the renewal created it again")
			a.lease = got
			a.metrics.leaseCreations.Inc()
			owner := a.node.UID
			if err := a.confirmNode(ctx, c); err != nil {
				return err
			}
			if a.node.UID == owner {
				a.metrics.renewals.Inc()
				return nil
			}
		case err == nil:
			a.lease = got
			a.metrics.renewals.Inc()
			return nil
		case apierrors.IsNotFound(err):
			a.log.Warn("node lease was deleted, creating it again")
			a.lease = nil
			return a.createLease(ctx, c)
		case apierrors.IsConflict(err) && attempt == 0:
			a.log.Info("node lease changed on the server, reading it again")
			a.lease = nil
		default:
			return fmt.Errorf("renewing the lease: %w", err)
		}
	}
}

// createLease creates the node's Lease owned by the Node. It first makes
// sure the Node it knows still exists, registering it again if it is gone,
// so that the ownerReference never names a deleted Node.
func (a *Agent) createLease(ctx context.Context, c kubernetes.Interface) error {
	if err := a.confirmNode(ctx, c); err != nil {
		return err
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name:      a.cfg.NodeName,
		Namespace: corev1.NamespaceNodeLease,
	}}
	a.setLease(l)
	got, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		// On AlreadyExists the next pass reads the lease and renews it.
		return fmt.Errorf("creating the lease: %w", err)
	}
	a.log.Info("created node lease", "owner", a.node.UID)
	a.lease = got
	a.metrics.leaseCreations.Inc()
	return nil
}

// setLease asserts everything the agent owns in the lease: holder, duration,
// a renewTime of now, and the ownerReference to the Node as the agent last
// saw it (which repairs a reference to an older Node of the same name). The
// reference is the kubelet's: apiVersion, kind, name and uid, controller
// unset. syncWith registers the node before it touches the lease, so
// a.node is set.
func (a *Agent) setLease(l *coordinationv1.Lease) {
	l.Spec.HolderIdentity = ptr.To(a.cfg.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(a.cfg.LeaseDuration.Seconds()))
	l.Spec.RenewTime = &metav1.MicroTime{Time: a.cfg.Clock.Now()}
	l.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       a.node.Name,
		UID:        a.node.UID,
	}}
}
