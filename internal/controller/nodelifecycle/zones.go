package nodelifecycle

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/component-helpers/node/topology"
)

// Zones: how fast the NoExecute taints go on, Kubernetes' way.
//
// A NoSchedule taint only keeps new work off a node; a NoExecute taint
// tells whoever runs work there to move it away, so a wrong one costs much
// more. When many nodes go silent at once, the likelier cause is the
// network between them and the server, or the server's side of it, than
// that many machines died. So, as Kubernetes' node lifecycle controller
// does, the controller gives NoExecute taints to the nodes of a zone (the
// topology.kubernetes.io/region and zone labels; nodes without them make
// one zone) at a limited rate, and it judges each zone after every pass:
//
//   - normal: the node-eviction rate (0.1 nodes a second);
//   - partly disrupted, at least the unhealthy-zone threshold (55 %) of
//     its nodes and more than two not Ready: the secondary rate (0.01) in
//     a zone of more than the large-cluster threshold (50 nodes), in a
//     smaller one none at all;
//   - fully disrupted, no node Ready: the normal rate again, since the
//     zone itself is likely down, unless every zone is fully disrupted.
//     Then the controller itself is likely cut off: it adds no NoExecute
//     taint and removes the ones it added, until a node is Ready again,
//     when every node gets a fresh grace period.
//
// The NoSchedule taints and the Ready condition follow each node at once
// whatever the zone's state; a NoExecute taint already there is swapped
// at once between unreachable and not-ready. Nodes labelled
// node.kubernetes.io/exclude-disruption are tainted like the others but
// not counted in their zone's state.
//
// A node that needs a NoExecute taint waits in its zone's queue, in the
// order the passes found them. At the end of each pass every zone's
// queue gives a grant to as many of its nodes as its rate allows since
// the last one (a token bucket of max(1, rate × MonitorPeriod)), and the
// next pass writes the taint: one MonitorPeriod after the node was marked,
// as Kubernetes' taints one pass after its mark too.

// Defaults, kube-controller-manager's own.
const (
	// DefaultEvictionRate is --node-eviction-rate: NoExecute taints a
	// second in a zone that is not partly disrupted.
	DefaultEvictionRate = 0.1
	// DefaultSecondaryEvictionRate is --secondary-node-eviction-rate:
	// NoExecute taints a second in a partly disrupted zone of more than
	// DefaultLargeClusterSizeThreshold nodes.
	DefaultSecondaryEvictionRate = 0.01
	// DefaultLargeClusterSizeThreshold is --large-cluster-size-threshold.
	DefaultLargeClusterSizeThreshold = 50
	// DefaultUnhealthyZoneThreshold is --unhealthy-zone-threshold: the
	// share of a zone's nodes not Ready (at least three) from which it is
	// partly disrupted.
	DefaultUnhealthyZoneThreshold = 0.55
)

// LabelExcludeDisruption is Kubernetes' label of a node left out of its
// zone's state.
const LabelExcludeDisruption = "node.kubernetes.io/exclude-disruption"

// Zones configures the NoExecute taints' rates. The zero value means
// every default.
type Zones struct {
	// EvictionRate is how many nodes a second a zone gives NoExecute taints
	// to while it is not partly disrupted; 0 gives none.
	EvictionRate float64
	// SecondaryEvictionRate is that rate in a partly disrupted zone of more
	// than LargeClusterSizeThreshold nodes.
	SecondaryEvictionRate float64
	// LargeClusterSizeThreshold: a partly disrupted zone of this many nodes
	// or fewer gives no NoExecute taints.
	LargeClusterSizeThreshold int
	// UnhealthyZoneThreshold is the share of not-Ready nodes, in (0, 1],
	// from which a zone with more than two is partly disrupted.
	UnhealthyZoneThreshold float64
}

