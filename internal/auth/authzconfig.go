package auth

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/rest"
)

// The authorizer types an AuthorizationConfiguration may name, as
// kube-apiserver's --authorization-mode and --authorization-config name
// them; ABAC is not among leasehold's.
const (
	AuthorizerRBAC        = "RBAC"
	AuthorizerNode        = "Node"
	AuthorizerWebhook     = string(apiserver.TypeWebhook)
	AuthorizerAlwaysAllow = "AlwaysAllow"
	AuthorizerAlwaysDeny  = "AlwaysDeny"
)

// authorizerTypes are the types leasehold knows; only Webhook may repeat.
var authorizerTypes = sets.New(AuthorizerRBAC, AuthorizerNode, AuthorizerWebhook, AuthorizerAlwaysAllow, AuthorizerAlwaysDeny)

// authzCompiler is the CEL environment of webhooks' matchConditions.
var authzCompiler = sync.OnceValue(authorizationcel.NewDefaultCompiler)

// ValidateAuthorizationConfig validates cfg as kube-apiserver does (CEL
// matchConditions compiled), with the types leasehold knows. A webhook
// must reach its service by a kubeconfig file: leasehold runs in no
// cluster.
func ValidateAuthorizationConfig(cfg *apiserver.AuthorizationConfiguration) error {
	errs := validation.ValidateAuthorizationConfiguration(authzCompiler(), nil, cfg, authorizerTypes, sets.New(AuthorizerWebhook))
	if err := errs.ToAggregate(); err != nil {
		return err
	}
	for i, a := range cfg.Authorizers {
		if a.Webhook != nil && a.Webhook.ConnectionInfo.Type != apiserver.AuthorizationWebhookConnectionInfoTypeKubeConfigFile {
			return fmt.Errorf("authorizers[%d].connectionInfo.type: %q: leasehold runs in no cluster; use KubeConfigFile", i, a.Webhook.ConnectionInfo.Type)
		}
	}
	return nil
}

