// Package apiservertest starts a complete leasehold API server inside a test
// process: a real embedded etcd in a temporary directory, the store with its
// watch cache, the API server behind TLS on a loopback port, and the
// built-in controllers. Tests talk to it with client-go through Config.
package apiservertest

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"

	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/auth/audit"
	"github.com/leasehold/leasehold/internal/controller/namespace"
	"github.com/leasehold/leasehold/internal/openapi"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/embedded"
	"github.com/leasehold/leasehold/internal/version"
)

// AdminToken authenticates as a member of system:masters.
const AdminToken = "leasehold-test-admin-token"

// Options tune the server; zero values mean defaults.
type Options struct {
	// Dir holds etcd's data; default a new temporary directory. Reusing a
	// directory restarts a server on the same data.
	Dir string
	// Store overrides store settings (Client, KV and Scheme are filled in).
	Store store.Config
	// Logger; default discards everything below errors.
	Logger *slog.Logger
	// GarbageCollection sets apiserver.Config.GarbageCollection: Orphan and
	// Foreground deletions then wait for a garbage collector.
	GarbageCollection bool
	// Authorization sets apiserver.Config.Authorization (default RBAC,
	// then Node; the admin is in system:masters either way).
	Authorization []string
	// Users adds bearer tokens, each authenticating as its user (put
	// system:authenticated in Groups to have what every user has).
	Users map[string]*auth.User
	// Audit receives the audit events; nil records none.
	Audit *audit.Logger
	// MaxRequestsInFlight, MaxRequestsInFlightPerUser and
	// RequestReadTimeout pass through to apiserver.Config.
	MaxRequestsInFlight, MaxRequestsInFlightPerUser int
	RequestReadTimeout                              time.Duration
	// Dashboard sets apiserver.Config.Dashboard; nil serves none.
	Dashboard fs.FS
	// Extra sets apiserver.Config.Extra (for example a /metrics).
	Extra map[string]http.Handler
	// WatchCacheSizes sets apiserver.Config.WatchCacheSizes.
	WatchCacheSizes map[schema.GroupResource]int
	// Clock sets apiserver.Config.Clock.
	Clock clock.WithTicker
	// APIAudiences sets apiserver.Config.APIAudiences.
	APIAudiences []string
	// RequestTimeout sets apiserver.Config.RequestTimeout.
	RequestTimeout time.Duration
	// ResponseCompression sets apiserver.Config.ResponseCompression.
	ResponseCompression bool
	// CORSAllowedOrigins sets apiserver.Config.CORSAllowedOrigins.
	CORSAllowedOrigins []*regexp.Regexp
	// HSTS sets apiserver.Config.HSTS.
	HSTS string
	// Snapshot sets apiserver.Config.Snapshot; nil serves none.
	Snapshot func(context.Context) (io.ReadCloser, error)
	// LogCheck sets apiserver.Config.LogCheck; nil has none.
	LogCheck healthz.HealthChecker
	// NodeLeaseCheckpointInterval sets
	// apiserver.Config.NodeLeaseCheckpointInterval.
	NodeLeaseCheckpointInterval time.Duration
}

// Server is a running test server.
type Server struct {
	// URL is the HTTPS base URL.
	URL string
	// Config reaches the server as the admin, trusting its certificate.
	Config *rest.Config
	// Store is the server's store, for checks below the API.
	Store *store.Store
	// API is the server itself.
	API *apiserver.Server
	// Dir is etcd's data directory.
	Dir  string
	stop func()
}

// Start starts a server and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	e, err := embedded.Start(embedded.Config{Dir: opts.Dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := opts.Store
	cfg.Client, cfg.KV, cfg.Scheme, cfg.Logger = e.Client(), e.KV(), registry.Scheme, log
	if cfg.CompactionInterval == 0 {
		cfg.CompactionInterval = -1
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = embedded.MaxBatch // as serve sets it for its embedded etcd
	}
	st, err := store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := auth.NewTokens()
	tokens.Add(AdminToken, &auth.User{Name: "test-admin", Groups: []string{auth.GroupMasters, auth.GroupAuthenticated}})
	for token, u := range opts.Users {
		tokens.Add(token, u)
	}
	docs, err := openapi.New(registry.All(), version.Info())
	if err != nil {
		t.Fatal(err)
	}
	var authz *apiserverconfig.AuthorizationConfiguration
	if opts.Authorization != nil {
		if authz, err = auth.AuthorizationConfigFromModes(opts.Authorization, auth.AuthorizationWebhookFlags{}); err != nil {
			t.Fatal(err)
		}
	}
	api, err := apiserver.New(apiserver.Config{
		Store: st, Authenticator: auth.Union{tokens, auth.WebSocketProtocol{Tokens: tokens}}, OpenAPI: docs, GarbageCollection: opts.GarbageCollection, Logger: log,
		Authorization: authz, Audit: opts.Audit,
		MaxRequestsInFlight: opts.MaxRequestsInFlight, MaxRequestsInFlightPerUser: opts.MaxRequestsInFlightPerUser,
		RequestReadTimeout: opts.RequestReadTimeout, Dashboard: opts.Dashboard, Extra: opts.Extra,
		WatchCacheSizes: opts.WatchCacheSizes, Clock: opts.Clock, APIAudiences: opts.APIAudiences,
		RequestTimeout: opts.RequestTimeout, Snapshot: opts.Snapshot, ResponseCompression: opts.ResponseCompression,
		CORSAllowedOrigins: opts.CORSAllowedOrigins, HSTS: opts.HSTS, LogCheck: opts.LogCheck,
		NodeLeaseCheckpointInterval: opts.NodeLeaseCheckpointInterval,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	storeDone := make(chan struct{})
	go func() { st.Run(ctx); close(storeDone) }()
	if err := st.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(api.Handler())
	hs.EnableHTTP2 = true
	hs.StartTLS()
	rc := &rest.Config{Host: hs.URL, BearerToken: AdminToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}

	nc, err := namespace.New(namespace.Config{REST: rc, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctrlDone := make(chan struct{})
	go func() { nc.Run(ctx); close(ctrlDone) }()

	s := &Server{URL: hs.URL, Config: rc, Store: st, API: api, Dir: opts.Dir}
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		api.Shutdown()
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-ctrlDone
		<-storeDone
		e.Close()
	}
	t.Cleanup(s.stop)
	return s
}

// Stop stops the server now (it is also stopped when the test ends).
func (s *Server) Stop() { s.stop() }

// ConfigFor returns a REST config that authenticates with token (one of
// Options.Users) instead of the admin's.
func (s *Server) ConfigFor(token string) *rest.Config {
	c := rest.CopyConfig(s.Config)
	c.BearerToken = token
	return c
}

// Client returns a typed clientset; contentType "" means JSON, or pass
// "application/vnd.kubernetes.protobuf".
func (s *Server) Client(t testing.TB, contentType string) kubernetes.Interface {
	t.Helper()
	c := rest.CopyConfig(s.Config)
	if contentType != "" {
		c.ContentType = contentType
		c.AcceptContentTypes = contentType
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
