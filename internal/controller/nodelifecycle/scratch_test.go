package nodelifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestScratchCopyKeepsTheOriginal runs every change function of write on a
// scratch copy and checks that the node it was copied from is untouched.
func TestScratchCopyKeepsTheOriginal(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ready := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: s, Reason: "KubeletReady"},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			}},
		}
	}
	tests := []struct {
		name   string
		node   *corev1.Node
		change func(*corev1.Node) bool
	}{
		{"markUnknown", ready(corev1.ConditionTrue), func(n *corev1.Node) bool { return markUnknown(n, now) }},
		{"markUnknown without Ready", &corev1.Node{}, func(n *corev1.Node) bool { return markUnknown(n, now) }},
		{"markRenewed", ready(corev1.ConditionUnknown), func(n *corev1.Node) bool { return markRenewed(n, now) }},
		{"taints added", ready(corev1.ConditionUnknown), func(n *corev1.Node) bool {
			return reconcileTaints(n, corev1.ConditionUnknown, now, noExecuteAdd)
		}},
		{"taints removed", func() *corev1.Node {
			n := ready(corev1.ConditionTrue)
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule})
			return n
		}(), func(n *corev1.Node) bool { return reconcileTaints(n, corev1.ConditionTrue, now, noExecuteHold) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.node.DeepCopy()
			scratch := scratchCopy(tt.node)
			if !tt.change(scratch) {
				t.Fatal("the change function changed nothing; the case tests nothing")
			}
			if !equality.Semantic.DeepEqual(tt.node, before) {
				t.Errorf("the original changed:\n got %+v\nwant %+v", tt.node, before)
			}
			// The full copy write sends gets the same change.
			full := tt.node.DeepCopy()
			tt.change(full)
			if !equality.Semantic.DeepEqual(full, scratch) {
				t.Errorf("scratch and full copies differ:\n%+v\n%+v", scratch, full)
			}
		})
	}
}
