package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/agent"
	"github.com/leasehold/leasehold/internal/version"
)

// Fleet defaults.
const (
	DefaultNodes         = 1000
	DefaultInterval      = 10 * time.Second
	DefaultNodePrefix    = "leasehold-bench-node-"
	defaultRegisterWidth = 32
	// The agent's own timings (see package agent).
	renewJitter  = 0.04
	firstBackoff = 200 * time.Millisecond
	maxBackoff   = 7 * time.Second
)

// BenchLabel marks the Nodes and Leases the scenarios create.
const BenchLabel = "leasehold.io/bench"

// FleetConfig configures the fleet scenario. Zero values mean defaults.
type FleetConfig struct {
	Common
	// Nodes is the number of virtual agents; default 1000.
	Nodes int
	// Interval is the time between two renewals of one agent; default 10s.
	Interval time.Duration
	// LeaseDuration is written to each lease's leaseDurationSeconds; whole
	// seconds, greater than Interval; default 40s.
	LeaseDuration time.Duration
	// NodeStatusReportPeriod is how often each agent posts its node status
	// when nothing changed; default 5m, as the agent.
	NodeStatusReportPeriod time.Duration
	// ReportCapacity has each agent post its node's capacity and
	// allocatable, as agents with --report-capacity do.
	ReportCapacity bool
	// NodePrefix starts every node name; default "leasehold-bench-node-".
	// Nodes of that name left by an earlier run are adopted.
	NodePrefix string
	// KillFraction of the agents (0 to 1) stop at one instant, KillAfter
	// into the measurement (default a third of Duration), and the scenario
	// measures how long their Nodes take to become Ready=Unknown.
	KillFraction float64
	KillAfter    time.Duration
	// Cleanup deletes the Nodes at the end; the garbage collector then
	// deletes their Leases.
	Cleanup bool
	// Seed chooses which agents are killed; default 1.
	Seed uint64
	// StartAt, when set, is when the measurement starts, by Clock: load
	// generators on several machines, each with a fleet of its own (a
	// NodePrefix of its own), then measure the same window, and Merge
	// combines their reports. Agents renew from their registration on,
	// as always; if the registration ends after StartAt, the measurement
	// starts when it ends.
	StartAt time.Time
}

// Fleet runs many virtual agents, each doing what `leasehold agent` does.
type Fleet struct {
	cfg FleetConfig
}

// NewFleet validates cfg.
func NewFleet(cfg FleetConfig) (*Fleet, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultNodes
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = agent.DefaultLeaseDuration
	}
	if cfg.NodeStatusReportPeriod == 0 {
		cfg.NodeStatusReportPeriod = agent.DefaultNodeStatusReportPeriod
	}
	if cfg.NodePrefix == "" {
		cfg.NodePrefix = DefaultNodePrefix
	}
	if cfg.KillAfter == 0 {
		cfg.KillAfter = cfg.Duration / 3
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	switch {
	case cfg.Nodes < 0:
		return nil, fmt.Errorf("bench: nodes %d must be positive", cfg.Nodes)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("bench: interval %v must be positive", cfg.Interval)
	case cfg.LeaseDuration < time.Second || cfg.LeaseDuration%time.Second != 0:
		return nil, fmt.Errorf("bench: lease duration %v must be a whole number of seconds, at least 1s", cfg.LeaseDuration)
	case cfg.Interval >= cfg.LeaseDuration:
		return nil, fmt.Errorf("bench: interval %v must be shorter than the lease duration %v", cfg.Interval, cfg.LeaseDuration)
	case cfg.KillFraction < 0 || cfg.KillFraction > 1:
		return nil, fmt.Errorf("bench: kill fraction %v must be between 0 and 1", cfg.KillFraction)
	case cfg.KillAfter < 0 || cfg.KillAfter >= cfg.Duration:
		return nil, fmt.Errorf("bench: kill-after %v must lie within the duration %v", cfg.KillAfter, cfg.Duration)
	}
	return &Fleet{cfg: cfg}, nil
}

