// Package nodelifecycle is the node lifecycle controller: it notices when a
// node's heartbeat Lease (namespace kube-node-lease, named after the node)
// stops being renewed and marks the node unreachable, and marks it Ready
// again when the renewals resume.
//
// # Model
//
// Two feeds (package feed: a list and a watch that hand each object to the
// controller and keep none), of the Nodes and of the Leases in
// kube-node-lease, fill one table, per node name, of the node as last seen
// (the node itself when the feed shares the watch cache's objects, else a
// summary of it) and of the "probe time": when this controller last saw
// the node's lease change, or its Ready condition's lastHeartbeatTime
// change (a node that heartbeats by posting its status, as kubelets did
// before leases, and as Kubernetes' controller still counts), read from its
// own clock. A change is a spec.renewTime (or lastHeartbeatTime) different
// from the one last seen, or a lease created or replaced (a new uid). The
// renewTime value itself is never compared with
// any clock: an agent whose clock is hours ahead or behind renews just as
// well, and a renewTime frozen in the future does not keep a dead node
// alive. Leases listed when the controller starts, and nodes it sees for the
// first time, get a fresh probe time, so a restart of the server (or a new
// leader) gives every node a full grace period instead of declaring them all
// dead at once. So does a wake of the controller more than half a grace
// period late (its process stopped, or starved): the renewals it could not
// see meanwhile are still on their way to its feeds.
//
// Run starts them, and once they have synced runs a monitor pass
// every MonitorPeriod on its own goroutine (the caller's). A pass visits the
// nodes that may need something done: every node at the first pass of a
// Run; then the nodes the node feed added, changed or deleted since the
// last pass, the nodes whose lease has been silent for longer than
// GracePeriod (a queue ordered by probe time holds each registered node
// once, so a pass finds them without looking at the others), the nodes not
// Ready whose lease changed, and the nodes whose last write failed.
// Kubernetes' controller walks every node in every pass; at 100 000 nodes
// that walk alone costs a fifth of a second of CPU every five seconds. A
// pass visits up to Workers nodes at once, as Kubernetes' does. A visit:
//
//   - emits RegisteredNode for a node it has not seen before (or a new node
//     of an old name), and RemovingNode for one that is gone;
//   - when the lease has not changed for longer than GracePeriod, sets Ready
//     and the pressure conditions to Unknown (reason NodeStatusUnknown) with
//     UpdateStatus;
//   - when the lease is fresh, has changed at least once since the node was
//     registered, and Ready is Unknown, sets Ready to True (reason
//     NodeLeaseRenewed): leasehold's agent posts its full status only every
//     few minutes, so the lease is the liveness signal;
//   - makes the taints node.kubernetes.io/unreachable (Ready Unknown) and
//     node.kubernetes.io/not-ready (Ready False) follow the Ready condition,
//     with Update: the NoSchedule one at once, the NoExecute one when the
//     node's zone grants it (zones.go: at a limited rate, and never while
//     no node is Ready in any zone); and the NoSchedule taints of a
//     cordoned node and of pressure conditions (reconcileTaints);
//   - emits NodeNotReady and NodeReady when Ready leaves or reaches True,
//     and NodeNotSchedulable and NodeSchedulable (the kubelet's) when it
//     gives a cordoned node the unschedulable taint and takes it away.
//
// Each write starts from the node as last seen, or read again when the
// table holds a summary (or from the controller's own last write while the
// feed has not caught up with it); on a conflict
// the node is read again and the change recomputed, a few times, then left
// for the next pass. The feeds' callbacks only record what they see under
// a mutex; API writes happen in visits on Run's goroutine. Those are the
// passes', and between passes the visits of the nodes whose NoSchedule
// taints the node feed found out of step with their spec and conditions
// (a cordon, a pressure condition, Ready False): Kubernetes' controller
// taints those on the node's update, not at its next pass.
//
// Events go out through the events.k8s.io/v1 API (client-go's tools/events)
// from ReportingController, regarding {v1 Node, name, uid = the node's name}:
// the reference kubectl describe node searches for.
package nodelifecycle

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/controller/feed"
)

// Defaults, Kubernetes' own (--node-monitor-period and
// --node-monitor-grace-period of kube-controller-manager since 1.32).
const (
	DefaultMonitorPeriod = 5 * time.Second
	DefaultGracePeriod   = 50 * time.Second
	// DefaultWorkers is Kubernetes' nodeUpdateWorkerSize: how many nodes
	// its controller's monitorNodeHealth updates at once.
	DefaultWorkers = 8
)

// ReportingController is the reportingController of the controller's
// Events, shown under FROM by kubectl describe node; it is the name
// Kubernetes' node lifecycle controller reports as.
const ReportingController = "node-controller"

// Event reasons.
const (
	EventRegisteredNode = "RegisteredNode"
	EventRemovingNode   = "RemovingNode"
	EventNodeNotReady   = "NodeNotReady"
	EventNodeReady      = "NodeReady"
	// The kubelet's, for a node cordoned and uncordoned: recorded when
	// the controller gives or takes the unschedulable taint.
	EventNodeNotSchedulable = "NodeNotSchedulable"
	EventNodeSchedulable    = "NodeSchedulable"
)

// maxWriteAttempts bounds the writes of one change to one node in one pass,
// each after a fresh GET when the previous one hit a conflict.
const maxWriteAttempts = 5

