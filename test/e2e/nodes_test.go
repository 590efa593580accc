package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// The node heartbeat tests run `leasehold serve` with a short grace period
// and agents with a short lease, so that a dead agent shows within seconds.
const (
	// nodeGrace is the server's --node-monitor-grace-period.
	nodeGrace = 6 * time.Second
	// nodePeriod is the server's --node-monitor-period.
	nodePeriod = time.Second
	// agentLease is every agent's --lease-duration; agents renew every
	// quarter of it.
	agentLease = 4 * time.Second
	// pollMargin is what a kubectl poll may add to a deadline: one kubectl
	// run and one pause between runs on a small, busy machine.
	pollMargin = 2 * time.Second
	// agentStopTimeout bounds how long an agent may take to exit on SIGTERM.
	agentStopTimeout = 5 * time.Second
)

// nodeServeFlags are the serve flags of the node heartbeat tests.
var nodeServeFlags = []string{
	"--node-monitor-grace-period", nodeGrace.String(),
	"--node-monitor-period", nodePeriod.String(),
}

// newNodeServer starts a server with nodeServeFlags and extra on dataDir
// (fresh if listen is empty) and stops it when the test ends.
func newNodeServer(t *testing.T, dataDir, listen, logDir string, extra ...string) *server {
	t.Helper()
	needKubectl(t)
	return serveFor(t, dataDir, listen, logDir, append(slices.Clone(nodeServeFlags), extra...)...)
}

// agentProc is one `leasehold agent` process.
type agentProc struct {
	node       string
	kubeconfig string
	extra      []string // flags beyond the kubeconfig, node name and lease
	logPath    string

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been waited for
	err    error         // the exit error, set before exited closes
	logs   *os.File
}

// startAgent starts `leasehold agent` for node with kubeconfig,
// --lease-duration agentLease, no pressure thresholds unless extra gives
// --eviction-hard, and the extra flags, logging to
// agent-<node>.log in logDir (a restart appends). The test's end stops it
// if it still runs.
func startAgent(t *testing.T, kubeconfig, logDir, node string, extra ...string) *agentProc {
	t.Helper()
	a := &agentProc{node: node, kubeconfig: kubeconfig, extra: extra, logPath: filepath.Join(logDir, "agent-"+node+".log"), exited: make(chan struct{})}
	logs, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	a.logs = logs
	args := []string{"agent", "--kubeconfig", kubeconfig, "--node-name", node, "--lease-duration", agentLease.String()}
	if !slices.Contains(extra, "--eviction-hard") {
		// The taints the tests expect do not depend on how full this
		// machine's disk or memory is.
		args = append(args, "--eviction-hard", "none")
	}
	args = append(args, extra...)
	fmt.Fprintf(logs, "\n=== leasehold %s at %s\n", strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))
	a.cmd = exec.Command(leaseholdBin, args...)
	a.cmd.Stdout, a.cmd.Stderr = logs, logs
	if err := a.cmd.Start(); err != nil {
		logs.Close()
		t.Fatalf("starting leasehold agent: %v", err)
	}
	go func() {
		a.err = a.cmd.Wait()
		a.logs.Close()
		close(a.exited)
	}()
	t.Cleanup(func() {
		if a.running() {
			_ = a.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-a.exited:
			case <-time.After(10 * time.Second):
				_ = a.cmd.Process.Kill()
				<-a.exited
			}
		}
		if t.Failed() {
			t.Log(a.logTail())
		}
	})
	return a
}

// restart starts the agent again with the same flags.
func (a *agentProc) restart(t *testing.T) *agentProc {
	t.Helper()
	if a.running() {
		t.Fatalf("agent %s restarted while it still runs", a.node)
	}
	return startAgent(t, a.kubeconfig, filepath.Dir(a.logPath), a.node, a.extra...)
}

func (a *agentProc) running() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// kill9 kills the agent with SIGKILL and waits for it.
func (a *agentProc) kill9(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 agent %s: %v", a.node, err)
	}
	<-a.exited
}

// term sends SIGTERM and returns how long the agent took to exit, failing
// the test unless it exits with status 0 within agentStopTimeout.
func (a *agentProc) term(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to agent %s: %v", a.node, err)
	}
	select {
	case <-a.exited:
	case <-time.After(agentStopTimeout):
		t.Fatalf("agent %s still running %v after SIGTERM", a.node, agentStopTimeout)
	}
	took := time.Since(start)
	if a.err != nil {
		t.Fatalf("agent %s exited with %v after SIGTERM, want status 0", a.node, a.err)
	}
	return took
}

func (a *agentProc) logTail() string {
	data, err := os.ReadFile(a.logPath)
	if err != nil {
		return fmt.Sprintf("(no agent log: %v)", err)
	}
	const max = 4000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return "--- leasehold agent " + a.node + " log (tail) ---\n" + string(data)
}

// nodesTable runs `kubectl get nodes`, checks its columns and returns each
// node's row by name.
func nodesTable(t *testing.T, s *server) map[string][]string {
	t.Helper()
	header, rows := kubectlRows(t, s, "get", "nodes")
	if want := []string{"NAME", "STATUS", "ROLES", "AGE", "VERSION"}; header != nil && !slices.Equal(header, want) {
		t.Fatalf("kubectl get nodes columns %q, want %q", header, want)
	}
	byName := map[string][]string{}
	for _, r := range rows {
		if len(r) != 5 {
			t.Fatalf("kubectl get nodes row %q has %d fields, want 5", r, len(r))
		}
		byName[r[0]] = r
	}
	return byName
}

// kubectlRows runs a `kubectl get` of a list that spans namespaces (or
// of cluster-scoped objects) and returns its table's header and rows,
// none when kubectl says it found nothing.
func kubectlRows(t *testing.T, s *server, args ...string) (header []string, rows [][]string) {
	t.Helper()
	out, errOut, err := s.runKubectl(t, args...)
	if err != nil {
		t.Fatalf("%s: %v", describeRun(args, out, errOut), err)
	}
	if out == "" && strings.TrimSpace(errOut) == "No resources found" {
		return nil, nil
	}
	if out == "" {
		t.Fatalf("kubectl %s printed no table; its stderr:\n%s", strings.Join(args, " "), errOut)
	}
	return tableRows(t, out)
}

// nodeStatus is a node's STATUS column, "" when kubectl does not list it.
func nodeStatus(t *testing.T, s *server, node string) string {
	t.Helper()
	if r := nodesTable(t, s)[node]; r != nil {
		return r[1]
	}
	return ""
}

// waitNodeStatus polls `kubectl get nodes` until node shows status and
// returns how long that took.
func waitNodeStatus(t *testing.T, s *server, node, status string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, timeout, func() error {
		if got := nodeStatus(t, s, node); got != status {
			return fmt.Errorf("node %s STATUS %q, want %q", node, got, status)
		}
		return nil
	})
	return time.Since(start)
}

