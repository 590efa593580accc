package apiserver_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestApplyOwnsNoResetFields: an apply of a whole Node that carries a
// status owns none of it (a write of the main resource keeps the stored
// status), so an agent's apply of the status conflicts with no one, as in
// kube-apiserver; and an apply of the status owns none of the spec.
func TestApplyOwnsNoResetFields(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	ctx := context.Background()
	nodes := s.Client(t, "").CoreV1().Nodes()
	capacity := func(cpu string) *corev1ac.NodeStatusApplyConfiguration {
		return corev1ac.NodeStatus().WithCapacity(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)})
	}
	if _, err := nodes.Apply(ctx, corev1ac.Node("n1").WithLabels(map[string]string{"a": "b"}).WithStatus(capacity("2")),
		metav1.ApplyOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	n, err := nodes.ApplyStatus(ctx, corev1ac.Node("n1").WithStatus(capacity("4")).WithSpec(corev1ac.NodeSpec().WithPodCIDR("10.0.0.0/24")),
		metav1.ApplyOptions{FieldManager: "agent"})
	if err != nil {
		t.Fatalf("apply of the status by another manager: %v", err)
	}
	if got := n.Status.Capacity.Cpu().String(); got != "4" {
		t.Errorf("cpu %s after the status apply, want 4", got)
	}
	if n.Spec.PodCIDR != "" {
		t.Errorf("the status apply set spec.podCIDR %q", n.Spec.PodCIDR)
	}
	for _, e := range n.ManagedFields {
		fields := string(e.FieldsV1.Raw)
		switch {
		case e.Manager == "kubectl" && strings.Contains(fields, `"f:status"`):
			t.Errorf("the apply of the whole Node owns its status: %s", fields)
		case e.Manager == "agent" && strings.Contains(fields, `"f:spec"`):
			t.Errorf("the apply of the status owns the spec: %s", fields)
		}
	}
}
