// Package agent is the node heartbeat agent that `leasehold agent` runs on
// every machine. It registers the machine as a v1 Node, keeps the Lease named
// after the node in kube-node-lease fresh, and posts the node's status, so
// that the server's node lifecycle controller can tell within seconds whether
// the machine is alive.
//
// # Timing model
//
// Run is a single loop in the caller's goroutine; the agent starts no
// goroutines of its own. Each pass of the loop does, in order, only what is
// needed:
//
//  1. register the Node if the agent holds no copy of it: create it, or adopt
//     the Node of that name if one exists;
//  2. renew the Lease: an Update of the agent's cached copy with a fresh
//     spec.renewTime, without a GET first. A Conflict is answered with one
//     GET and a second Update. A NotFound means the lease was deleted: the
//     agent checks that its Node still exists with the uid it knows,
//     registers the Node again if it does not, and creates the lease anew,
//     owned by that Node. No lease is ever created without an ownerReference
//     to a Node the agent has just seen;
//  3. post the node status (Ready condition, addresses, nodeInfo) with an
//     UpdateStatus when it differs from what was last posted, or when
//     NodeStatusReportPeriod has passed since the last post. If the Node is
//     gone (deleted while its lease lived on, as happens without a garbage
//     collector), the pass fails and the next one registers the Node again
//     and points the lease at it;
//  4. write the Events recorded about the node (events.go): Rebooted, when
//     the Node adopted was last reported from another boot; the kubelet's
//     events of a pressure condition whose status changed from the one
//     last posted (or the adopted Node's). An Event the server cannot take
//     for want of service waits for the next pass; any other refusal drops
//     it. The kubelet's Starting is not recorded: at 10 000 nodes one such
//     Event each cost the server 16 MiB more memory and etcd's database
//     16.5 MiB more until the Events expired (2 cores), for what the
//     agent's log says as well.
//
// After a pass that succeeded the agent waits RenewInterval plus a random
// jitter of up to 4%, measured from the end of the pass, so that the renewals
// of a fleet started at the same moment drift apart. After a pass that failed
// it waits 200ms, doubling the wait after each further failure up to 7s or
// RenewInterval, whichever is less: 200ms, 400ms, 800ms, 1.6s, 3.2s, 6.4s,
// 7s, 7s, … with the default lease. The first success returns it to
// RenewInterval. So while a server is down the agent tries at least every
// 7s (and at least as often as it renews), and renews that soon after the
// server comes back: a short lease's agent must not wait longer than the
// grace period the server gives its node once it is back.
//
// Every wait is on the injected clock; every timestamp written (renewTime,
// condition heartbeat and transition times) is read from it too.
//
// # Failover
//
// Config.Clients holds one client per server. The agent talks to one at a
// time. When a request gets no answer from the server's API (connection
// refused, timeout, TLS failure) or the server answers 5xx or 429, the agent
// moves on to the next client for its next attempt, after the usual backoff;
// any other error leaves it where it is. It stays with a client as long as
// that client works. A server that stops answering but keeps its
// connections open (a frozen machine, a partition) is left only once a
// request times out, so the clients need a timeout well inside the lease's
// duration: `leasehold agent` gives each request the renew interval, as the
// kubelet gives its heartbeat client.
//
// # Stopping
//
// When the context passed to Run ends, the agent stops renewing and Run
// returns nil. It deletes nothing: the lease simply stops being renewed and
// the node lifecycle controller notices.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/version"
)

// DefaultRenewInterval is the renew interval of a lease of duration d when
// Config.RenewInterval is not set: a quarter of it, as the kubelet's.
func DefaultRenewInterval(d time.Duration) time.Duration { return d / 4 }

// Defaults and fixed timings; see the package comment.
const (
	DefaultLeaseDuration          = 40 * time.Second
	DefaultNodeStatusReportPeriod = 5 * time.Minute

	firstBackoff = 200 * time.Millisecond
	maxBackoff   = 7 * time.Second
	jitterFactor = 0.04
)

// Ready condition the agent posts for its node.
const (
	ReadyReason  = "LeaseholdAgentReady"
	ReadyMessage = "leasehold agent is running and renewing the node lease"
)