// nodeUID is the node's metadata.uid, read with kubectl.
func nodeUID(t *testing.T, s *server, node string) types.UID {
	t.Helper()
	uid := s.kubectl(t, "get", "node", node, "-o", "jsonpath={.metadata.uid}")
	if uid == "" {
		t.Fatalf("node %s has no uid", node)
	}
	return types.UID(uid)
}

// leaseOrNil reads a lease with kubectl; nil when it does not exist.
func leaseOrNil(t *testing.T, s *server, namespace, name string) *coordinationv1.Lease {
	t.Helper()
	out, errOut, err := s.runKubectl(t, "get", "lease", name, "-n", namespace, "-o", "json")
	if err != nil {
		if strings.Contains(errOut, "(NotFound)") {
			return nil
		}
		t.Fatalf("%s: %v", describeRun([]string{"get", "lease", name, "-n", namespace, "-o", "json"}, out, errOut), err)
	}
	var l coordinationv1.Lease
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("decoding kubectl get lease -o json: %v\n%s", err, out)
	}
	return &l
}

// nodeOwnerRef is the ownerReference the agent gives a node's lease: the
// kubelet's, with neither controller nor blockOwnerDeletion.
func nodeOwnerRef(node string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}
}

// describeField returns the values of a top-level field of `kubectl
// describe` output ("Taints"), one per line.
func describeField(out, field string) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		rest, ok := strings.CutPrefix(l, field+":")
		if !ok {
			continue
		}
		vals := []string{strings.TrimSpace(rest)}
		for _, c := range lines[i+1:] {
			if c == "" || (c[0] != ' ' && c[0] != '\t') {
				break
			}
			vals = append(vals, strings.TrimSpace(c))
		}
		return vals
	}
	return nil
}

// hasNodeEvent tells whether `kubectl get events -A` lists an event with
// reason about node.
func hasNodeEvent(t *testing.T, s *server, node, reason string) bool {
	t.Helper()
	// Events are written in the background, and those not yet written
	// when the controllers' term ends are dropped, as in Kubernetes: there
	// may be none.
	_, rows := kubectlRows(t, s, "get", "events", "-A")
	for _, r := range rows {
		// NAMESPACE LAST-SEEN TYPE REASON OBJECT MESSAGE…
		if len(r) >= 5 && r[3] == reason && r[4] == "node/"+node {
			return true
		}
	}
	return false
}

// agentRebootedRE matches the agent's Rebooted event in kubectl describe's
// events: TYPE, REASON, AGE, FROM, then MESSAGE.
var agentRebootedRE = regexp.MustCompile(`Warning +Rebooted +\S+ +leasehold-agent +Node \S+ has been rebooted, boot id: `)

// unreachableTaints are the taints of a node whose lease went stale, as
// `kubectl describe node` lists them.
var unreachableTaints = []string{
	"node.kubernetes.io/unreachable:NoExecute",
	"node.kubernetes.io/unreachable:NoSchedule",
}

// TestNodeHeartbeats runs three agents against a server with a 6s grace
// period, checks their nodes and leases as kubectl shows them, kills one
// agent with SIGKILL and watches its node go NotReady with the unreachable
// taints, starts it again and watches it come back, and finally stops every
// agent with SIGTERM.
// TestNodeHeartbeats runs with Nodes in the watch cache, as by default,
// and served from etcd alone (--watch-cache-sizes nodes#0), where the node
// lifecycle controller keeps a summary of each node instead of the node.
func TestNodeHeartbeats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"cached", nil},
		{"from etcd", []string{"--watch-cache-sizes", "nodes#0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testNodeHeartbeats(t, tc.flags...)
		})
	}
}

