package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1beta1client "k8s.io/client-go/kubernetes/typed/coordination/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Defaults used when the corresponding CandidateConfig field is zero.
const (
	// DefaultCandidateRenewInterval is how often a Candidate refreshes its
	// LeaseCandidate's renewTime when nobody asks, as client-go's
	// candidates do. Coordinators collect candidates that have not
	// renewed for 30 minutes.
	DefaultCandidateRenewInterval = 5 * time.Minute
	// DefaultCandidateRetryPeriod is the wait after a failed request.
	DefaultCandidateRetryPeriod = 2 * time.Second
)

// CandidateConfig configures a Candidate. Zero values mean the documented
// defaults.
type CandidateConfig struct {
	// Client reaches the coordination.k8s.io/v1beta1 API, for example
	// clientset.CoordinationV1beta1(). Required. The identity needs get,
	// create, update, delete, list and watch on leasecandidates.
	Client coordinationv1beta1client.LeaseCandidatesGetter
	// Namespace is the namespace of the Lease and of the LeaseCandidate.
	// Required.
	Namespace string
	// LeaseName names the Lease this candidate wants to hold
	// (spec.leaseName). Required.
	LeaseName string
	// Identity is the LeaseCandidate's name, and the holder identity the
	// coordinator writes to the Lease when it elects this candidate (as
	// Kubernetes' coordinator does), so it must equal the Identity of the
	// Elector run beside it. Required; it must be a valid LeaseCandidate
	// name (letters, digits, '-', '_' and '.'), and unique among the
	// candidates of the namespace.
	Identity string
	// BinaryVersion is the version of the program (semantic version,
	// e.g. 1.4.2). Required.
	BinaryVersion string
	// EmulationVersion is the version whose behaviour the program
	// provides; the coordinator prefers the lowest. Default BinaryVersion;
	// it may not exceed BinaryVersion.
	EmulationVersion string
	// RenewInterval is how often renewTime is refreshed without being
	// asked. Default 5m.
	RenewInterval time.Duration
	// RetryPeriod is the wait after a failed request. Default 2s.
	RetryPeriod time.Duration
	// Clock measures and waits. Default clock.RealClock{}.
	Clock clock.WithTicker
	// Logger receives the Candidate's logs. Default: discard.
	Logger *slog.Logger
}

