package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ReportingController is the reportingController of the agent's Events.
const ReportingController = "leasehold-agent"

// EventRebooted is the reason of the Event about a node whose machine
// has booted again, the kubelet's.
const EventRebooted = "Rebooted"

// maxPendingEvents bounds the Events that wait for a server to take them;
// the oldest goes first.
const maxPendingEvents = 16

// pendingEvent is an Event recorded and not yet written.
type pendingEvent struct {
	name                      string
	at                        time.Time
	typ, reason, action, note string
}

// record queues an Event about the node, to be written at the end of the
// next pass that succeeds.
func (a *Agent) record(typ, reason, action, note string, args ...any) {
	at := a.cfg.Clock.Now()
	// Names are the node's and the time's, as client-go names them, made
	// unique should two Events share a time.
	nanos := max(at.UnixNano(), a.lastEventNanos+1)
	a.lastEventNanos = nanos
	if len(a.events) == maxPendingEvents {
		a.log.Warn("event dropped: too many wait for a server", "reason", a.events[0].reason)
		a.events = a.events[1:]
	}
	a.events = append(a.events, pendingEvent{
		name: fmt.Sprintf("%s.%x", a.cfg.NodeName, nanos), at: at,
		typ: typ, reason: reason, action: action, note: fmt.Sprintf(note, args...),
	})
}

// writeEvents writes the queued Events through c. One that the server could
// not take for want of service (no answer, 5xx, 429) waits for the next
// pass with the others after it; one it refused is logged and dropped.
func (a *Agent) writeEvents(ctx context.Context, c kubernetes.Interface) {
	events := c.EventsV1().Events(metav1.NamespaceDefault)
	for len(a.events) > 0 {
		e := a.events[0]
		_, err := events.Create(ctx, a.eventObject(e), metav1.CreateOptions{})
		switch {
		case err == nil || apierrors.IsAlreadyExists(err): // written, its answer lost before
			a.metrics.events.Inc()
		case ctx.Err() != nil || serverUnavailable(err):
			return
		default:
			a.log.Warn("event not recorded", "reason", e.reason, "err", err)
		}
		a.events = a.events[1:]
	}
}

// eventObject is e as an events.k8s.io/v1 Event regarding the node; its uid
// is the node's name, as the kubelet and the node lifecycle controller
// write it (kubectl describe node finds both).
func (a *Agent) eventObject(e pendingEvent) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: e.name, Namespace: metav1.NamespaceDefault},
		EventTime:           metav1.NewMicroTime(e.at),
		ReportingController: ReportingController,
		ReportingInstance:   a.cfg.NodeName,
		Action:              e.action,
		Reason:              e.reason,
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: a.cfg.NodeName, UID: types.UID(a.cfg.NodeName)},
		Note:                e.note,
		Type:                e.typ,
	}
}

// recordReboot records a Rebooted Event when n was last reported from
// another boot of the machine.
func (a *Agent) recordReboot(n *corev1.Node) {
	if was := n.Status.NodeInfo.BootID; was != "" && a.nodeInfo.BootID != "" && was != a.nodeInfo.BootID {
		a.record(corev1.EventTypeWarning, EventRebooted, "Reboot", "Node %s has been rebooted, boot id: %s", a.cfg.NodeName, a.nodeInfo.BootID)
	}
}

// recordPressure records an Event for each pressure condition whose status
// differs in now from before, with the kubelet's reasons; a condition
// missing from before records none.
func (a *Agent) recordPressure(before map[corev1.NodeConditionType]corev1.ConditionStatus, now pressure) {
	for _, c := range now.conditions() {
		was, known := before[c.Type]
		if !known || was == c.Status {
			continue
		}
		i := 0
		if c.Status == corev1.ConditionTrue {
			i = 1
		}
		reason := pressureEvents[c.Type][i]
		a.record(corev1.EventTypeNormal, reason, "StatusChange", "Node %s status is now: %s", a.cfg.NodeName, reason)
	}
}

// pressureStatuses returns the status of each pressure condition as last
// posted, or, when nothing was posted yet, as n has it (True or False).
func (a *Agent) pressureStatuses(n *corev1.Node) map[corev1.NodeConditionType]corev1.ConditionStatus {
	out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	if a.posted != nil {
		for _, c := range a.posted.pressure.conditions() {
			out[c.Type] = c.Status
		}
		return out
	}
	for _, c := range n.Status.Conditions {
		if _, ok := pressureEvents[c.Type]; ok && (c.Status == corev1.ConditionTrue || c.Status == corev1.ConditionFalse) {
			out[c.Type] = c.Status
		}
	}
	return out
}

// pressureEvents are the kubelet's Event reasons for each pressure
// condition going False ([0]) and True ([1]).
var pressureEvents = map[corev1.NodeConditionType][2]string{
	corev1.NodeMemoryPressure: {"NodeHasSufficientMemory", "NodeHasInsufficientMemory"},
	corev1.NodeDiskPressure:   {"NodeHasNoDiskPressure", "NodeHasDiskPressure"},
	corev1.NodePIDPressure:    {"NodeHasSufficientPID", "NodeHasInsufficientPID"},
}
