package apiserver

import (
	"context"
	"errors"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"

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
	// ClusterRoleNode is Kubernetes' role of that name, bound to no one:
	// the Node authorizer grants each node its own Node and Lease.
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
// system:public-info-viewer, system:auth-delegator for services that
// authenticate and authorize their callers with the server, system:node,
// system:monitoring, the
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
		cr("system:auth-delegator", nil,
			rule([]string{"create"}, []string{"authentication.k8s.io"}, "tokenreviews"),
			rule([]string{"create"}, []string{"authorization.k8s.io"}, "subjectaccessreviews")),
		cr("system:monitoring", nil,
			urls([]string{"get"}, "/metrics", "/metrics/slis", "/healthz", "/livez", "/readyz", "/healthz/*", "/livez/*", "/readyz/*")),
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
			rule([]string{"get", "list", "watch", "patch", "update", "delete"}, []string{"*"}, "*"),
			rule([]string{"create", "patch", "update"}, events, "events")),
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
		// Bound to no one, as in Kubernetes since 1.8: the Node authorizer
		// grants each node what it needs, its own Node and Lease, and
		// this binding to the whole group would let any node read every
		// Node (an upgraded cluster loses the subject: RemoveExtraSubjects).
		crb(ClusterRoleNode, ClusterRoleNode),
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

// bootstrapRBAC creates each bootstrap role and binding that is missing,
// and brings those that exist up to what this version wants, at every
// start, with Kubernetes' own RBAC reconciliation
// (k8s.io/component-helpers/auth/rbac/reconciliation), as kube-apiserver
// does: an upgraded cluster gets the rules and subjects new controllers
// and resources need. Nothing is taken away; an object annotated
// rbac.authorization.kubernetes.io/autoupdate: "false" is left as it is;
// a binding to another role is made again. Aggregated roles start with
// their aggregated rules (the aggregation controller keeps them current
// afterwards). Nothing is written when nothing lacks.
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
	st := rbacStore{s: s, ctx: ctx}
	for _, r := range roles {
		bootstrapMeta(&r.ObjectMeta)
		o := reconciliation.ReconcileRoleOptions{Role: reconciliation.ClusterRoleRuleOwner{ClusterRole: r}, Confirm: true, Client: clusterRoleStore{st}}
		if err := runReconcile(o.Run); err != nil {
			return fmt.Errorf("bootstrap ClusterRole %s: %w", r.Name, err)
		}
	}
	for _, b := range BootstrapClusterRoleBindings() {
		bootstrapMeta(&b.ObjectMeta)
		o := reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: b}, Confirm: true, Client: clusterRoleBindingStore{st},
			RemoveExtraSubjects: b.Name == ClusterRoleNode}
		if err := runReconcile(o.Run); err != nil {
			return fmt.Errorf("bootstrap ClusterRoleBinding %s: %w", b.Name, err)
		}
	}
	for _, b := range BootstrapRoleBindings() {
		bootstrapMeta(&b.ObjectMeta)
		o := reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: b}, Confirm: true, Client: roleBindingStore{st}}
		if err := runReconcile(o.Run); err != nil {
			return fmt.Errorf("bootstrap RoleBinding %s/%s: %w", b.Namespace, b.Name, err)
		}
	}
	return nil
}

// runReconcile runs a reconciliation again when another replica, starting
// at the same time, wrote the object between its read and its write.
func runReconcile[T any](run func() (T, error)) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		_, err := run()
		return err
	})
}

// bootstrapMeta marks a bootstrap object as kube-apiserver marks its own.
func bootstrapMeta(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels["kubernetes.io/bootstrapping"] = "rbac-defaults"
	m.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
}

// rbacStore reads and writes RBAC objects straight in the store, before
// the server serves, for the reconciliation's clients below; it answers
// with the API errors the reconciliation tells apart.
type rbacStore struct {
	s   *Server
	ctx context.Context
}