// DefaultZones are Kubernetes' settings.
func DefaultZones() Zones {
	return Zones{
		EvictionRate:              DefaultEvictionRate,
		SecondaryEvictionRate:     DefaultSecondaryEvictionRate,
		LargeClusterSizeThreshold: DefaultLargeClusterSizeThreshold,
		UnhealthyZoneThreshold:    DefaultUnhealthyZoneThreshold,
	}
}

// Validate reports what is wrong with z, naming kube-controller-manager's
// flags.
func (z Zones) Validate() error {
	switch {
	case z.EvictionRate < 0 || math.IsNaN(z.EvictionRate) || math.IsInf(z.EvictionRate, 0):
		return fmt.Errorf("--node-eviction-rate %v must be a number of at least 0", z.EvictionRate)
	case z.SecondaryEvictionRate < 0 || math.IsNaN(z.SecondaryEvictionRate) || math.IsInf(z.SecondaryEvictionRate, 0):
		return fmt.Errorf("--secondary-node-eviction-rate %v must be a number of at least 0", z.SecondaryEvictionRate)
	case z.LargeClusterSizeThreshold < 0:
		return fmt.Errorf("--large-cluster-size-threshold %d must be at least 0", z.LargeClusterSizeThreshold)
	case !(z.UnhealthyZoneThreshold > 0 && z.UnhealthyZoneThreshold <= 1):
		return fmt.Errorf("--unhealthy-zone-threshold %v must be above 0 and at most 1", z.UnhealthyZoneThreshold)
	}
	return nil
}

// zoneState is a zone's state after the last pass.
type zoneState uint8

const (
	zoneNew zoneState = iota // not judged yet
	zoneNormal
	zonePartial
	zoneFull
)

func (s zoneState) String() string {
	switch s {
	case zoneNormal:
		return "normal"
	case zonePartial:
		return "partial_disruption"
	case zoneFull:
		return "full_disruption"
	}
	return "new"
}

// zone is what the controller keeps of one zone.
type zone struct {
	// key is topology.GetZoneKey's, and name the same for people
	// (region/zone, or the zone alone).
	key, name string
	// ready and notReady count its registered nodes not excluded, by the
	// Ready status their last visit left them with ("" counts as not
	// Ready).
	ready, notReady int
	state           zoneState
	// rate is the NoExecute taints a second the state allows, and limiter
	// grants them (nil while rate is 0).
	rate    float64
	limiter flowcontrol.PassiveRateLimiter
	// queue holds the nodes waiting for a NoExecute grant, oldest first.
	// An entry whose node has since left the queue (health.inQueue false,
	// or now in another zone) is skipped; waiting counts the others.
	queue   []string
	waiting int
	// members counts the registered nodes placed in the zone, excluded
	// ones too: the zone is forgotten when none is left.
	members int
}

// zoneName is key for people: GetZoneKey joins region and zone with a NUL.
func zoneName(region, zoneLabel string) string {
	if region == "" {
		return zoneLabel
	}
	return region + "/" + zoneLabel
}

// nodeZone is the zone key of n and its name, and whether n is excluded
// from its zone's state.
func nodeZone(n *corev1.Node) (key, name string, excluded bool) {
	key = topology.GetZoneKey(n)
	if key != "" {
		region, ok := n.Labels[corev1.LabelFailureDomainBetaRegion]
		if !ok {
			region = n.Labels[corev1.LabelTopologyRegion]
		}
		z, ok := n.Labels[corev1.LabelFailureDomainBetaZone]
		if !ok {
			z = n.Labels[corev1.LabelTopologyZone]
		}
		name = zoneName(region, z)
	}
	_, excluded = n.Labels[LabelExcludeDisruption]
	return key, name, excluded
}

// zoneLocked returns the zone of key, adding it. Callers hold c.mu.
func (c *Controller) zoneLocked(key, name string) *zone {
	z := c.zones[key]
	if z == nil {
		z = &zone{key: key, name: name}
		c.zones[key] = z
	}
	return z
}

