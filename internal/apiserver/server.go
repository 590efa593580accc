// Package apiserver is leasehold's Kubernetes API: the HTTP layer that turns
// requests for the resources in internal/registry into store operations and
// answers in the formats kubectl and client-go speak (JSON, YAML, protobuf,
// Table, watch streams), with discovery and OpenAPI documents so clients can
// find their way. Errors become metav1.Status in one place (errors.go).
//
// Request flow: route (URL grammar of kube-apiserver) → authenticate →
// audit → impersonate → in-flight limits → authorize (filters.go) →
// decode (body limit, content type, strict fields) → strategy (defaulting,
// validation) → store → encode. Watches stream from the store's watch cache
// until the client leaves, the server shuts down, or the timeout ends.
package apiserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/uuid"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/server/healthz"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/auth/audit"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/stack"
	"github.com/leasehold/leasehold/internal/store"
)

// Config configures a Server. Zero values mean defaults.
type Config struct {
	// Store holds the objects. Required; New registers each resource's kind
	// with it, so call New before Store.Run.
	Store *store.Store
	// Authenticator identifies request senders. Required.
	Authenticator auth.Authenticator
	// APIAudiences are the server's own audiences, as kube-apiserver's
	// --api-audiences: a TokenReview that names none is answered for
	// these, one that names others only where they meet these (leasehold's
	// tokens are bound to no audience of their own). Default none.
	APIAudiences []string
	// Authorization is the chain of authorizers, as kube-apiserver's
	// --authorization-config holds it (auth.AuthorizationConfigFromModes
	// makes one of --authorization-mode); it must be valid
	// (auth.ValidateAuthorizationConfig). Members of system:masters are
	// always allowed. Default: RBAC, then Node. SetAuthorization replaces
	// it while the server runs.
	Authorization *apiserverconfig.AuthorizationConfiguration
	// AuthorizationWebhookMetrics record the webhook authorizers' calls;
	// default none.
	AuthorizationWebhookMetrics webhookmetrics.AuthorizerMetrics
	// Audit receives the audit events of every request; nil records none.
	Audit *audit.Logger
	// MaxRequestsInFlight and MaxRequestsInFlightPerUser bound the
	// requests served at once, overall and per user (watches not counted,
	// system:masters exempt); over either the answer is 429 with
	// Retry-After. 0 means no limit.
	MaxRequestsInFlight, MaxRequestsInFlightPerUser int
	// RequestReadTimeout bounds how long a request body may take to
	// arrive; default 60 s, negative means no limit.
	RequestReadTimeout time.Duration
	// RequestTimeout is the deadline of every request but a watch, as
	// kube-apiserver's --request-timeout: one that etcd has not answered
	// by then is answered 504. A client's ?timeout= may ask for less.
	// Default 60 s, negative means none.
	RequestTimeout time.Duration
	// CORSAllowedOrigins are the origins (ParseCORSOrigins) whose browser
	// pages may call the API, as kube-apiserver's --cors-allowed-origins;
	// nil allows none but the server's own.
	CORSAllowedOrigins []*regexp.Regexp
	// HSTS is the Strict-Transport-Security header of every response
	// (HSTSHeader); "" sends none.
	HSTS string
	// NodeLeaseCheckpointInterval, when above zero, writes a renewal of a
	// lease in kube-node-lease to etcd only once the stored renewTime is
	// that old, or half the lease's duration if less; the renewals between
	// are answered without a write (renewalCheckpoint). Zero writes every
	// renewal.
	NodeLeaseCheckpointInterval time.Duration
	// ResponseCompression gzips a response body larger than 128 KiB (a
	// long list) for a client that accepts gzip, as kube-apiserver's
	// APIResponseCompression does, on by default there.
	ResponseCompression bool
	// OpenAPI serves /openapi/v2 and /openapi/v3; nil answers 404.
	OpenAPI http.Handler
	// Extra non-resource handlers (for example /metrics), by exact path.
	Extra map[string]http.Handler
	// Dashboard holds the web dashboard's files, served under /dashboard/
	// to anyone: they carry no data, and the page reads the API with the
	// token its user signs in with. nil serves no dashboard.
	Dashboard fs.FS
	// Snapshot streams etcd's snapshot, served at SnapshotPath; nil
	// serves none.
	Snapshot func(context.Context) (io.ReadCloser, error)
	// Profiling serves Go's pprof profiles under /debug/pprof/ to those
	// authorized for those non-resource URLs (cluster-admins by default).
	Profiling bool
	// MaxBodyBytes bounds request bodies; default 3 MiB as in Kubernetes.
	MaxBodyBytes int64
	// GarbageCollection says a garbage collector runs: deletions with the
	// Orphan or Foreground policy then wait for it. Without one they are
	// immediate.
	GarbageCollection bool
	// EventTTL is how long an Event is kept after its last write (etcd
	// deletes it then); default one hour, as kube-apiserver's --event-ttl;
	// negative keeps Events until they are deleted.
	EventTTL time.Duration
	// WatchCacheSizes sets, per resource, whether it is served from a
	// watch cache, as kube-apiserver's --watch-cache-sizes does: 0 serves
	// it from etcd alone, any other size keeps its watch cache (leasehold's
	// caches size themselves, as kube-apiserver's have since 1.19). A
	// resource not named keeps its default: Events from etcd alone, the
	// others cached. Naming a resource the server has no storage for is an
	// error.
	WatchCacheSizes map[schema.GroupResource]int
	// Clock for timestamps and timeouts; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
	// LogCheck is the health endpoints' check "log", which fails while the
	// server's log cannot be written; nil leaves it out.
	LogCheck healthz.HealthChecker
}