// Config configures the controller. Zero values mean defaults.
type Config struct {
	// Client reaches the API server. Required.
	Client kubernetes.Interface
	// MonitorPeriod is the time between two monitor passes; default 5s.
	MonitorPeriod time.Duration
	// GracePeriod is how long a node's lease may go without changing before
	// the node is marked Unknown and tainted unreachable; default 50s. It
	// must be greater than MonitorPeriod.
	GracePeriod time.Duration
	// StartupGracePeriod replaces GracePeriod for a node that has never
	// posted a Ready condition, from when the controller registers it, as
	// kube-controller-manager's --node-startup-grace-period (1m there);
	// default GracePeriod.
	StartupGracePeriod time.Duration
	// Workers is how many nodes a pass visits at once; default
	// DefaultWorkers. Each visit that writes waits for the API server, so
	// a pass after many nodes went silent at once (a rack, a zone, the
	// network between them and the server) writes as fast as the client's
	// rate limit lets it only with several visits in flight.
	Workers int
	// Clock measures probe times and ticks the passes; default the real
	// clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Recorder receives the Events. By default each Run creates an
	// events.k8s.io/v1 recorder on Client, reporting as
	// ReportingController, and stops it when it returns.
	Recorder events.EventRecorder
	// Reads, when set, lists and watches Nodes and Leases for the node
	// and lease feeds in place of Client. leasehold serve
	// passes its watch cache's in-process reads
	// (apiserver.Server.ListerWatcher), so the controller sees the cache's
	// objects instead of decoding copies.
	// Writes and Events always go through Client.
	Reads func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error)
	// Zones sets how fast nodes get the NoExecute taints, by the state of
	// their zone (see zones.go); the zero value is DefaultZones.
	Zones Zones
	// CutOff, when set, tells since when the server has not followed
	// etcd's Leases (zero while it does); leasehold serve passes its watch
	// cache's (store.Kind.CutOff). Meanwhile renewals cannot be stored,
	// or are stored where the controller cannot see them, and its own
	// writes may wait in etcd to be made long after: a pass judges no
	// node. When the server follows etcd again after more than half a
	// grace period, every node gets a fresh grace period, as after an
	// absence (noticeAbsence).
	CutOff func() time.Time
}

// Controller marks nodes whose lease stopped changing unreachable.
type Controller struct {
	client  kubernetes.Interface
	reads   func(schema.GroupVersionResource, string) (cache.ListerWatcher, error) // Config.Reads
	period  time.Duration
	grace   time.Duration
	startup time.Duration // Config.StartupGracePeriod
	workers int
	zoneCfg Zones
	clock   clock.WithTicker
	log     *slog.Logger
	// droppedEvents counts the events dropped by the admission limit or
	// the bounded sink.
	droppedEvents atomic.Uint64
	events        events.EventRecorder // Config.Recorder
	metrics       metrics
	running       atomic.Bool

	// recorder is the one Run uses, and eventLimit, when set, admits
	// events to it (drops counts those it refuses); set by Run before it
	// starts its goroutines.
	recorder   events.EventRecorder
	eventLimit flowcontrol.PassiveRateLimiter
	drops      *eventDrops

	mu     sync.Mutex
	health map[string]*health
	// dirty names the nodes the next pass visits (see the package doc).
	dirty map[string]struct{}
	// prompt names the nodes whose NoSchedule taints disagree with what
	// they report (a cordon, a pressure condition, Ready False), which
	// Run visits at once rather than at the next pass, as Kubernetes'
	// controller taints them on the node's update; kick wakes it.
	prompt map[string]struct{}
	kick   chan struct{}
	// due holds each registered node once, by probe time: the pass takes
	// from it the nodes silent for longer than the grace period.
	due dueQueue
	// byState counts the registered nodes by the state (stateOf) of the
	// Ready status the last visit left them with (countLocked).
	byState map[string]int
	// zones holds each zone of a registered node by its key, and
	// disrupted is whether the last pass found no node Ready in any.
	zones     map[string]*zone
	disrupted bool
	// resumed is when every registered node last got a fresh grace
	// period (freshGraceLocked): when a pass found a node Ready again
	// after none in any zone was, or Run woke long after it should have
	// (noticeAbsence). A node silent since has that grace period before
	// it waits for a NoExecute taint.
	resumed time.Time
	// awake is when Run last finished its work (a pass, or the visits
	// between passes): the wait that follows lasts a period at most.
	// Run's goroutine alone uses it.
	awake time.Time
	// absences counts the times Run found it had not run (noticeAbsence).
	absences int
	// cutOff is Config.CutOff; cut is when a pass first found the server
	// not following etcd, on the controller's clock (zero: it follows).
	// Run's goroutine alone uses cut. cutOffs counts the fresh grace
	// periods given after one (followsEtcd).
	cutOff  func() time.Time
	cut     time.Time
	cutOffs int
	passes  int
	// visits is how many nodes the last pass visited, and promptVisits
	// how many were visited between passes (visitPrompt).
	visits       int
	promptVisits int
	// nodeEvents counts the node feed's notifications: passes read nodes
	// from the table the feed fills, and a test waits on this to know a
	// change has reached it.
	nodeEvents int
	// changed, once a test waits on it (changedLocked), is closed at the
	// next change of the fields above, so that tests can wait for the
	// controller without sleeping; nil while no one waits, so that a
	// running controller makes no channel per change.
	changed chan struct{}
}

// health is what the controller knows of one node name.
type health struct {
	// probe is when the controller last saw the lease change, or the
	// Ready condition's heartbeat, or first saw the node, by its own clock.
	probe time.Time
	// heartbeat is the lastHeartbeatTime of the Ready condition last seen.
	heartbeat time.Time
	// lease identifies the lease last seen; zero when none is known. A
	// value, not a pointer: every renewal seen replaces it.
	lease leaseMark
	// renewed is whether the lease changed since the node was registered,
	// which is what lets the controller set an Unknown node Ready again.
	renewed bool
	// uid is the uid of the Node registered under this name, "" before.
	uid types.UID
	// node is what the controller keeps of the Node of this name as last
	// seen; zero once it is gone (or before it is seen).
	node nodeState
	// ready is the Ready status the last pass left the node with.
	ready corev1.ConditionStatus
	// written is the node as the controller last wrote it, and superseded
	// the resourceVersions its writes replaced: while the feed still
	// shows one of those, its copy is older than written, which is used
	// instead (saving a write that could only conflict).
	written    *corev1.Node
	superseded []string
	// queued is whether the node is in the due queue.
	queued bool
	// zone is the registered node's zone as last seen, and excluded
	// whether it is left out of the zone's state; inQueue is whether it
	// waits in the zone's queue for a NoExecute taint, and granted
	// whether its next visit may add one.
	zone                       *zone
	excluded, inQueue, granted bool
}

