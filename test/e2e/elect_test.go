package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/internal/testbin"
)

// Timing of the elect tests: short, so that a takeover after a crash
// (LeaseDuration after the standby's last sight of a renewal) is quick.
const (
	electLeaseDuration = 4 * time.Second
	electRenewDeadline = 2 * time.Second
	electRetryPeriod   = 500 * time.Millisecond
)

// workScript is what the elect tests run while leading: it appends
// "<identity> <token> <event> <pgid>" to $WORK_FILE, "start" once, "work"
// every 100 ms, and "end" when told to stop with SIGTERM. $$ is the process
// group, since leasehold elect makes the command a group leader.
const workScript = `#!/bin/sh
trap 'echo "$LEASEHOLD_LEADER_IDENTITY $LEASEHOLD_FENCING_TOKEN end $$" >> "$WORK_FILE"; exit 0' TERM
echo "$LEASEHOLD_LEADER_IDENTITY $LEASEHOLD_FENCING_TOKEN start $$" >> "$WORK_FILE"
while :; do
	echo "$LEASEHOLD_LEADER_IDENTITY $LEASEHOLD_FENCING_TOKEN work $$" >> "$WORK_FILE"
	sleep 0.1
done
`

// electProc is one `leasehold elect` process.
type electProc struct {
	id     string
	cmd    *exec.Cmd
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	exited chan struct{}
	err    error // set before exited closes
}

// startElect starts `leasehold elect` against s with args after the
// connection flags; it is killed when the test ends if still running.
func startElect(t *testing.T, s *server, id string, env []string, args ...string) *electProc {
	t.Helper()
	p := &electProc{id: id, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(leaseholdBin, append([]string{"elect", "--kubeconfig", s.kubeconfig}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// Its own process group, so that signals meant for it reach neither the
	// test nor, through the group, anything else.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting leasehold elect: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("--- leasehold elect %s stderr ---\n%s", id, tail(p.stderr.String(), 3000))
		}
	})
	return p
}

func (p *electProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// waitExit waits up to timeout for the process to exit and returns its exit
// code.
func (p *electProc) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("leasehold elect %s still running after %v\nstderr:\n%s", p.id, timeout, tail(p.stderr.String(), 3000))
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	default:
		t.Fatalf("leasehold elect %s: %v", p.id, p.err)
		return -1
	}
}

func tail(s string, max int) string {
	if len(s) > max {
		return "…" + s[len(s)-max:]
	}
	return s
}

// workLine is one line of the work file.
type workLine struct {
	id    string
	token int64
	event string // start, work, end
	pgid  int
}

func (l workLine) term() string { return fmt.Sprintf("%s/%d", l.id, l.token) }

// electWork writes workScript into dir and returns its path and that of
// the work file it is to append to. When the test ends, the commands that
// still run in their own process groups (a leader whose leasehold elect
// was killed, or is killed by the test's cleanup) are killed.
func electWork(t *testing.T, dir string) (script, work string) {
	t.Helper()
	script = filepath.Join(dir, "work.sh")
	if err := os.WriteFile(script, []byte(workScript), 0o700); err != nil {
		t.Fatal(err)
	}
	work = filepath.Join(dir, "work.log")
	t.Cleanup(func() {
		for _, l := range starts(readWork(t, work)) {
			_ = syscall.Kill(-l.pgid, syscall.SIGKILL)
		}
	})
	return script, work
}

func readWork(t *testing.T, path string) []workLine {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []workLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			t.Fatalf("malformed line in the work file: %q", sc.Text())
		}
		tok, err1 := strconv.ParseInt(fs[1], 10, 64)
		pgid, err2 := strconv.Atoi(fs[3])
		if err1 != nil || err2 != nil {
			t.Fatalf("malformed line in the work file: %q", sc.Text())
		}
		out = append(out, workLine{id: fs[0], token: tok, event: fs[2], pgid: pgid})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// starts returns the "start" lines of the work file, in order.
