package apiserver

import (
	"net/http"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/leasehold/leasehold/internal/auth"
)

// review answers create on a virtual resource: the access reviews kubectl
// auth can-i asks (SelfSubjectAccessReview; SubjectAccessReview and
// LocalSubjectAccessReview for someone else), the rules review of can-i
// --list (SelfSubjectRulesReview), the self review of kubectl auth
// whoami, and the token review of a service that checks its callers'
// tokens with the server (TokenReview). Nothing is stored; the answer is the request with its status
// filled in.
func (s *Server) review(req *request) error {
	if req.info.name != "" {
		return methodNotAllowed()
	}
	if _, err := s.negotiate(req.r, req.info.query); err != nil {
		return err
	}
	body, err := s.readBody(req)
	if err != nil {
		return err
	}
	obj, err := s.decodeObject(req, body, "")
	if err != nil {
		return err
	}
	u := auth.UserFrom(req.ctx)
	var out runtime.Object
	switch o := obj.(type) {
	case *authorizationv1.SelfSubjectAccessReview:
		o.Status = s.accessReview(req, u, o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
		out = o
	case *authorizationv1.SubjectAccessReview:
		if o.Spec.User == "" && len(o.Spec.Groups) == 0 {
			return badRequest("at least one of user or group must be specified")
		}
		o.Status = s.accessReview(req, subjectUser(o.Spec), o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
		out = o
	case *authorizationv1.LocalSubjectAccessReview:
		ra := o.Spec.ResourceAttributes
		switch {
		case ra == nil:
			return badRequest("resourceAttributes are required for a LocalSubjectAccessReview")
		case ra.Namespace == "":
			ra.Namespace = req.info.namespace
		case ra.Namespace != req.info.namespace:
			return apierrors.NewBadRequest("spec.resourceAttributes.namespace must match namespace: " + req.info.namespace)
		}
		if req.info.namespace == "" {
			return notFoundPath(req.r)
		}
		o.Status = s.accessReview(req, subjectUser(o.Spec), ra, nil)
		o.Namespace = req.info.namespace
		out = o
	case *authorizationv1.SelfSubjectRulesReview:
		o.Status = s.rulesReview(req, u, o.Spec.Namespace)
		out = o
	case *authenticationv1.SelfSubjectReview:
		o.Status.UserInfo = userInfo(u)
		out = o
	case *authenticationv1.TokenReview:
		if o.Spec.Token == "" {
			return badRequest("token is required for TokenReview in authentication")
		}
		o.Status = s.tokenReview(req, o.Spec)
		out = o
	default:
		return methodNotAllowed()
	}
	return s.respond(req, http.StatusCreated, out)
}

// tokenReview authenticates a token as it would authenticate a request
// that carried nothing else, as kube-apiserver answers a TokenReview: with
// every authenticator, client certificates and an authenticating proxy's
// headers never matching, and anonymous never either. leasehold's tokens are
// bound to no audience, so those of the review count only where they meet
// the server's own (kube-apiserver's audience-agnostic authenticators judge
// them the same way); a review that names none is answered for the
// server's.
func (s *Server) tokenReview(req *request, spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
	auds := s.cfg.APIAudiences
	if len(spec.Audiences) > 0 {
		auds = nil
		for _, a := range spec.Audiences {
			if slices.Contains(s.cfg.APIAudiences, a) && !slices.Contains(auds, a) {
				auds = append(auds, a)
			}
		}
		if len(auds) == 0 {
			return authenticationv1.TokenReviewStatus{}
		}
	}
	r, err := http.NewRequestWithContext(req.ctx, http.MethodPost, "/", nil)
	if err != nil {
		return authenticationv1.TokenReviewStatus{Error: err.Error()}
	}
	r.Header.Set("Authorization", "Bearer "+spec.Token)
	u, ok, err := s.cfg.Authenticator.Authenticate(r)
	var st authenticationv1.TokenReviewStatus
	if err != nil {
		st.Error = err.Error()
	}
	if ok && u != nil {
		st.Authenticated = true
		st.User = userInfo(u)
		st.Audiences = auds
	}
	return st
}

func subjectUser(spec authorizationv1.SubjectAccessReviewSpec) *auth.User {
	u := &auth.User{Name: spec.User, UID: spec.UID, Groups: spec.Groups}
	if len(spec.Extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range spec.Extra {
			u.Extra[k] = v
		}
	}
	return u
}

// accessReview asks the authorizer the question of a review.
func (s *Server) accessReview(req *request, u *auth.User, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
	a := auth.Attributes{User: u}
	switch {
	case ra != nil:
		a.ResourceRequest = true
		a.Verb, a.APIGroup, a.APIVersion = ra.Verb, ra.Group, ra.Version
		a.Resource, a.Subresource, a.Namespace, a.Name = ra.Resource, ra.Subresource, ra.Namespace, ra.Name
	case nra != nil:
		a.Verb, a.Path = nra.Verb, nra.Path
	default:
		return authorizationv1.SubjectAccessReviewStatus{EvaluationError: "exactly one of nonResourceAttributes or resourceAttributes must be specified"}
	}
	d, reason, err := s.Authorizer().Authorize(req.ctx, a)
	st := authorizationv1.SubjectAccessReviewStatus{Allowed: d == auth.DecisionAllow, Denied: d == auth.DecisionDeny, Reason: reason}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	return st
}

// rulesReview lists what u may do in namespace, as the authorizers can
// tell it.
func (s *Server) rulesReview(req *request, u *auth.User, namespace string) authorizationv1.SubjectRulesReviewStatus {
	rules, incomplete, err := s.Authorizer().RulesFor(req.ctx, u, namespace)
	st := authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	st.ResourceRules = []authorizationv1.ResourceRule{}
	st.NonResourceRules = []authorizationv1.NonResourceRule{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			st.NonResourceRules = append(st.NonResourceRules, authorizationv1.NonResourceRule{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
			continue
		}
		st.ResourceRules = append(st.ResourceRules, authorizationv1.ResourceRule{
			Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames,
		})
	}
	return st
}
