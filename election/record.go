package election

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The records written to the Lease follow client-go's LeaseLock field by
// field (holderIdentity, leaseDurationSeconds, acquireTime, renewTime,
// leaseTransitions), so client-go contenders read them as their own. Where
// client-go rewrites the whole spec (dropping strategy and preferredHolder),
// these keep the fields they do not own, except that an acquisition clears
// preferredHolder: the request it expressed has been served (or abandoned).

// createRecord is the Lease created by its first holder: leaseTransitions 0,
// as client-go creates it.
func createRecord(namespace, name, self string, durationSeconds int32, now time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(self),
			LeaseDurationSeconds: ptr.To(durationSeconds),
			AcquireTime:          &t,
			RenewTime:            ptr.To(t),
			LeaseTransitions:     ptr.To[int32](0),
		},
	}
}

// acquireRecord takes over cur: a new term, so leaseTransitions is
// incremented whoever held the Lease before (even this identity, or nobody).
func acquireRecord(cur *coordinationv1.Lease, self string, durationSeconds int32, now time.Time) *coordinationv1.Lease {
	l := cur.DeepCopy()
	t := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = ptr.To(self)
	l.Spec.LeaseDurationSeconds = ptr.To(durationSeconds)
	l.Spec.AcquireTime = &t
	l.Spec.RenewTime = ptr.To(t)
	l.Spec.LeaseTransitions = ptr.To(transitionsOf(cur) + 1)
	l.Spec.PreferredHolder = nil
	return l
}

// renewRecord extends cur, held by self: only renewTime (and the duration)
// change.
func renewRecord(cur *coordinationv1.Lease, self string, durationSeconds int32, now time.Time) *coordinationv1.Lease {
	l := cur.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(self)
	l.Spec.LeaseDurationSeconds = ptr.To(durationSeconds)
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	if l.Spec.LeaseTransitions == nil {
		l.Spec.LeaseTransitions = ptr.To[int32](0)
	}
	return l
}

// releaseRecord gives cur up as client-go does: an empty holder,
// leaseDurationSeconds 1, acquireTime and renewTime now, leaseTransitions
// unchanged. preferredHolder is kept, reserving the Lease for that contender.
func releaseRecord(cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l := cur.DeepCopy()
	t := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = ptr.To("")
	l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	l.Spec.AcquireTime = &t
	l.Spec.RenewTime = ptr.To(t)
	if l.Spec.LeaseTransitions == nil {
		l.Spec.LeaseTransitions = ptr.To[int32](0)
	}
	return l
}