func testNodeHeartbeats(t *testing.T, serveFlags ...string) {
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir, serveFlags...)
	names := []string{"hb-node-1", "hb-node-2", "hb-node-3"}
	agents := map[string]*agentProc{}
	for i, n := range names {
		var extra []string
		if i == 0 {
			extra = []string{"--report-capacity"}
		}
		agents[n] = startAgent(t, s.kubeconfig, dir, n, extra...)
	}

	start := time.Now()
	eventually(t, 30*time.Second, func() error {
		rows := nodesTable(t, s)
		for _, n := range names {
			r := rows[n]
			if r == nil || r[1] != "Ready" {
				return fmt.Errorf("node %s row %q, want STATUS Ready", n, r)
			}
		}
		return nil
	})
	t.Logf("three nodes Ready %v after their agents started", time.Since(start).Round(time.Millisecond))
	rows := nodesTable(t, s)
	if len(rows) != len(names) {
		t.Errorf("kubectl get nodes lists %d nodes, want %d: %q", len(rows), len(names), rows)
	}
	for _, n := range names {
		r := rows[n]
		if r[2] != "<none>" || !ageRE.MatchString(r[3]) || !strings.HasPrefix(r[4], "v") {
			t.Errorf("kubectl get nodes row %q, want NAME Ready <none> AGE vVERSION", r)
		}
	}

	// Each agent creates its lease after it registers its node Ready.
	eventually(t, 10*time.Second, func() error {
		if _, rows := kubectlRows(t, s, "get", "lease", "-n", "kube-node-lease"); len(rows) < len(names) {
			return fmt.Errorf("%d node leases, want %d", len(rows), len(names))
		}
		return nil
	})
	out := s.kubectl(t, "get", "lease", "-n", "kube-node-lease")
	header, leaseRows := tableRows(t, out)
	if want := []string{"NAME", "HOLDER", "AGE"}; !slices.Equal(header, want) {
		t.Fatalf("kubectl get lease columns %q, want %q\n%s", header, want, out)
	}
	if len(leaseRows) != len(names) {
		t.Errorf("kubectl get lease -n kube-node-lease lists %d leases, want one per node (%d)\n%s", len(leaseRows), len(names), out)
	}
	for _, n := range names {
		if r := rowNamed(leaseRows, 0, n); len(r) != 3 || r[1] != n || !ageRE.MatchString(r[2]) {
			t.Errorf("lease row for %s: %q, want NAME %s HOLDER %s AGE\n%s", n, r, n, n, out)
		}
	}

	// With --report-capacity, the host's capacity, as the kubelet posts
	// it; allocatable the same, as these agents have no eviction
	// thresholds (--eviction-hard none). Without, none.
	resources := "jsonpath={.status.capacity.cpu} {.status.capacity.memory} {.status.allocatable.memory} {.status.allocatable.ephemeral-storage}"
	capacity := s.kubectl(t, "get", "node", names[0], "-o", resources)
	if f := strings.Fields(capacity); len(f) != 4 || f[0] != strconv.Itoa(runtime.NumCPU()) || f[1] != f[2] || strings.HasPrefix(f[3], "0") {
		t.Errorf("node %s: cpu, memory, allocatable memory and ephemeral-storage %q; want %d CPUs and all memory allocatable", names[0], capacity, runtime.NumCPU())
	}
	if capacity := s.kubectl(t, "get", "node", names[2], "-o", resources); strings.TrimSpace(capacity) != "" {
		t.Errorf("node %s, without --report-capacity: %q", names[2], capacity)
	}

	// One lease in full: owned by its Node, 4s, freshly renewed.
	node := names[0]
	uid := nodeUID(t, s, node)
	before := time.Now()
	out = s.kubectl(t, "get", "lease", "-n", "kube-node-lease", node, "-o", "yaml")
	after := time.Now()
	var l coordinationv1.Lease
	if err := yaml.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("decoding kubectl get lease -o yaml: %v\n%s", err, out)
	}
	if want := []metav1.OwnerReference{nodeOwnerRef(node, uid)}; !reflect.DeepEqual(l.OwnerReferences, want) {
		t.Errorf("lease ownerReferences %+v, want %+v\n%s", l.OwnerReferences, want, out)
	}
	if strings.Contains(out, "controller:") || strings.Contains(out, "blockOwnerDeletion:") {
		t.Errorf("lease's ownerReference sets controller or blockOwnerDeletion; the kubelet sets neither\n%s", out)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != int32(agentLease/time.Second) {
		t.Errorf("leaseDurationSeconds %v, want %d\n%s", l.Spec.LeaseDurationSeconds, agentLease/time.Second, out)
	}
	if holder(&l) != node {
		t.Errorf("holderIdentity %q, want %q", holder(&l), node)
	}
	if l.Spec.RenewTime == nil {
		t.Fatalf("lease has no renewTime\n%s", out)
	}
	// The agent renews every second, so a renewal may land while kubectl
	// starts up (seconds on a busy machine): anywhere up to its return.
	if age := before.Sub(l.Spec.RenewTime.Time); age > agentLease || l.Spec.RenewTime.After(after) {
		t.Errorf("renewTime %v is %v before kubectl ran (which returned %v after it started), want a renewal within the lease duration %v and none after kubectl returned",
			l.Spec.RenewTime.Time, age, after.Sub(before), agentLease)
	}
	first := l.Spec.RenewTime.Time
	eventually(t, agentLease, func() error {
		got := leaseOrNil(t, s, "kube-node-lease", node)
		if got == nil || got.Spec.RenewTime == nil || !got.Spec.RenewTime.After(first) {
			return fmt.Errorf("lease %s not renewed since %v", node, first)
		}
		return nil
	})

	// kill -9: NotReady within grace + period, never before grace minus a
	// renew interval, the others stay Ready.
	victim := names[1]
	victimUID := nodeUID(t, s, victim)
	agents[victim].kill9(t)
	killed := time.Now()
	eventually(t, nodeGrace+nodePeriod+pollMargin, func() error {
		rows := nodesTable(t, s)
		for _, n := range names {
			if n != victim && (rows[n] == nil || rows[n][1] != "Ready") {
				t.Fatalf("node %s, whose agent runs, shows %q while waiting for %s to go NotReady", n, rows[n], victim)
			}
		}
		if r := rows[victim]; r == nil || r[1] != "NotReady" {
			return fmt.Errorf("node %s row %q, want STATUS NotReady", victim, r)
		}
		return nil
	})
	delay := time.Since(killed)
	t.Logf("node %s NotReady %v after kill -9 of its agent (grace %v, period %v)", victim, delay.Round(time.Millisecond), nodeGrace, nodePeriod)
	if early := nodeGrace - agentLease/4 - time.Second; delay < early {
		t.Errorf("node %s went NotReady %v after its agent died, before the grace period %v less a renew interval could have passed", victim, delay, nodeGrace)
	}
	eventually(t, 5*time.Second, func() error {
		out := s.kubectl(t, "describe", "node", victim)
		got := describeField(out, "Taints")
		slices.Sort(got)
		if !slices.Equal(got, unreachableTaints) {
			return fmt.Errorf("kubectl describe node %s: Taints %q, want %q\n%s", victim, got, unreachableTaints, out)
		}
		if !strings.Contains(out, "NodeStatusUnknown") {
			return fmt.Errorf("kubectl describe node %s shows no Ready=Unknown condition with reason NodeStatusUnknown\n%s", victim, out)
		}
		return nil
	})
	eventually(t, 5*time.Second, func() error {
		if !hasNodeEvent(t, s, victim, "NodeNotReady") {
			return fmt.Errorf("kubectl get events -A shows no NodeNotReady event for node/%s", victim)
		}
		// The controller's events name the node by its uid, as Kubernetes'
		// do: describe finds them by it.
		uid := s.kubectl(t, "get", "node", victim, "-o", "jsonpath={.metadata.uid}")
		if out := s.kubectl(t, "get", "events", "--field-selector", "involvedObject.uid="+uid, "-o", "jsonpath={.items[*].reason}"); !strings.Contains(out, "NodeNotReady") {
			return fmt.Errorf("events about node %s by its uid %s: %q, want NodeNotReady among them", victim, uid, out)
		}
		if out := s.kubectl(t, "describe", "node", victim); !regexp.MustCompile(`Normal +NodeNotReady +\S+ +node-controller +Node ` + victim + ` status is now: NodeNotReady`).MatchString(out) {
			return fmt.Errorf("kubectl describe node %s lists no NodeNotReady event from node-controller\n%s", victim, out)
		}
		return nil
	})

	// Start it again, as if its machine had booted meanwhile: Ready, the
	// same Node, taints gone, NodeReady, and the agent's Rebooted.
	s.kubectl(t, "patch", "node", victim, "--subresource=status", "--type", "merge", "-p", `{"status":{"nodeInfo":{"bootID":"an-earlier-boot"}}}`)
	agents[victim] = agents[victim].restart(t)
	back := waitNodeStatus(t, s, victim, "Ready", 15*time.Second)
	t.Logf("node %s Ready %v after its agent started again", victim, back.Round(time.Millisecond))
	if got := nodeUID(t, s, victim); got != victimUID {
		t.Errorf("node %s uid %s after the agent restarted, want the node it had (%s)", victim, got, victimUID)
	}
	eventually(t, 5*time.Second, func() error {
		out := s.kubectl(t, "describe", "node", victim)
		if got := describeField(out, "Taints"); !slices.Equal(got, []string{"<none>"}) {
			return fmt.Errorf("kubectl describe node %s: Taints %q, want <none>\n%s", victim, got, out)
		}
		return nil
	})
	eventually(t, 5*time.Second, func() error {
		if !hasNodeEvent(t, s, victim, "NodeReady") {
			return fmt.Errorf("kubectl get events -A shows no NodeReady event for node/%s", victim)
		}
		return nil
	})
	// The agent's own Rebooted warning, among the node's events as
	// kubectl describe node lists them.
	eventually(t, 5*time.Second, func() error {
		out := s.kubectl(t, "describe", "node", victim)
		if !agentRebootedRE.MatchString(out) {
			return fmt.Errorf("kubectl describe node %s lists no Rebooted warning from leasehold-agent\n%s", victim, out)
		}
		return nil
	})

	// SIGTERM: every agent exits with status 0 at once.
	for _, n := range names {
		took := agents[n].term(t)
		t.Logf("agent %s exited 0 %v after SIGTERM", n, took.Round(time.Millisecond))
	}
}

