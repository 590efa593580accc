package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/internal/testbin"
)

// browserCommandTimeout bounds one command to the browser driver; its own
// waits are shorter (waitText's timeoutMs).
const browserCommandTimeout = 2 * time.Minute

// browser is test/browser/driver.mjs: node driving a real Chromium with
// Playwright, one JSON command a line.
type browser struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *syncbuf.Buffer
}

// findBrowser returns the node and Chromium to run and the driver's
// directory, or the reason they are missing. hack/install-test-tools.sh
// installs them.
func findBrowser() (node, chromium, dir, missing string) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		return "", "", "", err.Error()
	}
	dir = filepath.Join(root, "test", "browser")
	if node, err = exec.LookPath("node"); err != nil {
		return "", "", "", "no node on the PATH"
	}
	if chromium = os.Getenv("LEASEHOLD_CHROMIUM"); chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			return "", "", "", "no chromium on the PATH and LEASEHOLD_CHROMIUM is not set"
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		return "", "", "", "test/browser has no node_modules/playwright-core (npm ci there)"
	}
	return node, chromium, dir, ""
}

// startBrowser starts the driver, skipping the test when there is no
// browser, or failing it with CI=true.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	node, chromium, dir, missing := findBrowser()
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("a browser is required with CI=true: %s", missing)
		}
		t.Skipf("skipping: %s", missing)
	}
	b := &browser{stderr: &syncbuf.Buffer{}}
	b.cmd = exec.Command(node, "driver.mjs")
	b.cmd.Dir = dir
	b.cmd.Env = append(os.Environ(), "LEASEHOLD_CHROMIUM="+chromium)
	b.cmd.Stderr = b.stderr
	var err error
	if b.in, err = b.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.out = bufio.NewScanner(stdout)
	b.out.Buffer(nil, 8<<20)
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting the browser driver: %v", err)
	}
	t.Cleanup(func() {
		b.in.Close()
		done := make(chan error, 1)
		go func() { done <- b.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = b.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("--- browser driver stderr ---\n%s", b.stderr.String())
		}
	})
	return b
}

// call sends one command and returns its value, or the driver's error.
func (b *browser) call(t *testing.T, op string, args map[string]any) (json.RawMessage, error) {
	t.Helper()
	cmd := map[string]any{"op": op}
	for k, v := range args {
		cmd[k] = v
	}
	line, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("browser %s: %v\n%s", op, err, b.stderr.String())
	}
	type answer struct {
		OK    bool            `json:"ok"`
		Value json.RawMessage `json:"value"`
		Error string          `json:"error"`
	}
	got := make(chan answer, 1)
	go func() {
		var a answer
		if !b.out.Scan() {
			a.Error = fmt.Sprintf("the driver exited: %v", b.out.Err())
		} else if err := json.Unmarshal(b.out.Bytes(), &a); err != nil {
			a.Error = fmt.Sprintf("the driver answered %q: %v", b.out.Text(), err)
		}
		got <- a
	}()
	select {
	case a := <-got:
		if !a.OK {
			return nil, fmt.Errorf("browser %s: %s", line, a.Error)
		}
		return a.Value, nil
	case <-time.After(browserCommandTimeout):
		t.Fatalf("browser %s: no answer in %v\n%s", line, browserCommandTimeout, b.stderr.String())
		return nil, nil
	}
}

// do is call that fails the test on an error, decoding the value into out
// when out is not nil.
func (b *browser) do(t *testing.T, out any, op string, args map[string]any) {
	t.Helper()
	v, err := b.call(t, op, args)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(v, out); err != nil {
			t.Fatalf("browser %s answered %s: %v", op, v, err)
		}
	}
}

// waitText waits until the element's text contains text.
func (b *browser) waitText(t *testing.T, selector, text string, timeout time.Duration) {
	t.Helper()
	b.waitFor(t, selector, text, timeout, false)
}