func starts(lines []workLine) []workLine {
	var out []workLine
	for _, l := range lines {
		if l.event == "start" {
			out = append(out, l)
		}
	}
	return out
}

// waitStarts polls the work file until it holds n "start" lines and returns
// them with the time it first saw the n-th.
func waitStarts(t *testing.T, path string, n int, timeout time.Duration) ([]workLine, time.Time) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s := starts(readWork(t, path)); len(s) >= n {
			return s, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the work file shows fewer than %d terms after %v:\n%s", n, timeout, readFile(t, path))
		}
		time.Sleep(10 * time.Millisecond) // polling a file another process writes
	}
}

// checkWork checks the work file: every term's lines are contiguous (no two
// identities' lines interleave), begin with "start", end with "end" if
// any, and fencing tokens strictly increase from term to term. It returns
// the terms in order.
func checkWork(t *testing.T, lines []workLine) []workLine {
	t.Helper()
	var terms []workLine
	seen := map[string]bool{}
	ended := false
	for i, l := range lines {
		if len(terms) == 0 || l.term() != terms[len(terms)-1].term() {
			if seen[l.term()] {
				t.Errorf("line %d: term %s writes again after term %s began (interleaving)", i+1, l.term(), terms[len(terms)-1].term())
				continue
			}
			if l.event != "start" {
				t.Errorf("line %d: term %s begins with %q, want start", i+1, l.term(), l.event)
			}
			if len(terms) > 0 && l.token <= terms[len(terms)-1].token {
				t.Errorf("line %d: term %s has token %d after token %d", i+1, l.term(), l.token, terms[len(terms)-1].token)
			}
			seen[l.term()] = true
			terms = append(terms, l)
			ended = false
			continue
		}
		if ended {
			t.Errorf("line %d: term %s writes %q after its end", i+1, l.term(), l.event)
		}
		if l.event == "start" {
			t.Errorf("line %d: term %s starts twice", i+1, l.term())
		}
		ended = l.event == "end"
	}
	return terms
}

// hasEnd reports whether term (identity/token) wrote its "end" line.
func hasEnd(lines []workLine, term string) bool {
	for _, l := range lines {
		if l.term() == term && l.event == "end" {
			return true
		}
	}
	return false
}

