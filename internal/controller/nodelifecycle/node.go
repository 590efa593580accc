package nodelifecycle

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons and messages the controller writes into node conditions.
const (
	// ReasonNodeStatusUnknown marks a condition the controller set to
	// Unknown because the node lease stopped changing (Kubernetes' reason).
	ReasonNodeStatusUnknown = "NodeStatusUnknown"
	// ReasonNodeStatusNeverUpdated marks a condition the controller added
	// as Unknown to a node that never reported it (Kubernetes' reason).
	ReasonNodeStatusNeverUpdated = "NodeStatusNeverUpdated"
	// ReasonNodeLeaseRenewed marks a Ready=True the controller set because
	// the node lease changed again after the node had become Unknown.
	ReasonNodeLeaseRenewed = "NodeLeaseRenewed"

	messageLeaseStopped = "The node lease is no longer being renewed: the leasehold agent on this node stopped heartbeating or cannot reach the server."
	messageNeverUpdated = "The leasehold agent never reported this node's status."
	messageLeaseRenewed = "The node lease is being renewed again: the leasehold agent on this node is heartbeating."
)

// agentConditions are the conditions the node's agent (or a kubelet) owns,
// which the controller sets to Unknown when the node goes silent: the ones
// Kubernetes' node lifecycle controller marks. NetworkUnavailable belongs to
// whoever configures the network and is left alone.
var agentConditions = []corev1.NodeConditionType{
	corev1.NodeReady,
	corev1.NodeMemoryPressure,
	corev1.NodeDiskPressure,
	corev1.NodePIDPressure,
}

// expired reports whether a node whose lease the controller last saw change
// at probe (by its own clock) has stayed silent for longer than grace at now.
// Exactly grace after the last change the node is still alive.
func expired(probe time.Time, grace time.Duration, now time.Time) bool {
	return now.Sub(probe) > grace
}

// readyStatus is the status of n's Ready condition, "" if it has none.
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// readyCondition returns n's Ready condition, nil if it has none.
func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// markUnknown sets every agent-owned condition of n that is not Unknown yet
// to Unknown, keeping its last heartbeat time, and adds each one n lacks as
// Unknown, never reported, as Kubernetes' controller does. It reports
// whether n changed. The agent (and the bench's virtual nodes) report all
// four from the first status; a node written by hand may lack some.
func markUnknown(n *corev1.Node, now time.Time) bool {
	t := metav1.NewTime(now)
	changed := false
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if !slices.Contains(agentConditions, c.Type) || c.Status == corev1.ConditionUnknown {
			continue
		}
		c.Status = corev1.ConditionUnknown
		c.Reason = ReasonNodeStatusUnknown
		c.Message = messageLeaseStopped
		c.LastTransitionTime = t
		changed = true
	}
	for _, typ := range agentConditions {
		if slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == typ }) {
			continue
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type:               typ,
			Status:             corev1.ConditionUnknown,
			Reason:             ReasonNodeStatusNeverUpdated,
			Message:            messageNeverUpdated,
			LastHeartbeatTime:  n.CreationTimestamp,
			LastTransitionTime: t,
		})
		changed = true
	}
	return changed
}

// markRenewed sets n's Ready condition back to True if it is Unknown, for a
// node whose lease is being renewed again, and reports whether n changed.
// A Ready=False posted by the agent, or a missing Ready, is left alone; so
// are the other conditions, which only their owner can report.
func markRenewed(n *corev1.Node, now time.Time) bool {
	c := readyCondition(n)
	if c == nil || c.Status != corev1.ConditionUnknown {
		return false
	}
	t := metav1.NewTime(now)
	c.Status = corev1.ConditionTrue
	c.Reason = ReasonNodeLeaseRenewed
	c.Message = messageLeaseRenewed
	c.LastHeartbeatTime = t
	c.LastTransitionTime = t
	return true
}

// isLifecycleTaint reports whether t is one of the taints reconcileTaints
// makes follow the Ready condition.
func isLifecycleTaint(t corev1.Taint) bool {
	return t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady
}

// conditionTaints are the NoSchedule taints Kubernetes' node lifecycle
// controller gives a node while one of its other conditions is True, in
// the order reconcileTaints adds them.
var conditionTaints = []conditionTaint{
	{corev1.NodeMemoryPressure, corev1.TaintNodeMemoryPressure},
	{corev1.NodeDiskPressure, corev1.TaintNodeDiskPressure},
	{corev1.NodePIDPressure, corev1.TaintNodePIDPressure},
	{corev1.NodeNetworkUnavailable, corev1.TaintNodeNetworkUnavailable},
}

type conditionTaint struct {
	cond corev1.NodeConditionType
	key  string
}

// isScheduleTaint reports whether t is a NoSchedule taint reconcileTaints
// makes follow a condition other than Ready, or spec.unschedulable.
func isScheduleTaint(t corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule && slices.Contains(scheduleTaintKeys, t.Key)
}

// hasUnschedulableTaint reports whether n has the taint of a cordoned node.
func hasUnschedulableTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeUnschedulable && t.Effect == corev1.TaintEffectNoSchedule
	})
}

// mayNeedTaints reports whether reconcileTaints could change anything on
// n: it has a taint the controller manages, or is not Ready, or is
// cordoned, or has a condition that calls for a taint. Most nodes in most
// passes are none of these, and skip even write's scratch copy.
func mayNeedTaints(n *corev1.Node) bool {
	if n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return isLifecycleTaint(t) || isScheduleTaint(t) }) {
		return true
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return true
		}
		if c.Status == corev1.ConditionTrue && slices.ContainsFunc(conditionTaints, func(ct conditionTaint) bool { return ct.cond == c.Type }) {
			return true
		}
	}
	return false
}

