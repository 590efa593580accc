package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// DefaultAuthorization is the default authorizer chain: RBAC, then Node,
// as --authorization-mode RBAC,Node makes it.
func DefaultAuthorization() *apiserverconfig.AuthorizationConfiguration {
	cfg, err := auth.AuthorizationConfigFromModes([]string{auth.AuthorizerRBAC, auth.AuthorizerNode}, auth.AuthorizationWebhookFlags{})
	if err != nil {
		panic(err)
	}
	return cfg
}

// SetAuthorization puts cfg's chain of authorizers in use, behind the
// system:masters shortcut every kube-apiserver has. cfg must be valid
// (auth.ValidateAuthorizationConfig); a webhook whose kubeconfig cannot be
// read is an error, and leaves the chain in use as it was.
func (s *Server) SetAuthorization(cfg *apiserverconfig.AuthorizationConfiguration) error {
	chain := auth.Chain{auth.PrivilegedGroups{auth.GroupMasters}}
	for _, a := range cfg.Authorizers {
		switch string(a.Type) {
		case auth.AuthorizerRBAC:
			chain = append(chain, auth.NewRBAC(storeRBAC{s}))
		case auth.AuthorizerNode:
			chain = append(chain, auth.NodeAuthorizer{})
		case auth.AuthorizerAlwaysAllow:
			chain = append(chain, auth.AlwaysAllow{})
		case auth.AuthorizerAlwaysDeny:
			chain = append(chain, auth.AlwaysDeny{})
		case auth.AuthorizerWebhook:
			w, err := auth.NewAuthorizationWebhook(a.Name, a.Webhook, s.cfg.AuthorizationWebhookMetrics)
			if err != nil {
				return fmt.Errorf("authorizer %s: %w", a.Name, err)
			}
			chain = append(chain, w)
		default:
			return fmt.Errorf("authorizer %s: unknown type %q", a.Name, a.Type)
		}
	}
	s.authz.Store(&chain)
	return nil
}

// Authorizer returns the server's authorizer chain as it is now, which
// also resolves rules (auth.RuleResolver).
func (s *Server) Authorizer() auth.Chain { return *s.authz.Load() }

// storeRBAC reads roles and bindings from the watch cache.
type storeRBAC struct{ s *Server }

var _ auth.RBACSource = storeRBAC{}

