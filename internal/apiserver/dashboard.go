package apiserver

import (
	"io/fs"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// dashboardPolicy keeps the dashboard's page to its own files and its own
// origin: no inline script, no framing, no form posts, no referrer.
const dashboardPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// serveDashboard answers /dashboard/... from cfg.Dashboard without
// credentials. The files carry no data: the page asks for a token and reads
// the API with it, so authorization and the audit log treat it like any
// other client.
func (s *Server) serveDashboard(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		s.writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
			Message: r.Method + " is not allowed on the dashboard's files: it serves GET and HEAD",
		}}, schema.GroupResource{}, "")
		return
	}
	if r.URL.Path == "/dashboard" {
		http.Redirect(w, r, "/dashboard/", http.StatusMovedPermanently)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/dashboard/")
	if name == "" {
		name = "index.html"
	}
	if !fs.ValidPath(name) {
		s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
		return
	}
	if st, err := fs.Stat(s.cfg.Dashboard, name); err != nil || st.IsDir() {
		s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", dashboardPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	http.ServeFileFS(w, r, s.cfg.Dashboard, name)
}
