package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/store/embedded"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestEtcdTokens: servers that share an etcd share the tokens kept there,
// one key each, so there may be more of them than one etcd value could
// hold. Writers on any machine lose none of each other's tokens; a server
// knows those written before it started, a token written after works at
// its first use, and a deletion reaches every server through its watch,
// or through a full read when etcd compacted past the watch.
func TestEtcdTokens(t *testing.T) {
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	c := e.Client()
	store := EtcdTokenStore{Client: c, Prefix: "/registry"}
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	var logs syncbuf.Buffer
	replica := func(prefix string) *EtcdTokens {
		ts, err := NewEtcdTokens(ctx, EtcdTokensConfig{Client: c, Prefix: prefix, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	entry := func(i int) StoredToken {
		return NewStoredToken(fmt.Sprintf("tok-%d", i), &User{Name: fmt.Sprintf("user-%d", i)}, clk.Now(), 0, "")
	}
	// Twenty writers at once, as many `leasehold token create` runs, and
	// 2 500 tokens more than one etcd value of 1.5 MiB could hold.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if err := store.Add(ctx, entry(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for from := 20; from < 2520; from += 100 {
		var ops []clientv3.Op
		for i := from; i < from+100; i++ {
			data, _ := json.Marshal(entry(i))
			ops = append(ops, clientv3.OpPut(store.key(entry(i).SHA256), string(data)))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Add(ctx, entry(7)); !errors.Is(err, ErrTokenExists) {
		t.Errorf("a token added twice: %v", err)
	}
	entries, _, err := store.Entries(ctx)
	if err != nil || len(entries) != 2520 {
		t.Fatalf("entries: %d, %v; want 2520", len(entries), err)
	}

	check := func(ts *EtcdTokens, token string, want bool) {
		t.Helper()
		clk.Step(10 * time.Millisecond) // each miss may read etcd
		u, ok, err := ts.Authenticate(bearer(token))
		if ok != want {
			t.Fatalf("%s: ok %v (%v, %v), want %v", token, ok, u, err, want)
		}
	}
	a, b := replica("/registry"), replica("/registry")
	other := replica("/leasehold/team-b")
	for _, i := range []int{0, 19, 20, 2519} {
		check(a, fmt.Sprintf("tok-%d", i), true) // read at start
	}
	check(other, "tok-1", false) // another prefix, another cluster
	if err := store.Add(ctx, entry(5000)); err != nil {
		t.Fatal(err)
	}
	check(b, "tok-5000", true) // its first use reads its key
	// Requests sent at once with a new token all pass, one reading its key.
	if err := store.Add(ctx, entry(5001)); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Millisecond)
	var passed sync.WaitGroup
	for range 5 {
		passed.Go(func() {
			if _, ok, err := b.Authenticate(bearer("tok-5001")); !ok {
				t.Errorf("a request sent with the others: %v", err)
			}
		})
	}
	passed.Wait()
	// A token with a TTL (token create --ttl) stops at its expiry.
	brief := NewStoredToken("tok-brief", &User{Name: "brief"}, clk.Now(), time.Minute, "")
	if err := store.Add(ctx, brief); err != nil {
		t.Fatal(err)
	}
	check(b, "tok-brief", true)
	clk.Step(time.Minute)
	check(b, "tok-brief", false)

	// Deletions reach a running server through its watch.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	upTo := make(chan int64, 100)
	a.applied = func(rev int64) { upTo <- rev }
	ran := make(chan struct{})
	go func() { a.Run(runCtx); close(ran) }()
	n, err := store.Remove(ctx, func(e StoredToken) bool { return e.User == "user-3" || e.User == "user-2000" })
	if err != nil || n != 2 {
		t.Fatalf("removing two tokens: %d, %v", n, err)
	}
	removedAt := mustRev(t, c)
	for rev := int64(0); rev < removedAt; rev = <-upTo {
	}
	check(a, "tok-3", false)
	check(a, "tok-2000", false)
	check(a, "tok-4", true)

	// A server whose watch etcd compacted past reads them all again.
	stop()
	<-ran
	if err := store.Add(ctx, entry(6000)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Remove(ctx, func(e StoredToken) bool { return e.User == "user-4" }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, mustRev(t, c)); err != nil {
		t.Fatal(err)
	}
	runCtx, stop = context.WithCancel(ctx)
	defer stop()
	a.applied = nil
	done := make(chan struct{})
	go func() { a.Run(runCtx); close(done) }()
	for !clk.HasWaiters() { // its watch failed; it waits a second
		runtime.Gosched()
	}
	clk.Step(time.Second)
	for !strings.Contains(logs.String(), "following the tokens in etcd again") { // it read them all
		runtime.Gosched()
	}
	stop()
	<-done
	check(a, "tok-4", false)
	check(a, "tok-6000", true)
	if got := strings.Count(logs.String(), "following the tokens in etcd failed"); got != 1 {
		t.Errorf("the compaction's failure logged %d times:\n%s", got, logs.String())
	}

	// An entry that does not parse authenticates no one, and keeps no other
	// token from working.
	if _, err := c.Put(ctx, store.key(entry(8).SHA256), "{"); err != nil {
		t.Fatal(err)
	}
	c2 := replica("/registry")
	check(c2, "tok-8", false)
	check(c2, "tok-9", true)
}

func mustRev(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), "any")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// failingSource fails each Load with the next of errs ("" loads), and
// says on loaded when it was asked.
type failingSource struct {
	errs   []string
	loaded chan struct{}
}

func (f *failingSource) String() string { return "test source" }

func (f *failingSource) Load(_ context.Context, since string) ([]StoredToken, string, bool, error) {
	defer func() { f.loaded <- struct{}{} }()
	e := f.errs[0]
	f.errs = f.errs[1:]
	if e != "" {
		return nil, "", false, errors.New(e)
	}
	return nil, "v", since != "v", nil
}

// TestTokenStoreLogsAnOutageOnce: a source that fails the same way at every
// check (an etcd away) is logged once, then once more when it is read.
func TestTokenStoreLogsAnOutageOnce(t *testing.T) {
	src := &failingSource{errs: []string{"", "etcd away", "etcd away", "etcd away", "etcd still away", "", ""}, loaded: make(chan struct{}, 1)}
	var logs syncbuf.Buffer
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	ts, err := NewTokenStore(TokenStoreConfig{source: src, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	<-src.loaded
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ts.Run(ctx); close(done) }()
	for range 6 {
		for !clk.HasWaiters() {
			runtime.Gosched()
		}
		clk.Step(time.Second)
		<-src.loaded
	}
	cancel()
	<-done
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		_, msg, _ := strings.Cut(line, "msg=")
		got = append(got, msg)
	}
	want := []string{
		`"token store reload failed; keeping the previous tokens" path="test source" err="etcd away"`,
		`"token store reload failed; keeping the previous tokens" path="test source" err="etcd still away"`,
		`"token store read again" path="test source"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("logs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// blockingSource serves entries, each Load after the first waiting for
// release.
type blockingSource struct {
	entries []StoredToken
	loads   int
	loading chan struct{}
	release chan struct{}
}

func (b *blockingSource) String() string { return "test source" }

func (b *blockingSource) Load(_ context.Context, since string) ([]StoredToken, string, bool, error) {
	b.loads++
	if b.loads > 1 {
		b.loading <- struct{}{}
		<-b.release
	}
	return b.entries, strconv.Itoa(b.loads), true, nil
}

// TestTokenStoreConcurrentFirstUse: requests that a client sends at once
// with a token just written all pass, though only one of them reads the
// store: the others wait for that read and find the token it brought.
func TestTokenStoreConcurrentFirstUse(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	src := &blockingSource{loading: make(chan struct{}), release: make(chan struct{})}
	ts, err := NewTokenStore(TokenStoreConfig{source: src, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	src.entries = []StoredToken{NewStoredToken("new", &User{Name: "web-1"}, clk.Now(), 0, "")}
	results := make(chan bool, 3)
	for range 3 {
		go func() {
			_, ok, _ := ts.Authenticate(bearer("new"))
			results <- ok
		}()
	}
	<-src.loading // one request reads the store; the others miss meanwhile
	for range 100 {
		runtime.Gosched()
	}
	close(src.release)
	for range 3 {
		if !<-results {
			t.Error("a request sent with the others was refused")
		}
	}
	if src.loads != 2 {
		t.Errorf("the store was read %d times after its start, want once", src.loads-1)
	}
}