// TestElect runs three `leasehold elect` contenders, each running a script
// that appends its identity and fencing token to a shared file while it
// leads, and moves leadership around: a crash of the leader (SIGKILL of
// leasehold elect and of the command's process group), a graceful SIGTERM,
// and spec.preferredHolder set with kubectl. An `--observe` process prints
// every change. The file must show terms one after another, never two at
// once, with strictly increasing tokens.
func TestElect(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	dir := t.TempDir()
	script, work := electWork(t, dir)
	env := []string{"WORK_FILE=" + work}
	contend := func(id string) *electProc {
		return startElect(t, s, id, env,
			"--namespace", ns, "--lease", "job", "--identity", id,
			"--lease-duration", electLeaseDuration.String(),
			"--renew-deadline", electRenewDeadline.String(),
			"--retry-period", electRetryPeriod.String(),
			"--grace", "5s", "--retry", "--log-level", "info",
			"--", "/bin/sh", script)
	}

	observer := startElect(t, s, "observer", nil, "--namespace", ns, "--lease", "job", "--observe")
	procs := map[string]*electProc{}
	for _, id := range []string{"a", "b", "c"} {
		procs[id] = contend(id)
	}

	// The first leader.
	st, _ := waitStarts(t, work, 1, time.Minute)
	first := st[0]
	t.Logf("%s leads with token %d", first.id, first.token)
	eventually(t, 30*time.Second, func() error {
		_, rows := tableRows(t, s.kubectl(t, "get", "lease", "job", "-n", ns))
		if r := rowNamed(rows, 0, "job"); len(r) < 2 || r[1] != first.id {
			return fmt.Errorf("kubectl get lease shows %v, want HOLDER %s", r, first.id)
		}
		return nil
	})

	// A crash: leasehold elect and the command's process group die at once,
	// as on a machine failure. A standby takes over once the Lease expires.
	t0 := time.Now()
	_ = procs[first.id].cmd.Process.Kill()
	_ = syscall.Kill(-first.pgid, syscall.SIGKILL)
	st, seen := waitStarts(t, work, 2, time.Minute)
	second := st[1]
	t.Logf("after SIGKILL of %s's elect and process group, %s took over in %v (LeaseDuration %v)", first.id, second.id, seen.Sub(t0).Round(time.Millisecond), electLeaseDuration)
	if second.id == first.id {
		t.Fatalf("%s led again after it was killed", first.id)
	}
	procs[first.id].waitExit(t, 10*time.Second)

	// A graceful stop: SIGTERM makes elect stop the command, wait for it,
	// and release the Lease, so a watching standby takes over at once, well
	// before the Lease would have expired.
	t0 = time.Now()
	_ = procs[second.id].cmd.Process.Signal(syscall.SIGTERM)
	st, seen = waitStarts(t, work, 3, time.Minute)
	third := st[2]
	took := seen.Sub(t0)
	t.Logf("after SIGTERM of %s, %s took over in %v", second.id, third.id, took.Round(time.Millisecond))
	if code := procs[second.id].waitExit(t, 30*time.Second); code != 0 {
		t.Errorf("leasehold elect %s exited with %d after SIGTERM, want the command's status 0", second.id, code)
	}
	// Whether the Lease was released is in the log, not in how fast the
	// standby took it: on a busy machine that may come near the expiry.
	if !strings.Contains(procs[second.id].stderr.String(), `msg="released lease"`) {
		t.Errorf("leasehold elect %s did not release the Lease on SIGTERM (took over in %v, the Lease's duration %v)", second.id, took, electLeaseDuration)
	}
	if !hasEnd(readWork(t, work), second.term()) {
		t.Errorf("term %s did not write its end line: the command was not stopped gracefully", second.term())
	}

	// preferredHolder: a new contender d, named with kubectl, takes over
	// without anybody being killed.
	procs["d"] = contend("d")
	eventually(t, 30*time.Second, func() error {
		if !strings.Contains(procs["d"].stderr.String(), "holder="+third.id) {
			return errors.New("d has not yet seen the leader")
		}
		return nil
	})
	s.kubectl(t, "patch", "lease", "job", "-n", ns, "--type", "merge",
		"-p", `{"spec":{"strategy":"OldestEmulationVersion","preferredHolder":"d"}}`)
	st, _ = waitStarts(t, work, 4, time.Minute)
	fourth := st[3]
	if fourth.id != "d" {
		t.Errorf("after preferredHolder d, %s took over", fourth.id)
	}
	if fourth.token != third.token+1 {
		t.Errorf("d's token %d, want %d (one more than %s's)", fourth.token, third.token+1, third.id)
	}
	if !hasEnd(readWork(t, work), third.term()) {
		t.Errorf("term %s did not write its end line before handing over", third.term())
	}
	if !procs[third.id].running() {
		t.Errorf("leasehold elect %s exited after handing over; with --retry it campaigns again", third.id)
	}
	if l := getLease(t, s, ns, "job"); holder(l) != "d" || l.Spec.PreferredHolder != nil {
		t.Errorf("after the handover holder = %q, preferredHolder = %v; want d and none", holder(l), l.Spec.PreferredHolder)
	}

	// Fencing on the server: a JSON patch that tests the token and the
	// holder applies only while they are current.
	fence := func(token int64) []string {
		return []string{"patch", "lease", "job", "-n", ns, "--type", "json", "-p", fmt.Sprintf(
			`[{"op":"test","path":"/spec/leaseTransitions","value":%d},{"op":"test","path":"/spec/holderIdentity","value":"d"},`+
				`{"op":"add","path":"/metadata/annotations","value":{"example.com/last-writer":"d-%d"}}]`, token, token)}
	}
	s.kubectl(t, fence(fourth.token)...)
	if errOut := s.kubectlFails(t, "", fence(third.token)...); !strings.Contains(errOut, "invalid") {
		t.Errorf("a patch testing the stale token %d failed with %q, want 422 Invalid (a failed test operation)", third.token, errOut)
	}

	// Everyone stops, the standby first: stopped together, the standby
	// could take the Lease the leader releases before its own SIGTERM
	// came. Each exits with the command's status, or 0 when it was not
	// leading.
	for _, id := range []string{third.id, "d"} {
		_ = procs[id].cmd.Process.Signal(syscall.SIGTERM)
		if code := procs[id].waitExit(t, 30*time.Second); code != 0 {
			t.Errorf("leasehold elect %s exited with %d after SIGTERM, want 0", id, code)
		}
	}
	_ = observer.cmd.Process.Signal(syscall.SIGTERM)
	if code := observer.waitExit(t, 30*time.Second); code != 0 {
		t.Errorf("leasehold elect --observe exited with %d after SIGTERM, want 0", code)
	}

	terms := checkWork(t, readWork(t, work))
	var termIDs []string
	for _, tm := range terms {
		termIDs = append(termIDs, tm.id)
	}
	if want := []string{first.id, second.id, third.id, "d"}; strings.Join(termIDs, " ") != strings.Join(want, " ") {
		t.Errorf("terms in the work file: %v, want %v", termIDs, want)
	}

	// The observer printed every holder in order, with <none> after each
	// release (the graceful stop and the handover).
	var observed []string
	nones := 0
	for _, line := range strings.Split(strings.TrimSpace(observer.stdout.String()), "\n") {
		fs := strings.Split(line, "\t")
		if len(fs) != 2 {
			t.Fatalf("--observe printed %q, want TIME<TAB>HOLDER", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, fs[0]); err != nil {
			t.Errorf("--observe printed time %q: %v", fs[0], err)
		}
		if fs[1] == "<none>" {
			nones++
			continue
		}
		if len(observed) == 0 || observed[len(observed)-1] != fs[1] {
			observed = append(observed, fs[1])
		}
	}
	if strings.Join(observed, " ") != strings.Join(termIDs, " ") {
		t.Errorf("--observe printed holders %v, want %v\n%s", observed, termIDs, observer.stdout.String())
	}
	if nones < 2 {
		t.Errorf("--observe printed <none> %d times, want at least 2 (two releases)\n%s", nones, observer.stdout.String())
	}
}

// runElect runs leasehold elect to completion with a deadline and returns
// its exit code and stderr.
func runElect(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, leaseholdBin, append([]string{"elect"}, args...)...)
	var errb syncbuf.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("leasehold elect %s did not exit within a minute\n%s", strings.Join(args, " "), errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), errb.String()
	default:
		t.Fatal(err)
		return -1, ""
	}
}

