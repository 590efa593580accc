// Package coordinator is leasehold's coordinated leader election
// controller (Kubernetes' KEP-4355): it elects the holder of a Lease among
// the contenders that have published a coordination.k8s.io/v1beta1
// LeaseCandidate for it, instead of letting them race, and collects
// candidates that have stopped renewing.
//
// # Model
//
// The coordinator watches every LeaseCandidate (through an informer) and
// every Lease except in kube-node-lease, whose node heartbeats are never
// coordinated (through a feed, which keeps no copy of its own); in
// leasehold serve both read the watch cache in process. Event handlers
// only record what was seen and when, on the coordinator's clock:
// when a Lease's spec last changed, when a candidate was first seen, last
// seen to renew (its spec.renewTime changed) and last pinged. One
// goroutine, woken by those handlers or by a timer, runs the election
// policy (step, a pure function) for every Lease name that has candidates,
// and carries out its plan: pings, Lease writes
// (compare-and-swap on the resourceVersion observed), deletions of stale
// candidates. Times written in objects by other machines are never compared
// with the coordinator's clock, so clock skew does no harm.
//
// An election for a Lease happens when it does not exist, has no holder, or
// has not been seen to change for its leaseDurationSeconds; or when a
// candidate better than the holder appears. The coordinator pings the
// candidates (sets spec.pingTime), waits up to ElectionDuration for them to
// renew, and picks among those that did by OldestEmulationVersion: the
// lowest emulationVersion, then the lowest binaryVersion, then the oldest
// LeaseCandidate, then the lowest name. The winner's LeaseCandidate name
// becomes spec.holderIdentity (with leaseDurationSeconds = LeaseDuration,
// acquireTime = renewTime = now, leaseTransitions + 1, strategy
// OldestEmulationVersion); the candidate's elector confirms by renewing. If
// the Lease still has a live holder, the winner is written as
// spec.preferredHolder instead, and the holder hands over gracefully.
//
// Run may be called again after it returns (once per term of leadership of
// the server's controllers), never concurrently.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1beta1informers "k8s.io/client-go/informers/coordination/v1beta1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/controller/feed"
	"github.com/leasehold/leasehold/internal/registry"
)

// UserName is the identity leasehold serve gives the coordinator.
const UserName = "system:serviceaccount:kube-system:leader-election-controller"

// Defaults used when the corresponding Config field is zero.
const (
	// DefaultElectionDuration is how long an election waits for pinged
	// candidates to answer (Kubernetes: 5 s).
	DefaultElectionDuration = 5 * time.Second
	// DefaultLeaseDuration is the leaseDurationSeconds written for an
	// elected holder, until it renews with its own.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultCandidateTimeout is how long a candidate may go without
	// renewing before it is deleted (Kubernetes: 30 min).
	DefaultCandidateTimeout = 30 * time.Minute
)

// nodeLeaseNamespace holds node heartbeats, which the coordinator does not
// watch.
const nodeLeaseNamespace = "kube-node-lease"

// Config configures a Coordinator. Zero values mean the documented
// defaults.
type Config struct {
	// Client reaches the API. Required. The identity needs get, list,
	// watch, create and update on leases, and get, list, watch, update and
	// delete on leasecandidates.
	Client kubernetes.Interface
	// ElectionDuration is how long an election waits for pinged
	// candidates to renew. Default 5s.
	ElectionDuration time.Duration
	// LeaseDuration is written as leaseDurationSeconds when a holder is
	// elected; a whole number of seconds. Default 15s.
	LeaseDuration time.Duration
	// CandidateTimeout is how long a LeaseCandidate may go without being
	// seen to renew before it is deleted. Default 30m.
	CandidateTimeout time.Duration
	// Clock measures and waits. Default clock.RealClock{}.
	Clock clock.WithTicker
	// Logger receives the coordinator's logs. Default: discard.
	Logger *slog.Logger
	// Reads, when set, feeds the informer on lease candidates and the feed
	// of leases from the API server's watch cache in process
	// (apiserver.Server.ListerWatcher) instead of through Client: every
	// Lease outside kube-node-lease is then neither encoded nor decoded
	// for the coordinator. Writes always go through Client.
	Reads func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error)
}

// Coordinator runs coordinated leader elections. Create it with New.
type Coordinator struct {
	cfg    Config
	params params
	log    *slog.Logger

	mu         sync.Mutex
	candidates map[types.NamespacedName]*candidate  // by LeaseCandidate; guarded by mu
	leases     map[types.NamespacedName]*leaseState // by Lease; guarded by mu
	poke       chan struct{}                        // capacity 1: something changed
}

