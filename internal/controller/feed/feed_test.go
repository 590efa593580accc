package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/leakcheck"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m, "feed.(*Feed)"))
}

func lease(name, rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: rv}}
}

func leaseList(rv string, items ...*coordinationv1.Lease) *coordinationv1.LeaseList {
	l := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, i := range items {
		l.Items = append(l.Items, *i)
	}
	return l
}

// script is a ListerWatcher whose lists and watches the test answers one
// by one, and a Handler that records what it is handed.
type script struct {
	lists   chan listAnswer
	watches chan watchAnswer
	// watched receives the options of every watch asked for.
	watched chan metav1.ListOptions
	// listed receives the options of every list asked for, as
	// "limit=… rv=… match=… continue=…".
	listed chan string
	calls  chan string
}

type listAnswer struct {
	list kruntime.Object
	err  error
}

type watchAnswer struct {
	w   watch.Interface
	err error
}

func newScript() *script {
	return &script{lists: make(chan listAnswer), watches: make(chan watchAnswer), watched: make(chan metav1.ListOptions, 1), listed: make(chan string, 100), calls: make(chan string, 100)}
}

// listThenWatch is a client that serves no watch-list streams, so that
// the Reflector lists and then watches, as from leasehold's watch cache.
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (s *script) lw() cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			select {
			case s.listed <- fmt.Sprintf("limit=%d rv=%s match=%s continue=%s", o.Limit, o.ResourceVersion, o.ResourceVersionMatch, o.Continue):
			default:
			}
			select {
			case a := <-s.lists:
				return a.list, a.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			s.watched <- o
			select {
			case a := <-s.watches:
				return a.w, a.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}, listThenWatch{})
}

func (s *script) handler() Handler {
	return Handler{
		Seen: func(obj kruntime.Object, initial bool) {
			s.calls <- fmt.Sprintf("seen %s %s initial=%v", obj.(*coordinationv1.Lease).Name, obj.(*coordinationv1.Lease).ResourceVersion, initial)
		},
		Gone: func(obj kruntime.Object) { s.calls <- "gone " + obj.(*coordinationv1.Lease).Name },
		Relisted: func(listed func(types.UID) bool) {
			s.calls <- fmt.Sprintf("relisted a=%v b=%v c=%v", listed("uid-a"), listed("uid-b"), listed("uid-c"))
		},
	}
}

// expect reads the next calls of the handler.
func (s *script) expect(t *testing.T, want ...string) {
	t.Helper()
	expectOn(t, s.calls, "call", want)
}

// expectLists reads the options of the next lists asked for.
func (s *script) expectLists(t *testing.T, want ...string) {
	t.Helper()
	expectOn(t, s.listed, "list", want)
}

// expectOn reads len(want) values of what from ch, in order.
func expectOn(t *testing.T, ch <-chan string, what string, want []string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-ch:
			if got != w {
				t.Fatalf("%s %q, want %q", what, got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s; want %q", what, w)
		}
	}
}

// page answers a list with one page of it.
func page(rv, cont string, items ...*coordinationv1.Lease) listAnswer {
	l := leaseList(rv, items...)
	l.Continue = cont
	return listAnswer{list: l}
}

// watchFrom answers the next watch, which must start at rv, with a fake
// watcher.
func (s *script) watchFrom(t *testing.T, rv string) *watch.RaceFreeFakeWatcher {
	t.Helper()
	o := <-s.watched
	if o.ResourceVersion != rv || !o.AllowWatchBookmarks || o.TimeoutSeconds == nil {
		t.Fatalf("watch with %+v, want from %s with bookmarks and a timeout", o, rv)
	}
	w := watch.NewRaceFreeFake()
	s.watches <- watchAnswer{w: w}
	return w
}