// writeKubeconfig writes s's admin kubeconfig, changed by edit, to a new
// file and returns its path.
func writeKubeconfig(t *testing.T, s *server, edit func(*clientcmdapi.Config)) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestElectErrors checks that leasehold elect says clearly what is wrong,
// and exits non-zero, for a bad kubeconfig, an unreachable server, a
// namespace that does not exist and a user without permission.
// TestElectFailsOver: leasehold elect given several --server URLs moves
// on from one that does not answer to the next, as the agent does, and
// leads through it.
func TestElectFailsOver(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	down := "https://" + freeAddrs(t, 1)[0]
	code, stderr := runElect(t, "--kubeconfig", s.kubeconfig, "--server", down, "--server", s.url(),
		"--namespace", ns, "--lease", "failover", "--", "/bin/true")
	if code != 0 {
		t.Fatalf("leasehold elect with the first server down exited %d:\n%s", code, stderr)
	}
	if got := strings.TrimSpace(s.kubectl(t, "get", "lease", "failover", "-n", ns, "-o", "name")); got != "lease.coordination.k8s.io/failover" {
		t.Errorf("the lease elect took through the second server: %q", got)
	}
}

func TestElectErrors(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	cmd := []string{"--", "/bin/true"}

	garbage := writeFile(t, "garbage.kubeconfig", "this: [is not a kubeconfig\n")
	unreachable := writeKubeconfig(t, s, func(c *clientcmdapi.Config) {
		ln, err := testbin.FreeLoopbackAddr()
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range c.Clusters {
			cl.Server = "https://" + ln
		}
	})
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing kubeconfig", []string{"--kubeconfig", filepath.Join(t.TempDir(), "nope"), "--namespace", ns, "--lease", "x"}, "--kubeconfig"},
		{"malformed kubeconfig", []string{"--kubeconfig", garbage, "--namespace", ns, "--lease", "x"}, "kubeconfig"},
		{"unreachable server", []string{"--kubeconfig", unreachable, "--namespace", ns, "--lease", "x"}, "reaching the server"},
		{"missing namespace", []string{"--kubeconfig", s.kubeconfig, "--namespace", "no-such-namespace", "--lease", "x"}, `namespace "no-such-namespace" does not exist`},
		{"missing lease flag", []string{"--kubeconfig", s.kubeconfig, "--namespace", ns}, "--lease is required"},
		{"missing command", []string{"--kubeconfig", s.kubeconfig, "--namespace", ns, "--lease", "x"}, "command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.name != "missing command" {
				args = append(args, cmd...)
			}
			code, stderr := runElect(t, args...)
			if code == 0 {
				t.Fatalf("exit status 0, want non-zero; stderr:\n%s", stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want it to mention %q", stderr, tc.want)
			}
			t.Logf("exit status %d: %s", code, strings.TrimSpace(stderr))
		})
	}

	t.Run("no permission", func(t *testing.T) {
		// A user the server knows nothing about, reached by impersonation
		// from the admin's credentials.
		const user = "e2e-elect-nobody"
		out, _, err := s.runKubectl(t, "auth", "can-i", "get", "leases", "-n", ns, "--as", user)
		if err == nil && strings.TrimSpace(out) == "yes" {
			t.Skipf("the server lets %s read leases: no authorization to test", user)
		}
		kc := writeKubeconfig(t, s, func(c *clientcmdapi.Config) {
			for _, a := range c.AuthInfos {
				a.Impersonate = user
			}
		})
		code, stderr := runElect(t, append([]string{"--kubeconfig", kc, "--namespace", ns, "--lease", "x"}, cmd...)...)
		if code == 0 {
			t.Fatalf("exit status 0, want non-zero; stderr:\n%s", stderr)
		}
		if !strings.Contains(stderr, "no permission to use lease "+ns+"/x") {
			t.Errorf("stderr %q, want it to say there is no permission on the lease", stderr)
		}
		t.Logf("exit status %d: %s", code, strings.TrimSpace(stderr))
	})

	t.Run("observe with read access alone", func(t *testing.T) {
		const user = "e2e-elect-reader"
		s.kubectl(t, "create", "role", "lease-reader", "-n", ns, "--verb=get,list,watch", "--resource=leases")
		s.kubectl(t, "create", "rolebinding", "lease-reader", "-n", ns, "--role=lease-reader", "--user="+user)
		kc := writeKubeconfig(t, s, func(c *clientcmdapi.Config) {
			for _, a := range c.AuthInfos {
				a.Impersonate = user
			}
		})
		s.kubectlStdin(t, leaseManifest("observed", ns, "someone", "  leaseDurationSeconds: 15"), "apply", "-f", "-")
		p := startElect(t, s, "reader", nil, "--kubeconfig", kc, "--namespace", ns, "--lease", "observed", "--observe")
		eventually(t, 20*time.Second, func() error {
			if !strings.Contains(p.stdout.String(), "\tsomeone") {
				return fmt.Errorf("observer printed %q, stderr %q; want the lease's holder someone", p.stdout.String(), p.stderr.String())
			}
			return nil
		})
	})
}

