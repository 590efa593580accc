package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Kube-apiserver's CORS answers, for an Origin that --cors-allowed-origins
// allows.
const (
	corsAllowMethods  = "POST, GET, OPTIONS, PUT, DELETE, PATCH"
	corsAllowHeaders  = "Content-Type, Content-Length, Accept-Encoding, X-CSRF-Token, Authorization, X-Requested-With, If-Modified-Since"
	corsExposeHeaders = "Date"
)

// ParseCORSOrigins compiles the regular expressions of
// --cors-allowed-origins, refusing, as kube-apiserver does, one that is
// not pinned to the start of the host (by "^" or "//") and to its end (by
// "$" or ":"): unpinned, "example\.com" would let example.com.evil.test in.
func ParseCORSOrigins(exprs []string) ([]*regexp.Regexp, error) {
	var res []*regexp.Regexp
	var errs []error
	for _, expr := range exprs {
		re, err := regexp.Compile(expr)
		switch {
		case err != nil:
		case !strings.Contains(expr, "^") && !strings.Contains(expr, "//"),
			!strings.Contains(expr, "$") && !strings.Contains(expr, ":"):
			err = errors.New(`it does not pin the start of the host ("^" or "//") and its end ("$" or ":"), as in '^https://example\.com(:|$)'`)
		default:
			res = append(res, re)
			continue
		}
		errs = append(errs, fmt.Errorf("'%s': %w", expr, err))
	}
	return res, errors.Join(errs...)
}

// cors sets the CORS headers of a request whose Origin the configuration
// allows, and answers its preflight (OPTIONS) with 204 before any
// authentication, as kube-apiserver does. It reports whether it answered.
// A request from any other origin is served as if it had none: the
// browser then keeps its answer from the page.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	if len(s.cfg.CORSAllowedOrigins) == 0 {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" || !s.corsAllowed(origin) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", corsAllowMethods)
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	h.Set("Access-Control-Allow-Credentials", "true")
	if r.Method != http.MethodOptions {
		return false
	}
	w.WriteHeader(http.StatusNoContent)
	return true
}

func (s *Server) corsAllowed(origin string) bool {
	for _, re := range s.cfg.CORSAllowedOrigins {
		if re.MatchString(origin) {
			return true
		}
	}
	return false
}