func (cfg CandidateConfig) withDefaults() CandidateConfig {
	if cfg.EmulationVersion == "" {
		cfg.EmulationVersion = cfg.BinaryVersion
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = DefaultCandidateRenewInterval
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultCandidateRetryPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

func (cfg CandidateConfig) validate() error {
	errs := validateLeaseRef(cfg.Client != nil, cfg.Namespace, "leaseName", cfg.LeaseName)
	if cfg.Identity == "" {
		errs = append(errs, errors.New("identity must not be empty"))
	} else if msgs := validation.IsConfigMapKey(cfg.Identity); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("identity %q is not a valid LeaseCandidate name: %s", cfg.Identity, strings.Join(msgs, "; ")))
	}
	var bv, ev *version.Version
	var err error
	if cfg.BinaryVersion == "" {
		errs = append(errs, errors.New("binaryVersion must be set"))
	} else if bv, err = version.ParseSemantic(cfg.BinaryVersion); err != nil {
		errs = append(errs, fmt.Errorf("binaryVersion: %w", err))
	}
	if cfg.EmulationVersion != "" {
		if ev, err = version.ParseSemantic(cfg.EmulationVersion); err != nil {
			errs = append(errs, fmt.Errorf("emulationVersion: %w", err))
		}
	}
	if bv != nil && ev != nil && bv.LessThan(ev) {
		errs = append(errs, fmt.Errorf("emulationVersion %s must not exceed binaryVersion %s", cfg.EmulationVersion, cfg.BinaryVersion))
	}
	if cfg.RenewInterval < 0 || cfg.RetryPeriod < 0 {
		errs = append(errs, errors.New("renewInterval and retryPeriod must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("election: invalid candidate config: %w", err)
	}
	return nil
}

// Candidate publishes and maintains this process's LeaseCandidate
// (coordination.k8s.io/v1beta1) for coordinated leader election: it creates
// it, refreshes spec.renewTime every RenewInterval, answers a coordinator's
// ping (a new spec.pingTime) with a renewal at once, recreates the object if
// it is deleted while running, and deletes it when Run ends. Create it with
// NewCandidate.
type Candidate struct {
	cfg     CandidateConfig
	client  coordinationv1beta1client.LeaseCandidateInterface
	log     *slog.Logger
	running atomic.Bool
}

// NewCandidate validates cfg, fills in defaults, and returns a Candidate.
func NewCandidate(cfg CandidateConfig) (*Candidate, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Candidate{
		cfg:    cfg,
		client: cfg.Client.LeaseCandidates(cfg.Namespace),
		log:    cfg.Logger.With("leaseCandidate", cfg.Namespace+"/"+cfg.Identity, "lease", cfg.LeaseName),
	}, nil
}

// candidateState is what Run knows about the LeaseCandidate.
type candidateState struct {
	// cur is the newest version seen; nil: read it (or create it) first.
	cur *coordinationv1beta1.LeaseCandidate
	// answered is the spec.pingTime carried by this Candidate's latest
	// write (nil for none); answeredKnown is false before the first write.
	answered      *metav1.MicroTime
	answeredKnown bool
	// nextRenew is when to refresh renewTime unasked (zero: at once).
	nextRenew time.Time
	// uid is the UID of the object this Candidate last wrote ("": none),
	// the only one it deletes.
	uid types.UID
}

// Run maintains the LeaseCandidate until ctx ends, then deletes it and
// returns nil. It returns an error only when a LeaseCandidate of the same
// name exists for another Lease.
func (c *Candidate) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("election: Candidate.Run is already running")
	}
	defer c.running.Store(false)
	st := &candidateState{}
	var (
		w       watch.Interface
		retryAt time.Time // after a failure: do nothing before
		pollAt  time.Time // without a watch: read again at
	)
	defer func() {
		if w != nil {
			w.Stop()
		}
		c.remove(context.WithoutCancel(ctx), st.uid)
	}()
	for ctx.Err() == nil {
		now := c.cfg.Clock.Now()
		if w == nil && !pollAt.IsZero() && !now.Before(pollAt) {
			st.cur, pollAt = nil, time.Time{}
		}
		if !now.Before(retryAt) {
			if err := c.step(ctx, st, now); err != nil {
				var wrong *wrongLeaseError
				if errors.As(err, &wrong) {
					return err
				}
				if ctx.Err() == nil {
					c.log.Warn("maintaining lease candidate failed", "err", err)
				}
				retryAt = now.Add(c.cfg.RetryPeriod)
			}
		}
		if w == nil && st.cur != nil && pollAt.IsZero() && !now.Before(retryAt) {
			var err error
			w, err = c.client.Watch(ctx, metav1.ListOptions{
				FieldSelector:   fields.OneTermEqualSelector("metadata.name", c.cfg.Identity).String(),
				ResourceVersion: st.cur.ResourceVersion,
			})
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("watching lease candidate failed, polling", "err", err)
				}
				w, pollAt = nil, now.Add(c.cfg.RetryPeriod)
			}
		}

		wake := st.nextRenew
		if st.cur == nil {
			wake = now
		}
		if now.Before(retryAt) && (wake.IsZero() || wake.Before(retryAt)) {
			wake = retryAt
		}
		if w == nil && !pollAt.IsZero() && (wake.IsZero() || pollAt.Before(wake)) {
			wake = pollAt
		}
		if wake.IsZero() {
			wake = now.Add(c.cfg.RenewInterval)
		}
		var events <-chan watch.Event
		if w != nil {
			events = w.ResultChan()
		}
		timer := c.cfg.Clock.NewTimer(max(wake.Sub(now), 0))
		select {
		case <-ctx.Done():
		case <-timer.C():
		case ev, ok := <-events:
			if !ok {
				// Read again before watching again, so that a server
				// that keeps closing watches is not hammered.
				w, pollAt = nil, now
				break
			}
			if restart := c.consume(st, ev); restart {
				w.Stop()
				w = nil
			}
		}
		timer.Stop()
	}
	return nil
}