func (f *Fleet) params() map[string]string {
	p := map[string]string{
		"nodes":         strconv.Itoa(f.cfg.Nodes),
		"interval":      f.cfg.Interval.String(),
		"leaseDuration": f.cfg.LeaseDuration.String(),
		"connections":   strconv.Itoa(f.cfg.Connections),
		"duration":      f.cfg.Duration.String(),
		"nodePrefix":    f.cfg.NodePrefix,
	}
	if !f.cfg.StartAt.IsZero() {
		p["startAt"] = f.cfg.StartAt.UTC().Format(time.RFC3339)
	}
	if f.cfg.ReportCapacity {
		p["reportCapacity"] = "true"
	}
	if f.cfg.KillFraction > 0 {
		p["killFraction"] = strconv.FormatFloat(f.cfg.KillFraction, 'g', -1, 64)
		p["killAfter"] = f.cfg.KillAfter.String()
	}
	return p
}

// fleetCounters are the counts besides the meter's.
type fleetCounters struct {
	missed, conflicts, creations, statusPosts atomic.Uint64
}

type fleetCounts struct{ missed, conflicts, creations, statusPosts uint64 }

func (c *fleetCounters) snapshot() fleetCounts {
	return fleetCounts{c.missed.Load(), c.conflicts.Load(), c.creations.Load(), c.statusPosts.Load()}
}

// The fleet's dispatcher: it hands out the passes due at most every
// dispatchQuantum, runs at most maxWorkers at once (10 000 renewals/s
// answered within 400ms need 4 000) and keeps maxIdleWorkers idle workers
// for the next ones.
const (
	dispatchQuantum = 5 * time.Millisecond
	maxWorkers      = 4096
	maxIdleWorkers  = 512
)

// fleetRun is what the virtual agents of one run share.
type fleetRun struct {
	cfg      *FleetConfig
	pool     *pool
	leases   []*leaseClient // one per connection of the pool
	sched    schedule
	disp     *dispatcher
	counters fleetCounters
	cur      atomic.Pointer[meter] // where renewals are recorded
	agents   []vagent
}

