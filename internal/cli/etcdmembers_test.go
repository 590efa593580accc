package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/store/embedded"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// freezer forwards TCP connections to a target. Frozen, it holds what
// either side sends but keeps the connections open, as a frozen machine or
// a partition does.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	thawed *sync.Cond
	frozen bool
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target}
	f.thawed = sync.NewCond(&f.mu)
	t.Cleanup(func() { ln.Close(); f.set(false) })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go f.pipe(in, out)
			go f.pipe(out, in)
		}
	}()
	return f
}

func (f *freezer) url() string { return "http://" + f.ln.Addr().String() }

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	f.frozen = frozen
	f.mu.Unlock()
	f.thawed.Broadcast()
}

// pipe copies src to dst, holding each chunk while frozen.
func (f *freezer) pipe(src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		for f.frozen {
			f.thawed.Wait()
		}
		f.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestFollowAnswering: a member that stops answering with its connections
// open gets no calls from the server's etcd client once a probe round has
// found it silent, and gets them again once it answers. When none
// answers, all get calls (the log says so, not that the silent one
// answers again), and unanswered tells since when, until one answers
// again. (The three endpoints here reach one member through three
// proxies, which freeze.)
func TestFollowAnswering(t *testing.T) {
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	proxies := []*freezer{newFreezer(t, hostOf(t, e.Endpoints()[0])), newFreezer(t, hostOf(t, e.Endpoints()[0])), newFreezer(t, hostOf(t, e.Endpoints()[0]))}
	var all []string
	for _, p := range proxies {
		all = append(all, p.url())
	}
	cfg := clientv3.Config{Endpoints: all, DialKeepAliveTime: etcdKeepAliveTime, DialKeepAliveTimeout: etcdKeepAliveTimeout, Logger: zap.NewNop()}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clk := testingclock.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var unanswered atomic.Int64
	var logged syncbuf.Buffer
	go func() {
		followAnswering(ctx, c, cfg, clk, slog.New(slog.NewTextHandler(&logged, nil)), &unanswered)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	// The member's shutdown waits for the calls that frozen proxies hold.
	defer func() {
		for _, p := range proxies {
			p.set(false)
		}
	}()

	// endpoints waits until c sends calls to want, running probe rounds.
	endpoints := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !slices.Equal(c.Endpoints(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("endpoints %v, want %v", c.Endpoints(), want)
			}
			if clk.HasWaiters() {
				clk.Step(memberProbeInterval)
			}
			runtime.Gosched()
		}
	}
	proxies[1].set(true)
	endpoints(all[0], all[2])
	if _, err := c.Put(context.Background(), "/after", "v"); err != nil {
		t.Fatalf("a write with one endpoint silent: %v", err)
	}
	proxies[1].set(false)
	endpoints(all...)
	if got := unanswered.Load(); got != 0 {
		t.Errorf("unanswered = %d with every member answering, want 0", got)
	}

	// untilUnanswered runs probe rounds until unanswered is (or is not) 0.
	untilUnanswered := func(zero bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for (unanswered.Load() == 0) != zero {
			if time.Now().After(deadline) {
				t.Fatalf("unanswered = %d after 30 s, want zero: %v", unanswered.Load(), zero)
			}
			if clk.HasWaiters() {
				clk.Step(memberProbeInterval)
			}
			runtime.Gosched()
		}
	}
	proxies[0].set(true)
	endpoints(all[1], all[2])
	logged.Take()
	for _, p := range proxies {
		p.set(true)
	}
	untilUnanswered(false)
	endpoints(all...)
	// The silent member is called again because none answers, not because
	// it does.
	if out := logged.Take(); strings.Contains(out, "etcd member answers again") || !strings.Contains(out, "no etcd member answers") {
		t.Errorf("with none answering, the log says:\n%s", out)
	}
	proxies[2].set(false)
	untilUnanswered(true)
	endpoints(all[2])
}

// TestCallable: the members that answered get calls, and all of them when
// none did.
func TestCallable(t *testing.T) {
	all := []string{"a", "b", "c"}
	for _, tc := range []struct {
		answered []bool
		want     []string
	}{
		{[]bool{true, true, true}, all},
		{[]bool{true, false, true}, []string{"a", "c"}},
		{[]bool{false, false, true}, []string{"c"}},
		{[]bool{false, false, false}, all},
	} {
		if got := callable(all, tc.answered); !slices.Equal(got, tc.want) {
			t.Errorf("answered %v: %v, want %v", tc.answered, got, tc.want)
		}
	}
}

func hostOf(t *testing.T, endpoint string) string {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestJoinCommand: the command member add prints starts the new member as
// the cluster runs, with its certificate flags when the peers speak TLS.
func TestJoinCommand(t *testing.T) {
	members := []*pb.Member{{ID: 1, Name: "a", PeerURLs: []string{"https://10.0.0.1:2380"}}, {ID: 4, PeerURLs: []string{"https://10.0.0.4:2380"}}}
	got := joinCommand("d", 4, []string{"https://10.0.0.4:2380"}, members)
	for _, want := range []string{
		"leasehold etcd cert --member d --hosts HOST",
		"--initial-cluster a=https://10.0.0.1:2380,d=https://10.0.0.4:2380 --initial-cluster-state existing",
		"--cert-file PKI/d.crt --key-file PKI/d.key --trusted-ca-file PKI/ca.crt --client-cert-auth",
		"--peer-cert-file PKI/d.crt --peer-key-file PKI/d.key --peer-trusted-ca-file PKI/ca.crt --peer-client-cert-auth",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("on TLS: %s\nwant %q in it", got, want)
		}
	}
	members[0].PeerURLs = []string{"http://10.0.0.1:2380"}
	if got := joinCommand("d", 4, []string{"http://10.0.0.4:2380"}, members); strings.Contains(got, "cert") {
		t.Errorf("without TLS: %s", got)
	}
}

// TestWhyEtcdUnreachable: what etcd's client reports as a deadline
// exceeded is told apart by asking /health: a closed port, a certificate
// no trusted CA signed, plain HTTP to a TLS port, a member without a
// leader; a healthy member is no reason.
func TestWhyEtcdUnreachable(t *testing.T) {
	ctx := context.Background()
	healthy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"health":"true"}`)
	}))
	defer healthy.Close()
	leaderless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"health":"false","reason":"RAFT NO LEADER"}`)
	}))
	defer leaderless.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	trusting := &tls.Config{RootCAs: x509.NewCertPool()}
	trusting.RootCAs.AddCert(healthy.Certificate())

	for _, c := range []struct {
		name      string
		endpoints []string
		tls       *tls.Config
		want      string // "" for no reason
	}{
		{"closed port", []string{"http://" + closedAddr}, nil, "connection refused"},
		{"closed port, no scheme", []string{closedAddr}, nil, "connection refused"},
		{"unknown CA", []string{healthy.URL}, &tls.Config{RootCAs: x509.NewCertPool()}, "certificate signed by unknown authority"},
		{"plain HTTP to TLS", []string{strings.Replace(healthy.URL, "https://", "http://", 1)}, nil, "HTTP request to an HTTPS server"},
		{"no leader", []string{leaderless.URL}, nil, "503 Service Unavailable {\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}"},
		{"healthy", []string{healthy.URL}, trusting, ""},
		{"one of two healthy", []string{"http://" + closedAddr, healthy.URL}, trusting, ""},
		{"unix socket", []string{"unix:///run/etcd.sock"}, nil, ""},
	} {
		err := whyEtcdUnreachable(ctx, c.endpoints, c.tls)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no reason", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestEtcdClientConfigRefuses: an endpoint of another scheme, and a client
// key or certificate given without the other, fail at once.
func TestEtcdClientConfigRefuses(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		endpoints       []string
		cert, key, want string
	}{
		{[]string{"htp://127.0.0.1:2379"}, "", "", `etcd endpoint "htp://127.0.0.1:2379": the scheme must be http, https, unix or unixs`},
		{[]string{"https://127.0.0.1:2379"}, "", "client.key", "--etcd-certfile and --etcd-keyfile go together"},
		{[]string{"https://127.0.0.1:2379"}, "client.crt", "", "--etcd-certfile and --etcd-keyfile go together"},
	} {
		if _, err := etcdClientConfig(c.endpoints, "", c.cert, c.key, log); err == nil || err.Error() != c.want {
			t.Errorf("%v cert %q key %q: %v, want %q", c.endpoints, c.cert, c.key, err, c.want)
		}
	}
	if _, err := etcdClientConfig([]string{"127.0.0.1:2379", "http://a:2379", "unix:///run/etcd.sock"}, "", "", "", log); err != nil {
		t.Errorf("endpoints etcd takes: %v", err)
	}
}
