package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// NodeAuthorizer gives each node identity (system:node:<name> in
// system:nodes) what the node agent needs and no more, as Kubernetes' Node
// authorizer does for kubelets:
//
//   - get, list and watch its own Node (a list or watch selecting it by
//     metadata.name), as Kubernetes' authorizer allows since nodes were
//     kept from reading their peers (AuthorizeNodeWithSelectors, 1.34);
//   - create, update and patch Nodes, and update and patch their status:
//     any name, as in Kubernetes, where it is admission (AdmitNode here)
//     that holds a node to its own, so that kubectl auth can-i answers as
//     it does there;
//   - create a Lease in kube-node-lease, and get, update, patch and delete
//     its own Lease there;
//   - create, update and patch Events.
//
// Everything else has no opinion, for RBAC to decide. The reasons given
// are kube-apiserver's.
type NodeAuthorizer struct{}

var (
	_ Authorizer   = NodeAuthorizer{}
	_ RuleResolver = NodeAuthorizer{}
)

// Authorize implements Authorizer.
func (NodeAuthorizer) Authorize(_ context.Context, a Attributes) (Decision, string, error) {
	node, ok := NodeName(a.User)
	if !ok || !a.ResourceRequest {
		return DecisionNoOpinion, "", nil
	}
	switch {
	case a.APIGroup == "" && a.Resource == "nodes":
		switch {
		case a.Subresource == "" && (a.Verb == "get" || a.Verb == "list" || a.Verb == "watch"):
			switch a.Name {
			case node:
				return DecisionAllow, "", nil
			case "":
				return DecisionNoOpinion, fmt.Sprintf("node '%s' cannot read all nodes, only its own Node object", node), nil
			}
			return DecisionNoOpinion, fmt.Sprintf("node '%s' cannot read '%s', only its own Node object", node, a.Name), nil
		case a.Subresource == "" && (a.Verb == "create" || a.Verb == "update" || a.Verb == "patch"),
			a.Subresource == "status" && (a.Verb == "update" || a.Verb == "patch"):
			return DecisionAllow, "", nil // AdmitNode holds the node to its own
		}
		return DecisionNoOpinion, "", nil
	case a.APIGroup == "coordination.k8s.io" && a.Resource == "leases" && a.Subresource == "":
		switch a.Verb {
		case "get", "create", "update", "patch", "delete":
		default:
			return DecisionNoOpinion, "can only get, create, update, patch, or delete a node lease", nil
		}
		if a.Namespace != corev1.NamespaceNodeLease {
			return DecisionNoOpinion, fmt.Sprintf("can only access leases in the %q system namespace", corev1.NamespaceNodeLease), nil
		}
		// A create names no object yet: AdmitNode checks the name.
		if a.Verb != "create" && a.Name != node {
			return DecisionNoOpinion, "can only access node lease with the same name as the requesting node", nil
		}
		return DecisionAllow, "", nil
	case (a.APIGroup == "" || a.APIGroup == "events.k8s.io") && a.Resource == "events" && a.Subresource == "":
		if a.Verb == "create" || a.Verb == "update" || a.Verb == "patch" {
			return DecisionAllow, "", nil
		}
	}
	return DecisionNoOpinion, "", nil
}

// RulesFor implements RuleResolver: the node's rules in RBAC form.
func (NodeAuthorizer) RulesFor(_ context.Context, u *User, namespace string) ([]rbacv1.PolicyRule, bool, error) {
	node, ok := NodeName(u)
	if !ok {
		return nil, false, nil
	}
	rules := []rbacv1.PolicyRule{
		{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{""}, Resources: []string{"nodes"}},
		{Verbs: []string{"update", "patch"}, APIGroups: []string{""}, Resources: []string{"nodes/status"}},
		{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"nodes"}, ResourceNames: []string{node}},
		{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}},
	}
	if namespace == corev1.NamespaceNodeLease {
		rules = append(rules,
			rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}},
			rbacv1.PolicyRule{Verbs: []string{"get", "update", "patch", "delete"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{node}})
	}
	return rules, false, nil
}

