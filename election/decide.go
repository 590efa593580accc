package election

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// observation is what a contender knows about the Lease.
type observation struct {
	// known is false until the Lease has been read once.
	known bool
	// lease is the newest version seen; nil when the Lease does not exist.
	lease *coordinationv1.Lease
	// at is when this contender saw the Lease change to this version
	// (resourceVersion or spec), on its own clock. Expiry counts from it,
	// never from spec.renewTime.
	at time.Time
}

// action is what a contender that does not lead does next.
type action int

const (
	// actWait: do nothing until the Lease changes or until decision.at.
	actWait action = iota
	// actCreate: create the Lease, holding it.
	actCreate
	// actAcquire: update the observed Lease to hold it (compare-and-swap on
	// its resourceVersion).
	actAcquire
	// actConfirm: in coordinated election, renew the observed Lease that a
	// coordinator has assigned to this contender (compare-and-swap on its
	// resourceVersion), which starts the term.
	actConfirm
)

func (a action) String() string {
	switch a {
	case actWait:
		return "wait"
	case actCreate:
		return "create"
	case actAcquire:
		return "acquire"
	case actConfirm:
		return "confirm"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// decision is the outcome of decide.
type decision struct {
	act action
	// at, for actWait, is when to decide again even if the Lease does not
	// change (the zero time: only when it changes).
	at time.Time
	// why explains the decision, for logs.
	why string
}

// expired reports whether a record that this contender observed at
// observedAt, with the given duration, has expired at now. All three values
// come from the contender's own clock.
func expired(observedAt time.Time, d time.Duration, now time.Time) bool {
	return !now.Before(observedAt.Add(d))
}

// decide is the whole acquisition policy of a contender that does not lead:
// given what it observed and the time now, whether to take the Lease. It is
// the one place to change for other policies (coordinated election, where a
// coordinator picks the holder, will replace it).
//
// The rules, compatible with client-go's LeaseLock elector:
//   - a Lease that does not exist is created;
//   - a Lease with an empty holder (released) is taken at once, unless
//     spec.preferredHolder names another contender: then it is reserved for
//     that contender until the released record expires (its
//     leaseDurationSeconds, 1 after a release, counted from when this
//     contender saw it);
//   - a Lease with a holder, including this contender's own identity (a
//     previous incarnation may still be running), is taken only once
//     leaseDurationSeconds have passed since this contender saw it change.
func decide(self string, o observation, now time.Time) decision {
	if !o.known {
		return decision{act: actWait, why: "lease not read yet"}
	}
	if o.lease == nil {
		return decision{act: actCreate, why: "lease does not exist"}
	}
	holder := holderOf(o.lease)
	preferred := preferredOf(o.lease)
	expiresAt := o.at.Add(recordDuration(o.lease))
	if holder == "" {
		switch {
		case preferred == "" || preferred == self:
			return decision{act: actAcquire, why: "lease is free"}
		case expired(o.at, recordDuration(o.lease), now):
			return decision{act: actAcquire, why: fmt.Sprintf("lease released to preferred holder %q, who did not take it in time", preferred)}
		default:
			return decision{act: actWait, at: expiresAt, why: fmt.Sprintf("lease released to preferred holder %q", preferred)}
		}
	}
	if expired(o.at, recordDuration(o.lease), now) {
		return decision{act: actAcquire, why: fmt.Sprintf("lease held by %q has expired", holder)}
	}
	return decision{act: actWait, at: expiresAt, why: fmt.Sprintf("lease held by %q", holder)}
}

// holderOf returns the Lease's holder identity ("" for none or no Lease).
func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// preferredOf returns the Lease's preferred holder ("" for none).
func preferredOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.PreferredHolder == nil {
		return ""
	}
	return *l.Spec.PreferredHolder
}

// recordDuration returns the Lease's spec.leaseDurationSeconds (0 if unset).
func recordDuration(l *coordinationv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// transitionsOf returns the Lease's spec.leaseTransitions (0 if unset).
func transitionsOf(l *coordinationv1.Lease) int32 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}