// TestNodeDeleteReregisters deletes a node while its agent runs: the garbage
// collector deletes the node's lease, and the agent registers the node again
// and creates a new lease owned by the new node, without a restart.
func TestNodeDeleteReregisters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir)
	const node = "del-node"
	a := startAgent(t, s.kubeconfig, dir, node)
	waitNodeStatus(t, s, node, "Ready", 30*time.Second)
	oldNode := nodeUID(t, s, node)
	var oldLease types.UID
	eventually(t, 10*time.Second, func() error {
		l := leaseOrNil(t, s, "kube-node-lease", node)
		if l == nil || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != oldNode {
			return fmt.Errorf("lease %s: %+v, want one owned by node uid %s", node, l, oldNode)
		}
		oldLease = l.UID
		return nil
	})

	if got, want := strings.TrimSpace(s.kubectl(t, "delete", "node", node)), fmt.Sprintf("node %q deleted", node); got != want {
		t.Fatalf("kubectl delete node printed %q, want %q", got, want)
	}
	deleted := time.Now()
	// The agent may create the new lease at once, so "gone" means no lease
	// with the old uid. The garbage collector takes well under a second
	// (logged below); the bound leaves room for slow kubectl runs.
	eventually(t, 15*time.Second, func() error {
		if l := leaseOrNil(t, s, "kube-node-lease", node); l != nil && l.UID == oldLease {
			return fmt.Errorf("lease %s (uid %s) of the deleted node still exists, owned by %+v", node, oldLease, l.OwnerReferences)
		}
		return nil
	})
	t.Logf("lease of the deleted node gone %v after kubectl delete node", time.Since(deleted).Round(time.Millisecond))

	var newNode types.UID
	eventually(t, 20*time.Second, func() error {
		if nodeStatus(t, s, node) != "Ready" {
			return fmt.Errorf("node %s not listed as Ready", node)
		}
		newNode = nodeUID(t, s, node)
		if newNode == oldNode {
			return fmt.Errorf("node %s still has the deleted node's uid %s", node, oldNode)
		}
		l := leaseOrNil(t, s, "kube-node-lease", node)
		if l == nil {
			return fmt.Errorf("no lease %s yet", node)
		}
		if want := []metav1.OwnerReference{nodeOwnerRef(node, newNode)}; !reflect.DeepEqual(l.OwnerReferences, want) {
			return fmt.Errorf("lease %s ownerReferences %+v, want %+v", node, l.OwnerReferences, want)
		}
		if l.UID == oldLease {
			return fmt.Errorf("lease %s is still the old one (uid %s)", node, oldLease)
		}
		if holder(l) != node {
			return fmt.Errorf("lease %s holder %q, want %q", node, holder(l), node)
		}
		return nil
	})
	t.Logf("node %s registered again (uid %s → %s) with a new lease %v after kubectl delete node", node, oldNode, newNode, time.Since(deleted).Round(time.Millisecond))
	if !a.running() {
		t.Fatalf("agent exited (%v); it should have re-registered while running", a.err)
	}
}

// TestAgentStartedBeforeServer starts an agent while no server listens on
// the address in its kubeconfig: it keeps retrying and registers once the
// server is up. SIGTERM then stops it with status 0; it deletes nothing, and
// its node goes NotReady because the renewals stopped.
func TestAgentStartedBeforeServer(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	// A first start writes the certificates and admin.kubeconfig the agent
	// needs; then the server goes away.
	first, err := startServer(dataDir, "", dir, nodeServeFlags...)
	if err != nil {
		t.Fatalf("starting leasehold serve: %v", err)
	}
	if err := first.stop(); err != nil {
		t.Fatalf("leasehold serve did not stop cleanly: %v\n%s", err, first.logTail())
	}
	if c, err := net.DialTimeout("tcp", first.listen, time.Second); err == nil {
		c.Close()
		t.Fatalf("something still listens on %s", first.listen)
	}

	const node = "early-node"
	a := startAgent(t, first.kubeconfig, dir, node)
	const failures = 3 // 200ms, 400ms, 800ms of backoff
	eventually(t, 15*time.Second, func() error {
		if !a.running() {
			t.Fatalf("agent exited (%v) while the server was down; want it to keep retrying", a.err)
		}
		data, err := os.ReadFile(a.logPath)
		if err != nil {
			return err
		}
		if n := strings.Count(string(data), "heartbeat failed, will retry"); n < failures {
			return fmt.Errorf("agent logged %d failed heartbeats, want %d", n, failures)
		}
		return nil
	})

	s := newNodeServer(t, dataDir, first.listen, dir)
	up := time.Now()
	waitNodeStatus(t, s, node, "Ready", 20*time.Second)
	t.Logf("node %s Ready %v after the server became ready", node, time.Since(up).Round(time.Millisecond))
	uid := nodeUID(t, s, node)
	eventually(t, 5*time.Second, func() error {
		l := leaseOrNil(t, s, "kube-node-lease", node)
		if l == nil {
			return fmt.Errorf("no lease %s", node)
		}
		if want := []metav1.OwnerReference{nodeOwnerRef(node, uid)}; !reflect.DeepEqual(l.OwnerReferences, want) {
			return fmt.Errorf("lease %s ownerReferences %+v, want %+v", node, l.OwnerReferences, want)
		}
		return nil
	})

	took := a.term(t)
	t.Logf("agent exited 0 %v after SIGTERM", took.Round(time.Millisecond))
	stopped := time.Now()
	eventually(t, nodeGrace+nodePeriod+pollMargin+agentLease/4, func() error {
		if got := nodeStatus(t, s, node); got != "NotReady" {
			if got == "" {
				t.Fatalf("node %s is gone after its agent stopped; the agent should delete nothing", node)
			}
			return fmt.Errorf("node %s STATUS %q, want NotReady once renewals stopped", node, got)
		}
		return nil
	})
	t.Logf("node %s NotReady %v after its agent stopped", node, time.Since(stopped).Round(time.Millisecond))
	if leaseOrNil(t, s, "kube-node-lease", node) == nil {
		t.Errorf("lease %s is gone after its agent stopped; the agent should delete nothing", node)
	}
}

