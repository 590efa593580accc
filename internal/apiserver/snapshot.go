package apiserver

import (
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SnapshotPath serves etcd's snapshot (Config.Snapshot): a non-resource
// URL, which RBAC grants to cluster-admins alone unless a role names it.
const SnapshotPath = "/etcd/snapshot"

// serveSnapshot streams etcd's snapshot, as `etcdctl snapshot save`
// receives it: the database, then its SHA-256. A stream that fails part
// way is cut, not ended, so that no client takes it for a whole one.
func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
			Message: r.Method + " is not allowed on " + SnapshotPath + ": it serves GET",
		}}, schema.GroupResource{}, "")
		return
	}
	rc, err := s.cfg.Snapshot(r.Context())
	if err != nil {
		s.writeError(w, r, err, schema.GroupResource{}, "")
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="leasehold-snapshot.db"`)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Error("streaming etcd's snapshot", "err", err)
		panic(http.ErrAbortHandler)
	}
}