// Server serves the Kubernetes API over the store.
type Server struct {
	cfg   Config
	log   *slog.Logger
	clock clock.WithTicker
	kinds map[*registry.Resource]objectStore
	authz atomic.Pointer[auth.Chain]
	// inflight bounds concurrent requests (filters.go).
	inflight *inflight
	fields   map[fieldManagerKey]*managedfields.FieldManager

	// shutdown ends open watches when the server stops.
	shutdown     chan struct{}
	shutdownOnce sync.Once
	// stopping, once closed, fails /readyz (health.go).
	stopping     chan struct{}
	stoppingOnce sync.Once
	health       *http.ServeMux
	// uncachedLists lets one in-process read of a resource without a
	// watch cache run at a time (listwatch.go).
	uncachedLists sync.Mutex
	// quotaLookups holds the quotas read from etcd for namespaces whose
	// cache had none (quota.go).
	quotaLookups *lru.Cache
	// quotaWrites holds the quotas as this server last charged them
	// (quota.go).
	quotaWrites *lru.Cache
}

type fieldManagerKey struct {
	r           *registry.Resource
	subresource string
}

// resetFields are what a write to the resource, or to its subresource
// sub, leaves as stored, as kube-apiserver's strategies give them to its
// field manager: a kind with a status subresource keeps its status on a
// write of the main resource and its spec on a write of status. A manager
// then owns none of what it could not change, so that an apply of status
// conflicts with no one's apply of the whole object.
func resetFields(r *registry.Resource, sub string) map[fieldpath.APIVersion]fieldpath.Filter {
	kept := keptField(r, sub)
	if kept == "" {
		return nil
	}
	return map[fieldpath.APIVersion]fieldpath.Filter{
		fieldpath.APIVersion(r.GroupVersion.String()): fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie(kept))),
	}
}

