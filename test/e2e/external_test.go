package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// sharedReplicas starts an etcd member in dir and n servers on it that,
// unlike replicas', share one data directory (its CA, certificates and
// admin kubeconfig), so that one client reaches them all; flags follow
// --etcd-servers. The first logs to dir, the others each to a directory of
// its own.
func sharedReplicas(t *testing.T, dir string, n int, flags ...string) []*server {
	t.Helper()
	etcdURL := startEtcdMember(t, dir)
	dataDir := filepath.Join(dir, "data")
	out := make([]*server, n)
	for i := range out {
		logDir := dir
		if i > 0 {
			logDir = t.TempDir()
		}
		out[i] = serveFor(t, dataDir, "", logDir, append([]string{"--etcd-servers", etcdURL}, flags...)...)
	}
	return out
}

// startEtcdMember runs `leasehold etcd`, a one-member cluster, in dir until
// the test ends, and returns its client URL once it answers /health.
func startEtcdMember(t *testing.T, dir string) string {
	t.Helper()
	return startEtcdCluster(t, dir)[0].url
}

// etcdMember is a running `leasehold etcd`.
type etcdMember struct {
	url, logFile string
	args         []string // after `leasehold etcd`
	proc         *os.Process
	exited       chan error
	// gone: the member has exited, killed by the test or of itself, and
	// its exit has been read.
	gone bool
	// health asks its /health; nil: http.DefaultClient.
	health *http.Client
}

// startEtcdCluster runs a `leasehold etcd` member for each name, together
// one cluster (no names: one member alone), in dir until the test ends, and
// returns them once each answers /health, which a member of several does
// only when the cluster has a leader.
func startEtcdCluster(t *testing.T, dir string, names ...string) []*etcdMember {
	t.Helper()
	return startEtcdClusterTLS(t, dir, "", names...)
}