// waitTextGone waits until the element's text no longer contains text.
func (b *browser) waitTextGone(t *testing.T, selector, text string, timeout time.Duration) {
	t.Helper()
	b.waitFor(t, selector, text, timeout, true)
}

func (b *browser) waitFor(t *testing.T, selector, text string, timeout time.Duration, absent bool) {
	t.Helper()
	args := map[string]any{"selector": selector, "text": text, "timeoutMs": timeout.Milliseconds(), "absent": absent}
	if _, err := b.call(t, "waitText", args); err != nil {
		var now string
		b.do(t, &now, "text", map[string]any{"selector": selector})
		t.Fatalf("%v\n%s now reads %q", err, selector, now)
	}
}

// count returns how many elements selector matches.
func (b *browser) count(t *testing.T, selector string) int {
	t.Helper()
	var n int
	b.do(t, &n, "count", map[string]any{"selector": selector})
	return n
}

func (b *browser) text(t *testing.T, selector string) string {
	t.Helper()
	var s string
	b.do(t, &s, "text", map[string]any{"selector": selector})
	return s
}

// row returns the cells of the row of table whose first cell is name, nil
// when there is none.
func (b *browser) row(t *testing.T, table, name string) []string {
	t.Helper()
	var cells []string
	b.do(t, &cells, "rowText", map[string]any{"table": table, "name": name})
	return cells
}

// waitRow polls row until ok accepts it.
func (b *browser) waitRow(t *testing.T, table, name string, timeout time.Duration, ok func([]string) bool) []string {
	t.Helper()
	var cells []string
	eventually(t, timeout, func() error {
		if cells = b.row(t, table, name); !ok(cells) {
			return fmt.Errorf("%s row %s is %q", table, name, cells)
		}
		return nil
	})
	return cells
}