// keptField names the top-level field a write of r's subresource sub
// leaves as stored ("" for none): status for the main resource of a kind
// with a status subresource, spec for its status.
func keptField(r *registry.Resource, sub string) string {
	switch {
	case !r.StatusSubresource:
		return ""
	case sub == "status":
		return "spec"
	default:
		return "status"
	}
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Authenticator == nil {
		return nil, errors.New("apiserver: Store and Authenticator are required")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 3 << 20
	}
	if cfg.EventTTL == 0 {
		cfg.EventTTL = time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Authorization == nil {
		cfg.Authorization = DefaultAuthorization()
	}
	if cfg.RequestReadTimeout == 0 {
		cfg.RequestReadTimeout = time.Minute
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = time.Minute
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, clock: cfg.Clock,
		kinds:        map[*registry.Resource]objectStore{},
		fields:       map[fieldManagerKey]*managedfields.FieldManager{},
		shutdown:     make(chan struct{}),
		stopping:     make(chan struct{}),
		quotaLookups: lru.New(quotaLookupEntries),
		quotaWrites:  lru.New(quotaWriteEntries),
		inflight:     &inflight{max: cfg.MaxRequestsInFlight, maxPerUser: cfg.MaxRequestsInFlightPerUser},
	}
	s.health = s.newHealth()
	if err := s.SetAuthorization(cfg.Authorization); err != nil {
		return nil, err
	}
	typeConverter := Prepare()
	unknownSizes := maps.Clone(cfg.WatchCacheSizes)
	storesOthers := map[*registry.Resource]bool{}
	for _, r := range registry.All() {
		if r.Storage != nil {
			storesOthers[r.Storage] = true
		}
	}
	for _, r := range registry.All() {
		if r.Virtual {
			continue
		}
		if r.Storage != nil {
			base, ok := s.kinds[r.Storage].(*store.Kind)
			if !ok {
				return nil, fmt.Errorf("%s: storage %s must be registered first", r.GroupVersionResource(), r.Storage.GroupVersionResource())
			}
			s.kinds[r] = converted{Kind: base, r: r}
		} else {
			k := cfg.Store.Kind(r.GroupResource(), r.StoragePrefix(), r.GroupVersionKind(), r.Namespaced, r.New, r.NewList)
			if r.SharedStrings != nil {
				k.ShareStrings(r.SharedStrings)
			}
			if !storesOthers[r] {
				// The watches of a resource served from another's storage
				// filter by that resource's own fields.
				k.SetSameView(r.SameView)
			}
			// As kube-apiserver by default: Events are many, written once
			// and read rarely, and a cache of them would hold every one in
			// memory and decode every one at each start.
			cached := r != registry.Events
			if size, ok := cfg.WatchCacheSizes[r.GroupResource()]; ok {
				cached = size != 0
				delete(unknownSizes, r.GroupResource())
			}
			if r == registry.Events {
				k.SetTTL(cfg.EventTTL)
			}
			if !cached {
				k.DisableWatchCache()
			}
			s.kinds[r] = k
		}
		// A field manager for each writable subresource, as
		// kube-apiserver has, so that its entries name the subresource.
		subs := []string{""}
		for _, sr := range subresources(r) {
			subs = append(subs, sr.name)
		}
		for _, sub := range subs {
			fm, err := managedfields.NewDefaultFieldManager(typeConverter, registry.Scheme, registry.Scheme, registry.Scheme,
				r.GroupVersionKind(), r.GroupVersion, sub, resetFields(r, sub))
			if err != nil {
				return nil, fmt.Errorf("field manager for %s: %w", r.Name, err)
			}
			s.fields[fieldManagerKey{r, sub}] = fm
		}
	}
	if len(unknownSizes) > 0 {
		// The first in order, so that the error is the same every time.
		gr := slices.MinFunc(slices.Collect(maps.Keys(unknownSizes)), func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
		for _, r := range registry.All() {
			if r.GroupResource() == gr && r.Storage != nil && r.Storage.GroupResource() != gr {
				return nil, fmt.Errorf("watch cache sizes: %s is stored as %s: name that one", gr, r.Storage.GroupResource())
			}
		}
		return nil, fmt.Errorf("watch cache sizes: no stored resource %s", gr)
	}
	return s, nil
}

// Prepare does the work of New that depends on no configuration: parsing
// the schemas of the built-in types that the field managers use (a tenth of
// a second). serve calls it while etcd starts; New calls it too.
var Prepare = sync.OnceValue(func() managedfields.TypeConverter {
	return applyconfigurations.NewTypeConverter(registry.Scheme)
})

// Shutdown ends open watches; in-flight requests finish on their own.
func (s *Server) Shutdown() { s.shutdownOnce.Do(func() { close(s.shutdown) }) }

// Handler returns the HTTP handler of the whole API.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

// publicPaths answer without credentials, as kube-apiserver's
// system:public-info-viewer role allows.
var publicPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	stack.Grow() // once here rather than twice deeper down
	start := s.clock.Now()
	rw := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	info := parseRequest(r)
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("panic serving request", "path", r.URL.Path, "panic", p)
			if !rw.wrote {
				s.writeError(rw, r, fmt.Errorf("%v", p), schema.GroupResource{}, "")
			}
		}
		if rw.metered || rw.code == http.StatusTooManyRequests {
			observeRequest(r, info, rw.code, rw.size, s.clock.Since(start), !rw.metered)
		}
	}()
	rw.Header()["Cache-Control"] = noCacheValue
	// As kube-apiserver's outermost filter: every response names the
	// request's audit ID, the client's own as it sent it or a new one, and
	// the request's audit events carry the same.
	auditID := types.UID(r.Header.Get("Audit-ID"))
	if auditID == "" {
		auditID = uuid.NewUUID()
	}
	rw.Header().Set("Audit-Id", string(auditID))
	if s.cfg.HSTS != "" {
		rw.Header().Set("Strict-Transport-Security", s.cfg.HSTS)
	}
	if s.cors(rw, r) {
		return
	}

	path := strings.TrimSuffix(r.URL.Path, "/")
	if publicPaths[path] {
		s.serveNonResource(rw, r, path)
		return
	}
	if s.cfg.Dashboard != nil && (path == "/dashboard" || strings.HasPrefix(path, "/dashboard/")) {
		s.serveDashboard(rw, r)
		return
	}
	if info.resourceRequest && info.verb != "watch" {
		// The server's deadline, or the client's if it asks for less, as
		// kube-apiserver takes them: without one a read that etcd never
		// answers (a partition that leaves the connection open) would
		// hold the request, and kubectl, for ever.
		d, err := requestTimeout(info.query.Get("timeout"), s.cfg.RequestTimeout)
		if err != nil {
			s.refuseUnauthenticated(rw, r, info, auditID, err)
			return
		}
		if d > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			r = r.WithContext(ctx)
		}
	}
	s.guard(rw, r, info, auditID, func(w http.ResponseWriter, r *http.Request) {
		if !info.resourceRequest {
			s.serveNonResource(w, r, path)
			return
		}
		s.serveResource(w, r, info)
	})
}