// nodeState is what the controller keeps of a node as last seen: nothing
// (zero) when it is gone or not seen yet. When the node feed shares the
// watch cache's objects it is the node itself, held at no cost; otherwise
// the node was decoded for the controller alone, and keeping it would be
// a second copy of every Node in memory (about 1.4 KB each), so it is a
// summary of what a pass needs to tell whether it has anything to write,
// and a pass that has reads the node again first.
type nodeState struct {
	obj *corev1.Node
	sum *nodeSummary
}

// nodeSummary sums up a node.
type nodeSummary struct {
	uid types.UID
	rv  string
	// ready is the status of the Ready condition ("" without one).
	ready corev1.ConditionStatus
	// unknown: markUnknown would change nothing; taintsMatch:
	// reconcileTaints would change nothing for ready, adding no NoExecute
	// taint; noExecute: the node has a lifecycle NoExecute taint.
	unknown, taintsMatch, noExecute bool
	// zoneKey and zoneName are its zone's (nodeZone), and excluded
	// whether it is left out of the zone's state.
	zoneKey, zoneName string
	excluded          bool
}

func (st nodeState) seen() bool { return st.obj != nil || st.sum != nil }

// posted tells whether the node has a Ready condition: whether its agent
// (or anyone) ever posted its status.
func (st nodeState) posted() bool {
	if st.sum != nil {
		return st.sum.ready != ""
	}
	return st.obj != nil && readyStatus(st.obj) != ""
}

func (st nodeState) uid() types.UID {
	if st.sum != nil {
		return st.sum.uid
	}
	if st.obj != nil {
		return st.obj.UID
	}
	return ""
}

func (st nodeState) resourceVersion() string {
	if st.sum != nil {
		return st.sum.rv
	}
	if st.obj != nil {
		return st.obj.ResourceVersion
	}
	return ""
}

// stateOfNode is what the controller keeps of n; keep says whether it may
// hold n itself.
func stateOfNode(n *corev1.Node, keep bool) nodeState {
	if keep {
		return nodeState{obj: n}
	}
	sum := &nodeSummary{uid: n.UID, rv: n.ResourceVersion}
	// The statuses the API allows as the package's constants: a decoded
	// copy's own string would be one more small object per node.
	switch ready := readyStatus(n); ready {
	case corev1.ConditionTrue:
		sum.ready = corev1.ConditionTrue
	case corev1.ConditionFalse:
		sum.ready = corev1.ConditionFalse
	case corev1.ConditionUnknown:
		sum.ready = corev1.ConditionUnknown
	default:
		sum.ready = ready
	}
	// Whether the changes of a pass would change anything, asked of a
	// scratch node holding what they read and edit. Neither answer depends
	// on the time given.
	// The taints first: markUnknown changes the pressure conditions they
	// follow. A node mayNeedTaints rules out, most of a fleet, has its
	// taints as they should be.
	sum.taintsMatch = !mayNeedTaints(n) || taintsMatch(n, sum.ready)
	var scratch corev1.Node
	scratch.CreationTimestamp = n.CreationTimestamp
	scratch.Status.Conditions = slices.Clone(n.Status.Conditions)
	sum.unknown = !markUnknown(&scratch, time.Time{})
	sum.noExecute = hasNoExecute(n)
	sum.zoneKey, sum.zoneName, sum.excluded = nodeZone(n)
	return nodeState{sum: sum}
}

// leaseMark is what tells one sighting of a lease from the next.
type leaseMark struct {
	uid   types.UID
	renew time.Time // zero when spec.renewTime is unset
}

func markOf(l *coordinationv1.Lease) leaseMark {
	m := leaseMark{uid: l.UID}
	if l.Spec.RenewTime != nil {
		m.renew = l.Spec.RenewTime.Time
	}
	return m
}

func (m leaseMark) equal(o leaseMark) bool { return m.uid == o.uid && m.renew.Equal(o.renew) }

// zone is the zone key and name of the node and whether it is excluded
// from its zone's state.
func (st nodeState) zone() (key, name string, excluded bool) {
	if st.sum != nil {
		return st.sum.zoneKey, st.sum.zoneName, st.sum.excluded
	}
	return nodeZone(st.obj)
}

// noExecute reports whether the node has a lifecycle NoExecute taint.
func (st nodeState) noExecute() bool {
	if st.sum != nil {
		return st.sum.noExecute
	}
	return hasNoExecute(st.obj)
}

// known reports whether m marks a lease: every stored lease has a uid.
func (m leaseMark) known() bool { return m.uid != "" }