// TestDashboard signs in to the dashboard in Chromium and follows a fleet
// live: agents heartbeating, one killed and marked NotReady by the node
// lifecycle controller, an election's holder changing, all through RBAC
// and the audit log.
func TestDashboard(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir)
	agents := readyAgents(t, s, dir, "web-1", "web-2")
	const viewer = "viewer"
	token := strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", viewer))

	var code int
	b.do(t, &code, "goto", map[string]any{"url": s.url() + "/dashboard"})
	if code != 200 {
		t.Fatalf("GET /dashboard (redirected to /dashboard/): %d, want 200", code)
	}

	// A token the server does not know: the page stays on the sign-in form.
	b.do(t, nil, "fill", map[string]any{"selector": "#token", "value": "not-a-token"})
	b.do(t, nil, "click", map[string]any{"selector": "#sign-in-form button"})
	b.waitText(t, "#sign-in-error", "401 Unauthorized", 20*time.Second)

	// The viewer's token, which the server picks up within a second, but no
	// RBAC yet: signed in, and the lists answer 403.
	eventually(t, 20*time.Second, func() error {
		b.do(t, nil, "fill", map[string]any{"selector": "#token", "value": token})
		b.do(t, nil, "click", map[string]any{"selector": "#sign-in-form button"})
		if _, err := b.call(t, "waitText", map[string]any{"selector": "#user", "text": viewer, "timeoutMs": 3000}); err != nil {
			return fmt.Errorf("not signed in: %q", b.text(t, "#sign-in-error"))
		}
		return nil
	})
	b.waitText(t, "#nodes-error", "forbidden", 20*time.Second)
	b.waitText(t, "#nodes-error", "(403 Forbidden)", time.Second)
	// Nothing listed is not an empty fleet.
	if n := b.text(t, "#count-nodes"); n != "–" {
		t.Errorf("nodes card %q while the list is forbidden, want –", n)
	}
	b.waitText(t, "#nodes tbody", "Not loaded", 5*time.Second)

	// Grant get, list and watch: the page's retries get through.
	s.kubectl(t, "create", "clusterrole", "fleet-viewer", "--verb=get,list,watch", "--resource=nodes,leases.coordination.k8s.io")
	s.kubectl(t, "create", "clusterrolebinding", "fleet-viewer", "--clusterrole=fleet-viewer", "--user="+viewer)
	b.waitText(t, "#connection", "Live", 30*time.Second)
	b.waitText(t, "#count-nodes", "2", 10*time.Second)
	b.waitText(t, "#count-ready", "2", 10*time.Second)
	if e := b.text(t, "#nodes-error"); e != "" {
		t.Errorf("nodes error still shown once allowed: %q", e)
	}
	for n := range agents {
		cells := b.waitRow(t, "#nodes", n, 10*time.Second, func(c []string) bool { return len(c) == 6 && c[1] == "Ready" })
		if !strings.HasSuffix(cells[2], "s ago") {
			t.Errorf("node %s heartbeat %q, want an age like \"2s ago\"", n, cells[2])
		}
	}
	// A browser's own WebSocket watch, as some Kubernetes UIs open them:
	// the token as a subprotocol, an event a text message.
	var ws struct {
		Protocol string
		Text     bool
		Data     string
	}
	b.do(t, &ws, "webSocketWatch", map[string]any{"path": "/api/v1/nodes?watch=1", "token": token})
	if ws.Protocol != "base64.binary.k8s.io" || !ws.Text || !strings.Contains(ws.Data, `"type":"ADDED"`) || !strings.Contains(ws.Data, `"kind":"Node"`) {
		t.Errorf("a watch of nodes over a WebSocket from the page: subprotocol %q, text %v, first message %.300q; want base64.binary.k8s.io and a Node ADDED as text", ws.Protocol, ws.Text, ws.Data)
	}
	if servers := b.text(t, "#count-servers"); servers != "1" {
		t.Errorf("servers %q, want 1 (this replica's identity lease)", servers)
	}

	// kill -9 of an agent: the controller marks the node, the page follows.
	// Ready Unknown and the unreachable taint are two writes (UpdateStatus,
	// then Update), as in Kubernetes, so the page may show one before the
	// other: wait for both.
	agents["web-2"].kill9(t)
	b.waitRow(t, "#nodes", "web-2", nodeGrace+2*nodePeriod+15*time.Second, func(c []string) bool {
		return len(c) == 6 && c[1] == "NotReady" && strings.Contains(c[3], "node.kubernetes.io/unreachable:NoSchedule")
	})
	// Its Lease is older than its duration: said in words, not in red alone.
	b.waitRow(t, "#nodes", "web-2", 5*time.Second, func(c []string) bool { return len(c) == 6 && strings.HasSuffix(c[2], "ago, expired") })
	b.waitText(t, "#count-notready", "1", 5*time.Second)
	if got := b.text(t, "#nodes tbody tr:first-child td:first-child"); got != "web-2" {
		t.Errorf("first node row %q, want web-2: NotReady nodes come first", got)
	}

	// An election's holder changing, then the Lease deleted.
	ns := "jobs"
	s.kubectl(t, "create", "namespace", ns)
	s.kubectlStdin(t, leaseManifest("reports", ns, "worker-a", "  leaseDurationSeconds: 15", "  leaseTransitions: 0"), "apply", "-f", "-")
	b.waitRow(t, "#elections", ns, 10*time.Second, func(c []string) bool {
		return len(c) == 6 && c[1] == "reports" && c[2] == "worker-a" && c[4] == "15s"
	})
	s.kubectlStdin(t, leaseManifest("reports", ns, "worker-b", "  leaseDurationSeconds: 15", "  leaseTransitions: 1"), "apply", "-f", "-")
	b.waitRow(t, "#elections", ns, 10*time.Second, func(c []string) bool { return len(c) == 6 && c[2] == "worker-b" && c[5] == "1" })
	s.kubectl(t, "delete", "lease", "reports", "-n", ns)
	b.waitRow(t, "#elections", ns, 10*time.Second, func(c []string) bool { return c == nil })

	// More elections than the page draws: the first MAX_ROWS (200), and
	// a line that says so.
	const many = 205
	var list strings.Builder
	list.WriteString("apiVersion: v1\nkind: List\nitems:\n")
	for i := range many {
		fmt.Fprintf(&list, "- apiVersion: coordination.k8s.io/v1\n  kind: Lease\n  metadata: {name: job-%03d, namespace: %s}\n  spec: {holderIdentity: worker-%03d-%s, leaseDurationSeconds: 15}\n", i, ns, i, strings.Repeat("x", 200))
	}
	before, err := strconv.Atoi(b.text(t, "#count-elections")) // the controller manager's is one
	if err != nil {
		t.Fatal(err)
	}
	s.kubectlStdin(t, list.String(), "apply", "-f", "-")
	b.waitText(t, "#elections-shown", fmt.Sprintf("Showing the first 200 of %d leader elections", before+many), 20*time.Second)
	if rows := b.count(t, "#elections tbody tr"); rows != 200 {
		t.Errorf("%d election rows drawn, want 200", rows)
	}
	s.kubectl(t, "delete", "leases", "--all", "-n", ns)
	b.waitTextGone(t, "#elections-shown", "Showing", 20*time.Second)

	// A restart of the server ends the page's watches; it retries until the
	// server is back and resumes from the last resourceVersion it saw.
	if err := s.stop(); err != nil {
		t.Fatalf("leasehold serve did not stop cleanly: %v", err)
	}
	b.waitText(t, "#connection", "Reconnecting", 10*time.Second)
	b.waitText(t, "#nodes-error", "Cannot reach the server", 10*time.Second)
	s = s.restart(t)
	b.waitText(t, "#connection", "Live", 30*time.Second)
	s.kubectlStdin(t, leaseManifest("after-restart", ns, "worker-c", "  leaseDurationSeconds: 15"), "apply", "-f", "-")
	b.waitRow(t, "#elections", ns, 20*time.Second, func(c []string) bool { return len(c) == 6 && c[1] == "after-restart" && c[2] == "worker-c" })
	for _, id := range []string{"#nodes-error", "#leases-error"} {
		if e := b.text(t, id); e != "" {
			t.Errorf("%s still shows %q once the server is back", id, e)
		}
	}

	// The filter, a reload (the tab keeps its token) and signing out.
	b.do(t, nil, "fill", map[string]any{"selector": "#filter", "value": "web-1"})
	if rows := b.count(t, "#nodes tbody tr"); rows != 1 || b.row(t, "#nodes", "web-1") == nil {
		t.Errorf("filtered by web-1: %d rows, want web-1's alone", rows)
	}
	b.do(t, nil, "reload", nil)
	b.waitText(t, "#user", viewer, 20*time.Second)
	b.waitText(t, "#count-nodes", "2", 20*time.Second)

	// A reload while something in front of the server answers 503: the
	// page keeps the tab's token and tries again, as it does a watch.
	b.do(t, nil, "failNext", map[string]any{"url": "**/apis/authentication.k8s.io/v1/selfsubjectreviews", "status": 503, "times": 2})
	b.do(t, nil, "reload", nil)
	b.waitText(t, "#user", viewer, 20*time.Second)
	var kept *string
	if b.do(t, &kept, "sessionToken", nil); kept == nil {
		t.Error("the tab's token was dropped after a 503 to the sign-in check")
	}

	// A browser whose clock is an hour fast: the ages are the server's.
	b.do(t, nil, "clockAhead", map[string]any{"ms": time.Hour.Milliseconds()})
	b.do(t, nil, "reload", nil)
	b.waitText(t, "#connection", "clock is 60m ahead of the server's", 20*time.Second)
	b.waitRow(t, "#nodes", "web-1", 10*time.Second, func(c []string) bool {
		return len(c) == 6 && strings.HasSuffix(c[2], "s ago") && !strings.Contains(c[2], "m")
	})

	// A phone's width: the tables scroll, the page does not.
	b.do(t, nil, "viewport", map[string]any{"width": 375, "height": 800})
	var overflow int
	if b.do(t, &overflow, "overflow", nil); overflow > 0 {
		t.Errorf("at 375 px the page is %d px wider than the window", overflow)
	}
	b.do(t, nil, "screenshot", map[string]any{"path": filepath.Join(dir, "dashboard-375.png")})
	b.do(t, nil, "viewport", map[string]any{"width": 1280, "height": 900})
	b.do(t, nil, "screenshot", map[string]any{"path": filepath.Join(dir, "dashboard.png")})
	b.do(t, nil, "click", map[string]any{"selector": "#sign-out"})
	var visible bool
	if b.do(t, &visible, "visible", map[string]any{"selector": "#sign-in"}); !visible {
		t.Error("the sign-in form is not shown after signing out")
	}
	if b.do(t, &kept, "sessionToken", nil); kept != nil {
		t.Errorf("the token is still in sessionStorage after signing out")
	}

	// Only the answers the test asked for may show as errors: the 401, the
	// 403s, the 503s and the refused connections while the server
	// restarted. No script error and no Content-Security-Policy violation.
	var problems []string
	b.do(t, &problems, "problems", nil)
	for _, p := range problems {
		if !strings.Contains(p, "Failed to load resource: the server responded with a status of 40") &&
			!strings.Contains(p, "Failed to load resource: the server responded with a status of 503") &&
			!strings.Contains(p, "Failed to load resource: net::ERR_CONNECTION_REFUSED") {
			t.Errorf("browser: %s", p)
		}
	}

	// The page's requests are the viewer's in the audit log.
	eventually(t, 10*time.Second, func() error {
		var verbs []string
		for _, ev := range auditEvents(t, s) {
			if ev.User.Username == viewer && ev.ObjectRef != nil && ev.ObjectRef.Resource == "nodes" && !slices.Contains(verbs, ev.Verb) {
				verbs = append(verbs, ev.Verb)
			}
		}
		if !slices.Contains(verbs, "list") || !slices.Contains(verbs, "watch") {
			return fmt.Errorf("the viewer's audited verbs on nodes: %q, want list and watch", verbs)
		}
		return nil
	})
}