// Run registers every agent's Node and Lease, renews on the schedule for
// the duration (killing some agents if asked), and reports.
func (f *Fleet) Run(ctx context.Context) (*Report, error) {
	cfg := &f.cfg
	clk := cfg.Clock
	p, err := newPool(cfg.REST, cfg.Connections, "fleet")
	if err != nil {
		return nil, err
	}
	leases, err := newLeaseClients(p)
	if err != nil {
		return nil, err
	}
	r := &fleetRun{cfg: cfg, pool: p, leases: leases, agents: make([]vagent, cfg.Nodes)}
	for i := range r.agents {
		r.agents[i].name = cfg.NodePrefix + strconv.Itoa(i)
	}
	counters := &r.counters
	if cfg.Cleanup {
		defer f.cleanup(p)
	}

	// Every agent starts renewing as soon as it has registered, on a grid
	// laid from the start of the registration, as a fleet coming up would;
	// the measurement starts once all have registered. Until then the
	// renewals go to a warm-up meter. The dispatcher runs every agent's
	// passes when due; it ends, after its workers, when runCtx does.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var warm, m meter
	r.cur.Store(&warm)
	regStart := clk.Now()
	r.sched = schedule{start: regStart.Add(50 * time.Millisecond), n: cfg.Nodes, interval: cfg.Interval, jitter: renewJitter}
	r.disp = newDispatcher(clk, regStart, dispatchQuantum, maxIdleWorkers, maxWorkers, r.pass)
	dispDone := make(chan struct{})
	go func() { r.disp.run(runCtx); close(dispDone) }()
	defer func() { stopRun(); <-dispDone }()

	var reg meter
	regCtx, regDone := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	regExtra := func() string { return fmt.Sprintf("renewals %d", warm.ops.Load()) }
	go func() { progress(regCtx, &cfg.Common, "register", &reg, regExtra); close(progressDone) }()
	err = parallel(ctx, cfg.Nodes, defaultRegisterWidth, func(i int) error {
		a := &r.agents[i]
		begin := clk.Now()
		if err := r.register(ctx, i); err != nil {
			reg.fail(err) // the agent tries again on its first pass
		} else {
			reg.ok(clk.Since(begin))
		}
		a.k = r.sched.slot(i, clk.Now()) + 1
		if !a.postedAt.IsZero() {
			a.postedAt = r.statusPhase(i, a.k)
		}
		r.disp.at(i, r.sched.due(i, a.k, rand.Float64()))
		return nil
	})
	regDone()
	<-progressDone
	if err != nil {
		return nil, err
	}
	regSecs := clk.Since(regStart).Seconds()
	if reg.errs.Load() > 0 {
		cfg.Logger.Warn("some agents failed to register; they retry while renewing", "failed", reg.errs.Load(), "samples", reg.errorSamples())
	}

	// Which agents die, and the watch that sees their nodes go Unknown.
	killed := f.chooseKilled()
	var nodeWatch *nodeWatch
	var watchErr error
	watchDone := make(chan struct{})
	if len(killed) > 0 {
		nodeWatch = newNodeWatch(cfg, killed)
		rv, err := currentNodeRV(ctx, p.get(0))
		if err != nil {
			return nil, err
		}
		go func() {
			defer close(watchDone)
			watchErr = follow(runCtx, clk, p.get(0).CoreV1().Nodes().Watch, rv, new(atomic.Uint64), nil, nodeWatch.handle)
		}()
	} else {
		close(watchDone)
	}

	if !cfg.StartAt.IsZero() {
		if late := clk.Since(cfg.StartAt); late > 0 {
			cfg.Logger.Warn("the registration ended after the start time; the measurement starts now", "late", late.Round(time.Millisecond))
		} else {
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "fleet      registered; measuring from %s\n", cfg.StartAt.Format(time.RFC3339))
			}
			if !sleepUntil(ctx, clk, cfg.StartAt) {
				return nil, ctx.Err()
			}
		}
	}

	// The measurement.
	start := clk.Now()
	before := counters.snapshot()
	r.cur.Store(&m)
	procs := cfg.startMeters(ctx, start)
	progressDone = make(chan struct{})
	server := procs.serverSampler(runCtx)
	extra := func() string {
		out := fmt.Sprintf("missed %d", counters.missed.Load()-before.missed)
		if nodeWatch != nil {
			out += fmt.Sprintf("  unknown %d/%d", nodeWatch.flippedCount.Load(), len(killed))
		}
		// The server's memory as it goes: history and caches grow during
		// a run, not only by its end.
		if cores, rss, ok := server(clk.Now()); ok {
			out += fmt.Sprintf("  server %.2f cores, RSS %s", cores, mib(rss))
		}
		return out
	}
	go func() { progress(runCtx, &cfg.Common, "fleet", &m, extra); close(progressDone) }()
	var killedAt time.Time
	if len(killed) > 0 && sleepUntil(runCtx, clk, start.Add(cfg.KillAfter)) {
		killedAt = clk.Now()
		for i := range killed {
			r.agents[i].dead.Store(true)
		}
		nodeWatch.killedAt.Store(killedAt.UnixNano())
	}
	sleepUntil(runCtx, clk, start.Add(cfg.Duration))
	end := clk.Now()
	after := counters.snapshot()
	stopRun()
	<-dispDone
	<-progressDone
	<-watchDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if watchErr != nil {
		return nil, fmt.Errorf("watching nodes: %w", watchErr)
	}

	secs := end.Sub(start).Seconds()
	ops := m.ops.Load()
	rep := &Report{
		Scenario: "fleet", Server: cfg.REST.Host, Parameters: f.params(), StartedAt: start, Seconds: secs,
		Ops: ops, Errors: m.errs.Load(), OpsPerSecond: float64(ops) / secs,
		TargetOpsPerSecond: f.offered(len(killed)), Latency: m.lat.Snapshot().Percentiles(),
		ErrorSamples: m.errorSamples(),
		Fleet: &FleetReport{
			Nodes: cfg.Nodes, RegistrationSeconds: regSecs, MissedSlots: after.missed - before.missed,
			Conflicts: after.conflicts - before.conflicts, LeaseCreations: after.creations - before.creations,
			StatusPosts: after.statusPosts - before.statusPosts,
		},
	}
	procs.stop(ctx, end, ops, rep)
	if nodeWatch != nil {
		rep.Kill = nodeWatch.report(r.agents, killedAt, start)
	}
	return rep, nil
}

