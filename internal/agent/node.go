package agent

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// nodeStatus is the part of the Node status the agent decides.
type nodeStatus struct {
	addresses             []corev1.NodeAddress
	info                  corev1.NodeSystemInfo
	pressure              pressure
	capacity, allocatable corev1.ResourceList
}

func (s nodeStatus) equal(o nodeStatus) bool {
	return slices.Equal(s.addresses, o.addresses) && equality.Semantic.DeepEqual(s.info, o.info) && s.pressure == o.pressure &&
		equality.Semantic.DeepEqual(s.capacity, o.capacity) && equality.Semantic.DeepEqual(s.allocatable, o.allocatable)
}

// desiredStatus measures the host at now for the status to post.
func (a *Agent) desiredStatus(now time.Time) nodeStatus {
	h, err := a.cfg.HostStats()
	if msg := errString(err); msg != a.hostErr {
		a.hostErr = msg
		if err != nil {
			a.log.Warn("the pressure conditions go without what could not be measured", "err", err)
		}
	}
	st := nodeStatus{addresses: a.addresses(), info: a.nodeInfo, pressure: a.pressure.observe(h, now)}
	if a.cfg.ReportCapacity {
		st.capacity, st.allocatable = nodeResources(h, a.pressure.thresholds)
	}
	return st
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// labels returns the labels the agent puts on its Node.
func (a *Agent) labels() map[string]string {
	l := make(map[string]string, len(a.cfg.Labels)+5)
	maps.Copy(l, a.cfg.Labels)
	l[corev1.LabelHostname] = a.cfg.NodeName
	l[corev1.LabelOSStable] = runtime.GOOS
	l[corev1.LabelArchStable] = runtime.GOARCH
	// The deprecated beta labels, which the kubelet still sets, for the
	// nodeSelectors written against them.
	l[kubeletapis.LabelOS] = runtime.GOOS
	l[kubeletapis.LabelArch] = runtime.GOARCH
	return l
}

// registerNode creates the Node with its status and registration taints,
// or adopts the existing Node of that name.
func (a *Agent) registerNode(ctx context.Context, c kubernetes.Interface) error {
	nodes := c.CoreV1().Nodes()
	now := a.cfg.Clock.Now()
	st := a.desiredStatus(now)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: a.labels()}}
	n.Spec.Taints = slices.Clone(a.cfg.Taints)
	setStatus(n, st, now)
	got, err := nodes.Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, err := nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the existing node: %w", err)
		}
		return a.adoptNode(ctx, c, existing)
	}
	if err != nil {
		return fmt.Errorf("registering the node: %w", err)
	}
	a.log.Info("registered node", "uid", got.UID)
	a.metrics.registrations.Inc()
	a.node = got
	a.posted = nil
	if hasStatus(got, st) {
		// The server kept the status sent with the Node; no need to post it.
		a.posted, a.postedAt = &st, now
	}
	return nil
}

// adoptNode takes over an existing Node: it adds the agent's labels if they
// are missing and has the status posted on this pass.
func (a *Agent) adoptNode(ctx context.Context, c kubernetes.Interface, n *corev1.Node) error {
	want := a.labels()
	if !hasLabels(n, want) {
		n = n.DeepCopy()
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		maps.Copy(n.Labels, want)
		updated, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("labelling the existing node: %w", err)
		}
		n = updated
	}
	a.log.Info("adopted existing node", "uid", n.UID)
	a.recordReboot(n)
	a.node = n
	a.posted = nil
	return nil
}

