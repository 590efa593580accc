// Package election elects one leader among contenders that share a
// coordination.k8s.io/v1 Lease, on a leasehold server or on Kubernetes.
//
// It has the shape of client-go's tools/leaderelection: a Config with
// callbacks, New, and Run(ctx). It writes the same record as client-go's
// LeaseLock, so leasehold contenders and client-go contenders can compete
// for one Lease and never lead at the same time; it differs where that
// makes takeover faster or leadership easier to use safely:
//
//   - contenders watch the Lease instead of polling it, so a standby takes
//     over a released Lease within one watch event and one write, not after
//     up to 2.2 × RetryPeriod (client-go's poll, RetryPeriod with a jitter
//     factor of 1.2);
//   - every term carries a fencing token that strictly increases;
//   - OnStartedLeading's ctx is cancelled by a deadline counted from when
//     the last successful renewal was sent, not from a polling loop;
//   - the Lease is held, and renewed, until OnStartedLeading has returned:
//     it is never released while the guarded work may still be running;
//   - setting spec.preferredHolder moves leadership gracefully.
//
// # Use
//
//	e, err := election.New(election.Config{
//		Client:    clientset.CoordinationV1(),
//		Namespace: "default",
//		Name:      "nightly-report",
//		Identity:  hostname + "_" + uuid,
//		ReleaseOnCancel: true,
//		Callbacks: election.Callbacks{
//			OnStartedLeading: func(ctx context.Context, term election.Term) {
//				work(ctx, term.FencingToken) // must stop when ctx is done
//			},
//		},
//	})
//	...
//	err = e.Run(ctx)
//
// Run campaigns, leads for one term, and returns: nil once ctx has ended,
// ErrLeadershipLost if the Lease could not be kept, ErrHandedOver after a
// handover to a preferred holder. Call it again to campaign for another
// term. Observe follows the Lease without campaigning, reporting each new
// holder to OnNewLeader. IsLeader, Leader and Term report the state.
//
// # The record
//
// The Lease's spec is written exactly as client-go's LeaseLock writes it:
//
//   - acquiring: holderIdentity = Identity, leaseDurationSeconds =
//     LeaseDuration, acquireTime = renewTime = now, leaseTransitions + 1
//     (a created Lease starts at 0, as client-go creates it);
//   - renewing: renewTime = now, everything else kept;
//   - releasing: holderIdentity = "", leaseDurationSeconds = 1, acquireTime
//     = renewTime = now, leaseTransitions kept.
//
// Every write is a compare-and-swap on the resourceVersion last seen, so
// two contenders that decide to take the Lease at once cannot both succeed.
// Unlike client-go, which rewrites the whole spec, the fields this package
// does not own (strategy, preferredHolder, labels) are kept, except that an
// acquisition clears preferredHolder.
//
// # Timing and safety
//
// Times in the Lease (renewTime, acquireTime) are informational and are
// never compared with a local clock. A contender notes, on its own
// monotonic clock, the moment it saw the Lease change (a new
// resourceVersion or spec); it considers the Lease expired
// leaseDurationSeconds after that moment, and only then tries to take it.
// Clock offsets between machines therefore do no harm; what is assumed is
// that clock rates differ by less than LeaseDuration/RenewDeadline (1.5
// with the defaults).
//
// The leader renews every RetryPeriod. A renewal is valid from when its
// request was sent, not from when it was acknowledged: if no renewal sent
// in the last RenewDeadline has succeeded, OnStartedLeading's ctx is
// cancelled, at (send time of the last successful renewal) + RenewDeadline,
// even while a request is still outstanding. The argument that nobody else
// can lead before that: any contender that takes the Lease does so with a
// compare-and-swap on the newest version, so it has seen the leader's last
// write; it saw it no earlier than that write was sent, and waits
// LeaseDuration from then, which is longer than RenewDeadline. A renewal
// acknowledged late only makes the leader stop earlier than needed. The
// same holds against client-go contenders, which judge expiry the same way.
// (A client-go leader, in turn, may keep leading up to RetryPeriod +
// RenewDeadline after its last successful renewal; keep that below
// LeaseDuration, as the defaults do, when client-go contenders take part.
// Also, a client-go elector with ReleaseOnCancel releases the Lease after a
// failed renewal before it cancels its OnStartedLeading ctx, so its
// successor may start while its work still runs; this package never
// releases after a lost term.)
//
// A term ends in one of two ways:
//
//   - Leadership may be lost: the renew deadline passed, or the Lease was
//     seen held by another or deleted. OnStartedLeading's ctx is cancelled
//     at once and nothing more is written. Run returns ErrLeadershipLost.
//   - Leadership is given up: Run's ctx ended, or spec.preferredHolder
//     names another contender. OnStartedLeading's ctx is cancelled, but the
//     Lease stays held and renewed until OnStartedLeading returns (so a
//     successor cannot start while the work is still stopping); then it is
//     released, always for a handover, and on cancellation if
//     ReleaseOnCancel is set. Run returns nil or ErrHandedOver.
//
// In both cases Run returns only after OnStartedLeading has returned and
// OnStoppedLeading has been called. IsLeader turns false, and Term reports
// no term, as soon as OnStartedLeading's ctx is cancelled.
//
// # Watching
//
// Each Elector reads the Lease, then watches it (fieldSelector
// metadata.name=<name>) from that resourceVersion, resuming from the last
// resourceVersion seen when the watch ends and reading again when the
// server answers 410 Gone. While a watch cannot be opened (for example
// without the list and watch verbs) it reads the Lease every RetryPeriod,
// as client-go does. Expected takeover times:
//
//   - after a release: one watch event and one write;
//   - after a leader dies: LeaseDuration after the standby saw its last
//     renewal, plus one write;
//   - a contender that cannot watch: up to RetryPeriod more.
//
// # Fencing tokens
//
// Term.FencingToken is the Lease's spec.leaseTransitions as written by the
// acquisition that began the term. This package increments it on every
// acquisition: from another holder, of a released (empty) Lease, and of a
// Lease whose record still names this very identity (a previous
// incarnation). Together with the compare-and-swap, this makes tokens
// strictly increase across terms, so a downstream system that remembers
// the highest token it has seen and rejects writes carrying a lower one
// cannot be written to by a deposed leader once its successor has written.
// Limits: client-go's elector does not increment when it re-acquires a
// Lease whose record names its own identity, so give every process a
// unique identity; and deleting the Lease restarts the count at 0.
//
// # Preferred holder
//
// Setting spec.preferredHolder to another contender's identity makes the
// leader hand over. The API accepts preferredHolder only together with a
// strategy, so an operator sets both:
//
//	kubectl patch lease nightly-report --type merge \
//	  -p '{"spec":{"strategy":"OldestEmulationVersion","preferredHolder":"worker-2"}}'
//
// The leader then cancels
// OnStartedLeading's ctx, keeps renewing until that returns, then releases
// the Lease, keeping preferredHolder. The preferred contender, watching,
// takes it at once and clears preferredHolder. Other leasehold contenders
// leave a Lease released to someone else alone until the released record
// (leaseDurationSeconds 1) has expired, so a preferred holder that does not
// exist delays the next leader by about a second. client-go contenders
// ignore preferredHolder and may win the race for a released Lease.
// preferredHolder naming the current leader changes nothing.
//
// # Callbacks
//
// OnStartedLeading runs in its own goroutine for the length of a term.
// OnStoppedLeading is called after each term, never when Run returns
// without having led (client-go calls it then too). OnNewLeader is called,
// in order and from a single goroutine, for every change of holder this
// Elector observes, including its own acquisition and "" after a release.
//
// # Coordinated leader election
//
// In coordinated leader election (Kubernetes' KEP-4355) contenders do not
// race for the Lease: a coordinator (leasehold serve runs one) picks the
// holder among the candidates that have published a LeaseCandidate
// (coordination.k8s.io/v1beta1) for the Lease, preferring the oldest
// emulation version, then the oldest binary version, then the oldest
// candidate, so that during a rolling upgrade the old version keeps leading
// until every replica runs the new one.
//
// A process takes part by running a Candidate and an Elector with
// Config.Coordinated set, both with the same identity:
//
//	cand, _ := election.NewCandidate(election.CandidateConfig{
//		Client: clientset.CoordinationV1beta1(), Namespace: "default",
//		LeaseName: "nightly-report", Identity: id, BinaryVersion: "1.4.2",
//	})
//	go cand.Run(ctx)
//	e, _ := election.New(election.Config{..., Identity: id, Coordinated: true})
//
// The Candidate creates the LeaseCandidate named after the identity,
// refreshes its renewTime every RenewInterval, renews at once when the
// coordinator pings it (sets a new pingTime) before an election, and
// deletes it when it stops. The Elector waits until the coordinator writes
// its identity as the Lease's holder, confirms with a compare-and-swap
// renewal, and from then on leads exactly as described above; when the
// coordinator finds a better candidate it sets preferredHolder, and the
// leader hands over gracefully. The fencing token is the leaseTransitions
// the coordinator wrote (incremented on every assignment).
package election