// TestElectThroughAFrozenServer: leasehold elect given two servers keeps its
// term when the one it talks to freezes with its connections open
// (SIGSTOP). A renewal sent to the frozen server ends at the retry period,
// and the next goes to the other server, within the renew deadline: the
// work file shows one term throughout, and the Lease is still renewed.
func TestElectThroughAFrozenServer(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	rs := sharedReplicas(t, dir, 2)
	a, b := rs[0], rs[1]
	ns := testNamespace(t, a)
	script, work := electWork(t, dir)
	const renewDeadline = 5 * time.Second
	p := startElect(t, a, "frozen", []string{"WORK_FILE=" + work},
		"--server", a.url(), "--server", b.url(),
		"--namespace", ns, "--lease", "frozen", "--identity", "frozen",
		"--lease-duration", "8s", "--renew-deadline", renewDeadline.String(), "--retry-period", "1s",
		"--log-level", "info", "--", "/bin/sh", script)
	waitStarts(t, work, 1, time.Minute)

	if err := a.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.signal(syscall.SIGCONT) })
	stopped := time.Now()
	// The fault itself, for more than twice the renew deadline; nothing is
	// timed.
	time.Sleep(time.Until(stopped.Add(2*renewDeadline + 2*time.Second)))
	lines := readWork(t, work)
	if st := starts(lines); len(st) != 1 || hasEnd(lines, st[0].term()) || !p.running() {
		t.Fatalf("the term did not outlast a frozen server (elect running: %v):\n%s\nelect's log:\n%s",
			p.running(), readFile(t, work), tail(p.stderr.String(), 3000))
	}
	// The kubeconfig both servers share names the first.
	renewed := b.kubectl(t, "--server", b.url(), "get", "lease", "frozen", "-n", ns, "-o", "jsonpath={.spec.holderIdentity} {.spec.renewTime}")
	holder, at, _ := strings.Cut(renewed, " ")
	renewTime, err := time.Parse(time.RFC3339Nano, at)
	if err != nil || holder != "frozen" || !renewTime.After(stopped.Add(renewDeadline)) {
		t.Errorf("the Lease through the other server: %q (%v); want held by frozen and renewed after %v",
			renewed, err, stopped.Add(renewDeadline).Format(time.RFC3339Nano))
	}
	if log := p.stderr.String(); strings.Contains(log, "leadership may be lost") {
		t.Errorf("elect lost its term:\n%s", tail(log, 3000))
	}
	if err := a.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// stubbornScript is workScript for a command that ignores SIGTERM: only
