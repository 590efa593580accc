package e2e

import (
	"encoding/json"
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
