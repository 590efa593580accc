package registry

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
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
// allocatable resources, or a fraction of one counted in whole numbers, is
// refused as kube-apiserver refuses it.
func TestNodeResourceQuantities(t *testing.T) {
	q := resource.MustParse
	bad := &corev1.Node{Status: corev1.NodeStatus{
		Capacity: corev1.ResourceList{corev1.ResourceCPU: q("8"), corev1.ResourceMemory: q("-1"), corev1.ResourcePods: q("110"),
			"example.com/gpu": q("2"), "example.com/fpga": q("500m"), "hugepages-2Mi": q("1Mi")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: q("-500m"), corev1.ResourcePods: q("1.5"),
			"kubernetes.io/widgets": q("500m"), "requests.example.com/gpu": q("500m"), "example.com/bad name": q("500m")},
	}}
	got := errorStrings(validateNode(bad))
	want := []string{
		`status.capacity.example.com/fpga: Invalid value: "500m": must be an integer`,
		`status.capacity.memory: Invalid value: "-1": must be greater than or equal to 0`,
		`status.allocatable.cpu: Invalid value: "-500m": must be greater than or equal to 0`,
		`status.allocatable.pods: Invalid value: "1500m": must be an integer`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors %q, want %q", got, want)
	}
}

// TestNodePodCIDRs: spec.podCIDR and spec.podCIDRs are kept in step and
// checked as kube-apiserver keeps and checks them.
func TestNodePodCIDRs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cidr      string
		cidrs     []string
		wantCIDR  string
		wantCIDRs []string
		errs      []string
	}{
		{name: "neither"},
		{name: "podCIDR alone", cidr: "10.0.0.0/24", wantCIDR: "10.0.0.0/24", wantCIDRs: []string{"10.0.0.0/24"}},
		{name: "podCIDRs alone", cidrs: []string{"10.0.0.0/24", "fd00::/64"}, wantCIDR: "10.0.0.0/24", wantCIDRs: []string{"10.0.0.0/24", "fd00::/64"}},
		{name: "podCIDR first of podCIDRs", cidr: "fd00::/64", cidrs: []string{"fd00::/64", "10.0.0.0/24"}, wantCIDR: "fd00::/64", wantCIDRs: []string{"fd00::/64", "10.0.0.0/24"}},
		{name: "podCIDR wins", cidr: "10.1.0.0/24", cidrs: []string{"10.0.0.0/24", "fd00::/64"}, wantCIDR: "10.1.0.0/24", wantCIDRs: []string{"10.1.0.0/24"}},
		{name: "leading zeros, as the legacy rules allow", cidrs: []string{"010.0.0.0/24"}, wantCIDR: "010.0.0.0/24", wantCIDRs: []string{"010.0.0.0/24"}},
		{name: "not a CIDR", cidrs: []string{"10.0.0.1"}, wantCIDR: "10.0.0.1", wantCIDRs: []string{"10.0.0.1"},
			errs: []string{`spec.podCIDRs[0]: Invalid value: "10.0.0.1": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{name: "one family twice", cidrs: []string{"10.0.0.0/24", "10.1.0.0/24"}, wantCIDR: "10.0.0.0/24", wantCIDRs: []string{"10.0.0.0/24", "10.1.0.0/24"},
			errs: []string{`spec.podCIDRs: Invalid value: ["10.0.0.0/24","10.1.0.0/24"]: may specify no more than one CIDR for each IP family`}},
		{name: "three", cidrs: []string{"10.0.0.0/24", "fd00::/64", "10.1.0.0/24"}, wantCIDR: "10.0.0.0/24", wantCIDRs: []string{"10.0.0.0/24", "fd00::/64", "10.1.0.0/24"},
			errs: []string{`spec.podCIDRs: Invalid value: ["10.0.0.0/24","fd00::/64","10.1.0.0/24"]: may specify no more than one CIDR for each IP family`}},
		{name: "the same twice", cidrs: []string{"fd00::/64", "fd00::/64"}, wantCIDR: "fd00::/64", wantCIDRs: []string{"fd00::/64", "fd00::/64"},
			errs: []string{`spec.podCIDRs: Invalid value: ["fd00::/64","fd00::/64"]: may specify no more than one CIDR for each IP family`, `spec.podCIDRs[1]: Duplicate value: "fd00::/64"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: tc.cidr, PodCIDRs: tc.cidrs}}
			Nodes.PrepareForCreate(n)
			if n.Spec.PodCIDR != tc.wantCIDR || !slices.Equal(n.Spec.PodCIDRs, tc.wantCIDRs) {
				t.Errorf("stored podCIDR %q podCIDRs %q, want %q %q", n.Spec.PodCIDR, n.Spec.PodCIDRs, tc.wantCIDR, tc.wantCIDRs)
			}
			if got := errorStrings(Nodes.Validate(n)); !slices.Equal(got, tc.errs) {
				t.Errorf("errors %q, want %q", got, tc.errs)
			}
		})
	}
}