// New validates cfg and returns a controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("nodelifecycle: Client is required")
	}
	if cfg.MonitorPeriod == 0 {
		cfg.MonitorPeriod = DefaultMonitorPeriod
	}
	if cfg.GracePeriod == 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	if cfg.StartupGracePeriod == 0 {
		cfg.StartupGracePeriod = cfg.GracePeriod
	}
	if cfg.StartupGracePeriod < 0 {
		return nil, fmt.Errorf("nodelifecycle: startup grace period %v must be positive", cfg.StartupGracePeriod)
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("nodelifecycle: %d workers; want at least one", cfg.Workers)
	}
	if cfg.MonitorPeriod < 0 {
		return nil, fmt.Errorf("nodelifecycle: monitor period %v must be positive", cfg.MonitorPeriod)
	}
	if cfg.GracePeriod <= cfg.MonitorPeriod {
		return nil, fmt.Errorf("nodelifecycle: grace period %v must be greater than monitor period %v", cfg.GracePeriod, cfg.MonitorPeriod)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Zones == (Zones{}) {
		cfg.Zones = DefaultZones()
	}
	if err := cfg.Zones.Validate(); err != nil {
		return nil, fmt.Errorf("nodelifecycle: %w", err)
	}
	return &Controller{
		client:  cfg.Client,
		reads:   cfg.Reads,
		cutOff:  cfg.CutOff,
		period:  cfg.MonitorPeriod,
		grace:   cfg.GracePeriod,
		startup: cfg.StartupGracePeriod,
		workers: cfg.Workers,
		zoneCfg: cfg.Zones,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		events:  cfg.Recorder,
		metrics: newMetrics(),
		health:  map[string]*health{},
		dirty:   map[string]struct{}{},
		prompt:  map[string]struct{}{},
		kick:    make(chan struct{}, 1),
		byState: map[string]int{},
		zones:   map[string]*zone{},
	}, nil
}

// Run watches nodes and leases and monitors the nodes every MonitorPeriod
// until ctx ends, then returns nil. It returns an error only if it cannot
// start. Run may be called again after it returned (for a new term of
// leadership, say); each run starts from what it observes, giving every node
// a fresh grace period. Runs may not overlap.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("nodelifecycle: Run is already running")
	}
	defer c.running.Store(false)
	c.update(func() {
		c.health, c.dirty, c.due, c.byState = map[string]*health{}, map[string]struct{}{}, nil, map[string]int{}
		c.prompt = map[string]struct{}{}
		c.zones, c.disrupted, c.resumed = map[string]*zone{}, false, time.Time{}
		for _, st := range []string{stateReady, stateNotReady, stateUnknown} {
			c.metrics.nodes.WithLabelValues(st).Set(0)
		}
		c.metrics.resetZones()
	})
	ctx, cancel := context.WithCancel(ctx)
	nodes, leases, err := c.feeds()
	if err != nil {
		cancel()
		return err
	}
	var started sync.WaitGroup
	// Deferred in this order, cancel runs first, then Run waits for the
	// feeds to stop.
	defer started.Wait()
	defer cancel()

	c.recorder, c.eventLimit = c.events, nil
	c.cut = time.Time{} // a Run starts with a fresh grace period anyway
	if c.recorder == nil {
		c.drops = &eventDrops{n: &c.droppedEvents, log: c.log, clock: c.clock}
		c.eventLimit = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(eventQPS, eventBurst, c.clock)
		sink := newBoundedSink(&events.EventSinkImpl{Interface: c.client.EventsV1()}, maxPendingEvents, c.drops)
		b := events.NewBroadcaster(sink)
		defer b.Shutdown()
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("nodelifecycle: starting the event recorder: %w", err)
		}
		c.recorder = b.NewRecorder(scheme.Scheme, ReportingController)
	}

	started.Go(func() { _ = nodes.Run(ctx) })
	started.Go(func() { _ = leases.Run(ctx) })
	// The first pass visits every node only once every node and every
	// lease of the first lists has been seen.
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, leases.HasSynced) {
		return nil // ctx ended
	}

	c.log.Info("node lifecycle controller started", "monitorPeriod", c.period, "gracePeriod", c.grace)
	ticker := c.clock.NewTicker(c.period)
	defer ticker.Stop()
	for {
		c.monitor(ctx)
	wait:
		for {
			select {
			case <-ctx.Done():
				c.log.Info("node lifecycle controller stopped")
				return nil
			case <-c.kick:
				c.noticeAbsence()
				c.visitPrompt(ctx)
				c.awake = c.clock.Now()
			case <-ticker.C():
				c.noticeAbsence()
				break wait
			}
		}
	}
}

// noticeAbsence gives every registered node a fresh grace period when Run
// wakes more than half a grace period later than its ticker should have
// woken it: the process did not run meanwhile (stopped, as by SIGSTOP, or
// starved on a stalled machine), and neither did its feeds. The renewals
// made while it was away are still on their way to it, and a server
// stopped with it could not take them at all: judging silence now would
// blame every node for the controller's own absence, as a restart of the
// server would without the fresh grace period every Run starts with. The
// elector of a replica that was stopped while it led ends the term when
// its timers run again, but nothing orders that before this pass.
func (c *Controller) noticeAbsence() {
	now := c.clock.Now()
	away := now.Sub(c.awake) - c.period
	if away <= c.grace/2 {
		return
	}
	c.log.Warn("the node lifecycle controller did not run for a while (a stopped process or a stalled machine?): every node gets a fresh grace period", "away", away, "gracePeriod", c.grace)
	c.update(func() {
		c.freshGraceLocked(now)
		c.absences++
	})
}

