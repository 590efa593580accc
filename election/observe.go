package election

import (
	"context"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// watchLoop keeps e.obs up to date until ctx ends: it reads the Lease, then
// watches it from that resourceVersion, resuming from the last one seen when
// the watch ends. When a watch cannot be opened, or ends without delivering
// anything, it waits RetryPeriod and reads the Lease again, so a contender
// that may not watch still polls at client-go's pace.
func (e *Elector) watchLoop(ctx context.Context) {
	selector := fields.OneTermEqualSelector("metadata.name", e.cfg.Name).String()
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			var err error
			if rv, err = e.read(ctx); err != nil {
				if ctx.Err() == nil {
					e.log.Warn("reading lease failed", "err", err)
				}
				e.sleep(ctx, e.cfg.RetryPeriod)
				continue
			}
		}
		w, err := e.leases.Watch(ctx, metav1.ListOptions{
			FieldSelector:       selector,
			ResourceVersion:     rv,
			AllowWatchBookmarks: true,
		})
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("watching lease failed, polling", "err", err)
			}
			rv = ""
			e.sleep(ctx, e.cfg.RetryPeriod)
			continue
		}
		next, events, restart := e.consume(ctx, w, rv)
		w.Stop()
		switch {
		case restart:
			rv = ""
		case events == 0:
			// A watch that ends at once, over and over, must not spin.
			rv = ""
			e.sleep(ctx, e.cfg.RetryPeriod)
		default:
			rv = next
		}
	}
}

// read gets the Lease, records it, and returns a resourceVersion to watch
// from ("" when the Lease does not exist: the watch then starts at the
// newest state and reports any Lease as added).
func (e *Elector) read(ctx context.Context) (string, error) {
	rctx, cancel := e.requestContext(ctx, e.cfg.RenewDeadline)
	defer cancel()
	l, err := e.leases.Get(rctx, e.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		e.setObserved(nil, "")
		return "", nil
	case err != nil:
		return "", cutOff(rctx, err)
	}
	e.setObserved(l, l.ResourceVersion)
	return l.ResourceVersion, nil
}

// consume records the events of w until it ends or ctx does. It returns
// the last resourceVersion seen, the number of events, and whether the
// Lease must be read again before watching (the resourceVersion is too old,
// or the server sent an error).
func (e *Elector) consume(ctx context.Context, w watch.Interface, rv string) (string, int, bool) {
	events := 0
	for {
		select {
		case <-ctx.Done():
			return rv, events, false
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, events, false
			}
			events++
			switch ev.Type {
			case watch.Added, watch.Modified:
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok || l.Name != e.cfg.Name || l.Namespace != e.cfg.Namespace {
					continue // the server ignored the field selector
				}
				e.setObserved(l, l.ResourceVersion)
				rv = l.ResourceVersion
			case watch.Deleted:
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok || l.Name != e.cfg.Name || l.Namespace != e.cfg.Namespace {
					continue
				}
				e.setObserved(nil, l.ResourceVersion)
				rv = l.ResourceVersion
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
					rv = m.GetResourceVersion()
				}
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
					e.log.Warn("lease watch failed", "err", err)
				}
				return rv, events, true
			}
		}
	}
}

// setObserved records l (nil: the Lease does not exist) seen at
// resourceVersion rv, now. A version older than the one already recorded
// (possible when a watch lags behind this Elector's own writes) is ignored;
// resourceVersions are compared as integers when both are (they are for
// leasehold and Kubernetes), otherwise every version is taken as newer.
// The observation time moves only when the Lease changed.
func (e *Elector) setObserved(l *coordinationv1.Lease, rv string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.obs
	if old.known && older(rv, e.obsRV) {
		return
	}
	changed := !old.known ||
		(l == nil) != (old.lease == nil) ||
		(l != nil && (l.ResourceVersion != old.lease.ResourceVersion || !apiequality.Semantic.DeepEqual(l.Spec, old.lease.Spec)))
	e.obsRV = rv
	if !changed {
		return
	}
	e.obs = observation{known: true, at: e.clock.Now()}
	if l != nil {
		e.obs.lease = l.DeepCopy()
	}
	if h := holderOf(l); h != e.leader {
		e.leader = h
		e.log.Info("leader observed", "holder", h)
		if e.cfg.Callbacks.OnNewLeader != nil {
			e.notes = append(e.notes, h)
			select {
			case e.noteReady <- struct{}{}:
			default:
			}
		}
	}
	close(e.changed)
	e.changed = make(chan struct{})
}

// snapshot returns the current observation and a channel closed when it
// next changes.
func (e *Elector) snapshot() (observation, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.obs, e.changed
}

// older reports whether resourceVersion a is known to precede b.
func older(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x < y
}

// notifyLoop calls OnNewLeader for every recorded change of holder, in
// order, until ctx ends; changes recorded before then are still delivered.
func (e *Elector) notifyLoop(ctx context.Context) {
	for {
		select {
		case <-e.noteReady:
		case <-ctx.Done():
			e.deliverNotes()
			return
		}
		e.deliverNotes()
	}
}

func (e *Elector) deliverNotes() {
	for {
		e.mu.Lock()
		notes := e.notes
		e.notes = nil
		e.mu.Unlock()
		if len(notes) == 0 {
			return
		}
		for _, h := range notes {
			e.cfg.Callbacks.OnNewLeader(h)
		}
	}
}