type leaseState struct {
	obj    *coordinationv1.Lease
	seenAt time.Time // when its spec last changed, on the coordinator's clock
}

// New validates cfg and returns a Coordinator.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Client == nil {
		return nil, errors.New("coordinator: Client is required")
	}
	if cfg.ElectionDuration == 0 {
		cfg.ElectionDuration = DefaultElectionDuration
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.CandidateTimeout == 0 {
		cfg.CandidateTimeout = DefaultCandidateTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.ElectionDuration < 0 || cfg.CandidateTimeout < 0:
		return nil, errors.New("coordinator: durations must not be negative")
	case cfg.LeaseDuration < time.Second || cfg.LeaseDuration%time.Second != 0:
		return nil, errors.New("coordinator: LeaseDuration must be a positive whole number of seconds")
	case cfg.CandidateTimeout <= cfg.ElectionDuration:
		return nil, errors.New("coordinator: CandidateTimeout must be longer than ElectionDuration")
	}
	return &Coordinator{
		cfg: cfg,
		params: params{
			electionDuration: cfg.ElectionDuration,
			leaseDuration:    cfg.LeaseDuration,
			candidateTimeout: cfg.CandidateTimeout,
		},
		log:  cfg.Logger,
		poke: make(chan struct{}, 1),
	}, nil
}

// notNodeLeases selects the leases the coordinator watches.
const notNodeLeases = "metadata.namespace!=" + nodeLeaseNamespace

// readers returns the informer on lease candidates and the feed of the
// leases outside kube-node-lease, read through Config.Reads or else through
// Config.Client. The objects they hand out must not be modified: with Reads
// they are the watch cache's own, and every write starts from a copy.
//
// Candidates are few and the informer's store of them costs nothing. Leases
// are every leader election's, each renewed every few seconds: the feed
// hands each change straight to the coordinator's own table (c.leases),
// without an informer's store, queue and listener in between.
func (c *Coordinator) readers() (candidates cache.SharedIndexInformer, leases *feed.Feed, err error) {
	var leaseLW cache.ListerWatcher
	if c.cfg.Reads == nil {
		candidates = coordinationv1beta1informers.NewLeaseCandidateInformer(c.cfg.Client, metav1.NamespaceAll, 0, cache.Indexers{})
		leaseClient := c.cfg.Client.CoordinationV1().Leases(metav1.NamespaceAll)
		leaseLW = feed.ListWatch(c.cfg.Client, leaseClient.List, leaseClient.Watch)
	} else {
		candLW, err := c.cfg.Reads(coordinationv1beta1.SchemeGroupVersion.WithResource("leasecandidates"), metav1.NamespaceAll)
		if err != nil {
			return nil, nil, fmt.Errorf("coordinator: %w", err)
		}
		candidates = cache.NewSharedIndexInformer(candLW, &coordinationv1beta1.LeaseCandidate{}, 0, cache.Indexers{})
		if leaseLW, err = c.cfg.Reads(coordinationv1.SchemeGroupVersion.WithResource("leases"), metav1.NamespaceAll); err != nil {
			return nil, nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	leases, err = feed.New(feed.Config{ListerWatcher: notInNodeLeases(leaseLW), Handler: c.leaseHandler(), Logger: c.log.With("resource", "leases")})
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: %w", err)
	}
	return candidates, leases, nil
}

// notInNodeLeases narrows lw's lists and watches to the leases outside
// kube-node-lease, and keeps what lw tells a Reflector of itself: whether
// it serves watch-list streams.
func notInNodeLeases(lw cache.ListerWatcher) cache.ListerWatcher {
	withCtx := cache.ToListerWatcherWithContext(lw)
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = notNodeLeases
			return withCtx.ListWithContext(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = notNodeLeases
			return withCtx.WatchWithContext(ctx, o)
		},
	}, lw)
}