// pass is agent i's turn, run by a worker of the dispatcher when due: one
// sync, recorded into the meter of the moment, and the agent queued again,
// at its next slot after a success or after the backoff after a failure.
// A killed agent is not queued again; neither is any once ctx has ended.
func (r *fleetRun) pass(ctx context.Context, i int) {
	a := &r.agents[i]
	if a.dead.Load() {
		return
	}
	m := r.cur.Load()
	err := a.sync(ctx, r, i, m)
	if ctx.Err() != nil || a.dead.Load() {
		return
	}
	clk := r.cfg.Clock
	if err != nil {
		m.fail(err)
		a.backoff = min(max(2*a.backoff, firstBackoff), maxBackoff)
		r.disp.at(i, clk.Now().Add(a.backoff))
		return
	}
	a.backoff = 0
	var missed int64
	a.k, missed = r.sched.next(i, a.k, clk.Now())
	if missed > 0 {
		r.counters.missed.Add(uint64(missed))
	}
	r.disp.at(i, r.sched.due(i, a.k, rand.Float64()))
}

// offered is the renewals per second the schedule offers, the killed
// agents counted only until their death.
func (f *Fleet) offered(killed int) float64 {
	cfg := &f.cfg
	perAgent := 1 / cfg.Interval.Seconds()
	if killed == 0 {
		return float64(cfg.Nodes) * perAgent
	}
	alive := cfg.KillAfter.Seconds()/cfg.Duration.Seconds()*float64(killed) + float64(cfg.Nodes-killed)
	return alive * perAgent
}

// chooseKilled picks round(KillFraction × Nodes) agents at random (seeded).
func (f *Fleet) chooseKilled() map[int]bool {
	n := int(f.cfg.KillFraction*float64(f.cfg.Nodes) + 0.5)
	out := make(map[int]bool, n)
	r := rand.New(rand.NewPCG(f.cfg.Seed, 0x6c65617365))
	for _, i := range r.Perm(f.cfg.Nodes)[:n] {
		out[i] = true
	}
	return out
}