// Config configures an Agent. Zero values mean the defaults given per field.
type Config struct {
	// Clients reach the leasehold servers, one client per server. Required:
	// at least one. See the package comment for failover.
	Clients []kubernetes.Interface
	// NodeName names the Node and its Lease; it is also the value of the
	// kubernetes.io/hostname label and the node's Hostname address.
	// Default: the host name, lower-cased.
	NodeName string
	// LeaseDuration is written to the lease's spec.leaseDurationSeconds;
	// whole seconds, at least 1s. Default 40s.
	LeaseDuration time.Duration
	// RenewInterval is the time between two renewals, before jitter. It must
	// be shorter than LeaseDuration. Default LeaseDuration/4.
	RenewInterval time.Duration
	// NodeStatusReportPeriod is the longest time between two posts of the
	// node status when nothing in it changed. Default 5m.
	NodeStatusReportPeriod time.Duration
	// Addresses are the node's status.addresses. Default: the host's
	// non-loopback, non-link-local IPs as InternalIP, then NodeName as
	// Hostname, looked up again on every pass so that a change is posted at
	// once.
	Addresses []corev1.NodeAddress
	// NodeIPs choose the node's InternalIP addresses, as the kubelet's
	// --node-ip (ParseNodeIP reads it): those of them the host has, looked
	// up on every pass, or for 0.0.0.0 or :: the host's addresses of that
	// family. Ignored when Addresses is set. Default: none chosen.
	NodeIPs []net.IP
	// Labels are added to the node's labels. The agent itself sets
	// kubernetes.io/hostname, kubernetes.io/os and kubernetes.io/arch; Labels
	// may not set them.
	Labels map[string]string
	// Taints are the node's taints when the agent registers it, as the
	// kubelet's --register-with-taints: a node that exists keeps its own.
	Taints []corev1.Taint
	// Version is reported as nodeInfo.kubeletVersion, the VERSION column
	// of `kubectl get nodes`. Default: leasehold's version.
	Version string
	// EvictionHard are the thresholds below which the node is under
	// memory, disk or PID pressure, in the kubelet's --eviction-hard form
	// (ParseThresholds). Default DefaultEvictionHard; "none" sets none,
	// and the three conditions stay False.
	EvictionHard string
	// PressureTransitionPeriod is how long a pressure condition stays True
	// after its signal was last below its threshold. Default
	// DefaultPressureTransitionPeriod.
	PressureTransitionPeriod time.Duration
	// ReportCapacity posts the node's capacity and allocatable (cpu,
	// memory, ephemeral-storage), as the kubelet does. Off by default: a
	// Node carrying them costs the server about 4.7 KiB more of memory
	// (docs/PERFORMANCE.md, "Capacity"), and leasehold schedules nothing by
	// them.
	ReportCapacity bool
	// HostStats measures the host for the pressure conditions. Default:
	// the machine's own /proc and root file system.
	HostStats func() (HostStats, error)
	// Clock is what the agent waits on and reads timestamps from. Default
	// clock.RealClock{}.
	Clock clock.Clock
	// Logger receives the agent's log. Default: discard.
	Logger *slog.Logger
}

// Agent keeps one node's registration and lease alive. Create it with New.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	nodeInfo  corev1.NodeSystemInfo
	addresses func() []corev1.NodeAddress
	jitter    func(time.Duration) time.Duration
	metrics   metrics
	pressure  *pressureTracker
	// hostErr is the last error measuring the host, logged when it changes.
	hostErr string
	// missingIPs are the NodeIPs the host lacked at the last look, logged
	// when they change.
	missingIPs string

	// The state below belongs to Run's goroutine.

	current  int                   // index of the client in use
	node     *corev1.Node          // our Node as last seen; nil: register it
	lease    *coordinationv1.Lease // our Lease as last written; nil: GET it first
	posted   *nodeStatus           // the status last posted; nil: post it now
	postedAt time.Time             // when it was posted
	// renewedAt is when the lease was last renewed, by the agent's clock.
	renewedAt time.Time
	// events wait to be written (events.go); lastEventNanos is the time
	// in the last one's name.
	events         []pendingEvent
	lastEventNanos int64
}

