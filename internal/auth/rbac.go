package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// RBACSource is where the RBAC authorizer reads roles and bindings (the API
// server's watch cache). Returned objects are shared and must not be
// modified. A missing role is an error that wraps a NotFound API error.
type RBACSource interface {
	GetRole(namespace, name string) (*rbacv1.Role, error)
	GetClusterRole(name string) (*rbacv1.ClusterRole, error)
	ListRoleBindings(ctx context.Context, namespace string) ([]*rbacv1.RoleBinding, error)
	ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error)
}

// RBAC is Kubernetes' RBAC authorizer: a request is allowed when some rule
// of a role bound to the user allows it. ClusterRoleBindings grant their
// ClusterRole everywhere; RoleBindings grant their Role or ClusterRole in
// their own namespace only. RBAC never denies outright: what no rule allows
// has no opinion, so the next authorizer (or the final denial) decides.
type RBAC struct {
	src RBACSource
}

var (
	_ Authorizer   = (*RBAC)(nil)
	_ RuleResolver = (*RBAC)(nil)
)

// NewRBAC returns an RBAC authorizer over src.
func NewRBAC(src RBACSource) *RBAC { return &RBAC{src: src} }

// visit calls fn with each rule that applies to u in namespace and a
// description of where it came from, until fn returns false. Errors (a
// binding naming a missing role) are collected and the walk goes on.
func (z *RBAC) visit(ctx context.Context, u *User, namespace string, fn func(source string, rule *rbacv1.PolicyRule) bool) []error {
	var errs []error
	crbs, err := z.src.ListClusterRoleBindings(ctx)
	if err != nil {
		return []error{err}
	}
	for _, b := range crbs {
		subject, ok := appliesTo(u, b.Subjects, "")
		if !ok {
			continue
		}
		rules, err := z.roleRules(b.RoleRef, "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		src := fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", b.Name, b.RoleRef.Kind, b.RoleRef.Name, subject)
		for i := range rules {
			if !fn(src, &rules[i]) {
				return errs
			}
		}
	}
	if namespace == "" {
		return errs
	}
	rbs, err := z.src.ListRoleBindings(ctx, namespace)
	if err != nil {
		return append(errs, err)
	}
	for _, b := range rbs {
		subject, ok := appliesTo(u, b.Subjects, namespace)
		if !ok {
			continue
		}
		rules, err := z.roleRules(b.RoleRef, namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		src := fmt.Sprintf("RoleBinding %q of %s %q to %s", b.Name+"/"+namespace, b.RoleRef.Kind, b.RoleRef.Name, subject)
		for i := range rules {
			if !fn(src, &rules[i]) {
				return errs
			}
		}
	}
	return errs
}

func (z *RBAC) roleRules(ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "ClusterRole":
		r, err := z.src.GetClusterRole(ref.Name)
		if err != nil {
			return nil, err
		}
		return r.Rules, nil
	case "Role":
		if namespace == "" {
			return nil, fmt.Errorf("a ClusterRoleBinding may not refer to Role %q", ref.Name)
		}
		r, err := z.src.GetRole(namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		return r.Rules, nil
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}

// appliesTo returns the first subject that names u, described as
// Kubernetes' RBAC reasons do ("User \"alice\"").
func appliesTo(u *User, subjects []rbacv1.Subject, namespace string) (string, bool) {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if u.Name == s.Name {
				return fmt.Sprintf("User %q", s.Name), true
			}
		case rbacv1.GroupKind:
			if u.InGroup(s.Name) {
				return fmt.Sprintf("Group %q", s.Name), true
			}
		case rbacv1.ServiceAccountKind:
			ns := namespace
			if s.Namespace != "" {
				ns = s.Namespace
			}
			if ns != "" && u.Name == ServiceAccountPrefix+ns+":"+s.Name {
				return fmt.Sprintf("ServiceAccount %q", s.Name+"/"+ns), true
			}
		}
	}
	return "", false
}

// Authorize implements Authorizer.
func (z *RBAC) Authorize(ctx context.Context, a Attributes) (Decision, string, error) {
	if a.User == nil {
		return DecisionNoOpinion, "", nil
	}
	var allowedBy string
	errs := z.visit(ctx, a.User, a.Namespace, func(src string, rule *rbacv1.PolicyRule) bool {
		if RuleAllows(a, rule) {
			allowedBy = src
			return false
		}
		return true
	})
	if allowedBy != "" {
		return DecisionAllow, "RBAC: allowed by " + allowedBy, nil
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		if len(msgs) == 1 {
			return DecisionNoOpinion, "RBAC: " + msgs[0], nil
		}
		return DecisionNoOpinion, "RBAC: [" + strings.Join(msgs, ", ") + "]", nil
	}
	return DecisionNoOpinion, "", nil
}

// RulesFor implements RuleResolver.
func (z *RBAC) RulesFor(ctx context.Context, u *User, namespace string) ([]rbacv1.PolicyRule, bool, error) {
	var rules []rbacv1.PolicyRule
	errs := z.visit(ctx, u, namespace, func(_ string, rule *rbacv1.PolicyRule) bool {
		rules = append(rules, *rule)
		return true
	})
	return rules, false, errors.Join(errs...)
}