// consume records one watch event; it reports whether the watch must be
// opened again.
func (c *Candidate) consume(st *candidateState, ev watch.Event) bool {
	switch ev.Type {
	case watch.Added, watch.Modified:
		lc, ok := ev.Object.(*coordinationv1beta1.LeaseCandidate)
		if !ok || lc.Name != c.cfg.Identity {
			return false
		}
		if st.cur != nil && older(lc.ResourceVersion, st.cur.ResourceVersion) {
			return false // this Candidate's own write is newer
		}
		st.cur = lc
	case watch.Deleted:
		if lc, ok := ev.Object.(*coordinationv1beta1.LeaseCandidate); ok && lc.Name == c.cfg.Identity {
			c.log.Info("lease candidate was deleted; publishing it again")
			st.cur = nil
			return true
		}
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			c.log.Warn("lease candidate watch failed", "err", err)
		}
		st.cur = nil
		return true
	}
	return false
}

// wrongLeaseError: a LeaseCandidate of this name belongs to another Lease.
type wrongLeaseError struct{ name, lease string }

func (e *wrongLeaseError) Error() string {
	return fmt.Sprintf("election: LeaseCandidate %q already exists for lease %q", e.name, e.lease)
}

// step reads or creates the LeaseCandidate when needed, and renews it when
// it is due, asked for (pinged) or out of date.
func (c *Candidate) step(ctx context.Context, st *candidateState, now time.Time) error {
	for attempt := 0; ; attempt++ {
		if st.cur == nil {
			got, err := c.client.Get(ctx, c.cfg.Identity, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				created, err := c.client.Create(ctx, c.newObject(now), metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("creating: %w", err)
				}
				c.log.Info("published lease candidate")
				st.cur, st.answered, st.answeredKnown, st.uid = created, nil, true, created.UID
				st.nextRenew = now.Add(c.cfg.RenewInterval)
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading: %w", err)
			}
			st.cur = got
		}
		if st.cur.Spec.LeaseName != c.cfg.LeaseName {
			return &wrongLeaseError{name: c.cfg.Identity, lease: st.cur.Spec.LeaseName}
		}
		why := c.renewReason(st, now)
		if why == "" {
			return nil
		}
		upd := st.cur.DeepCopy()
		upd.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
		upd.Spec.BinaryVersion = c.cfg.BinaryVersion
		upd.Spec.EmulationVersion = c.cfg.EmulationVersion
		upd.Spec.Strategy = coordinationv1.OldestEmulationVersion
		got, err := c.client.Update(ctx, upd, metav1.UpdateOptions{})
		if err == nil {
			c.log.Debug("renewed lease candidate", "why", why)
			st.cur, st.answered, st.answeredKnown, st.uid = got, got.Spec.PingTime.DeepCopy(), true, got.UID
			st.nextRenew = now.Add(c.cfg.RenewInterval)
			return nil
		}
		st.cur = nil
		if (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) && attempt < 3 {
			continue // changed (pinged?) or deleted under us: read again
		}
		return fmt.Errorf("renewing: %w", err)
	}
}

// renewReason says why the LeaseCandidate must be renewed now ("": it
// need not be).
func (c *Candidate) renewReason(st *candidateState, now time.Time) string {
	s := st.cur.Spec
	switch {
	case s.BinaryVersion != c.cfg.BinaryVersion || s.EmulationVersion != c.cfg.EmulationVersion || s.Strategy != coordinationv1.OldestEmulationVersion:
		return "versions changed"
	case pinged(st):
		return "pinged by the coordinator"
	case !now.Before(st.nextRenew):
		return "renew interval passed"
	}
	return ""
}