// New validates cfg, fills in its defaults and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if len(cfg.Clients) == 0 {
		return nil, errors.New("agent: at least one client is required")
	}
	for i, c := range cfg.Clients {
		if c == nil {
			return nil, fmt.Errorf("agent: client %d is nil", i)
		}
	}
	if cfg.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("agent: no node name given and the host name is unknown: %w", err)
		}
		cfg.NodeName = strings.ToLower(strings.TrimSpace(host))
	}
	if errs := validation.IsDNS1123Subdomain(cfg.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("agent: invalid node name %q: %s", cfg.NodeName, strings.Join(errs, "; "))
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.LeaseDuration < time.Second || cfg.LeaseDuration%time.Second != 0 {
		return nil, fmt.Errorf("agent: lease duration %v must be a whole number of seconds, at least 1s", cfg.LeaseDuration)
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = DefaultRenewInterval(cfg.LeaseDuration)
	}
	if cfg.RenewInterval < 0 || cfg.RenewInterval >= cfg.LeaseDuration {
		return nil, fmt.Errorf("agent: renew interval %v must be positive and shorter than the lease duration %v", cfg.RenewInterval, cfg.LeaseDuration)
	}
	if cfg.NodeStatusReportPeriod == 0 {
		cfg.NodeStatusReportPeriod = DefaultNodeStatusReportPeriod
	}
	if cfg.NodeStatusReportPeriod < 0 {
		return nil, fmt.Errorf("agent: node status report period %v must be positive", cfg.NodeStatusReportPeriod)
	}
	// As the kubelet refuses its --node-labels: the server would refuse
	// a node identity's registration with them (node restriction).
	if bad := auth.ForbiddenNodeLabels(cfg.Labels, nil); len(bad) > 0 {
		return nil, fmt.Errorf("agent: a node may not set the labels %s (label the Node as an administrator instead: kubectl label node %s %s=...): of the kubernetes.io and k8s.io labels, a node may set those under %s, and %s; node-restriction.kubernetes.io is for administrators",
			strings.Join(bad, ", "), cfg.NodeName, bad[0], strings.Join(kubeletapis.KubeletLabelNamespaces(), " or "), strings.Join(kubeletapis.KubeletLabels(), ", "))
	}
	for k, v := range cfg.Labels {
		switch k {
		case corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable, kubeletapis.LabelOS, kubeletapis.LabelArch:
			return nil, fmt.Errorf("agent: label %s is set by the agent itself", k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("agent: invalid label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("agent: invalid value %q of label %s: %s", v, k, strings.Join(errs, "; "))
		}
	}
	seenTaints := map[string]bool{}
	for _, t := range cfg.Taints {
		if err := checkTaint(t); err != nil {
			return nil, fmt.Errorf("agent: taint %s: %w", t.ToString(), err)
		}
		k := t.Key + ":" + string(t.Effect)
		if seenTaints[k] {
			return nil, fmt.Errorf("agent: taint %s given twice", k)
		}
		seenTaints[k] = true
	}
	if len(cfg.NodeIPs) > 0 {
		ips := make([]string, len(cfg.NodeIPs))
		for i, ip := range cfg.NodeIPs {
			ips[i] = ip.String()
		}
		if _, err := ParseNodeIP(strings.Join(ips, ",")); err != nil {
			return nil, fmt.Errorf("agent: node IPs: %w", err)
		}
	}
	if cfg.EvictionHard == "" {
		cfg.EvictionHard = DefaultEvictionHard
	}
	var thresholds []Threshold
	if cfg.EvictionHard != "none" {
		var err error
		if thresholds, err = ParseThresholds(cfg.EvictionHard); err != nil {
			return nil, fmt.Errorf("agent: eviction thresholds: %w", err)
		}
	}
	if cfg.PressureTransitionPeriod == 0 {
		cfg.PressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	if cfg.PressureTransitionPeriod < 0 {
		return nil, fmt.Errorf("agent: pressure transition period %v must be positive", cfg.PressureTransitionPeriod)
	}
	if cfg.HostStats == nil {
		cfg.HostStats = readHostStats
	}
	if cfg.Version == "" {
		cfg.Version = version.Version
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}

	a := &Agent{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.NodeName),
		nodeInfo: hostNodeInfo(cfg.Version),
		jitter:   jitter,
		metrics:  newMetrics(),
		pressure: newPressureTracker(thresholds, cfg.PressureTransitionPeriod),
	}
	switch {
	case cfg.Addresses != nil:
		a.addresses = func() []corev1.NodeAddress { return cfg.Addresses }
	case len(cfg.NodeIPs) > 0:
		a.addresses = func() []corev1.NodeAddress {
			addrs, _ := net.InterfaceAddrs() // on error: only the Hostname address
			out, missing := chosenAddresses(cfg.NodeName, cfg.NodeIPs, addrs)
			if m := strings.Join(missing, ","); m != a.missingIPs {
				a.missingIPs = m
				if m != "" {
					a.log.Warn("the host has no such address; the node's addresses go without it", "nodeIP", m)
				}
			}
			return out
		}
	default:
		a.addresses = func() []corev1.NodeAddress { return hostAddresses(cfg.NodeName) }
	}
	return a, nil
}

// Run registers the node and heartbeats until ctx ends, then returns nil.
// Failures are retried, never returned. Run must not be called concurrently.
func (a *Agent) Run(ctx context.Context) error {
	a.log.Info("agent starting", "leaseDuration", a.cfg.LeaseDuration, "renewInterval", a.cfg.RenewInterval, "servers", len(a.cfg.Clients))
	var backoff time.Duration
	for {
		wait := a.jitter(a.cfg.RenewInterval)
		if err := a.sync(ctx); err != nil && ctx.Err() == nil {
			backoff = nextBackoff(backoff, a.cfg.RenewInterval)
			wait = backoff
			a.metrics.errors.Inc()
			a.log.Warn("heartbeat failed, will retry", "err", err, "retryIn", backoff)
		} else {
			backoff = 0
		}
		t := a.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			a.log.Info("agent stopped")
			return nil
		case <-t.C():
		}
	}
}

// sync makes one pass with the current client and moves to the next client
// if the current server is unavailable.
func (a *Agent) sync(ctx context.Context) error {
	err := a.syncWith(ctx, a.cfg.Clients[a.current])
	if err != nil && ctx.Err() == nil && len(a.cfg.Clients) > 1 && serverUnavailable(err) {
		a.current = (a.current + 1) % len(a.cfg.Clients)
		a.metrics.failovers.Inc()
		a.log.Warn("server unavailable, switching to the next one", "server", a.current)
	}
	return err
}

func (a *Agent) syncWith(ctx context.Context, c kubernetes.Interface) error {
	if a.node == nil {
		if err := a.registerNode(ctx, c); err != nil {
			return err
		}
	}
	if err := a.renewLease(ctx, c); err != nil {
		return err
	}
	now := a.cfg.Clock.Now()
	if !a.renewedAt.IsZero() && now.Sub(a.renewedAt) > silentAfter(a.cfg.LeaseDuration, a.cfg.RenewInterval) && a.posted != nil {
		// Silent long enough (stopped, starved, cut off) that the node
		// lifecycle controller may have set the node's conditions to
		// Unknown, whose grace period the agent does not know: the status
		// goes again now, as the kubelet posts it when the Node on the
		// server differs from its own.
		a.log.Info("the lease went unrenewed for a while: posting the node status again", "silentFor", now.Sub(a.renewedAt).Round(time.Second))
		a.posted = nil
	}
	a.renewedAt = now
	if err := a.reportStatus(ctx, c); err != nil {
		return err
	}
	a.writeEvents(ctx, c)
	return nil
}

// silentAfter is how long without a renewal makes the agent post its
// status again at the next one: two renew intervals missed, or the lease's
// duration if that is shorter. (The grace period is the server's, and may
// be shorter than the lease's duration.)
func silentAfter(lease, renew time.Duration) time.Duration {
	return min(lease, 3*renew)
}

// serverUnavailable tells whether err means the server could not serve the
// request at all, so that another server might: no API answer, 5xx or 429.
func serverUnavailable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	code := status.Status().Code
	return code >= 500 || code == http.StatusTooManyRequests
}

// nextBackoff returns the wait after a failure that followed a wait of prev
// (0 after a success), for an agent that renews every renew.
func nextBackoff(prev, renew time.Duration) time.Duration {
	if prev == 0 {
		return min(firstBackoff, renew)
	}
	return min(2*prev, maxBackoff, renew)
}

// jitter returns d lengthened by a random amount of up to 4%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Float64()*jitterFactor*float64(d))
}
