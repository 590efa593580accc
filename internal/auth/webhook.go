package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
)

// WebhookConfig is what kube-apiserver's --authentication-token-webhook-*
// flags say.
type WebhookConfig struct {
	// ConfigFile is a kubeconfig: its cluster is the remote service, its
	// user the server's credentials there.
	ConfigFile string
	// CacheTTL is how long an answer that authenticated a token is kept;
	// default 2 min.
	CacheTTL time.Duration
	// Version is the TokenReview's, v1 or v1beta1 (the same fields);
	// default v1.
	Version string
	// Clock times the cache; default real.
	Clock clock.Clock
}

// webhookDeniedTTL is how long a token the webhook refused stays refused
// without asking again.
const webhookDeniedTTL = 10 * time.Second

// webhookCacheSize bounds the tokens whose answers are kept.
const webhookCacheSize = 10000

// webhookBackoff retries a call that failed in transit or got a 5xx or
// 429, as kube-apiserver's webhooks do.
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// WebhookClient calls a remote service that a kubeconfig describes, as
// kube-apiserver's webhooks do: JSON POSTed to the cluster's URL with the
// user's credentials.
type WebhookClient struct {
	url    string
	client *http.Client
	// sleep waits between retries; tests make it instant.
	sleep func(time.Duration)
}

// NewWebhookClient reads the kubeconfig configFile; its server must be an
// https URL.
func NewWebhookClient(configFile string) (*WebhookClient, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", configFile)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(rc.Host, "https://") {
		return nil, fmt.Errorf("%s: the webhook's server %q must be an https URL", configFile, rc.Host)
	}
	rc.Timeout = 30 * time.Second
	client, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	return &WebhookClient{url: rc.Host, client: client, sleep: time.Sleep}, nil
}

// Webhook authenticates bearer tokens by asking a remote service with a
// TokenReview (authentication.k8s.io/v1), as kube-apiserver's token
// webhook does. Answers are cached by the token's digest: one that
// authenticated for CacheTTL, one that refused for 10 s; a failed call is
// not cached and refuses the request.
type Webhook struct {
	*WebhookClient
	ttl   time.Duration
	cache *cache.LRUExpireCache
	// apiVersion is the reviews'.
	apiVersion string
}

var _ Authenticator = (*Webhook)(nil)

// webhookAnswer is a cached answer: u, or nil for a refusal.
type webhookAnswer struct{ u *User }

// NewWebhook reads cfg's kubeconfig and returns the authenticator.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = 2 * time.Minute
	}
	if cfg.CacheTTL < 0 {
		return nil, fmt.Errorf("cache TTL %v is negative", cfg.CacheTTL)
	}
	apiVersion := authenticationv1.SchemeGroupVersion.String()
	switch cfg.Version {
	case "", "v1":
	case "v1beta1":
		apiVersion = authenticationv1.GroupName + "/v1beta1"
	default:
		return nil, fmt.Errorf("TokenReview version %q: want v1 or v1beta1", cfg.Version)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	c, err := NewWebhookClient(cfg.ConfigFile)
	if err != nil {
		return nil, err
	}
	return &Webhook{WebhookClient: c, ttl: cfg.CacheTTL, cache: cache.NewLRUExpireCacheWithClock(webhookCacheSize, cfg.Clock), apiVersion: apiVersion}, nil
}

// Authenticate implements Authenticator.
func (w *Webhook) Authenticate(r *http.Request) (*User, bool, error) {
	token, ok := BearerToken(r)
	if !ok {
		return nil, false, nil
	}
	key := sha256.Sum256([]byte(token))
	if a, ok := w.cache.Get(key); ok {
		if u := a.(webhookAnswer).u; u != nil {
			return u, true, nil
		}
		return nil, false, errors.New("token webhook: token refused")
	}
	review := &authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: w.apiVersion, Kind: "TokenReview"},
		Spec:     authenticationv1.TokenReviewSpec{Token: token},
	}
	if err := w.review(r.Context(), review); err != nil {
		return nil, false, fmt.Errorf("token webhook: %w", err)
	}
	status := &review.Status
	if !status.Authenticated {
		w.cache.Add(key, webhookAnswer{}, webhookDeniedTTL)
		return nil, false, fmt.Errorf("token webhook: token refused: %s", status.Error)
	}
	if status.User.Username == "" {
		return nil, false, errors.New("token webhook: an authenticated token without a user name")
	}
	u := &User{Name: status.User.Username, UID: status.User.UID, Groups: status.User.Groups}
	if len(status.User.Extra) > 0 {
		u.Extra = make(map[string][]string, len(status.User.Extra))
		for k, v := range status.User.Extra {
			u.Extra[k] = []string(v)
		}
	}
	w.cache.Add(key, webhookAnswer{u}, w.ttl)
	return u, true, nil
}

// review POSTs review (a pointer to a review object) and puts the answer
// in it.
func (c *WebhookClient) review(ctx context.Context, review any) error {
	body, err := json.Marshal(review)
	if err != nil {
		return err
	}
	data, err := c.Post(ctx, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, review); err != nil {
		return fmt.Errorf("%s answered what is not a review: %w", c.url, err)
	}
	return nil
}

// Post POSTs body, JSON, and returns the answer's body, retrying a call
// that failed in transit or got a 5xx or 429 up to five times in about
// 5 s, as kube-apiserver's webhooks do; any other answer than 200 or 201
// is an error.
func (c *WebhookClient) Post(ctx context.Context, body []byte) ([]byte, error) {
	backoff := webhookBackoff
	for {
		data, retry, err := c.call(ctx, body)
		if err == nil || !retry || backoff.Steps <= 1 || ctx.Err() != nil {
			return data, err
		}
		c.sleep(backoff.Step())
	}
}

// call POSTs body once; it reports whether a failure may pass on another
// try.
func (c *WebhookClient) call(ctx context.Context, body []byte) ([]byte, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, true, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, true, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return nil, resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests, fmt.Errorf("%s answered %s", c.url, resp.Status)
	}
	return data, false, nil
}
