package safety

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/internal/testbin"
)

var (
	// leaseholdBin and contenderBin are the binaries under test, set by
	// TestMain.
	leaseholdBin, contenderBin string
	// buildErr says why they could not be built.
	buildErr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "leasehold-safety-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "safety:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	flag.Parse()
	if !testing.Short() || os.Getenv("LEASEHOLD_FAILOVER_BENCH") == "1" {
		leaseholdBin = os.Getenv("LEASEHOLD_BINARY")
		if leaseholdBin == "" {
			leaseholdBin = filepath.Join(dir, "leasehold")
			buildErr = testbin.Build(leaseholdBin, "./cmd/leasehold")
		}
		if buildErr == nil {
			contenderBin = filepath.Join(dir, "contender")
			buildErr = testbin.Build(contenderBin, "./test/safety/contender")
		}
	}
	return m.Run()
}

// needBinaries fails the test if the binaries could not be built.
func needBinaries(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if contenderBin == "" {
		t.Skip("binaries not built in -short mode")
	}
}

// mono reads CLOCK_MONOTONIC in nanoseconds, the clock the contenders
// record with.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// server is one `leasehold serve` process.
type server struct {
	dataDir, listen, logPath string
	cmd                      *exec.Cmd
	exited                   chan struct{}
	logs                     *os.File
}

func (s *server) kubeconfig() string { return filepath.Join(s.dataDir, "admin.kubeconfig") }

// startServer starts leasehold serve on dataDir and listen (a free port
// when empty) and waits until /readyz answers.
func startServer(dataDir, listen, logDir string) (*server, error) {
	if listen == "" {
		var err error
		if listen, err = testbin.FreeLoopbackAddr(); err != nil {
			return nil, err
		}
	}
	s := &server{dataDir: dataDir, listen: listen, logPath: filepath.Join(logDir, "serve.log"), exited: make(chan struct{})}
	var err error
	if s.logs, err = os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	fmt.Fprintf(s.logs, "\n=== leasehold serve --data-dir %s --listen %s\n", dataDir, listen)
	s.cmd = exec.Command(leaseholdBin, "serve", "--data-dir", dataDir, "--listen", listen, "--log-level", "info")
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		s.logs.Close()
		return nil, err
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-s.exited:
			s.logs.Close()
			return nil, fmt.Errorf("leasehold serve exited before it was ready\n%s", s.logTail())
		default:
		}
		err := s.readyz()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("leasehold serve not ready: %v\n%s", err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond) // polling a child process
	}
}

func (s *server) readyz() error {
	if _, err := os.Stat(s.kubeconfig()); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	hc.Timeout = 5 * time.Second
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + s.listen + "/readyz")
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

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.logs.Close()
}

// stop sends SIGTERM and waits, killing after a minute.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		s.logs.Close()
	case <-time.After(time.Minute):
		s.kill()
	}
}

func (s *server) logTail() string { return fileTail(s.logPath, 6000) }

func fileTail(path string, max int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return fmt.Sprintf("--- %s (tail) ---\n%s", filepath.Base(path), data)
}

// newServer starts a server for one test and stops it at the end. The
// returned func restarts it on the same data directory and port after a
// kill -9.
func newServer(t *testing.T) (cur func() *server, restart func() error) {
	t.Helper()
	dir := t.TempDir()
	s, err := startServer(filepath.Join(dir, "data"), "", dir)
	if err != nil {
		t.Fatalf("starting leasehold serve: %v", err)
	}
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		s.stop()
		if t.Failed() {
			t.Log(s.logTail())
		}
	})
	cur = func() *server {
		mu.Lock()
		defer mu.Unlock()
		return s
	}
	restart = func() error {
		mu.Lock()
		defer mu.Unlock()
		s.kill()
		s2, err := startServer(s.dataDir, s.listen, dir)
		if err != nil {
			return err
		}
		s = s2
		return nil
	}
	return cur, restart
}

// contenderConfig says how to start a contender process.
type contenderConfig struct {
	kind            string // leasehold or client-go
	kubeconfig      string
	lease           string
	name            string
	dir             string // records and logs go here
	durations       [3]time.Duration
	releaseOnCancel bool
}

// proc is one contender process (one incarnation).
type proc struct {
	cfg     contenderConfig
	records string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	// exitedAt is the CLOCK_MONOTONIC time at which the test saw the
	// process gone; set before exited is closed.
	exitedAt int64
	killed   bool // SIGKILLed by the test
}

var incarnation struct {
	sync.Mutex
	n int
}

func startContender(cfg contenderConfig) (*proc, error) {
	incarnation.Lock()
	incarnation.n++
	n := incarnation.n
	incarnation.Unlock()
	p := &proc{
		cfg:     cfg,
		records: filepath.Join(cfg.dir, fmt.Sprintf("%s.%d.records", cfg.name, n)),
		logPath: filepath.Join(cfg.dir, fmt.Sprintf("%s.%d.log", cfg.name, n)),
		exited:  make(chan struct{}),
	}
	logs, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kind", cfg.kind, "--kubeconfig", cfg.kubeconfig, "--lease", cfg.lease,
		"--name", cfg.name, "--records", p.records,
		"--lease-duration", cfg.durations[0].String(),
		"--renew-deadline", cfg.durations[1].String(),
		"--retry-period", cfg.durations[2].String(),
		"--release-on-cancel=" + strconv.FormatBool(cfg.releaseOnCancel),
	}
	p.cmd = exec.Command(contenderBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	if err := p.cmd.Start(); err != nil {
		logs.Close()
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		p.exitedAt = mono()
		logs.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill9 SIGKILLs the process and returns the time it was seen gone.
func (p *proc) kill9() int64 {
	p.killed = true
	_ = p.cmd.Process.Kill()
	<-p.exited
	return p.exitedAt
}

// term sends SIGTERM and waits up to timeout for the process to exit,
// killing it then. It reports whether it exited by itself.
func (p *proc) term(timeout time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		p.kill9()
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// record is one line of a contender's records file.
type record struct {
	at     int64
	event  string // ready, leader, start, stop, exit
	fields []string
}

func readRecords(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			return nil, fmt.Errorf("%s: malformed record %q", path, sc.Text())
		}
		at, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: malformed record %q", path, sc.Text())
		}
		out = append(out, record{at: at, event: fs[1], fields: fs[2:]})
	}
	return out, sc.Err()
}

// leading returns the identity and token of the term p is in according to
// its records, if any.
func (p *proc) leading() (id string, token int64, ok bool) {
	recs, err := readRecords(p.records)
	if err != nil {
		return "", 0, false
	}
	for _, r := range recs {
		switch r.event {
		case "start":
			id, ok = r.fields[0], true
			token, _ = strconv.ParseInt(r.fields[1], 10, 64)
		case "stop":
			ok = false
		}
	}
	return id, token, ok
}

// startedAfter returns the first "start" record of p at or after since.
func (p *proc) startedAfter(since int64) (record, bool) {
	recs, _ := readRecords(p.records)
	for _, r := range recs {
		if r.event == "start" && r.at >= since {
			return r, true
		}
	}
	return record{}, false
}

// observed reports whether p has recorded holder as leader.
func (p *proc) observed(holder string) bool {
	recs, _ := readRecords(p.records)
	for _, r := range recs {
		if r.event == "leader" && len(r.fields) > 0 && r.fields[0] == holder {
			return true
		}
	}
	return false
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling files written by other processes
	}
	return true
}

// envDuration reads a duration from the environment.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}
