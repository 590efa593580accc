package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// Names of bootstrap roles that others refer to.
const (
	// ClusterRoleLeaderElection may run leader elections (leasehold
	// elect, client-go's leaderelection) in the namespaces it is bound in:
	// kubectl create rolebinding my-job --clusterrole=system:leader-election
	// --user=my-job -n my-namespace.
	ClusterRoleLeaderElection = "system:leader-election"
	// ClusterRoleNode is what every node may do beyond its own Node and
	// Lease (which the Node authorizer grants).
	ClusterRoleNode = "system:node"
	// UserClusterRoleAggregation is the identity that keeps
	// aggregated ClusterRoles up to date.
	UserClusterRoleAggregation = "system:serviceaccount:kube-system:clusterrole-aggregation-controller"
)

const (
	aggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	aggregateToEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	aggregateToView  = "rbac.authorization.k8s.io/aggregate-to-view"
)

func rule(verbs []string, groups []string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

func urls(verbs []string, paths ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: paths}
}

var (
	read      = []string{"get", "list", "watch"}
	write     = []string{"create", "delete", "deletecollection", "patch", "update"}
	readWrite = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	core      = []string{""}
	coord     = []string{"coordination.k8s.io"}
	events    = []string{"", "events.k8s.io"}
)

// BootstrapClusterRoles are the ClusterRoles every leasehold cluster has,
// Kubernetes' where leasehold has the same need (cluster-admin, admin,
// edit, view, system:discovery, system:basic-user,
// system:public-info-viewer, system:node, system:monitoring, the
// controllers' roles) and system:leader-election for services.
func BootstrapClusterRoles() []*rbacv1.ClusterRole {
	cr := func(name string, lbl map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}, Rules: rules}
	}
	agg := func(name string, lbl map[string]string, selector string) *rbacv1.ClusterRole {
		r := cr(name, lbl)
		r.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{selector: "true"}}}}
		return r
	}
	return []*rbacv1.ClusterRole{
		cr("cluster-admin", nil,
			rule([]string{"*"}, []string{"*"}, "*"),
			urls([]string{"*"}, "*")),
		agg("admin", nil, aggregateToAdmin),
		agg("edit", map[string]string{aggregateToAdmin: "true"}, aggregateToEdit),
		agg("view", map[string]string{aggregateToEdit: "true"}, aggregateToView),
		cr("system:aggregate-to-admin", map[string]string{aggregateToAdmin: "true"},
			rule(readWrite, []string{rbacv1.GroupName}, "roles", "rolebindings"),
			rule([]string{"create"}, []string{"authorization.k8s.io"}, "localsubjectaccessreviews")),
		cr("system:aggregate-to-edit", map[string]string{aggregateToEdit: "true"},
			rule(write, coord, "leases", "leasecandidates"),
			rule(write, events, "events")),
		cr("system:aggregate-to-view", map[string]string{aggregateToView: "true"},
			rule(read, coord, "leases", "leasecandidates"),
			rule(read, events, "events"),
			rule(read, core, "namespaces", "namespaces/status", "resourcequotas", "resourcequotas/status")),
		cr("system:discovery", nil,
			urls([]string{"get"}, "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/readyz", "/openapi", "/openapi/*", "/version", "/version/")),
		cr("system:public-info-viewer", nil,
			urls([]string{"get"}, "/healthz", "/livez", "/readyz", "/version", "/version/")),
		cr("system:basic-user", nil,
			rule([]string{"create"}, []string{"authorization.k8s.io"}, "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			rule([]string{"create"}, []string{"authentication.k8s.io"}, "selfsubjectreviews")),
		cr("system:monitoring", nil,
			urls([]string{"get"}, "/metrics", "/healthz", "/livez", "/readyz")),
		cr(ClusterRoleNode, nil,
			rule(read, core, "nodes"),
			rule([]string{"create", "patch", "update"}, events, "events")),
		cr(ClusterRoleLeaderElection, nil,
			rule([]string{"get", "list", "watch", "create", "update", "patch"}, coord, "leases"),
			rule([]string{"get", "list", "watch", "create", "update", "patch", "delete"}, coord, "leasecandidates"),
			rule([]string{"create", "patch", "update"}, events, "events")),
		cr("system:controller:namespace-controller", nil,
			rule([]string{"get", "list", "watch", "delete"}, core, "namespaces"),
			rule([]string{"update"}, core, "namespaces/finalize", "namespaces/status"),
			rule([]string{"get", "list", "delete", "deletecollection"}, []string{"*"}, "*")),
		cr("system:controller:generic-garbage-collector", nil,
			rule([]string{"get", "list", "watch", "patch", "update", "delete"}, []string{"*"}, "*")),
		cr("system:controller:node-controller", nil,
			rule([]string{"get", "list", "watch", "update", "patch", "delete"}, core, "nodes"),
			rule([]string{"patch", "update"}, core, "nodes/status"),
			rule(read, coord, "leases"),
			rule([]string{"create", "patch", "update"}, events, "events")),
		cr("system:controller:leader-election-controller", nil,
			rule([]string{"get", "list", "watch", "create", "update", "patch"}, coord, "leases"),
			rule([]string{"get", "list", "watch", "update", "patch", "delete"}, coord, "leasecandidates"),
			rule([]string{"create", "patch", "update"}, events, "events")),
		cr("system:controller:resourcequota-controller", nil,
			rule([]string{"get", "list", "watch"}, core, "resourcequotas"),
			rule([]string{"update"}, core, "resourcequotas/status"),
			rule([]string{"list", "watch"}, []string{"*"}, "*")),
		cr("system:controller:clusterrole-aggregation-controller", nil,
			rule([]string{"escalate", "get", "list", "watch", "update", "patch"}, []string{rbacv1.GroupName}, "clusterroles")),
	}
}

// BootstrapClusterRoleBindings bind the bootstrap roles that apply to
// everyone or to built-in identities.
func BootstrapClusterRoleBindings() []*rbacv1.ClusterRoleBinding {
	crb := func(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subjects,
		}
	}
	group := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
	}
	sa := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: name}
	}
	return []*rbacv1.ClusterRoleBinding{
		crb("cluster-admin", "cluster-admin", group(auth.GroupMasters)),
		crb("system:discovery", "system:discovery", group(auth.GroupAuthenticated)),
		crb("system:public-info-viewer", "system:public-info-viewer", group(auth.GroupAuthenticated), group(auth.GroupUnauthenticated)),
		crb("system:basic-user", "system:basic-user", group(auth.GroupAuthenticated)),
		crb("system:monitoring", "system:monitoring", group("system:monitoring")),
		crb(ClusterRoleNode, ClusterRoleNode, group(auth.GroupNodes)),
		crb("system:controller:namespace-controller", "system:controller:namespace-controller", sa("namespace-controller")),
		crb("system:controller:generic-garbage-collector", "system:controller:generic-garbage-collector", sa("generic-garbage-collector")),
		crb("system:controller:node-controller", "system:controller:node-controller", sa("node-controller")),
		crb("system:controller:leader-election-controller", "system:controller:leader-election-controller", sa("leader-election-controller")),
		crb("system:controller:resourcequota-controller", "system:controller:resourcequota-controller", sa("resourcequota-controller")),
		crb("system:controller:clusterrole-aggregation-controller", "system:controller:clusterrole-aggregation-controller", sa("clusterrole-aggregation-controller")),
	}
}