// followsEtcd tells whether the server follows etcd's Leases, for a pass
// at now (see Config.CutOff); when it follows again after more than half a
// grace period, every node gets a fresh grace period. The renewals the
// agents made meanwhile could not be stored, or were stored through other
// replicas while this one could not see them: their silence is the
// server's, not theirs. A shorter cut is not noticed: a live agent renews
// every quarter of a grace period or so, and its silence so far is less
// than the grace period.
func (c *Controller) followsEtcd(now time.Time) bool {
	if c.cutOff == nil {
		return true
	}
	if since := c.cutOff(); !since.IsZero() {
		if c.cut.IsZero() {
			// Measured from now, on this clock, which no step of the wall
			// clock moves: the cache's time is for the log.
			c.cut = now
			c.log.Warn("the server does not follow etcd's leases: no node is judged until it does", "since", since)
		}
		return false
	}
	if c.cut.IsZero() {
		return true
	}
	out := now.Sub(c.cut)
	c.cut = time.Time{}
	if out <= c.grace/2 {
		c.log.Info("the server follows etcd's leases again", "cutOffFor", out)
		return true
	}
	c.log.Warn("the server follows etcd's leases again after more than half a grace period: every node gets a fresh grace period", "cutOffFor", out, "gracePeriod", c.grace)
	c.update(func() {
		c.freshGraceLocked(now)
		c.cutOffs++
	})
	return true
}

// freshGraceLocked gives every registered node a grace period from now,
// as a new Run does. Callers hold c.mu.
func (c *Controller) freshGraceLocked(now time.Time) {
	c.resumed = now
	for name, h := range c.health {
		if h.uid == "" {
			continue
		}
		h.probe = now
		c.queueLocked(name, h)
	}
}

// visitPrompt visits the nodes in prompt between two passes. A visit
// does what a pass's does; the pass after it finds nothing more to do.
// Zones are judged and NoExecute taints granted in passes alone.
func (c *Controller) visitPrompt(ctx context.Context) {
	now := c.clock.Now()
	var visit []string
	c.locked(func() {
		for name := range c.prompt {
			visit = append(visit, name)
		}
		clear(c.prompt)
	})
	workqueue.ParallelizeUntil(ctx, c.workers, len(visit), func(i int) {
		var n nodeState
		c.locked(func() {
			if h := c.health[visit[i]]; h != nil {
				n = h.node
			}
		})
		if n.seen() {
			c.monitorNode(ctx, visit[i], n, now)
		}
	})
	c.update(func() { c.promptVisits += len(visit) })
}

// update runs f under the mutex and wakes whoever waits for a change.
func (c *Controller) update(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// changedLocked is a channel closed at the controller's next change (update
// or the end of a pass). The caller holds c.mu.
func (c *Controller) changedLocked() <-chan struct{} {
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return c.changed
}

// locked runs f under the mutex without waking anyone: a pass changes the
// table node by node, and wakes its waiters once at the end (passes++),
// rather than at every node it visits.
func (c *Controller) locked(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

// feeds returns the feeds of the Nodes and of the Leases of
// kube-node-lease, read through Reads or else through Client.
func (c *Controller) feeds() (nodes, leases *feed.Feed, err error) {
	var nodeLW, leaseLW cache.ListerWatcher
	if c.reads == nil {
		nodeClient := c.client.CoreV1().Nodes()
		nodeLW = feed.ListWatch(c.client, nodeClient.List, nodeClient.Watch)
		leaseClient := c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
		leaseLW = feed.ListWatch(c.client, leaseClient.List, leaseClient.Watch)
	} else {
		if nodeLW, err = c.reads(corev1.SchemeGroupVersion.WithResource("nodes"), ""); err != nil {
			return nil, nil, fmt.Errorf("nodelifecycle: %w", err)
		}
		if leaseLW, err = c.reads(coordinationv1.SchemeGroupVersion.WithResource("leases"), corev1.NamespaceNodeLease); err != nil {
			return nil, nil, fmt.Errorf("nodelifecycle: %w", err)
		}
	}
	// The controller keeps what it needs of each node and lease in its
	// health table, and no informer's store of them besides.
	nodes, err = feed.New(feed.Config{ListerWatcher: nodeLW, Handler: c.nodeHandler(sharesObjects(nodeLW)), Clock: c.clock, Logger: c.log.With("resource", "nodes")})
	if err != nil {
		return nil, nil, fmt.Errorf("nodelifecycle: %w", err)
	}
	leases, err = feed.New(feed.Config{ListerWatcher: leaseLW, Handler: c.leaseHandler(), Clock: c.clock, Logger: c.log.With("resource", "leases")})
	if err != nil {
		return nil, nil, fmt.Errorf("nodelifecycle: %w", err)
	}
	return nodes, leases, nil
}

// sharesObjects reports whether lw hands out objects it shares with others
// and never changes (leasehold's watch cache does), which the controller
// can hold at no cost.
func sharesObjects(lw cache.ListerWatcher) bool {
	s, ok := lw.(interface{ SharesObjects() bool })
	return ok && s.SharesObjects()
}

// nodeHandler keeps each node's last state in the health table. Every
// change, deletions included, makes the node one the next pass visits.
func (c *Controller) nodeHandler(shared bool) feed.Handler {
	return feed.Handler{
		Seen: func(obj runtime.Object, _ bool) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return
			}
			st := stateOfNode(n, shared)
			prompt := scheduleTaintsDisagree(n)
			var heartbeat time.Time
			if rc := readyCondition(n); rc != nil {
				heartbeat = rc.LastHeartbeatTime.Time
			}
			now := c.clock.Now()
			c.update(func() {
				h := c.health[n.Name]
				if h == nil {
					h = &health{}
					c.health[n.Name] = h
				}
				// A status post with a new heartbeat of the same node is a
				// sign of life, as a lease renewal is; the controller's own
				// writes are not.
				own := h.written != nil && h.written.ResourceVersion == n.ResourceVersion
				if h.node.seen() && h.node.uid() == n.UID && !h.heartbeat.IsZero() && !heartbeat.Equal(h.heartbeat) && h.uid != "" && !own {
					h.probe = now
					c.queueLocked(n.Name, h)
				}
				h.heartbeat = heartbeat
				h.node = st
				c.nodeEvents++
				c.dirty[n.Name] = struct{}{}
				// Not the controller's own status write, which its taint
				// write follows.
				prompt = prompt && !(h.written != nil && slices.Contains(h.superseded, n.ResourceVersion))
				if prompt {
					c.prompt[n.Name] = struct{}{}
				}
			})
			if prompt {
				select {
				case c.kick <- struct{}{}:
				default: // already woken
				}
			}
		},
		Gone: func(obj runtime.Object) {
			if n, ok := obj.(*corev1.Node); ok {
				c.update(func() { c.nodeGoneLocked(n.Name) })
			}
		},
		Relisted: func(listed func(types.UID) bool) {
			c.update(func() {
				for name, h := range c.health {
					if h.node.seen() && !listed(h.node.uid()) {
						c.nodeGoneLocked(name)
					}
				}
			})
		},
	}
}

