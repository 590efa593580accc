package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
)

// SnapshotPath serves etcd's snapshot (Config.Snapshot): a non-resource
// URL, which RBAC grants to cluster-admins alone unless a role names it.
const SnapshotPath = "/etcd/snapshot"

// errSnapshotIdle ends a snapshot of which nothing moved for
// Config.RequestTimeout.
var errSnapshotIdle = errors.New("nothing of the snapshot moved in time")

// serveSnapshot streams etcd's snapshot, as `etcdctl snapshot save`
// receives it: the database, then its SHA-256. A stream that fails part
// way is cut, not ended, so that no client takes it for a whole one.
//
// A snapshot takes as long as the database is large, so it has no
// deadline; instead some of it must move at least every
// Config.RequestTimeout. A member that does not answer (a partition that
// leaves the connection open) would otherwise hold the request for ever:
// one that sends nothing at all is a 504, one that stops part way is cut
// (and so is a client that stops reading for as long).
func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
			Message: r.Method + " is not allowed on " + SnapshotPath + ": it serves GET",
		}}, schema.GroupResource{}, "")
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	var idle clock.Timer
	if d := s.cfg.RequestTimeout; d > 0 {
		idle = s.clock.NewTimer(d)
		defer idle.Stop()
		go func() {
			select {
			case <-idle.C():
				cancel(errSnapshotIdle)
			case <-ctx.Done():
			}
		}()
	}
	unanswered := func(err error) error {
		if context.Cause(ctx) == errSnapshotIdle {
			return apierrors.NewTimeoutError(fmt.Sprintf("etcd sent no snapshot within %v", s.cfg.RequestTimeout), 0)
		}
		return err
	}
	rc, err := s.cfg.Snapshot(ctx)
	if err != nil {
		s.writeError(w, r, unanswered(err), schema.GroupResource{}, "")
		return
	}
	defer rc.Close()
	// The first bytes before the status line, so that a snapshot that
	// never starts gets an answer that says so.
	buf := make([]byte, 32<<10)
	var n int
	for n == 0 && err == nil {
		n, err = rc.Read(buf)
	}
	if n == 0 {
		s.writeError(w, r, unanswered(err), schema.GroupResource{}, "")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="leasehold-snapshot.db"`)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for {
		if n > 0 {
			if idle != nil {
				idle.Reset(s.cfg.RequestTimeout)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				err = werr
				break
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			break
		}
		n, err = rc.Read(buf)
	}
	if err != io.EOF {
		if context.Cause(ctx) == errSnapshotIdle {
			err = fmt.Errorf("nothing of the snapshot moved for %v: %w", s.cfg.RequestTimeout, err)
		}
		s.log.Error("streaming etcd's snapshot", "err", err)
		panic(http.ErrAbortHandler)
	}
}
