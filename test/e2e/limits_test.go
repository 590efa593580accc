package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// certPool holds the certificates of the PEM file at path.
func certPool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("%s holds no certificate", path)
	}
	return pool
}

// tlsTo is a TLS configuration for HTTP/1.1 to s, verified with its CA.
func tlsTo(t *testing.T, s *server) *tls.Config {
	t.Helper()
	return &tls.Config{RootCAs: certPool(t, filepath.Join(s.dataDir, "ca.crt")), NextProtos: []string{"http/1.1"}}
}

// leaseJSON is a Lease named name, in JSON.
func leaseJSON(name string) string {
	return `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"` + name + `"}}`
}

// slowRequest is a POST whose body has yet to arrive in full: until it
// does, the request is in flight.
type slowRequest struct {
	conn *tls.Conn
	rest string
}

// startSlowRequest sends a POST of body to path as the holder of token,
// with all of the body but its last byte.
func startSlowRequest(t *testing.T, s *server, token, path, body string) *slowRequest {
	t.Helper()
	conn, err := tls.Dial("tcp", s.listen, tlsTo(t, s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		path, s.listen, token, len(body))
	if _, err := io.WriteString(conn, head+body[:len(body)-1]); err != nil {
		t.Fatal(err)
	}
	return &slowRequest{conn: conn, rest: body[len(body)-1:]}
}

// finish sends the rest of the body.
func (r *slowRequest) finish(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(r.conn, r.rest); err != nil {
		t.Fatal(err)
	}
}

// response reads the answer, waiting up to timeout for it.
func (r *slowRequest) response(t *testing.T, timeout time.Duration) (*http.Response, metav1.Status, error) {
	t.Helper()
	var st metav1.Status
	r.conn.SetReadDeadline(time.Now().Add(timeout))
	resp, err := http.ReadResponse(bufio.NewReader(r.conn), nil)
	if err != nil {
		return nil, st, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode >= 400 {
		err = json.Unmarshal(data, &st)
	}
	return resp, st, err
}

// getAs GETs path from s as the holder of token, and returns the answer's
// status code, its Retry-After header and the reason of its Status.
func getAs(t *testing.T, s *server, token, path string) (code int, retryAfter string, reason metav1.StatusReason) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsTo(t, s)}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st metav1.Status
	if resp.StatusCode >= 400 {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatalf("GET %s: %s without a Status: %v", path, resp.Status, err)
		}
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), st.Reason
}

// TestRequestLimitFlags: --max-requests-inflight-per-user and
// --max-requests-inflight, through the real binary. A request whose body
// is still arriving holds its place: a second request of its user gets
// 429 with Retry-After, another user's does not until the overall limit
// is reached, and cluster-admins are never refused. --request-read-timeout
// cuts off a body that does not arrive in time with 400, stores nothing
// of it, and frees its place; a body that does arrive in time is
// answered.
func TestRequestLimitFlags(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t, "--max-requests-inflight", "2", "--max-requests-inflight-per-user", "1", "--request-read-timeout", "3s")
	token := func(user string) string {
		return strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", user))
	}
	alice, bob, carol := token("alice"), token("bob"), token("carol")
	// RBAC refuses a request before it reads the body: alice and bob may
	// create Leases, so that theirs wait for their bodies.
	s.kubectl(t, "create", "clusterrole", "lease-writer", "--verb=create,list", "--resource=leases")
	s.kubectl(t, "create", "clusterrolebinding", "lease-writers", "--clusterrole=lease-writer", "--user=alice", "--user=bob")
	const leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	tooMany := func(who, token string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			code, retry, reason := getAs(t, s, token, leases)
			if code != http.StatusTooManyRequests || retry != "1" || reason != metav1.StatusReasonTooManyRequests {
				return fmt.Errorf("%s's GET: %d, Retry-After %q, reason %q; want 429, 1, TooManyRequests", who, code, retry, reason)
			}
			return nil
		})
	}
	notLimited := func(who, token string, want int) {
		t.Helper()
		if code, _, reason := getAs(t, s, token, leases); code != want {
			t.Errorf("%s's GET: %d %s; want %d", who, code, reason, want)
		}
	}

	slowAlice := startSlowRequest(t, s, alice, leases, leaseJSON("alice"))
	tooMany("alice, with a request in flight", alice)
	notLimited("bob, alone in flight", bob, http.StatusOK)
	slowBob := startSlowRequest(t, s, bob, leases, leaseJSON("bob"))
	tooMany("carol, with two requests in flight", carol)
	admin := mustConfig(t, s).BearerToken
	if code, _, reason := getAs(t, s, admin, leases); code != http.StatusOK {
		t.Errorf("the admin's GET with the server at its limit: %d %s; want 200", code, reason)
	}

	// Bob's body arrives: his Lease is created, and his place is free.
	// Alice's never does: cut off after 3 s, not the default minute.
	slowBob.finish(t)
	if resp, st, err := slowBob.response(t, 30*time.Second); err != nil || resp.StatusCode != http.StatusCreated {
		t.Errorf("bob's finished POST: %v, %+v, %v; want 201", resp, st, err)
	}
	resp, st, err := slowAlice.response(t, 30*time.Second)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("alice's trickling POST was not cut off within 30 s: %v", err)
	}
	if err != nil || resp.StatusCode != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest || !strings.Contains(st.Message, "timeout") {
		t.Errorf("alice's trickling POST: %v, %+v, %v; want 400 BadRequest for the timeout", resp, st, err)
	}
	notLimited("alice, once her request was cut off", alice, http.StatusOK)
	notLimited("carol, once the others' requests ended", carol, http.StatusForbidden)
	if out := s.kubectl(t, "get", "lease", "-n", "default", "-o", "name"); strings.TrimSpace(out) != "lease.coordination.k8s.io/bob" {
		t.Errorf("leases in default: %q; want bob's alone", out)
	}
}