// placeLocked puts the registered node of h in zone z (excluded or not),
// moving its count. Callers hold c.mu.
func (c *Controller) placeLocked(h *health, z *zone, excluded bool) {
	if h.zone == z && h.excluded == excluded {
		return
	}
	if h.zone != z {
		// Its place in the old zone's queue lapses; this visit queues it
		// in the new one if it still needs the taint.
		c.unplaceLocked(h)
		z.members++
	} else {
		c.tallyZoneLocked(h, -1)
	}
	h.zone, h.excluded = z, excluded
	c.tallyZoneLocked(h, 1)
}

// unplaceLocked takes the node of h out of its zone, if it is in one.
func (c *Controller) unplaceLocked(h *health) {
	if h.zone == nil {
		return
	}
	c.tallyZoneLocked(h, -1)
	c.dequeueLocked(h)
	h.zone.members--
	h.zone = nil
}

// enqueueLocked puts the node name, of h, last in its zone's queue.
func (c *Controller) enqueueLocked(name string, h *health) {
	if h.inQueue || h.zone == nil {
		return
	}
	h.inQueue = true
	h.zone.queue = append(h.zone.queue, name)
	h.zone.waiting++
}

// dequeueLocked takes the node of h out of its zone's queue; its entry
// lapses.
func (c *Controller) dequeueLocked(h *health) {
	if h.inQueue {
		h.inQueue = false
		h.zone.waiting--
	}
}

// setReadyLocked records s as the Ready status of the node of h, in the
// gauge and in its zone's count.
func (c *Controller) setReadyLocked(h *health, s corev1.ConditionStatus) {
	c.countLocked(h.ready, -1)
	c.tallyZoneLocked(h, -1)
	h.ready = s
	c.countLocked(h.ready, 1)
	c.tallyZoneLocked(h, 1)
}

// tallyZoneLocked adds d to the count of h's Ready status in its zone.
func (c *Controller) tallyZoneLocked(h *health, d int) {
	if h.zone == nil || h.excluded || h.uid == "" {
		return
	}
	if h.ready == corev1.ConditionTrue {
		h.zone.ready += d
	} else {
		h.zone.notReady += d
	}
}

// judge returns the state of a zone of ready and notReady nodes.
func (z Zones) judge(ready, notReady int) zoneState {
	switch {
	case ready == 0 && notReady > 0:
		return zoneFull
	case notReady > 2 && float64(notReady)/float64(ready+notReady) >= z.UnhealthyZoneThreshold:
		return zonePartial
	}
	return zoneNormal
}

// rateOf is the NoExecute taints a second of a zone of size nodes in state
// s, while some zone is not fully disrupted.
func (z Zones) rateOf(s zoneState, size int) float64 {
	if s == zonePartial {
		if size > z.LargeClusterSizeThreshold {
			return z.SecondaryEvictionRate
		}
		return 0
	}
	return z.EvictionRate
}

// setRateLocked gives z a limiter of rate r, a bucket of what one monitor
// period lets through. Like Kubernetes' swap of its limiter, a new zone's
// bucket starts full, and a changed one full unless the old one was empty
// (or had no rate).
func (c *Controller) setRateLocked(z *zone, r float64) {
	if z.state != zoneNew && z.rate == r {
		return
	}
	empty := z.state != zoneNew && (z.limiter == nil || !z.limiter.TryAccept())
	z.rate, z.limiter = r, nil
	if r > 0 {
		burst := max(1, int(math.Ceil(r*c.period.Seconds())))
		z.limiter = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(float32(r), burst, c.clock)
		if empty {
			z.limiter.TryAccept()
		}
	}
}