func (x storeRBAC) cached(r *registry.Resource, namespace, name string) (runtime.Object, error) {
	k := x.s.kinds[r]
	// RBAC kinds always have a watch cache, filled before the server
	// serves (Bootstrap): this never reads etcd.
	obj, err := k.Cached(context.Background(), k.Key(namespace, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	return obj, err
}

// fresh reads a role from the cache or, when the cache does not have it
// yet (it was just created), from etcd: a binding's escalation check must
// see the role the client wrote a moment ago.
func (x storeRBAC) fresh(ctx context.Context, r *registry.Resource, namespace, name string) (runtime.Object, error) {
	obj, err := x.cached(r, namespace, name)
	if !apierrors.IsNotFound(err) {
		return obj, err
	}
	k := x.s.kinds[r]
	obj, err = k.Get(ctx, k.Key(namespace, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	return obj, err
}

func (x storeRBAC) GetRole(namespace, name string) (*rbacv1.Role, error) {
	obj, err := x.cached(registry.Roles, namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*rbacv1.Role), nil
}

func (x storeRBAC) GetClusterRole(name string) (*rbacv1.ClusterRole, error) {
	obj, err := x.cached(registry.ClusterRoles, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*rbacv1.ClusterRole), nil
}

func (x storeRBAC) list(ctx context.Context, r *registry.Resource, namespace string) ([]runtime.Object, error) {
	res, err := x.s.kinds[r].List(ctx, store.ListOptions{Namespace: namespace, ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	return res.Items, nil
}

func (x storeRBAC) ListRoleBindings(ctx context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	items, err := x.list(ctx, registry.RoleBindings, namespace)
	out := make([]*rbacv1.RoleBinding, len(items))
	for i, o := range items {
		out[i] = o.(*rbacv1.RoleBinding)
	}
	return out, err
}

func (x storeRBAC) ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	items, err := x.list(ctx, registry.ClusterRoleBindings, "")
	out := make([]*rbacv1.ClusterRoleBinding, len(items))
	for i, o := range items {
		out[i] = o.(*rbacv1.ClusterRoleBinding)
	}
	return out, err
}

// attributesFor describes a parsed request for the authorizer.
func attributesFor(info requestInfo, u *auth.User, r *http.Request) auth.Attributes {
	a := auth.Attributes{User: u, Verb: info.verb, ResourceRequest: info.resourceRequest}
	if !info.resourceRequest {
		a.Verb = nonResourceVerb(r.Method)
		a.Path = r.URL.Path
		return a
	}
	a.APIGroup, a.APIVersion = info.gv.Group, info.gv.Version
	a.Resource, a.Subresource, a.Namespace, a.Name = info.resource, info.subresource, info.namespace, info.name
	return a
}

// nonResourceVerb is Kubernetes' verb for a non-resource request: the
// lower-case method, HEAD as head (which no built-in role grants), an
// empty one (Go's client for GET) as get.
func nonResourceVerb(method string) string {
	if method == "" {
		return "get"
	}
	return strings.ToLower(method)
}

// authorize asks the chain; only Allow allows.
func (s *Server) authorize(ctx context.Context, a auth.Attributes) (bool, string) {
	d, reason, _ := s.decide(ctx, a)
	return d == auth.DecisionAllow, reason
}

// decide asks the chain for its decision, logging an error; the reason
// given is the error's when the chain gave none.
func (s *Server) decide(ctx context.Context, a auth.Attributes) (auth.Decision, string, error) {
	d, reason, err := s.Authorizer().Authorize(ctx, a)
	if err != nil {
		s.log.Warn("authorizer error", "user", a.User.Name, "err", err)
		if reason == "" {
			reason = err.Error()
		}
	}
	return d, reason, err
}

// admit runs the admission checks of authorization after a write's object
// is known (obj is what will be stored; cur the stored object, nil on
// create): node restriction, and RBAC escalation prevention.
func (s *Server) admit(req *request, obj, cur runtime.Object) error {
	u := auth.UserFrom(req.ctx)
	if u == nil {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	a := attributesFor(req.info, u, req.r)
	if err := auth.AdmitNode(a, m.GetName(), m.GetOwnerReferences()); err != nil {
		return apierrors.NewForbidden(req.gr, m.GetName(), err)
	}
	if n, ok := obj.(*corev1.Node); ok {
		old, _ := cur.(*corev1.Node)
		if err := auth.AdmitNodeObject(a, n, old); err != nil {
			return apierrors.NewForbidden(req.gr, m.GetName(), err)
		}
	}
	if req.res.GroupVersion.Group == rbacv1.GroupName && req.info.subresource == "" && s.checksEscalation() {
		if cur != nil && onlyGCFieldsChanged(obj, cur) {
			// As Kubernetes' RBAC storage: what the garbage collector
			// needs to change (finalizers, owner references) grants nothing.
			return nil
		}
		return s.noEscalation(req, u, obj, cur)
	}
	return nil
}

// onlyGCFieldsChanged says whether obj differs from cur in nothing but its
// finalizers and owner references (and what the server sets), as
// Kubernetes' IsOnlyMutatingGCFields judges an RBAC update.
func onlyGCFieldsChanged(obj, cur runtime.Object) bool {
	a, b := obj.DeepCopyObject(), cur.DeepCopyObject()
	for _, o := range []runtime.Object{a, b} {
		m := objectMeta(o)
		m.Finalizers, m.OwnerReferences, m.ManagedFields, m.ResourceVersion, m.Generation = nil, nil, nil, "", 0
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// fullAuthority is every permission there is: what an aggregationRule may
// gather, and so what using one takes, as in Kubernetes.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// authorizeCreateOnUpdate: a PUT that creates its object is allowed to
// update it, and must be allowed to create it too, as kube-apiserver asks.
func (s *Server) authorizeCreateOnUpdate(req *request) error {
	u := auth.UserFrom(req.ctx)
	if u == nil {
		return nil
	}
	a := attributesFor(req.info, u, req.r)
	a.Verb = "create"
	if ok, reason := s.authorize(req.ctx, a); !ok {
		return forbiddenAttrs(a, reason)
	}
	return nil
}

// checksEscalation says whether RBAC objects are guarded: only when RBAC
// decides.
func (s *Server) checksEscalation() bool {
	for _, z := range s.Authorizer() {
		if _, ok := z.(*auth.RBAC); ok {
			return true
		}
	}
	return false
}

// noEscalation refuses a role that grants, or a binding to a role that
// grants, permissions the user does not hold, unless the user may escalate
// (roles) or bind (bindings), as Kubernetes' RBAC storage does.
func (s *Server) noEscalation(req *request, u *auth.User, obj, cur runtime.Object) error {
	var rules []rbacv1.PolicyRule
	namespace := req.info.namespace
	m, _ := meta.Accessor(obj)
	aggregates := false
	// The escalate verb is asked of the name on the URL, as in Kubernetes:
	// none on a create (whose name create() filled in from the body), so
	// a grant by name covers updates of that role only.
	urlName := req.info.name
	if req.info.verb == "create" {
		urlName = ""
	}
	switch o := obj.(type) {
	case *rbacv1.Role:
		if s.may(req.ctx, u, "escalate", "roles", namespace, urlName) {
			return nil
		}
		rules = o.Rules
	case *rbacv1.ClusterRole:
		if s.may(req.ctx, u, "escalate", "clusterroles", "", urlName) {
			return nil
		}
		rules = o.Rules
		old, _ := cur.(*rbacv1.ClusterRole)
		aggregates = o.AggregationRule != nil || old != nil && old.AggregationRule != nil
	case *rbacv1.RoleBinding:
		r, err := s.boundRules(req.ctx, u, o.RoleRef, namespace)
		if err != nil || r == nil {
			return err
		}
		rules = r
	case *rbacv1.ClusterRoleBinding:
		r, err := s.boundRules(req.ctx, u, o.RoleRef, "")
		if err != nil || r == nil {
			return err
		}
		rules = r
	default:
		return nil
	}
	held, _, err := s.Authorizer().RulesFor(req.ctx, u, namespace)
	if err != nil {
		s.log.Debug("resolving rules for escalation check", "user", u.Name, "err", err)
	}
	if ok, missing := auth.Covers(held, rules); !ok {
		var b strings.Builder
		for _, r := range missing {
			fmt.Fprintf(&b, "\n%s", ruleString(r))
		}
		return apierrors.NewForbidden(req.gr, m.GetName(), fmt.Errorf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:%s", u.Name, u.Groups, b.String()))
	}
	// An aggregationRule gathers whatever roles match its selectors, so
	// setting, changing or keeping one takes every permission.
	if ok, _ := auth.Covers(held, fullAuthority); aggregates && !ok {
		return apierrors.NewForbidden(req.gr, m.GetName(), errors.New("must have cluster-admin privileges to use the aggregationRule"))
	}
	return nil
}

// boundRules returns the rules a binding to ref grants, or nil when the
// user may bind ref anyway.
func (s *Server) boundRules(ctx context.Context, u *auth.User, ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	src := storeRBAC{s}
	switch ref.Kind {
	case "ClusterRole":
		if s.may(ctx, u, "bind", "clusterroles", "", ref.Name) || (namespace != "" && s.may(ctx, u, "bind", "clusterroles", namespace, ref.Name)) {
			return nil, nil
		}
		// A role that is not there is its lookup's error, 404, as
		// Kubernetes answers.
		obj, err := src.fresh(ctx, registry.ClusterRoles, "", ref.Name)
		if err != nil {
			return nil, err
		}
		return obj.(*rbacv1.ClusterRole).Rules, nil
	case "Role":
		if s.may(ctx, u, "bind", "roles", namespace, ref.Name) {
			return nil, nil
		}
		obj, err := src.fresh(ctx, registry.Roles, namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		return obj.(*rbacv1.Role).Rules, nil
	}
	return nil, nil
}

func (s *Server) may(ctx context.Context, u *auth.User, verb, resource, namespace, name string) bool {
	ok, _ := s.authorize(ctx, auth.Attributes{User: u, Verb: verb, ResourceRequest: true, APIGroup: rbacv1.GroupName, APIVersion: "v1", Resource: resource, Namespace: namespace, Name: name})
	return ok
}

// ruleString prints a rule as Kubernetes' escalation errors do.
func ruleString(r rbacv1.PolicyRule) string {
	var parts []string
	if len(r.APIGroups) > 0 {
		parts = append(parts, fmt.Sprintf("APIGroups:%q", r.APIGroups))
	}
	if len(r.Resources) > 0 {
		parts = append(parts, fmt.Sprintf("Resources:%q", r.Resources))
	}
	if len(r.ResourceNames) > 0 {
		parts = append(parts, fmt.Sprintf("ResourceNames:%q", r.ResourceNames))
	}
	if len(r.NonResourceURLs) > 0 {
		parts = append(parts, fmt.Sprintf("NonResourceURLs:%q", r.NonResourceURLs))
	}
	parts = append(parts, fmt.Sprintf("Verbs:%q", r.Verbs))
	return "{" + strings.Join(parts, ", ") + "}"
}

// forbiddenAttrs is the 403 of a denied request, in kube-apiserver's words:
//
//	leases.coordination.k8s.io "x" is forbidden: User "alice" cannot update
//	resource "leases" in API group "coordination.k8s.io" in the namespace
//	"team-a"
//
// with the authorizer's reason after a colon when it gave one.
func forbiddenAttrs(a auth.Attributes, reason string) error {
	name := ""
	if a.User != nil {
		name = a.User.Name
	}
	var msg string
	switch {
	case !a.ResourceRequest:
		msg = fmt.Sprintf("User %q cannot %s path %q", name, a.Verb, a.Path)
	default:
		resource := a.Resource
		if a.Subresource != "" {
			resource += "/" + a.Subresource
		}
		if a.Namespace != "" {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", name, a.Verb, resource, a.APIGroup, a.Namespace)
		} else {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", name, a.Verb, resource, a.APIGroup)
		}
	}
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}, a.Name, errors.New(msg))
}