// RuleAllows reports whether rule allows the request a, by Kubernetes'
// matching: "*" matches any verb, group, resource or URL; a resource may be
// "resource/subresource", "*/subresource" or just "resource" (which does not
// cover its subresources); resourceNames restrict to named objects (and so
// never match list or create of a collection); a non-resource URL ending in
// "*" matches by prefix.
func RuleAllows(a Attributes, rule *rbacv1.PolicyRule) bool {
	if !matchesVerb(rule.Verbs, a.Verb) {
		return false
	}
	if !a.ResourceRequest {
		return matchesURL(rule.NonResourceURLs, a.Path)
	}
	resource := a.Resource
	if a.Subresource != "" {
		resource += "/" + a.Subresource
	}
	return matchesGroup(rule.APIGroups, a.APIGroup) &&
		matchesResource(rule.Resources, resource, a.Subresource) &&
		matchesName(rule.ResourceNames, a.Name)
}

func matchesVerb(verbs []string, v string) bool {
	for _, x := range verbs {
		if x == rbacv1.VerbAll || x == v {
			return true
		}
	}
	return false
}

func matchesGroup(groups []string, g string) bool {
	for _, x := range groups {
		if x == rbacv1.APIGroupAll || x == g {
			return true
		}
	}
	return false
}

func matchesResource(resources []string, combined, subresource string) bool {
	for _, x := range resources {
		switch {
		case x == rbacv1.ResourceAll, x == combined:
			return true
		case subresource != "" && x == "*/"+subresource:
			return true
		}
	}
	return false
}

func matchesName(names []string, name string) bool {
	if len(names) == 0 {
		return true
	}
	for _, x := range names {
		if x == name {
			return true
		}
	}
	return false
}

func matchesURL(urls []string, path string) bool {
	for _, x := range urls {
		switch {
		case x == rbacv1.NonResourceAll, x == path:
			return true
		case strings.HasSuffix(x, "*") && strings.HasPrefix(path, strings.TrimSuffix(x, "*")):
			return true
		}
	}
	return false
}

// Covers reports whether the rules owner hold grant everything requested
// grants, as Kubernetes' escalation check decides: every verb, group,
// resource and name (or URL) of every requested rule must be allowed by
// some owner rule, a "*" requested being matched only by a "*" held. It
// returns the requested rules that are not covered.
func Covers(owner, requested []rbacv1.PolicyRule) (bool, []rbacv1.PolicyRule) {
	var missing []rbacv1.PolicyRule
	for _, req := range requested {
		for _, atom := range atoms(req) {
			if !atomCovered(owner, atom) {
				missing = append(missing, atom)
			}
		}
	}
	return len(missing) == 0, missing
}

// atoms breaks a rule into rules of one verb and one group, resource and
// name (or one URL).
func atoms(r rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, v := range r.Verbs {
		for _, u := range r.NonResourceURLs {
			out = append(out, rbacv1.PolicyRule{Verbs: []string{v}, NonResourceURLs: []string{u}})
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if len(r.ResourceNames) == 0 {
					out = append(out, rbacv1.PolicyRule{Verbs: []string{v}, APIGroups: []string{g}, Resources: []string{res}})
				}
				for _, n := range r.ResourceNames {
					out = append(out, rbacv1.PolicyRule{Verbs: []string{v}, APIGroups: []string{g}, Resources: []string{res}, ResourceNames: []string{n}})
				}
			}
		}
	}
	return out
}

func atomCovered(owner []rbacv1.PolicyRule, a rbacv1.PolicyRule) bool {
	for i := range owner {
		o := &owner[i]
		if !matchesVerb(o.Verbs, a.Verbs[0]) {
			continue
		}
		if len(a.NonResourceURLs) > 0 {
			if matchesURL(o.NonResourceURLs, a.NonResourceURLs[0]) {
				return true
			}
			continue
		}
		res := a.Resources[0]
		_, sub, _ := strings.Cut(res, "/")
		if !matchesGroup(o.APIGroups, a.APIGroups[0]) || !matchesResource(o.Resources, res, sub) {
			continue
		}
		if len(o.ResourceNames) == 0 {
			return true
		}
		if len(a.ResourceNames) == 1 && matchesName(o.ResourceNames, a.ResourceNames[0]) {
			return true
		}
	}
	return false
}

// IsNotFound reports whether err says a role is missing.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

// AggregatedRules returns the rules an aggregated ClusterRole gathers from
// roles: those of every other ClusterRole a selector matches, without
// repeats, in the order of the roles' names.
func AggregatedRules(target *rbacv1.ClusterRole, roles []*rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	if target.AggregationRule == nil {
		return target.Rules, nil
	}
	// In name order, so that the result does not depend on the order
	// roles come in (which would make updates chase each other).
	roles = slices.SortedFunc(slices.Values(roles), func(a, b *rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
	var rules []rbacv1.PolicyRule
	seen := map[string]bool{}
	for _, ls := range target.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			return nil, err
		}
		for _, r := range roles {
			if r.Name == target.Name || !sel.Matches(labels.Set(r.Labels)) {
				continue
			}
			for _, rule := range r.Rules {
				k := fmt.Sprintf("%q", []any{rule.Verbs, rule.APIGroups, rule.Resources, rule.ResourceNames, rule.NonResourceURLs})
				if !seen[k] {
					seen[k] = true
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules, nil
}