// SIGKILL stops it.
var stubbornScript = regexp.MustCompile(`(?m)^trap .* TERM$`).ReplaceAllLiteralString(workScript, "trap '' TERM")

// TestElectLostLeaderStopsBeforeSuccessor: a leader cut off from the
// server (the replica it talks to frozen) loses its term at the renew
// deadline; its command, which ignores SIGTERM, is killed before a
// standby on another replica may start, however long --grace is. The
// work file shows the old term's last line before the new term's first.
func TestElectLostLeaderStopsBeforeSuccessor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rs := sharedReplicas(t, dir, 2)
	a, b := rs[0], rs[1]
	ns := testNamespace(t, a)
	_, work := electWork(t, dir)
	script := filepath.Join(dir, "stubborn.sh")
	if !strings.Contains(stubbornScript, "trap '' TERM") {
		t.Fatalf("no stubborn script made of:\n%s", workScript)
	}
	if err := os.WriteFile(script, []byte(stubbornScript), 0o700); err != nil {
		t.Fatal(err)
	}
	contend := func(s *server, id string) *electProc {
		return startElect(t, s, id, []string{"WORK_FILE=" + work},
			"--server", s.url(), "--namespace", ns, "--lease", "cut-off", "--identity", id,
			"--lease-duration", electLeaseDuration.String(),
			"--renew-deadline", electRenewDeadline.String(),
			"--retry-period", electRetryPeriod.String(),
			"--grace", "30s", "--log-level", "info", "--", "/bin/sh", script)
	}
	old := contend(a, "old")
	waitStarts(t, work, 1, time.Minute)
	contend(b, "new")

	if err := a.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.signal(syscall.SIGCONT) })
	waitStarts(t, work, 2, time.Minute)
	time.Sleep(time.Second) // what the old command would write after it
	lines := readWork(t, work)
	if terms := checkWork(t, lines); len(terms) != 2 || terms[0].id != "old" || terms[1].id != "new" {
		t.Errorf("terms %v, want old's then new's", terms)
	}
	if t.Failed() {
		t.Logf("work file:\n%s\nold elect's log:\n%s", readFile(t, work), tail(old.stderr.String(), 3000))
	}
	if log := old.stderr.String(); !strings.Contains(log, "to be gone before another leader may start") {
		t.Errorf("old elect did not say why the command got less than --grace:\n%s", tail(log, 3000))
	}
	if err := a.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// TestElectAcrossReplicas: contenders that talk to different replicas of