// nodeGoneLocked records that the node name is gone; the next pass forgets
// it. Callers hold c.mu.
func (c *Controller) nodeGoneLocked(name string) {
	c.nodeEvents++
	c.dirty[name] = struct{}{}
	if h := c.health[name]; h != nil {
		h.node = nodeState{}
	}
}

// leaseHandler feeds the health table from the leases' feed.
func (c *Controller) leaseHandler() feed.Handler {
	return feed.Handler{
		Seen: func(obj runtime.Object, initial bool) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				c.observeLease(l, initial)
			}
		},
		Gone: func(obj runtime.Object) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				c.forgetLease(l.Name)
			}
		},
		Relisted: c.forgetUnlistedLeases,
	}
}

// observeLease records a sighting of a node lease. Leases in the initial
// list are first sightings: they start a fresh grace period without counting
// as a renewal. Afterwards any lease whose uid or renewTime differs from the
// one last seen, a new lease included, is a renewal.
func (c *Controller) observeLease(l *coordinationv1.Lease, initial bool) {
	now := c.clock.Now()
	mark := markOf(l)
	c.update(func() {
		h := c.health[l.Name]
		if h == nil {
			h = &health{probe: now}
			c.health[l.Name] = h
		}
		if h.lease.known() && h.lease.equal(mark) {
			return
		}
		h.lease = mark
		h.probe = now
		if !initial {
			h.renewed = true
		}
		if h.uid != "" {
			c.queueLocked(l.Name, h)
			if h.ready != corev1.ConditionTrue {
				// Perhaps an Unknown node to mark Ready again.
				c.dirty[l.Name] = struct{}{}
			}
		}
	})
}

// forgetLease records that a node lease was deleted, so that the next one
// of that name counts as a renewal. The probe time stays: a node without a
// lease expires like one whose lease stopped.
func (c *Controller) forgetLease(name string) {
	c.update(func() { c.forgetLeaseLocked(name) })
}

// forgetUnlistedLeases forgets, after a relist of the leases, every lease
// the list did not hold (listed is false for its uid): they were deleted
// while the controller was not watching.
func (c *Controller) forgetUnlistedLeases(listed func(types.UID) bool) {
	c.update(func() {
		for name, h := range c.health {
			if h.lease.known() && !listed(h.lease.uid) {
				c.forgetLeaseLocked(name)
			}
		}
	})
}

func (c *Controller) forgetLeaseLocked(name string) {
	h := c.health[name]
	if h == nil {
		return
	}
	if h.uid == "" && !h.node.seen() {
		delete(c.health, name)
		return
	}
	h.lease = leaseMark{}
}

// monitor is one pass: it visits the nodes named in dirty and those due
// (see the package doc), as the health table last saw them.
func (c *Controller) monitor(ctx context.Context) {
	now := c.clock.Now()
	if !c.followsEtcd(now) {
		c.update(func() { c.passedLocked() })
		return
	}
	var visit []string
	c.locked(func() {
		c.dueLocked(now)
		visit = make([]string, 0, len(c.dirty))
		for name := range c.dirty {
			visit = append(visit, name)
		}
		// A fresh map: after the first pass of a fleet, clearing would
		// keep room for every node.
		c.dirty = map[string]struct{}{}
	})
	var visits atomic.Int64
	// Visits of different nodes share only the table, under c.mu.
	workqueue.ParallelizeUntil(ctx, c.workers, len(visit), func(i int) {
		name := visit[i]
		var n nodeState
		c.locked(func() {
			if h := c.health[name]; h != nil {
				n = h.node
			}
		})
		if !n.seen() {
			c.forgetNode(name)
			return
		}
		c.monitorNode(ctx, name, n, now)
		visits.Add(1)
	})
	if ctx.Err() != nil {
		// Stopping: ParallelizeUntil starts no visit once ctx has ended,
		// as the rest of the pass would only fail, node by node. The next
		// Run starts afresh.
		return
	}
	c.update(func() {
		c.judgeZonesLocked(now)
		c.grantLocked()
		c.visits = int(visits.Load())
		c.passedLocked()
	})
}

// passedLocked ends a pass: Run is awake from now, and the pass counts.
// Both under the one lock, so that whoever waits for the count (a test
// before it steps a fake clock) finds awake already read from the clock.
func (c *Controller) passedLocked() {
	c.awake = c.clock.Now()
	c.passes++
}

// forgetNode drops a node that is gone, announcing it if it was
// registered.
func (c *Controller) forgetNode(name string) {
	var removed types.UID
	c.locked(func() {
		h := c.health[name]
		if h == nil || h.node.seen() {
			return
		}
		if h.uid == "" {
			if !h.lease.known() {
				delete(c.health, name)
			}
			return
		}
		c.countLocked(h.ready, -1)
		c.unplaceLocked(h)
		delete(c.health, name)
		removed = h.uid
	})
	if removed != "" {
		c.log.Info("node deleted", "node", name)
		c.event(name, removed, EventRemovingNode, "Remove", "Node %s event: Removing Node %s from Controller", name, name)
	}
}

