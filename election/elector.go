package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// Errors returned by Run when a term ends other than by cancellation.
var (
	// ErrLeadershipLost: the Lease could not be renewed within
	// RenewDeadline, or another contender holds it.
	ErrLeadershipLost = errors.New("election: leadership lost")
	// ErrHandedOver: spec.preferredHolder named another contender, and
	// this one released the Lease to it.
	ErrHandedOver = errors.New("election: leadership handed over to the preferred holder")
)

// Why a term was lost: the cause (context.Cause) of the ctx given to
// OnStartedLeading when it is cancelled for a loss. Each is an
// ErrLeadershipLost. After ErrRenewDeadlinePassed a successor may start
// LeaseDuration - RenewDeadline later at the earliest; after
// ErrLeaseHeldByAnother one may already have.
var (
	ErrRenewDeadlinePassed = fmt.Errorf("%w: no renewal succeeded within the renew deadline", ErrLeadershipLost)
	ErrLeaseHeldByAnother  = fmt.Errorf("%w: the lease is held by another", ErrLeadershipLost)
)

// Elector campaigns for one Lease. Create it with New; call Run (or
// Observe) from one goroutine at a time.
type Elector struct {
	cfg             Config
	leases          coordinationv1client.LeaseInterface
	clock           clock.WithTicker
	log             *slog.Logger
	durationSeconds int32

	running atomic.Bool

	mu        sync.Mutex
	obs       observation   // guarded by mu
	obsRV     string        // resourceVersion of obs (also for a missing Lease); guarded by mu
	changed   chan struct{} // closed when obs changes; guarded by mu
	leader    string        // last observed holder; guarded by mu
	notes     []string      // holders not yet given to OnNewLeader; guarded by mu
	noteReady chan struct{} // signals notes, capacity 1
	term      *Term         // the current term, nil when not leading; guarded by mu

	// lastToken is the fencing token of this Elector's latest term (-1
	// before the first); only Run's goroutine uses it.
	lastToken int64
}

// New validates cfg, fills in defaults, and returns an Elector.
func New(cfg Config) (*Elector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Elector{
		cfg:             cfg,
		leases:          cfg.Client.Leases(cfg.Namespace),
		clock:           cfg.Clock,
		log:             cfg.Logger.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity),
		durationSeconds: int32(cfg.LeaseDuration / time.Second),
		changed:         make(chan struct{}),
		noteReady:       make(chan struct{}, 1),
		lastToken:       -1,
	}, nil
}

// IsLeader reports whether this Elector is in a term whose
// OnStartedLeading ctx has not been cancelled.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term != nil
}

// Term returns the current term, and false when not leading.
func (e *Elector) Term() (Term, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil {
		return Term{}, false
	}
	return *e.term, true
}

// Leader returns the holder identity last observed ("" for none, or
// before the Lease has been read).
func (e *Elector) Leader() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader
}

// Observe follows the Lease without campaigning, calling OnNewLeader on
// every change of holder, until ctx ends. It returns nil then.
func (e *Elector) Observe(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("election: Run or Observe is already running")
	}
	defer e.running.Store(false)
	stop := e.startBackground(ctx)
	<-ctx.Done()
	stop()
	return nil
}

// Run campaigns for the Lease and leads for one term. It returns nil when
// ctx ends (after the term, if one had started, has wound down),
// ErrLeadershipLost or ErrHandedOver when the term ends otherwise, or an
// error for a Config unfit to run. Run returns only once OnStartedLeading
// has returned; it may be called again afterwards to campaign for a new
// term.
func (e *Elector) Run(ctx context.Context) error {
	if e.cfg.Callbacks.OnStartedLeading == nil {
		return errors.New("election: Callbacks.OnStartedLeading must be set to Run")
	}
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("election: Run or Observe is already running")
	}
	defer e.running.Store(false)
	// The watch outlives ctx: a leader winding down keeps renewing.
	stop := e.startBackground(context.WithoutCancel(ctx))
	defer stop()
	term, sent, err := e.campaign(ctx)
	if err != nil {
		return nil // ctx ended before a term began
	}
	return e.lead(ctx, term, sent)
}