// nodeReplicas starts two replicas of the node tests' server on one etcd
// member, with the extra flags, sharing a data directory (so one CA and
// one admin token), and an agent for node given both, a first.
func nodeReplicas(t *testing.T, node string, extra ...string) (a, b *server, ag *agentProc) {
	t.Helper()
	needKubectl(t)
	dir := t.TempDir()
	rs := sharedReplicas(t, dir, 2, append(slices.Clone(nodeServeFlags), extra...)...)
	a, b = rs[0], rs[1]
	ag = startAgent(t, a.kubeconfig, dir, node, "--server", a.url(), "--server", b.url())
	return a, b, ag
}

// TestAgentLeavesAFrozenServer: an agent given two servers leaves one that
// stops answering with its connections open (a frozen machine, a
// partition) in time to keep its lease from lapsing: each request gets the
// renew interval, as the kubelet's heartbeat client does. Without a
// timeout it stayed until HTTP/2's health check closed the connection,
// some 45 s later.
func TestAgentLeavesAFrozenServer(t *testing.T) {
	t.Parallel()
	const node = "frozen-server-node"
	a, b, ag := nodeReplicas(t, node)
	// admin.kubeconfig names the replica that wrote it last: go to b.
	cfg, err := b.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Timeout = b.url(), 5*time.Second
	leases := kubernetes.NewForConfigOrDie(cfg).CoordinationV1().Leases("kube-node-lease")
	renewTime := func() time.Time {
		l, err := leases.Get(context.Background(), node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	eventually(t, 20*time.Second, func() error {
		if renewTime().IsZero() {
			return fmt.Errorf("no renewed lease %s yet", node)
		}
		return nil
	})

	if err := a.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.signal(syscall.SIGCONT) })
	before := renewTime() // a frozen server renews nothing after this
	var after time.Time
	eventually(t, 60*time.Second, func() error {
		if after = renewTime(); !after.After(before) {
			return fmt.Errorf("lease %s not renewed since %v", node, before)
		}
		return nil
	})
	gap := after.Sub(before)
	if gap >= agentLease {
		t.Errorf("the lease went %v without a renewal when its server froze; its duration is %v", gap, agentLease)
	}
	t.Logf("renewed through the other server %v after the last renewal seen before the freeze", gap.Round(time.Millisecond))
	if data, _ := os.ReadFile(ag.logPath); !strings.Contains(string(data), "server unavailable, switching to the next one") {
		t.Errorf("the agent's log does not say it switched servers:\n%s", data)
	}
}

// readyAgents starts an agent (startAgent, no extra flags) for each of
// nodes against s, logging to dir, and waits until every node is Ready.
func readyAgents(t *testing.T, s *server, dir string, nodes ...string) map[string]*agentProc {
	t.Helper()
	agents := map[string]*agentProc{}
	for _, n := range nodes {
		agents[n] = startAgent(t, s.kubeconfig, dir, n)
	}
	for _, n := range nodes {
		waitNodeStatus(t, s, n, "Ready", 30*time.Second+pollMargin)
	}
	return agents
}

// TestServerAwayBlamesNoNode takes the only server away from its running
// agents for longer than the grace period, twice: stopped (SIGSTOP, as a
// stalled machine would be), then killed (SIGKILL) and started again only
// later. Its node lifecycle controller could see no renewal meanwhile, and
// the agents could make none: when the server runs again no node may be
// marked NotReady for it, and the nodes are watched as before from then.
func TestServerAwayBlamesNoNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir)
	nodes := []string{"server-away-a", "server-away-b", "server-away-c"}
	agents := readyAgents(t, s, dir, nodes...)
	// Longer than the grace period, shorter than the controllers' term
	// lasts without a renewal (RenewDeadline, 10 s): the elector does not
	// end the term when the server runs again, so nothing but the node
	// lifecycle controller itself keeps it from judging the silence.
	const away = nodeGrace + nodePeriod
	if err := s.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(away) // the fault itself; nothing is timed
	if err := s.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	readyThrough(t, s, nodes, "ran again", time.Now())
	if log, _ := os.ReadFile(s.logPath); !strings.Contains(string(log), "every node gets a fresh grace period") {
		t.Errorf("the server's log does not say it noticed it had not run")
	}

	// The killed process still holds the controllers' Lease, so the new
	// one runs them only once it has seen the Lease unrenewed for its
	// duration (15 s); its node lifecycle controller starts with a fresh
	// grace period for every node, as Kubernetes' does.
	killed := controllersIdentity(s)
	s.kill()
	time.Sleep(away)
	s = s.restart(t)
	eventually(t, time.Minute, func() error {
		if controllersIdentity(s) == killed {
			return errors.New("the restarted server does not run the controllers yet")
		}
		return nil
	})
	readyThrough(t, s, nodes, "was started again and took the controllers' Lease", time.Now())

	// A node that dies after that is still marked.
	agents[nodes[0]].kill9(t)
	waitNodeStatus(t, s, nodes[0], "NotReady", nodeGrace+nodePeriod+agentLease+pollMargin)
}

// readyThrough checks that every one of nodes stays Ready for a grace
// period and more after back, when the server's fault (what) ended, and
// that the server marked none Unknown.
func readyThrough(t *testing.T, s *server, nodes []string, what string, back time.Time) {
	t.Helper()
	for time.Since(back) < nodeGrace+2*nodePeriod {
		table := nodesTable(t, s)
		for _, n := range nodes {
			if r := table[n]; r == nil || r[1] != "Ready" {
				log, _ := os.ReadFile(s.logPath)
				t.Fatalf("node %s is %q %v after the server %s, want Ready; the server's log of it:\n%s", n, r, time.Since(back).Round(time.Millisecond), what, grepLines(string(log), n))
			}
		}
		time.Sleep(nodePeriod)
	}
	log, _ := os.ReadFile(s.logPath)
	if marked := grepLines(string(log), "node marked Unknown"); marked != "" {
		t.Errorf("the server marked nodes Unknown after it %s:\n%s", what, marked)
	}
	for _, n := range nodes {
		if hasNodeEvent(t, s, n, "NodeNotReady") {
			t.Errorf("node %s has a NodeNotReady event after the server %s", n, what)
		}
	}
}