// ParseAuthorizationConfig decodes data, an AuthorizationConfiguration in
// YAML or JSON as kube-apiserver's --authorization-config holds it
// (apiserver.config.k8s.io/v1, v1beta1), strictly and with its defaults,
// and validates it (ValidateAuthorizationConfig).
func ParseAuthorizationConfig(data []byte) (*apiserver.AuthorizationConfiguration, error) {
	cfg, err := decodeConfig[*apiserver.AuthorizationConfiguration](data, "AuthorizationConfiguration")
	if err != nil {
		return nil, err
	}
	if err := ValidateAuthorizationConfig(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// AuthorizationWebhookFlags is what kube-apiserver's
// --authorization-webhook-* flags say.
type AuthorizationWebhookFlags struct {
	// ConfigFile is a kubeconfig: its cluster is the remote service, its
	// user the server's credentials there.
	ConfigFile string
	// AllowedTTL is how long an answer that allowed is kept; DeniedTTL one
	// that did not.
	AllowedTTL, DeniedTTL time.Duration
	// Version is the SubjectAccessReview's, v1 or v1beta1; default v1.
	Version string
}

// Webhook is the webhook these flags make, as kube-apiserver makes it of
// its own flags: failing calls have no opinion, and reviews are
// authorization.k8s.io/v1 unless Version says v1beta1 (kube-apiserver's
// flags default to v1beta1).
// A TTL of 0 caches no such answer.
func (f AuthorizationWebhookFlags) Webhook() *apiserver.WebhookConfiguration {
	// The configuration's TTLs must be positive even when unused.
	ttl := func(d time.Duration) metav1.Duration {
		if d == 0 {
			d = time.Second
		}
		return metav1.Duration{Duration: d}
	}
	version := f.Version
	if version == "" {
		version = "v1"
	}
	return &apiserver.WebhookConfiguration{
		AuthorizedTTL:                            ttl(f.AllowedTTL),
		CacheAuthorizedRequests:                  f.AllowedTTL > 0,
		UnauthorizedTTL:                          ttl(f.DeniedTTL),
		CacheUnauthorizedRequests:                f.DeniedTTL > 0,
		Timeout:                                  metav1.Duration{Duration: 30 * time.Second},
		SubjectAccessReviewVersion:               version,
		MatchConditionSubjectAccessReviewVersion: "v1",
		FailurePolicy:                            apiserver.FailurePolicyNoOpinion,
		ConnectionInfo: apiserver.WebhookConnectionInfo{
			Type:           apiserver.AuthorizationWebhookConnectionInfoTypeKubeConfigFile,
			KubeConfigFile: &f.ConfigFile,
		},
	}
}

// AuthorizationWebhook asks a remote service whether a request is allowed
// with a SubjectAccessReview, through Kubernetes' own webhook authorizer:
// its matchConditions (CEL) choose the requests it is asked about, answers
// are cached by the review, and a call that fails is retried and then has
// no opinion or denies, as its failurePolicy says.
type AuthorizationWebhook struct {
	name string
	w    *webhook.WebhookAuthorizer
}

var _ Authorizer = (*AuthorizationWebhook)(nil)

// NewAuthorizationWebhook makes the webhook authorizer name of cfg, which
// ValidateAuthorizationConfig has checked; metrics may be nil.
func NewAuthorizationWebhook(name string, cfg *apiserver.WebhookConfiguration, metrics webhookmetrics.AuthorizerMetrics) (*AuthorizationWebhook, error) {
	path := ""
	if cfg.ConnectionInfo.KubeConfigFile != nil {
		path = *cfg.ConnectionInfo.KubeConfigFile
	}
	rc, err := webhookClientConfig(path, cfg.Timeout.Duration)
	if err != nil {
		return nil, err
	}
	decisionOnError := authorizer.DecisionNoOpinion
	if cfg.FailurePolicy == apiserver.FailurePolicyDeny {
		decisionOnError = authorizer.DecisionDeny
	}
	allowedTTL, deniedTTL := cfg.AuthorizedTTL.Duration, cfg.UnauthorizedTTL.Duration
	if !cfg.CacheAuthorizedRequests {
		allowedTTL = 0
	}
	if !cfg.CacheUnauthorizedRequests {
		deniedTTL = 0
	}
	if metrics == nil {
		metrics = webhookmetrics.NoopAuthorizerMetrics{}
	}
	w, err := webhook.New(rc, cfg.SubjectAccessReviewVersion, allowedTTL, deniedTTL, webhookBackoff, decisionOnError, cfg.MatchConditions, name, metrics, authzCompiler())
	if err != nil {
		return nil, err
	}
	return &AuthorizationWebhook{name: name, w: w}, nil
}

// webhookClientConfig reads a webhook's kubeconfig as kube-apiserver
// does (k8s.io/apiserver's LoadKubeconfig): without client-side rate
// limiting, which would hold calls beyond five a second, since how many
// requests are served is limited before they are authorized. Its server
// must be an https URL.
func webhookClientConfig(path string, timeout time.Duration) (*rest.Config, error) {
	rc, err := webhookutil.LoadKubeconfig(path, nil)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(rc.Host, "https://") {
		return nil, fmt.Errorf("%s: the webhook's server %q must be an https URL", path, rc.Host)
	}
	rc.Timeout = timeout
	return rc, nil
}

// CheckWebhooks reads the kubeconfig of each webhook of cfg, as
// NewAuthorizationWebhook does, so that a server refuses to start with
// one it cannot use.
func CheckWebhooks(cfg *apiserver.AuthorizationConfiguration) error {
	for _, a := range cfg.Authorizers {
		if a.Webhook == nil {
			continue
		}
		if _, err := NewAuthorizationWebhook(a.Name, a.Webhook, nil); err != nil {
			return fmt.Errorf("authorizer %s: %w", a.Name, err)
		}
	}
	return nil
}

// Authorize implements Authorizer.
func (a *AuthorizationWebhook) Authorize(ctx context.Context, attrs Attributes) (Decision, string, error) {
	rec := authorizer.AttributesRecord{
		Verb: attrs.Verb, ResourceRequest: attrs.ResourceRequest, Path: attrs.Path,
		Namespace: attrs.Namespace, APIGroup: attrs.APIGroup, APIVersion: attrs.APIVersion,
		Resource: attrs.Resource, Subresource: attrs.Subresource, Name: attrs.Name,
	}
	if u := attrs.User; u != nil {
		rec.User = &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
	}
	d, reason, err := a.w.Authorize(ctx, rec)
	if err != nil {
		err = fmt.Errorf("authorization webhook %s: %w", a.name, err)
	}
	switch d {
	case authorizer.DecisionAllow:
		return DecisionAllow, reason, err
	case authorizer.DecisionDeny:
		return DecisionDeny, reason, err
	}
	return DecisionNoOpinion, reason, err
}

// ErrNoWebhookConfig is returned for a Webhook mode without a webhook.
var ErrNoWebhookConfig = errors.New("authorization mode Webhook needs --authorization-webhook-config-file")

// AuthorizationConfigFromModes is the AuthorizationConfiguration
// kube-apiserver makes of --authorization-mode and the
// --authorization-webhook-* flags: each mode an authorizer, named as the
// mode in lower case.
func AuthorizationConfigFromModes(modes []string, wh AuthorizationWebhookFlags) (*apiserver.AuthorizationConfiguration, error) {
	cfg := &apiserver.AuthorizationConfiguration{}
	webhook := false
	if wh.ConfigFile != "" {
		// A path relative to the working directory, as kube-apiserver's
		// flag takes it; the configuration file's rule (absolute paths
		// only) is not the flag's.
		abs, err := filepath.Abs(wh.ConfigFile)
		if err != nil {
			return nil, err
		}
		wh.ConfigFile = abs
	}
	for _, m := range modes {
		a := apiserver.AuthorizerConfiguration{Type: apiserver.AuthorizerType(m), Name: strings.ToLower(m)}
		if m == AuthorizerWebhook {
			if wh.ConfigFile == "" {
				return nil, ErrNoWebhookConfig
			}
			a.Webhook, webhook = wh.Webhook(), true
		}
		cfg.Authorizers = append(cfg.Authorizers, a)
	}
	if wh.ConfigFile != "" && !webhook {
		return nil, errors.New("--authorization-webhook-config-file needs Webhook in --authorization-mode")
	}
	errs := validation.ValidateAuthorizationConfiguration(authzCompiler(), nil, cfg, authorizerTypes, nil)
	for _, e := range errs {
		switch {
		case strings.HasSuffix(e.Field, "].type") && e.Type == field.ErrorTypeDuplicate:
			return nil, fmt.Errorf("authorization mode %q given twice", e.BadValue)
		case strings.HasSuffix(e.Field, "].type") && e.Type == field.ErrorTypeNotSupported:
			return nil, fmt.Errorf("unknown authorization mode %q (want %s)", e.BadValue, strings.Join(sets.List(authorizerTypes), ", "))
		case strings.Contains(e.Field, ".connectionInfo.kubeConfigFile"):
			e.Field = "--authorization-webhook-config-file"
		case strings.Contains(e.Field, ".authorizedTTL"):
			e.Field = "--authorization-webhook-cache-authorized-ttl"
		case strings.Contains(e.Field, ".unauthorizedTTL"):
			e.Field = "--authorization-webhook-cache-unauthorized-ttl"
		case strings.HasSuffix(e.Field, ".subjectAccessReviewVersion"):
			e.Field = "--authorization-webhook-version"
		case e.Field == "authorizers":
			e.Field = "--authorization-mode"
		}
	}
	if err := errs.ToAggregate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// WebhookMetrics records the authorization webhooks' calls in Prometheus
// series, as kube-apiserver's apiserver_authorization_webhook_* do.
type WebhookMetrics struct {
	webhookmetrics.NoopRequestMetrics
	authorizationcel.NoopMatcherMetrics
	evaluations, failOpen *prometheus.CounterVec
	duration              *prometheus.HistogramVec
}

var _ webhookmetrics.AuthorizerMetrics = (*WebhookMetrics)(nil)

// NewWebhookMetrics makes the series; register Collectors.
func NewWebhookMetrics() *WebhookMetrics {
	return &WebhookMetrics{
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_authorization_webhook_evaluations_total",
			Help: "Calls of each authorization webhook, by name and result: success, error (no well-formed answer), timeout or canceled.",
		}, []string{"name", "result"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_authorization_webhook_evaluations_fail_open_total",
			Help: "Calls of each authorization webhook that failed (result error or timeout) and so had no opinion, by name and result.",
		}, []string{"name", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasehold_authorization_webhook_duration_seconds",
			Help:    "Time of each call of an authorization webhook, by name and result.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"name", "result"}),
	}
}

// Collectors are the series to register.
func (m *WebhookMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.evaluations, m.failOpen, m.duration}
}

// RecordWebhookEvaluation implements webhookmetrics.WebhookMetrics.
func (m *WebhookMetrics) RecordWebhookEvaluation(_ context.Context, name, result string) {
	m.evaluations.WithLabelValues(name, result).Inc()
}

// RecordWebhookDuration implements webhookmetrics.WebhookMetrics.
func (m *WebhookMetrics) RecordWebhookDuration(_ context.Context, name, result string, seconds float64) {
	m.duration.WithLabelValues(name, result).Observe(seconds)
}

// RecordWebhookFailOpen implements webhookmetrics.WebhookMetrics.
func (m *WebhookMetrics) RecordWebhookFailOpen(_ context.Context, name, result string) {
	m.failOpen.WithLabelValues(name, result).Inc()
}
