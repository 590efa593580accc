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
)

// nodeStatus is the part of the Node status the agent decides.
type nodeStatus struct {
	addresses []corev1.NodeAddress
	info      corev1.NodeSystemInfo
}

func (s nodeStatus) equal(o nodeStatus) bool {
	return slices.Equal(s.addresses, o.addresses) && equality.Semantic.DeepEqual(s.info, o.info)
}

func (a *Agent) desiredStatus() nodeStatus {
	return nodeStatus{addresses: a.addresses(), info: a.nodeInfo}
}

// labels returns the labels the agent puts on its Node.
func (a *Agent) labels() map[string]string {
	l := make(map[string]string, len(a.cfg.Labels)+3)
	maps.Copy(l, a.cfg.Labels)
	l[corev1.LabelHostname] = a.cfg.NodeName
	l[corev1.LabelOSStable] = runtime.GOOS
	l[corev1.LabelArchStable] = runtime.GOARCH
	return l
}

// registerNode creates the Node with its status, or adopts the existing Node
// of that name.
func (a *Agent) registerNode(ctx context.Context, c kubernetes.Interface) error {
	nodes := c.CoreV1().Nodes()
	now := a.cfg.Clock.Now()
	st := a.desiredStatus()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: a.labels()}}
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
	st := a.desiredStatus()
	if a.posted != nil && now.Sub(a.postedAt) < a.cfg.NodeStatusReportPeriod && a.posted.equal(st) {
		return nil
	}
	nodes := c.CoreV1().Nodes()
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
		return nil
	}
}

// setStatus writes st and a Ready=True condition heartbeating at now into n,
// keeping the other conditions and the Ready transition time if the node was
// already Ready.
func setStatus(n *corev1.Node, st nodeStatus, now time.Time) {
	n.Status.Addresses = st.addresses
	n.Status.NodeInfo = st.info
	t := metav1.NewTime(now)
	ready := corev1.NodeCondition{
		Type:               corev1.NodeReady,
		Status:             corev1.ConditionTrue,
		Reason:             ReadyReason,
		Message:            ReadyMessage,
		LastHeartbeatTime:  t,
		LastTransitionTime: t,
	}
	for i, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				ready.LastTransitionTime = cond.LastTransitionTime
			}
			n.Status.Conditions[i] = ready
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, ready)
}

// hasStatus tells whether n carries st and the agent's Ready condition.
func hasStatus(n *corev1.Node, st nodeStatus) bool {
	if !st.equal(nodeStatus{addresses: n.Status.Addresses, info: n.Status.NodeInfo}) {
		return false
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue && cond.Reason == ReadyReason
		}
	}
	return false
}