// TestControllersMoveToAnotherReplica runs two replicas on one etcd and
// kills the one that runs the controllers (SIGKILL): the other takes the
// controllers' Lease and runs them, the agent (which goes on through the
// survivor) keeps its node Ready through the gap, and the new leader marks
// the node once its agent dies.
//
// With --node-lease-checkpoint-interval the same holds, though only every
// other renewal of the agent's (every 1 s, of a 4 s lease) reaches etcd:
// the checkpoints (at least every 2 s, half the lease) are what the
// survivor's controllers see.
func TestControllersMoveToAnotherReplica(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, node string
		flags      []string
	}{
		{"every renewal written", "moving-controllers-node", nil},
		{"renewals between checkpoints", "moving-checkpoints-node", []string{"--node-lease-checkpoint-interval", (nodeGrace / 2).String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testControllersMoveToAnotherReplica(t, tc.node, tc.flags...)
		})
	}
}

func testControllersMoveToAnotherReplica(t *testing.T, node string, flags ...string) {
	a, b, ag := nodeReplicas(t, node, flags...)
	leader, other := controllersReplica(t, a, b)
	leads := controllersIdentity
	// kubectl goes to the survivor.
	toItself(t, other)
	waitNodeStatus(t, other, node, "Ready", 30*time.Second)
	if len(flags) > 0 {
		// Some of the agent's renewals were answered without a write, by
		// a (which it tries first) or b.
		toItself(t, leader)
		eventually(t, 10*time.Second, func() error {
			if n := deferredRenewals(t, a) + deferredRenewals(t, b); n == 0 {
				return errors.New("no renewal answered without a write yet")
			}
			return nil
		})
	}

	leader.kill()
	killed := time.Now()
	var identity string
	eventually(t, time.Minute, func() error {
		if identity = leads(other); identity == "" {
			return errors.New("the surviving replica does not run the controllers")
		}
		return nil
	})
	t.Logf("the surviving replica runs the controllers %v after the kill", time.Since(killed).Round(time.Millisecond))
	if got := other.kubectl(t, "get", "lease", "-n", "kube-system", "leasehold-controller-manager", "-o", "jsonpath={.spec.holderIdentity}"); got != identity {
		t.Errorf("the controllers' Lease is held by %q, want the survivor, %q", got, identity)
	}
	// Which replica leads shows in its metrics, as kube-controller-manager
	// shows it, and the controllers' holder is the replica's identity
	// Lease's.
	if m := other.kubectl(t, "get", "--raw", "/metrics"); !strings.Contains(m, "\nleader_election_master_status{name=\"leasehold-controller-manager\"} 1\n") {
		t.Error("the survivor's /metrics lacks leader_election_master_status 1")
	}
	holders := other.kubectl(t, "get", "lease", "-n", "kube-system", "-l", "apiserver.kubernetes.io/identity", "-o", "jsonpath={.items[*].spec.holderIdentity}")
	if !slices.Contains(strings.Fields(holders), identity) {
		t.Errorf("identity Leases held by %q; want one the controllers' holder's, %q", holders, identity)
	}
	// The controllers were away for longer than the grace period: the new
	// leader gives the node a fresh one, which its renewals through the
	// survivor keep.
	took := time.Now()
	for time.Since(took) < nodeGrace+2*nodePeriod {
		if got := nodeStatus(t, other, node); got != "Ready" {
			t.Fatalf("node %s is %q %v after the survivor took the controllers, want Ready", node, got, time.Since(took).Round(time.Millisecond))
		}
		time.Sleep(nodePeriod)
	}
	if hasNodeEvent(t, other, node, "NodeNotReady") {
		t.Errorf("node %s has a NodeNotReady event", node)
	}

	ag.kill9(t)
	waitNodeStatus(t, other, node, "NotReady", nodeGrace+nodePeriod+agentLease+pollMargin)
}

// deferredRenewals is s's leasehold_node_lease_renewals_deferred_total.
func deferredRenewals(t *testing.T, s *server) float64 {
	t.Helper()
	for line := range strings.Lines(s.kubectl(t, "get", "--raw", "/metrics")) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "leasehold_node_lease_renewals_deferred_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("leasehold_node_lease_renewals_deferred_total %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("/metrics has no leasehold_node_lease_renewals_deferred_total")
	return 0
}

// controllersIdentity is the identity with which the server s last took
// the controllers' Lease, as its log (kept across restarts) says; "" if it
// has not.
func controllersIdentity(s *server) string {
	log, _ := os.ReadFile(s.logPath)
	if m := leadingLine.FindAllSubmatch(log, -1); m != nil {
		return string(m[len(m)-1][1])
	}
	return ""
}

// controllersReplica waits until one of a and b runs the controllers, and
// returns it and the other.
func controllersReplica(t *testing.T, a, b *server) (leader, other *server) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		switch {
		case controllersIdentity(a) != "":
			leader, other = a, b
		case controllersIdentity(b) != "":
			leader, other = b, a
		default:
			return errors.New("no replica runs the controllers yet")
		}
		return nil
	})
	return leader, other
}

// takesControllers waits until s runs the controllers after the fault
// (what) at since, and fails the test if node is not Ready through s
// meanwhile.
func takesControllers(t *testing.T, s *server, node, what string, since time.Time) {
	t.Helper()
	eventually(t, time.Minute, func() error {
		if got := nodeStatus(t, s, node); got != "Ready" {
			t.Fatalf("node %s is %q %v after the %s, want Ready", node, got, time.Since(since).Round(time.Millisecond), what)
		}
		if controllersIdentity(s) == "" {
			return errors.New("the other replica does not run the controllers")
		}
		return nil
	})
}

var leadingLine = regexp.MustCompile(`msg="leading: starting controllers" identity=(\S+)`)

// toItself points s's kubeconfig at s: admin.kubeconfig names the replica
// that wrote it last.
func toItself(t *testing.T, s *server) {
	t.Helper()
	s.kubeconfig = writeKubeconfig(t, s, func(c *clientcmdapi.Config) {
		for _, cl := range c.Clusters {
			cl.Server = s.url()
		}
	})
}