func (st rbacStore) get(res *registry.Resource, namespace, name string) (runtime.Object, error) {
	k := st.s.kinds[res]
	obj, err := k.Get(st.ctx, k.Key(namespace, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(res.GroupResource(), name)
	}
	return obj, err
}

func (st rbacStore) create(res *registry.Resource, obj runtime.Object) (runtime.Object, error) {
	m, _ := meta.Accessor(obj)
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(metav1.NewTime(st.s.clock.Now()))
	if res.PrepareForCreate != nil {
		res.PrepareForCreate(obj)
	}
	obj = st.s.fields[fieldManagerKey{res, ""}].UpdateNoErrors(res.New(), obj, "leasehold")
	k := st.s.kinds[res]
	created, err := k.Create(st.ctx, k.Key(m.GetNamespace(), m.GetName()), obj, false)
	if errors.Is(err, store.ErrExists) {
		return nil, apierrors.NewAlreadyExists(res.GroupResource(), m.GetName())
	}
	return created, err
}

func (st rbacStore) update(res *registry.Resource, obj runtime.Object) (runtime.Object, error) {
	m, _ := meta.Accessor(obj)
	k := st.s.kinds[res]
	updated, err := k.Update(st.ctx, k.Key(m.GetNamespace(), m.GetName()), store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		if cm, _ := meta.Accessor(cur); cm.GetResourceVersion() != m.GetResourceVersion() {
			return nil, apierrors.NewConflict(res.GroupResource(), m.GetName(), errors.New("changed since it was read"))
		}
		return st.s.fields[fieldManagerKey{res, ""}].UpdateNoErrors(cur, obj, "leasehold"), nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(res.GroupResource(), m.GetName())
	}
	return updated, err
}

func (st rbacStore) delete(res *registry.Resource, namespace, name string, uid types.UID) error {
	k := st.s.kinds[res]
	_, err := k.Delete(st.ctx, k.Key(namespace, name), false, func(cur runtime.Object) error {
		if cm, _ := meta.Accessor(cur); cm.GetUID() != uid {
			return apierrors.NewConflict(res.GroupResource(), name, errors.New("replaced since it was read"))
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return apierrors.NewNotFound(res.GroupResource(), name)
	}
	return err
}

type clusterRoleStore struct{ rbacStore }

func (c clusterRoleStore) Get(_, name string) (reconciliation.RuleOwner, error) {
	obj, err := c.get(registry.ClusterRoles, "", name)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole).DeepCopy()}, nil
}

func (c clusterRoleStore) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, err := c.create(registry.ClusterRoles, in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

func (c clusterRoleStore) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, err := c.update(registry.ClusterRoles, in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

type clusterRoleBindingStore struct{ rbacStore }

func (c clusterRoleBindingStore) Get(_, name string) (reconciliation.RoleBinding, error) {
	obj, err := c.get(registry.ClusterRoleBindings, "", name)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.(*rbacv1.ClusterRoleBinding).DeepCopy()}, nil
}

func (c clusterRoleBindingStore) Delete(_, name string, uid types.UID) error {
	return c.delete(registry.ClusterRoleBindings, "", name, uid)
}

func (c clusterRoleBindingStore) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, err := c.create(registry.ClusterRoleBindings, in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.(*rbacv1.ClusterRoleBinding)}, nil
}

func (c clusterRoleBindingStore) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, err := c.update(registry.ClusterRoleBindings, in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.(*rbacv1.ClusterRoleBinding)}, nil
}

type roleBindingStore struct{ rbacStore }

func (c roleBindingStore) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	obj, err := c.get(registry.RoleBindings, namespace, name)
	if err != nil {
		return nil, err
	}
	return reconciliation.RoleBindingAdapter{RoleBinding: obj.(*rbacv1.RoleBinding).DeepCopy()}, nil
}

func (c roleBindingStore) Delete(namespace, name string, uid types.UID) error {
	return c.delete(registry.RoleBindings, namespace, name, uid)
}

func (c roleBindingStore) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, err := c.create(registry.RoleBindings, in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.RoleBindingAdapter{RoleBinding: obj.(*rbacv1.RoleBinding)}, nil
}

func (c roleBindingStore) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, err := c.update(registry.RoleBindings, in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.RoleBindingAdapter{RoleBinding: obj.(*rbacv1.RoleBinding)}, nil
}