func (s *Server) serveNonResource(w http.ResponseWriter, r *http.Request, path string) {
	// The health endpoints and their checks; an unknown check falls
	// through to the 404 below.
	if h, pattern := s.health.Handler(r); pattern != "" {
		if publicPaths[pattern] {
			// A root, which kube-apiserver counts; its single checks
			// it does not.
			s.instrumented(w, r, path, "", h.ServeHTTP)
			return
		}
		h.ServeHTTP(w, r)
		return
	}
	switch {
	case path == "/version":
		s.serveVersion(w, r)
	case strings.HasPrefix(path, "/openapi/"):
		if s.cfg.OpenAPI == nil {
			s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
			return
		}
		s.cfg.OpenAPI.ServeHTTP(w, r)
	case path == "/api" || path == "/apis" || strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/apis/"):
		s.serveDiscovery(w, r, path)
	case path == SnapshotPath && s.cfg.Snapshot != nil:
		s.serveSnapshot(w, r)
	case s.cfg.Profiling && strings.HasPrefix(path, "/debug/pprof"):
		// Authorized like any non-resource URL: by default only
		// cluster-admins (system:masters) may read profiles.
		servePprof(w, r, path)
	default:
		if h, ok := s.cfg.Extra[path]; ok {
			h.ServeHTTP(w, r)
			return
		}
		s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
	}
}

// instrumented serves r with h and counts it in the request metrics as
// kube-apiserver counts the few non-resource requests it counts
// (observeNonResource).
func (s *Server) instrumented(w http.ResponseWriter, r *http.Request, subresource, component string, h http.HandlerFunc) {
	start := s.clock.Now()
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	h(rec, r)
	observeNonResource(r, subresource, component, rec.code, rec.size, s.clock.Since(start))
}

// requestTimeout returns a request's deadline: the server's (most; <= 0
// none), or less if the request's timeout query parameter asks for less.
// A timeout of 0s or less asks for nothing, as in kube-apiserver, and one
// that is not a duration is a 400 in its words. 0 is no deadline.
func requestTimeout(timeout string, most time.Duration) (time.Duration, error) {
	d := max(0, most)
	if timeout == "" {
		return d, nil
	}
	asked, err := time.ParseDuration(timeout)
	if err != nil {
		return 0, apierrors.NewBadRequest("invalid timeout specified in the request URL - " + err.Error())
	}
	if asked > 0 && (d == 0 || asked < d) {
		d = asked
	}
	return d, nil
}

// statusRecorder remembers the response code for metrics and logs.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
	// metered is set once a request has been authorized: from there on the
	// request metrics count it, as kube-apiserver's do.
	metered bool
	size    int // bytes of the body written, as sent (gzipped or not)
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	n, err := r.ResponseWriter.Write(b)
	r.size += n
	return n, err
}

// Flush lets watch streams reach the client event by event.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Hijack hands the connection over to a watch's WebSocket.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !r.wrote {
		r.code, r.wrote = http.StatusSwitchingProtocols, true
	}
	return http.NewResponseController(r.ResponseWriter).Hijack()
}