// TestFrozenControllersReplica: the replica that runs the controllers is
// stopped (SIGSTOP) for longer than the controllers' LeaseDuration while
// another runs. The other takes the controllers' Lease, and the agent goes
// on through it. When the stopped replica runs again its term is over:
// it says so, and the Lease stays the other's. What it saw before it
// stopped is stale by then, and any write it makes on it fails its
// precondition: the other replica's identity Lease (5 s long, so stale to
// the stopped replica's collector) is still the same object. The node
// stays Ready throughout, with no NodeNotReady event.
func TestFrozenControllersReplica(t *testing.T) {
	t.Parallel()
	const node = "frozen-controllers-node"
	a, b, ag := nodeReplicas(t, node, "--identity-lease-duration", "5s", "--identity-lease-renew-interval", "1s")
	leader, other := controllersReplica(t, a, b)
	toItself(t, other)
	waitNodeStatus(t, other, node, "Ready", 30*time.Second)
	published := regexp.MustCompile(`msg="publishing this replica's identity" lease=kube-system/(\S+)`)
	log, _ := os.ReadFile(other.logPath)
	m := published.FindSubmatch(log)
	if m == nil {
		t.Fatalf("the other replica's log does not name its identity Lease:\n%s", log)
	}
	identityUID := func() string {
		return other.kubectl(t, "get", "lease", "-n", "kube-system", string(m[1]), "-o", "jsonpath={.metadata.uid}")
	}
	uid := identityUID()

	if err := leader.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.signal(syscall.SIGCONT) })
	stopped := time.Now()
	takesControllers(t, other, node, "stop", stopped)
	identity := controllersIdentity(other)
	// Past the Lease's duration and the identity Leases', a little more.
	time.Sleep(time.Until(stopped.Add(20 * time.Second)))
	if err := leader.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	readyThrough(t, other, []string{node}, "was stopped and ran again", time.Now())
	if thawed, _ := os.ReadFile(leader.logPath); !strings.Contains(string(thawed), "term over: controllers stopped") {
		t.Errorf("the replica that ran again does not say its term is over:\n%s", grepLines(string(thawed), "controller"))
	}
	if got := other.kubectl(t, "get", "lease", "-n", "kube-system", "leasehold-controller-manager", "-o", "jsonpath={.spec.holderIdentity}"); got != identity {
		t.Errorf("the controllers' Lease is held by %q, want %q", got, identity)
	}
	if got := identityUID(); got != uid {
		t.Errorf("the other replica's identity Lease is a new object (uid %s, was %s): it was deleted", got, uid)
	}

	ag.kill9(t)
	waitNodeStatus(t, other, node, "NotReady", nodeGrace+nodePeriod+agentLease+pollMargin)
}

// TestReplicaCutOffFromEtcd: the replica that runs the controllers loses
// its way to etcd (a proxy between them drops everything both ways, as a
// partition does, with the connections open) while another replica
// reaches it. The cut-off replica fails /readyz for etcd; the agent, given
// both, moves to the other; the other takes the controllers' Lease once
// the cut-off replica's term has lapsed; the node stays Ready throughout,
// with no NodeNotReady event. Once the way is back the cut-off replica is
// ready again, and a node whose agent dies is still marked.
func TestReplicaCutOffFromEtcd(t *testing.T) {
	t.Parallel()
	const node = "cut-off-replica-node"
	dir := t.TempDir()
	etcdURL := startEtcdMember(t, dir)
	to, err := url.Parse(etcdURL)
	if err != nil {
		t.Fatal(err)
	}
	from := freeAddrs(t, 1)[0]
	way := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: url.URL{Scheme: "tcp", Host: from}, To: url.URL{Scheme: "tcp", Host: to.Host}})
	t.Cleanup(func() { _ = way.Close() })
	select {
	case <-way.Ready():
	case err := <-way.Error():
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	a := newNodeServer(t, dataDir, "", dir, "--etcd-servers", "http://"+from)
	eventually(t, 30*time.Second, func() error {
		if controllersIdentity(a) == "" {
			return errors.New("the first replica does not run the controllers yet")
		}
		return nil
	})
	b := newNodeServer(t, dataDir, "", t.TempDir(), "--etcd-servers", etcdURL)
	toItself(t, b)
	ag := startAgent(t, b.kubeconfig, dir, node, "--server", a.url(), "--server", b.url())
	waitNodeStatus(t, b, node, "Ready", 30*time.Second)

	way.BlackholeTx()
	way.BlackholeRx()
	cut := time.Now()
	eventually(t, time.Minute, func() error {
		if err := a.readyz(); err == nil || !strings.Contains(err.Error(), "[-]etcd failed") {
			return fmt.Errorf("/readyz of the cut-off replica: %v; want the etcd check failed", err)
		}
		return nil
	})
	takesControllers(t, b, node, "cut", cut)
	t.Logf("the other replica runs the controllers %v after the cut", time.Since(cut).Round(time.Millisecond))
	readyThrough(t, b, []string{node}, "took the controllers", time.Now())
	if log, _ := os.ReadFile(ag.logPath); !strings.Contains(string(log), "server unavailable, switching to the next one") {
		t.Errorf("the agent's log does not say it left the cut-off replica:\n%s", log)
	}

	way.UnblackholeTx()
	way.UnblackholeRx()
	eventually(t, time.Minute, a.readyz)
	ag.kill9(t)
	waitNodeStatus(t, b, node, "NotReady", nodeGrace+nodePeriod+agentLease+pollMargin)
}

// dependentManifest is a Lease owned by the Lease ownerName with uid
// ownerUID, optionally blocking its owner's deletion and with a finalizer.
func dependentManifest(name, namespace, ownerName string, ownerUID types.UID, block bool, finalizer string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: %s\n  namespace: %s\n", name, namespace)
	if finalizer != "" {
		fmt.Fprintf(&b, "  finalizers:\n  - %s\n", finalizer)
	}
	fmt.Fprintf(&b, "  ownerReferences:\n  - apiVersion: coordination.k8s.io/v1\n    kind: Lease\n    name: %s\n    uid: %s\n", ownerName, ownerUID)
	if block {
		b.WriteString("    blockOwnerDeletion: true\n")
	}
	fmt.Fprintf(&b, "spec:\n  holderIdentity: %s\n", name)
	return b.String()
}

// ownerWithDependents applies Lease "owner" and the given dependents of it
// in namespace and returns the owner's uid.
func ownerWithDependents(t *testing.T, s *server, namespace string, deps func(uid types.UID) string) types.UID {
	t.Helper()
	s.kubectlStdin(t, leaseManifest("owner", namespace, "owner"), "apply", "-f", "-")
	uid := types.UID(s.kubectl(t, "get", "lease", "owner", "-n", namespace, "-o", "jsonpath={.metadata.uid}"))
	if uid == "" {
		t.Fatal("owner lease has no uid")
	}
	s.kubectlStdin(t, deps(uid), "apply", "-f", "-")
	return uid
}

// leasesIn lists the names of the leases in namespace.
func leasesIn(t *testing.T, s *server, namespace string) []string {
	t.Helper()
	var names []string
	for _, l := range strings.Fields(s.kubectl(t, "get", "lease", "-n", namespace, "-o", "name")) {
		names = append(names, strings.TrimPrefix(l, "lease.coordination.k8s.io/"))
	}
	return names
}