// startEtcdClusterTLS is startEtcdCluster with, when pkiDir is not empty,
// https for clients and peers, with the certificates that `leasehold etcd
// cert` wrote in pkiDir for each member (NAME.crt), and certificates
// required of both; /health is then asked with pkiDir's client.crt.
func startEtcdClusterTLS(t *testing.T, dir, pkiDir string, names ...string) []*etcdMember {
	t.Helper()
	alone := len(names) == 0
	if alone {
		names = []string{""}
	}
	scheme := "http://"
	if pkiDir != "" {
		scheme = "https://"
	}
	var clients, peers, cluster []string
	for _, name := range names {
		addrs := freeAddrs(t, 2)
		clients, peers = append(clients, scheme+addrs[0]), append(peers, scheme+addrs[1])
		cluster = append(cluster, name+"="+scheme+addrs[1])
	}
	members := make([]*etcdMember, len(names))
	for i, name := range names {
		args := []string{"--data-dir", filepath.Join(dir, "etcd"+name),
			"--listen-client-urls", clients[i], "--listen-peer-urls", peers[i]}
		if !alone {
			args = append(args, "--name", name, "--initial-cluster", strings.Join(cluster, ","))
		}
		if pkiDir != "" {
			cert, key, ca := filepath.Join(pkiDir, name+".crt"), filepath.Join(pkiDir, name+".key"), filepath.Join(pkiDir, "ca.crt")
			args = append(args, "--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
				"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca, "--peer-client-cert-auth")
		}
		members[i] = runEtcdMember(t, filepath.Join(dir, "etcd"+name+".log"), clients[i], args...)
		if pkiDir != "" {
			members[i].health = etcdHTTPClient(t, pkiDir, "client")
		}
	}
	for _, m := range members {
		m.waitHealthy(t)
	}
	return members
}

// endpoints are the members' client URLs, comma-separated, for serve's
// --etcd-servers.
func endpoints(members []*etcdMember) string {
	var urls []string
	for _, m := range members {
		urls = append(urls, m.url)
	}
	return strings.Join(urls, ",")
}

// etcdHTTPClient is an HTTP client of a TLS cluster whose CA is pkiDir's,
// with the certificate `leasehold etcd cert` issued there to name.
func etcdHTTPClient(t *testing.T, pkiDir, name string) *http.Client {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, name+".crt"), filepath.Join(pkiDir, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	pool := certPool(t, filepath.Join(pkiDir, "ca.crt"))
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
}

// runEtcdMember starts `leasehold etcd` with args, serving clients at url
// and logging to logFile, and stops it with SIGTERM when the test ends;
// it must then exit cleanly unless the test killed it.
func runEtcdMember(t *testing.T, logFile, url string, args ...string) *etcdMember {
	t.Helper()
	logs, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(leaseholdBin, append([]string{"etcd", "--log-level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &etcdMember{url: url, logFile: logFile, args: args, proc: cmd.Process, exited: make(chan error, 1)}
	go func() { m.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		defer logs.Close()
		if m.gone {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-m.exited:
			if err != nil {
				data, _ := os.ReadFile(logFile)
				t.Errorf("leasehold etcd did not stop cleanly: %v\n%s", err, data)
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Error("leasehold etcd did not exit within a minute of SIGTERM")
		}
	})
	return m
}

// healthClient asks the member's /health and /metrics.
func (m *etcdMember) healthClient() *http.Client {
	if m.health != nil {
		return m.health
	}
	return http.DefaultClient
}

// waitHealthy waits until the member answers /health, and fails the test
// if it exits first.
func (m *etcdMember) waitHealthy(t *testing.T) {
	t.Helper()
	eventually(t, startTimeout, func() error {
		select {
		case err := <-m.exited:
			m.gone = true
			data, _ := os.ReadFile(m.logFile)
			t.Fatalf("leasehold etcd exited: %v\n%s", err, data)
		default:
		}
		resp, err := m.healthClient().Get(m.url + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/health: %s", resp.Status)
		}
		return nil
	})
}

// stop ends the member with SIGTERM, and fails the test unless it exits
// cleanly.
func (m *etcdMember) stop(t *testing.T) {
	t.Helper()
	if err := m.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-m.exited
	m.gone = true
	if err != nil {
		data, _ := os.ReadFile(m.logFile)
		t.Fatalf("leasehold etcd did not stop cleanly: %v\n%s", err, data)
	}
}

// flag is the value of the member's flag name.
func (m *etcdMember) flag(name string) string {
	i := slices.Index(m.args, name)
	if i < 0 || i+1 == len(m.args) {
		return ""
	}
	return m.args[i+1]
}

// kill ends the member with SIGKILL, as a lost machine ends.
func (m *etcdMember) kill(t *testing.T) {
	t.Helper()
	if err := m.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	m.gone = true
}

// replicas starts a `leasehold etcd` member and two servers on it, each
// with a data directory of its own and the extra flags; it returns them
// and the member's client URL.
func replicas(t *testing.T, extra ...string) ([2]*server, string) {
	t.Helper()
	dir := t.TempDir()
	etcdURL := startEtcdMember(t, dir)
	var servers [2]*server
	for i := range servers {
		d := filepath.Join(dir, fmt.Sprintf("server-%d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		servers[i] = serveFor(t, filepath.Join(d, "data"), "", d, append([]string{"--etcd-servers", etcdURL}, extra...)...)
	}
	return servers, etcdURL
}

// TestTokensInEtcd: `leasehold token --etcd-servers` keeps tokens in the
// external etcd, where every server on it reads them, so an agent that
// fails over to another replica stays authenticated; a deletion there
// revokes the token on all of them. A token of one server's data directory
// stays that server's alone, until token import copies it into etcd.
func TestTokensInEtcd(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	servers, etcdURL := replicas(t)
	whoami := func(s *server, token string) (string, error) {
		out, errOut, err := s.asToken(t, token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, errOut)
		}
		return out, nil
	}
	shared := strings.TrimSpace(leasehold(t, "token", "create", "--etcd-servers", etcdURL, "--node", "web-1", "--description", "in etcd"))
	local := strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", servers[0].dataDir, "--user", "local"))
	for i, s := range servers {
		if got, err := whoami(s, shared); err != nil || got != "system:node:web-1" {
			t.Errorf("the token in etcd through server %d, at its first use: %q, %v", i, got, err)
		}
	}
	if got, err := whoami(servers[0], local); err != nil || got != "local" {
		t.Errorf("server 0's own token through server 0: %q, %v", got, err)
	}
	if _, err := whoami(servers[1], local); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("server 0's own token through server 1: %v, want 401", err)
	}
	if list := leasehold(t, "token", "list", "--etcd-servers", etcdURL); !strings.Contains(grepLines(list, "in etcd"), "system:node:web-1") || strings.Contains(list, "local") {
		t.Errorf("token list --etcd-servers:\n%s", list)
	}
	// Copied into etcd, server 0's token works on server 1 too.
	leasehold(t, "token", "import", "--data-dir", servers[0].dataDir, "--etcd-servers", etcdURL)
	if got, err := whoami(servers[1], local); err != nil || got != "local" {
		t.Errorf("server 0's own token through server 1 after token import: %q, %v", got, err)
	}
	leasehold(t, "token", "delete", "--etcd-servers", etcdURL, "--node", "web-1")
	for i, s := range servers {
		eventually(t, 20*time.Second, func() error {
			if got, err := whoami(s, shared); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
				return fmt.Errorf("the deleted token through server %d: %q, %v; want 401", i, got, err)
			}
			return nil
		})
	}
}

// TestServeOnExternalEtcd: two servers on one external etcd (`leasehold
// etcd`) serve the same objects. What kubectl writes through one, kubectl
// reads through the other; concurrent read-modify-write updates through
// both (each server's writes going to etcd in group commits over gRPC)
// lose none; a delete through one is seen by the other.
func TestServeOnExternalEtcd(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	servers, _ := replicas(t)
	a, b := servers[0], servers[1]
	ns := testNamespace(t, a)

	a.kubectlStdin(t, leaseManifest("shared", ns, "a", "  leaseTransitions: 0"), "create", "-f", "-")
	eventually(t, 30*time.Second, func() error {
		if got := holder(getLease(t, b, ns, "shared")); got != "a" {
			return fmt.Errorf("through the other server: holder %q, want a", got)
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const writers, each = 8, 5
	clients := []coordinationclient.LeaseInterface{
		a.clientset(t).CoordinationV1().Leases(ns), b.clientset(t).CoordinationV1().Leases(ns),
	}
	var wg sync.WaitGroup
	for w := range writers {
		c := clients[w%2]
		wg.Go(func() {
			for range each {
				// Eight writers on one key conflict often: retry for as
				// long as it takes, 5 to 25 ms apart. (A Backoff's Cap
				// would end the retries once the wait reached it.)
				contended := wait.Backoff{Steps: 1000, Duration: 5 * time.Millisecond, Factor: 1, Jitter: 4}
				err := retry.RetryOnConflict(contended, func() error {
					l, err := c.Get(ctx, "shared", metav1.GetOptions{})
					if err != nil {
						return err
					}
					l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
					_, err = c.Update(ctx, l, metav1.UpdateOptions{})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, s := range servers {
		l := getLease(t, s, ns, "shared")
		if n := ptr.Deref(l.Spec.LeaseTransitions, 0); n != writers*each {
			t.Errorf("%s: leaseTransitions %d after %d increments", s.listen, n, writers*each)
		}
	}

	// The member's metrics are the external cluster's to serve; the API
	// server's own of its etcd requests stay, as kube-apiserver's.
	member := regexp.MustCompile(`(?m)^etcd_(server|disk|mvcc|network|debugging)_`)
	if out := a.kubectl(t, "get", "--raw", "/metrics"); member.MatchString(out) || !strings.Contains(out, "\napiserver_request_total{") ||
		!strings.Contains(out, "\netcd_request_duration_seconds_bucket{") {
		t.Errorf("/metrics on an external etcd should carry leasehold's metrics and etcd_request_duration_seconds, and none of the member's etcd_ ones:\n%s", grepLines(out, "etcd_"))
	}

	b.kubectl(t, "delete", "lease", "shared", "-n", ns)
	eventually(t, 30*time.Second, func() error {
		_, err := clients[0].Get(ctx, "shared", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("through the other server after the delete: %v", err)
	})
}

// TestServeThroughAStoppedEtcdMember: one member of three stops answering
// but keeps its connections open, as a frozen machine or a partition does;
// it is etcd's leader, so the other two must elect another meanwhile. The
// server stops sending it calls and its writes go on through the other
// two, while it stays stopped. (Group commit sends one batch at a time, so
// a batch held by the member would otherwise hold every write behind it
// for as long as TCP takes to give up.)
func TestServeThroughAStoppedEtcdMember(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	_, members, s := clusterServer(t)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("through-a-stop", ns, "a", "  leaseTransitions: 0"), "create", "-f", "-")
	leases := s.clientset(t).CoordinationV1().Leases(ns)

	leader := etcdLeader(t, members)
	t.Logf("stopping member %d of 3, etcd's leader", leader+1)
	stopped := members[leader].proc
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopped.Signal(syscall.SIGCONT) })
	// Round robin sends every third call or so to the stopped member: ten
	// updates in a row, each given 5 s, pass only once the client has
	// given it up.
	inARow := 0
	eventually(t, 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := leases.Get(ctx, "through-a-stop", metav1.GetOptions{})
		if err == nil {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err != nil {
			inARow = 0
			return err
		}
		if inARow++; inARow < 10 {
			return fmt.Errorf("%d updates in a row", inARow)
		}
		return nil
	})
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// TestFrozenEtcdMemberHoldingTheWatch: the etcd member that holds the
// server's watches stops answering but keeps its connections open
// (SIGSTOP), while the other two go on, one of them leading. The agents'
// renewals are stored through the other two, but the server's watch cache
// of Leases would see none of them until etcd's client gives the frozen
// member up, after 15 s. The grace period here, 9 s, is shorter than
// that: the node lifecycle controller, which sees renewals through that
// cache, would judge a silence it could not see. The cache counts as cut
// off from etcd once a write etcd acknowledged has gone unseen for 2 s,
// which the controller would judge no node through, and the caches move
// their watches to a new stream, on a member that answers, where they
// catch up (here 250 ms later, before the controller's next pass). The
// agents' nodes stay Ready throughout, and a node whose agent dies after
// that is still marked.
func TestFrozenEtcdMemberHoldingTheWatch(t *testing.T) {
	t.Parallel()
	// Longer than nodeGrace, to leave the stall's detection more room on
	// a busy machine: a mark would come 8 s after the stop, at the
	// earliest, and the stall is noticed within 4 s.
	const grace = 9 * time.Second
	nodes := []string{"frozen-watch-a", "frozen-watch-b"}
	members, s, agents := clusterNodes(t, nodes, "--node-monitor-grace-period", grace.String())

	// Frozen, the leader would stop every write until the others elect
	// another, and the silence would be real: move the leadership off the
	// holder, and look again, in case the move moved the watches too.
	holder := etcdWatchHolder(t, members)
	for leader := etcdLeader(t, members); leader == holder; leader = etcdLeader(t, members) {
		t.Logf("member %d leads etcd and holds the server's watches: moving the leadership to member %d", leader+1, (leader+1)%len(members)+1)
		moveEtcdLeader(t, members, leader, (leader+1)%len(members))
		holder = etcdWatchHolder(t, members)
	}
	t.Logf("stopping member %d of 3, which holds the server's watches", holder+1)
	frozen, stop := members[holder].proc, time.Now()
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Signal(syscall.SIGCONT) })

	// The fault lasts past etcd's client giving the member up (its
	// keepalive: a ping after 10 s of silence, 5 s for the answer), which
	// ends what the server still had open there; nothing is timed.
	time.Sleep(time.Until(stop.Add(20 * time.Second)))
	stalled := regexp.MustCompile(`level=WARN msg="watch cache: etcd's watch has not delivered a write etcd acknowledged.*resource=leases.coordination.k8s.io `)
	delivers := regexp.MustCompile(`msg="watch cache: etcd's watch delivers again".*resource=leases.coordination.k8s.io `)
	eventually(t, time.Minute, func() error {
		if log, _ := os.ReadFile(s.logPath); !delivers.Match(log) && !strings.Contains(string(log), "marked Unknown") {
			return errors.New("the Leases' cache does not follow etcd again yet")
		}
		return nil
	})
	back := time.Now()
	log, _ := os.ReadFile(s.logPath)
	t.Logf("stopped at %s; the server's log of it:\n%s", stop.Format(time.RFC3339Nano), grepLines(string(log), "resource=leases.coordination.k8s.io")+"\n"+grepLines(string(log), "etcd's leases"))
	if !stalled.Match(log) {
		t.Errorf("the Leases' cache did not warn that its watch stalled:\n%s", grepLines(string(log), "watch cache"))
	}
	if !regexp.MustCompile(`msg="watch cache: moving the caches' etcd watches to a new stream".*resource=leases.coordination.k8s.io `).Match(log) {
		t.Errorf("the Leases' cache did not move the watches:\n%s", grepLines(string(log), "watch cache"))
	}
	const series = `leasehold_watch_cache_stalls_total{group="coordination.k8s.io",resource="leases"}`
	if n, err := metricIn([]byte(s.kubectl(t, "get", "--raw", "/metrics")), series); err != nil || n < 1 {
		t.Errorf("/metrics: %s %v, %v; want 1 or more", series, n, err)
	}
	readyThrough(t, s, nodes, "followed etcd's Leases again", back)

	if err := frozen.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	agents[nodes[0]].kill9(t)
	waitNodeStatus(t, s, nodes[0], "NotReady", grace+nodePeriod+agentLease+pollMargin)
}

// TestEveryEtcdMemberFrozen: all three etcd members stop answering with
// their connections open (SIGSTOP), as when the machines that run them
// stall, for longer than the grace period and the controllers'
// RenewDeadline. No renewal can be stored, and no write of the server's
// comes back on its watch to tell it that the watch is stuck; its probes
// of the members go unanswered, and the node lifecycle controller judges
// no node from then on. A write to mark a node, sent to a frozen member,
// would wait in its connection and could be made when the member ran
// again, long after the server gave up on it. Once the members run again,
// the agents' nodes are still Ready, with no NodeNotReady event.
func TestEveryEtcdMemberFrozen(t *testing.T) {
	t.Parallel()
	nodes := []string{"all-frozen-a", "all-frozen-b"}
	members, s, _ := clusterNodes(t, nodes)

	for _, m := range members {
		if err := m.proc.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.proc.Signal(syscall.SIGCONT) })
	}
	// The fault itself; nothing is timed.
	time.Sleep(12 * time.Second)
	for _, m := range members {
		if err := m.proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range members {
		m.waitHealthy(t)
	}
	readyThrough(t, s, nodes, "had etcd answer again", time.Now())
	log, _ := os.ReadFile(s.logPath)
	for _, line := range []string{`level=WARN msg="no etcd member answers"`, `msg="an etcd member answers again"`} {
		if !strings.Contains(string(log), line) {
			t.Errorf("no %q in the server's log:\n%s", line, grepLines(string(log), "etcd member"))
		}
	}
}

// clusterServer starts three etcd members and a server on them with the
// extra serve flags, in a directory of the test's, which it returns.
func clusterServer(t *testing.T, extra ...string) (dir string, members []*etcdMember, s *server) {
	t.Helper()
	dir = t.TempDir()
	members = startEtcdCluster(t, dir, "a", "b", "c")
	s = serveFor(t, filepath.Join(dir, "data"), "", dir, append([]string{"--etcd-servers", endpoints(members)}, extra...)...)
	return dir, members, s
}

// clusterNodes is clusterServer with nodeServeFlags and extra, and an
// agent for each of nodes; it waits until every node is Ready.
func clusterNodes(t *testing.T, nodes []string, extra ...string) ([]*etcdMember, *server, map[string]*agentProc) {
	t.Helper()
	needKubectl(t)
	dir, members, s := clusterServer(t, append(slices.Clone(nodeServeFlags), extra...)...)
	return members, s, readyAgents(t, s, dir, nodes...)
}

// etcdWatchHolder returns the index of the member that holds the server's
// watch caches' watches, by the members' /metrics. The caches' watches
// share one stream, so one member, and outnumber the server's other
// watches (of its tokens, say), whose stream may be on another member.
func etcdWatchHolder(t *testing.T, members []*etcdMember) int {
	t.Helper()
	holder := -1
	eventually(t, startTimeout, func() error {
		holder = -1
		most := 1.0
		for i, m := range members {
			resp, err := m.healthClient().Get(m.url + "/metrics")
			if err != nil {
				return err
			}
			page, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			n, err := metricIn(page, "etcd_debugging_mvcc_watcher_total")
			if err != nil {
				return fmt.Errorf("member %d: %w", i+1, err)
			}
			if n > most {
				holder, most = i, n
			}
		}
		if holder < 0 {
			return errors.New("no member holds the watch caches' watches")
		}
		return nil
	})
	return holder
}

// moveEtcdLeader hands etcd's leadership from members[from], the leader,
// to members[to].
func moveEtcdLeader(t *testing.T, members []*etcdMember, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{members[from].url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(ctx, members[to].url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.MoveLeader(ctx, st.Header.MemberId); err != nil {
		t.Fatalf("moving etcd's leadership to member %d: %v", to+1, err)
	}
	if got := etcdLeader(t, members); got != to {
		t.Fatalf("member %d leads etcd after the move, want %d", got+1, to+1)
	}
}

// TestEtcdQuorumLostAndRegained kills two of etcd's three members
// (SIGKILL) for longer than the grace period and the controllers'
// RenewDeadline, then starts them again. Meanwhile the server refuses
// writes with 504 Timeout rather than hold them, and fails /readyz for
// etcd; each watch cache warns that it lost etcd once, not at every retry.
// Once etcd has a leader again, writes go through, the caches say they
// follow it again, and the agents' nodes, whose renewals failed all along,
// stay Ready: the controllers' term ended with the quorum, and the next
// term gives every node a fresh grace period. A node whose agent dies
// after that is still marked.
func TestEtcdQuorumLostAndRegained(t *testing.T) {
	t.Parallel()
	nodes := []string{"quorum-node-a", "quorum-node-b"}
	members, s, agents := clusterNodes(t, nodes)

	lost := time.Now()
	for _, m := range members[1:] {
		m.kill(t)
	}
	// A write in flight as the members died may fail otherwise; the ones
	// after get 504 once the last member knows it has no leader.
	eventually(t, time.Minute, func() error {
		_, errOut, err := s.runKubectl(t, "create", "namespace", "quorum-lost")
		if err == nil || !strings.Contains(errOut, "(Timeout)") {
			return fmt.Errorf("a write without quorum: %v %s; want 504 Timeout", err, errOut)
		}
		return nil
	})
	if err := s.readyz(); err == nil || !strings.Contains(err.Error(), "[-]etcd failed") {
		t.Errorf("/readyz without quorum: %v; want the etcd check failed", err)
	}
	// The fault itself; nothing is timed.
	time.Sleep(time.Until(lost.Add(12 * time.Second)))
	for i, m := range members[1:] {
		members[1+i] = m.again(t)
	}
	for _, m := range members {
		m.waitHealthy(t)
	}
	eventually(t, time.Minute, func() error {
		_, errOut, err := s.runKubectl(t, "create", "namespace", "quorum-back")
		if err != nil && !strings.Contains(errOut, "AlreadyExists") {
			return fmt.Errorf("a write with the quorum back: %v %s", err, errOut)
		}
		return nil
	})
	readyThrough(t, s, nodes, "had etcd's quorum back", time.Now())

	log, _ := os.ReadFile(s.logPath)
	warned := map[string]int{}
	for _, m := range regexp.MustCompile(`level=WARN msg="watch cache: etcd watch ended; resuming" resource=(\S+)`).FindAllSubmatch(log, -1) {
		warned[string(m[1])]++
	}
	if len(warned) == 0 {
		t.Error("no watch cache warned that its etcd watch ended")
	}
	for resource, n := range warned {
		// One outage; a watch made in the second before the last member
		// noticed it had no leader may end it in two.
		if n > 2 {
			t.Errorf("the %s cache warned %d times for one outage:\n%s", resource, n, grepLines(string(log), "resource="+resource+" "))
		}
	}
	if !strings.Contains(string(log), `msg="watch cache: etcd answers again"`) {
		t.Error("no watch cache logged that etcd answers again")
	}

	agents[nodes[0]].kill9(t)
	waitNodeStatus(t, s, nodes[0], "NotReady", nodeGrace+nodePeriod+agentLease+pollMargin)
}

// again starts the member again, after kill, with the same flags and data
// directory, logging to a file of its own.
func (m *etcdMember) again(t *testing.T) *etcdMember {
	t.Helper()
	return runEtcdMember(t, strings.TrimSuffix(m.logFile, ".log")+"-again.log", m.url, m.args...)
}

// etcdLeader is the index of the member that is the cluster's leader.
func etcdLeader(t *testing.T, members []*etcdMember) int {
	t.Helper()
	leader := -1
	eventually(t, startTimeout, func() error {
		for i, m := range members {
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.url}, DialTimeout: 5 * time.Second})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := c.Status(ctx, m.url)
			cancel()
			c.Close()
			if err != nil {
				return err
			}
			if st.Leader == st.Header.MemberId {
				leader = i
				return nil
			}
		}
		return errors.New("no member says it leads")
	})
	return leader
}

// TestEtcdPrefix: servers with --etcd-prefix keep their objects under it,
// so that two clusters share one etcd without seeing each other's: a
// Lease written through one is not in the other, which may hold one of
// the same name, and each elects its own controller manager. A replica
// given the same prefix (with a trailing slash, as written by hand) serves
// the same objects.
func TestEtcdPrefix(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	etcdURL := startEtcdMember(t, dir)
	serve := func(name string, extra ...string) *server {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return serveFor(t, filepath.Join(d, "data"), "", d, append([]string{"--etcd-servers", etcdURL}, extra...)...)
	}
	a := serve("a", "--etcd-prefix", "/teams/a")
	a2 := serve("a2", "--etcd-prefix", "/teams/a/")
	b := serve("b")

	a.kubectlStdin(t, leaseManifest("x", "default", "team-a"), "create", "-f", "-")
	b.kubectlStdin(t, leaseManifest("x", "default", "team-b"), "create", "-f", "-")
	for s, want := range map[*server]string{a: "team-a", a2: "team-a", b: "team-b"} {
		eventually(t, 30*time.Second, func() error {
			if got := holder(getLease(t, s, "default", "x")); got != want {
				return fmt.Errorf("through %s: holder %q, want %q", s.listen, got, want)
			}
			return nil
		})
	}

	// The keys themselves, read from etcd.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for key, want := range map[string]string{"/teams/a/leases/default/x": "team-a", "/registry/leases/default/x": "team-b"} {
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), want) {
			t.Errorf("etcd key %s: %v, %v; want the Lease held by %s", key, resp, err, want)
		}
	}

	// One controller manager elected in each cluster.
	for _, s := range []*server{a, b} {
		eventually(t, 30*time.Second, func() error {
			out, stderr, err := s.runKubectl(t, "get", "lease", "leasehold-controller-manager", "-n", "kube-system", "-o", "jsonpath={.spec.holderIdentity}")
			if err != nil || out == "" {
				return fmt.Errorf("through %s: %q %v %s", s.listen, out, err, stderr)
			}
			return nil
		})
	}
	holderA := a.kubectl(t, "get", "lease", "leasehold-controller-manager", "-n", "kube-system", "-o", "jsonpath={.spec.holderIdentity}")
	holderB := b.kubectl(t, "get", "lease", "leasehold-controller-manager", "-n", "kube-system", "-o", "jsonpath={.spec.holderIdentity}")
	if holderA == holderB {
		t.Errorf("one controller manager, %s, leads both clusters", holderA)
	}

	b.kubectl(t, "delete", "lease", "x", "-n", "default")
	if got := holder(getLease(t, a2, "default", "x")); got != "team-a" {
		t.Errorf("team a's Lease after team b's was deleted: holder %q", got)
	}
}

// roundRobin is a TCP load balancer, as one in front of several replicas
// would be: each connection goes to the next of its backends, which may
// change while it runs.
type roundRobin struct {
	ln       net.Listener
	mu       sync.Mutex
	backends []string
	next     int
	conns    map[string]int // connections given to each backend
}

func newRoundRobin(t *testing.T, backends ...string) *roundRobin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &roundRobin{ln: ln, backends: backends, conns: map[string]int{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			lb.mu.Lock()
			to := lb.backends[lb.next%len(lb.backends)]
			lb.next++
			lb.conns[to]++
			lb.mu.Unlock()
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { io.Copy(b, c); b.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, b)
			}()
		}
	}()
	return lb
}

func (lb *roundRobin) setBackends(backends ...string) {
	lb.mu.Lock()
	lb.backends = backends
	lb.mu.Unlock()
}

func (lb *roundRobin) connsTo(backend string) int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.conns[backend]
}

// TestGoawaySpreadsConnections: ten clients reach two replicas (one data
// directory, one external etcd, --goaway-chance 0.02) through a load
// balancer that knew only the first when they connected. Once it knows
// both, the GOAWAYs make the clients reconnect now and then, and their new
// connections go to the second replica too; every request is answered.
func TestGoawaySpreadsConnections(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	servers := sharedReplicas(t, dir, 2, "--goaway-chance", "0.02")
	a, b := servers[0].listen, servers[1].listen
	lb := newRoundRobin(t, a)
	token := mustConfig(t, servers[0]).BearerToken
	roots := certPool(t, filepath.Join(dir, "data", "ca.crt"))
	clients := make([]*http.Client, 10)
	for i := range clients {
		clients[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true,
		}}
	}
	get := func(c *http.Client) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+lb.ln.Addr().String()+"/api/v1/namespaces/default", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("%s over HTTP/%d", resp.Status, resp.ProtoMajor)
		}
	}
	for _, c := range clients {
		get(c)
	}
	if n := lb.connsTo(b); n != 0 {
		t.Fatalf("%d connections to the replica the load balancer did not know yet", n)
	}
	lb.setBackends(a, b)
	// No GOAWAY at all in 3 000 requests has a chance of 0.98^3000, about
	// 10^-26; each GOAWAY's new connection goes to the replicas in turn.
	for range 300 {
		for _, c := range clients {
			get(c)
		}
	}
	if n := lb.connsTo(b); n == 0 {
		t.Errorf("no connection moved to the second replica in 3 000 requests (%d to the first)", lb.connsTo(a))
	} else {
		t.Logf("connections: %d to the first replica, %d to the second", lb.connsTo(a), n)
	}
}

