package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestNodeSpecRules: with kubectl, a Node's pod CIDRs and provider ID are
// set once and kept, podCIDR and podCIDRs are stored in step, and a taint
// without an effect or an address listed twice is refused, each refusal
// kube-apiserver's 422 with nothing stored.
func TestNodeSpecRules(t *testing.T) {
	t.Parallel()
	s := shared(t)
	const node = "spec-rules-1"
	s.kubectlStdin(t, "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+node+"\n", "create", "-f", "-")
	t.Cleanup(func() { s.runKubectl(t, "delete", "node", node, "--wait=false") })
	get := func() *corev1.Node {
		var n corev1.Node
		if err := json.Unmarshal([]byte(s.kubectl(t, "get", "node", node, "-o", "json")), &n); err != nil {
			t.Fatal(err)
		}
		return &n
	}

	s.kubectl(t, "patch", "node", node, "--type", "merge", "-p", `{"spec":{"podCIDR":"10.244.1.0/24","providerID":"leasehold:///spec-rules-1"}}`)
	n := get()
	if n.Spec.PodCIDR != "10.244.1.0/24" || !slices.Equal(n.Spec.PodCIDRs, []string{"10.244.1.0/24"}) || n.Spec.ProviderID != "leasehold:///spec-rules-1" {
		t.Fatalf("after setting podCIDR and providerID: podCIDR %q podCIDRs %q providerID %q", n.Spec.PodCIDR, n.Spec.PodCIDRs, n.Spec.ProviderID)
	}

	for _, tc := range []struct{ patch, want string }{
		{`{"spec":{"podCIDR":"10.244.2.0/24"}}`, `spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid`},
		{`{"spec":{"podCIDRs":["10.244.1.0/24","fd00:1::/64"]}}`, `spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid`},
		{`{"spec":{"providerID":"leasehold:///other"}}`, `spec.providerID: Forbidden: node updates may not change providerID except from "" to valid`},
		{`{"spec":{"taints":[{"key":"dedicated"}]}}`, `metadata.taints[0].effect: Required value`},
	} {
		errOut := s.kubectlFails(t, "", "patch", "node", node, "--type", "merge", "-p", tc.patch)
		if !strings.Contains(errOut, `The Node "`+node+`" is invalid`) || !strings.Contains(errOut, tc.want) {
			t.Errorf("kubectl patch node %s -p %s: %q, want the 422 naming %q", node, tc.patch, errOut, tc.want)
		}
	}
	errOut := s.kubectlFails(t, "", "patch", "node", node, "--subresource=status", "--type", "merge", "-p",
		`{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.7"},{"type":"InternalIP","address":"192.0.2.7"}]}}`)
	if want := `status.addresses[1]: Duplicate value: {"type":"InternalIP","address":"192.0.2.7"}`; !strings.Contains(errOut, want) {
		t.Errorf("an address twice: %q, want %q", errOut, want)
	}
	// The node lifecycle controller may write the node meanwhile; what the
	// refused writes named must be as it was.
	if got := get(); !slices.Equal(got.Spec.PodCIDRs, n.Spec.PodCIDRs) || got.Spec.ProviderID != n.Spec.ProviderID ||
		slices.ContainsFunc(got.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "dedicated" }) || len(got.Status.Addresses) != 0 {
		t.Errorf("a refused write changed the node: podCIDRs %q providerID %q addresses %v", got.Spec.PodCIDRs, got.Spec.ProviderID, got.Status.Addresses)
	}
}

// TestApplyAgainEveryKind: kubectl apply --server-side of an object that
// exists changes it, and kubectl replace of one read without its
// resourceVersion writes it, for every kind, as kube-apiserver lets them
// (it had refused Nodes, Namespaces and ResourceQuotas: "metadata.
// resourceVersion: must be specified for an update").
func TestApplyAgainEveryKind(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	const node = "apply-again-1"
	t.Cleanup(func() { s.runKubectl(t, "delete", "node", node, "--wait=false") })
	manifests := []struct{ kind, name, manifest string }{
		{"node", node, "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + node + "\n  labels: {example.com/step: \"%d\"}\n"},
		{"namespace", ns, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + ns + "\n  labels: {example.com/step: \"%d\"}\n"},
		{"resourcequota", "q", "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: q\n  namespace: " + ns + "\n  labels: {example.com/step: \"%d\"}\nspec:\n  hard: {count/leases.coordination.k8s.io: \"10\"}\n"},
		{"lease", "l", "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\n  namespace: " + ns + "\n  labels: {example.com/step: \"%d\"}\n"},
		{"clusterrole", ns + "-r", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: " + ns + "-r\n  labels: {example.com/step: \"%d\"}\nrules: []\n"},
	}
	t.Cleanup(func() { s.runKubectl(t, "delete", "clusterrole", ns+"-r", "--wait=false") })
	step := func(kind, name string) string {
		return s.kubectl(t, "get", kind, name, "-n", ns, "-o", `jsonpath={.metadata.labels.example\.com/step}`)
	}
	for _, m := range manifests {
		for i := 1; i <= 2; i++ {
			s.kubectlStdin(t, fmt.Sprintf(m.manifest, i), "apply", "--server-side", "-f", "-")
			if got := step(m.kind, m.name); got != fmt.Sprint(i) {
				t.Errorf("%s %s after apply %d: step %q", m.kind, m.name, i, got)
			}
		}
		// replace with what get shows, its resourceVersion taken out.
		out := s.kubectl(t, "get", m.kind, m.name, "-n", ns, "-o", "json")
		var obj map[string]any
		if err := json.Unmarshal([]byte(out), &obj); err != nil {
			t.Fatal(err)
		}
		md := obj["metadata"].(map[string]any)
		delete(md, "resourceVersion")
		md["labels"].(map[string]any)["example.com/step"] = "3"
		body, _ := json.Marshal(obj)
		s.kubectlStdin(t, string(body), "replace", "-f", "-")
		if got := step(m.kind, m.name); got != "3" {
			t.Errorf("%s %s after kubectl replace without a resourceVersion: step %q", m.kind, m.name, got)
		}
	}
}