// BootstrapRoleBindings are the namespaced bindings: the controller
// manager's election in kube-system.
func BootstrapRoleBindings() []*rbacv1.RoleBinding {
	return []*rbacv1.RoleBinding{{
		ObjectMeta: metav1.ObjectMeta{Name: "system:kube-controller-manager", Namespace: "kube-system"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleLeaderElection},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:kube-controller-manager"}},
	}}
}

// bootstrapRBAC creates each bootstrap role and binding that is missing;
// existing ones, possibly edited by users, are left alone. Aggregated roles
// start with their aggregated rules (the aggregation controller keeps them
// current afterwards).
func (s *Server) bootstrapRBAC(ctx context.Context) error {
	roles := BootstrapClusterRoles()
	// Aggregate to a fixed point: edit feeds admin, view feeds edit.
	for range 3 {
		for _, r := range roles {
			rules, err := auth.AggregatedRules(r, roles)
			if err != nil {
				return err
			}
			r.Rules = rules
		}
	}
	var objs []runtime.Object
	for _, r := range roles {
		objs = append(objs, r)
	}
	for _, b := range BootstrapClusterRoleBindings() {
		objs = append(objs, b)
	}
	for _, b := range BootstrapRoleBindings() {
		objs = append(objs, b)
	}
	for _, obj := range objs {
		var res *registry.Resource
		switch obj.(type) {
		case *rbacv1.ClusterRole:
			res = registry.ClusterRoles
		case *rbacv1.ClusterRoleBinding:
			res = registry.ClusterRoleBindings
		case *rbacv1.RoleBinding:
			res = registry.RoleBindings
		}
		m, _ := meta.Accessor(obj)
		lbl := m.GetLabels()
		if lbl == nil {
			lbl = map[string]string{}
		}
		lbl["kubernetes.io/bootstrapping"] = "rbac-defaults"
		m.SetLabels(lbl)
		m.SetAnnotations(map[string]string{autoupdateAnnotation: "true"})
		m.SetUID(uuid.NewUUID())
		m.SetCreationTimestamp(metav1.NewTime(s.clock.Now()))
		if res.PrepareForCreate != nil {
			res.PrepareForCreate(obj)
		}
		want := obj
		obj = s.fields[fieldManagerKey{res, ""}].UpdateNoErrors(res.New(), obj, "leasehold")
		k := s.kinds[res]
		key := k.Key(m.GetNamespace(), m.GetName())
		if cur, err := k.Get(ctx, key); err == nil {
			if err := s.reconcileRBAC(ctx, res, key, cur, want); err != nil {
				return err
			}
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if _, err := k.Create(ctx, k.Key(m.GetNamespace(), m.GetName()), obj, false); err != nil && !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("bootstrap %s %s: %w", res.Kind, m.GetName(), err)
		}
	}
	return nil
}