// countLocked adds d to the registered nodes whose Ready status is s, and
// sets their gauge: during a long pass (thousands of nodes gone silent at
// once) the gauge follows each node marked. Callers hold c.mu.
func (c *Controller) countLocked(s corev1.ConditionStatus, d int) {
	st := stateOf(s)
	c.byState[st] += d
	c.metrics.nodes.WithLabelValues(st).Set(float64(c.byState[st]))
}

// queueLocked puts the registered node name, of health h, in the due queue
// unless it is there. Callers hold c.mu.
func (c *Controller) queueLocked(name string, h *health) {
	if h.queued || h.uid == "" {
		return
	}
	h.queued = true
	heap.Push(&c.due, dueEntry{probe: h.probe, name: name, h: h})
}

// dueLocked moves the nodes silent for longer than the grace period at now
// from the due queue to dirty. A renewal does not move its node's entry:
// an entry found to be older than its node's probe time goes back with the
// newer one. Callers hold c.mu.
func (c *Controller) dueLocked(now time.Time) {
	for len(c.due) > 0 && expired(c.due[0].probe, c.grace, now) {
		e := heap.Pop(&c.due).(dueEntry)
		h := e.h
		if c.health[e.name] != h {
			continue // the node was deleted
		}
		h.queued = false
		if !expired(h.probe, c.grace, now) {
			c.queueLocked(e.name, h)
			continue
		}
		// Queued again when its lease changes.
		c.dirty[e.name] = struct{}{}
	}
}

// dueEntry is a registered node in the due queue, with its probe time when
// it was queued.
type dueEntry struct {
	probe time.Time
	name  string
	h     *health
}

// dueQueue is a min-heap of entries by probe time (container/heap).
type dueQueue []dueEntry

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].probe.Before(q[j].probe) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(dueEntry)) }
func (q *dueQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = dueEntry{}
	*q = old[:len(old)-1]
	return e
}

// monitorNode registers the node name, last seen as seen, if it is new,
// brings its Ready condition and taints in line with its lease, and
// returns the Ready status it leaves. A node whose write failed is visited
// again at the next pass.
func (c *Controller) monitorNode(ctx context.Context, name string, seen nodeState, now time.Time) corev1.ConditionStatus {
	var (
		h          *health
		registered bool
		replaced   types.UID
		probe      time.Time
		renewed    bool
		before     corev1.ConditionStatus
		superseded []string
		written    *corev1.Node
		ne         noExecute
	)
	zoneKey, zoneName, excluded := seen.zone()
	c.locked(func() {
		h = c.health[name]
		if h == nil {
			h = &health{}
			c.health[name] = h
		}
		if h.uid != seen.uid() {
			// A new node, or a new one of an old name: a fresh grace period,
			// and only renewals seen from now on count.
			registered, replaced = true, h.uid
			if replaced != "" {
				c.countLocked(h.ready, -1)
				c.unplaceLocked(h)
			}
			probe := now
			if !seen.posted() {
				// Never posted a status: the startup grace period, as a
				// probe moved by the difference, which keeps the due
				// queue in probe order.
				probe = now.Add(c.startup - c.grace)
			}
			*h = health{probe: probe, lease: h.lease, uid: seen.uid(), queued: h.queued, node: h.node}
			c.countLocked(h.ready, 1)
			c.queueLocked(name, h)
		}
		c.placeLocked(h, c.zoneLocked(zoneKey, zoneName), excluded)
		switch {
		case c.disrupted:
			ne = noExecuteDrop
		case h.granted:
			ne = noExecuteAdd
		}
		if h.written != nil && slices.Contains(h.superseded, seen.resourceVersion()) {
			written = h.written
		} else {
			h.written, h.superseded = nil, nil
		}
		probe, renewed, before = h.probe, h.renewed, h.ready
		superseded = slices.Clone(h.superseded)
	})
	if written != nil {
		// The feed still shows a node older than the controller's own
		// last write of it.
		seen = stateOfNode(written, true)
	}
	if replaced != "" {
		c.event(name, replaced, EventRemovingNode, "Remove", "Node %s event: Removing Node %s from Controller", name, name)
	}
	if registered {
		// Every node counts as registered when a term starts, so at Info a
		// new leader would log one line per node of the fleet; Kubernetes'
		// controller logs this at verbosity 1 too.
		c.log.Debug("node registered", "node", name)
		c.event(name, seen.uid(), EventRegisteredNode, "Register", "Node %s event: Registered Node %s in Controller", name, name)
	}

	var (
		cur   *corev1.Node
		wrote bool
		err   error
		after corev1.ConditionStatus
	)
	// Most nodes in most passes need nothing written, which the summary
	// tells; a node that does is read again unless the feed's own copy is
	// at hand.
	silent := expired(probe, c.grace, now)
	n := seen.obj
	if sum := seen.sum; sum != nil {
		after = sum.ready
		if silent && !sum.unknown || !silent && renewed && sum.ready == corev1.ConditionUnknown || !sum.taintsMatch ||
			ne == noExecuteAdd && !sum.noExecute && needsNoExecute(sum.ready) || ne == noExecuteDrop && sum.noExecute {
			got, gerr := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case gerr != nil && !apierrors.IsNotFound(gerr):
				err = fmt.Errorf("reading node %s: %w", name, gerr)
			case gerr == nil && got.UID == sum.uid:
				n = got
			}
			// Otherwise gone or replaced since: the feed tells, and the
			// next pass visits it.
		}
	}
	if n != nil {
		cur = n
		switch {
		case silent:
			cur, wrote, err = c.write(ctx, n, true, &superseded, func(n *corev1.Node) bool { return markUnknown(n, now) })
			if wrote {
				c.log.Warn("node lease not renewed within the grace period, node marked Unknown", "node", name, "silentFor", now.Sub(probe), "gracePeriod", c.grace)
			}
		case renewed && readyStatus(n) == corev1.ConditionUnknown: // markRenewed changes nothing otherwise
			cur, wrote, err = c.write(ctx, n, true, &superseded, func(n *corev1.Node) bool { return markRenewed(n, now) })
			if wrote {
				c.log.Info("node lease renewed again, node marked Ready", "node", name)
			}
		}
		// A Ready node without the managed taints, most nodes in most
		// passes, needs no taint write: skip even write's scratch copy.
		if ready := readyStatus(cur); err == nil && mayNeedTaints(cur) {
			var tainted bool
			had, cordoned := hasNoExecute(cur), hasUnschedulableTaint(cur)
			cur, tainted, err = c.write(ctx, cur, false, &superseded, func(n *corev1.Node) bool { return reconcileTaints(n, ready, now, ne) })
			wrote = wrote || tainted
			if tainted && !had && hasNoExecute(cur) {
				c.metrics.noExecuteTaints.WithLabelValues(zoneName).Inc()
				c.log.Info("node tainted NoExecute", "node", name, "zone", zoneName)
			}
			if tainted && hasUnschedulableTaint(cur) != cordoned {
				reason := EventNodeSchedulable
				if !cordoned {
					reason = EventNodeNotSchedulable
				}
				// The kubelet's events in Kubernetes, which name the node
				// by its name alone.
				c.event(name, types.UID(name), reason, "StatusChange", "Node %s status is now: %s", name, reason)
			}
		}
		after = readyStatus(cur)
	}
	noExec := seen.noExecute()
	if cur != nil {
		noExec = hasNoExecute(cur)
	}
	if err != nil {
		c.metrics.writeErrors.Inc()
		c.log.Info("node update failed, retrying at the next pass", "node", name, "err", err)
		c.locked(func() { c.dirty[name] = struct{}{} })
	}

	c.locked(func() {
		if c.health[name] != h {
			return
		}
		if before != after {
			c.setReadyLocked(h, after)
		}
		if wrote {
			h.written, h.superseded = cur, superseded
		}
		if noExec || !needsNoExecute(after) {
			h.granted = false
			c.dequeueLocked(h)
		} else if !c.disrupted && !h.granted && (silent || after != corev1.ConditionUnknown || !probe.Equal(c.resumed)) {
			// Tainted NoExecute when its zone grants it (zones.go); a node
			// silent since the end of a full disruption, visited within
			// the fresh grace period that gave it (for a write of it, such
			// as the echo of the one that took its taint away), waits for
			// the pass that finds it silent.
			c.enqueueLocked(name, h)
		}
	})
	if before == after && !wrote {
		// Nothing more to record: most nodes in most passes.
		return after
	}
	if registered || before == after {
		return after
	}
	c.metrics.transitions.WithLabelValues(stateOf(after)).Inc()
	// The notes are kube-controller-manager's, which alerts match.
	switch {
	case after == corev1.ConditionTrue:
		c.event(name, seen.uid(), EventNodeReady, "StatusChange", "Node %s status is now: %s", name, EventNodeReady)
	case before == corev1.ConditionTrue:
		c.event(name, seen.uid(), EventNodeNotReady, "StatusChange", "Node %s status is now: %s", name, EventNodeNotReady)
	}
	return after
}

