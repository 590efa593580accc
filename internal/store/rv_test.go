package store

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestResumeWithinRevision: the changes group commit puts in one revision
// each get a resourceVersion of their own, placed per kind in etcd's
// order: a put at its index among its kind's writes in the batch (a
// failed write leaves its place unused), a deletion after its kind's last
// change. A write's answer, a read from etcd, the watch cache's events and
// a watch served from etcd give the same ones; and a watch resumed from
// any of them, of all namespaces or one, from the cache or from etcd,
// delivers exactly the changes after it.
func TestResumeWithinRevision(t *testing.T) {
	var other *Kind
	s, k, ctx := runLeaseStore(t, "seqleases", Config{}, func(k *Kind) {
		other = k.s.Kind(coordinationv1.Resource("seqothers"), "seqothers", coordinationv1.SchemeGroupVersion.WithKind("Lease"), true,
			func() runtime.Object { return &coordinationv1.Lease{} }, func() runtime.Object { return &coordinationv1.LeaseList{} })
	})
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	newLease := func(ns, name string) *coordinationv1.Lease {
		l := sampleLease()
		l.Namespace, l.Name, l.ManagedFields, l.OwnerReferences = ns, name, nil, nil
		return l
	}
	taken, err := k.Create(ctx, k.Key("a", "taken"), newLease("a", "taken"), false)
	if err != nil {
		t.Fatal(err)
	}
	start := ResourceVersion(taken)
	all, err := k.Watch(ctx, WatchOptions{ResourceVersion: strconv.FormatInt(start, 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()

	// commit sends writes to etcd as one transaction and returns each
	// one's resourceVersion, or -1 where its compare failed.
	commit := func(writes ...write) []int64 {
		t.Helper()
		reqs := make([]*txnRequest, len(writes))
		for i, w := range writes {
			reqs[i] = &txnRequest{write: w, ctx: ctx, done: make(chan txnResult, 1)}
		}
		s.batch.commit(ctx, reqs)
		var rev int64
		rvs := make([]int64, len(reqs))
		for i, r := range reqs {
			res := <-r.done
			switch {
			case res.err != nil:
				t.Fatal(res.err)
			case rev != 0 && res.rev != rev:
				t.Fatalf("one transaction answered revisions %d and %d", rev, res.rev)
			case !res.succeeded:
				rvs[i] = -1
			default:
				rvs[i] = changeRV(res.rev, res.place)
			}
			rev = res.rev
		}
		return rvs
	}
	put := func(k *Kind, ns, name string) write {
		return write{key: k.Key(ns, name), kind: k.prefix, created: true, value: mustEncode(t, k, newLease(ns, name))}
	}
	first := commit(put(k, "a", "0"), put(other, "a", "x"), put(k, "b", "0"), put(k, "a", "taken"), put(k, "a", "1"))
	r1 := revisionOf(first[0])
	if want := []int64{changeRV(r1, 0), changeRV(r1, 0), changeRV(r1, 1), -1, changeRV(r1, 3)}; !slices.Equal(first, want) {
		t.Fatalf("resourceVersions of the first transaction: %v, want %v", first, want)
	}
	r2 := r1 + 1
	second := commit(
		put(k, "a", "taken"),
		write{key: k.Key("a", "0"), kind: k.prefix, rev: r1, del: true},
		write{key: k.Key("b", "0"), kind: k.prefix, rev: r1, value: mustEncode(t, k, newLease("b", "0"))},
		write{key: k.Key("a", "1"), kind: k.prefix, rev: r1, del: true},
	)
	// A deletion takes the place after its kind's last change.
	if want := []int64{-1, changeRV(r2, 0), changeRV(r2, 2), changeRV(r2, 3)}; !slices.Equal(second, want) {
		t.Fatalf("resourceVersions of the second transaction: %v, want %v", second, want)
	}
	// A last write of its own marks the end of what each watch must see.
	end, err := k.Create(ctx, k.Key("a", "end"), newLease("a", "end"), false)
	if err != nil {
		t.Fatal(err)
	}
	endRV := ResourceVersion(end)
	if endRV != changeRV(r2+1, 0) {
		t.Fatalf("a write alone: resourceVersion %d, want %d", endRV, changeRV(r2+1, 0))
	}
	endB, err := k.Create(ctx, k.Key("b", "end"), newLease("b", "end"), false)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[string]int64{"": endRV, "b": ResourceVersion(endB)}

	// until reads w up to the event at endRV.
	until := func(what string, w *Watch, endRV int64) []string {
		t.Helper()
		var got []string
		events := make(chan *Event, len(w.Initial))
		for _, e := range w.Initial {
			events <- e
		}
		timeout := time.After(time.Minute)
		for {
			if len(events) == 0 {
				events = nil
			}
			select {
			case e := <-events:
				if e.RV == endRV {
					return got
				}
				got = append(got, describe(e))
			case e, ok := <-w.Events:
				if !ok {
					t.Fatalf("%s: ended after %v", what, got)
				}
				m, _ := meta.Accessor(e.Object)
				if m.GetResourceVersion() != strconv.FormatInt(e.RV, 10) {
					t.Fatalf("%s: event at %d carries resourceVersion %s", what, e.RV, m.GetResourceVersion())
				}
				if e.RV == endRV {
					return got
				}
				got = append(got, describe(e))
			case <-timeout:
				t.Fatalf("%s: no event at %d after %v", what, endRV, got)
			}
		}
	}
	want := []string{
		fmt.Sprintf("ADDED a/0 %d", changeRV(r1, 0)),
		fmt.Sprintf("ADDED b/0 %d", changeRV(r1, 1)),
		fmt.Sprintf("ADDED a/1 %d", changeRV(r1, 3)),
		fmt.Sprintf("DELETED a/0 %d", changeRV(r2, 0)),
		fmt.Sprintf("MODIFIED b/0 %d", changeRV(r2, 2)),
		fmt.Sprintf("DELETED a/1 %d", changeRV(r2, 3)),
	}
	if got := until("the watch cache", all, endRV); !slices.Equal(got, want) {
		t.Fatalf("the watch cache's events:\n%v\nwant\n%v", got, want)
	}
	// A read from etcd gives the resourceVersion the write and the watch
	// gave; so does a list, from etcd or the cache, itself at the end of
	// a revision.
	got, err := k.Get(ctx, k.Key("b", "0"))
	if err != nil {
		t.Fatal(err)
	}
	if rv := ResourceVersion(got); rv != changeRV(r2, 2) {
		t.Errorf("b/0 read from etcd at %d, want %d as written", rv, changeRV(r2, 2))
	}
	fromCache, err := k.List(ctx, ListOptions{Namespace: "b"})
	if err != nil {
		t.Fatal(err)
	}
	fromEtcd, err := k.listEtcd(ctx, ListOptions{Namespace: "b"}, 0, k.Prefix("b"))
	if err != nil {
		t.Fatal(err)
	}
	for what, res := range map[string]*ListResult{"the cache": fromCache, "etcd": fromEtcd} {
		if len(res.Items) == 0 {
			t.Fatalf("a list of b from %s is empty", what)
		}
		if rv := ResourceVersion(res.Items[0]); rv != changeRV(r2, 2) {
			t.Errorf("b/0 listed from %s at %d, want %d as written", what, rv, changeRV(r2, 2))
		}
		if res.ResourceVersion%rvPerRevision != rvPerRevision-1 {
			t.Errorf("a list from %s at %d, want the end of a revision", what, res.ResourceVersion)
		}
	}
	// A resourceVersion before the first revision's end watches from the
	// first revision, not from now.
	early := &watcher{prefix: k.Prefix("a"), ch: make(chan *Event, 100)}
	fromStart, err := k.watchEtcd(ctx, early, 5)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-fromStart.Events:
		if describe(e) != fmt.Sprintf("ADDED a/taken %d", start) {
			t.Errorf("a watch from 5: first %s, want a/taken's creation at %d", describe(e), start)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("a watch from 5: nothing, want a/taken's creation at %d", start)
	}
	fromStart.Stop()
	rvs := []int64{start, changeRV(r1, 0), changeRV(r1, 1), changeRV(r1, 3), changeRV(r2, 0), changeRV(r2, 2), changeRV(r2, 3)}
	for i, from := range rvs {
		after := want[i:]
		var inB []string
		for _, e := range after {
			if strings.HasPrefix(strings.Fields(e)[1], "b/") {
				inB = append(inB, e)
			}
		}
		for _, ns := range []string{"", "b"} {
			expect := after
			if ns == "b" {
				expect = inB
			}
			w, err := k.Watch(ctx, WatchOptions{Namespace: ns, ResourceVersion: strconv.FormatInt(from, 10)})
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("the cache's watch of %q from %d", ns, from)
			if got := until(what, w, ends[ns]); !slices.Equal(got, expect) {
				t.Errorf("%s:\n%v\nwant\n%v", what, got, expect)
			}
			w.Stop()
			ew := &watcher{prefix: k.Prefix(ns), ch: make(chan *Event, 100)}
			etcd, err := k.watchEtcd(ctx, ew, from)
			if err != nil {
				t.Fatal(err)
			}
			what = fmt.Sprintf("etcd's watch of %q from %d", ns, from)
			if got := until(what, etcd, ends[ns]); !slices.Equal(got, expect) {
				t.Errorf("%s:\n%v\nwant\n%v", what, got, expect)
			}
			etcd.Stop()
		}
	}
}

func describe(e *Event) string {
	m, _ := meta.Accessor(e.Object)
	return fmt.Sprintf("%s %s/%s %d", e.Type, m.GetNamespace(), m.GetName(), e.RV)
}