// TestSecondSignalExits: a second SIGTERM during a graceful stop ends the
// server at once, with status 1, as kube-apiserver's second signal does;
// what it had answered is there at the next start.
func TestSecondSignalExits(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t, "--shutdown-grace-period", "5m")
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseJSON("kept"), "create", "-n", ns, "-f", "-")
	admin := mustConfig(t, s).BearerToken
	// A request whose body never comes holds the graceful stop.
	startSlowRequest(t, s, admin, "/apis/coordination.k8s.io/v1/namespaces/"+ns+"/leases", leaseJSON("held"))
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the first signal's stop under way
	select {
	case <-s.exited:
		t.Fatalf("the server exited on the first SIGTERM with a request in flight: %v", s.err)
	default:
	}
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the server still runs 20 s after a second SIGTERM")
	}
	var exit *exec.ExitError
	if !errors.As(s.err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("the exit after a second SIGTERM: %v; want status 1", s.err)
	}
	s.killed.Store(true) // not the clean exit the test's cleanup checks for
	s = s.restart(t)
	if got := strings.Fields(s.kubectl(t, "get", "lease", "-n", ns, "-o", "name")); len(got) != 1 || got[0] != "lease.coordination.k8s.io/kept" {
		t.Errorf("leases after a restart: %q; want the one created", got)
	}
}