// TestAcknowledgedWritesThroughEtcdMemberKills: writers update leases
// through a server on a three-member etcd cluster while its members are
// killed (SIGKILL) one at a time, the leader first, and started again;
// then all three are killed at once and started again. Every write the
// server acknowledged is there: each lease holds its last acknowledged
// holder at that resourceVersion or later, or, when its last write failed,
// possibly that write's.
func TestAcknowledgedWritesThroughEtcdMemberKills(t *testing.T) {
	t.Parallel()
	const (
		writers   = 8
		perWriter = 5
		ns        = "default"
	)
	_, members, s := clusterServer(t)
	leases := s.clientset(t).CoordinationV1().Leases(ns)
	ctx := context.Background()

	// lease is one lease's history as its writer knows it.
	type lease struct {
		obj     *coordinationv1.Lease // as last acknowledged or read
		acked   string                // the holder last acknowledged
		ackedRV int64
		failed  string // the holder of a write that failed after it, if any
	}
	var (
		stop           atomic.Bool
		acks, failures atomic.Int64
		wg             sync.WaitGroup
		all            [writers * perWriter]lease
	)
	name := func(i int) string { return fmt.Sprintf("acked-%02d", i) }
	for i := range all {
		h := "created"
		l, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name(i)},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &h},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		all[i].obj, all[i].acked, all[i].ackedRV = l, h, resourceVersion(t, l)
	}
	for w := range writers {
		wg.Go(func() {
			for round := 0; !stop.Load(); round++ {
				for i := w * perWriter; i < (w+1)*perWriter && !stop.Load(); i++ {
					l := &all[i]
					h := fmt.Sprintf("w%d-r%d", w, round)
					obj := l.obj.DeepCopy()
					obj.Spec.HolderIdentity = &h
					got, err := leases.Update(ctx, obj, metav1.UpdateOptions{})
					if err != nil {
						// The write may or may not be made: read what is.
						failures.Add(1)
						l.failed = h
						for !stop.Load() {
							if got, err = leases.Get(ctx, name(i), metav1.GetOptions{}); err == nil {
								l.obj = got
								break
							}
							time.Sleep(100 * time.Millisecond) // etcd electing a leader; nothing is timed
						}
						continue
					}
					l.obj, l.acked, l.ackedRV, l.failed = got, h, resourceVersion(t, got), ""
					acks.Add(1)
				}
			}
		})
	}

	// The fault itself: each member in turn, the leader first, killed for
	// 3 s while the writes go on.
	leader := etcdLeader(t, members)
	for _, i := range []int{leader, (leader + 1) % 3, (leader + 2) % 3} {
		time.Sleep(2 * time.Second)
		members[i].kill(t)
		time.Sleep(3 * time.Second)
		members[i] = members[i].again(t)
		members[i].waitHealthy(t)
	}
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d writes acknowledged, %d failed while members were killed", acks.Load(), failures.Load())
	if acks.Load() < int64(len(all)) {
		t.Fatalf("only %d writes acknowledged", acks.Load())
	}

	// All at once, as a power cut.
	for _, m := range members {
		m.kill(t)
	}
	for i, m := range members {
		members[i] = m.again(t)
	}
	for _, m := range members {
		m.waitHealthy(t)
	}
	for i := range all {
		l := &all[i]
		var got *coordinationv1.Lease
		eventually(t, time.Minute, func() error {
			var err error
			got, err = leases.Get(ctx, name(i), metav1.GetOptions{})
			return err
		})
		h := holder(got)
		switch {
		case h == l.acked && resourceVersion(t, got) >= l.ackedRV:
		case l.failed != "" && h == l.failed:
		default:
			t.Errorf("lease %s holds %q at rv %s; its last acknowledged write was %q at rv %d (then failed: %q)",
				name(i), h, got.ResourceVersion, l.acked, l.ackedRV, l.failed)
		}
	}
}

// resourceVersion is obj's resourceVersion as a number.
func resourceVersion(t *testing.T, obj metav1.Object) int64 {
	t.Helper()
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("%s: resourceVersion %q: %v", obj.GetName(), obj.GetResourceVersion(), err)
	}
	return rv
}