// startBackground starts the watch and the OnNewLeader delivery; the
// returned func stops them and waits for them to exit.
func (e *Elector) startBackground(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { e.watchLoop(ctx) })
	wg.Go(func() { e.notifyLoop(ctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// campaign waits until decide says to take the Lease and a take succeeds.
// It returns the new term and the time its acquiring request was sent, or
// ctx's error.
func (e *Elector) campaign(ctx context.Context) (Term, time.Time, error) {
	e.log.Info("campaigning")
	var (
		notBefore time.Time // after a failure, wait RetryPeriod
		conflicts int
	)
	for {
		if err := ctx.Err(); err != nil {
			return Term{}, time.Time{}, err
		}
		obs, changed := e.snapshot()
		now := e.clock.Now()
		d := e.decide(obs, now)
		if d.act != actWait && now.Before(notBefore) {
			d = decision{act: actWait, at: notBefore, why: "backing off after a failure"}
		}
		if d.act != actWait {
			e.log.Debug("taking lease", "action", d.act, "why", d.why)
			// A take in flight is not abandoned when ctx ends: the server
			// could still write it after a read had found the Lease free,
			// leaving it to name a contender that is gone. Its answer says
			// whether there is a Lease to give back.
			term, sent, err := e.acquire(context.WithoutCancel(ctx), obs, d.act)
			switch {
			case err == nil && ctx.Err() != nil:
				// Taken as ctx ended: no term begins.
				if e.cfg.ReleaseOnCancel {
					e.release(context.WithoutCancel(ctx))
				}
				return Term{}, time.Time{}, ctx.Err()
			case err == nil && e.clock.Since(sent) < e.cfg.RenewDeadline:
				return term, sent, nil
			case err == nil:
				// Acknowledged too late to lead safely; the record names
				// this identity and expires like anyone's.
				e.log.Warn("lease acquired after renewDeadline, not leading")
				notBefore = e.clock.Now().Add(e.cfg.RetryPeriod)
			case ctx.Err() != nil:
				// Unanswered within its timeout, say: it may yet be written.
				if e.cfg.ReleaseOnCancel {
					e.releaseUnanswered(context.WithoutCancel(ctx))
				}
				return Term{}, time.Time{}, ctx.Err()
			case (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && conflicts < 3:
				// Someone wrote first: read what they wrote and decide again.
				conflicts++
				e.log.Debug("lease changed under us", "err", err)
				if _, err := e.read(ctx); err != nil {
					notBefore = e.clock.Now().Add(e.cfg.RetryPeriod)
				}
			default:
				e.log.Warn("taking lease failed", "action", d.act, "err", err)
				conflicts = 0
				notBefore = e.clock.Now().Add(e.cfg.RetryPeriod)
			}
			continue
		}
		conflicts = 0
		e.log.Debug("waiting", "why", d.why, "until", d.at)
		var timer clock.Timer
		var fire <-chan time.Time
		if !d.at.IsZero() {
			timer = e.clock.NewTimer(d.at.Sub(now))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// acquire creates or takes over the Lease observed as obs.
func (e *Elector) acquire(ctx context.Context, obs observation, act action) (Term, time.Time, error) {
	rctx, cancel := e.requestContext(ctx, e.cfg.RenewDeadline)
	defer cancel()
	sent := e.clock.Now()
	var (
		got *coordinationv1.Lease
		err error
	)
	switch act {
	case actCreate:
		got, err = e.leases.Create(rctx, createRecord(e.cfg.Namespace, e.cfg.Name, e.cfg.Identity, e.durationSeconds, sent), metav1.CreateOptions{})
	case actConfirm:
		got, err = e.leases.Update(rctx, confirmRecord(obs.lease, e.cfg.Identity, e.durationSeconds, sent, e.lastToken), metav1.UpdateOptions{})
	default:
		got, err = e.leases.Update(rctx, acquireRecord(obs.lease, e.cfg.Identity, e.durationSeconds, sent), metav1.UpdateOptions{})
	}
	if err != nil {
		return Term{}, time.Time{}, cutOff(rctx, err)
	}
	e.setObserved(got, got.ResourceVersion)
	return Term{
		Identity:     e.cfg.Identity,
		FencingToken: int64(transitionsOf(got)),
		AcquiredAt:   sent,
	}, sent, nil
}

// renewResult is the outcome of one renewal request.
type renewResult struct {
	sent  time.Time
	lease *coordinationv1.Lease // the renewed Lease, on success
	fresh *coordinationv1.Lease // the Lease read after a conflict
	err   error
}

// lead runs one term that began with a request sent at sent: it starts
// OnStartedLeading, renews every RetryPeriod, and ends the term
//   - at once, when leadership may be lost: no renewal sent in the last
//     RenewDeadline has succeeded, or the Lease names another holder;
//   - gracefully, when ctx ends or spec.preferredHolder names another
//     contender: OnStartedLeading's ctx is cancelled, the Lease is still
//     renewed until OnStartedLeading returns, then released (always for a
//     handover, with ReleaseOnCancel when ctx ended).
func (e *Elector) lead(ctx context.Context, term Term, sent time.Time) error {
	leadCtx, cancelLead := context.WithCancelCause(ctx)
	defer cancelLead(nil)
	e.mu.Lock()
	e.term = &term
	e.mu.Unlock()
	e.lastToken = term.FencingToken
	e.log.Info("started leading", "fencingToken", term.FencingToken)

	callbackDone := make(chan struct{})
	go func() {
		defer close(callbackDone)
		e.cfg.Callbacks.OnStartedLeading(leadCtx, term)
	}()

	// Renewals go on while a cancelled ctx winds down.
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()

	var (
		validUntil     = sent.Add(e.cfg.RenewDeadline)
		nextRenew      = sent.Add(e.cfg.RetryPeriod)
		results        = make(chan renewResult, 1)
		inflight       bool
		stopping       bool // leadCtx cancelled on purpose, Lease still held
		release        bool
		lost           bool
		callbackReturn bool
		result         error
	)
	endTerm := func(cause error) {
		e.mu.Lock()
		e.term = nil
		e.mu.Unlock()
		cancelLead(cause)
	}
	stop := func(reason error, rel bool, why string) {
		stopping, result, release = true, reason, rel
		endTerm(nil)
		e.log.Info("stopping leading", "why", why, "release", rel)
	}
	// A watchdog ends the term at the renew deadline apart from this loop,
	// so that nothing the loop waits on (a log line to a pipe nobody reads)
	// can keep the guarded work running past it.
	var watched atomic.Pointer[time.Time]
	first := validUntil
	watched.Store(&first)
	go e.watchdog(leadCtx, &watched, func() { endTerm(ErrRenewDeadlinePassed) })
	for {
		now := e.clock.Now()
		obs, changed := e.snapshot()
		// The term ends before anything is logged: a logger that blocks (a
		// full pipe) must not keep the guarded work running.
		if !now.Before(validUntil) {
			endTerm(ErrRenewDeadlinePassed)
			e.log.Warn("leadership may be lost: no renewal succeeded within renewDeadline", "lastValidUntil", validUntil)
			lost = true
		} else if h := holderOf(obs.lease); h != e.cfg.Identity {
			endTerm(ErrLeaseHeldByAnother)
			e.log.Warn("leadership lost: lease now held by another", "holder", h, "exists", obs.lease != nil)
			lost = true
		}
		if lost {
			result = ErrLeadershipLost
			break
		}
		if !stopping {
			if p := preferredOf(obs.lease); p != "" && p != e.cfg.Identity {
				stop(ErrHandedOver, true, "preferred holder is "+p)
			} else if ctx.Err() != nil {
				stop(nil, e.cfg.ReleaseOnCancel, "context ended")
			}
		}
		if stopping && callbackReturn && !inflight {
			break
		}
		if !inflight && !now.Before(nextRenew) {
			inflight = true
			base, until := obs.lease.DeepCopy(), validUntil
			go func() { results <- e.renew(reqCtx, base, now, until) }()
		}

		deadline := e.clock.NewTimer(validUntil.Sub(now))
		var renewTimer clock.Timer
		var renewC <-chan time.Time
		if !inflight {
			renewTimer = e.clock.NewTimer(nextRenew.Sub(now))
			renewC = renewTimer.C()
		}
		var done, cb <-chan struct{}
		if !stopping {
			done = ctx.Done()
		}
		if !callbackReturn {
			cb = callbackDone
		}
		select {
		case <-deadline.C():
		case <-renewC:
		case <-changed:
		case <-done:
		case <-cb:
			callbackReturn = true
		case r := <-results:
			inflight = false
			switch {
			case r.err == nil:
				e.setObserved(r.lease, r.lease.ResourceVersion)
				if v := r.sent.Add(e.cfg.RenewDeadline); v.After(validUntil) {
					validUntil = v
					watched.Store(&v)
				}
				nextRenew = r.sent.Add(e.cfg.RetryPeriod)
			case r.fresh != nil:
				// Changed under us (a label, preferredHolder, or a new
				// holder): look at it above, and retry at once if still ours.
				e.setObserved(r.fresh, r.fresh.ResourceVersion)
				nextRenew = r.sent
			default:
				e.log.Warn("renewing lease failed", "err", r.err)
				nextRenew = r.sent.Add(e.cfg.RetryPeriod)
			}
		}
		deadline.Stop()
		if renewTimer != nil {
			renewTimer.Stop()
		}
	}

	if inflight {
		if lost {
			cancelReqs()
		}
		if r := <-results; r.err == nil && !lost {
			e.setObserved(r.lease, r.lease.ResourceVersion)
		}
	}
	if !callbackReturn {
		<-callbackDone
	}
	if release && !lost {
		e.release(context.WithoutCancel(ctx))
	}
	e.log.Info("stopped leading", "fencingToken", term.FencingToken, "result", result)
	if e.cfg.Callbacks.OnStoppedLeading != nil {
		e.cfg.Callbacks.OnStoppedLeading()
	}
	return result
}

// watchdog calls expire once the clock reaches *deadline (which may move
// later meanwhile), unless ctx ends first.
func (e *Elector) watchdog(ctx context.Context, deadline *atomic.Pointer[time.Time], expire func()) {
	t := e.clock.NewTimer(deadline.Load().Sub(e.clock.Now()))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if left := deadline.Load().Sub(e.clock.Now()); left > 0 {
			t.Reset(left)
			continue
		}
		expire()
		return
	}
}

// renew sends one renewal of base, giving up at validUntil.
func (e *Elector) renew(ctx context.Context, base *coordinationv1.Lease, sent, validUntil time.Time) renewResult {
	rctx, cancel := e.requestContext(ctx, validUntil.Sub(sent))
	defer cancel()
	got, err := e.leases.Update(rctx, renewRecord(base, e.cfg.Identity, e.durationSeconds, sent), metav1.UpdateOptions{})
	if err == nil {
		return renewResult{sent: sent, lease: got}
	}
	r := renewResult{sent: sent, err: cutOff(rctx, err)}
	if apierrors.IsConflict(err) {
		if fresh, gerr := e.leases.Get(rctx, e.cfg.Name, metav1.GetOptions{}); gerr == nil {
			r.fresh = fresh
		}
	}
	return r
}

// release gives the Lease up if it still names this identity, retrying on
// conflict (with a renewal that raced it, or a metadata change) for at most
// RenewDeadline.
func (e *Elector) release(ctx context.Context) {
	ctx, cancel := e.contextFor(ctx, e.cfg.RenewDeadline)
	defer cancel()
	obs, _ := e.snapshot()
	cur := obs.lease
	for range 5 {
		if holderOf(cur) != e.cfg.Identity {
			return
		}
		got, err := e.leases.Update(ctx, releaseRecord(cur, e.clock.Now()), metav1.UpdateOptions{})
		if err == nil {
			e.setObserved(got, got.ResourceVersion)
			e.log.Info("released lease")
			return
		}
		if !apierrors.IsConflict(err) {
			e.log.Warn("releasing lease failed", "err", err)
			return
		}
		if cur, err = e.leases.Get(ctx, e.cfg.Name, metav1.GetOptions{}); err != nil {
			e.log.Warn("releasing lease failed", "err", err)
			return
		}
	}
}

// releaseUnanswered gives the Lease up after a take left unanswered (its
// timeout, a broken connection) as ctx ended: the server may have written
// it all the same, and a Lease naming a contender that is gone would keep
// the others waiting for a whole leaseDurationSeconds. No term began, so
// nothing is guarded by it.
func (e *Elector) releaseUnanswered(ctx context.Context) {
	rctx, cancel := e.requestContext(ctx, e.cfg.RenewDeadline)
	got, err := e.leases.Get(rctx, e.cfg.Name, metav1.GetOptions{})
	cancel()
	if err != nil || holderOf(got) != e.cfg.Identity {
		return
	}
	e.setObserved(got, got.ResourceVersion)
	e.release(ctx)
}

// requestContext is contextFor for one request, bounded by RequestTimeout
// too when it is set.
func (e *Elector) requestContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if t := e.cfg.RequestTimeout; t > 0 && t < d {
		d = t
	}
	return e.contextFor(ctx, d)
}

// contextFor returns a child of ctx cancelled after d on e's clock.
func (e *Elector) contextFor(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := e.clock.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			// Its cause says a deadline passed, not that the caller gave
			// up: a client that fails over (leasehold elect --server)
			// then moves on from a server that did not answer in time.
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// cutOff says of a request that the deadline of rctx (from contextFor) cut
// off that it went unanswered: client-go reports it only as the context's
// cancellation, which reads as if the caller had given up.
func cutOff(rctx context.Context, err error) error {
	if err != nil && errors.Is(err, context.Canceled) && context.Cause(rctx) == context.DeadlineExceeded {
		return fmt.Errorf("no answer in time: %w", err)
	}
	return err
}

// sleep waits d on e's clock, or until ctx ends.
func (e *Elector) sleep(ctx context.Context, d time.Duration) {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}