// TestShutdownFlags: on SIGTERM the server fails /readyz at once and goes
// on serving for --shutdown-delay-duration; then it stops taking
// connections and answers the requests in flight whose bodies arrive
// within --shutdown-grace-period; it waits no longer than that for one
// whose body does not, and exits cleanly, saying that it cut it off.
func TestShutdownFlags(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t, "--shutdown-grace-period", "3s", "--shutdown-delay-duration", "6s")
	ns := testNamespace(t, s)
	admin := mustConfig(t, s).BearerToken
	leases := "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases"
	finished := startSlowRequest(t, s, admin, leases, leaseJSON("finished"))
	cut := startSlowRequest(t, s, admin, leases, leaseJSON("cut"))
	// Both requests are in flight once the server reads their bodies: a
	// request behind them on a third connection is answered.
	if code, _, reason := getAs(t, s, admin, leases); code != http.StatusOK {
		t.Fatalf("GET: %d %s", code, reason)
	}

	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Not ready, and still serving: a load balancer's cue to send the
	// requests elsewhere before the listener closes.
	eventually(t, 30*time.Second, func() error {
		err := s.readyz()
		if err == nil || !strings.Contains(err.Error(), "500 Internal Server Error: [+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[-]shutdown failed: reason withheld\nreadyz check failed") {
			return fmt.Errorf("/readyz after SIGTERM: %v; want 500 for the shutdown check", err)
		}
		return nil
	})
	if code, _, reason := getAs(t, s, admin, leases); code != http.StatusOK {
		t.Fatalf("GET while not ready, before the delay ends: %d %s", code, reason)
	}
	// The listener closes once the delay is over.
	eventually(t, 30*time.Second, func() error {
		c, err := net.DialTimeout("tcp", s.listen, time.Second)
		if err == nil {
			c.Close()
			return errors.New("the server still accepts connections")
		}
		return nil
	})
	finished.finish(t)
	if resp, st, err := finished.response(t, 30*time.Second); err != nil || resp.StatusCode != http.StatusCreated {
		t.Errorf("the POST finished during the shutdown: %v, %+v, %v; want 201", resp, st, err)
	}
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the server still runs 20 s after its listener closed, with a grace period of 3 s (the default is 30 s)")
	}
	if s.err != nil {
		t.Errorf("the server's exit: %v; want a clean one", s.err)
	}
	if log, _ := os.ReadFile(s.logPath); !strings.Contains(string(log), "in-flight requests cut off at shutdown") {
		t.Errorf("the log does not say that a request was cut off:\n%s", s.logTail())
	}
	if resp, _, err := cut.response(t, 5*time.Second); err == nil {
		t.Errorf("the POST whose body never came was answered: %v", resp)
	}

	// What the server answered, it stored.
	s = s.restart(t)
	if got := strings.Fields(s.kubectl(t, "get", "lease", "-n", ns, "-o", "name")); len(got) != 1 || got[0] != "lease.coordination.k8s.io/finished" {
		t.Errorf("leases after a restart: %q; want the finished one alone", got)
	}
}

// TestAuditLogRotationFlags: --audit-log-maxsize and --audit-log-maxbackup
// through the real binary: the log is rotated before it passes the size,
// beside it with a timestamp in the name, the oldest rotated files beyond
// the count are removed, and every line of every file is a whole event;
// with --audit-log-compress too, the rotated files gzipped.
func TestAuditLogRotationFlags(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			testAuditLogRotation(t, compress)
		})
	}
}

// testAuditLogRotation is TestAuditLogRotationFlags, with
// --audit-log-compress when compress is set: the rotated files are then
// audit-*.log.gz, whole gzip streams of whole events.
func testAuditLogRotation(t *testing.T, compress bool) {
	args := []string{"--audit-log-maxsize", "1", "--audit-log-maxbackup", "2"}
	if compress {
		args = append(args, "--audit-log-compress")
	}
	s := newServer(t, args...)
	cfg := mustConfig(t, s)
	// Each request's event carries its URI (its user agent is cut at 1 KiB,
	// as kube-apiserver cuts it): 64 KiB of query makes 16 events a
	// megabyte, and 80 requests five megabytes.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("u", 64<<10)
	for range 80 {
		if err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default").Param("pad", pad).Do(context.Background()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	cfg.UserAgent = "the-last-request"
	if _, err := getRaw(t, cfg, "/api/v1/namespaces/default"); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(s.dataDir, "audit.log")
	eventually(t, 30*time.Second, func() error {
		data, err := os.ReadFile(live)
		if err != nil || !strings.Contains(string(data), `"userAgent":"the-last-request"`) {
			return fmt.Errorf("the last request is not in audit.log yet (%v)", err)
		}
		return nil
	})
	pattern := "audit-*.log"
	if compress {
		pattern += ".gz"
	}
	var backups []string
	eventually(t, 30*time.Second, func() error { // compressions run in the background
		var err error
		if backups, err = filepath.Glob(filepath.Join(s.dataDir, pattern)); err != nil {
			t.Fatal(err)
		}
		others, _ := filepath.Glob(filepath.Join(s.dataDir, "audit-*"))
		if len(backups) != 2 || len(others) != 2 {
			return fmt.Errorf("rotated files: %q of %q; want 2 %s", backups, others, pattern)
		}
		return nil
	})
	for _, f := range append(backups, live) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		if len(data) > 1<<20 {
			t.Errorf("%s: %d bytes, over the 1 MiB of --audit-log-maxsize", f, len(data))
		}
		for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			var ev struct{ Kind, AuditID string }
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Kind != "Event" || ev.AuditID == "" {
				t.Fatalf("%s, line %d, is not a whole audit event (%v): %.200s", f, i+1, err, line)
			}
		}
	}
}
