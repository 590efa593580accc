package e2e

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/leasehold/leasehold/internal/pki"
)

// TestTokenWebhook: --authentication-token-webhook-config-file sends the
// bearer tokens nothing else knows to a remote service as TokenReviews, as
// kube-apiserver does; whom it names, RBAC judges. Its answers are kept for
// --authentication-token-webhook-cache-ttl, so a service that goes away
// leaves the users it named signed in until then; a token it refuses, or
// that it cannot be asked about, gets 401.
func TestTokenWebhook(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	var calls atomic.Int32
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer server-to-hook" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		var review authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if review.Spec.Token == "dana-secret" {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "dana", Groups: []string{"ops"}}}
		} else {
			review.Status = authenticationv1.TokenReviewStatus{Error: "no such token"}
		}
		json.NewEncoder(w).Encode(&review)
	}))
	defer hook.Close()

	kc := filepath.Join(t.TempDir(), "hook.kubeconfig")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	if err := pki.WriteKubeconfig(kc, pki.KubeconfigSpec{Server: hook.URL + "/authenticate", CAPEM: caPEM, User: "server", Token: "server-to-hook"}); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--authentication-token-webhook-config-file", kc, "--authentication-token-webhook-cache-ttl", "1h")
	s.kubectl(t, "create", "clusterrolebinding", "ops-view", "--clusterrole=view", "--group=ops")

	whoami := func(token string) (string, error) {
		out, stderr, err := s.asToken(t, token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, stderr)
		}
		return out, nil
	}
	if got, err := whoami("dana-secret"); err != nil || got != `dana ["ops","system:authenticated"]` {
		t.Fatalf("dana: %q, %v", got, err)
	}
	if out, stderr, err := s.asToken(t, "dana-secret", "get", "leases", "-A"); err != nil {
		t.Errorf("dana lists leases, as view lets her: %v\n%s%s", err, out, stderr)
	}
	if _, stderr, err := s.asToken(t, "dana-secret", "delete", "namespace", "default", "--dry-run=server"); err == nil || !strings.Contains(stderr, "Forbidden") {
		t.Errorf("dana deletes a namespace, which view does not let her: %v %s; want 403", err, stderr)
	}
	if got, err := whoami("eve-guess"); err == nil || !strings.Contains(err.Error(), "(Unauthorized)") {
		t.Errorf("a token the webhook refuses: %q, %v; want 401", got, err)
	}
	// The server's own tokens never reach the webhook.
	before := calls.Load()
	s.kubectl(t, "get", "namespace", "default")
	if calls.Load() != before {
		t.Error("the admin's token was sent to the webhook")
	}

	// The webhook goes away: dana's answer is cached for an hour, a token
	// it never answered cannot be judged.
	hook.Close()
	if got, err := whoami("dana-secret"); err != nil || !strings.HasPrefix(got, "dana ") {
		t.Errorf("dana with the webhook gone, from the cache: %q, %v", got, err)
	}
	start := time.Now()
	if got, err := whoami("frank-new"); err == nil || !strings.Contains(err.Error(), "(Unauthorized)") {
		t.Errorf("a token never answered, with the webhook gone: %q, %v; want 401", got, err)
	}
	t.Logf("401 for a token the gone webhook could not judge after %v (five tries)", time.Since(start).Round(time.Millisecond))
}