// Run coordinates elections until ctx ends, then returns nil.
func (c *Coordinator) Run(ctx context.Context) error {
	c.mu.Lock()
	c.candidates = map[types.NamespacedName]*candidate{}
	c.leases = map[types.NamespacedName]*leaseState{}
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	candInf, leaseFeed, err := c.readers()
	if err != nil {
		return err
	}
	candReg, err := candInf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { c.candidateSeen(obj, initial) },
		UpdateFunc: func(_, obj any) { c.candidateSeen(obj, false) },
		DeleteFunc: c.candidateGone,
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { candInf.RunWithContext(ctx) })
	wg.Go(func() { leaseFeed.Run(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), candReg.HasSynced, leaseFeed.HasSynced) {
		return nil
	}
	c.log.Info("coordinating leader elections")

	rounds := map[types.NamespacedName]time.Time{}
	for {
		now := c.cfg.Clock.Now()
		wake := c.reconcile(ctx, rounds, now)
		var timer clock.Timer
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = c.cfg.Clock.NewTimer(max(wake.Sub(now), 0))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-c.poke:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			c.log.Info("stopped coordinating leader elections")
			return nil
		}
	}
}

// reconcile runs one step of every election and collects stale
// candidates. It returns when to run again if nothing changes (zero: only
// on a change).
func (c *Coordinator) reconcile(ctx context.Context, rounds map[types.NamespacedName]time.Time, now time.Time) time.Time {
	elections, stale, wake := c.snapshot(rounds, now)
	for _, cand := range stale {
		c.collect(ctx, cand)
	}
	for _, e := range elections {
		key := types.NamespacedName{Namespace: e.namespace, Name: e.name}
		p := step(e, c.params, now)
		if p.round.IsZero() {
			delete(rounds, key)
		} else {
			rounds[key] = p.round
		}
		if len(p.ping) > 0 || p.create != nil || p.update != nil {
			c.log.Info("election", "lease", key.String(), "plan", p.why)
		} else {
			c.log.Debug("election", "lease", key.String(), "plan", p.why)
		}
		for _, cand := range p.ping {
			c.ping(ctx, cand, now)
		}
		if (p.create != nil || p.update != nil) && !c.write(ctx, p) {
			delete(rounds, key)
		}
		wake = earliest(wake, p.wake)
	}
	return wake
}

// snapshot copies the state into one election per Lease name with
// candidates, and lists the stale candidates.
func (c *Coordinator) snapshot(rounds map[types.NamespacedName]time.Time, now time.Time) ([]election, []candidate, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		wake  time.Time
		stale []candidate
		by    = map[types.NamespacedName]*election{}
	)
	for _, cand := range c.candidates {
		at := cand.staleAt(c.params.candidateTimeout)
		if !now.Before(at) {
			stale = append(stale, *cand)
			continue
		}
		wake = earliest(wake, at)
		key := types.NamespacedName{Namespace: cand.obj.Namespace, Name: cand.obj.Spec.LeaseName}
		e := by[key]
		if e == nil {
			e = &election{namespace: key.Namespace, name: key.Name, round: rounds[key]}
			if l := c.leases[key]; l != nil {
				e.lease, e.leaseSeenAt = l.obj, l.seenAt
			}
			by[key] = e
		}
		cp := *cand
		e.candidates = append(e.candidates, &cp)
	}
	if len(stale) > 0 {
		wake = earliest(wake, now.Add(c.params.electionDuration)) // retry failed deletions
	}
	for key := range rounds {
		if by[key] == nil {
			delete(rounds, key)
		}
	}
	out := make([]election, 0, len(by))
	for _, e := range by {
		sort.Slice(e.candidates, func(i, j int) bool { return e.candidates[i].obj.Name < e.candidates[j].obj.Name })
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].namespace != out[j].namespace {
			return out[i].namespace < out[j].namespace
		}
		return out[i].name < out[j].name
	})
	return out, stale, wake
}

// ping sets the candidate's spec.pingTime to now, asking it to renew.
func (c *Coordinator) ping(ctx context.Context, cand *candidate, now time.Time) {
	lc := cand.obj.DeepCopy()
	lc.Spec.PingTime = ptr.To(metav1.NewMicroTime(now))
	got, err := c.cfg.Client.CoordinationV1beta1().LeaseCandidates(lc.Namespace).Update(ctx, lc, metav1.UpdateOptions{})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("pinging candidate failed", "candidate", lc.Namespace+"/"+lc.Name, "err", err)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.candidates[types.NamespacedName{Namespace: got.Namespace, Name: got.Name}]; s != nil && s.obj.UID == got.UID {
		s.pingedAt = now
	}
}

