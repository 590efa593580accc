package registry

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The access reviews of authorization.k8s.io/v1, and the token and self
// reviews of authentication.k8s.io/v1: virtual resources that only answer
// create (kubectl auth can-i, can-i --list and whoami; a service checking
// its callers' tokens). Nothing is stored.
var (
	SelfSubjectAccessReviews = &Resource{
		GroupVersion: authorizationv1.SchemeGroupVersion, Name: "selfsubjectaccessreviews", SingularName: "selfsubjectaccessreview",
		Kind: "SelfSubjectAccessReview", Virtual: true, Verbs: []string{"create"},
		New: func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
	}
	SelfSubjectRulesReviews = &Resource{
		GroupVersion: authorizationv1.SchemeGroupVersion, Name: "selfsubjectrulesreviews", SingularName: "selfsubjectrulesreview",
		Kind: "SelfSubjectRulesReview", Virtual: true, Verbs: []string{"create"},
		New: func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
	}
	SubjectAccessReviews = &Resource{
		GroupVersion: authorizationv1.SchemeGroupVersion, Name: "subjectaccessreviews", SingularName: "subjectaccessreview",
		Kind: "SubjectAccessReview", Virtual: true, Verbs: []string{"create"},
		New: func() runtime.Object { return &authorizationv1.SubjectAccessReview{} },
	}
	LocalSubjectAccessReviews = &Resource{
		GroupVersion: authorizationv1.SchemeGroupVersion, Name: "localsubjectaccessreviews", SingularName: "localsubjectaccessreview",
		Kind: "LocalSubjectAccessReview", Namespaced: true, Virtual: true, Verbs: []string{"create"},
		New: func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} },
	}
	TokenReviews = &Resource{
		GroupVersion: authenticationv1.SchemeGroupVersion, Name: "tokenreviews", SingularName: "tokenreview",
		Kind: "TokenReview", Virtual: true, Verbs: []string{"create"},
		New: func() runtime.Object { return &authenticationv1.TokenReview{} },
	}
	SelfSubjectReviews = &Resource{
		GroupVersion: authenticationv1.SchemeGroupVersion, Name: "selfsubjectreviews", SingularName: "selfsubjectreview",
		Kind: "SelfSubjectReview", Virtual: true, Verbs: []string{"create"},
		New: func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
	}
)

func init() {
	register(SelfSubjectReviews)
	register(TokenReviews)
	register(LocalSubjectAccessReviews)
	register(SelfSubjectAccessReviews)
	register(SelfSubjectRulesReviews)
	register(SubjectAccessReviews)
}