// AdmitNode is Kubernetes' NodeRestriction admission for leasehold's kinds:
// whatever authorized the request, a node identity may write only its own
// Node and its own Lease in kube-node-lease (the object's name is checked,
// so a create cannot name another node), and may not point its Lease's
// ownerReferences at anything but its own Node. a describes the request;
// name and owners are the object's after the write (for delete, the name
// from the URL). It returns nil for other users and requests, or the
// reason for a Forbidden answer.
func AdmitNode(a Attributes, name string, owners []metav1.OwnerReference) error {
	node, ok := NodeName(a.User)
	if !ok || !a.ResourceRequest {
		return nil
	}
	switch {
	case a.APIGroup == "" && a.Resource == "nodes":
		switch a.Verb {
		case "create", "update", "patch", "delete":
			if name != node {
				return fmt.Errorf("node %q is not allowed to modify node %q", node, name)
			}
		}
	case a.APIGroup == "coordination.k8s.io" && a.Resource == "leases":
		switch a.Verb {
		case "create", "update", "patch", "delete":
		default:
			return nil
		}
		if a.Namespace != corev1.NamespaceNodeLease {
			return fmt.Errorf("node %q can only access leases in the %q namespace", node, corev1.NamespaceNodeLease)
		}
		if name != node {
			return fmt.Errorf("node %q can only access node lease with the same name as the requesting node", node)
		}
		if a.Verb == "delete" {
			return nil
		}
		if i := slices.IndexFunc(owners, func(o metav1.OwnerReference) bool {
			return o.APIVersion != "v1" || o.Kind != "Node" || o.Name != node
		}); i >= 0 {
			return fmt.Errorf("node %q may not set an ownerReference to %s %q on its lease", node, owners[i].Kind, owners[i].Name)
		}
	}
	return nil
}

// AdmitNodeObject is the rest of Kubernetes' NodeRestriction for a node
// writing its own Node, so that a node cannot steer work meant for others
// to itself: it may register with, and later change, only the labels a
// kubelet may set (k8s.io/kubelet's list: none under kubernetes.io or
// k8s.io but those, and nothing under node-restriction.kubernetes.io,
// which is there for administrators to label nodes with), and it may set
// its taints only when it registers. node is the Node to be stored, old
// the one stored (nil on create). It returns nil for other users, or the
// reason for a Forbidden answer, in kube-apiserver's words.
func AdmitNodeObject(a Attributes, node, old *corev1.Node) error {
	name, ok := NodeName(a.User)
	if !ok {
		return nil
	}
	if old == nil {
		if bad := ForbiddenNodeLabels(node.Labels, nil); len(bad) > 0 {
			return fmt.Errorf("node %q is not allowed to set the following labels: %s", name, strings.Join(bad, ", "))
		}
		return nil
	}
	if !apiequality.Semantic.DeepEqual(node.Spec.Taints, old.Spec.Taints) {
		return fmt.Errorf("node %q is not allowed to modify taints", name)
	}
	if bad := ForbiddenNodeLabels(node.Labels, old.Labels); len(bad) > 0 {
		return fmt.Errorf("is not allowed to modify labels: %s", strings.Join(bad, ", "))
	}
	return nil
}

// ForbiddenNodeLabels returns, sorted, the labels added, changed or
// removed between old and labels that a node may not set.
func ForbiddenNodeLabels(labels, old map[string]string) []string {
	var bad []string
	check := func(k string) {
		domain, _, ok := strings.Cut(k, "/")
		if !ok {
			return
		}
		kube := domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || domain == "k8s.io" || strings.HasSuffix(domain, ".k8s.io")
		restricted := domain == corev1.LabelNamespaceNodeRestriction || strings.HasSuffix(domain, "."+corev1.LabelNamespaceNodeRestriction)
		if restricted || kube && !kubeletapis.IsKubeletLabel(k) {
			bad = append(bad, k)
		}
	}
	for k, v := range labels {
		if was, ok := old[k]; !ok || was != v {
			check(k)
		}
	}
	for k := range old {
		if _, ok := labels[k]; !ok {
			check(k)
		}
	}
	slices.Sort(bad)
	return bad
}
