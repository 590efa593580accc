package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// getRaw GETs path from the server with cfg's credentials, and returns the
// body and the API error that the server answered, if any.
func getRaw(t *testing.T, cfg *rest.Config, path string) (string, error) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(context.Background())
	return string(body), err
}

// TestProfilingFlag: --profiling serves Go's profiles to cluster-admins
// and refuses them to other users with 403; without the flag there are
// none, 404.
func TestProfilingFlag(t *testing.T) {
	needKubectl(t)
	s := newServer(t, "--profiling")
	admin, err := s.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	if body, err := getRaw(t, admin, "/debug/pprof/heap"); err != nil || len(body) == 0 {
		t.Errorf("the admin's heap profile: %d bytes, %v", len(body), err)
	}
	if body, err := getRaw(t, admin, "/debug/pprof/goroutine"); err != nil || len(body) == 0 {
		t.Errorf("the admin's goroutine profile: %d bytes, %v", len(body), err)
	}
	kc := filepath.Join(t.TempDir(), "alice.kubeconfig")
	leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", "alice", "--kubeconfig-out", kc)
	alice := mustConfig(t, &server{kubeconfig: kc})
	if _, err := getRaw(t, alice, "/debug/pprof/heap"); !apierrors.IsForbidden(err) {
		t.Errorf("alice's heap profile: %v; want 403", err)
	}

	if _, err := getRaw(t, mustConfig(t, shared(t)), "/debug/pprof/heap"); !apierrors.IsNotFound(err) {
		t.Errorf("a heap profile without --profiling: %v; want 404", err)
	}
}

// TestAnonymousAuthFlag: with --anonymous-auth a request without
// credentials is system:anonymous, whom RBAC refuses the namespaces (403);
// without the flag it gets 401.
func TestAnonymousAuthFlag(t *testing.T) {
	needKubectl(t)
	s := newServer(t, "--anonymous-auth")
	anon := rest.AnonymousClientConfig(mustConfig(t, s))
	// DoRaw leaves the Status in the body, and the error its reason.
	body, err := getRaw(t, anon, "/api/v1/namespaces")
	if !apierrors.IsForbidden(err) || !strings.Contains(body, `User \"system:anonymous\" cannot list`) {
		t.Errorf("listing namespaces without credentials: %v, %s; want 403 for system:anonymous", err, body)
	}

	_, err = getRaw(t, rest.AnonymousClientConfig(mustConfig(t, shared(t))), "/api/v1/namespaces")
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("listing namespaces without credentials and without the flag: %v; want 401", err)
	}
}

func mustConfig(t *testing.T, s *server) *rest.Config {
	t.Helper()
	cfg, err := s.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDashboardFlag: --dashboard=false serves no dashboard, 404; by
// default its page is served.
func TestDashboardFlag(t *testing.T) {
	needKubectl(t)
	if body, err := getRaw(t, mustConfig(t, shared(t)), "/dashboard/"); err != nil || !strings.Contains(body, "<html") {
		t.Errorf("the dashboard by default: %v, %.100q", err, body)
	}
	s := newServer(t, "--dashboard=false")
	if _, err := getRaw(t, mustConfig(t, s), "/dashboard/"); !apierrors.IsNotFound(err) {
		t.Errorf("the dashboard with --dashboard=false: %v; want 404", err)
	}
}