// TestCrossOriginPage calls the API from a web page served elsewhere, as
// a UI of its own would, in the real Chromium: the origin that
// --cors-allowed-origins names gets its answer, after the browser's
// preflight; another origin's page is refused by the browser.
func TestCrossOriginPage(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	dir := t.TempDir()
	page := func() *httptest.Server {
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, "<!doctype html><title>fleet tools</title><p>fleet tools")
		}))
		t.Cleanup(app.Close)
		return app
	}
	allowed, other := page(), page()
	s := serveFor(t, filepath.Join(dir, "data"), "", dir, "--cors-allowed-origins", "^"+regexp.QuoteMeta(allowed.URL)+"$")
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	token := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
	api := s.url() + "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"

	var fetched struct {
		Status      int
		Body, Error string
	}
	b.do(t, nil, "goto", map[string]any{"url": allowed.URL})
	b.do(t, &fetched, "fetchWithToken", map[string]any{"url": api, "token": token})
	if fetched.Status != 200 || !strings.Contains(fetched.Body, `"kind":"LeaseList"`) {
		t.Errorf("GET %s from a page at %s: %+v; want 200 and the LeaseList", api, allowed.URL, fetched)
	}

	fetched.Status, fetched.Body, fetched.Error = 0, "", ""
	b.do(t, nil, "goto", map[string]any{"url": other.URL})
	b.do(t, &fetched, "fetchWithToken", map[string]any{"url": api, "token": token})
	if fetched.Error == "" {
		t.Errorf("GET %s from a page at %s, an origin not allowed: %+v; want the browser to refuse it", api, other.URL, fetched)
	}
	b.do(t, nil, "problems", nil) // the refusal's console errors
}
