package auth

import (
	"context"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Attributes describe a request for authorization, as Kubernetes'
// authorizer.Attributes: a resource request (verb, API group, resource,
// subresource, namespace, name) or a non-resource one (verb, path).
type Attributes struct {
	User *User
	// Verb is a Kubernetes verb: get list watch create update patch delete
	// deletecollection, or impersonate, bind, escalate; for non-resource
	// requests the lower-case HTTP method (get, post, put, ...).
	Verb string

	ResourceRequest bool
	APIGroup        string
	APIVersion      string
	Resource        string
	Subresource     string
	Namespace       string
	Name            string

	// Path is the URL path of a non-resource request.
	Path string
}

// Decision is an authorizer's answer.
type Decision int

const (
	// DecisionNoOpinion lets the next authorizer decide; if none allows,
	// the request is denied.
	DecisionNoOpinion Decision = iota
	// DecisionAllow allows the request.
	DecisionAllow
	// DecisionDeny denies it without asking further authorizers.
	DecisionDeny
)

func (d Decision) String() string {
	switch d {
	case DecisionAllow:
		return "allow"
	case DecisionDeny:
		return "deny"
	}
	return "no opinion"
}

// Authorizer decides whether a request is allowed. reason says why (for
// the audit log and, on denial, the error message).
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (d Decision, reason string, err error)
}

// RuleResolver lists the rules that apply to a user in a namespace (""
// for the cluster scope), for SelfSubjectRulesReview. incomplete says some
// permissions could not be listed.
type RuleResolver interface {
	RulesFor(ctx context.Context, u *User, namespace string) (rules []rbacv1.PolicyRule, incomplete bool, err error)
}

// Chain asks each authorizer in turn: the first Allow or Deny decides;
// when all have no opinion the request is denied. The reasons of the
// authorizers without opinion are joined, as Kubernetes' union authorizer
// does.
type Chain []Authorizer

var _ Authorizer = Chain(nil)

// Authorize implements Authorizer.
func (c Chain) Authorize(ctx context.Context, a Attributes) (Decision, string, error) {
	var reasons []string
	var firstErr error
	for _, z := range c {
		d, reason, err := z.Authorize(ctx, a)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		switch d {
		case DecisionAllow, DecisionDeny:
			return d, reason, nil
		}
		if reason != "" {
			reasons = append(reasons, reason)
		}
	}
	return DecisionNoOpinion, strings.Join(reasons, "\n"), firstErr
}

// RulesFor implements RuleResolver: the union of the rules of every
// authorizer that resolves rules; incomplete when any does not.
func (c Chain) RulesFor(ctx context.Context, u *User, namespace string) ([]rbacv1.PolicyRule, bool, error) {
	var all []rbacv1.PolicyRule
	incomplete := false
	var firstErr error
	for _, z := range c {
		r, ok := z.(RuleResolver)
		if !ok {
			incomplete = true
			continue
		}
		rules, inc, err := r.RulesFor(ctx, u, namespace)
		all = append(all, rules...)
		incomplete = incomplete || inc
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return all, incomplete, firstErr
}

// PrivilegedGroups allows every request of a member of one of its groups,
// as kube-apiserver always allows system:masters.
type PrivilegedGroups []string

var _ Authorizer = PrivilegedGroups(nil)

// Authorize implements Authorizer.
func (p PrivilegedGroups) Authorize(_ context.Context, a Attributes) (Decision, string, error) {
	for _, g := range p {
		if a.User.InGroup(g) {
			return DecisionAllow, "", nil
		}
	}
	return DecisionNoOpinion, "", nil
}

// RulesFor implements RuleResolver: none, and complete. As in
// kube-apiserver, a member's rules review lists what the other authorizers
// (RBAC's cluster-admin binding of system:masters) give it, and not
// everything a second time; the group is allowed everything regardless.
func (p PrivilegedGroups) RulesFor(context.Context, *User, string) ([]rbacv1.PolicyRule, bool, error) {
	return nil, false, nil
}

// AlwaysAllow allows everything (--authorization-mode=AlwaysAllow).
type AlwaysAllow struct{}

// Authorize implements Authorizer.
func (AlwaysAllow) Authorize(context.Context, Attributes) (Decision, string, error) {
	return DecisionAllow, "", nil
}

// RulesFor implements RuleResolver: everything.
func (AlwaysAllow) RulesFor(context.Context, *User, string) ([]rbacv1.PolicyRule, bool, error) {
	return []rbacv1.PolicyRule{
		{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
		{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
	}, false, nil
}

// AlwaysDeny denies everything (--authorization-mode=AlwaysDeny).
type AlwaysDeny struct{}

// Authorize implements Authorizer.
func (AlwaysDeny) Authorize(context.Context, Attributes) (Decision, string, error) {
	return DecisionNoOpinion, "Everything is forbidden.", nil
}

// RulesFor implements RuleResolver.
func (AlwaysDeny) RulesFor(context.Context, *User, string) ([]rbacv1.PolicyRule, bool, error) {
	return nil, false, nil
}