func hasLabels(n *corev1.Node, want map[string]string) bool {
	for k, v := range want {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// confirmNode reads the Node back before the lease is created: if it was
// deleted the agent registers it again, if it was replaced by another of the
// same name the agent adopts that one.
func (a *Agent) confirmNode(ctx context.Context, c kubernetes.Interface) error {
	n, err := c.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		a.log.Warn("node was deleted, registering it again", "oldUID", a.node.UID)
		a.node = nil
		return a.registerNode(ctx, c)
	case err != nil:
		return fmt.Errorf("reading the node: %w", err)
	case n.UID != a.node.UID:
		return a.adoptNode(ctx, c, n)
	}
	a.node = n
	return nil
}

// reportStatus posts the node status if it changed since the last post or
// the report period has passed.
func (a *Agent) reportStatus(ctx context.Context, c kubernetes.Interface) error {
	now := a.cfg.Clock.Now()
	st := a.desiredStatus(now)
	if a.posted != nil && now.Sub(a.postedAt) < a.cfg.NodeStatusReportPeriod && a.posted.equal(st) {
		return nil
	}
	nodes := c.CoreV1().Nodes()
	before := a.pressureStatuses(a.node)
	for attempt := 0; ; attempt++ {
		n := a.node.DeepCopy()
		setStatus(n, st, now)
		got, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt == 0 {
			a.log.Info("node changed on the server, reading it again")
			got, err = nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
			if err == nil {
				a.node = got
				continue
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			// The next pass registers it again; its first renewal then
			// points the lease at the new Node.
			a.node = nil
			return fmt.Errorf("node was deleted: %w", err)
		case err != nil:
			return fmt.Errorf("posting the node status: %w", err)
		}
		a.node = got
		a.posted, a.postedAt = &st, now
		a.recordPressure(before, st.pressure)
		return nil
	}
}

// setStatus writes st, its pressure conditions and a Ready=True condition,
// all heartbeating at now, into n, keeping the other conditions, and the
// transition time of each condition whose status stays.
func setStatus(n *corev1.Node, st nodeStatus, now time.Time) {
	n.Status.Addresses = st.addresses
	n.Status.NodeInfo = st.info
	n.Status.Capacity, n.Status.Allocatable = st.capacity, st.allocatable
	setConditions(n, st.pressure, now)
}

// SetHealthyConditions writes the conditions the agent posts for a host
// under no pressure into n, heartbeating at now: Ready True and the three
// pressures False. leasehold bench's virtual agents post these.
func SetHealthyConditions(n *corev1.Node, now time.Time) { setConditions(n, pressure{}, now) }

// setConditions writes the pressure conditions of p and Ready True into n,
// heartbeating at now.
func setConditions(n *corev1.Node, p pressure, now time.Time) {
	ready := corev1.NodeCondition{
		Type:    corev1.NodeReady,
		Status:  corev1.ConditionTrue,
		Reason:  ReadyReason,
		Message: ReadyMessage,
	}
	for _, c := range append(p.conditions(), ready) {
		setCondition(n, c, now)
	}
}

// setCondition puts c into n's conditions, heartbeating at now, and
// transitioned at now unless n had it in the same status.
func setCondition(n *corev1.Node, c corev1.NodeCondition, now time.Time) {
	t := metav1.NewTime(now)
	c.LastHeartbeatTime, c.LastTransitionTime = t, t
	for i, cur := range n.Status.Conditions {
		if cur.Type == c.Type {
			if cur.Status == c.Status {
				c.LastTransitionTime = cur.LastTransitionTime
			}
			n.Status.Conditions[i] = c
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, c)
}

// hasStatus tells whether n carries st and the agent's Ready condition.
func hasStatus(n *corev1.Node, st nodeStatus) bool {
	if !slices.Equal(st.addresses, n.Status.Addresses) || !equality.Semantic.DeepEqual(st.info, n.Status.NodeInfo) ||
		!equality.Semantic.DeepEqual(st.capacity, n.Status.Capacity) || !equality.Semantic.DeepEqual(st.allocatable, n.Status.Allocatable) {
		return false
	}
	want := map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: corev1.ConditionTrue}
	for _, c := range st.pressure.conditions() {
		want[c.Type] = c.Status
	}
	for _, cond := range n.Status.Conditions {
		if s, ok := want[cond.Type]; ok {
			if cond.Status != s || cond.Type == corev1.NodeReady && cond.Reason != ReadyReason {
				return false
			}
			delete(want, cond.Type)
		}
	}
	return len(want) == 0
}
