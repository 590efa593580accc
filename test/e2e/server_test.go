package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/internal/testbin"
)

var (
	// leaseholdBin is the binary under test, set by TestMain.
	leaseholdBin string
	// kubectlBin is the kubectl to drive; empty when there is none.
	kubectlBin string
	// kubectlMissing says why kubectlBin is empty.
	kubectlMissing string
	// workDir holds the build output and the shared server's files.
	workDir string
)

const (
	// startTimeout bounds how long a server may take to become ready. The
	// machine is small and shared, so it is generous.
	startTimeout = 90 * time.Second
	// commandTimeout bounds every kubectl run.
	commandTimeout = 2 * time.Minute
)

// parallel is how many tests run at once unless -test.parallel says
// otherwise. Most of them wait on child processes, etcd and timers rather
// than on the CPU: at go test's default, one per CPU, the suite kept two
// cores a third busy.
const parallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(2)
		}
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "leasehold-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	workDir = dir
	defer os.RemoveAll(dir)

	if leaseholdBin = os.Getenv("LEASEHOLD_BINARY"); leaseholdBin == "" {
		leaseholdBin = filepath.Join(dir, "leasehold")
		if err := testbin.Build(leaseholdBin, "./cmd/leasehold"); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: building leasehold:", err)
			return 1
		}
	}
	kubectlBin, kubectlMissing = findKubectl()

	code := m.Run()
	sharedMu.Lock()
	if sharedSrv != nil {
		if err := sharedSrv.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the shared server:", err)
			fmt.Fprintln(os.Stderr, sharedSrv.logTail())
			if code == 0 {
				code = 1
			}
		}
	}
	sharedMu.Unlock()
	return code
}

// findKubectl returns $LEASEHOLD_KUBECTL or the kubectl on the PATH, or an
// empty path and the reason there is none.
func findKubectl() (path, missing string) {
	if p := os.Getenv("LEASEHOLD_KUBECTL"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Sprintf("LEASEHOLD_KUBECTL=%s: %v", p, err)
		}
		return p, ""
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		return "", "no kubectl on the PATH and LEASEHOLD_KUBECTL is not set"
	}
	return p, ""
}

// needKubectl skips the test when there is no kubectl, or fails it when
// CI=true.
func needKubectl(t *testing.T) {
	t.Helper()
	if kubectlBin != "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("kubectl is required with CI=true: %s", kubectlMissing)
	}
	t.Skipf("skipping: %s", kubectlMissing)
}

// server is one `leasehold serve` process.
type server struct {
	dataDir    string
	listen     string // HOST:PORT
	kubeconfig string
	cacheDir   string // kubectl's discovery cache, private to this server
	logPath    string
	extra      []string // serve flags beyond the data dir and address
	prefix     []string // the command leasehold runs under, if any (prlimit ...)

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been waited for
	err    error         // the process's exit error, set before exited closes
	logs   *os.File
	killed atomic.Bool // SIGKILL was sent on purpose
}

// startServer starts `leasehold serve` on dataDir with extra serve flags
// and waits until it is ready. An empty listen picks a free port, retrying
// if somebody takes it first; a given one is used as is (restarts reuse
// their port, because admin.kubeconfig names it). logDir receives
// serve.log.
func startServer(dataDir, listen, logDir string, extra ...string) (*server, error) {
	return startServerUnder(nil, dataDir, listen, logDir, extra...)
}

// startServerUnder is startServer with leasehold run by the command
// prefix, for example prlimit with limits of its own.
func startServerUnder(prefix []string, dataDir, listen, logDir string, extra ...string) (*server, error) {
	pick := listen == ""
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		addr := listen
		if pick {
			var err error
			if addr, err = testbin.FreeLoopbackAddr(); err != nil {
				return nil, err
			}
		}
		s, err := startOnce(prefix, dataDir, addr, logDir, extra)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !pick || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
		// A first start that lost its port wrote a kubeconfig naming it:
		// start over from an empty data directory.
		if err := os.RemoveAll(dataDir); err != nil {
			return nil, err
		}
	}
	return nil, lastErr
}