// judgeZonesLocked judges every zone after a pass, as Kubernetes'
// handleDisruption does, and sets their rates. Entering the state where
// every zone is fully disrupted, it marks every node for a visit, which
// removes its NoExecute taints; leaving it, it gives every node a fresh
// grace period. Callers hold c.mu.
func (c *Controller) judgeZonesLocked(now time.Time) {
	allFull := true
	// states holds the new state of each zone judged: not those whose
	// nodes are all excluded, which Kubernetes leaves out too. Theirs are
	// tainted at the normal rate, or none while c.disrupted.
	states := make(map[*zone]zoneState, len(c.zones))
	var unjudged []*zone
	for key, z := range c.zones {
		if z.members == 0 {
			c.metrics.dropZone(z.name)
			delete(c.zones, key)
			continue
		}
		c.metrics.zone(z.name, z.ready+z.notReady, z.notReady)
		if z.ready+z.notReady == 0 {
			unjudged = append(unjudged, z)
			continue
		}
		s := c.zoneCfg.judge(z.ready, z.notReady)
		states[z] = s
		if s != zoneFull {
			allFull = false
		}
	}
	allWereFull := true
	for z := range states {
		if z.state != zoneFull {
			allWereFull = false
			break
		}
	}
	switch {
	case len(states) == 0 || allFull && allWereFull:
		// Nothing to change: no nodes, or still cut off from them all.
	case allFull:
		c.log.Warn("no node is Ready in any zone: adding no NoExecute taint and removing the ones added, until a node is Ready again", "zones", len(states))
		c.disrupted = true
		for _, z := range c.zones {
			c.setRateLocked(z, 0)
			if _, judged := states[z]; judged {
				z.state = zoneFull
				c.metrics.zoneState(z.name, zoneFull)
			}
			z.queue, z.waiting = nil, 0
		}
		for name, h := range c.health {
			h.inQueue, h.granted = false, false
			if h.uid != "" {
				c.dirty[name] = struct{}{}
			}
		}
	case allWereFull && c.disrupted:
		c.log.Info("a node is Ready again: NoExecute taints resume, after a fresh grace period for every node")
		c.disrupted = false
		c.freshGraceLocked(now)
		for z, s := range states {
			c.setZoneLocked(z, s)
		}
	default:
		c.disrupted = false
		for z, s := range states {
			if s != z.state {
				c.setZoneLocked(z, s)
			}
		}
	}
	if !c.disrupted {
		for _, z := range unjudged {
			if z.state == zoneNew || z.rate != c.zoneCfg.EvictionRate {
				c.setZoneLocked(z, zoneNormal)
			}
		}
	}
}

// setZoneLocked moves z to state s and its rate with it.
func (c *Controller) setZoneLocked(z *zone, s zoneState) {
	if z.state != zoneNew && z.state != s {
		c.log.Info("zone changed state", "zone", z.name, "from", z.state.String(), "to", s.String(), "ready", z.ready, "notReady", z.notReady)
	}
	c.setRateLocked(z, c.zoneCfg.rateOf(s, z.ready+z.notReady))
	z.state = s
	c.metrics.zoneState(z.name, s)
}

// grantLocked gives each zone's first waiting nodes the grants its limiter
// allows, and marks them for the next pass, which taints them. Entries
// that no longer need one are dropped without using a grant.
func (c *Controller) grantLocked() {
	for _, z := range c.zones {
		for len(z.queue) > 0 {
			name := z.queue[0]
			h := c.health[name]
			if h == nil || h.zone != z || !h.inQueue {
				z.queue = z.queue[1:]
				continue
			}
			if !needsNoExecute(h.ready) {
				c.dequeueLocked(h)
				z.queue = z.queue[1:]
				continue
			}
			if z.limiter == nil || !z.limiter.TryAccept() {
				break
			}
			z.queue = z.queue[1:]
			c.dequeueLocked(h)
			h.granted = true
			c.dirty[name] = struct{}{}
		}
		if len(z.queue) == 0 {
			z.queue = nil
		}
		c.metrics.zoneWaiting(z.name, z.waiting)
	}
}

// needsNoExecute reports whether a node of Ready status s is one a
// NoExecute taint is for.
func needsNoExecute(s corev1.ConditionStatus) bool {
	return s == corev1.ConditionUnknown || s == corev1.ConditionFalse
}
