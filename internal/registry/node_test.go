package registry

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeSharedStrings: what a fleet's nodes have in common is named for
// sharing, what each machine has of its own is not.
func TestNodeSharedStrings(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", UID: "u"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "r", Message: "m"}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: "m", SystemUUID: "s", BootID: "b", KernelVersion: "k", OSImage: "o",
				ContainerRuntimeVersion: "c", KubeletVersion: "v", KubeProxyVersion: "p", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	named, own := 0, 0
	nodeSharedStrings(n, func(p *string) { *p = "shared"; named++ }, func(p *string) {
		if p != &n.Status.Addresses[0].Address {
			t.Error("a string other than the address named as the node's own")
		}
		own++
	})
	c, info := n.Status.Conditions[0], n.Status.NodeInfo
	for what, got := range map[string]string{
		"condition type": string(c.Type), "condition status": string(c.Status), "reason": c.Reason, "message": c.Message,
		"address type": string(n.Status.Addresses[0].Type), "taint key": n.Spec.Taints[0].Key, "taint value": n.Spec.Taints[0].Value,
		"taint effect": string(n.Spec.Taints[0].Effect), "kernel": info.KernelVersion, "OS image": info.OSImage,
		"runtime": info.ContainerRuntimeVersion, "kubelet": info.KubeletVersion, "kube-proxy": info.KubeProxyVersion,
		"OS": info.OperatingSystem, "architecture": info.Architecture,
	} {
		if got != "shared" {
			t.Errorf("%s not named for sharing", what)
		}
	}
	if n.Name != "web-1" || n.Status.Addresses[0].Address != "10.0.0.1" || info.MachineID != "m" || info.SystemUUID != "s" || info.BootID != "b" {
		t.Error("a machine's own string was named for sharing")
	}
	if named != 15 || own != 1 {
		t.Errorf("%d common and %d own strings named, want 15 and 1", named, own)
	}
}

// TestNodeResourceQuantities: a negative quantity in a Node's capacity or
// allocatable resources is refused as kube-apiserver refuses it.
func TestNodeResourceQuantities(t *testing.T) {
	bad := &corev1.Node{Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("-1")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-500m")},
	}}
	var got []string
	for _, e := range validateNode(bad) {
		got = append(got, e.Error())
	}
	want := []string{
		`status.capacity.memory: Invalid value: "-1": must be greater than or equal to 0`,
		`status.allocatable.cpu: Invalid value: "-500m": must be greater than or equal to 0`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors %q, want %q", got, want)
	}
}