func startOnce(prefix []string, dataDir, listen, logDir string, extra []string) (*server, error) {
	logPath := filepath.Join(logDir, "serve.log")
	logs, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--data-dir", dataDir, "--listen", listen, "--log-level", "info"}, extra...)
	fmt.Fprintf(logs, "\n=== leasehold %s at %s\n", strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))
	s := &server{
		dataDir:    dataDir,
		listen:     listen,
		kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"),
		cacheDir:   filepath.Join(logDir, "kube-cache"),
		logPath:    logPath,
		extra:      extra,
		prefix:     prefix,
		exited:     make(chan struct{}),
		logs:       logs,
	}
	command := append(slices.Clone(prefix), leaseholdBin)
	s.cmd = exec.Command(command[0], append(command[1:], args...)...)
	s.cmd.Stdout, s.cmd.Stderr = logs, logs
	if err := s.cmd.Start(); err != nil {
		logs.Close()
		return nil, err
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(startTimeout); err != nil {
		s.kill()
		return nil, fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return s, nil
}

// url is the server's base URL.
func (s *server) url() string { return "https://" + s.listen }

// waitReady polls /readyz through admin.kubeconfig until it answers 200.
func (s *server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("leasehold serve exited before it was ready: %v", s.err)
		default:
		}
		if last = s.readyz(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // polling a child process, not timing a result
	}
	return fmt.Errorf("leasehold serve not ready after %v: %v", timeout, last)
}

func (s *server) readyz() error {
	cfg, err := s.restConfig()
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	hc.Timeout = 5 * time.Second
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, s.url()+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
	}
	return nil
}

// restConfig reads admin.kubeconfig as client-go would.
func (s *server) restConfig() (*rest.Config, error) {
	if _, err := os.Stat(s.kubeconfig); err != nil {
		return nil, err
	}
	return clientcmd.BuildConfigFromFlags("", s.kubeconfig)
}

// clientset returns a typed client for the admin, speaking protobuf.
func (s *server) clientset(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	cfg, err := s.restConfig()
	if err != nil {
		t.Fatalf("reading %s: %v", s.kubeconfig, err)
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// signal sends sig to the server process.
func (s *server) signal(sig syscall.Signal) error {
	return s.cmd.Process.Signal(sig)
}

// sigkill sends SIGKILL without waiting; safe from any goroutine.
func (s *server) sigkill() error {
	s.killed.Store(true)
	return s.cmd.Process.Kill()
}

// kill ends the process with SIGKILL and waits for it.
func (s *server) kill() {
	_ = s.sigkill()
	<-s.exited
	s.logs.Close()
}

// stop sends SIGTERM and waits up to a minute for a clean exit, then kills.
func (s *server) stop() error {
	select {
	case <-s.exited:
		s.logs.Close()
		if s.killed.Load() {
			return nil
		}
		return s.err
	default:
	}
	_ = s.signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		s.logs.Close()
		return s.err
	case <-time.After(time.Minute):
		s.kill()
		return errors.New("leasehold serve did not exit within a minute of SIGTERM; killed it")
	}
}

// logTail returns the end of the server's log.
func (s *server) logTail() string {
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	const max = 8000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return "--- leasehold serve log (tail) ---\n" + string(data)
}

// newServer starts a server with a fresh data directory and the extra
// serve flags for one test and stops it when the test ends, checking that it
// exits cleanly.
func newServer(t *testing.T, extra ...string) *server {
	t.Helper()
	dir := t.TempDir()
	return serveFor(t, filepath.Join(dir, "data"), "", dir, extra...)
}

// serveFor starts a server on dataDir (a fresh one when listen is empty)
// for the test and stops it when the test ends, checking that it exits
// cleanly.
func serveFor(t *testing.T, dataDir, listen, logDir string, extra ...string) *server {
	t.Helper()
	return serveForUnder(t, nil, dataDir, listen, logDir, extra...)
}

// serveForUnder is serveFor with leasehold run by the command prefix
// (startServerUnder).
func serveForUnder(t *testing.T, prefix []string, dataDir, listen, logDir string, extra ...string) *server {
	t.Helper()
	s, err := startServerUnder(prefix, dataDir, listen, logDir, extra...)
	if err != nil {
		t.Fatalf("starting leasehold serve: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("leasehold serve did not stop cleanly: %v", err)
		}
		if t.Failed() {
			t.Log(s.logTail())
		}
	})
	return s
}

// restart starts a server again on s's data directory and port.
func (s *server) restart(t *testing.T) *server {
	t.Helper()
	logDir := filepath.Dir(s.logPath)
	s2, err := startServerUnder(s.prefix, s.dataDir, s.listen, logDir, s.extra...)
	if err != nil {
		t.Fatalf("restarting leasehold serve: %v", err)
	}
	t.Cleanup(func() {
		if err := s2.stop(); err != nil {
			t.Errorf("restarted leasehold serve did not stop cleanly: %v", err)
		}
	})
	return s2
}

var (
	sharedMu  sync.Mutex
	sharedSrv *server
	sharedErr error
)

