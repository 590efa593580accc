package apiserver

import (
	"slices"
	"sync/atomic"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leasehold/leasehold/internal/store"
)

// TestFinishRevision: a watch that ends of its own accord writes the rest
// of the revision it was in the middle of, events still being queued
// included, and leaves a later revision's events to the resumed watch
// (which starts after the last revision written); a watch that ended
// between revisions writes nothing more.
func TestFinishRevision(t *testing.T) {
	ev := func(t watch.EventType, rv int64, name string) *store.Event {
		return &store.Event{Type: t, RV: rv, Object: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	}
	finish := func(w *store.Watch, last int64) []string {
		var wrote []string
		finishRevision(w, last, nil, func(e *store.Event) error {
			wrote = append(wrote, e.Object.(*coordinationv1.Lease).Name)
			return nil
		})
		return wrote
	}
	queued := func(evs ...*store.Event) chan *store.Event {
		ch := make(chan *store.Event, len(evs))
		for _, e := range evs {
			ch <- e
		}
		return ch
	}

	// Revision 5 changed a, b and c; a was written when the watch's time
	// ran out.
	w := &store.Watch{Events: queued(ev(watch.Modified, 5, "b"), ev(watch.Deleted, 5, "c"), ev(watch.Bookmark, 5, ""), ev(watch.Added, 6, "d"), ev(watch.Added, 6, "e"))}
	if got := finish(w, 5); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("the rest of revision 5: wrote %q, want b and c", got)
	}
	if got := finish(&store.Watch{Events: queued(ev(watch.Added, 6, "d"))}, 0); got != nil {
		t.Errorf("between revisions: wrote %q, want nothing", got)
	}

	// The producer is still queuing revision 7: its last event comes after
	// the watch's time ran out.
	ch := make(chan *store.Event)
	var queuing atomic.Bool
	queuing.Store(true)
	w = &store.Watch{Events: ch}
	w.SetPending(func(rev int64) bool { return rev == 7 && queuing.Load() })
	go func() {
		ch <- ev(watch.Modified, 7, "late")
		queuing.Store(false)
	}()
	if got := finish(w, 7); !slices.Equal(got, []string{"late"}) {
		t.Errorf("a revision still being queued: wrote %q, want late", got)
	}

	// A closed watch ends it.
	closed := queued(ev(watch.Modified, 8, "x"))
	close(closed)
	if got := finish(&store.Watch{Events: closed}, 8); !slices.Equal(got, []string{"x"}) {
		t.Errorf("a closed watch: wrote %q, want x", got)
	}
}
