package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeWaitsForEtcd: a server started while its external etcd does not
// answer says so in its log and serves once etcd answers; while etcd does
// not answer, reads, writes and snapshots end with 504, and it serves
// writes again once etcd answers; one stopped before etcd answers exits
// cleanly.
func TestServeWaitsForEtcd(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	members := startEtcdCluster(t, dir)
	etcd := members[0]
	// A member that stops answering with its connections open: frozen.
	if err := etcd.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = etcd.proc.Signal(syscall.SIGCONT)
		}
	}()
	logPath := filepath.Join(dir, "serve.log")
	type started struct {
		s   *server
		err error
	}
	starts := make(chan started, 1)
	go func() {
		// Written by hand, with a space and a trailing comma.
		s, err := startServerUnder(nil, filepath.Join(dir, "data"), "", dir, "--etcd-servers", " "+etcd.url+",", "--request-timeout", "5s")
		starts <- started{s, err}
	}()
	eventually(t, 30*time.Second, func() error {
		data, _ := os.ReadFile(logPath)
		if !bytes.Contains(data, []byte("waiting for etcd to answer")) {
			return errors.New("the server's log does not say that it waits for etcd")
		}
		return nil
	})
	if err := etcd.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	st := <-starts
	if st.err != nil {
		t.Fatalf("the server did not serve once etcd answered: %v", st.err)
	}
	t.Cleanup(func() {
		if err := st.s.stop(); err != nil {
			t.Errorf("leasehold serve did not stop cleanly: %v", err)
		}
	})
	if got := st.s.kubectl(t, "get", "namespace", "kube-node-lease", "-o", "name"); strings.TrimSpace(got) != "namespace/kube-node-lease" {
		t.Errorf("kubectl get namespace kube-node-lease: %q", got)
	}

	// etcd stops answering again: the server is not ready, and says
	// which check failed; once etcd answers, it is ready again.
	if err := etcd.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed = false
	eventually(t, 30*time.Second, func() error {
		err := st.s.readyz()
		if err == nil || !strings.Contains(err.Error(), "500 Internal Server Error: [+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[-]etcd-readiness failed: reason withheld\n[+]shutdown ok\nreadyz check failed") {
			return fmt.Errorf("/readyz with etcd stopped: %v; want 500 for the etcd check", err)
		}
		return nil
	})
	// Reads and writes that etcd does not answer are answered 504, not
	// held for ever: a get reads etcd, and a list asks it for its
	// revision, until the server's deadline (--request-timeout).
	for _, args := range [][]string{
		{"get", "lease", "-n", "kube-system", "leasehold-controller-manager"},
		{"get", "leases", "-A"},
	} {
		_, stderr, err := st.s.runKubectl(t, args...)
		if err == nil || !strings.Contains(stderr, "Error from server (Timeout): Timeout: request did not complete within the allotted timeout") {
			t.Errorf("kubectl %s with etcd stopped: %v, %q; want the server's 504", strings.Join(args, " "), err, stderr)
		}
	}
	// A write waits for the commit timeout (5 s) and gets 504, or 500
	// with etcd's client's error, as from kube-apiserver, if the client's
	// keepalive gives the member up first (15 s after it was stopped).
	// What such a write did is unknown: etcd may still make it once it
	// runs again.
	_, stderr, err := st.s.runKubectl(t, "create", "namespace", "written-while-frozen")
	if err == nil || !strings.Contains(stderr, "Error from server (Timeout): Timeout: request did not complete within the allotted timeout") &&
		!strings.Contains(stderr, "Error from server (InternalError): Internal error occurred: rpc error: code = Unavailable desc = keepalive ping failed") {
		t.Errorf("kubectl create namespace with etcd stopped: %v, %q; want the server's 504, or 500 from the keepalive", err, stderr)
	}
	// So is a snapshot that etcd does not start sending.
	snap := exec.Command(leaseholdBin, "snapshot", "save", "--kubeconfig", st.s.kubeconfig, filepath.Join(dir, "frozen.db"))
	if out, err := snap.CombinedOutput(); err == nil || !strings.Contains(string(out), "Timeout: etcd sent no snapshot within 5s") {
		t.Errorf("snapshot save with etcd stopped: %v\n%s", err, out)
	}
	if err := etcd.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	eventually(t, 30*time.Second, st.s.readyz)
	st.s.kubectl(t, "create", "namespace", "written-after-the-freeze")

	// Nothing listens where this server's etcd should be: SIGTERM stops it
	// while it waits, with exit status 0.
	p := startProcess(t, "serve", "--data-dir", filepath.Join(dir, "data2"), "--listen", "127.0.0.1:0",
		"--etcd-servers", "http://"+freeAddrs(t, 1)[0])
	p.waitOutput(t, "waiting for etcd to answer", 30*time.Second)
	if err := p.stop(); err != nil {
		t.Fatalf("leasehold serve stopped while waiting for etcd: %v\n%s", err, p.out.String())
	}
	if !strings.Contains(p.out.String(), "stopped before serving") {
		t.Errorf("the log of a server stopped while waiting for etcd:\n%s", p.out.String())
	}
}

// TestServeGivesUpOnEtcd: a server whose external etcd has not answered a
// minute after the start exits 1 with a one-line error that names the
// endpoints and the wait, having said more than once meanwhile that it
// waits (every 5 s; the count is not checked, as it depends on timing).
func TestServeGivesUpOnEtcd(t *testing.T) {
	t.Parallel()
	addr := freeAddrs(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	out, err := exec.CommandContext(ctx, leaseholdBin, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen", "127.0.0.1:0", "--etcd-servers", "http://"+addr).CombinedOutput()
	took := time.Since(began).Round(time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("leasehold serve with no etcd: %v after %v; want exit status 1\n%s", err, took, out)
	}
	t.Logf("exit status 1 after %v", took)
	if want := "leasehold serve: etcd at http://" + addr + " did not answer within 1m0s"; !strings.Contains(string(out), want) {
		t.Errorf("no %q in its output:\n%s", want, out)
	}
	if n := strings.Count(string(out), "waiting for etcd to answer"); n < 2 {
		t.Errorf("%d lines say that it waits for etcd, want it said again while it waits:\n%s", n, out)
	}
	if strings.Contains(string(out), "goroutine ") || strings.Contains(string(out), "panic:") {
		t.Errorf("a stack trace:\n%s", out)
	}
}
