package auth

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// staticRBAC is an RBACSource over fixed objects.
type staticRBAC struct {
	roles        []*rbacv1.Role
	clusterRoles []*rbacv1.ClusterRole
	rbs          []*rbacv1.RoleBinding
	crbs         []*rbacv1.ClusterRoleBinding
}

func (s *staticRBAC) GetRole(ns, name string) (*rbacv1.Role, error) {
	for _, r := range s.roles {
		if r.Namespace == ns && r.Name == name {
			return r, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "role"}, name)
}

func (s *staticRBAC) GetClusterRole(name string) (*rbacv1.ClusterRole, error) {
	for _, r := range s.clusterRoles {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "clusterrole"}, name)
}

func (s *staticRBAC) ListRoleBindings(_ context.Context, ns string) ([]*rbacv1.RoleBinding, error) {
	var out []*rbacv1.RoleBinding
	for _, b := range s.rbs {
		if b.Namespace == ns {
			out = append(out, b)
		}
	}
	return out, nil
}

func (s *staticRBAC) ListClusterRoleBindings(context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	return s.crbs, nil
}

func res(verb, group, resource, sub, ns, name string) Attributes {
	return Attributes{Verb: verb, ResourceRequest: true, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
}

func nonRes(verb, path string) Attributes { return Attributes{Verb: verb, Path: path} }

// TestRuleAllows covers the rule forms of Kubernetes' RBAC documentation.
func TestRuleAllows(t *testing.T) {
	tests := []struct {
		name string
		rule rbacv1.PolicyRule
		a    Attributes
		want bool
	}{
		{"verb and resource", rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}},
			res("get", "coordination.k8s.io", "leases", "", "team-a", "x"), true},
		{"other verb", rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}},
			res("update", "coordination.k8s.io", "leases", "", "team-a", "x"), false},
		{"other group", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"leases"}},
			res("get", "coordination.k8s.io", "leases", "", "team-a", "x"), false},
		{"core group", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}},
			res("get", "", "nodes", "", "", "n"), true},
		{"wildcard verb", rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}},
			res("deletecollection", "coordination.k8s.io", "leases", "", "a", ""), true},
		{"wildcard group", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"leases"}},
			res("get", "coordination.k8s.io", "leases", "", "a", "x"), true},
		{"wildcard resource covers subresources", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"*"}},
			res("update", "", "nodes", "status", "", "n"), true},
		{"resource does not cover its subresource", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"nodes"}},
			res("update", "", "nodes", "status", "", "n"), false},
		{"subresource named", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases/status"}},
			res("update", "coordination.k8s.io", "leases", "status", "a", "x"), true},
		{"subresource rule does not cover the resource", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases/status"}},
			res("update", "coordination.k8s.io", "leases", "", "a", "x"), false},
		{"any resource's subresource", rbacv1.PolicyRule{Verbs: []string{"patch"}, APIGroups: []string{""}, Resources: []string{"*/status"}},
			res("patch", "", "namespaces", "status", "", "a"), true},
		{"any resource's subresource, other subresource", rbacv1.PolicyRule{Verbs: []string{"patch"}, APIGroups: []string{""}, Resources: []string{"*/status"}},
			res("patch", "", "namespaces", "finalize", "", "a"), false},
		{"resource name matches", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"my-job"}},
			res("update", "coordination.k8s.io", "leases", "", "a", "my-job"), true},
		{"resource name differs", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"my-job"}},
			res("update", "coordination.k8s.io", "leases", "", "a", "other"), false},
		{"resource names never allow list", rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"my-job"}},
			res("list", "coordination.k8s.io", "leases", "", "a", ""), false},
		{"resource names never allow create", rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"my-job"}},
			res("create", "coordination.k8s.io", "leases", "", "a", ""), false},
		{"non-resource exact", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}, nonRes("get", "/healthz"), true},
		{"non-resource exact, other path", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}, nonRes("get", "/healthz/etcd"), false},
		{"non-resource trailing star", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz/*"}}, nonRes("get", "/healthz/etcd"), true},
		{"non-resource trailing star is a prefix", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/apis*"}}, nonRes("get", "/apis/coordination.k8s.io"), true},
		{"non-resource wildcard", rbacv1.PolicyRule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}, nonRes("post", "/anything"), true},
		{"non-resource rule, resource request", rbacv1.PolicyRule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}, res("get", "", "nodes", "", "", ""), false},
		{"resource rule, non-resource request", rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, nonRes("get", "/metrics"), false},
		{"non-resource verb", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}, nonRes("post", "/metrics"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RuleAllows(tt.a, &tt.rule); got != tt.want {
				t.Errorf("RuleAllows(%+v, %+v) = %v, want %v", tt.a, tt.rule, got, tt.want)
			}
		})
	}
}

func testRBAC() *staticRBAC {
	leaseRule := rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch", "update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}}
	user := func(n string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: n}
	}
	return &staticRBAC{
		roles: []*rbacv1.Role{{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "lease-writer"}, Rules: []rbacv1.PolicyRule{leaseRule}}},
		clusterRoles: []*rbacv1.ClusterRole{
			{ObjectMeta: metav1.ObjectMeta{Name: "node-reader"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"nodes"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "lease-admin"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"*"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "metrics"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}}},
		},
		rbs: []*rbacv1.RoleBinding{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice-writes"}, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "lease-writer"}, Subjects: []rbacv1.Subject{user("alice")}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "devs-admin"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "lease-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "devs"}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "team-c", Name: "job"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "lease-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "job"}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "team-d", Name: "dangling"}, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "missing"}, Subjects: []rbacv1.Subject{user("alice")}},
		},
		crbs: []*rbacv1.ClusterRoleBinding{
			{ObjectMeta: metav1.ObjectMeta{Name: "readers"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "node-reader"}, Subjects: []rbacv1.Subject{user("bob")}},
			{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "metrics"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}}},
		},
	}
}

func TestRBACAuthorize(t *testing.T) {
	alice := &User{Name: "alice", Groups: []string{GroupAuthenticated}}
	bob := &User{Name: "bob", Groups: []string{"devs", GroupAuthenticated}}
	job := &User{Name: "system:serviceaccount:team-c:job"}
	prom := &User{Name: "system:serviceaccount:monitoring:prometheus"}
	with := func(u *User, a Attributes) Attributes { a.User = u; return a }
	tests := []struct {
		name       string
		a          Attributes
		want       Decision
		wantReason string
	}{
		{"role binding in its namespace", with(alice, res("update", "coordination.k8s.io", "leases", "", "team-a", "x")), DecisionAllow,
			`RBAC: allowed by RoleBinding "alice-writes/team-a" of Role "lease-writer" to User "alice"`},
		{"role binding, verb the role lacks", with(alice, res("delete", "coordination.k8s.io", "leases", "", "team-a", "x")), DecisionNoOpinion, ""},
		{"role binding, other namespace", with(alice, res("get", "coordination.k8s.io", "leases", "", "team-b", "x")), DecisionNoOpinion, ""},
		{"role binding, cluster scope", with(alice, res("list", "coordination.k8s.io", "leases", "", "", "")), DecisionNoOpinion, ""},
		{"cluster role binding", with(bob, res("get", "", "nodes", "", "", "web-1")), DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "node-reader" to User "bob"`},
		{"cluster role bound in a namespace, by group", with(bob, res("delete", "coordination.k8s.io", "leasecandidates", "", "team-b", "x")), DecisionAllow,
			`RBAC: allowed by RoleBinding "devs-admin/team-b" of ClusterRole "lease-admin" to Group "devs"`},
		{"cluster role bound in a namespace applies only there", with(bob, res("delete", "coordination.k8s.io", "leases", "", "team-a", "x")), DecisionNoOpinion, ""},
		{"service account in the binding's namespace", with(job, res("update", "coordination.k8s.io", "leases", "", "team-c", "x")), DecisionAllow,
			`RBAC: allowed by RoleBinding "job/team-c" of ClusterRole "lease-admin" to ServiceAccount "job/team-c"`},
		{"non-resource URL to a service account", with(prom, nonRes("get", "/metrics")), DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "monitoring" of ClusterRole "metrics" to ServiceAccount "prometheus/monitoring"`},
		{"binding to a missing role", with(alice, res("get", "coordination.k8s.io", "leases", "", "team-d", "x")), DecisionNoOpinion,
			`RBAC: role.rbac.authorization.k8s.io "missing" not found`},
		{"nobody", with(&User{Name: "eve"}, res("get", "", "nodes", "", "", "")), DecisionNoOpinion, ""},
	}
	z := NewRBAC(testRBAC())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, reason, err := z.Authorize(context.Background(), tt.a)
			if err != nil {
				t.Fatal(err)
			}
			if d != tt.want || reason != tt.wantReason {
				t.Errorf("got %v %q, want %v %q", d, reason, tt.want, tt.wantReason)
			}
		})
	}
}

func TestRBACRulesFor(t *testing.T) {
	z := NewRBAC(testRBAC())
	rules, _, err := z.RulesFor(context.Background(), &User{Name: "alice"}, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 1 || rules[0].Resources[0] != "leases" {
		t.Errorf("got %+v, want the lease-writer rule", rules)
	}
	_, _, err = z.RulesFor(context.Background(), &User{Name: "alice"}, "team-d")
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("got error %v, want the missing role", err)
	}
}

// TestPrivilegedRules: a rules review of system:masters lists what the
// other authorizers give the group, once, and is complete, as in
// kube-apiserver, whose superuser authorizer resolves no rules.
func TestPrivilegedRules(t *testing.T) {
	admin := &User{Name: "admin", Groups: []string{GroupMasters}}
	rules, incomplete, err := Chain{PrivilegedGroups{GroupMasters}, AlwaysAllow{}}.RulesFor(context.Background(), admin, "")
	want, _, _ := AlwaysAllow{}.RulesFor(context.Background(), admin, "")
	if err != nil || incomplete || !equality.Semantic.DeepEqual(rules, want) {
		t.Errorf("rules %+v, incomplete %v, %v; want %+v, complete", rules, incomplete, err, want)
	}
}

func TestChain(t *testing.T) {
	ctx := context.Background()
	chain := Chain{PrivilegedGroups{GroupMasters}, NodeAuthorizer{}, NewRBAC(testRBAC())}
	tests := []struct {
		name string
		a    Attributes
		want Decision
	}{
		{"masters", Attributes{User: &User{Name: "admin", Groups: []string{GroupMasters}}, Verb: "delete", ResourceRequest: true, Resource: "nodes"}, DecisionAllow},
		{"node by the node authorizer", Attributes{User: NodeUser("web-1"), Verb: "update", ResourceRequest: true, Resource: "nodes", Name: "web-1"}, DecisionAllow},
		{"user by RBAC", Attributes{User: &User{Name: "bob"}, Verb: "get", ResourceRequest: true, Resource: "nodes", Name: "web-1"}, DecisionAllow},
		{"nobody allows", Attributes{User: &User{Name: "eve"}, Verb: "get", ResourceRequest: true, Resource: "nodes", Name: "web-1"}, DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d, _, _ := chain.Authorize(ctx, tt.a); d != tt.want {
				t.Errorf("got %v, want %v", d, tt.want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	leases := func(verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}}
	}
	tests := []struct {
		name             string
		owner, requested []rbacv1.PolicyRule
		want             bool
	}{
		{"same", []rbacv1.PolicyRule{leases("get", "update")}, []rbacv1.PolicyRule{leases("get")}, true},
		{"more verbs", []rbacv1.PolicyRule{leases("get")}, []rbacv1.PolicyRule{leases("get", "delete")}, false},
		{"star covers all", []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}}, []rbacv1.PolicyRule{leases("*")}, true},
		{"a star is covered only by a star", []rbacv1.PolicyRule{leases("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")}, []rbacv1.PolicyRule{leases("*")}, false},
		{"names narrow", []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"a"}}},
			[]rbacv1.PolicyRule{leases("get")}, false},
		{"named within names", []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"a", "b"}}},
			[]rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"b"}}}, true},
		{"urls by prefix", []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/api/*"}}}, []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/api/v1"}}}, true},
		{"nothing held", nil, []rbacv1.PolicyRule{leases("get")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := Covers(tt.owner, tt.requested); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAggregatedRules(t *testing.T) {
	rule := func(r string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{r}}
	}
	view := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "view"}, AggregationRule: &rbacv1.AggregationRule{
		ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"aggregate-to-view": "true"}}}}}
	roles := []*rbacv1.ClusterRole{
		view,
		{ObjectMeta: metav1.ObjectMeta{Name: "z-extra", Labels: map[string]string{"aggregate-to-view": "true"}}, Rules: []rbacv1.PolicyRule{rule("b"), rule("a")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a-base", Labels: map[string]string{"aggregate-to-view": "true"}}, Rules: []rbacv1.PolicyRule{rule("a")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Rules: []rbacv1.PolicyRule{rule("c")}},
	}
	got, err := AggregatedRules(view, roles)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Resources[0] != "a" || got[1].Resources[0] != "b" {
		t.Errorf("got %+v, want a (from a-base) then b, without repeats or c", got)
	}
}
