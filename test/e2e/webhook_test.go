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