// TestAuthorizationWebhook: with --authorization-mode RBAC,Node,Webhook a
// remote service that --authorization-webhook-config-file names decides,
// by SubjectAccessReview, what RBAC does not allow, as kube-apiserver's
// Webhook mode does: its allow lets a request through, its deny refuses it
// with its reason, and its lack of opinion leaves the request refused.
func TestAuthorizationWebhook(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	var calls atomic.Int32
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || r.Header.Get("Authorization") != "Bearer server-to-hook" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		ra := review.Spec.ResourceAttributes
		switch {
		case ra != nil && ra.Namespace == "vault":
			review.Status.Denied, review.Status.Reason = true, "the vault is sealed"
		case ra != nil && ra.Namespace == "team-a" && ra.Resource == "leases" && (ra.Verb == "get" || ra.Verb == "list") &&
			slices.Contains(review.Spec.Groups, "contractors"):
			review.Status.Allowed, review.Status.Reason = true, "contractors read team-a's leases"
		}
		json.NewEncoder(w).Encode(&review)
	}))
	defer hook.Close()
	kc := filepath.Join(t.TempDir(), "hook.kubeconfig")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	if err := pki.WriteKubeconfig(kc, pki.KubeconfigSpec{Server: hook.URL + "/authorize", CAPEM: caPEM, User: "server", Token: "server-to-hook"}); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--authorization-mode", "RBAC,Node,Webhook", "--authorization-webhook-config-file", kc)
	s.kubectl(t, "create", "namespace", "team-a")
	token := strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", "carol", "--group", "contractors"))

	eventually(t, 10*time.Second, func() error { // the token store is read again within a second
		if out, stderr, err := s.asToken(t, token, "get", "leases", "-n", "team-a"); err != nil {
			return fmt.Errorf("carol lists team-a's leases, as the webhook lets her: %v\n%s%s", err, out, stderr)
		}
		return nil
	})
	if _, stderr, err := s.asToken(t, token, "get", "leases", "-n", "team-b"); err == nil || !strings.Contains(stderr, "Forbidden") {
		t.Errorf("carol lists team-b's leases, on which the webhook has no opinion: %v %s; want 403", err, stderr)
	}
	if _, stderr, err := s.asToken(t, token, "get", "leases", "-n", "vault"); err == nil || !strings.Contains(stderr, "Forbidden") || !strings.Contains(stderr, "the vault is sealed") {
		t.Errorf("carol lists the vault's leases, which the webhook denies: %v %s; want 403 with its reason", err, stderr)
	}
	if out := s.kubectl(t, "auth", "can-i", "list", "leases", "-n", "team-a", "--as", "carol", "--as-group", "contractors"); strings.TrimSpace(out) != "yes" {
		t.Errorf("kubectl auth can-i for carol in team-a: %q", out)
	}
	// What the admin does is decided before the webhook is asked.
	before := calls.Load()
	s.kubectl(t, "get", "leases", "-n", "vault")
	if calls.Load() != before {
		t.Error("the admin's request went to the webhook")
	}
}

// TestAuditWebhook: --audit-webhook-config-file sends the audit events to a
// remote service as audit.k8s.io/v1 EventLists, as kube-apiserver does in
// its batch mode, here without a file (--audit-log-path none). A batch
// waits --audit-webhook-batch-max-wait (an hour here) unless it fills; what
// is queued when the server stops is sent before it exits.
func TestAuditWebhook(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	type item struct {
		Verb      string `json:"verb"`
		Stage     string `json:"stage"`
		ObjectRef *struct {
			Resource, Namespace, Name string
		} `json:"objectRef"`
		User struct {
			Username string `json:"username"`
		} `json:"user"`
	}
	var mu sync.Mutex
	var lists int
	var items []item
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var list struct {
			Kind, APIVersion string
			Items            []item
		}
		if err := json.NewDecoder(r.Body).Decode(&list); err != nil || list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" || r.Header.Get("Authorization") != "Bearer server-to-hook" {
			http.Error(w, "not an EventList", http.StatusBadRequest)
			return
		}
		mu.Lock()
		lists++
		items = append(items, list.Items...)
		mu.Unlock()
	}))
	defer hook.Close()
	kc := filepath.Join(t.TempDir(), "hook.kubeconfig")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	if err := pki.WriteKubeconfig(kc, pki.KubeconfigSpec{Server: hook.URL + "/audit", CAPEM: caPEM, User: "server", Token: "server-to-hook"}); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--audit-log-path", "none", "--audit-webhook-config-file", kc, "--audit-webhook-batch-max-wait", "1h")
	s.kubectlStdin(t, leaseManifest("audited", "default", "alice"), "create", "-f", "-")
	mu.Lock()
	if lists != 0 {
		t.Errorf("%d EventLists sent before the batch filled or waited an hour", lists)
	}
	mu.Unlock()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, it := range items {
		if it.Verb == "create" && it.Stage == "ResponseComplete" && it.ObjectRef != nil && it.ObjectRef.Resource == "leases" && it.ObjectRef.Namespace == "default" && it.ObjectRef.Name == "audited" && it.User.Username == "leasehold-admin" {
			found = true
		}
	}
	if !found {
		t.Errorf("the webhook got %d events in %d EventLists, none the admin's create of lease default/audited", len(items), lists)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "audit.log")); err == nil {
		t.Error("an audit log file was written with --audit-log-path none")
	}
}