// scheduleTaintsDisagree reports whether n's NoSchedule taints are not
// what its own report calls for: the unschedulable taint of a cordon,
// the taints of its pressure and network conditions, and not-ready while
// Ready is False. Unreachable, for Ready Unknown, is left out: the
// controller sets Unknown itself, and taints in the same visit. It
// changes nothing of n, which may be the watch cache's.
func scheduleTaintsDisagree(n *corev1.Node) bool {
	ready := readyStatus(n)
	return ready != corev1.ConditionUnknown && mayNeedTaints(n) && !taintsMatch(n, ready)
}

// taintsMatch reports whether reconcileTaints, for Ready status ready and
// holding NoExecute taints as they are, would leave n's taints alone. It
// changes nothing of n.
func taintsMatch(n *corev1.Node, ready corev1.ConditionStatus) bool {
	// reconcileTaints reads the conditions and taints and replaces the
	// scratch node's taints, never changing the slices it was given.
	scratch := corev1.Node{Spec: corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints}}
	scratch.Status.Conditions = n.Status.Conditions
	return !reconcileTaints(&scratch, ready, time.Time{}, noExecuteHold)
}

// taintEffects are the effects of the taints the controller manages, each
// for one key.
var taintEffects = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute}

// noExecute says what reconcileTaints does with the NoExecute taint,
// which goes on at each zone's rate (see zones.go).
type noExecute uint8

const (
	// noExecuteHold keeps a lifecycle NoExecute taint the node has,
	// swapped to the key its Ready status wants, and adds none.
	noExecuteHold noExecute = iota
	// noExecuteAdd adds it too: the node's zone granted it.
	noExecuteAdd
	// noExecuteDrop removes it: no node is Ready in any zone.
	noExecuteDrop
)

// hasNoExecute reports whether n carries a lifecycle NoExecute taint.
func hasNoExecute(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return isLifecycleTaint(t) && t.Effect == corev1.TaintEffectNoExecute
	})
}

// reconcileTaints makes n's taints follow its conditions, as Kubernetes'
// node lifecycle controller does:
//
//   - node.kubernetes.io/unreachable while Ready is Unknown,
//     node.kubernetes.io/not-ready while it is False, neither while it is
//     True: the NoSchedule one at once, the NoExecute one as ne says. A
//     node without a
//     Ready condition keeps these two as they are.
//   - node.kubernetes.io/memory-pressure, disk-pressure, pid-pressure and
//     network-unavailable, NoSchedule, while that condition is True, and
//     node.kubernetes.io/unschedulable while spec.unschedulable is set
//     (kubectl cordon).
//
// A taint it adds carries timeAdded now. Other taints are never touched.
// It reports whether n changed.
func reconcileTaints(n *corev1.Node, ready corev1.ConditionStatus, now time.Time, ne noExecute) bool {
	var want string
	keepLifecycle := false
	switch ready {
	case corev1.ConditionUnknown:
		want = corev1.TaintNodeUnreachable
	case corev1.ConditionFalse:
		want = corev1.TaintNodeNotReady
	case corev1.ConditionTrue:
	default:
		keepLifecycle = true
	}
	wantSchedule := func(key string) bool {
		if key == corev1.TaintNodeUnschedulable {
			return n.Spec.Unschedulable
		}
		for _, c := range conditionTaints {
			if c.key == key {
				for _, nc := range n.Status.Conditions {
					if nc.Type == c.cond {
						return nc.Status == corev1.ConditionTrue
					}
				}
			}
		}
		return false
	}
	changed, hadNoExecute := false, false
	have := map[corev1.TaintEffect]bool{}
	haveSchedule := map[string]bool{}
	taints := make([]corev1.Taint, 0, len(n.Spec.Taints)+len(taintEffects))
	for _, t := range n.Spec.Taints {
		switch {
		case isLifecycleTaint(t) && !keepLifecycle:
			noExec := t.Effect == corev1.TaintEffectNoExecute
			hadNoExecute = hadNoExecute || noExec
			if t.Key != want || have[t.Effect] || noExec && ne == noExecuteDrop {
				changed = true
				continue
			}
			have[t.Effect] = true
		case isScheduleTaint(t):
			if haveSchedule[t.Key] || !wantSchedule(t.Key) {
				changed = true
				continue
			}
			haveSchedule[t.Key] = true
		}
		taints = append(taints, t)
	}
	// Every taint added carries the time, as Kubernetes' controller adds
	// them (SwapNodeControllerTaint).
	added := metav1.NewTime(now)
	if want != "" {
		for _, effect := range taintEffects {
			if have[effect] {
				continue
			}
			if effect == corev1.TaintEffectNoExecute && (ne == noExecuteDrop || ne == noExecuteHold && !hadNoExecute) {
				continue
			}
			taints = append(taints, corev1.Taint{Key: want, Effect: effect, TimeAdded: &added})
			changed = true
		}
	}
	for _, key := range scheduleTaintKeys {
		if !haveSchedule[key] && wantSchedule(key) {
			taints = append(taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added})
			changed = true
		}
	}
	if changed {
		if len(taints) == 0 {
			taints = nil
		}
		n.Spec.Taints = taints
	}
	return changed
}

// scheduleTaintKeys are the keys of conditionTaints and then the
// unschedulable taint's, in the order reconcileTaints adds them.
var scheduleTaintKeys = func() []string {
	var keys []string
	for _, c := range conditionTaints {
		keys = append(keys, c.key)
	}
	return append(keys, corev1.TaintNodeUnschedulable)
}()