// shared returns the server the kubectl tests share, starting it on first
// use. Tests on it work in namespaces of their own (see testNamespace) so
// that they do not see each other's leases. TestMain stops it.
func shared(t *testing.T) *server {
	t.Helper()
	needKubectl(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedSrv == nil && sharedErr == nil {
		dir := filepath.Join(workDir, "shared")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		sharedSrv, sharedErr = startServer(filepath.Join(dir, "data"), "", dir)
	}
	if sharedErr != nil {
		t.Fatalf("starting the shared leasehold serve: %v", sharedErr)
	}
	s := sharedSrv
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.logTail())
		}
	})
	return s
}

// runKubectl runs kubectl against s with KUBECONFIG set to its
// admin.kubeconfig and returns what it printed.
func (s *server) runKubectl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return s.runKubectlStdin(t, "", args...)
}

// runKubectlStdin is runKubectl with stdin (for `-f -`).
func (s *server) runKubectlStdin(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return s.runKubectlEnv(t, nil, stdin, args...)
}

// runKubectlEnv is runKubectlStdin with extra environment variables, which
// win over the usual ones (KUBECONFIG too).
func (s *server) runKubectlEnv(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	needKubectl(t)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, args...)
	cmd.Env = append(s.kubectlEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("kubectl did not finish within %v: %w", commandTimeout, err)
	}
	return out.String(), errb.String(), err
}

func (s *server) kubectlEnv() []string {
	return append(os.Environ(), "KUBECONFIG="+s.kubeconfig, "KUBECACHEDIR="+s.cacheDir)
}

// kubectl runs kubectl and fails the test if it fails; it returns stdout.
func (s *server) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return s.kubectlStdin(t, "", args...)
}

// kubectlStdin is kubectl with stdin.
func (s *server) kubectlStdin(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := s.runKubectlStdin(t, stdin, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", describeRun(args, out, errOut), err, stdinNote(stdin))
	}
	return out
}

// kubectlFails runs kubectl expecting it to fail and returns stderr.
func (s *server) kubectlFails(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := s.runKubectlStdin(t, stdin, args...)
	if err == nil {
		t.Fatalf("%s: succeeded, want an error\n%s", describeRun(args, out, errOut), stdinNote(stdin))
	}
	return errOut
}

func describeRun(args []string, stdout, stderr string) string {
	return fmt.Sprintf("kubectl %s\n--- stdout ---\n%s--- stderr ---\n%s", strings.Join(args, " "), stdout, stderr)
}

func stdinNote(stdin string) string {
	if stdin == "" {
		return ""
	}
	return "--- stdin ---\n" + stdin
}

// bgKubectl is a kubectl running in the background (for example a watch),
// its stdout delivered line by line.
type bgKubectl struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncbuf.Buffer
	done   chan struct{} // closed when kubectl has exited and lines is closed
	err    error         // kubectl's exit error, set before done closes
}

// startKubectl starts kubectl in the background; it is killed when the test
// ends if it is still running.
func (s *server) startKubectl(t *testing.T, args ...string) *bgKubectl {
	t.Helper()
	needKubectl(t)
	b := &bgKubectl{lines: make(chan string, 1000), stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	pr, pw := io.Pipe()
	b.cmd = exec.Command(kubectlBin, args...)
	b.cmd.Env = s.kubectlEnv()
	b.cmd.Stdout, b.cmd.Stderr = pw, b.stderr
	b.cmd.WaitDelay = 5 * time.Second
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting kubectl %s: %v", strings.Join(args, " "), err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		close(b.lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := b.cmd.Wait()
		pw.Close()
		<-scanned
		b.err = err
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// wait waits up to timeout for kubectl to exit by itself and returns its
// exit error.
func (b *bgKubectl) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-b.done:
		return b.err
	case <-time.After(timeout):
		t.Fatalf("kubectl %s still running after %v; stderr:\n%s", strings.Join(b.cmd.Args[1:], " "), timeout, b.stderr.String())
		return nil
	}
}

// waitLine returns the first line for which match is true, failing the test
// if none comes within timeout. Lines before it are returned in seen.
func (b *bgKubectl) waitLine(t *testing.T, timeout time.Duration, what string, match func(fields []string) bool) string {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var seen []string
	for {
		select {
		case line, ok := <-b.lines:
			if !ok {
				t.Fatalf("kubectl ended before printing %s; printed:\n%s\nstderr:\n%s", what, strings.Join(seen, "\n"), b.stderr.String())
			}
			seen = append(seen, line)
			if match(strings.Fields(line)) {
				return line
			}
		case <-timer.C:
			t.Fatalf("kubectl printed no %s within %v; printed:\n%s\nstderr:\n%s", what, timeout, strings.Join(seen, "\n"), b.stderr.String())
		}
	}
}

// eventually calls check until it returns nil or timeout passes, then fails
// the test with check's last error.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond) // polling a live server, not timing a result
	}
}