// TestAuthorizationConfig: --authorization-config, as kube-apiserver's:
// RBAC, then two webhooks, each asked only about what its CEL
// matchCondition selects; one fails closed. The file changed while the
// server runs is put in use within its 10 s check; a broken one leaves
// the authorizers in use, counted in /metrics with the webhooks' calls.
func TestAuthorizationConfig(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	hook := func(allow func(ra *authorizationv1.ResourceAttributes) bool) (string, *atomic.Int32) {
		var calls atomic.Int32
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			var review authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			if ra := review.Spec.ResourceAttributes; ra != nil && allow(ra) {
				review.Status.Allowed, review.Status.Reason = true, "the policy service allows it"
			}
			json.NewEncoder(w).Encode(&review)
		}))
		t.Cleanup(srv.Close)
		kc := filepath.Join(t.TempDir(), "hook.kubeconfig")
		caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if err := pki.WriteKubeconfig(kc, pki.KubeconfigSpec{Server: srv.URL, CAPEM: caPEM, User: "server", Token: "server-to-hook"}); err != nil {
			t.Fatal(err)
		}
		return kc, &calls
	}
	// leases: lets anyone read leases of team-a; nodes: lets anyone read
	// nodes, and is down for writes (the server closes it for them).
	leasesKC, leasesCalls := hook(func(ra *authorizationv1.ResourceAttributes) bool {
		return ra.Namespace == "team-a" && (ra.Verb == "get" || ra.Verb == "list")
	})
	nodesKC, nodesCalls := hook(func(ra *authorizationv1.ResourceAttributes) bool { return ra.Verb == "list" })
	down := filepath.Join(t.TempDir(), "down.kubeconfig")
	if err := pki.WriteKubeconfig(down, pki.KubeconfigSpec{Server: "https://127.0.0.1:1", User: "server", Token: "x"}); err != nil {
		t.Fatal(err)
	}
	webhook := func(name, kc, failurePolicy, match string) string {
		return fmt.Sprintf(`- type: Webhook
  name: %s
  webhook:
    timeout: 3s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: %s
    connectionInfo: {type: KubeConfigFile, kubeConfigFile: %s}
    matchConditions:
    - expression: %q
`, name, failurePolicy, kc, match)
	}
	const head = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- {type: RBAC, name: rbac}\n- {type: Node, name: node}\n"
	leasesHook := webhook("leases", leasesKC, "NoOpinion", "has(request.resourceAttributes) && request.resourceAttributes.resource == 'leases'")
	nodesHook := webhook("nodes", nodesKC, "Deny", "has(request.resourceAttributes) && request.resourceAttributes.resource == 'nodes' && request.resourceAttributes.verb == 'list'")
	file := filepath.Join(t.TempDir(), "authz.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(head + leasesHook + nodesHook)
	s := newServer(t, "--authorization-config", file)
	s.kubectl(t, "create", "namespace", "team-a")
	s.kubectl(t, "create", "namespace", "team-b")
	token := strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", "dave"))
	as := func(args ...string) error {
		_, stderr, err := s.asToken(t, token, args...)
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		return nil
	}
	eventually(t, 10*time.Second, func() error { return as("get", "leases", "-n", "team-a") })
	if err := as("get", "nodes"); err != nil {
		t.Errorf("dave lists nodes, as the nodes webhook lets him: %v", err)
	}
	if err := as("get", "leases", "-n", "team-b"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("dave lists team-b's leases: %v; want 403", err)
	}
	if err := as("get", "namespaces"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("dave lists namespaces: %v; want 403", err)
	}
	if n := nodesCalls.Load(); n != 1 {
		t.Errorf("the nodes webhook was asked %d times; want once (only node lists match)", n)
	}
	if leasesCalls.Load() == 0 {
		t.Error("the leases webhook was never asked")
	}

	// The nodes webhook pointed at a service that is down: it fails
	// closed, with failurePolicy Deny.
	write(head + leasesHook + strings.Replace(nodesHook, nodesKC, down, 1))
	eventually(t, 30*time.Second, func() error {
		if err := as("get", "nodes"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
			return fmt.Errorf("dave lists nodes with the nodes webhook down: %v; want 403", err)
		}
		return nil
	})
	if err := as("get", "leases", "-n", "team-a"); err != nil {
		t.Errorf("dave lists team-a's leases after the change: %v", err)
	}
	// A broken file: the authorizers in use stay.
	write(head + "- {type: ABAC, name: abac}\n")
	eventually(t, 30*time.Second, func() error {
		out := s.kubectl(t, "get", "--raw", "/metrics")
		for _, want := range []string{
			`leasehold_authorization_config_reloads_total{status="failure"} 1`,
			`leasehold_authorization_config_reloads_total{status="success"} 1`,
			`leasehold_authorization_webhook_evaluations_total{name="nodes",result="success"} 1`,
			`leasehold_authorization_webhook_evaluations_total{name="nodes",result="error"}`,
		} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
	if err := as("get", "leases", "-n", "team-a"); err != nil {
		t.Errorf("dave lists team-a's leases after a broken file: %v", err)
	}
	log, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"authorization config reloaded", "authorization config not reloaded; the authorizers in use stay", "ABAC"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the server's log does not say %q", want)
		}
	}
}
