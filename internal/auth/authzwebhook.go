package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
)

// AuthorizationWebhookConfig is what kube-apiserver's
// --authorization-webhook-* flags say.
type AuthorizationWebhookConfig struct {
	// ConfigFile is a kubeconfig: its cluster is the remote service, its
	// user the server's credentials there.
	ConfigFile string
	// AllowedTTL is how long an answer that allowed is kept (default 5
	// min); DeniedTTL one that did not (default 30 s).
	AllowedTTL, DeniedTTL time.Duration
	// Clock times the cache; default real.
	Clock clock.Clock
}

// AuthorizationWebhook asks a remote service whether a request is allowed,
// with a SubjectAccessReview (authorization.k8s.io/v1), as kube-apiserver's
// Webhook authorization mode does. The service allows, denies (no
// authorizer after it is asked), or has no opinion; a call that fails is
// no opinion, with its error. Answers are cached by the review they
// answer.
type AuthorizationWebhook struct {
	*WebhookClient
	allowedTTL, deniedTTL time.Duration
	cache                 *cache.LRUExpireCache
}

var _ Authorizer = (*AuthorizationWebhook)(nil)

// authzAnswer is a cached answer.
type authzAnswer struct {
	d      Decision
	reason string
}

// NewAuthorizationWebhook reads cfg's kubeconfig and returns the
// authorizer.
func NewAuthorizationWebhook(cfg AuthorizationWebhookConfig) (*AuthorizationWebhook, error) {
	if cfg.AllowedTTL == 0 {
		cfg.AllowedTTL = 5 * time.Minute
	}
	if cfg.DeniedTTL == 0 {
		cfg.DeniedTTL = 30 * time.Second
	}
	if cfg.AllowedTTL < 0 || cfg.DeniedTTL < 0 {
		return nil, fmt.Errorf("cache TTLs %v and %v must not be negative", cfg.AllowedTTL, cfg.DeniedTTL)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	c, err := NewWebhookClient(cfg.ConfigFile)
	if err != nil {
		return nil, err
	}
	return &AuthorizationWebhook{WebhookClient: c, allowedTTL: cfg.AllowedTTL, deniedTTL: cfg.DeniedTTL, cache: cache.NewLRUExpireCacheWithClock(webhookCacheSize, cfg.Clock)}, nil
}

// subjectAccessReviewSpec is the review of a's request, as kube-apiserver
// sends it to a webhook.
func subjectAccessReviewSpec(a Attributes) authorizationv1.SubjectAccessReviewSpec {
	var spec authorizationv1.SubjectAccessReviewSpec
	if a.User != nil {
		spec.User, spec.UID, spec.Groups = a.User.Name, a.User.UID, a.User.Groups
		if len(a.User.Extra) > 0 {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(a.User.Extra))
			for k, v := range a.User.Extra {
				spec.Extra[k] = v
			}
		}
	}
	if a.ResourceRequest {
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: a.Namespace, Verb: a.Verb, Group: a.APIGroup, Version: a.APIVersion,
			Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		}
	} else {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.Path, Verb: a.Verb}
	}
	return spec
}

// Authorize implements Authorizer.
func (w *AuthorizationWebhook) Authorize(ctx context.Context, a Attributes) (Decision, string, error) {
	review := &authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: authorizationv1.SchemeGroupVersion.String(), Kind: "SubjectAccessReview"},
		Spec:     subjectAccessReviewSpec(a),
	}
	spec, err := json.Marshal(&review.Spec)
	if err != nil {
		return DecisionNoOpinion, "", err
	}
	key := sha256.Sum256(spec)
	if v, ok := w.cache.Get(key); ok {
		ans := v.(authzAnswer)
		return ans.d, ans.reason, nil
	}
	if err := w.review(ctx, review); err != nil {
		return DecisionNoOpinion, "", fmt.Errorf("authorization webhook: %w", err)
	}
	st := review.Status
	ans := authzAnswer{d: DecisionNoOpinion, reason: st.Reason}
	switch {
	case st.Allowed && st.Denied:
		return DecisionDeny, st.Reason, fmt.Errorf("authorization webhook: allowed and denied at once")
	case st.Denied:
		ans.d = DecisionDeny
	case st.Allowed:
		ans.d = DecisionAllow
	}
	ttl := w.deniedTTL
	if ans.d == DecisionAllow {
		ttl = w.allowedTTL
	}
	w.cache.Add(key, ans, ttl)
	return ans.d, ans.reason, nil
}