// write creates or updates the Lease as p says; it reports success.
func (c *Coordinator) write(ctx context.Context, p plan) bool {
	var (
		got *coordinationv1.Lease
		err error
	)
	if p.create != nil {
		got, err = c.cfg.Client.CoordinationV1().Leases(p.create.Namespace).Create(ctx, p.create, metav1.CreateOptions{})
	} else {
		got, err = c.cfg.Client.CoordinationV1().Leases(p.update.Namespace).Update(ctx, p.update, metav1.UpdateOptions{})
	}
	switch {
	case err == nil:
		c.log.Info("lease written", "lease", got.Namespace+"/"+got.Name, "holder", holderOf(got), "preferredHolder", preferredOf(got), "leaseTransitions", ptr.Deref(got.Spec.LeaseTransitions, 0))
		c.observeLease(got)
		return true
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		// Someone wrote first (the holder renewing): the informer brings
		// the new version, and the next step decides again.
		c.log.Debug("lease changed before the coordinator's write", "err", err)
	case ctx.Err() == nil:
		c.log.Warn("writing lease failed", "err", err)
	}
	return false
}

// collect deletes a stale candidate, unless it changed since it was seen.
func (c *Coordinator) collect(ctx context.Context, cand candidate) {
	lc := cand.obj
	err := c.cfg.Client.CoordinationV1beta1().LeaseCandidates(lc.Namespace).Delete(ctx, lc.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptr.To(lc.UID), ResourceVersion: ptr.To(lc.ResourceVersion)},
	})
	switch {
	case err == nil:
		c.log.Info("deleted stale lease candidate", "candidate", lc.Namespace+"/"+lc.Name, "lease", lc.Spec.LeaseName, "lastAlive", cand.lastAlive())
	case apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		return // it changed: the informer brings the new version
	default:
		if ctx.Err() == nil {
			c.log.Warn("deleting stale lease candidate failed", "candidate", lc.Namespace+"/"+lc.Name, "err", err)
		}
		return // tried again at the next step
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	if s := c.candidates[key]; s != nil && s.obj.UID == lc.UID {
		delete(c.candidates, key)
	}
}

func (c *Coordinator) candidateSeen(obj any, initial bool) {
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return
	}
	now := c.cfg.Clock.Now()
	key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}
	c.mu.Lock()
	s := c.candidates[key]
	switch {
	case s == nil || s.obj.UID != lc.UID:
		s = &candidate{obj: lc, seenAt: now}
		if !initial {
			s.renewedAt = now // created while the coordinator watched
		}
		c.candidates[key] = s
	default:
		if !s.obj.Spec.RenewTime.Equal(lc.Spec.RenewTime) {
			s.renewedAt = now
		}
		s.obj = lc
	}
	c.mu.Unlock()
	c.wake()
}

func (c *Coordinator) candidateGone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return
	}
	c.mu.Lock()
	delete(c.candidates, types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name})
	c.mu.Unlock()
	c.wake()
}

// leaseHandler keeps c.leases from the lease feed.
func (c *Coordinator) leaseHandler() feed.Handler {
	return feed.Handler{
		Seen: func(obj runtime.Object, _ bool) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				c.observeLease(l)
				c.wake()
			}
		},
		Gone: func(obj runtime.Object) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
				c.mu.Lock()
				if s := c.leases[key]; s != nil && s.obj.UID == l.UID {
					delete(c.leases, key)
				}
				c.mu.Unlock()
				c.wake()
			}
		},
		// Leases deleted while the feed was not watching.
		Relisted: func(listed func(types.UID) bool) {
			c.mu.Lock()
			for key, s := range c.leases {
				if !listed(s.obj.UID) {
					delete(c.leases, key)
				}
			}
			c.mu.Unlock()
			c.wake()
		},
	}
}

// observeLease records l; the observation time moves only when its spec
// changed (a renewal changes renewTime), and never back to an older
// version.
func (c *Coordinator) observeLease(l *coordinationv1.Lease) {
	now := c.cfg.Clock.Now()
	key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.leases[key]
	switch {
	case s == nil || s.obj.UID != l.UID:
		c.leases[key] = &leaseState{obj: l, seenAt: now}
	case older(l.ResourceVersion, s.obj.ResourceVersion):
	default:
		if !registry.EqualLeaseSpecs(&s.obj.Spec, &l.Spec) {
			s.seenAt = now
		}
		s.obj = l
	}
}

func (c *Coordinator) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// earliest returns the earlier of two times, a zero time meaning never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// older reports whether resourceVersion a is known to precede b (both are
// integers on leasehold and Kubernetes; otherwise nothing is known).
func older(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x < y
}
