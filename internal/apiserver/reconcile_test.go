package apiserver_test

import (
	"context"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestBootstrapRBACReconciled: a start gives the bootstrap roles and
// bindings of a cluster made by an older version the rules and subjects
// they lack, keeps what was added to them, and leaves alone those whose
// autoupdate annotation is "false".
func TestBootstrapRBACReconciled(t *testing.T) {
	dir := t.TempDir()
	s := apiservertest.Start(t, apiservertest.Options{Dir: dir})
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(s.Config)
	roles, bindings := cs.RbacV1().ClusterRoles(), cs.RbacV1().ClusterRoleBindings()
	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}

	// As an older version left them: a rule missing and one added by
	// hand; a binding's subject missing; a role its owner froze.
	view, err := roles.Get(ctx, "system:aggregate-to-view", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	view.Rules = append(view.Rules[:len(view.Rules)-1:len(view.Rules)-1], extra)
	if _, err := roles.Update(ctx, view, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeRole, err := roles.Get(ctx, "system:controller:node-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeRole.Annotations["rbac.authorization.kubernetes.io/autoupdate"] = "false"
	nodeRole.Rules = nodeRole.Rules[:1]
	if _, err := roles.Update(ctx, nodeRole, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	discovery, err := bindings.Get(ctx, "system:discovery", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	discovery.Subjects = nil
	if _, err := bindings.Update(ctx, discovery, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Stop()

	s = apiservertest.Start(t, apiservertest.Options{Dir: dir})
	cs = kubernetes.NewForConfigOrDie(s.Config)
	roles, bindings = cs.RbacV1().ClusterRoles(), cs.RbacV1().ClusterRoleBindings()
	view, err = roles.Get(ctx, "system:aggregate-to-view", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(view.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "resourcequotas") }) ||
		!slices.ContainsFunc(view.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "widgets") }) {
		t.Errorf("system:aggregate-to-view after a start: rules %+v; want the missing one back beside the added one", view.Rules)
	}
	if nodeRole, err = roles.Get(ctx, "system:controller:node-controller", metav1.GetOptions{}); err != nil || len(nodeRole.Rules) != 1 {
		t.Errorf("a role with autoupdate false: %d rules, %v; want it left with 1", len(nodeRole.Rules), err)
	}
	if discovery, err = bindings.Get(ctx, "system:discovery", metav1.GetOptions{}); err != nil || len(discovery.Subjects) != 1 || discovery.Subjects[0].Name != "system:authenticated" {
		t.Errorf("system:discovery after a start: subjects %+v, %v", discovery.Subjects, err)
	}
}