// TestGarbageCollectCascade deletes an owner Lease with two dependent Leases
// with each of kubectl's --cascade modes and checks what the garbage
// collector does to the dependents.
func TestGarbageCollectCascade(t *testing.T) {
	t.Parallel()
	s := shared(t)
	const gcTimeout = 20 * time.Second
	two := func(ns string) func(types.UID) string {
		return func(uid types.UID) string {
			return dependentManifest("dep-1", ns, "owner", uid, false, "") + "---\n" + dependentManifest("dep-2", ns, "owner", uid, false, "")
		}
	}

	t.Run("background", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, s)
		ownerWithDependents(t, s, ns, two(ns))
		if got, want := strings.TrimSpace(s.kubectl(t, "delete", "lease", "owner", "-n", ns, "--cascade=background")), `lease.coordination.k8s.io "owner" deleted`; got != want {
			t.Fatalf("kubectl delete printed %q, want %q", got, want)
		}
		start := time.Now()
		eventually(t, gcTimeout, func() error {
			if got := leasesIn(t, s, ns); len(got) != 0 {
				return fmt.Errorf("leases left after background deletion of their owner: %q", got)
			}
			return nil
		})
		t.Logf("dependents gone %v after the owner", time.Since(start).Round(time.Millisecond))
	})

	t.Run("foreground", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, s)
		const hold = "e2e.leasehold.dev/hold"
		ownerWithDependents(t, s, ns, func(uid types.UID) string {
			return dependentManifest("dep-1", ns, "owner", uid, true, hold) + "---\n" + dependentManifest("dep-2", ns, "owner", uid, true, "")
		})
		if got, want := strings.TrimSpace(s.kubectl(t, "delete", "lease", "owner", "-n", ns, "--cascade=foreground", "--wait=false")), `lease.coordination.k8s.io "owner" deleted`; got != want {
			t.Fatalf("kubectl delete printed %q, want %q", got, want)
		}
		start := time.Now()
		// The owner waits, marked, while dep-1 (blocking, held by its own
		// finalizer) is being deleted; dep-2 goes.
		ownerWaits := func() error {
			o := leaseOrNil(t, s, ns, "owner")
			if o == nil {
				t.Fatalf("owner deleted in the foreground is gone while its blocking dependent dep-1 remains")
			}
			if o.DeletionTimestamp == nil || !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
				return fmt.Errorf("owner: deletionTimestamp %v, finalizers %q; want a deletionTimestamp and %s", o.DeletionTimestamp, o.Finalizers, metav1.FinalizerDeleteDependents)
			}
			return nil
		}
		eventually(t, 5*time.Second, ownerWaits)
		eventually(t, gcTimeout, func() error {
			if err := ownerWaits(); err != nil {
				return err
			}
			if leaseOrNil(t, s, ns, "dep-2") != nil {
				return errors.New("dep-2 still exists")
			}
			d := leaseOrNil(t, s, ns, "dep-1")
			if d == nil {
				t.Fatalf("dep-1 is gone although its finalizer %s was never removed", hold)
			}
			if d.DeletionTimestamp == nil {
				return errors.New("dep-1 has no deletionTimestamp yet")
			}
			return nil
		})
		t.Logf("dep-2 deleted and dep-1 deleting %v after the owner's deletion", time.Since(start).Round(time.Millisecond))
		if err := ownerWaits(); err != nil {
			t.Fatal(err)
		}
		s.kubectl(t, "patch", "lease", "dep-1", "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		released := time.Now()
		eventually(t, gcTimeout, func() error {
			if got := leasesIn(t, s, ns); len(got) != 0 {
				return fmt.Errorf("leases left after dep-1's finalizer was removed: %q", got)
			}
			return nil
		})
		t.Logf("owner gone %v after its blocking dependent's finalizer was removed", time.Since(released).Round(time.Millisecond))
	})

	t.Run("orphan", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, s)
		ownerWithDependents(t, s, ns, two(ns))
		// kubectl waits until the owner is gone, which the collector allows
		// only once it has orphaned the dependents.
		if got, want := strings.TrimSpace(s.kubectl(t, "delete", "lease", "owner", "-n", ns, "--cascade=orphan")), `lease.coordination.k8s.io "owner" deleted`; got != want {
			t.Fatalf("kubectl delete printed %q, want %q", got, want)
		}
		if leaseOrNil(t, s, ns, "owner") != nil {
			t.Fatal("owner still exists after kubectl delete --cascade=orphan returned")
		}
		for _, d := range []string{"dep-1", "dep-2"} {
			l := leaseOrNil(t, s, ns, d)
			if l == nil {
				t.Fatalf("%s was deleted; --cascade=orphan must leave dependents", d)
			}
			if len(l.OwnerReferences) != 0 || l.DeletionTimestamp != nil {
				t.Errorf("%s after its owner was deleted with --cascade=orphan: ownerReferences %+v, deletionTimestamp %v; want no references and no deletion", d, l.OwnerReferences, l.DeletionTimestamp)
			}
		}
	})

	t.Run("dangling", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, s)
		s.kubectlStdin(t, dependentManifest("dangling", ns, "never-existed", "0f0e0d0c-0b0a-4009-8807-060504030201", false, ""), "apply", "-f", "-")
		start := time.Now()
		eventually(t, gcTimeout, func() error {
			if leaseOrNil(t, s, ns, "dangling") != nil {
				return errors.New("lease owned by a uid that never existed still exists")
			}
			return nil
		})
		t.Logf("dangling dependent collected %v after it was created", time.Since(start).Round(time.Millisecond))
	})
}

// TestReplicaDiesBehindALoadBalancer: an agent given one server, a TCP load
// balancer that hands connections to two replicas in turn and checks no
// health, keeps its node Ready when the replica its connection went to is
// killed, the one that runs the controllers. Its next connections reach the
// other replica (one the balancer gives the dead replica fails, and the
// agent tries again), which takes the controllers.
func TestReplicaDiesBehindALoadBalancer(t *testing.T) {
	t.Parallel()
	const node = "behind-balancer-node"
	needKubectl(t)
	dir := t.TempDir()
	rs := sharedReplicas(t, dir, 2, nodeServeFlags...)
	a := rs[0]
	leader, other := controllersReplica(t, a, rs[1])
	lb := newRoundRobin(t, leader.listen, other.listen)
	ag := startAgent(t, a.kubeconfig, dir, node, "--server", "https://"+lb.ln.Addr().String())
	toItself(t, other)
	waitNodeStatus(t, other, node, "Ready", 30*time.Second)
	if n := lb.connsTo(leader.listen); n == 0 {
		t.Fatal("the agent's first connection did not go to the first replica")
	}
	before := lb.connsTo(other.listen)

	leader.kill()
	killed := time.Now()
	takesControllers(t, other, node, "kill", killed)
	readyThrough(t, other, []string{node}, "lost the other replica behind a load balancer", time.Now())
	if lb.connsTo(other.listen) == before {
		t.Error("the agent made no new connection through the load balancer to the replica left")
	}
	t.Logf("connections through the balancer: %d to the killed replica, %d to the other", lb.connsTo(leader.listen), lb.connsTo(other.listen))

	ag.kill9(t)
	waitNodeStatus(t, other, node, "NotReady", nodeGrace+nodePeriod+agentLease+pollMargin)
}