// cleanup deletes every Node of the run; the garbage collector deletes
// their Leases.
func (f *Fleet) cleanup(p *pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := parallel(ctx, f.cfg.Nodes, defaultRegisterWidth, func(i int) error {
		err := p.get(i).CoreV1().Nodes().Delete(ctx, f.cfg.NodePrefix+strconv.Itoa(i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		f.cfg.Logger.Warn("deleting the benchmark nodes", "err", err)
	}
}

// currentNodeRV returns the resourceVersion of a list of nodes, to watch
// from.
func currentNodeRV(ctx context.Context, c kubernetes.Interface) (string, error) {
	l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("listing nodes: %w", err)
	}
	return l.ResourceVersion, nil
}

// vagent is one virtual agent. Its renewals follow package agent: the Node
// and Lease it registers, the ownerReference, the renewal from the cached
// copy with no GET first, one GET and a second Update on Conflict, lease
// re-creation (after checking the Node) on NotFound, the backoff, and the
// periodic status post. It keeps its Node and Lease encoded, as the server
// sent them (a few hundred bytes each, nothing for the garbage collector to
// scan), and decodes them for the moment it writes them. Only the worker
// running its pass touches it, but for dead and lastRenewal.
type vagent struct {
	name     string
	nodeUID  types.UID
	node     []byte // the Node as last seen; nil: register
	lease    []byte // the Lease as last written; nil: GET it
	postedAt time.Time
	k        int64         // the slot of the next renewal
	backoff  time.Duration // after the last failed pass; 0 after a success

	// dead is set when the agent is killed: it sends nothing more.
	dead atomic.Bool
	// lastRenewal is the renewTime (unix nanoseconds) of the last renewal
	// the server acknowledged.
	lastRenewal atomic.Int64
}

// sync is one pass: register if needed, renew, post the status when due.
func (a *vagent) sync(ctx context.Context, r *fleetRun, i int, m *meter) error {
	if a.node == nil {
		if _, err := a.registerNode(ctx, r, i); err != nil {
			return err
		}
	}
	if err := a.renew(ctx, r, i, m); err != nil {
		return err
	}
	if r.cfg.Clock.Since(a.postedAt) >= r.cfg.NodeStatusReportPeriod {
		return a.postStatus(ctx, r, i)
	}
	return nil
}

// statusPhase is when agent i, once registered with a Ready status and
// due to renew first in slot k, counts as having last posted it: one
// report period before its slot k+m, where m = ⌊frac(i·φ)·R⌋ (φ the golden
// ratio's conjugate, R = period/interval the renewals in a period). Its
// first post then comes with that renewal. As φ's multiples spread evenly
// over [0, 1) whatever the run of agents, every renewal round of any
// stretch of agents carries posts from about 1/R of them: the fleet posts
// at n/period a second from the start, as the machines of a fleet that
// came up at different times do, instead of all falling due within the
// registration's span one period after it (30 000 agents registered in
// 26 s would post 1 150 statuses a second for those 26 s). Tying the post
// to a renewal slot, not to a time, keeps that rate in a measurement
// shorter than the interval too, where each agent renews once: 1/R of
// those renewals carry a post.
func (r *fleetRun) statusPhase(i int, k int64) time.Time {
	p := r.cfg.NodeStatusReportPeriod
	_, f := math.Modf(float64(i) * (math.Sqrt(5) - 1) / 2)
	m := int64(f * float64(p) / float64(r.sched.interval))
	return r.sched.due(i, k+m, 0).Add(-p)
}

// register creates agent i's Node and Lease before the measurement. The
// Node it has just created has no Lease yet, and the one it has just read
// exists: neither is asked for again, so a fresh agent registers in two
// requests.
func (r *fleetRun) register(ctx context.Context, i int) error {
	a := &r.agents[i]
	created, err := a.registerNode(ctx, r, i)
	if err != nil {
		return err
	}
	sc := scratchPool.Get().(*leaseScratch)
	defer scratchPool.Put(sc)
	lc := r.leases[i%len(r.leases)]
	if created {
		err := a.postLease(ctx, r, i, sc)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	err = lc.get(ctx, a.name, sc, &a.lease)
	switch {
	case apierrors.IsNotFound(err):
		return a.postLease(ctx, r, i, sc)
	case err != nil:
		return fmt.Errorf("reading the lease: %w", err)
	}
	return nil
}

func (a *vagent) newNode(now time.Time, capacity bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.name, Labels: map[string]string{
		corev1.LabelHostname:   a.name,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
		BenchLabel:             "true",
	}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: a.name}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:  "leasehold-bench/" + version.Version,
		OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH,
	}
	if capacity {
		n.Status.Capacity, n.Status.Allocatable = agent.HostResources(virtualHost)
	}
	agent.SetHealthyConditions(n, now)
	return n
}

// virtualHost is the machine each virtual agent posts the capacity of, as
// an agent with --report-capacity does.
var virtualHost = agent.HostStats{CPUs: 4, MemoryCapacity: 16 << 30, FsCapacity: 100 << 30}

// setNode caches n as the agent's Node.
func (a *vagent) setNode(n *corev1.Node) error {
	data, err := encode(n, nodeGVK)
	if err != nil {
		return err
	}
	a.node, a.nodeUID = data, n.UID
	return nil
}

// cachedNode decodes the agent's Node.
func (a *vagent) cachedNode() (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := decodeInto(a.node, n); err != nil {
		return nil, err
	}
	return n, nil
}

// registerNode creates the Node with its status, or adopts the existing one
// of that name; the status is posted at once if the server did not keep it.
// It reports whether it created the Node.
func (a *vagent) registerNode(ctx context.Context, r *fleetRun, i int) (created bool, err error) {
	nodes := r.pool.get(i).CoreV1().Nodes()
	now := r.cfg.Clock.Now()
	got, err := nodes.Create(ctx, a.newNode(now, r.cfg.ReportCapacity), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = nodes.Get(ctx, a.name, metav1.GetOptions{})
		if err == nil {
			a.postedAt = time.Time{}
			return false, a.setNode(got)
		}
	}
	if err != nil {
		return false, fmt.Errorf("registering node %s: %w", a.name, err)
	}
	a.postedAt = now
	if !isReady(got) {
		a.postedAt = time.Time{}
	}
	return true, a.setNode(got)
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ownLease points lease l at the agent's Node and sets its holder and
// duration, as the agent asserts on every write.
func (a *vagent) ownLease(l *coordinationv1.Lease, leaseDuration time.Duration) {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != a.name {
		l.Spec.HolderIdentity = ptr.To(a.name)
	}
	secs := int32(leaseDuration / time.Second)
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != secs {
		l.Spec.LeaseDurationSeconds = ptr.To(secs)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != a.nodeUID || l.OwnerReferences[0].Kind != "Node" {
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.name, UID: a.nodeUID}}
	}
}

// renew writes the cached lease back with a fresh renewTime.
func (a *vagent) renew(ctx context.Context, r *fleetRun, i int, m *meter) error {
	clk := r.cfg.Clock
	lc := r.leases[i%len(r.leases)]
	sc := scratchPool.Get().(*leaseScratch)
	defer scratchPool.Put(sc)
	for attempt := 0; ; attempt++ {
		if a.lease == nil {
			err := lc.get(ctx, a.name, sc, &a.lease)
			if apierrors.IsNotFound(err) {
				return a.createLease(ctx, r, i, sc)
			}
			if err != nil {
				return fmt.Errorf("reading the lease: %w", err)
			}
		}
		sc.lease = coordinationv1.Lease{} // a JSON decoder would keep what it does not overwrite
		if err := decodeInto(a.lease, &sc.lease); err != nil {
			a.lease = nil
			return fmt.Errorf("the cached lease: %w", err)
		}
		a.ownLease(&sc.lease, r.cfg.LeaseDuration)
		begin := clk.Now()
		sc.rt.Time = begin
		sc.lease.Spec.RenewTime = &sc.rt
		err := lc.update(ctx, &sc.lease, sc, &a.lease)
		switch {
		case err == nil:
			m.ok(clk.Since(begin))
			a.lastRenewal.Store(begin.UnixNano())
			return nil
		case apierrors.IsNotFound(err):
			a.lease = nil
			r.counters.creations.Add(1)
			return a.createLease(ctx, r, i, sc)
		case apierrors.IsConflict(err) && attempt == 0:
			r.counters.conflicts.Add(1)
			a.lease = nil
		default:
			return fmt.Errorf("renewing the lease: %w", err)
		}
	}
}

// createLease makes sure the Node still exists (registering it again if it
// is gone) and creates the lease owned by it.
func (a *vagent) createLease(ctx context.Context, r *fleetRun, i int, sc *leaseScratch) error {
	n, err := r.pool.get(i).CoreV1().Nodes().Get(ctx, a.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		a.node = nil
		if _, err := a.registerNode(ctx, r, i); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("reading the node: %w", err)
	default:
		if err := a.setNode(n); err != nil {
			return err
		}
	}
	return a.postLease(ctx, r, i, sc)
}

// postLease creates the lease, owned by the agent's Node as cached.
func (a *vagent) postLease(ctx context.Context, r *fleetRun, i int, sc *leaseScratch) error {
	now := r.cfg.Clock.Now()
	l := &sc.lease
	*l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: corev1.NamespaceNodeLease}}
	a.ownLease(l, r.cfg.LeaseDuration)
	sc.rt.Time = now
	l.Spec.RenewTime = &sc.rt
	if err := r.leases[i%len(r.leases)].create(ctx, l, sc, &a.lease); err != nil {
		a.lease = nil
		return fmt.Errorf("creating the lease: %w", err)
	}
	a.lastRenewal.Store(now.UnixNano())
	return nil
}

