package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestGoawayChanceFlag: with --goaway-chance 0.02 a client that keeps
// sending requests on HTTP/2 is made to open new connections now and then
// (one request in fifty on average), every request is still answered, and
// a watch that shares the client's connections keeps its stream through
// the GOAWAYs. Without the flag one connection serves them all.
func TestGoawayChanceFlag(t *testing.T) {
	needKubectl(t)
	// requests sends n GETs through client and returns how many
	// connections carried them.
	requests := func(s *server, client *http.Client, n int) int {
		t.Helper()
		var mu sync.Mutex
		conns := map[string]bool{}
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			mu.Lock()
			conns[i.Conn.LocalAddr().String()] = true
			mu.Unlock()
		}}
		for i := range n {
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", s.url()+"/api/v1/namespaces/default", nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
				t.Fatalf("request %d: %s over HTTP/%d", i, resp.Status, resp.ProtoMajor)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
	clientOf := func(s *server) (*http.Client, *kubernetes.Clientset) {
		t.Helper()
		cfg := mustConfig(t, s)
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfigAndClient(cfg, client)
		if err != nil {
			t.Fatal(err)
		}
		return client, cs
	}

	s := newServer(t, "--goaway-chance", "0.02")
	client, cs := clientOf(s)
	w, err := cs.CoreV1().Namespaces().Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=goaway-watched"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// 0.98^600: the chance that none of 600 requests is chosen is 6 in a
	// million.
	if n := requests(s, client, 600); n < 2 {
		t.Errorf("600 requests with --goaway-chance 0.02 went on %d connection(s); want several", n)
	} else {
		t.Logf("600 requests with --goaway-chance 0.02 went on %d connections", n)
	}
	s.kubectl(t, "create", "namespace", "goaway-watched")
	select {
	case ev, ok := <-w.ResultChan():
		if !ok || ev.Type != "ADDED" {
			t.Errorf("the watch opened before the GOAWAYs: %v, %v; want the namespace ADDED", ev.Type, ok)
		}
	case <-time.After(30 * time.Second):
		t.Error("no event within 30s on the watch opened before the GOAWAYs")
	}

	sharedClient, _ := clientOf(shared(t))
	if n := requests(shared(t), sharedClient, 600); n != 1 {
		t.Errorf("600 requests without the flag went on %d connections; want 1", n)
	}
}

// TestResponseFlags: --strict-transport-security-directives puts its
// header on every response, and a long list is gzipped for a client that
// asks, unless --api-response-compression=false.
func TestResponseFlags(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	// get lists 300 KB of leases asking for gzip, as Go's client does, and
	// returns the response's headers.
	get := func(s *server) http.Header {
		t.Helper()
		cfg := mustConfig(t, s)
		cs := kubernetes.NewForConfigOrDie(cfg)
		for _, name := range []string{"pad-a", "pad-b", "pad-c"} {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pad": strings.Repeat("x", 100_000)}}}
			if _, err := cs.CoordinationV1().Leases("default").Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(t.Context(), "GET", s.url()+"/apis/coordination.k8s.io/v1/namespaces/default/leases", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list: %s", resp.Status)
		}
		return resp.Header
	}

	s := newServer(t, "--strict-transport-security-directives", "max-age=600,includeSubDomains", "--api-response-compression=false")
	h := get(s)
	if got := h.Get("Strict-Transport-Security"); got != "max-age=600; includeSubDomains" {
		t.Errorf("Strict-Transport-Security %q, want max-age=600; includeSubDomains", got)
	}
	if got := h.Get("Content-Encoding"); got != "" {
		t.Errorf("with --api-response-compression=false the list came with Content-Encoding %q", got)
	}
	s.kubectl(t, "get", "leases", "-n", "default", "-o", "name")

	s = newServer(t)
	h = get(s)
	if h.Get("Strict-Transport-Security") != "" || h.Get("Content-Encoding") != "gzip" {
		t.Errorf("by default: Strict-Transport-Security %q, Content-Encoding %q; want none and gzip", h.Get("Strict-Transport-Security"), h.Get("Content-Encoding"))
	}
	// kubectl reads the gzipped list.
	if out := s.kubectl(t, "get", "leases", "-n", "default", "-o", "name"); !strings.Contains(out, "lease.coordination.k8s.io/pad-c") {
		t.Errorf("kubectl get leases: %q", out)
	}

	out, err := exec.CommandContext(t.Context(), leaseholdBin, "serve", "--data-dir", t.TempDir(), "--strict-transport-security-directives", "preload").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "max-age=SECONDS is required") {
		t.Errorf("serve with --strict-transport-security-directives preload: %v\n%s", err, out)
	}
}

// TestHelp: every way of asking the binary for help answers on stdout with
// exit status 0, a command with subcommands included, and leasehold help
// COMMAND gives the command's flags; an unknown subcommand still fails.
func TestHelp(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(leaseholdBin, args...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), code
	}
	for _, tc := range []struct {
		args []string
		want string // in stdout, or in stderr where flag sets print
	}{
		{[]string{"--help"}, "Usage: leasehold COMMAND"},
		{[]string{"help"}, "Usage: leasehold COMMAND"},
		{[]string{"token", "--help"}, "usage: leasehold token create|list|delete|import"},
		{[]string{"snapshot", "-h"}, "usage: leasehold snapshot save|restore"},
		{[]string{"cert", "help"}, "usage: leasehold cert issue"},
		{[]string{"etcd", "member", "--help"}, "usage: leasehold etcd member list|add|promote|remove"},
		{[]string{"help", "token", "create"}, "-ttl duration"},
		{[]string{"help", "serve"}, "-etcd-servers"},
		{[]string{"agent", "--help"}, "-node-name string"},
	} {
		stdout, stderr, code := run(tc.args...)
		if code != 0 || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("leasehold %s: exit %d, want 0 and %q in\n%s%s", strings.Join(tc.args, " "), code, tc.want, stdout, stderr)
		}
	}
	if _, stderr, code := run("token", "bogus"); code != 1 || !strings.Contains(stderr, `unknown token subcommand "bogus"`) {
		t.Errorf("leasehold token bogus: exit %d, stderr %q", code, stderr)
	}
}