// one etcd elect one leader at a time. A standby on one replica sees a
// release made through the other at once, through that replica's watch of
// etcd, and takes over well before the Lease would expire; after a crash
// it takes over once the Lease expires. The work file shows terms one
// after another, with increasing tokens.
func TestElectAcrossReplicas(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	rs := sharedReplicas(t, dir, 3)
	servers := map[string]*server{"x": rs[0], "y": rs[1], "z": rs[2]}
	ns := testNamespace(t, servers["x"])
	script, work := electWork(t, dir)
	procs := map[string]*electProc{}
	for id, s := range servers {
		procs[id] = startElect(t, s, id, []string{"WORK_FILE=" + work},
			"--server", s.url(), "--namespace", ns, "--lease", "across", "--identity", id,
			"--lease-duration", electLeaseDuration.String(),
			"--renew-deadline", electRenewDeadline.String(),
			"--retry-period", electRetryPeriod.String(),
			"--grace", "5s", "--log-level", "info", "--", "/bin/sh", script)
	}
	st, _ := waitStarts(t, work, 1, time.Minute)
	first := st[0]
	// The standbys must have seen it lead to see it release.
	eventually(t, 30*time.Second, func() error {
		for id, p := range procs {
			if id != first.id && !strings.Contains(p.stderr.String(), "holder="+first.id) {
				return fmt.Errorf("%s has not yet seen %s lead", id, first.id)
			}
		}
		return nil
	})

	// A graceful stop through the first's replica.
	t0 := time.Now()
	_ = procs[first.id].cmd.Process.Signal(syscall.SIGTERM)
	st, seen := waitStarts(t, work, 2, time.Minute)
	second := st[1]
	took := seen.Sub(t0)
	t.Logf("after SIGTERM of %s, %s took over through another replica in %v", first.id, second.id, took.Round(time.Millisecond))
	// It took the Lease because it saw it released, not because it
	// expired.
	if log := procs[second.id].stderr.String(); !strings.Contains(grepLines(log, `holder=""`), `msg="leader observed"`) {
		t.Errorf("%s did not see the Lease released through another replica:\n%s", second.id, tail(log, 3000))
	}
	procs[first.id].waitExit(t, 30*time.Second)

	// A crash of the second and of its command.
	t0 = time.Now()
	_ = procs[second.id].cmd.Process.Kill()
	_ = syscall.Kill(-second.pgid, syscall.SIGKILL)
	st, seen = waitStarts(t, work, 3, time.Minute)
	third := st[2]
	t.Logf("after SIGKILL of %s, %s took over in %v (LeaseDuration %v)", second.id, third.id, seen.Sub(t0).Round(time.Millisecond), electLeaseDuration)
	if third.id == first.id || third.id == second.id {
		t.Errorf("%s led again after it stopped", third.id)
	}
	_ = procs[third.id].cmd.Process.Signal(syscall.SIGTERM)
	procs[third.id].waitExit(t, 30*time.Second)
	terms := checkWork(t, readWork(t, work))
	if len(terms) != 3 {
		t.Errorf("%d terms in the work file, want 3", len(terms))
	}
}
