package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// connectionsMetric reads one of the connection gauges from /metrics
// through cs, whose connection is already open.
func connectionsMetric(t *testing.T, cs kubernetes.Interface, name string) int {
	t.Helper()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	v, err := metricIn(raw, name)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return int(v)
}

// metricIn reads the series name from a /metrics page; a series with
// labels is named with them, as the page writes it.
func metricIn(page []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(page))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", sc.Text(), err)
			}
			return f, nil
		}
	}
	return 0, fmt.Errorf("no %s", name)
}

// A fleet with more machines than the server may have open files must not
// take the files etcd needs. Under an open-file limit of 400 the server
// accepts 200 client connections at once; this test opens 300, each
// speaking HTTP/2, and checks that the rest wait, that the server keeps a
// hundred descriptors free and goes on writing to etcd, and that the
// waiting clients are served once others leave.
func TestConnectionsLeaveFilesForEtcd(t *testing.T) {
	t.Parallel()
	const (
		openFiles = 400
		limit     = 200 // apiserver.ConnectionBudget(400)
		flood     = 300
		leave     = 150
	)
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("this test runs leasehold under prlimit, from util-linux: %v", err)
	}
	dir := t.TempDir()
	s := serveForUnder(t, []string{prlimit, "--nofile=" + strconv.Itoa(openFiles), "--"}, filepath.Join(dir, "data"), "", dir)
	cs := s.clientset(t) // its connection is open before the flood
	if got := connectionsMetric(t, cs, "leasehold_apiserver_connections_limit"); got != limit {
		t.Fatalf("leasehold_apiserver_connections_limit = %d under an open-file limit of %d, want %d", got, openFiles, limit)
	}

	base := connectionsMetric(t, cs, "leasehold_apiserver_connections")
	roots := certPool(t, filepath.Join(s.dataDir, "ca.crt"))
	dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, flood)
	for range flood {
		go func() {
			conn, err := dialer.DialContext(ctx, "tcp", s.listen)
			if err == nil {
				// The client's preface and its settings: a connection the
				// server keeps, as an agent's, rather than one it drops
				// for saying nothing.
				_, err = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"))
			}
			done <- result{conn, err}
		}()
	}
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	receive := func() {
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatalf("a client connection failed: %v", r.err)
			}
			open = append(open, r.conn)
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d client connections made in a minute; the server holds %d", len(open), flood, connectionsMetric(t, cs, "leasehold_apiserver_connections"))
		}
	}
	// The server has room for limit-base of them at least: wait for
	// those, then for it to hold all it may (connections the readiness
	// probes left may close meanwhile, and give theirs to another).
	for len(open) < limit-base {
		receive()
	}
	for deadline := time.Now().Add(time.Minute); connectionsMetric(t, cs, "leasehold_apiserver_connections") != limit; {
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d connections with %d clients connected and more waiting, want its limit of %d", connectionsMetric(t, cs, "leasehold_apiserver_connections"), len(open), limit)
		}
		time.Sleep(50 * time.Millisecond) // polling the server, not timing a result
	}

	fds, err := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	if free := openFiles - len(fds); free < 100 {
		t.Errorf("the server has %d files open of %d with %d clients connected: %d left for etcd, want 100 or more", len(fds), openFiles, len(open), free)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "written-while-full"}}
	if _, err := cs.CoordinationV1().Leases("default").Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
		t.Errorf("writing with every connection taken: %v", err)
	}
	if log, _ := os.ReadFile(s.logPath); !strings.Contains(string(log), "serving the most client connections allowed") {
		t.Errorf("the server did not warn that its connections are full")
	}

	// Those that waited are served once others leave.
	for _, c := range open[:leave] {
		c.Close()
	}
	received := len(open)
	open = open[leave:]
	for ; received < flood; received++ {
		receive()
	}
	if _, err := cs.CoordinationV1().Leases("default").Get(context.Background(), lease.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("reading back the Lease: %v", err)
	}
}

// loopbackRE finds the server's loopback port in its log.
var loopbackRE = regexp.MustCompile(`msg="leasehold is serving" .*loopback=https://(\S+)`)

// loopbackAddr waits for the server to log that it is serving and returns
// the address of its loopback port.
func loopbackAddr(t *testing.T, s *server) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		log, err := os.ReadFile(s.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if m := loopbackRE.FindSubmatch(log); m != nil {
			return string(m[1])
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not log its loopback port within a minute")
		}
		time.Sleep(50 * time.Millisecond) // polling the log, not timing a result
	}
}

// Any process on the machine can connect to the server's loopback port,
// where its own controllers reach it, so that port too holds a bounded
// number of connections (64): 300 clients there, under an open-file limit
// of 400, leave the server 100 descriptors free and its writes going on,
// and those held back are served once others leave.
func TestLoopbackPortLeavesFilesForEtcd(t *testing.T) {
	t.Parallel()
	const (
		openFiles = 400
		flood     = 300
		held      = 64 // loopbackConnections
	)
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("this test runs leasehold under prlimit, from util-linux: %v", err)
	}
	dir := t.TempDir()
	s := serveForUnder(t, []string{prlimit, "--nofile=" + strconv.Itoa(openFiles), "--"}, filepath.Join(dir, "data"), "", dir)
	cs := s.clientset(t)
	addr := loopbackAddr(t, s)
	roots := certPool(t, filepath.Join(s.dataDir, "ca.crt"))
	config := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}

	// A handshake completes only once the server has accepted its
	// connection. Those it holds back wait in the listening socket's
	// queue; each gives up after a few seconds, which only makes fewer
	// complete, never more.
	handshakes := make(chan net.Conn, flood)
	for range flood {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := (&tls.Dialer{Config: config}).DialContext(ctx, "tcp", addr)
			if err != nil {
				conn = nil
			}
			handshakes <- conn
		}()
	}
	var open []net.Conn
	for range flood {
		if c := <-handshakes; c != nil {
			open = append(open, c)
		}
	}
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	if len(open) > held {
		t.Errorf("the loopback port accepted %d connections of %d, want at most %d", len(open), flood, held)
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	if free := openFiles - len(fds); free < 100 {
		t.Errorf("the server has %d files open of %d with %d clients at its loopback port: %d left for etcd, want 100 or more", len(fds), openFiles, flood, free)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "written-beside-the-loopback-flood"}}
	if _, err := cs.CoordinationV1().Leases("default").Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
		t.Errorf("writing with the loopback port full: %v", err)
	}

	for _, c := range open {
		c.Close()
	}
	open = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := (&tls.Dialer{Config: config}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("a client of the loopback port after the others left: %v", err)
	}
	conn.Close()
}
