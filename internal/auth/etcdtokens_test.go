package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/store/embedded"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestEtcdTokenStore: servers that share an etcd share the tokens kept
// there. Writers on any machine lose none of each other's changes, a
// token written works at its first use on every server, and a deletion
// reaches each at its next check.
func TestEtcdTokenStore(t *testing.T) {
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	src := EtcdTokenSource{KV: e.Client(), Prefix: "/registry"}
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	replica := func(src TokenSource) *TokenStore {
		ts, err := NewTokenStore(TokenStoreConfig{Source: src, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	a, b := replica(src), replica(src)
	other := replica(EtcdTokenSource{KV: e.Client(), Prefix: "/leasehold/team-b"})

	// Twenty writers at once, as many `leasehold token create` runs.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			entry := NewStoredToken(fmt.Sprintf("tok-%d", i), &User{Name: fmt.Sprintf("user-%d", i)}, clk.Now(), 0, "")
			if err := src.Update(ctx, func(cur []StoredToken) ([]StoredToken, error) { return append(cur, entry), nil }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	entries, err := src.Entries(ctx)
	if err != nil || len(entries) != 20 {
		t.Fatalf("after 20 concurrent writes: %d entries, %v", len(entries), err)
	}
	check := func(ts *TokenStore, token string, want bool) {
		t.Helper()
		u, ok, err := ts.Authenticate(bearer(token))
		if ok != want {
			t.Fatalf("%s: ok %v (%v, %v), want %v", token, ok, u, err, want)
		}
	}
	for i := range 20 {
		check(a, fmt.Sprintf("tok-%d", i), true) // the first miss reads etcd
		check(b, fmt.Sprintf("tok-%d", i), true)
	}
	check(other, "tok-1", false) // another prefix, another cluster

	if err := src.Update(ctx, func(cur []StoredToken) ([]StoredToken, error) {
		return slices.DeleteFunc(cur, func(e StoredToken) bool { return e.User == "user-3" }), nil
	}); err != nil {
		t.Fatal(err)
	}
	check(a, "tok-3", true) // a known token checks nothing
	for _, ts := range []*TokenStore{a, b} {
		if err := ts.Reload(); err != nil {
			t.Fatal(err)
		}
		check(ts, "tok-3", false)
		check(ts, "tok-4", true)
	}

	// What does not parse keeps the tokens in force.
	if _, err := e.Client().Put(ctx, path.Join("/registry", EtcdTokenStoreKey), "{"); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Error("a corrupt store reloaded without an error")
	}
	check(a, "tok-4", true)
	if err := src.Update(ctx, func(cur []StoredToken) ([]StoredToken, error) { return cur, nil }); err == nil {
		t.Error("a corrupt store was written over")
	}
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
	ts, err := NewTokenStore(TokenStoreConfig{Source: src, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
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