// postStatus posts the node status with fresh heartbeats of the agent's
// conditions.
func (a *vagent) postStatus(ctx context.Context, r *fleetRun, i int) error {
	nodes := r.pool.get(i).CoreV1().Nodes()
	now := r.cfg.Clock.Now()
	for attempt := 0; ; attempt++ {
		n, err := a.cachedNode()
		if err != nil {
			a.node = nil
			return err
		}
		agent.SetHealthyConditions(n, now)
		got, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt == 0 {
			if fresh, gerr := nodes.Get(ctx, a.name, metav1.GetOptions{}); gerr == nil {
				if err := a.setNode(fresh); err != nil {
					return err
				}
				continue
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			a.node = nil
			return fmt.Errorf("node was deleted: %w", err)
		case err != nil:
			return fmt.Errorf("posting the node status: %w", err)
		}
		a.postedAt = now
		r.counters.statusPosts.Add(1)
		return a.setNode(got)
	}
}

// nodeWatch records when the Nodes of killed agents become Ready=Unknown.
// handle runs on the watch's goroutine; report reads after it has ended.
type nodeWatch struct {
	cfg          *FleetConfig
	killed       map[int]bool
	killedAt     atomic.Int64 // unix nanoseconds; 0 before the kill
	flipped      map[int]time.Time
	liveUnknown  map[int]bool
	flippedCount atomic.Int64
}

func newNodeWatch(cfg *FleetConfig, killed map[int]bool) *nodeWatch {
	return &nodeWatch{cfg: cfg, killed: killed, flipped: map[int]time.Time{}, liveUnknown: map[int]bool{}}
}

func (w *nodeWatch) handle(ev watch.Event) {
	n, ok := ev.Object.(*corev1.Node)
	if !ok || ev.Type == watch.Deleted || !readyUnknown(n) {
		return
	}
	i, err := strconv.Atoi(n.Name[min(len(w.cfg.NodePrefix), len(n.Name)):])
	if err != nil || len(n.Name) <= len(w.cfg.NodePrefix) || n.Name[:len(w.cfg.NodePrefix)] != w.cfg.NodePrefix || i >= w.cfg.Nodes {
		return
	}
	now := w.cfg.Clock.Now()
	switch {
	case !w.killed[i] || w.killedAt.Load() == 0:
		w.liveUnknown[i] = true
	default:
		if _, seen := w.flipped[i]; !seen {
			w.flipped[i] = now
			w.flippedCount.Add(1)
		}
	}
}

func readyUnknown(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionUnknown
		}
	}
	return false
}

func (w *nodeWatch) report(agents []vagent, killedAt, start time.Time) *KillReport {
	r := &KillReport{Killed: len(w.killed), LiveMarkedUnknown: len(w.liveUnknown)}
	if killedAt.IsZero() {
		r.NeverFlipped = len(w.killed)
		return r
	}
	r.KilledAfterSeconds = killedAt.Sub(start).Seconds()
	var fromDeath, fromRenewal Histogram
	for i := range w.killed {
		t, ok := w.flipped[i]
		if !ok {
			r.NeverFlipped++
			continue
		}
		r.Flipped++
		fromDeath.Record(t.Sub(killedAt))
		if last := agents[i].lastRenewal.Load(); last != 0 {
			fromRenewal.Record(t.Sub(time.Unix(0, last)))
		}
	}
	r.DeathToUnknown = fromDeath.Snapshot().Percentiles()
	r.LastRenewalToUnknown = fromRenewal.Snapshot().Percentiles()
	return r
}
