package agent

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestParseTaints(t *testing.T) {
	got, err := ParseTaints("dedicated=db:NoSchedule, example.com/gpu:PreferNoSchedule,,maintenance=true:NoExecute")
	want := []corev1.Taint{
		{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/gpu", Effect: corev1.TaintEffectPreferNoSchedule},
		{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoExecute},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseTaints = %+v, %v; want %+v", got, err, want)
	}
	for in, msg := range map[string]string{
		"dedicated=db":            "want KEY=VALUE:EFFECT",
		"dedicated=db:Evict":      `effect "Evict"`,
		"bad key=db:NoSchedule":   `key "bad key"`,
		"dedicated=a b:NoExecute": `value "a b"`,
		":NoSchedule":             `key ""`,
	} {
		if _, err := ParseTaints(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseTaints(%q) error %v, want one saying %q", in, err, msg)
		}
	}
}

// TestRegistersWithTaints: the node is created with the taints; an existing
// node keeps its own.
func TestRegistersWithTaints(t *testing.T) {
	taints := []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	c := newClient()
	h := newHarness(t, c)
	h.agent.cfg.Taints = taints
	h.run()
	h.expectWait(10 * time.Second)
	if got := h.node(c).Spec.Taints; !reflect.DeepEqual(got, taints) {
		t.Errorf("registered with taints %+v, want %+v", got, taints)
	}

	own := []corev1.Taint{{Key: "example.com/own", Effect: corev1.TaintEffectNoExecute}}
	existing := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "existing"}, Spec: corev1.NodeSpec{Taints: own}}
	c2 := newClient(existing)
	h2 := newHarness(t, c2)
	h2.agent.cfg.Taints = taints
	h2.run()
	h2.expectWait(10 * time.Second)
	if got := h2.node(c2).Spec.Taints; !reflect.DeepEqual(got, own) {
		t.Errorf("an existing node's taints became %+v, want its own %+v", got, own)
	}

	if _, err := New(Config{Clients: []kubernetes.Interface{c}, Taints: append(taints, taints[0])}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a taint given twice: %v", err)
	}
}
