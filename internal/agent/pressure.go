package agent

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Pressure: the MemoryPressure, DiskPressure and PIDPressure conditions,
// as the kubelet reports them from its hard eviction thresholds. A signal
// below its threshold puts its condition True; the condition goes back to
// False only once no signal of it has been below for the transition
// period (the kubelet's --eviction-pressure-transition-period), so that a
// signal hovering at its threshold does not flap the condition, nor the
// NoSchedule taint the server's node lifecycle controller gives it.

// The signals the agent measures, by the kubelet's names.
const (
	SignalMemoryAvailable  = "memory.available"
	SignalNodeFsAvailable  = "nodefs.available"
	SignalNodeFsInodesFree = "nodefs.inodesFree"
	SignalPIDAvailable     = "pid.available"
)

// DefaultEvictionHard is the kubelet's default --eviction-hard on Linux,
// without the image filesystem's signals, which the agent has no use for.
const DefaultEvictionHard = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%"

// DefaultPressureTransitionPeriod is the kubelet's default
// --eviction-pressure-transition-period.
const DefaultPressureTransitionPeriod = 5 * time.Minute

// Threshold is one hard eviction threshold: Signal is under pressure when
// what is available falls below Quantity, or below Percent of its capacity
// when Quantity is nil.
type Threshold struct {
	Signal   string
	Quantity *resource.Quantity
	Percent  float64
}

// conditionOf is the condition each signal puts True.
var conditionOf = map[string]corev1.NodeConditionType{
	SignalMemoryAvailable:  corev1.NodeMemoryPressure,
	SignalNodeFsAvailable:  corev1.NodeDiskPressure,
	SignalNodeFsInodesFree: corev1.NodeDiskPressure,
	SignalPIDAvailable:     corev1.NodePIDPressure,
}

// ParseThresholds reads an --eviction-hard value, as the kubelet's:
// comma-separated SIGNAL<QUANTITY or SIGNAL<PERCENT%; "" sets none.
func ParseThresholds(s string) ([]Threshold, error) {
	var out []Threshold
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		signal, value, ok := strings.Cut(item, "<")
		if !ok {
			return nil, fmt.Errorf("%q: want SIGNAL<QUANTITY or SIGNAL<PERCENT%%, such as memory.available<100Mi", item)
		}
		if _, known := conditionOf[signal]; !known {
			return nil, fmt.Errorf("%q: unknown signal %q; the agent measures %s, %s, %s and %s", item, signal, SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalPIDAvailable)
		}
		if seen[signal] {
			return nil, fmt.Errorf("%q: signal %s given twice", item, signal)
		}
		seen[signal] = true
		t := Threshold{Signal: signal}
		if pct, isPct := strings.CutSuffix(value, "%"); isPct {
			p, err := strconv.ParseFloat(pct, 64)
			if err != nil || !(p > 0 && p <= 100) {
				return nil, fmt.Errorf("%q: percentage %q must be above 0 and at most 100", item, value)
			}
			t.Percent = p
		} else {
			q, err := resource.ParseQuantity(value)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", item, err)
			}
			if q.Sign() < 0 {
				return nil, fmt.Errorf("%q: quantity %s must not be negative", item, value)
			}
			t.Quantity = &q
		}
		out = append(out, t)
	}
	return out, nil
}

// HostStats are what the signals are read from: what is available of
// each, and its capacity.
type HostStats struct {
	MemoryAvailable, MemoryCapacity int64 // bytes
	FsAvailable, FsCapacity         int64 // bytes of the root file system
	InodesFree, Inodes              int64
	PIDsAvailable, PIDs             int64
	// CPUs is the number the agent may run on, for the node's capacity.
	CPUs int64
}

// signal returns what is available of signal, and its capacity; ok is
// false when the host does not say (a capacity of 0).
func (h HostStats) signal(signal string) (available, capacity int64, ok bool) {
	switch signal {
	case SignalMemoryAvailable:
		available, capacity = h.MemoryAvailable, h.MemoryCapacity
	case SignalNodeFsAvailable:
		available, capacity = h.FsAvailable, h.FsCapacity
	case SignalNodeFsInodesFree:
		available, capacity = h.InodesFree, h.Inodes
	case SignalPIDAvailable:
		available, capacity = h.PIDsAvailable, h.PIDs
	}
	return available, capacity, capacity > 0
}

// under reports whether t's signal is below its threshold in h.
func (t Threshold) under(h HostStats) bool {
	available, capacity, ok := h.signal(t.Signal)
	if !ok {
		return false
	}
	if t.Quantity != nil {
		return available < t.Quantity.Value()
	}
	return float64(available) < float64(capacity)*t.Percent/100
}

// pressure is the state of the three conditions.
type pressure struct {
	memory, disk, pid bool
}

// pressureTracker turns samples of the host into the conditions, holding
// each True for the transition period after its last signal below.
type pressureTracker struct {
	thresholds []Threshold
	period     time.Duration
	lastUnder  map[corev1.NodeConditionType]time.Time
}

func newPressureTracker(thresholds []Threshold, period time.Duration) *pressureTracker {
	return &pressureTracker{thresholds: thresholds, period: period, lastUnder: map[corev1.NodeConditionType]time.Time{}}
}

// observe records a sample taken at now and returns the conditions.
func (p *pressureTracker) observe(h HostStats, now time.Time) pressure {
	for _, t := range p.thresholds {
		if t.under(h) {
			p.lastUnder[conditionOf[t.Signal]] = now
		}
	}
	on := func(c corev1.NodeConditionType) bool {
		at, ok := p.lastUnder[c]
		return ok && now.Sub(at) < p.period
	}
	return pressure{memory: on(corev1.NodeMemoryPressure), disk: on(corev1.NodeDiskPressure), pid: on(corev1.NodePIDPressure)}
}

// Reasons and messages of the pressure conditions.
var pressureTexts = map[corev1.NodeConditionType][2][2]string{ // [true?][reason, message]
	corev1.NodeMemoryPressure: {
		{"LeaseholdAgentHasSufficientMemory", "leasehold agent finds sufficient memory available"},
		{"LeaseholdAgentHasInsufficientMemory", "leasehold agent finds memory available below its threshold"},
	},
	corev1.NodeDiskPressure: {
		{"LeaseholdAgentHasNoDiskPressure", "leasehold agent finds sufficient disk space and inodes"},
		{"LeaseholdAgentHasDiskPressure", "leasehold agent finds disk space or inodes below its threshold"},
	},
	corev1.NodePIDPressure: {
		{"LeaseholdAgentHasSufficientPID", "leasehold agent finds sufficient process IDs available"},
		{"LeaseholdAgentHasInsufficientPID", "leasehold agent finds process IDs available below its threshold"},
	},
}

// conditions returns the three conditions of p, without their times.
func (p pressure) conditions() []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range []struct {
		typ corev1.NodeConditionType
		on  bool
	}{{corev1.NodeMemoryPressure, p.memory}, {corev1.NodeDiskPressure, p.disk}, {corev1.NodePIDPressure, p.pid}} {
		i, status := 0, corev1.ConditionFalse
		if c.on {
			i, status = 1, corev1.ConditionTrue
		}
		texts := pressureTexts[c.typ][i]
		out = append(out, corev1.NodeCondition{Type: c.typ, Status: status, Reason: texts[0], Message: texts[1]})
	}
	return out
}
