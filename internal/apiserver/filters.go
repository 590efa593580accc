package apiserver

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/auth/audit"
)

// refuseUnauthenticated answers with err a request refused before it is
// authenticated (credentials refused, a timeout that does not parse), and
// records it as kube-apiserver does: one audit event, without a user, when
// the response starts.
func (s *Server) refuseUnauthenticated(w http.ResponseWriter, r *http.Request, info requestInfo, auditID types.UID, err error) {
	if rec := s.auditBegin(r, info, attributesFor(info, nil, r), auditID); rec != nil {
		aw := &auditWriter{ResponseWriter: w, rec: rec}
		defer aw.finish(false)
		w = aw
	}
	s.writeError(w, r, err, schema.GroupResource{}, "")
}

// guard runs a request through what stands before every handler, in
// kube-apiserver's order: authentication, the audit record,
// impersonation, the in-flight limits, authorization (and node
// restriction of deletes), a deadline on reading the body. It calls next
// when the request may proceed; otherwise it has answered.
func (s *Server) guard(rw *statusRecorder, r *http.Request, info requestInfo, auditID types.UID, next func(http.ResponseWriter, *http.Request)) {
	var w http.ResponseWriter = rw
	u, ok, err := s.cfg.Authenticator.Authenticate(r)
	observeAuthentication(ok, err)
	if err != nil || !ok {
		s.refuseUnauthenticated(w, r, info, auditID, unauthorized())
		return
	}
	attrs := attributesFor(info, u, r)
	rec := s.auditBegin(r, info, attrs, auditID)
	if rec != nil {
		aw := &auditWriter{ResponseWriter: w, rec: rec}
		defer func() {
			if p := recover(); p != nil {
				aw.finish(true)
				panic(p)
			}
			aw.finish(false)
		}()
		w = aw
	}

	imp, err := auth.ParseImpersonation(r.Header)
	if err != nil {
		s.writeError(w, r, apierrors.NewBadRequest(err.Error()), schema.GroupResource{}, "")
		return
	}
	sender := u
	if imp != nil {
		for _, check := range imp.ImpersonationChecks() {
			check.User = u
			if allowed, reason := s.authorize(r.Context(), check); !allowed {
				// A refused impersonation is no decision on the request
				// itself: kube-apiserver's event records none.
				s.writeError(w, r, forbiddenAttrs(check, reason), schema.GroupResource{}, "")
				return
			}
		}
		u = imp.ImpersonatedUser()
		rec.impersonated(u)
		attrs.User = u
		for k := range r.Header {
			if strings.HasPrefix(http.CanonicalHeaderKey(k), "Impersonate-") {
				r.Header.Del(k)
			}
		}
	}
	r = r.WithContext(auth.WithUser(r.Context(), u))

	release, ok := s.inflight.acquire(sender, info.verb == "watch")
	if !ok {
		s.writeError(w, r, apierrors.NewTooManyRequests("too many requests, please try again later", 1), schema.GroupResource{}, "")
		return
	}
	defer release()

	d, reason, err := s.decide(r.Context(), attrs)
	observeAuthorization(d, err)
	if d != auth.DecisionAllow {
		rec.annotate(audit.AnnotationDecision, "forbid", audit.AnnotationReason, reason)
		s.writeError(w, r, forbiddenAttrs(attrs, reason), schema.GroupResource{}, "")
		return
	}
	rec.annotate(audit.AnnotationDecision, "allow", audit.AnnotationReason, reason)
	rw.metered = true
	if info.verb != "watch" {
		kind := &inflightMutating
		if info.verb == "get" || info.verb == "list" {
			kind = &inflightReadOnly
		}
		kind.inc()
		defer kind.dec()
	}
	if attrs.Verb == "delete" || attrs.Verb == "deletecollection" {
		if err := auth.AdmitNode(attrs, attrs.Name, nil); err != nil {
			s.writeError(w, r, apierrors.NewForbidden(schema.GroupResource{Group: attrs.APIGroup, Resource: attrs.Resource}, attrs.Name, err), schema.GroupResource{}, "")
			return
		}
	}

	if info.verb != "watch" && r.Body != nil && r.Body != http.NoBody && s.cfg.RequestReadTimeout > 0 {
		// The whole body must arrive in time: a client trickling bytes is
		// cut off. Watches and bodiless requests are not limited. The
		// deadline is lifted only once the body has been read to its end;
		// otherwise it also bounds the server discarding the unread rest.
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(s.clock.Now().Add(s.cfg.RequestReadTimeout)); err == nil {
			body := &eofBody{ReadCloser: r.Body}
			r.Body = body
			defer func() {
				if body.eof {
					rc.SetReadDeadline(time.Time{})
				}
			}()
		}
	}
	next(w, r)
}

// eofBody notes whether a request body was read to its end.
type eofBody struct {
	io.ReadCloser
	eof bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// inflight bounds the requests being served at once, overall and per
// user. Watches are long-running and not counted; members of
// system:masters are never limited, as in kube-apiserver.
type inflight struct {
	max, maxPerUser int

	mu      sync.Mutex
	total   int
	perUser map[string]int
}

func (l *inflight) acquire(u *auth.User, longRunning bool) (release func(), ok bool) {
	if longRunning || (l.max <= 0 && l.maxPerUser <= 0) || u.InGroup(auth.GroupMasters) {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.max > 0 && l.total >= l.max) || (l.maxPerUser > 0 && l.perUser[u.Name] >= l.maxPerUser) {
		inflightRejected.Inc()
		return nil, false
	}
	if l.perUser == nil {
		l.perUser = map[string]int{}
	}
	l.total++
	l.perUser[u.Name]++
	return func() {
		l.mu.Lock()
		l.total--
		if l.perUser[u.Name]--; l.perUser[u.Name] <= 0 {
			delete(l.perUser, u.Name)
		}
		l.mu.Unlock()
	}, true
}

var inflightRejected = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "leasehold_apiserver_inflight_rejected_total",
	Help: "Requests answered 429 because the in-flight limit (overall or per user) was reached.",
})

// watermark counts the requests of a kind in flight, and the most there
// have been since it was last read.
type watermark struct{ now, most atomic.Int64 }

func (w *watermark) inc() {
	n := w.now.Add(1)
	for m := w.most.Load(); n > m && !w.most.CompareAndSwap(m, n); m = w.most.Load() {
	}
}

func (w *watermark) dec() { w.now.Add(-1) }

// read returns the most requests in flight since the last read, and starts
// the next period from those in flight now.
func (w *watermark) read() float64 {
	return float64(max(w.most.Swap(w.now.Load()), 0))
}

// The requests in flight by kube-apiserver's request kinds (readOnly: gets
// and lists; mutating: the rest), watches left out.
var inflightReadOnly, inflightMutating watermark

// inflightGauges are kube-apiserver's apiserver_current_inflight_requests:
// the most requests of each kind in flight at once since the last scrape,
// as kube-apiserver reports the most of each second.
var inflightGauges = func() []prometheus.Collector {
	var out []prometheus.Collector
	for kind, w := range map[string]*watermark{"mutating": &inflightMutating, "readOnly": &inflightReadOnly} {
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "apiserver_current_inflight_requests",
			Help:        "The most requests in flight at once since the last scrape, by request kind (readOnly: gets and lists; mutating: the rest), watches left out.",
			ConstLabels: prometheus.Labels{"request_kind": kind},
		}, w.read))
	}
	return out
}()

// GuardCollectors are the metrics of authentication, authorization and
// the request limits.
func GuardCollectors() []prometheus.Collector {
	return append([]prometheus.Collector{inflightRejected}, inflightGauges...)
}