// reconcileRBAC brings a bootstrap role or binding that exists up to what
// this version wants, as kube-apiserver's RBAC reconciliation does at each
// start, so that an upgrade gives an older cluster the permissions new
// controllers and resources need: a role gets the rules it lacks (and the
// labels that aggregate it, and its aggregation rule), a binding the
// subjects it lacks. Nothing is taken away, and nothing is written when
// nothing lacks, or when the object's
// rbac.authorization.kubernetes.io/autoupdate annotation is "false". A
// binding to another role is left alone.
func (s *Server) reconcileRBAC(ctx context.Context, res *registry.Resource, key string, cur, want runtime.Object) error {
	m, _ := meta.Accessor(cur)
	if m.GetAnnotations()[autoupdateAnnotation] == "false" {
		return nil
	}
	next := cur.DeepCopyObject()
	changed := false
	nm, _ := meta.Accessor(next)
	labels := nm.GetLabels()
	wm, _ := meta.Accessor(want)
	for k, v := range wm.GetLabels() {
		if _, ok := labels[k]; !ok {
			if labels == nil {
				labels = map[string]string{}
			}
			labels[k], changed = v, true
		}
	}
	nm.SetLabels(labels)
	switch n := next.(type) {
	case *rbacv1.ClusterRole:
		w := want.(*rbacv1.ClusterRole)
		if w.AggregationRule != nil {
			// Its rules are the aggregation controller's to keep.
			if n.AggregationRule == nil {
				n.AggregationRule, changed = w.AggregationRule.DeepCopy(), true
			}
			break
		}
		// Each rule not wholly held goes in whole: tidier than the pieces
		// of it that are missing, and the same permissions.
		held := n.Rules
		for _, r := range w.Rules {
			if ok, _ := auth.Covers(held, []rbacv1.PolicyRule{r}); !ok {
				n.Rules, changed = append(n.Rules, r), true
			}
		}
	case *rbacv1.ClusterRoleBinding:
		w := want.(*rbacv1.ClusterRoleBinding)
		if n.RoleRef != w.RoleRef {
			s.log.Warn("bootstrap binding points at another role; left alone", "binding", n.Name, "role", n.RoleRef.Name, "want", w.RoleRef.Name)
			return nil
		}
		n.Subjects, changed = addSubjects(n.Subjects, w.Subjects, changed)
	case *rbacv1.RoleBinding:
		w := want.(*rbacv1.RoleBinding)
		if n.RoleRef != w.RoleRef {
			s.log.Warn("bootstrap binding points at another role; left alone", "binding", n.Namespace+"/"+n.Name, "role", n.RoleRef.Name, "want", w.RoleRef.Name)
			return nil
		}
		n.Subjects, changed = addSubjects(n.Subjects, w.Subjects, changed)
	}
	if !changed {
		return nil
	}
	k := s.kinds[res]
	_, err := k.Update(ctx, key, store.UpdateOptions{}, func(latest runtime.Object) (runtime.Object, error) {
		lm, _ := meta.Accessor(latest)
		if lm.GetResourceVersion() != m.GetResourceVersion() {
			return nil, store.ErrConflict // changed meanwhile: the next start reconciles it
		}
		return s.fields[fieldManagerKey{res, ""}].UpdateNoErrors(latest, next, "leasehold"), nil
	})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconciling bootstrap %s %s: %w", res.Kind, m.GetName(), err)
	}
	s.log.Info("bootstrap RBAC object brought up to date", "kind", res.Kind, "name", m.GetName())
	return nil
}

// autoupdateAnnotation set to "false" keeps a bootstrap RBAC object as its
// owner left it.
const autoupdateAnnotation = "rbac.authorization.kubernetes.io/autoupdate"

// addSubjects adds to have the subjects of want it lacks.
func addSubjects(have, want []rbacv1.Subject, changed bool) ([]rbacv1.Subject, bool) {
	for _, w := range want {
		if !slices.Contains(have, w) {
			have, changed = append(have, w), true
		}
	}
	return have, changed
}