// write applies change to a copy of n and writes it, the status with
// UpdateStatus or the rest with Update. On a conflict it reads the node
// again and reapplies change. It returns the node as last written or read
// and whether it wrote; on an error, n itself. The resourceVersion each
// successful write replaced is appended to superseded.
func (c *Controller) write(ctx context.Context, n *corev1.Node, status bool, superseded *[]string, change func(*corev1.Node) bool) (*corev1.Node, bool, error) {
	base := n
	for attempt := 1; ; attempt++ {
		// Most passes change nothing: ask on a cheap copy first, and copy
		// the whole node only to write it.
		if !change(scratchCopy(base)) {
			return base, false, nil
		}
		nodes := c.client.CoreV1().Nodes()
		next := base.DeepCopy()
		change(next)
		var got *corev1.Node
		var err error
		if status {
			got, err = nodes.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		} else {
			got, err = nodes.Update(ctx, next, metav1.UpdateOptions{})
		}
		if err == nil {
			*superseded = append(*superseded, base.ResourceVersion)
			return got, true, nil
		}
		if !apierrors.IsConflict(err) || attempt == maxWriteAttempts {
			return n, false, fmt.Errorf("updating node %s: %w", n.Name, err)
		}
		if base, err = nodes.Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			return n, false, fmt.Errorf("reading node %s after a conflict: %w", n.Name, err)
		}
	}
}

// scratchCopy copies n as far as the change functions of write (markUnknown,
// markRenewed, reconcileTaints) modify it: they edit and append to
// Status.Conditions, whose elements hold no pointers, and replace
// Spec.Taints. Everything else is shared with n and must not be modified.
func scratchCopy(n *corev1.Node) *corev1.Node {
	c := *n
	c.Status.Conditions = slices.Clone(n.Status.Conditions)
	return &c
}

// event records an Event about the node name whose uid is uid. Kubernetes'
// node lifecycle controller names a node by its uid, the kubelet by its
// name in the uid's place; kubectl describe node looks for both.
func (c *Controller) event(name string, uid types.UID, reason, action, note string, args ...any) {
	if c.eventLimit != nil && !c.eventLimit.TryAccept() {
		c.drops.drop("events recorded faster than they can be written", reason, name)
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: uid}
	c.recorder.Eventf(ref, nil, corev1.EventTypeNormal, reason, action, note, args...)
}