// TestNodeUpdateRules: what kube-apiserver refuses to change in a Node.
func TestNodeUpdateRules(t *testing.T) {
	addrs := func(a ...string) []corev1.NodeAddress {
		var out []corev1.NodeAddress
		for i := 0; i < len(a); i += 2 {
			out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(a[i]), Address: a[i+1]})
		}
		return out
	}
	const (
		cidrMsg     = `spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid`
		providerMsg = `spec.providerID: Forbidden: node updates may not change providerID except from "" to valid`
	)
	for _, tc := range []struct {
		name     string
		old, new corev1.NodeSpec
		// addresses are the new status's addresses; status says the write
		// is one of /status, which keeps the stored spec as it is.
		addresses []corev1.NodeAddress
		status    bool
		errs      []string
		// oldAddresses are the stored node's; an update of the main
		// resource keeps them.
		oldAddresses []corev1.NodeAddress
	}{
		{name: "provider ID set", new: corev1.NodeSpec{ProviderID: "aws:///a"}},
		{name: "provider ID kept", old: corev1.NodeSpec{ProviderID: "aws:///a"}, new: corev1.NodeSpec{ProviderID: "aws:///a", Unschedulable: true}},
		{name: "provider ID changed", old: corev1.NodeSpec{ProviderID: "aws:///a"}, new: corev1.NodeSpec{ProviderID: "aws:///b"}, errs: []string{providerMsg}},
		{name: "provider ID cleared", old: corev1.NodeSpec{ProviderID: "aws:///a"}, errs: []string{providerMsg}},
		{name: "pod CIDR set", new: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}},
		{name: "pod CIDRs kept through podCIDR", old: corev1.NodeSpec{PodCIDRs: []string{"10.0.0.0/24"}}, new: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}},
		{name: "pod CIDR changed", old: corev1.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24"}}, new: corev1.NodeSpec{PodCIDR: "10.0.1.0/24"}, errs: []string{cidrMsg}},
		{name: "pod CIDR cleared", old: corev1.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24"}}, errs: []string{cidrMsg}},
		{name: "second family added", old: corev1.NodeSpec{PodCIDRs: []string{"10.0.0.0/24"}}, new: corev1.NodeSpec{PodCIDRs: []string{"10.0.0.0/24", "fd00::/64"}}, errs: []string{cidrMsg}},
		{name: "stored podCIDR alone counts as set", old: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}, new: corev1.NodeSpec{PodCIDRs: []string{"10.0.2.0/24"}}, errs: []string{cidrMsg}},
		{name: "status update of a node stored with podCIDR alone", old: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}, new: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}, status: true},
		{name: "an address twice already", oldAddresses: addrs("InternalIP", "10.0.0.1", "InternalIP", "10.0.0.1"), new: corev1.NodeSpec{Unschedulable: true}},
		{name: "externalID", old: corev1.NodeSpec{DoNotUseExternalID: "a"}, new: corev1.NodeSpec{DoNotUseExternalID: "b"}, errs: []string{"spec.externalID: Forbidden: may not be updated"}},
		{name: "addresses", addresses: addrs("InternalIP", "10.0.0.1", "InternalIP", "10.0.0.2", "Hostname", "10.0.0.1")},
		{name: "an address twice", addresses: addrs("InternalIP", "10.0.0.1", "Hostname", "web-1", "InternalIP", "10.0.0.1"),
			errs: []string{`status.addresses[2]: Duplicate value: {"type":"InternalIP","address":"10.0.0.1"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := &corev1.Node{Spec: tc.old, Status: corev1.NodeStatus{Addresses: tc.oldAddresses}}
			n := &corev1.Node{Spec: tc.new}
			before := old.DeepCopy()
			if tc.status {
				Nodes.PrepareForStatusUpdate(n, old)
			} else {
				Nodes.PrepareForUpdate(n, old)
			}
			if tc.addresses != nil {
				n.Status.Addresses = tc.addresses // as a status update would leave them
			}
			if got := errorStrings(Nodes.ValidateUpdate(n, old)); !slices.Equal(got, tc.errs) {
				t.Errorf("errors %q, want %q", got, tc.errs)
			}
			if !equality.Semantic.DeepEqual(old, before) {
				t.Errorf("the stored node changed: %+v", old.Spec)
			}
		})
	}
}

// TestNodeConfigSourceDropped: the kubelet's dynamic configuration is gone
// from Kubernetes; kube-apiserver drops what a client still sends of it.
func TestNodeConfigSourceDropped(t *testing.T) {
	source := &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{Namespace: "kube-system", Name: "c", KubeletConfigKey: "k"}}
	n := &corev1.Node{Spec: corev1.NodeSpec{ConfigSource: source}, Status: corev1.NodeStatus{Config: &corev1.NodeConfigStatus{Error: "e"}}}
	Nodes.PrepareForCreate(n)
	if n.Spec.ConfigSource != nil || n.Status.Config != nil {
		t.Errorf("create kept configSource %v, config %v", n.Spec.ConfigSource, n.Status.Config)
	}
	n.Spec.ConfigSource = source
	Nodes.PrepareForUpdate(n, &corev1.Node{})
	if n.Spec.ConfigSource != nil {
		t.Errorf("update added configSource %v", n.Spec.ConfigSource)
	}
	n.Spec.ConfigSource = source
	Nodes.PrepareForUpdate(n, &corev1.Node{Spec: corev1.NodeSpec{ConfigSource: source}})
	if n.Spec.ConfigSource == nil {
		t.Error("update dropped the configSource a node already had")
	}
}

// TestNodeAllocatableDefault: a status with a capacity and no allocatable
// resources gets the capacity as its allocatable, on create and on a
// status update, as Kubernetes defaults it; an allocatable given is kept.
func TestNodeAllocatableDefault(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	given := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1900m")}
	for _, c := range []struct {
		name    string
		prepare func(n *corev1.Node)
	}{
		{"create", func(n *corev1.Node) { Nodes.PrepareForCreate(n) }},
		{"status update", func(n *corev1.Node) { Nodes.PrepareForStatusUpdate(n, &corev1.Node{}) }},
	} {
		n := &corev1.Node{Status: corev1.NodeStatus{Capacity: capacity}}
		c.prepare(n)
		if !equality.Semantic.DeepEqual(n.Status.Allocatable, capacity) {
			t.Errorf("%s: allocatable %v, want the capacity %v", c.name, n.Status.Allocatable, capacity)
		}
		n = &corev1.Node{Status: corev1.NodeStatus{Capacity: capacity, Allocatable: given}}
		c.prepare(n)
		if !equality.Semantic.DeepEqual(n.Status.Allocatable, given) {
			t.Errorf("%s: allocatable %v, want %v as given", c.name, n.Status.Allocatable, given)
		}
		n = &corev1.Node{}
		c.prepare(n)
		if n.Status.Allocatable != nil {
			t.Errorf("%s: allocatable %v without a capacity", c.name, n.Status.Allocatable)
		}
	}
}

// errorStrings gives each error as the Status of a 422 words it.
func errorStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// TestNodeTaints: a taint's errors, as kube-apiserver words and places
// them.
func TestNodeTaints(t *testing.T) {
	n := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
		{Key: "bad key", Value: "-x-", Effect: "Sometimes"},
		{Key: "example.com/k"},
		{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Effect: corev1.TaintEffectNoExecute},
	}}}
	want := []string{
		`metadata.taints[1].key: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
		`metadata.taints[1].value: Invalid value: "-x-": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
		`metadata.taints[1].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"`,
		`metadata.taints[2].effect: Required value`,
		`metadata.taints[3]: Duplicate value: {"key":"dedicated","value":"web","effect":"NoSchedule"}: taints must be unique by key and effect pair`,
	}
	if got := errorStrings(Nodes.Validate(n)); !slices.Equal(got, want) {
		t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNodeRatcheting: a Node stored when a rule did not hold it (a fraction
// of pods in its capacity, an address twice) may still be written, the
// node lifecycle controller's taint for one, as long as the write leaves
// that part as it was; a write that changes it meets the rule.
func TestNodeRatcheting(t *testing.T) {
	old := &corev1.Node{Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1.5")},
		Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")},
		Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
	}}
	tainted := old.DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoSchedule}}
	Nodes.PrepareForUpdate(tainted, old)
	if errs := Nodes.ValidateUpdate(tainted, old); len(errs) > 0 {
		t.Errorf("a taint on a node stored with what the rules now refuse: %v", errs)
	}
	posted := old.DeepCopy()
	posted.Status.Capacity[corev1.ResourcePods] = resource.MustParse("2.5")
	Nodes.PrepareForStatusUpdate(posted, old)
	want := []string{`status.capacity.pods: Invalid value: "2500m": must be an integer`}
	if got := errorStrings(Nodes.ValidateUpdate(posted, old)); !slices.Equal(got, want) {
		t.Errorf("a changed fraction: errors %q, want %q", got, want)
	}
}