// pinged reports whether the coordinator has asked for a renewal that this
// Candidate has not given yet. After its first write a Candidate answers
// every pingTime other than the one it last carried, without comparing
// clocks; before that, it answers a pingTime later than renewTime, as
// client-go's candidates do.
func pinged(st *candidateState) bool {
	p := st.cur.Spec.PingTime
	if p == nil {
		return false
	}
	if st.answeredKnown {
		return !p.Equal(st.answered)
	}
	return st.cur.Spec.RenewTime == nil || p.After(st.cur.Spec.RenewTime.Time)
}

func (c *Candidate) newObject(now time.Time) *coordinationv1beta1.LeaseCandidate {
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: c.cfg.Identity},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        c.cfg.LeaseName,
			RenewTime:        ptr.To(metav1.NewMicroTime(now)),
			BinaryVersion:    c.cfg.BinaryVersion,
			EmulationVersion: c.cfg.EmulationVersion,
			Strategy:         coordinationv1.OldestEmulationVersion,
		},
	}
}

// remove deletes the LeaseCandidate this Candidate wrote last (uid; if
// it is still that object), so that the coordinator stops considering this
// process at once.
func (c *Candidate) remove(ctx context.Context, uid types.UID) {
	if uid == "" {
		return
	}
	ctx, cancel := clockContext(ctx, c.cfg.Clock, DefaultRenewDeadline)
	defer cancel()
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}}
	switch err := c.client.Delete(ctx, c.cfg.Identity, opts); {
	case err == nil:
		c.log.Info("withdrew lease candidate")
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		c.log.Warn("deleting lease candidate failed", "err", err)
	}
}

// clockContext returns a child of ctx cancelled after d on clk.
func clockContext(ctx context.Context, clk clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	t := clk.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// decide is the acquisition policy: decide's, or decideCoordinated's in
// coordinated election.
func (e *Elector) decide(o observation, now time.Time) decision {
	if e.cfg.Coordinated {
		return decideCoordinated(e.cfg.Identity, o)
	}
	return decide(e.cfg.Identity, o, now)
}

// decideCoordinated is the acquisition policy of a contender in
// coordinated election: it never takes the Lease; once the coordinator has
// written its identity as holder (and does not prefer another), it
// confirms with a compare-and-swap renewal, which starts the term. Expiry
// plays no part: the coordinator judges it, and the compare-and-swap fails
// if the coordinator has written since.
func decideCoordinated(self string, o observation) decision {
	switch {
	case !o.known:
		return decision{act: actWait, why: "lease not read yet"}
	case o.lease == nil:
		return decision{act: actWait, why: "waiting for the coordinator to create the lease"}
	}
	if h := holderOf(o.lease); h != self {
		return decision{act: actWait, why: fmt.Sprintf("lease held by %q; waiting to be elected", h)}
	}
	if p := preferredOf(o.lease); p != "" && p != self {
		return decision{act: actWait, why: fmt.Sprintf("lease is being handed to %q", p)}
	}
	return decision{act: actConfirm, why: "elected by the coordinator"}
}

// confirmRecord is the first renewal of a Lease that the coordinator
// assigned to self. The coordinator incremented leaseTransitions when it
// assigned it, so the count is kept, unless this Elector has already led a
// term with that token (the record still names it after a lost term): then
// it is incremented, so that tokens strictly increase, and acquireTime is
// now.
func confirmRecord(cur *coordinationv1.Lease, self string, durationSeconds int32, now time.Time, lastToken int64) *coordinationv1.Lease {
	l := renewRecord(cur, self, durationSeconds, now)
	if int64(transitionsOf(cur)) <= lastToken {
		l.Spec.LeaseTransitions = ptr.To(int32(lastToken + 1))
		l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
	}
	return l
}
