package auth

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/pki"
)

// writeWebhookKubeconfig writes a kubeconfig for the webhook at url,
// trusting caPEM, with a token as the server's credentials there.
func writeWebhookKubeconfig(t *testing.T, url string, caPEM []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := pki.WriteKubeconfig(path, pki.KubeconfigSpec{Server: url, CAPEM: caPEM, User: "leasehold", Token: "leasehold-to-webhook"}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWebhook(t *testing.T) {
	var calls, failures atomic.Int32
	var badCredentials atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/authenticate" || r.Header.Get("Authorization") != "Bearer leasehold-to-webhook" {
			badCredentials.Store(true)
		}
		var review authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Kind != "TokenReview" || review.APIVersion != "authentication.k8s.io/v1" {
			http.Error(w, "not a TokenReview", http.StatusBadRequest)
			return
		}
		switch tok := review.Spec.Token; {
		case tok == "flaky" && failures.Add(1) <= 2:
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		case tok == "forbidden":
			http.Error(w, "no", http.StatusForbidden)
			return
		case tok == "garbage":
			w.Write([]byte("{"))
			return
		case tok == "alice-token" || tok == "flaky":
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: "alice", UID: "u-1", Groups: []string{"devs"}, Extra: map[string]authenticationv1.ExtraValue{"scopes": {"read"}},
			}}
		default:
			review.Status = authenticationv1.TokenReviewStatus{Error: "unknown token"}
		}
		json.NewEncoder(w).Encode(&review)
	}))
	defer srv.Close()
	// The test server's certificate is self-signed: its own anchor.
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	clk := testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))
	w, err := NewWebhook(WebhookConfig{ConfigFile: writeWebhookKubeconfig(t, srv.URL+"/authenticate", caPEM), CacheTTL: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var slept []time.Duration
	w.sleep = func(d time.Duration) { slept = append(slept, d) }

	check := func(step, token string, wantUser string, wantCalls int32) {
		t.Helper()
		before := calls.Load()
		u, ok, err := w.Authenticate(bearerRequest(token))
		if wantUser != "" && (!ok || err != nil || u.Name != wantUser) {
			t.Fatalf("%s: %+v, %v, %v; want %s", step, u, ok, err, wantUser)
		}
		if wantUser == "" && (ok || err == nil) {
			t.Fatalf("%s: %+v, %v, %v; want refused", step, u, ok, err)
		}
		if got := calls.Load() - before; got != wantCalls {
			t.Fatalf("%s: %d calls to the webhook, want %d", step, got, wantCalls)
		}
	}
	check("a token the webhook knows", "alice-token", "alice", 1)
	u, _, _ := w.Authenticate(bearerRequest("alice-token"))
	if u.UID != "u-1" || !slices.Equal(u.Groups, []string{"devs"}) || !slices.Equal(u.Extra["scopes"], []string{"read"}) {
		t.Errorf("alice: %+v", u)
	}
	check("the same, from the cache", "alice-token", "alice", 0)
	clk.Step(61 * time.Second)
	check("the same, after the cache's TTL", "alice-token", "alice", 1)

	check("a token the webhook refuses", "mallory-token", "", 1)
	check("the same, refused from the cache", "mallory-token", "", 0)
	clk.Step(11 * time.Second)
	check("the same, asked again after 10s", "mallory-token", "", 1)

	check("two 503s, then an answer", "flaky", "alice", 3)
	if len(slept) != 2 {
		t.Errorf("waited %v between the tries; want two waits", slept)
	}
	check("a 403, not tried again", "forbidden", "", 1)
	check("nor cached", "forbidden", "", 1)
	check("an answer that is not JSON", "garbage", "", 1)
	if u, ok, err := w.Authenticate(httptest.NewRequest("GET", "/", nil)); u != nil || ok || err != nil {
		t.Errorf("no token: %+v, %v, %v; want none", u, ok, err)
	}
	if badCredentials.Load() {
		t.Error("the webhook was called without the kubeconfig's credentials, or not with a POST to its URL")
	}

	if _, err := NewWebhook(WebhookConfig{ConfigFile: writeWebhookKubeconfig(t, "http://127.0.0.1:1/authenticate", nil)}); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("a webhook over http: %v; want refused", err)
	}
	if _, err := NewWebhook(WebhookConfig{ConfigFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("a missing kubeconfig was taken")
	}
}

func TestAuthorizationWebhook(t *testing.T) {
	var calls atomic.Int32
	var last atomic.Pointer[authorizationv1.SubjectAccessReviewSpec]
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Kind != "SubjectAccessReview" || review.APIVersion != "authorization.k8s.io/v1" {
			http.Error(w, "not a SubjectAccessReview", http.StatusBadRequest)
			return
		}
		last.Store(&review.Spec)
		switch ra := review.Spec.ResourceAttributes; {
		case review.Spec.User == "broken":
			http.Error(w, "down", http.StatusBadGateway)
			return
		case ra != nil && ra.Namespace == "team-a" && slices.Contains(review.Spec.Groups, "devs"):
			review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "devs own team-a"}
		case ra != nil && ra.Namespace == "vault":
			review.Status = authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "nobody reads the vault"}
		case ra != nil && ra.Namespace == "confused":
			review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true}
		default:
			review.Status = authorizationv1.SubjectAccessReviewStatus{Reason: "not mine to say"}
		}
		json.NewEncoder(w).Encode(&review)
	}))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	// Kubernetes' webhook authorizer waits between retries with
	// webhookBackoff: not at all here.
	saved := webhookBackoff
	webhookBackoff = wait.Backoff{Steps: saved.Steps}
	t.Cleanup(func() { webhookBackoff = saved })
	metrics := NewWebhookMetrics()
	flags := AuthorizationWebhookFlags{ConfigFile: writeWebhookKubeconfig(t, srv.URL, caPEM), AllowedTTL: 5 * time.Minute, DeniedTTL: 30 * time.Second}
	w, err := NewAuthorizationWebhook("webhook", flags.Webhook(), metrics)
	if err != nil {
		t.Fatal(err)
	}
	alice := &User{Name: "alice", UID: "u-1", Groups: []string{"devs"}, Extra: map[string][]string{"scopes": {"read"}}}
	leases := func(u *User, ns string) Attributes {
		return Attributes{User: u, Verb: "list", ResourceRequest: true, APIGroup: "coordination.k8s.io", APIVersion: "v1", Resource: "leases", Namespace: ns}
	}
	check := func(step string, a Attributes, want Decision, wantReason string, wantErr bool, wantCalls int32) {
		t.Helper()
		before := calls.Load()
		d, reason, err := w.Authorize(t.Context(), a)
		if d != want || reason != wantReason || (err != nil) != wantErr {
			t.Fatalf("%s: %v %q %v; want %v %q, error %v", step, d, reason, err, want, wantReason, wantErr)
		}
		if got := calls.Load() - before; got != wantCalls {
			t.Fatalf("%s: %d calls, want %d", step, got, wantCalls)
		}
	}
	check("allowed", leases(alice, "team-a"), DecisionAllow, "devs own team-a", false, 1)
	spec := last.Load()
	if spec.User != "alice" || spec.UID != "u-1" || !slices.Equal(spec.Groups, []string{"devs"}) || !slices.Equal(spec.Extra["scopes"], []string{"read"}) ||
		*spec.ResourceAttributes != (authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "list", Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}) {
		t.Errorf("the review sent: %+v %+v", spec, spec.ResourceAttributes)
	}
	check("allowed, from the cache", leases(alice, "team-a"), DecisionAllow, "devs own team-a", false, 0)

	check("denied", leases(alice, "vault"), DecisionDeny, "nobody reads the vault", false, 1)
	check("no opinion", leases(alice, "team-b"), DecisionNoOpinion, "not mine to say", false, 1)
	check("no opinion, from the cache", leases(alice, "team-b"), DecisionNoOpinion, "not mine to say", false, 0)
	check("both at once: denied, with an error", leases(alice, "confused"), DecisionDeny, "", true, 1)
	check("the webhook failing: no opinion, with the error, tried five times", leases(&User{Name: "broken"}, "team-a"), DecisionNoOpinion, "", true, 5)
	check("and not cached", leases(&User{Name: "broken"}, "team-a"), DecisionNoOpinion, "", true, 5)

	check("a non-resource request", Attributes{User: alice, Verb: "get", Path: "/healthz"}, DecisionNoOpinion, "not mine to say", false, 1)
	if nra := last.Load().NonResourceAttributes; nra == nil || *nra != (authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}) || last.Load().ResourceAttributes != nil {
		t.Errorf("the non-resource review sent: %+v", last.Load())
	}
	for _, tc := range []struct {
		result string
		want   float64
	}{{"success", 5}, {"error", 10}} {
		if got := testutil.ToFloat64(metrics.evaluations.WithLabelValues("webhook", tc.result)); got != tc.want {
			t.Errorf("evaluations with result %s: %v, want %v", tc.result, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(metrics.failOpen.WithLabelValues("webhook", "error")); got != 2 {
		t.Errorf("fail-open evaluations: %v, want 2", got)
	}

	// Without caching, with failurePolicy Deny, and asked only about
	// leases (a CEL matchCondition).
	cfg := flags.Webhook()
	cfg.CacheAuthorizedRequests, cfg.FailurePolicy = false, apiserver.FailurePolicyDeny
	cfg.MatchConditions = []apiserver.WebhookMatchCondition{{Expression: "has(request.resourceAttributes) && request.resourceAttributes.resource == 'leases'"}}
	w, err = NewAuthorizationWebhook("strict", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("allowed, uncached", leases(alice, "team-a"), DecisionAllow, "devs own team-a", false, 1)
	check("allowed, asked again", leases(alice, "team-a"), DecisionAllow, "devs own team-a", false, 1)
	check("failing: denied", leases(&User{Name: "broken"}, "team-a"), DecisionDeny, "", true, 5)
	check("not a lease: not asked", Attributes{User: alice, Verb: "get", ResourceRequest: true, Resource: "nodes"}, DecisionNoOpinion, "", false, 0)
}

// TestWebhookVersions: the reviews go as authentication.k8s.io and
// authorization.k8s.io v1beta1 when the flags say so, as kube-apiserver's
// --authentication-token-webhook-version and --authorization-webhook-version
// (whose default that is); other versions are refused.
func TestWebhookVersions(t *testing.T) {
	var versions []string
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		versions = append(versions, review.Kind+" "+review.APIVersion)
		mu.Unlock()
		switch review.Kind {
		case "TokenReview":
			fmt.Fprintf(w, `{"apiVersion":%q,"kind":"TokenReview","status":{"authenticated":true,"user":{"username":"alice"}}}`, review.APIVersion)
		default:
			fmt.Fprintf(w, `{"apiVersion":%q,"kind":"SubjectAccessReview","status":{"allowed":true}}`, review.APIVersion)
		}
	}))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc := writeWebhookKubeconfig(t, srv.URL, caPEM)

	tw, err := NewWebhook(WebhookConfig{ConfigFile: kc, Version: "v1beta1"})
	if err != nil {
		t.Fatal(err)
	}
	if u, ok, err := tw.Authenticate(bearerRequest("some-token")); !ok || err != nil || u.Name != "alice" {
		t.Errorf("a v1beta1 TokenReview: %+v, %v, %v", u, ok, err)
	}
	cfg, err := AuthorizationConfigFromModes([]string{"Webhook"}, AuthorizationWebhookFlags{ConfigFile: kc, AllowedTTL: time.Minute, DeniedTTL: time.Minute, Version: "v1beta1"})
	if err != nil {
		t.Fatal(err)
	}
	aw, err := NewAuthorizationWebhook("webhook", cfg.Authorizers[0].Webhook, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d, _, err := aw.Authorize(t.Context(), Attributes{User: &User{Name: "alice"}, Verb: "get", Path: "/version"}); d != DecisionAllow || err != nil {
		t.Errorf("a v1beta1 SubjectAccessReview: %v, %v", d, err)
	}
	if want := []string{"TokenReview authentication.k8s.io/v1beta1", "SubjectAccessReview authorization.k8s.io/v1beta1"}; !slices.Equal(versions, want) {
		t.Errorf("reviews sent: %q, want %q", versions, want)
	}

	if _, err := NewWebhook(WebhookConfig{ConfigFile: kc, Version: "v2"}); err == nil || !strings.Contains(err.Error(), `"v2"`) {
		t.Errorf("TokenReview v2: %v", err)
	}
	if _, err := AuthorizationConfigFromModes([]string{"Webhook"}, AuthorizationWebhookFlags{ConfigFile: kc, AllowedTTL: time.Minute, DeniedTTL: time.Minute, Version: "v2"}); err == nil || !strings.Contains(err.Error(), "--authorization-webhook-version") {
		t.Errorf("SubjectAccessReview v2: %v", err)
	}
}