func run(t *testing.T, s *script, clk *clocktesting.FakeClock) *Feed {
	t.Helper()
	// A millisecond between lists: the Reflector's backoff waits on the
	// real clock.
	f := newFeed(Config{ListerWatcher: s.lw(), Handler: s.handler(), Clock: clk, Logger: slog.Default()},
		&wait.Backoff{Duration: time.Millisecond, Cap: time.Millisecond, Steps: 1, Factor: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return f
}

func TestListThenWatch(t *testing.T) {
	s := newScript()
	f := run(t, s, clocktesting.NewFakeClock(time.Now()))
	if f.HasSynced() {
		t.Fatal("synced before listing")
	}
	s.lists <- listAnswer{list: leaseList("10", lease("a", "5"), lease("b", "7"))}
	s.expect(t, "seen a 5 initial=true", "seen b 7 initial=true")
	w := s.watchFrom(t, "10")
	if !f.HasSynced() {
		t.Fatal("not synced after the first list")
	}
	w.Add(lease("c", "11"))
	w.Modify(lease("a", "12"))
	w.Delete(lease("b", "13"))
	w.Action(watch.Bookmark, lease("", "20"))
	s.expect(t, "seen c 11 initial=false", "seen a 12 initial=false", "gone b")
	// A watch that ends is resumed from the last resourceVersion seen, a
	// bookmark's included, without a list and without waiting.
	w.Stop()
	w = s.watchFrom(t, "20")
	w.Modify(lease("c", "21"))
	s.expect(t, "seen c 21 initial=false")
}

func TestRelistAfterExpiredWatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		expired func(s *script, w *watch.RaceFreeFakeWatcher)
	}{
		{"error event", func(_ *script, w *watch.RaceFreeFakeWatcher) {
			w.Error(&apierrors.NewResourceExpired("too old resource version: 10 (30)").ErrStatus)
		}},
		{"gone error event", func(_ *script, w *watch.RaceFreeFakeWatcher) {
			w.Error(&apierrors.NewGone("gone").ErrStatus)
		}},
		{"watch refused", func(s *script, w *watch.RaceFreeFakeWatcher) {
			w.Stop()
			<-s.watched
			s.watches <- watchAnswer{err: apierrors.NewResourceExpired("too old resource version: 10 (30)")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript()
			run(t, s, clocktesting.NewFakeClock(time.Now()))
			s.lists <- listAnswer{list: leaseList("10", lease("a", "5"), lease("b", "7"))}
			s.expect(t, "seen a 5 initial=true", "seen b 7 initial=true")
			w := s.watchFrom(t, "10")
			w.Modify(lease("a", "11"))
			s.expect(t, "seen a 11 initial=false")
			tc.expired(s, w)
			// b went and c came while the feed was not watching.
			s.lists <- listAnswer{list: leaseList("40", lease("a", "11"), lease("c", "35"))}
			s.expect(t, "seen a 11 initial=false", "seen c 35 initial=false", "relisted a=true b=false c=true")
			s.watchFrom(t, "40")
		})
	}
}

// TestListInPages: a feed reads a list page by page and hands each page's
// objects over before it asks for the next, so that it never holds more
// than a page; it watches from the list's resourceVersion, and a relist in
// pages forgets what none of its pages held. A list that fails part way is
// read again from its first page.
func TestListInPages(t *testing.T) {
	s := newScript()
	f := run(t, s, clocktesting.NewFakeClock(time.Now()))
	s.lists <- page("10", "c1", lease("a", "5"))
	// The next page is not answered yet: a feed that gathered the pages
	// first would hand nothing over.
	s.expect(t, "seen a 5 initial=true")
	if f.HasSynced() {
		t.Fatal("synced before the last page")
	}
	s.lists <- page("10", "", lease("b", "7"))
	s.expect(t, "seen b 7 initial=true")
	w := s.watchFrom(t, "10")
	if !f.HasSynced() {
		t.Fatal("not synced after the last page")
	}
	s.expectLists(t, "limit=500 rv=0 match= continue=", "limit=500 rv= match= continue=c1")

	// The watch expires; b goes and c comes meanwhile. The relist asks for
	// a state at least as new as the last seen, in pages; its second page
	// fails, so it starts again with the newest state.
	w.Error(&apierrors.NewResourceExpired("too old resource version: 10 (30)").ErrStatus)
	s.lists <- page("40", "c2", lease("b", "7"))
	s.expect(t, "seen b 7 initial=false")
	s.lists <- listAnswer{err: apierrors.NewResourceExpired("the continue token expired")}
	s.lists <- page("45", "c3", lease("c", "35"))
	s.expect(t, "seen c 35 initial=false")
	s.lists <- page("45", "", lease("a", "11"))
	s.expect(t, "seen a 11 initial=false", "relisted a=true b=false c=true")
	s.watchFrom(t, "45")
	s.expectLists(t, "limit=500 rv=10 match=NotOlderThan continue=", "limit=500 rv= match= continue=c2",
		"limit=500 rv= match= continue=", "limit=500 rv= match= continue=c3")
}

// TestNoPageAfterEnd: a page read after the feed's context has ended
// reaches no handler. Run returns as soon as the context ends, while the
// Reflector's list goroutine may still be reading, deaf to the context as
// a list already on its way back is.
func TestNoPageAfterEnd(t *testing.T) {
	s := newScript()
	f := newFeed(Config{ListerWatcher: s.lw(), Handler: s.handler(), Clock: clocktesting.NewFakeClock(time.Now()), Logger: slog.Default()}, nil)
	deaf := &cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
		return leaseList("10", lease("a", "5")), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&pagedLister{ListerWatcherWithContext: deaf, f: f}).ListWithContext(ctx, metav1.ListOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the list ended with %v, want the context's end", err)
	}
	select {
	case got := <-s.calls:
		t.Errorf("after the context ended the handler got %q", got)
	default:
	}
}

// TestListRetried: a list that fails is tried again.
func TestListRetried(t *testing.T) {
	s := newScript()
	f := run(t, s, clocktesting.NewFakeClock(time.Now()))
	s.lists <- listAnswer{err: errors.New("no server")}
	s.lists <- listAnswer{list: leaseList("10", lease("a", "5"))}
	s.expect(t, "seen a 5 initial=true")
	s.watchFrom(t, "10")
	if !f.HasSynced() {
		t.Fatal("not synced after the first list")
	}
}

func TestNew(t *testing.T) {
	s := newScript()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no ListerWatcher", Config{Handler: s.handler()}},
		{"no Seen", Config{ListerWatcher: s.lw(), Handler: Handler{Gone: s.handler().Gone, Relisted: s.handler().Relisted}}},
		{"no Gone", Config{ListerWatcher: s.lw(), Handler: Handler{Seen: s.handler().Seen, Relisted: s.handler().Relisted}}},
		{"no Relisted", Config{ListerWatcher: s.lw(), Handler: Handler{Seen: s.handler().Seen, Gone: s.handler().Gone}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
	f, err := New(Config{ListerWatcher: s.lw(), Handler: s.handler()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := f.Run(ctx); err == nil {
		t.Fatal("second Run accepted")
	}
}
