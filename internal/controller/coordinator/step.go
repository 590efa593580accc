package coordinator

import (
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// candidate is what the coordinator knows about one LeaseCandidate. All
// times are the coordinator's own, when it observed something; the times
// written in the object by its candidate are never compared with them.
type candidate struct {
	obj *coordinationv1beta1.LeaseCandidate
	// seenAt is when this coordinator first saw the object (at the start
	// of its run for objects that existed already).
	seenAt time.Time
	// renewedAt is when it saw the object created or its spec.renewTime
	// change; zero when it has not since its run started.
	renewedAt time.Time
	// pingedAt is when it last pinged the candidate (zero: never).
	pingedAt time.Time
}

// lastAlive is the last time the candidate is known to have been alive, or
// the start of observation if later.
func (c *candidate) lastAlive() time.Time {
	if c.renewedAt.After(c.seenAt) {
		return c.renewedAt
	}
	return c.seenAt
}

// staleAt is when the candidate is collected unless it renews.
func (c *candidate) staleAt(timeout time.Duration) time.Time {
	return c.lastAlive().Add(timeout)
}

// ignoredPing reports whether the candidate let a ping go unanswered for a
// whole election duration and has not renewed since.
func (c *candidate) ignoredPing(electionDuration time.Duration, now time.Time) bool {
	return !c.pingedAt.IsZero() && c.renewedAt.Before(c.pingedAt) && !now.Before(c.pingedAt.Add(electionDuration))
}

// election is the state of one Lease's election, as one step sees it.
type election struct {
	namespace, name string
	// lease is the Lease (nil when it does not exist); leaseSeenAt is when
	// the coordinator saw its spec change.
	lease       *coordinationv1.Lease
	leaseSeenAt time.Time
	// candidates are the LeaseCandidates naming this Lease.
	candidates []*candidate
	// round is when the current round of pings began (zero: none).
	round time.Time
}

// params are the coordinator's durations.
type params struct {
	electionDuration time.Duration
	leaseDuration    time.Duration
	candidateTimeout time.Duration
}

// plan is what one step decides.
type plan struct {
	// ping lists the candidates to ping (set spec.pingTime).
	ping []*candidate
	// round is the round of pings in progress after the step (zero: none).
	round time.Time
	// create or update is the Lease to write (at most one is set).
	create, update *coordinationv1.Lease
	// wake is when to step again if nothing changes (zero: only on a
	// change).
	wake time.Time
	// why explains the plan, for logs.
	why string
}

// step is the whole election policy for one Lease, a pure function of what
// the coordinator observed and the time. Like Kubernetes' coordinator it
//   - leaves the Lease alone while its holder renews it and is the best
//     candidate (or a better one has been asked to take over);
//   - when the Lease is missing, has no holder or has expired (no change
//     seen for leaseDurationSeconds, on the coordinator's clock), or when
//     a better candidate than the holder appears, starts a round: it pings
//     every candidate that has not renewed within the election duration
//     and waits until all have answered or the election duration has
//     passed;
//   - then elects, by OldestEmulationVersion, among the candidates that
//     answered: it writes the Lease for the winner (holder, duration,
//     acquireTime and renewTime now, leaseTransitions + 1, strategy), or,
//     while the holder still leads, sets preferredHolder to the winner so
//     that the holder hands over.
//
// Candidates that have not renewed for the candidate timeout take no part
// (they are collected). A better candidate that once ignored a ping does not
// start another round until it renews, so a dead candidate is not pinged
// over and over while the holder leads; nor, when no one leads, are
// candidates that all ignored the last ping.
func step(e election, p params, now time.Time) plan {
	var live []*candidate
	for _, c := range e.candidates {
		if now.Before(c.staleAt(p.candidateTimeout)) {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return plan{why: "no live candidates"}
	}
	strategy, err := strategyOf(objects(live))
	if err != nil {
		return plan{why: err.Error()}
	}
	if strategy != coordinationv1.OldestEmulationVersion {
		return plan{why: fmt.Sprintf("strategy %q is left to another coordinator", strategy)}
	}

	holder, preferred := holderOf(e.lease), preferredOf(e.lease)
	leaderless, expiresAt := true, time.Time{}
	if holder != "" {
		expiresAt = e.leaseSeenAt.Add(durationOf(e.lease))
		leaderless = !now.Before(expiresAt)
	}
	if !leaderless {
		var willing []*candidate
		for _, c := range live {
			if !c.ignoredPing(p.electionDuration, now) {
				willing = append(willing, c)
			}
		}
		b := best(objects(willing))
		switch {
		case b == nil:
			return plan{wake: expiresAt, why: fmt.Sprintf("%q leads; no eligible candidate", holder)}
		case b.Name == holder:
			return plan{wake: expiresAt, why: fmt.Sprintf("%q leads and is the best candidate", holder)}
		case b.Name == preferred:
			return plan{wake: expiresAt, why: fmt.Sprintf("%q leads and is handing over to %q", holder, preferred)}
		}
	}

	round := e.round
	if leaderless && round.IsZero() && !slices.ContainsFunc(live, func(c *candidate) bool { return !c.ignoredPing(p.electionDuration, now) }) {
		// As Kubernetes' coordinator: candidates that let the last ping go
		// unanswered are not pinged again until one of them renews, which
		// wakes the coordinator.
		return plan{why: "election: no candidate answered its last ping; waiting for one to renew"}
	}
	if round.IsZero() {
		var ping []*candidate
		for _, c := range live {
			if c.renewedAt.IsZero() || !now.Before(c.renewedAt.Add(p.electionDuration)) {
				ping = append(ping, c)
			}
		}
		if len(ping) > 0 {
			return plan{ping: ping, round: now, wake: now.Add(p.electionDuration), why: "election: pinging candidates"}
		}
		round = now // every candidate has just renewed: elect at once
	}
	answered := func(c *candidate) bool {
		return !c.renewedAt.IsZero() && !c.renewedAt.Before(round.Add(-p.electionDuration))
	}
	var voters []*candidate
	for _, c := range live {
		if answered(c) {
			voters = append(voters, c)
		} else if now.Before(round.Add(p.electionDuration)) {
			return plan{round: round, wake: round.Add(p.electionDuration), why: "election: waiting for candidates to answer"}
		}
	}
	w := best(objects(voters))
	switch {
	case w == nil && leaderless:
		return plan{wake: now, why: "election: no eligible candidate answered; pinging again"}
	case w == nil:
		return plan{wake: expiresAt, why: fmt.Sprintf("%q leads; no better candidate answered", holder)}
	case e.lease == nil:
		return plan{create: newLease(e.namespace, e.name, w.Name, p.leaseDuration, now), why: fmt.Sprintf("elected %q", w.Name)}
	case leaderless:
		return plan{update: assign(e.lease, w.Name, p.leaseDuration, now), why: fmt.Sprintf("elected %q", w.Name)}
	case w.Name == holder:
		return plan{wake: expiresAt, why: fmt.Sprintf("%q leads and is the best candidate that answered", holder)}
	case w.Name == preferred:
		return plan{wake: expiresAt, why: fmt.Sprintf("%q leads and is handing over to %q", holder, preferred)}
	}
	return plan{update: prefer(e.lease, w.Name), wake: expiresAt, why: fmt.Sprintf("asking %q to hand over to %q", holder, w.Name)}
}

func objects(cs []*candidate) []*coordinationv1beta1.LeaseCandidate {
	out := make([]*coordinationv1beta1.LeaseCandidate, len(cs))
	for i, c := range cs {
		out[i] = c.obj
	}
	return out
}

// newLease is the Lease created for its first elected holder:
// leaseTransitions 0, as a contender creating it would write.
func newLease(namespace, name, holder string, d time.Duration, now time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(int32(d / time.Second)),
			AcquireTime:          ptr.To(t),
			RenewTime:            ptr.To(t),
			LeaseTransitions:     ptr.To[int32](0),
			Strategy:             ptr.To(coordinationv1.OldestEmulationVersion),
		},
	}
}

// assign gives cur to holder: a new term, so leaseTransitions is
// incremented.
func assign(cur *coordinationv1.Lease, holder string, d time.Duration, now time.Time) *coordinationv1.Lease {
	l := cur.DeepCopy()
	t := metav1.NewMicroTime(now)
	var transitions int32
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions + 1
	}
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second))
	l.Spec.AcquireTime = ptr.To(t)
	l.Spec.RenewTime = ptr.To(t)
	l.Spec.LeaseTransitions = ptr.To(transitions)
	l.Spec.PreferredHolder = nil
	l.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
	return l
}

// prefer asks cur's holder to hand over to preferred. The API accepts
// preferredHolder only with a strategy.
func prefer(cur *coordinationv1.Lease, preferred string) *coordinationv1.Lease {
	l := cur.DeepCopy()
	l.Spec.PreferredHolder = ptr.To(preferred)
	l.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
	return l
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func preferredOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.PreferredHolder == nil {
		return ""
	}
	return *l.Spec.PreferredHolder
}

func durationOf(l *coordinationv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}
