package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	iofs "io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/netutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kubetransport "k8s.io/client-go/transport"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/component-base/metrics/prometheus/slis"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/auth/audit"
	"github.com/leasehold/leasehold/internal/controller/clusterroleaggregation"
	"github.com/leasehold/leasehold/internal/controller/coordinator"
	"github.com/leasehold/leasehold/internal/controller/garbagecollector"
	"github.com/leasehold/leasehold/internal/controller/identity"
	"github.com/leasehold/leasehold/internal/controller/manager"
	"github.com/leasehold/leasehold/internal/controller/namespace"
	"github.com/leasehold/leasehold/internal/controller/nodelifecycle"
	"github.com/leasehold/leasehold/internal/controller/resourcequota"
	"github.com/leasehold/leasehold/internal/controller/snapshots"
	"github.com/leasehold/leasehold/internal/dashboard"
	"github.com/leasehold/leasehold/internal/openapi"
	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/embedded"
	"github.com/leasehold/leasehold/internal/tick"
	"github.com/leasehold/leasehold/internal/version"
)

func init() {
	register(&command{name: "serve", summary: "run the API server (embedded etcd by default)", run: runServe})
}

type serveFlags struct {
	dataDir, listen                        string
	etcdServers, etcdPrefix                string
	etcdCA, etcdCert, etcdKey              string
	tlsSANs                                string
	tlsCertFile, tlsKeyFile                string
	clientCAFile                           string
	requestHeader                          auth.RequestHeaderConfig
	requestHeaderCAFile                    string
	sniCertKeys                            []string
	compaction, commitDelay, countPoll     time.Duration
	compactionWrites, etcdQuota            int64
	eventTTL                               time.Duration
	snapshotInterval                       time.Duration
	snapshotRetention                      int
	snapshotDir                            string
	watchCacheSizes                        string
	cacheSizes                             map[schema.GroupResource]int // watchCacheSizes, parsed
	nodeMonitorPeriod, nodeMonitorGrace    time.Duration
	nodeLeaseCheckpoint                    time.Duration
	nodeStartupGrace                       time.Duration
	tlsMinVersionName, tlsCipherSuiteNames string
	tlsMinVersion                          uint16   // tlsMinVersionName, parsed
	tlsCipherSuites                        []uint16 // tlsCipherSuiteNames, parsed
	tlsInsecureSuites                      []string // of tlsCipherSuiteNames, to warn of
	zones                                  nodelifecycle.Zones
	quotaSync                              time.Duration
	identityDuration, identityRenew        time.Duration
	profiling, dashboard                   bool
	shutdownGrace                          time.Duration
	shutdownDelay                          time.Duration
	logLevel, logFormat                    string

	tokenAuthFile               string
	oidc                        auth.OIDCConfig
	oidcCAFile, oidcSigningAlgs string
	authenticationConfig        string
	webhook                     auth.WebhookConfig
	authzWebhook                auth.AuthorizationWebhookFlags
	authorizationConfigFile     string
	// authorization is the chain the authorization flags make (check).
	authorization *apiserverconfig.AuthorizationConfiguration
	// authorizationFlagsSet: --authorization-mode or an
	// --authorization-webhook-* flag was given.
	authorizationFlagsSet              bool
	anonymousAuth                      bool
	apiAudiences                       string
	authorizationMode                  string
	auditLogPath, auditPolicyFile      string
	auditMaxSize, auditMaxAge          int
	auditMaxBackup, auditBufferSize    int
	auditBatchMaxWait                  time.Duration
	auditWebhookFile, auditWebhookMode string
	auditLogFormat, auditLogMode       string
	auditLogVersion                    string
	auditCompress                      bool
	auditWebhook                       audit.WebhookConfig
	maxInFlight, maxInFlightPerUser    int
	maxConnections                     int
	requestReadTimeout                 time.Duration
	requestTimeout                     time.Duration
	apiResponseCompression             bool
	corsAllowedOrigins                 []string
	corsOrigins                        []*regexp.Regexp
	hstsDirectives                     []string
	hsts                               string
	goawayChance                       float64
}

func runServe(ctx context.Context, args []string) error {
	var f serveFlags
	fs := newFlagSet("serve")
	fs.StringVar(&f.dataDir, "data-dir", "./leasehold-data", "directory for certificates, credentials, the admin kubeconfig and the embedded etcd")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:6443", "HOST:PORT to serve the Kubernetes API on (HTTPS)")
	fs.StringVar(&f.etcdServers, "etcd-servers", "", "comma-separated etcd client URLs; empty runs etcd embedded in the data directory")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", "/registry", "the root of every key the server keeps in etcd, as kube-apiserver's flag: servers of one cluster share it, and clusters that share an etcd (or a Kubernetes cluster's etcd, whose keys are under /registry) each need one of their own")
	fs.StringVar(&f.etcdCA, "etcd-cafile", "", "CA bundle to verify the external etcd with")
	fs.StringVar(&f.etcdCert, "etcd-certfile", "", "client certificate for the external etcd")
	fs.StringVar(&f.etcdKey, "etcd-keyfile", "", "client key for the external etcd")
	fs.StringVar(&f.tlsSANs, "tls-san", "", "extra comma-separated host names or IPs for the serving certificate")
	fs.Func("tls-sni-cert-key", "CERT,KEY or CERT,KEY:NAME,NAME: a certificate served to clients asking for its names (its own names without NAMEs; *.example.com matches one label), as kube-apiserver's flag; repeatable, read again every 10s", func(v string) error {
		if _, _, _, err := pki.ParseSNIFlag(v); err != nil {
			return err
		}
		f.sniCertKeys = append(f.sniCertKeys, v)
		return nil
	})
	fs.StringVar(&f.tlsMinVersionName, "tls-min-version", "VersionTLS12", "the oldest TLS version served: VersionTLS12 or VersionTLS13")
	fs.StringVar(&f.tlsCipherSuiteNames, "tls-cipher-suites", "", "comma-separated cipher suites served under TLS 1.2, by their IANA names (default: Go's)")
	fs.StringVar(&f.tlsCertFile, "tls-cert-file", "", "serve this certificate (PEM, followed by its chain) instead of the one the server's CA issues, as kube-apiserver's flag: one from cert-manager or a company's CA; read again every 10s, so a renewal in place is taken without a restart")
	fs.StringVar(&f.tlsKeyFile, "tls-private-key-file", "", "the private key of --tls-cert-file (PEM)")
	fs.StringVar(&f.clientCAFile, "client-ca-file", "", "PEM bundle of CAs whose client certificates authenticate users (CN the user name, O the groups), besides the server's CA, as kube-apiserver's flag; read again every 10s")
	fs.StringVar(&f.requestHeaderCAFile, "requestheader-client-ca-file", "", "PEM bundle of the CAs of an authenticating proxy's client certificate: requests it forwards with that certificate are authenticated as the user its --requestheader-*-headers name; read again every 10s")
	fs.Func("requestheader-allowed-names", "comma-separated common names the proxy's client certificate may have (default: any of its CAs signed)", func(v string) error {
		f.requestHeader.AllowedNames = append(f.requestHeader.AllowedNames, splitList(v)...)
		return nil
	})
	f.requestHeader.UsernameHeaders = []string{"X-Remote-User"}
	f.requestHeader.GroupHeaders = []string{"X-Remote-Group"}
	f.requestHeader.ExtraHeaderPrefixes = []string{"X-Remote-Extra-"}
	fs.Func("requestheader-username-headers", "comma-separated request headers naming the user, the first one set wins (default X-Remote-User)", headerList(&f.requestHeader.UsernameHeaders))
	fs.Func("requestheader-uid-headers", "comma-separated request headers giving the user's uid, the first one set wins (default none; X-Remote-Uid is Kubernetes' suggestion)", headerList(&f.requestHeader.UIDHeaders))
	fs.Func("requestheader-group-headers", "comma-separated request headers giving the user's groups (default X-Remote-Group)", headerList(&f.requestHeader.GroupHeaders))
	fs.Func("requestheader-extra-headers-prefix", "comma-separated prefixes of request headers giving the user's extra information (default X-Remote-Extra-)", headerList(&f.requestHeader.ExtraHeaderPrefixes))
	fs.DurationVar(&f.compaction, "etcd-compaction-interval", 5*time.Minute, "how often to compact etcd history (0 disables)")
	fs.Int64Var(&f.etcdQuota, "etcd-quota-backend-bytes", embedded.DefaultQuotaBackendBytes, "the embedded etcd's database size limit (etcd's --quota-backend-bytes): at it etcd refuses writes, and the server reclaims the space once objects are deleted, or at a start with a larger limit")
	fs.DurationVar(&f.countPoll, "etcd-count-metric-poll-period", time.Minute, "how often apiserver_storage_objects counts the objects of each resource served from etcd alone, as kube-apiserver's flag (0 disables); the watch cache keeps the others' current")
	fs.Int64Var(&f.compactionWrites, "etcd-compaction-writes", store.DefaultCompactionWrites, "compact as soon as this server has made this many writes since the last compaction, without waiting for the interval: etcd's history holds at least an interval or this many writes, whichever is less, and at most about twice that (0: the interval alone)")
	fs.DurationVar(&f.commitDelay, "etcd-commit-delay", 0, "how long a group commit waits, from its oldest write, for more writes to share its etcd transaction and fsync, once recent commits have been shared by independent writers (at most 1s; 0 never waits); less CPU per write at moderate rates, for that much more latency")
	fs.DurationVar(&f.snapshotInterval, "etcd-snapshot-interval", 0, "take an etcd snapshot this often, on the elected replica, into --etcd-snapshot-dir (0: none; leasehold snapshot save takes one by hand)")
	fs.IntVar(&f.snapshotRetention, "etcd-snapshot-retention", 5, "scheduled snapshots kept; the oldest beyond are removed")
	fs.StringVar(&f.snapshotDir, "etcd-snapshot-dir", "", "directory of the scheduled snapshots (default DATA_DIR/snapshots)")
	fs.DurationVar(&f.eventTTL, "event-ttl", time.Hour, "how long an Event is kept after its last write, as kube-apiserver's --event-ttl (0: forever)")
	fs.StringVar(&f.watchCacheSizes, "watch-cache-sizes", "", "comma-separated resource[.group]#size, as kube-apiserver's: size 0 serves the resource from etcd alone, any other keeps its watch cache (by default Events are served from etcd, the rest cached). nodes#0 keeps no Node in memory (about 1.4 KB each at 100 000 nodes), and reads lists and watches of Nodes from etcd (see docs/PERFORMANCE.md)")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the web dashboard under /dashboard/ (its page signs in with a bearer token; RBAC decides what it shows)")
	fs.BoolVar(&f.profiling, "profiling", false, "serve Go profiles under /debug/pprof/ (to cluster-admins unless RBAC grants more)")
	fs.DurationVar(&f.nodeMonitorPeriod, "node-monitor-period", 5*time.Second, "how often the node lifecycle controller checks node leases")
	fs.DurationVar(&f.nodeMonitorGrace, "node-monitor-grace-period", nodelifecycle.DefaultGracePeriod, "how long a node's lease may go unrenewed before the node is marked Ready=Unknown")
	fs.DurationVar(&f.nodeLeaseCheckpoint, "node-lease-checkpoint-interval", 0, "write a node lease's renewal to etcd only once the stored renewTime is this old (or half the lease's duration, if less), and answer the renewals between without a write, as etcd checkpoints its own leases; at most half --node-monitor-grace-period (0: write every renewal; see docs/PERFORMANCE.md, \"Renewals between checkpoints\")")
	fs.DurationVar(&f.nodeStartupGrace, "node-startup-grace-period", time.Minute, "the grace period of a node that has never posted a Ready condition, as kube-controller-manager's flag")
	fs.DurationVar(&f.quotaSync, "resource-quota-sync-period", resourcequota.DefaultResyncPeriod, "how often every quota is counted again (besides after each deletion), as kube-controller-manager's flag")
	fs.Float64Var(&f.zones.EvictionRate, "node-eviction-rate", nodelifecycle.DefaultEvictionRate, "nodes a second, in each zone, that get the NoExecute taint when not Ready, while the zone is not partly disrupted")
	fs.Float64Var(&f.zones.SecondaryEvictionRate, "secondary-node-eviction-rate", nodelifecycle.DefaultSecondaryEvictionRate, "nodes a second that get the NoExecute taint in a partly disrupted zone of more than --large-cluster-size-threshold nodes")
	fs.IntVar(&f.zones.LargeClusterSizeThreshold, "large-cluster-size-threshold", nodelifecycle.DefaultLargeClusterSizeThreshold, "a partly disrupted zone of this many nodes or fewer gives no NoExecute taints")
	fs.Float64Var(&f.zones.UnhealthyZoneThreshold, "unhealthy-zone-threshold", nodelifecycle.DefaultUnhealthyZoneThreshold, "share of a zone's nodes not Ready (at least three) from which it is partly disrupted")
	fs.DurationVar(&f.identityDuration, "identity-lease-duration", identity.DefaultDuration, "leaseDurationSeconds of this replica's identity Lease in kube-system; a Lease unrenewed that long is deleted (whole seconds)")
	fs.DurationVar(&f.identityRenew, "identity-lease-renew-interval", identity.DefaultRenewInterval, "how often this replica renews its identity Lease")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace-period", 30*time.Second, "how long in-flight requests may take to finish once the server, on SIGTERM (and after --shutdown-delay-duration), stops taking connections")
	fs.DurationVar(&f.shutdownDelay, "shutdown-delay-duration", 0, "how long the server goes on serving after SIGTERM with /readyz failing, so that load balancers in front of several replicas take it out before it stops, as kube-apiserver's flag")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.tokenAuthFile, "token-auth-file", "", "static bearer tokens in Kubernetes' CSV format: token,user,uid,\"group1,group2\"")
	fs.StringVar(&f.oidc.IssuerURL, "oidc-issuer-url", "", "authenticate users by the ID tokens of this OpenID Connect issuer (an https URL), as kube-apiserver's flag: kubectl --token, or a kubeconfig's exec plugin such as kubelogin")
	fs.StringVar(&f.oidc.ClientID, "oidc-client-id", "", "the audience (aud) an ID token must carry; required with --oidc-issuer-url")
	fs.StringVar(&f.oidc.UsernameClaim, "oidc-username-claim", "sub", "the ID token claim that holds the user name; with email, a token whose email_verified is false is refused")
	fs.StringVar(&f.oidc.UsernamePrefix, "oidc-username-prefix", "", "put before every user name from an ID token (default: the issuer URL and # unless the claim is email; - for nothing)")
	fs.StringVar(&f.oidc.GroupsClaim, "oidc-groups-claim", "", "the ID token claim that holds the user's groups, a string or a list of strings")
	fs.StringVar(&f.oidc.GroupsPrefix, "oidc-groups-prefix", "", "put before every group from an ID token")
	fs.Var((*keyValues)(&f.oidc.RequiredClaims), "oidc-required-claim", "key=value an ID token must hold; repeat, or separate with commas, for several")
	fs.StringVar(&f.oidcCAFile, "oidc-ca-file", "", "PEM bundle of CAs to verify the OIDC issuer with (default: the system's roots)")
	fs.StringVar(&f.oidcSigningAlgs, "oidc-signing-algs", "RS256", "comma-separated algorithms an ID token may be signed with: RS256, RS384, RS512, ES256, ES384, ES512, PS256, PS384, PS512")
	fs.StringVar(&f.authenticationConfig, "authentication-config", "", "AuthenticationConfiguration file (apiserver.config.k8s.io/v1), as kube-apiserver's flag: JWT issuers, each with its audiences, claim mappings and validation rules (CEL expressions or claims), and which requests may be anonymous; read again every 10s while the server runs. Not with the --oidc-* flags")
	fs.StringVar(&f.webhook.ConfigFile, "authentication-token-webhook-config-file", "", "kubeconfig of a remote service that authenticates bearer tokens nothing else knows, by TokenReview (authentication.k8s.io), as kube-apiserver's flag: its cluster is the service (https), its user the server's credentials there")
	fs.DurationVar(&f.webhook.CacheTTL, "authentication-token-webhook-cache-ttl", 2*time.Minute, "how long the webhook's answer that a token is a user's is kept (a refusal: 10s)")
	fs.StringVar(&f.webhook.Version, "authentication-token-webhook-version", "v1", "the authentication.k8s.io version of the TokenReviews sent: v1 or v1beta1 (kube-apiserver's default)")
	fs.StringVar(&f.apiAudiences, "api-audiences", "", "comma-separated audiences of this server, as kube-apiserver's flag: a TokenReview that names none is answered for these, and one that names others authenticates no token unless they include one of these (leasehold's tokens are bound to no audience of their own)")
	fs.BoolVar(&f.anonymousAuth, "anonymous-auth", false, "serve requests without credentials as system:anonymous (group system:unauthenticated) instead of answering 401")
	fs.StringVar(&f.authorizationMode, "authorization-mode", "RBAC,Node", "comma-separated authorizers in order: RBAC, Node, Webhook, AlwaysAllow, AlwaysDeny (system:masters is always allowed). Not with --authorization-config")
	fs.StringVar(&f.authorizationConfigFile, "authorization-config", "", "AuthorizationConfiguration file (apiserver.config.k8s.io/v1), as kube-apiserver's flag: the authorizers in order (RBAC, Node, AlwaysAllow, AlwaysDeny, and any number of Webhooks, each with its kubeconfig, TTLs, timeout, failurePolicy and CEL matchConditions); read again every 10s while the server runs. Not with --authorization-mode or --authorization-webhook-*")
	fs.StringVar(&f.authzWebhook.ConfigFile, "authorization-webhook-config-file", "", "kubeconfig of a remote service that the Webhook authorization mode asks by SubjectAccessReview (authorization.k8s.io), as kube-apiserver's flag: its cluster is the service (https), its user the server's credentials there")
	fs.DurationVar(&f.authzWebhook.AllowedTTL, "authorization-webhook-cache-authorized-ttl", 5*time.Minute, "how long the authorization webhook's allow is kept")
	fs.DurationVar(&f.authzWebhook.DeniedTTL, "authorization-webhook-cache-unauthorized-ttl", 30*time.Second, "how long the authorization webhook's deny, or lack of opinion, is kept")
	fs.StringVar(&f.authzWebhook.Version, "authorization-webhook-version", "v1", "the authorization.k8s.io version of the SubjectAccessReviews sent: v1 or v1beta1 (kube-apiserver's default)")
	fs.StringVar(&f.auditLogPath, "audit-log-path", "", "audit log file, one audit.k8s.io/v1 Event per line (default DATA_DIR/audit.log; - for standard output; none to disable)")
	fs.StringVar(&f.auditPolicyFile, "audit-policy-file", "", "audit.k8s.io/v1 Policy file (default: every request at Metadata level, without the RequestReceived stage)")
	fs.IntVar(&f.auditMaxSize, "audit-log-maxsize", 100, "megabytes the audit log may reach before it is rotated (0: never)")
	fs.IntVar(&f.auditMaxAge, "audit-log-maxage", 0, "days to keep rotated audit logs (0: no limit)")
	fs.BoolVar(&f.auditCompress, "audit-log-compress", false, "gzip each rotated audit log, as kube-apiserver's flag (in the background; the file then ends in .gz)")
	fs.IntVar(&f.auditMaxBackup, "audit-log-maxbackup", 10, "rotated audit logs to keep (0: no limit)")
	fs.IntVar(&f.auditBufferSize, "audit-log-buffer-size", 10000, "audit events that may wait to be written; more are dropped and counted in apiserver_audit_error_total{plugin=\"log\"}")
	fs.IntVar(&f.auditBufferSize, "audit-log-batch-buffer-size", 10000, "the same as --audit-log-buffer-size, by kube-apiserver's name")
	fs.StringVar(&f.auditLogFormat, "audit-log-format", "json", "format of the audit log; json, the only one (one Event per line, as kube-apiserver's json)")
	fs.StringVar(&f.auditLogMode, "audit-log-mode", "batch", "how events go to the audit log; batch, the only mode: in the background, written within --audit-log-batch-max-wait, dropped and counted when the buffer is full")
	fs.StringVar(&f.auditLogVersion, "audit-log-version", "audit.k8s.io/v1", "API version of the audit log's events; audit.k8s.io/v1, the only one")
	fs.DurationVar(&f.auditBatchMaxWait, "audit-log-batch-max-wait", 10*time.Millisecond, "how long the audit writer waits for more events before it writes the ones it has, at most 1s (0: write each at once); --audit-log-buffer-size must hold the events of one wait")
	fs.StringVar(&f.auditWebhookFile, "audit-webhook-config-file", "", "kubeconfig of a remote service that receives the audit events too, as audit.k8s.io/v1 EventLists, as kube-apiserver's flag: its cluster is the service (https), its user the server's credentials there")
	fs.StringVar(&f.auditWebhookMode, "audit-webhook-mode", "batch", "how events go to the audit webhook; batch, the only mode: in the background, dropped and counted when the webhook cannot take them")
	fs.IntVar(&f.auditWebhook.BufferSize, "audit-webhook-batch-buffer-size", 10000, "audit events that may wait for the webhook; more are dropped and counted in apiserver_audit_error_total{plugin=\"webhook\"}")
	fs.IntVar(&f.auditWebhook.MaxBatch, "audit-webhook-batch-max-size", 400, "the most audit events in one request to the webhook")
	fs.DurationVar(&f.auditWebhook.MaxWait, "audit-webhook-batch-max-wait", 30*time.Second, "how long a batch of audit events waits to fill before it is sent")
	fs.IntVar(&f.maxInFlight, "max-requests-inflight", 1000, "requests served at once, watches not counted (0: no limit); more get 429")
	fs.IntVar(&f.maxInFlightPerUser, "max-requests-inflight-per-user", 250, "requests one user may have served at once (0: no limit); more get 429")
	fs.IntVar(&f.maxConnections, "max-connections", 0, "client connections served at once; more wait to be accepted until some close (0: all but a twentieth of the process's open-file limit, leaving at least 1 024 files, or half of a smaller limit, to etcd and the server)")
	fs.Float64Var(&f.goawayChance, "goaway-chance", 0, "the chance, up to 0.02, that a request's HTTP/2 connection is closed after its response (GOAWAY; never a watch), as kube-apiserver's flag: clients reconnect, and a load balancer in front of several replicas spreads their connections again after one restarts (0: never)")
	fs.DurationVar(&f.requestReadTimeout, "request-read-timeout", time.Minute, "how long a request body may take to arrive")
	fs.Func("cors-allowed-origins", `regular expressions, comma-separated or repeated, of the origins whose web pages may call the API from a browser (CORS), as kube-apiserver's flag: each must pin the start of the host ("^" or "//") and its end ("$" or ":"), as '^https://ops\.example\.com(:|$)' (default none)`, func(v string) error {
		f.corsAllowedOrigins = append(f.corsAllowedOrigins, splitList(v)...)
		return nil
	})
	fs.Func("strict-transport-security-directives", "HSTS directives, comma-separated or repeated, for the Strict-Transport-Security header of every response, as kube-apiserver's flag: max-age=SECONDS (required), includeSubDomains, preload; browsers then reach this host by HTTPS alone (default none)", func(v string) error {
		f.hstsDirectives = append(f.hstsDirectives, splitList(v)...)
		return nil
	})
	fs.BoolVar(&f.apiResponseCompression, "api-response-compression", true, "gzip a response larger than 128 KiB (a long list) for a client that accepts gzip, as kube-apiserver's APIResponseCompression feature: client-go and kubectl accept it unless told not to (client-go's DisableCompression); false sends every response as it is, for less CPU per list")
	fs.DurationVar(&f.requestTimeout, "request-timeout", time.Minute, "how long a request other than a watch may take, as kube-apiserver's flag: one that etcd has not answered by then gets 504 (0: no limit); a client's ?timeout= may ask for less")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) {
		f.authorizationFlagsSet = f.authorizationFlagsSet || fl.Name == "authorization-mode" || strings.HasPrefix(fl.Name, "authorization-webhook-")
	})
	if err := f.check(); err != nil {
		return err
	}
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	return serve(ctx, f, log)
}

// check validates the flags before anything starts, and puts what several
// of them say in the form serve takes (lists, the etcd prefix, the
// watch-cache sizes, the OIDC configuration's defaults).
func (f *serveFlags) check() error {
	var err error
	if f.cacheSizes, err = parseWatchCacheSizes(f.watchCacheSizes); err != nil {
		return err
	}
	if f.etcdServers != "" {
		// As written in a unit file or a script: "a, b," is a and b.
		if f.etcdServers = strings.Join(splitList(f.etcdServers), ","); f.etcdServers == "" {
			return errors.New("--etcd-servers names no URL; leave it out to run etcd embedded")
		}
	}
	if (f.tlsCertFile == "") != (f.tlsKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if f.requestHeaderCAFile == "" && len(f.requestHeader.AllowedNames) > 0 {
		return errors.New("--requestheader-allowed-names needs --requestheader-client-ca-file")
	}
	if f.requestHeaderCAFile != "" && len(f.requestHeader.UsernameHeaders) == 0 {
		return errors.New("--requestheader-client-ca-file needs a header in --requestheader-username-headers")
	}
	if f.tlsMinVersion, err = pki.ParseTLSVersion(f.tlsMinVersionName); err != nil {
		return fmt.Errorf("--tls-min-version %w", err)
	}
	if f.tlsCipherSuites, f.tlsInsecureSuites, err = pki.ParseCipherSuites(f.tlsCipherSuiteNames, f.tlsMinVersion); err != nil {
		return fmt.Errorf("--tls-cipher-suites: %w", err)
	}
	if f.tlsCertFile != "" && f.tlsSANs != "" {
		return errors.New("--tls-san names hosts for the certificate the server's CA issues; with --tls-cert-file the certificate's own names are served")
	}
	if f.etcdPrefix, err = cleanEtcdPrefix(f.etcdPrefix); err != nil {
		return err
	}
	if f.corsOrigins, err = apiserver.ParseCORSOrigins(f.corsAllowedOrigins); err != nil {
		return fmt.Errorf("--cors-allowed-origins: %w", err)
	}
	if f.hsts, err = apiserver.HSTSHeader(f.hstsDirectives); err != nil {
		return fmt.Errorf("--strict-transport-security-directives: %w", err)
	}
	switch oidcFlags := f.oidc.ClientID != "" || len(f.oidc.RequiredClaims) > 0 || f.oidc.GroupsClaim != "" || f.oidcCAFile != ""; {
	case f.oidc.IssuerURL != "" && f.authenticationConfig != "":
		return errors.New("--authentication-config and the --oidc-* flags are mutually exclusive, as in kube-apiserver: make the issuer one of the file's jwt authenticators")
	case f.oidc.IssuerURL != "":
		if err := auth.CheckOIDC(f.oidc, splitList(f.oidcSigningAlgs)); err != nil {
			return fmt.Errorf("--oidc-*: %w", err)
		}
	case oidcFlags:
		return errors.New("the --oidc-* flags need --oidc-issuer-url")
	}
	switch {
	case f.authorizationConfigFile != "" && f.authorizationFlagsSet:
		return errors.New("--authorization-config and the --authorization-mode and --authorization-webhook-* flags are mutually exclusive, as in kube-apiserver: name the authorizers in the file")
	case f.authorizationConfigFile != "":
		// Read and checked again by serve.
	case f.authzWebhook.AllowedTTL < 0 || f.authzWebhook.DeniedTTL < 0:
		return errors.New("--authorization-webhook-cache-authorized-ttl and --authorization-webhook-cache-unauthorized-ttl must not be negative")
	default:
		if f.authorization, err = auth.AuthorizationConfigFromModes(splitList(f.authorizationMode), f.authzWebhook); err != nil {
			return err
		}
	}
	switch {
	case f.auditLogFormat != "json":
		return fmt.Errorf("--audit-log-format %q: leasehold writes its audit log in json only", f.auditLogFormat)
	case f.auditLogMode != "batch":
		return fmt.Errorf("--audit-log-mode %q: leasehold writes its audit log in batch mode only", f.auditLogMode)
	case f.auditLogVersion != "audit.k8s.io/v1":
		return fmt.Errorf("--audit-log-version %q: leasehold writes audit.k8s.io/v1 events only", f.auditLogVersion)
	}
	if f.auditWebhookMode != "batch" {
		return fmt.Errorf("--audit-webhook-mode %q: leasehold sends audit events to the webhook in batch mode only", f.auditWebhookMode)
	}
	if f.auditWebhook.BufferSize < 1 || f.auditWebhook.MaxBatch < 1 || f.auditWebhook.MaxWait <= 0 {
		return errors.New("--audit-webhook-batch-buffer-size, --audit-webhook-batch-max-size and --audit-webhook-batch-max-wait must be positive")
	}
	if f.webhook.CacheTTL < 0 {
		return fmt.Errorf("--authentication-token-webhook-cache-ttl must not be negative, not %v", f.webhook.CacheTTL)
	}
	if f.goawayChance < 0 || f.goawayChance > apiserver.MaxGoawayChance {
		return fmt.Errorf("--goaway-chance must be between 0 and %v, not %v", apiserver.MaxGoawayChance, f.goawayChance)
	}
	if f.etcdQuota <= 0 {
		return fmt.Errorf("--etcd-quota-backend-bytes must be positive, not %d", f.etcdQuota)
	}
	if f.snapshotInterval != 0 && f.snapshotInterval < time.Second {
		return fmt.Errorf("--etcd-snapshot-interval must be 0 or at least 1s, not %v", f.snapshotInterval)
	}
	if f.snapshotRetention < 1 {
		return fmt.Errorf("--etcd-snapshot-retention must be at least 1, not %d", f.snapshotRetention)
	}
	if f.snapshotDir == "" {
		f.snapshotDir = filepath.Join(f.dataDir, "snapshots")
	}
	if f.commitDelay < 0 || f.commitDelay > time.Second {
		return fmt.Errorf("--etcd-commit-delay must be between 0 and 1s, not %v", f.commitDelay)
	}
	if f.auditBatchMaxWait < 0 || f.auditBatchMaxWait > time.Second {
		return fmt.Errorf("--audit-log-batch-max-wait must be between 0 and 1s, not %v", f.auditBatchMaxWait)
	}
	if err := identity.CheckDurations(f.identityDuration, f.identityRenew); err != nil {
		return fmt.Errorf("--identity-lease-duration, --identity-lease-renew-interval: %w", err)
	}
	if f.nodeMonitorPeriod <= 0 || f.nodeMonitorGrace <= f.nodeMonitorPeriod {
		return fmt.Errorf("--node-monitor-grace-period (%v) must be longer than --node-monitor-period (%v), which must be positive", f.nodeMonitorGrace, f.nodeMonitorPeriod)
	}
	if f.nodeLeaseCheckpoint < 0 || f.nodeLeaseCheckpoint > f.nodeMonitorGrace/2 {
		return fmt.Errorf("--node-lease-checkpoint-interval (%v) must be between 0 and half --node-monitor-grace-period (%v)", f.nodeLeaseCheckpoint, f.nodeMonitorGrace)
	}
	if f.nodeStartupGrace <= 0 {
		return fmt.Errorf("--node-startup-grace-period (%v) must be positive", f.nodeStartupGrace)
	}
	if f.quotaSync <= 0 {
		return fmt.Errorf("--resource-quota-sync-period must be positive, not %v", f.quotaSync)
	}
	if f.shutdownDelay < 0 || f.shutdownGrace < 0 {
		return fmt.Errorf("--shutdown-delay-duration (%v) and --shutdown-grace-period (%v) must not be negative", f.shutdownDelay, f.shutdownGrace)
	}
	// Flags whose 0 means none or forever: a negative value is a mistake,
	// not another way to say so.
	for _, c := range []struct {
		name     string
		value    any
		negative bool
	}{
		{"--event-ttl", f.eventTTL, f.eventTTL < 0},
		{"--etcd-compaction-interval", f.compaction, f.compaction < 0},
		{"--etcd-compaction-writes", f.compactionWrites, f.compactionWrites < 0},
		{"--etcd-count-metric-poll-period", f.countPoll, f.countPoll < 0},
		{"--request-read-timeout", f.requestReadTimeout, f.requestReadTimeout < 0},
		{"--request-timeout", f.requestTimeout, f.requestTimeout < 0},
		{"--max-requests-inflight", f.maxInFlight, f.maxInFlight < 0},
		{"--max-requests-inflight-per-user", f.maxInFlightPerUser, f.maxInFlightPerUser < 0},
	} {
		if c.negative {
			return fmt.Errorf("%s must not be negative, not %v", c.name, c.value)
		}
	}
	return f.zones.Validate()
}

func serve(ctx context.Context, f serveFlags, log *slog.Logger) error {
	clk := clock.RealClock{}
	began := clk.Now()
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return err
	}
	// etcd's start is most of a restart's wait: it rebuilds its index from
	// every stored revision, on one core. What does not need etcd is
	// prepared meanwhile. The collector's setting is raised from here until
	// the watch caches are filled (bulkLoadGC).
	restoreGC := sync.OnceFunc(bulkLoadGC())
	defer restoreGC()
	etcd := startEtcd(f, log)
	defer etcd.close()
	go apiserver.Prepare()
	tokens := auth.NewTokens()
	shared, leave, err := pki.UseDir(f.dataDir)
	if err != nil {
		return err
	}
	defer leave()
	certs, adminToken, err := loadCertificates(f, host, shared, tokens, clk, log)
	if err != nil {
		return err
	}
	ca := certs.ca
	// The controllers' informers read the API server's watch cache in
	// process; api is set before any controller starts.
	var api *apiserver.Server
	reads := func(gvr schema.GroupVersionResource, namespace string, opts ...apiserver.ReadOption) (cache.ListerWatcher, error) {
		return api.ListerWatcherWith(gvr, namespace, opts...)
	}
	// The etcd snapshots' source, set with api.
	var snapshot func(context.Context) (io.ReadCloser, error)
	takeSnapshot := func(ctx context.Context) (io.ReadCloser, error) { return snapshot(ctx) }
	leaderMetrics := newLeaderMetrics()
	leasesCutOff := func() time.Time {
		// The earlier of the two, when both are set.
		cut, none := api.CutOff(coordinationv1.SchemeGroupVersion.WithResource("leases")), etcd.unansweredSince()
		if cut.IsZero() || (!none.IsZero() && none.Before(cut)) {
			return none
		}
		return cut
	}
	controllers := builtinControllers(f, reads, leasesCutOff, takeSnapshot, leaderMetrics)
	loopback, err := newLoopback(tokens, controllers)
	if err != nil {
		return err
	}
	// The authenticators' background work (the token store's reloads, the
	// JWT issuers' keys, the audit log) is stopped last, after in-flight
	// requests, so their audit events are written.
	authCtx, stopAuth := context.WithCancel(context.Background())
	var authWork sync.WaitGroup
	defer func() { stopAuth(); authWork.Wait() }()
	authnReloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_authentication_config_reloads_total",
		Help: "Reloads of --authentication-config after its file changed, by status: success, or failure (the file did not parse or validate, and the configuration in use stayed).",
	}, []string{"status"})
	// On an external etcd, the tokens that `leasehold token --etcd-servers`
	// keeps there, for every server on it, once etcd is reached.
	var etcdTokens *auth.Later
	if f.etcdServers != "" {
		etcdTokens = &auth.Later{}
	}
	authn, tokenStore, authnConfig, err := authenticators(authCtx, f, certs, tokens, etcdTokens, authnReloads, log)
	if err != nil {
		return err
	}
	authorization, authzFile := f.authorization, (*pki.Reloading[*apiserverconfig.AuthorizationConfiguration])(nil)
	if f.authorizationConfigFile != "" {
		if authzFile, err = pki.NewReloading(parseAuthorizationConfig, f.authorizationConfigFile); err != nil {
			return fmt.Errorf("--authorization-config: %w", err)
		}
		authorization = authzFile.Get()
		if err := auth.CheckWebhooks(authorization); err != nil {
			return fmt.Errorf("--authorization-config: %w", err)
		}
	} else if err := auth.CheckWebhooks(authorization); err != nil {
		return fmt.Errorf("--authorization-webhook-config-file: %w", err)
	}
	webhookMetrics := auth.NewWebhookMetrics()
	authzReloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_authorization_config_reloads_total",
		Help: "Reloads of --authorization-config after its file changed, by status: success, or failure (the file did not parse or validate, or a webhook's kubeconfig could not be read, and the authorizers in use stayed).",
	}, []string{"status"})
	auditLog, err := openAudit(f, clk, log)
	if err != nil {
		return err
	}

	docs, err := openapi.New(registry.All(), version.Info())
	if err != nil {
		return err
	}
	etcdClient, member, err := etcd.wait()
	if err != nil {
		return err
	}
	if member == nil {
		// Read once already, by openEtcd.
		cfg, _ := etcdClientConfig(strings.Split(f.etcdServers, ","), f.etcdCA, f.etcdCert, f.etcdKey, log)
		if err := waitForEtcd(ctx, etcdClient, cfg.TLS, clk, log); err != nil {
			return stoppedOr(ctx, log, err)
		}
	}
	if etcdTokens != nil {
		ets, err := auth.NewEtcdTokens(ctx, auth.EtcdTokensConfig{Client: etcdClient, Prefix: f.etcdPrefix, Logger: log})
		if err != nil {
			return stoppedOr(ctx, log, fmt.Errorf("the tokens in etcd: %w", err))
		}
		etcdTokens.Set(ets)
		authWork.Go(func() { ets.Run(authCtx) })
	}
	var etcdKV pb.KVClient // the embedded member's own, which skips gRPC
	if member != nil {
		etcdKV = member.KV()
		// A database at its quota refuses writes until its space is
		// reclaimed; a first check before the bootstrap's writes, then one
		// every spaceCheckInterval.
		space := member.SpaceKeeper(log, "--etcd-quota-backend-bytes")
		space.Check(ctx)
		spaceCtx, stopSpace := context.WithCancel(context.Background())
		spaceDone := make(chan struct{})
		go func() { space.Run(spaceCtx, clk, spaceCheckInterval); close(spaceDone) }()
		defer func() { stopSpace(); <-spaceDone }()
	}

	// An external cluster keeps etcd's default limit of operations per
	// transaction; the embedded member allows larger group commits. A
	// member of an external cluster can stop answering while the client
	// still sends it calls (until followAnswering finds it silent): commits
	// there are bounded, so that one held by such a member does not hold
	// the writes after it.
	maxBatch, commitTimeout := 0, etcdCommitTimeout
	if f.etcdServers == "" {
		maxBatch, commitTimeout = embedded.MaxBatch, 0
	}
	st, err := store.New(store.Config{Client: etcdClient, KV: etcdKV, Prefix: f.etcdPrefix, Scheme: registry.Scheme, CompactionInterval: orDisabled(f.compaction), CompactionWrites: orDisabled(f.compactionWrites), CountPollPeriod: orDisabled(f.countPoll), MaxBatch: maxBatch, CommitDelay: f.commitDelay, CommitTimeout: commitTimeout, Logger: log})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(apiserver.GoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), apiserver.BuildInfo())
	reg.MustRegister(apiserver.Collectors()...)
	reg.MustRegister(apiserver.ConnectionCollectors()...)
	reg.MustRegister(store.Collectors()...)
	reg.MustRegister(apiserver.GuardCollectors()...)
	reg.MustRegister(auth.Collectors()...)
	reg.MustRegister(audit.Collectors()...)
	reg.MustRegister(leaderMetrics)
	reg.MustRegister(certificateExpiry(ca, certs.fallback, certs.sni)...)
	reg.MustRegister(authnReloads, authzReloads)
	reg.MustRegister(webhookMetrics.Collectors()...)
	snapshot = etcdClient.Snapshot
	if member != nil {
		snapshot = member.Snapshot
	}
	api, err = apiserver.New(apiserver.Config{
		Store: st, Authenticator: authn, APIAudiences: splitList(f.apiAudiences), OpenAPI: docs, Logger: log, GarbageCollection: true, Profiling: f.profiling,
		Snapshot:                    snapshot,
		Extra:                       map[string]http.Handler{"/metrics": promhttp.HandlerFor(metricsGatherer(f, reg), promhttp.HandlerOpts{}), "/metrics/slis": sliHandler()},
		LogCheck:                    logOutput,
		Dashboard:                   dashboardFiles(f.dashboard),
		Authorization:               authorization,
		AuthorizationWebhookMetrics: webhookMetrics,
		Audit:                       auditLog,
		MaxRequestsInFlight:         f.maxInFlight,
		MaxRequestsInFlightPerUser:  f.maxInFlightPerUser,
		EventTTL:                    orDisabled(f.eventTTL),
		WatchCacheSizes:             f.cacheSizes,
		RequestReadTimeout:          orDisabled(f.requestReadTimeout),
		RequestTimeout:              orDisabled(f.requestTimeout),
		ResponseCompression:         f.apiResponseCompression,
		CORSAllowedOrigins:          f.corsOrigins,
		HSTS:                        f.hsts,
		NodeLeaseCheckpointInterval: f.nodeLeaseCheckpoint,
	})
	if err != nil {
		return err
	}
	authWork.Go(func() { tokenStore.Run(authCtx) })
	if authnConfig != nil {
		authWork.Go(func() { authnConfig.Run(authCtx) })
	}
	if authzFile != nil {
		authWork.Go(func() {
			tick.Every(authCtx, clk, pki.FileCheckInterval, func() {
				reloadAuthorization(api, authzFile, authzReloads, log)
			})
		})
	}
	if auditLog != nil {
		authWork.Go(func() { auditLog.Run(authCtx) })
	}

	storeCtx, stopStore := context.WithCancel(context.Background())
	storeDone := make(chan error, 1)
	go func() { storeDone <- st.Run(storeCtx) }()
	defer func() { stopStore(); <-storeDone }()
	// Bootstrap writes to etcd and waits for the caches the authorizer and
	// the namespace checks read. The server then serves while the other
	// caches fill: until a kind's cache is filled its reads go to etcd (as
	// kube-apiserver's do while a watch cache initializes) and its watches
	// wait.
	bootCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = api.Bootstrap(bootCtx)
	cancel()
	if err != nil {
		return stoppedOr(ctx, log, fmt.Errorf("bootstrap: %w", err))
	}
	go func() {
		if st.WaitReady(storeCtx) == nil {
			log.Info("watch caches filled", "sinceStart", clk.Since(began).Round(time.Millisecond))
		}
		restoreGC()
	}()
	api.KeepNamespaces(storeCtx)

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	maxConns, err := connectionLimit(f.maxConnections, log)
	if err != nil {
		ln.Close()
		return err
	}
	ln = apiserver.LimitConnections(ln, maxConns, clk, log)
	// The server's own clients (controllers, the identity publisher) have
	// a port of their own on the loopback interface, which no fleet can
	// fill.
	loopLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return err
	}
	// Any process on the machine can connect to it, though, and each
	// connection held is a file taken from what the serving port's limit
	// leaves etcd.
	loopLn = netutil.LimitListener(loopLn, loopbackConnections)
	servingCtx, stopServing := context.WithCancel(context.Background())
	var certificates sync.WaitGroup
	certificates.Go(func() { certs.own.Run(servingCtx, clk, pki.ServingCheckInterval, log) })
	certificates.Go(func() { reloadCertificateFiles(servingCtx, clk, certs, log) })
	defer func() { stopServing(); certificates.Wait() }()
	tc := &tls.Config{
		GetCertificate: certs.served,
		// Client certificates are optional (tokens also work). They are
		// checked by the authenticator, not the handshake, so that one
		// that chains to no CA the server trusts (the server's, or
		// --client-ca-file's), or has expired, gets a 401 Status as
		// kube-apiserver gives it, not a broken connection. ClientCAs
		// tell clients which certificates to send.
		ClientAuth: tls.RequestClientCert, ClientCAs: certs.clientRoots(),
	}
	if certs.handshakeCAs != nil {
		tc.ClientCAs = certs.handshakeCAs.Get()
	}
	handler := api.Handler()
	if f.goawayChance > 0 {
		handler = apiserver.ProbabilisticGoaway(handler, f.goawayChance, rand.Float64, loopLn.Addr().String())
	}
	srv := newHTTPServer(handler, tc, clk, log)
	tc.MinVersion, tc.CipherSuites = f.tlsMinVersion, f.tlsCipherSuites
	if len(f.tlsInsecureSuites) > 0 {
		log.Warn("--tls-cipher-suites names suites Go counts insecure", "suites", f.tlsInsecureSuites)
	}
	loopTC := tc.Clone()
	loopTC.GetCertificate = certs.own.GetCertificate
	if certs.handshakeCAs != nil {
		tc.GetConfigForClient = withClientCAs(tc, certs.handshakeCAs)
	}
	serveErr := make(chan error, 2)
	go func() { serveErr <- serveTLS(srv, ln, tc, clk, log) }()
	go func() { serveErr <- serveTLS(srv, loopLn, loopTC, clk, log) }()

	url := "https://" + ln.Addr().String()
	if err := loopback.serveAt(loopLn.Addr().String(), ca.CertPEM); err != nil {
		return err
	}
	// Every replica, leading or not, publishes its identity; Stop deletes
	// it while the server still answers.
	idClient, err := kubernetes.NewForConfig(loopback.config(apiserverUser))
	if err != nil {
		return err
	}
	hostname, _ := os.Hostname()
	idLease, err := identity.NewPublisher(identity.PublisherConfig{
		Client: idClient, Host: hostname, Addr: ln.Addr().String(),
		Duration: f.identityDuration, RenewInterval: f.identityRenew,
	})
	if err != nil {
		return err
	}
	idStop := make(chan struct{})
	if err := idLease.Start(idStop); err != nil {
		return err
	}
	// On a failure the renewals just end, as a crash would end them; on a
	// clean stop the Lease is deleted as well (stopIdentity).
	endRenewals := sync.OnceFunc(func() { close(idStop) })
	defer endRenewals()
	stopIdentity := func() {
		endRenewals()
		idLease.Stop()
	}
	log.Info("publishing this replica's identity", "lease", identity.Namespace+"/"+idLease.Name, "holder", idLease.HolderIdentity)
	// The controllers' Lease names the replica as its identity Lease does.
	mgr, err := manager.New(manager.Config{REST: loopback.config, Controllers: controllers, Identity: idLease.HolderIdentity, Logger: log})
	if err != nil {
		return err
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "leader_election_master_status",
		Help:        "Whether this replica holds the lease that the label names: 1 while it leads, 0 while another does, as kube-controller-manager reports it.",
		ConstLabels: prometheus.Labels{"name": manager.LeaseName},
	}, func() float64 {
		if mgr.IsLeader() {
			return 1
		}
		return 0
	}))
	ctrlCtx, stopControllers := context.WithCancel(context.Background())
	ctrlDone := make(chan struct{})
	go func() {
		defer close(ctrlDone)
		mgr.Run(ctrlCtx)
	}()

	kubeconfig := filepath.Join(f.dataDir, "admin.kubeconfig")
	log.Info("leasehold is serving", "url", url, "loopback", loopback.host, "kubeconfig", kubeconfig, "version", version.Version, "startedIn", clk.Since(began).Round(time.Millisecond))
	// The note for whoever started the server, which a log read as JSON
	// lines has no room for: its "leasehold is serving" entry says it all.
	if f.logFormat != "json" {
		fmt.Fprintf(os.Stderr, "\nleasehold is serving the Kubernetes API at %s\n\n  export KUBECONFIG=%s\n  kubectl get lease -A\n\n", url, kubeconfig)
	}
	if f.dashboard && f.logFormat != "json" {
		// A browser trusts the certificate of --tls-cert-file as the
		// PKI that issued it says; the server's own, through its CA.
		ca := " (the CA is " + filepath.Join(f.dataDir, pki.CACertFile) + ")"
		if certs.files != nil {
			ca = ""
		}
		fmt.Fprintf(os.Stderr, "The dashboard is at %s/dashboard/%s; sign in with the admin token:\n\n  kubectl config view --raw -o jsonpath='{.users[0].user.token}'\n\n", url, ca)
	}
	_ = adminToken

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-serveErr:
		stopControllers()
		<-ctrlDone
		return err
	}
	api.StopReadiness()
	if f.shutdownDelay > 0 {
		log.Info("serving on with /readyz failing", "for", f.shutdownDelay)
		select {
		case <-clk.After(f.shutdownDelay):
		case err := <-serveErr:
			stopControllers()
			<-ctrlDone
			return err
		}
	}
	stopControllers()
	<-ctrlDone
	stopIdentity()
	loopback.closeConnections()
	api.Shutdown()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("in-flight requests cut off at shutdown", "err", err)
	}
	return nil
}

// fleetQPS is the request rate of the two controllers whose work comes in
// bursts as large as the fleet, above the loopback's 200 a second. Marking
// a node unreachable takes two writes (its status, then its taints) and an
// event; collecting a deleted node's Lease, two live reads and a delete.
// At 200 requests a second, a pass after 5 000 nodes went silent at once
// took 75 s, and the Leases of 10 000 deleted nodes went in 146 s (2
// cores). Their workers (8 and 4) bound how many of their requests are in
// flight; at this rate they mark about 450 nodes a second, or collect
// about 330 Leases, with about one of the machine's two cores, while other
// nodes' renewals go on.
const fleetQPS = 1000

// fleetConfig is cfg with fleetQPS.
func fleetConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = fleetQPS, 2*fleetQPS
	return cfg
}

// builtinControllers are the controllers leasehold serve runs while it
// leads, each with the identity Kubernetes gives its counterpart. reads
// feeds the four that watch leases (the node lifecycle controller, the
// garbage collector, the leader election coordinator and the resource
// quota controller) from the watch cache; every controller writes through
// the API. The garbage collector's reads, and the resource quota
// controller's of what it counts, hold back the changes they have no use
// for, renewals among them. leasesCutOff tells the node lifecycle
// controller when the Leases' watch cache lost etcd, or its watch stalled,
// or no member of an external etcd answers, so that it judges no node
// meanwhile. The node lifecycle controller and the garbage collector
// export their metrics through metrics while they run.
func builtinControllers(f serveFlags, reads func(schema.GroupVersionResource, string, ...apiserver.ReadOption) (cache.ListerWatcher, error), leasesCutOff func() time.Time,
	snapshot func(context.Context) (io.ReadCloser, error), metrics *leaderMetrics) []manager.Controller {
	plainReads := func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error) {
		return reads(gvr, namespace)
	}
	gcReads := func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error) {
		return reads(gvr, namespace, apiserver.OnlyChanges(garbagecollector.Changed))
	}
	// The resource quota controller follows deletions alone.
	deletionReads := func(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error) {
		return reads(gvr, namespace, apiserver.OnlyChanges(func(_, _ runtime.Object) bool { return false }))
	}
	controllers := []manager.Controller{{
		Name:     "node-lifecycle",
		Identity: "system:serviceaccount:kube-system:node-controller",
		Run: func(ctx context.Context, cfg *rest.Config) error {
			client, err := kubernetes.NewForConfig(fleetConfig(cfg))
			if err != nil {
				return err
			}
			nc, err := nodelifecycle.New(nodelifecycle.Config{
				Client: client, Reads: plainReads, CutOff: leasesCutOff, MonitorPeriod: f.nodeMonitorPeriod, GracePeriod: f.nodeMonitorGrace, StartupGracePeriod: f.nodeStartupGrace,
				Zones:  f.zones,
				Logger: slog.Default().With("controller", "node-lifecycle"),
			})
			if err != nil {
				return err
			}
			defer metrics.hold("node-lifecycle", nc.Collectors())()
			return nc.Run(ctx)
		},
	}, {
		Name:     "garbage-collector",
		Identity: garbagecollector.UserName,
		Run: func(ctx context.Context, cfg *rest.Config) error {
			gc, err := garbagecollector.New(garbagecollector.Config{REST: fleetConfig(cfg), Reads: gcReads, Logger: slog.Default().With("controller", "garbage-collector")})
			if err != nil {
				return err
			}
			defer metrics.hold("garbage-collector", gc.Collectors())()
			return gc.Run(ctx)
		},
	}, {
		Name:     "clusterrole-aggregation",
		Identity: clusterroleaggregation.UserName,
		Run: func(ctx context.Context, cfg *rest.Config) error {
			c, err := clusterroleaggregation.New(clusterroleaggregation.Config{REST: cfg, Logger: slog.Default().With("controller", "clusterrole-aggregation")})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}, {
		Name:     "leader-election",
		Identity: coordinator.UserName,
		Run: func(ctx context.Context, cfg *rest.Config) error {
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			c, err := coordinator.New(coordinator.Config{Client: client, Reads: plainReads, Logger: slog.Default().With("controller", "leader-election")})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}, {
		Name:     "identity-lease-gc",
		Identity: apiserverUser,
		Run: func(ctx context.Context, cfg *rest.Config) error {
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			c, err := identity.NewCollector(identity.CollectorConfig{Client: client, Logger: slog.Default().With("controller", "identity-lease-gc")})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}, {
		Name:     "resource-quota",
		Identity: resourcequota.UserName,
		Run: func(ctx context.Context, cfg *rest.Config) error {
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			c, err := resourcequota.New(resourcequota.Config{Client: client, Reads: plainReads, DeletionReads: deletionReads, ResyncPeriod: f.quotaSync, Logger: slog.Default().With("controller", "resource-quota")})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}, {
		Name:     "namespace",
		Identity: "system:serviceaccount:kube-system:namespace-controller",
		Run: func(ctx context.Context, cfg *rest.Config) error {
			c, err := namespace.New(namespace.Config{REST: cfg, Logger: slog.Default().With("controller", "namespace")})
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}}
	if f.snapshotInterval > 0 {
		controllers = append(controllers, manager.Controller{
			Name:     "etcd-snapshots",
			Identity: apiserverUser,
			Run: func(ctx context.Context, _ *rest.Config) error {
				c, err := snapshots.New(snapshots.Config{
					Dir: f.snapshotDir, Interval: f.snapshotInterval, Retention: f.snapshotRetention,
					// From etcd, as GET /etcd/snapshot serves it, without
					// the loopback's TLS and HTTP/2 in between.
					Save: func(ctx context.Context, path string) (int64, int64, error) {
						return saveSnapshotFile(path, fromStream(ctx, snapshot))
					},
					Logger: slog.Default().With("controller", "etcd-snapshots"),
				})
				if err != nil {
					return err
				}
				defer metrics.hold("etcd-snapshots", c.Collectors())()
				return c.Run(ctx)
			},
		})
	}
	return controllers
}

// loopbackConnections is how many connections the loopback port holds at
// once; more wait to be accepted. The server's own clients share one.
const loopbackConnections = 64

// apiserverUser is the server's own identity on its loopback, as
// kube-apiserver's: in system:masters. It publishes the replica's identity
// Lease and collects those of replicas that are gone.
const apiserverUser = "system:apiserver"

// loopback hands the in-process controllers credentials for their
// identities: a random token each, known only to this process.
type loopback struct {
	host   string
	tokens map[string]string
	// rt is the one transport of every client, so that they share a
	// connection; conns holds what it dialed, for closeConnections.
	rt    http.RoundTripper
	conns *connrotation.ConnectionTracker
}

func newLoopback(tokens *auth.Tokens, controllers []manager.Controller) (*loopback, error) {
	l := &loopback{tokens: map[string]string{}}
	ids := []string{apiserverUser, "system:kube-controller-manager"}
	for _, c := range controllers {
		ids = append(ids, c.Identity)
	}
	for _, id := range ids {
		if _, ok := l.tokens[id]; ok {
			continue
		}
		t, err := pki.NewToken()
		if err != nil {
			return nil, err
		}
		l.tokens[id] = t
		groups := []string{auth.GroupAuthenticated}
		if id == apiserverUser {
			groups = append(groups, auth.GroupMasters)
		}
		if strings.HasPrefix(id, "system:serviceaccount:") {
			groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:kube-system")
		}
		tokens.Add(t, &auth.User{Name: id, Groups: groups})
	}
	return l, nil
}

// config returns a REST config for identity, which must be one of those
// newLoopback was given.
func (l *loopback) config(identity string) *rest.Config {
	return &rest.Config{
		Host: l.host, BearerToken: l.tokens[identity], Transport: l.rt,
		QPS: 200, Burst: 400, UserAgent: "leasehold/" + version.Version + " " + identity,
	}
}

// serveAt points the clients at the loopback port's address, whose
// certificate chains to ca.
func (l *loopback) serveAt(addr string, ca []byte) error {
	l.conns = connrotation.NewConnectionTracker()
	dial := connrotation.NewDialerWithTracker((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext, l.conns)
	rt, err := kubetransport.New(&kubetransport.Config{TLS: kubetransport.TLSConfig{CAData: ca}, DialHolder: &kubetransport.DialHolder{Dial: dial.DialContext}})
	if err != nil {
		return fmt.Errorf("loopback transport: %w", err)
	}
	l.host, l.rt = "https://"+addr, rt
	return nil
}

// closeConnections closes the clients' connections, once they are done.
// At shutdown the server answers an HTTP/2 connection with nothing in
// flight with a GOAWAY and then waits a second for its client to close
// it (net/http's allowance for a GOAWAY to arrive before the close):
// the server's own clients, all stopped by then, held every clean stop
// that long.
func (l *loopback) closeConnections() { l.conns.CloseAll() }

// bulkLoadGC lets the heap grow five times between collections instead of
// twice while etcd starts and the watch caches fill, and returns the
// function that puts the setting back. Both make garbage in bulk while what
// they keep only grows:
//   - etcd's start replays its write-ahead log and unmarshals every stored
//     revision, value and all, to keep its key and revisions. With 100 000
//     nodes (301 000 revisions) the default setting ran 44 collections of a
//     heap of 10 to 80 MB live there, about an eighth of the start's CPU;
//     raised, the server was ready a median 2.02 s after exec instead of
//     2.28 (sixteen starts each, alternating, 2 cores).
//   - In the fill, every collection marks what is kept anyway: with 100 000
//     nodes the default setting marked some 1.5 GB in five cycles, a third
//     of the fill's CPU.
//
// The heap at the end is the same either way: what the caches hold, plus
// the garbage of the last pages read. A GOGC of off is left alone.
func bulkLoadGC() (restore func()) {
	prev := debug.SetGCPercent(400)
	if prev < 0 {
		debug.SetGCPercent(prev)
		return func() {}
	}
	return func() { debug.SetGCPercent(prev) }
}

// orDisabled turns a flag's 0 (off) into the negative value the configs
// take for off, where 0 means their default.
func orDisabled[T ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// serverCerts are the certificates a server serves and trusts: its CA's,
// and those of --tls-cert-file and --client-ca-file, read again while it
// runs (pki.Reloading).
type serverCerts struct {
	ca *pki.CA
	// own is the serving certificate the CA issues, renewed while the
	// server runs. The loopback port always serves it, since the
	// controllers there trust the CA alone; --listen does too without
	// files.
	own *pki.Serving
	// files is --tls-cert-file's, served on --listen; nil without.
	files *pki.Reloading[*tls.Certificate]
	// sni are --tls-sni-cert-key's, served on --listen to clients that
	// ask for their names.
	sni pki.SNI
	// clientCAs are the CA and --client-ca-file's; nil without, when
	// pool (the CA alone) is every client certificate's root.
	clientCAs *pki.Reloading[*x509.CertPool]
	pool      *x509.CertPool
	// proxyCAs are --requestheader-client-ca-file's; nil without.
	// handshakeCAs are what handshakes name: clientCAs and proxyCAs
	// together; nil when pool is all.
	proxyCAs, handshakeCAs *pki.Reloading[*x509.CertPool]
}

// loadCertificates loads (or makes) the data directory's credentials, and
// reads --tls-cert-file and --client-ca-file; adminToken is set when this
// start made the admin token.
func loadCertificates(f serveFlags, host string, shared bool, tokens *auth.Tokens, clk clock.PassiveClock, log *slog.Logger) (c *serverCerts, adminToken string, err error) {
	c = &serverCerts{}
	if f.tlsCertFile != "" {
		if c.files, err = pki.NewReloading(pki.ParseServingPair, f.tlsCertFile, f.tlsKeyFile); err != nil {
			return nil, "", fmt.Errorf("--tls-cert-file, --tls-private-key-file: %w", err)
		}
		logServedCertificate(c.files.Get(), adminServer(f, host), clk, log)
	}
	for _, v := range f.sniCertKeys {
		certFile, keyFile, names, _ := pki.ParseSNIFlag(v) // checked as a flag
		pair, err := pki.NewReloading(pki.ParseServingPair, certFile, keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("--tls-sni-cert-key %s: %w", v, err)
		}
		c.sni = append(c.sni, pki.SNIPair{Pair: pair, Names: names, Flag: v})
	}
	if c.ca, c.own, adminToken, err = credentials(f, host, shared, c.files, tokens, clk, log); err != nil {
		return nil, "", err
	}
	c.pool = caPool(c.ca)
	if f.clientCAFile != "" {
		if c.clientCAs, err = pki.NewReloading(pki.ParseCABundle(c.ca.Cert), f.clientCAFile); err != nil {
			return nil, "", fmt.Errorf("--client-ca-file: %w", err)
		}
	}
	if f.requestHeaderCAFile != "" {
		if c.proxyCAs, err = pki.NewReloading(pki.ParseCABundle(nil), f.requestHeaderCAFile); err != nil {
			return nil, "", fmt.Errorf("--requestheader-client-ca-file: %w", err)
		}
		// Handshakes name every CA a client certificate may come from,
		// the proxy's too: Go's TLS client sends none that the server's
		// list leaves out.
		files := []string{f.requestHeaderCAFile}
		if f.clientCAFile != "" {
			files = append(files, f.clientCAFile)
		}
		if c.handshakeCAs, err = pki.NewReloading(pki.ParseCABundle(c.ca.Cert), files...); err != nil {
			return nil, "", fmt.Errorf("--requestheader-client-ca-file: %w", err)
		}
	} else {
		c.handshakeCAs = c.clientCAs
	}
	return c, adminToken, nil
}

// served is the certificate --listen serves now, for
// tls.Config.GetCertificate.
func (c *serverCerts) served(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.sni.Get(hello.ServerName); cert != nil {
		return cert, nil
	}
	return c.fallback(), nil
}

// fallback is the certificate served to clients that ask for none of
// --tls-sni-cert-key's names: --tls-cert-file's, else the server's own.
func (c *serverCerts) fallback() *tls.Certificate {
	if c.files != nil {
		return c.files.Get()
	}
	cert, _ := c.own.GetCertificate(nil)
	return cert
}

// clientRoots are the CAs a client certificate may chain to now.
func (c *serverCerts) clientRoots() *x509.CertPool {
	if c.clientCAs != nil {
		return c.clientCAs.Get()
	}
	return c.pool
}

// credentials loads the data directory's CA, serving certificate and admin
// token digest, and creates what is missing, under the directory's lock
// (pki.LockDir): replicas may share the directory. adminToken is set when
// this start made the admin token.
//
// The admin kubeconfig trusts the server's CA, or with servedCert (from
// --tls-cert-file) what pki.TrustAnchorPEM finds in its chain.
func credentials(f serveFlags, host string, shared bool, servedCert *pki.Reloading[*tls.Certificate], tokens *auth.Tokens, clk clock.PassiveClock, log *slog.Logger) (ca *pki.CA, serving *pki.Serving, adminToken string, err error) {
	release, err := pki.LockDir(f.dataDir)
	if err != nil {
		return nil, nil, "", err
	}
	defer release()
	// A CA made anew where an earlier start left its serving certificate
	// (ca.crt and ca.key deleted, or lost) is one that no client of that
	// start trusts: say so, since what they will see is an unknown
	// authority.
	caPath := filepath.Join(f.dataDir, pki.CACertFile)
	_, caErr := os.Stat(caPath)
	_, servingErr := os.Stat(filepath.Join(f.dataDir, pki.ServingCertFile))
	if ca, err = pki.LoadOrCreateCA(f.dataDir, clk); err != nil {
		return nil, nil, "", err
	}
	if errors.Is(caErr, fs.ErrNotExist) && servingErr == nil {
		log.Warn("the data directory held an earlier start's serving certificate but no CA: made a new CA, which the kubeconfigs and agents set up before do not trust; give them the new ca.crt",
			"ca", caPath)
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if host != "" && host != "0.0.0.0" && host != "::" {
		hosts = append(hosts, host)
	}
	hosts = append(hosts, splitList(f.tlsSANs)...)
	if serving, err = ca.NewServing(f.dataDir, hosts, clk); err != nil {
		return nil, nil, "", err
	}
	trust := ca.CertPEM
	if servedCert != nil {
		if trust, err = pki.TrustAnchorPEM(servedCert.Get()); err != nil {
			return nil, nil, "", fmt.Errorf("--tls-cert-file: %w", err)
		}
	}
	adminToken, err = adminCredentials(f, trust, host, shared, tokens)
	return ca, serving, adminToken, err
}

// certificateExpiry exports when the CA and the serving certificate in use
// expire, for an alert well ahead: the serving certificate renews itself
// (or is read again from --tls-cert-file, renewed by its own PKI), the CA
// (10 years) does not.
//
// Each --tls-sni-cert-key certificate has one too, labelled sni: and its
// certificate file, read as it is served (its files are read again every
// 10 s).
func certificateExpiry(ca *pki.CA, serving func() *tls.Certificate, sni pki.SNI) []prometheus.Collector {
	out := []prometheus.Collector{
		prometheus.NewGaugeFunc(certificateExpiryOpts("ca"), func() float64 { return float64(ca.Cert.NotAfter.Unix()) }),
		prometheus.NewGaugeFunc(certificateExpiryOpts("serving"), func() float64 {
			return float64(serving().Leaf.NotAfter.Unix())
		}),
	}
	seen := map[string]bool{}
	for _, p := range sni {
		certFile, _, _, _ := pki.ParseSNIFlag(p.Flag) // checked as a flag
		if seen[certFile] {
			continue // the same certificate given for other names
		}
		seen[certFile] = true
		out = append(out, prometheus.NewGaugeFunc(certificateExpiryOpts("sni:"+certFile), func() float64 {
			return float64(p.Pair.Get().Leaf.NotAfter.Unix())
		}))
	}
	return out
}

// certificateExpiryOpts describe when the certificate that which names
// expires.
func certificateExpiryOpts(which string) prometheus.GaugeOpts {
	return prometheus.GaugeOpts{
		Name:        "leasehold_certificate_expiration_timestamp_seconds",
		Help:        "When the certificate that the label names expires, in seconds since the Unix epoch.",
		ConstLabels: prometheus.Labels{"certificate": which},
	}
}

// certificateFileExpiry are the expiry gauges of the certificates in files
// (by the label value that names each), read from the file at each
// scrape: a certificate issued again in place is read from it too. A file
// that cannot be read or parsed reports 0, as if expired, for an alert to
// fire.
func certificateFileExpiry(files map[string]string) []prometheus.Collector {
	var out []prometheus.Collector
	for which, path := range files {
		if path == "" {
			continue
		}
		out = append(out, prometheus.NewGaugeFunc(certificateExpiryOpts(which), func() float64 {
			data, err := os.ReadFile(path)
			if err != nil {
				return 0
			}
			cert, err := pki.ParseCertPEM(data)
			if err != nil {
				return 0
			}
			return float64(cert.NotAfter.Unix())
		}))
	}
	return out
}

// adminCredentials loads the admin token digests, or on first start makes
// an admin token, keeps its digest and writes admin.kubeconfig with it.
// The kubeconfig trusts trust (none: the system's roots), also when it
// exists already, so that it follows --tls-cert-file coming and going, and
// follows a new --listen port (see followListen) unless another server
// uses the directory (shared, pki.UseDir): replicas on one machine sharing
// it each listen on a port of their own, and the kubeconfig keeps the
// first's, rather than following whichever started last.
//
// A data directory holding digests but no admin.kubeconfig (a replica's,
// given the files of another, or one whose kubeconfig was deleted) gets a
// new token whose digest is added beside the others, which stay valid:
// replacing them would lock out every kubeconfig made with them.
func adminCredentials(f serveFlags, trust []byte, host string, shared bool, tokens *auth.Tokens) (string, error) {
	admin := &auth.User{Name: "leasehold-admin", Groups: []string{auth.GroupMasters, auth.GroupAuthenticated}}
	digestPath := filepath.Join(f.dataDir, "admin-token.sha256")
	kubeconfig := filepath.Join(f.dataDir, "admin.kubeconfig")
	data, err := os.ReadFile(digestPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = nil
	case err != nil:
		return "", err
	}
	for _, line := range strings.Fields(string(data)) {
		sum, err := hex.DecodeString(line)
		if err != nil || len(sum) != sha256.Size {
			return "", fmt.Errorf("%s is corrupt: remove it, and admin.kubeconfig, for a new admin token", digestPath)
		}
		tokens.AddDigest([sha256.Size]byte(sum), admin)
	}
	if len(data) > 0 {
		if _, err := os.Stat(kubeconfig); err == nil {
			server := followListen("https://" + adminServer(f, host))
			if shared {
				server = func(old string) string { return old }
			}
			_, err := pki.UpdateKubeconfigCluster(kubeconfig, trust, server)
			return "", err
		}
	}
	token, err := pki.NewToken()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(token))
	data = append(bytes.TrimSpace(data), []byte("\n"+hex.EncodeToString(sum[:])+"\n")...)
	if err := pki.WriteFileAtomic(digestPath, bytes.TrimLeft(data, "\n"), 0o600); err != nil {
		return "", err
	}
	tokens.AddDigest(sum, admin)
	err = pki.WriteKubeconfig(kubeconfig, pki.KubeconfigSpec{Server: "https://" + adminServer(f, host), CAPEM: trust, User: admin.Name, Token: token})
	return token, err
}

// followListen gives the admin kubeconfig's server URL: the one it has,
// unless that names the host a new kubeconfig would name (url's) on
// another port, as after a change of --listen. A server set by hand to
// another host is kept.
func followListen(url string) func(old string) string {
	return func(old string) string {
		o, err1 := neturl.Parse(old)
		n, err2 := neturl.Parse(url)
		if err1 != nil || err2 != nil || o.Scheme != n.Scheme || o.Hostname() != n.Hostname() || o.Path != "" {
			return old
		}
		return url
	}
}

// adminServer is the HOST:PORT a new admin kubeconfig reaches the server
// at: --listen, or 127.0.0.1 with its port when it names every address.
func adminServer(f serveFlags, host string) string {
	if host == "" || host == "0.0.0.0" || host == "::" {
		_, port, _ := net.SplitHostPort(f.listen)
		return net.JoinHostPort("127.0.0.1", port)
	}
	return f.listen
}

// logServedCertificate says which certificate of --tls-cert-file is served
// and what the admin kubeconfig trusts, and warns of what would fail every
// client's handshake: a certificate expired, or one that does not name the
// host the admin kubeconfig reaches the server at.
func logServedCertificate(c *tls.Certificate, server string, clk clock.PassiveClock, log *slog.Logger) {
	leaf := c.Leaf
	log.Info("serving the certificate of --tls-cert-file", "subject", leaf.Subject.String(), "issuer", leaf.Issuer.String(), "notAfter", leaf.NotAfter)
	if now := clk.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		log.Warn("the certificate of --tls-cert-file is not valid now; clients will refuse it", "notBefore", leaf.NotBefore, "notAfter", leaf.NotAfter)
	}
	host, _, _ := net.SplitHostPort(server)
	if err := leaf.VerifyHostname(host); err != nil {
		log.Warn("the certificate of --tls-cert-file does not name the host of the admin kubeconfig's server; set its server to a name the certificate holds", "server", server, "err", err)
	}
}

// reloadCertificateFiles reads the files of --tls-cert-file, --tls-sni-cert-key,
// --client-ca-file and --requestheader-client-ca-file again every
// pki.FileCheckInterval until ctx ends (at once when none is given). New
// handshakes get what they hold; files that do not parse leave what is in
// use, and are logged.
func reloadCertificateFiles(ctx context.Context, clk clock.WithTicker, c *serverCerts, log *slog.Logger) {
	servedCert, clientCAs := c.files, c.clientCAs
	if servedCert == nil && clientCAs == nil && c.proxyCAs == nil && len(c.sni) == 0 {
		return
	}
	tick.Every(ctx, clk, pki.FileCheckInterval, func() {
		for _, p := range c.sni {
			switch replaced, err := p.Pair.Reload(); {
			case err != nil:
				log.Error("--tls-sni-cert-key: keeping the certificate in use", "flag", p.Flag, "err", err)
			case replaced:
				log.Info("serving the certificate of --tls-sni-cert-key as changed", "flag", p.Flag, "subject", p.Pair.Get().Leaf.Subject.String(), "notAfter", p.Pair.Get().Leaf.NotAfter)
			}
		}
		if c.proxyCAs != nil {
			switch replaced, err := c.proxyCAs.Reload(); {
			case err != nil:
				log.Error("--requestheader-client-ca-file: keeping the CAs in use", "err", err)
			case replaced:
				log.Info("the proxy's client certificates are checked against --requestheader-client-ca-file as changed")
			}
			if _, err := c.handshakeCAs.Reload(); err != nil {
				log.Debug("keeping the CAs handshakes name", "err", err)
			}
		}
		if servedCert != nil {
			switch replaced, err := servedCert.Reload(); {
			case err != nil:
				log.Error("--tls-cert-file, --tls-private-key-file: keeping the certificate in use", "err", err, "notAfter", servedCert.Get().Leaf.NotAfter)
			case replaced:
				log.Info("serving the certificate of --tls-cert-file as changed", "subject", servedCert.Get().Leaf.Subject.String(), "notAfter", servedCert.Get().Leaf.NotAfter)
			}
		}
		if clientCAs != nil {
			switch replaced, err := clientCAs.Reload(); {
			case err != nil:
				log.Error("--client-ca-file: keeping the CAs in use", "err", err)
			case replaced:
				log.Info("client certificates are checked against --client-ca-file as changed")
			}
		}
	})
}

// withClientCAs is a tls.Config.GetConfigForClient that gives each
// handshake tc with the client CAs in use; a configuration is made once for
// each pool that clientCAs loads.
func withClientCAs(tc *tls.Config, clientCAs *pki.Reloading[*x509.CertPool]) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	type forPool struct {
		pool *x509.CertPool
		tc   *tls.Config
	}
	var last atomic.Pointer[forPool]
	return func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool := clientCAs.Get()
		if l := last.Load(); l != nil && l.pool == pool {
			return l.tc, nil
		}
		c := tc.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = pool
		last.Store(&forPool{pool, c})
		return c, nil
	}
}

// dashboardFiles returns the dashboard's files, or nil when it is off.
func dashboardFiles(on bool) iofs.FS {
	if !on {
		return nil
	}
	return dashboard.Files()
}

// metricsGatherer is what /metrics serves: leasehold's registry and, when
// etcd runs embedded, the member's own metrics.
func metricsGatherer(f serveFlags, reg *prometheus.Registry) prometheus.Gatherer {
	if f.etcdServers != "" {
		return prometheus.Gatherers{reg, clientMetrics}
	}
	return prometheus.Gatherers{reg, clientMetrics, embedded.Metrics()}
}

// sliHandler serves /metrics/slis as kube-apiserver serves it: the health
// checks' results (kubernetes_healthcheck, kubernetes_healthchecks_total),
// which k8s.io/apiserver's health endpoints record in component-base's SLI
// registry at every request; a DELETE resets them.
func sliHandler() http.Handler {
	mux := http.NewServeMux()
	slis.SLIMetricsWithReset{}.Install(mux)
	return mux
}

// etcdStart is etcd opening in the background.
type etcdStart struct {
	done    chan struct{}
	client  *clientv3.Client
	member  *embedded.Etcd // nil for an external cluster
	closeFn func()
	err     error
	// unanswered is followAnswering's, for an external cluster.
	unanswered *atomic.Int64
}

func startEtcd(f serveFlags, log *slog.Logger) *etcdStart {
	s := &etcdStart{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.client, s.member, s.unanswered, s.closeFn, s.err = openEtcd(f, log)
	}()
	return s
}

// unansweredSince tells since when no member of an external cluster has
// answered the server's probes (followAnswering); zero while one does, and
// for the embedded member. It waits for etcd to open.
func (s *etcdStart) unansweredSince() time.Time {
	<-s.done
	if s.unanswered == nil {
		return time.Time{}
	}
	if ns := s.unanswered.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// wait returns the client, and the embedded member (nil for an external
// cluster), once etcd is open.
func (s *etcdStart) wait() (*clientv3.Client, *embedded.Etcd, error) {
	<-s.done
	return s.client, s.member, s.err
}

// close waits for etcd to open, if it is still opening, and closes it.
func (s *etcdStart) close() {
	if _, _, err := s.wait(); err == nil {
		s.closeFn()
	}
}

// spaceCheckInterval is how often an embedded or `leasehold etcd` member's
// NOSPACE alarm is
// checked: writes resume this long at most after deletions free enough of
// a full database.
const spaceCheckInterval = 10 * time.Second

// The client pings a member it has heard nothing from for etcdKeepAliveTime
// and drops the connection when no answer comes within etcdKeepAliveTimeout,
// which fails the calls it held. Without pings, a member that stops
// answering but keeps its connections open (a frozen machine, a
// partition, a stopped process) holds the calls sent to it for as long as
// TCP takes to give up. kube-apiserver pings after 30 s and waits 10 s;
// gRPC pings no more often than every 10 s. With several members,
// followAnswering stops new calls to a silent member sooner.
const (
	etcdKeepAliveTime    = 10 * time.Second
	etcdKeepAliveTimeout = 5 * time.Second
)

// etcdCommitTimeout bounds a group commit on an external cluster (see
// store.Config.CommitTimeout): its writes are answered with a timeout
// after 5 s, and the batches after it go once it has been in flight for
// 0.5 s. etcd itself gives a proposal 7 s (5 s and two election timeouts)
// before it answers that the request timed out.
const etcdCommitTimeout = 5 * time.Second

// etcdDirName is the embedded member's directory in the data directory.
const etcdDirName = "etcd"

// openEtcd connects to the external etcd, which it probes
// (followAnswering, whose unanswered it returns), or starts the embedded
// one.
func openEtcd(f serveFlags, log *slog.Logger) (*clientv3.Client, *embedded.Etcd, *atomic.Int64, func(), error) {
	if f.etcdServers == "" {
		start := time.Now()
		e, err := embedded.Start(embedded.Config{Dir: filepath.Join(f.dataDir, etcdDirName), QuotaBackendBytes: f.etcdQuota, Logger: log})
		if err != nil {
			return nil, nil, nil, nil, err
		}
		log.Info("embedded etcd ready", "took", time.Since(start).Round(time.Millisecond))
		return e.Client(), e, nil, func() { e.Close() }, nil
	}
	cfg, err := etcdClientConfig(strings.Split(f.etcdServers, ","), f.etcdCA, f.etcdCert, f.etcdKey, log)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("connecting to etcd: %w", err)
	}
	// With one member too: nothing else tells that it stopped answering.
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan struct{})
	unanswered := new(atomic.Int64)
	go func() { followAnswering(ctx, c, cfg, clock.RealClock{}, log, unanswered); close(followed) }()
	return c, nil, unanswered, func() { cancel(); <-followed; c.Close() }, nil
}

// cleanEtcdPrefix returns --etcd-prefix cleaned, or why it cannot be one.
func cleanEtcdPrefix(prefix string) (string, error) {
	if p := path.Clean(prefix); path.IsAbs(p) && p != "/" {
		return p, nil
	}
	return "", fmt.Errorf("--etcd-prefix must be an absolute path below /, such as /registry, not %q", prefix)
}

// etcdClientConfig is the configuration of a client of an external etcd
// at endpoints, verified with the CA bundle in caFile and authenticated
// with certFile and keyFile when they are given, which logs to log. An
// endpoint of a scheme etcd's client does not take, or a key without its
// certificate (or the reverse), is refused here rather than left to fail
// every call.
func etcdClientConfig(endpoints []string, caFile, certFile, keyFile string, log *slog.Logger) (clientv3.Config, error) {
	for _, ep := range endpoints {
		if scheme, _, ok := strings.Cut(ep, "://"); ok && !slices.Contains([]string{"http", "https", "unix", "unixs"}, scheme) {
			return clientv3.Config{}, fmt.Errorf("etcd endpoint %q: the scheme must be http, https, unix or unixs", ep)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return clientv3.Config{}, errors.New("--etcd-certfile and --etcd-keyfile go together")
	}
	cfg := clientv3.Config{
		Endpoints: endpoints, DialTimeout: 10 * time.Second,
		DialKeepAliveTime: etcdKeepAliveTime, DialKeepAliveTimeout: etcdKeepAliveTimeout,
		Logger: embedded.ClientLogger(log.With("component", "etcd-client")),
	}
	if caFile != "" || certFile != "" {
		tlsCfg, err := (transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}).ClientConfig()
		if err != nil {
			return cfg, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tlsCfg
	}
	return cfg, nil
}

// etcdStartWait is how long a start waits for an external etcd to answer
// before it gives up, as kube-apiserver gives its storage a minute; the
// server says that it waits, and why, every etcdProbeTimeout.
const (
	etcdStartWait    = time.Minute
	etcdProbeTimeout = 5 * time.Second
)

// waitForEtcd returns once the external etcd answers a linearizable read,
// which a member does only with a leader; a server started before its
// etcd, or while a member is down, says so in its log every
// etcdProbeTimeout instead of waiting in silence. It gives up after
// etcdStartWait, or when ctx ends.
func waitForEtcd(ctx context.Context, c *clientv3.Client, tlsCfg *tls.Config, clk clock.Clock, log *slog.Logger) error {
	began := clk.Now()
	for {
		tried := clk.Now()
		probeCtx, cancel := context.WithTimeout(ctx, etcdProbeTimeout)
		_, err := c.Get(probeCtx, "health", clientv3.WithCountOnly())
		cancel()
		switch {
		case err == nil:
			if waited := clk.Since(began); waited >= etcdProbeTimeout {
				log.Info("etcd answers", "endpoints", c.Endpoints(), "waited", waited.Round(time.Second))
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		// etcd's client says no more than that its call ran out of time.
		if why := whyEtcdUnreachable(ctx, c.Endpoints(), tlsCfg); why != nil {
			err = why
		}
		if clk.Since(began) >= etcdStartWait {
			return fmt.Errorf("etcd at %s did not answer within %v: %w", strings.Join(c.Endpoints(), ","), etcdStartWait, err)
		}
		log.Warn("waiting for etcd to answer", "endpoints", c.Endpoints(), "waited", clk.Since(began).Round(time.Second), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(etcdProbeTimeout - clk.Since(tried)):
		}
	}
}

// stoppedOr returns err, or nil once ctx has ended: a SIGTERM or an
// interrupt before the server serves is a clean stop, not a failure.
func stoppedOr(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() == nil {
		return err
	}
	log.Info("stopped before serving")
	return nil
}

// parseAuthorizationConfig reads an --authorization-config file.
func parseAuthorizationConfig(contents [][]byte) (*apiserverconfig.AuthorizationConfiguration, error) {
	return auth.ParseAuthorizationConfig(contents[0])
}

// reloadAuthorization reads --authorization-config again and, if it
// changed and is valid, puts its authorizers in use, as kube-apiserver
// reloads the file.
func reloadAuthorization(api *apiserver.Server, file *pki.Reloading[*apiserverconfig.AuthorizationConfiguration], reloads *prometheus.CounterVec, log *slog.Logger) {
	replaced, err := file.Reload()
	if err == nil && replaced {
		err = api.SetAuthorization(file.Get())
	}
	switch {
	case err != nil:
		log.Error("authorization config not reloaded; the authorizers in use stay", "err", err)
		reloads.WithLabelValues("failure").Inc()
	case replaced:
		log.Info("authorization config reloaded", "authorizers", len(file.Get().Authorizers))
		reloads.WithLabelValues("success").Inc()
	}
}

// authenticators returns the request authenticators in order, as
// kube-apiserver tries them: an authenticating proxy's request headers,
// client certificates signed by a CA of certs.clientRoots, the built-in
// tokens (admin and controllers), --token-auth-file, the token store that
// `leasehold token` maintains, the JWTs of the --oidc-* issuer or of
// --authentication-config's (returned too, for its Run), on an external
// etcd the tokens kept there (through etcdTokens once it is set), the token
// webhook, all of those tokens again when a WebSocket carries one in its
// subprotocols, and anonymous requests when enabled, by --anonymous-auth or
// by that file.
func authenticators(ctx context.Context, f serveFlags, certs *serverCerts, builtin *auth.Tokens, etcdTokens *auth.Later, reloads *prometheus.CounterVec, log *slog.Logger) (auth.Union, *auth.TokenStore, *auth.AuthenticationConfig, error) {
	var list auth.Union
	if certs.proxyCAs != nil {
		cfg := f.requestHeader
		cfg.Roots = certs.proxyCAs.Get
		list = append(list, auth.NewRequestHeader(cfg))
	}
	list = append(list, auth.NewClientCerts(certs.clientRoots, nil))
	tokens := auth.Union{builtin}
	if f.tokenAuthFile != "" {
		static, err := auth.LoadTokenFile(f.tokenAuthFile)
		if err != nil {
			return nil, nil, nil, err
		}
		tokens = append(tokens, static)
	}
	ts, err := auth.NewTokenStore(auth.TokenStoreConfig{Path: filepath.Join(f.dataDir, auth.TokenStoreFile), Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	tokens = append(tokens, ts)
	var fileCfg *auth.AuthenticationConfig
	switch {
	case f.oidc.IssuerURL != "":
		cfg := f.oidc
		if f.oidcCAFile != "" {
			if cfg.CA, err = os.ReadFile(f.oidcCAFile); err != nil {
				return nil, nil, nil, fmt.Errorf("--oidc-ca-file: %w", err)
			}
		}
		jwt, err := auth.NewJWT(ctx, []apiserverconfig.JWTAuthenticator{cfg.JWTAuthenticator()}, auth.JWTOptions{SigningAlgs: splitList(f.oidcSigningAlgs), Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--oidc-*: %w", err)
		}
		tokens = append(tokens, jwt)
	case f.authenticationConfig != "":
		fileCfg, err = auth.NewAuthenticationConfig(ctx, f.authenticationConfig, auth.AuthenticationConfigOptions{
			Logger:   log,
			Reloaded: func(status string) { reloads.WithLabelValues(status).Inc() },
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--authentication-config: %w", err)
		}
		if f.anonymousAuth && fileCfg.HasAnonymous() {
			return nil, nil, nil, errors.New("--anonymous-auth may not be set while --authentication-config says who may be anonymous, as in kube-apiserver")
		}
		tokens = append(tokens, fileCfg.JWT())
	}
	if etcdTokens != nil {
		// After the JWTs, which pass over any token that is not one at a
		// glance, so that a valid JWT never costs etcd a read as a token
		// it does not hold; before the webhook, a remote call.
		tokens = append(tokens, etcdTokens)
	}
	if f.webhook.ConfigFile != "" {
		wh, err := auth.NewWebhook(f.webhook)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--authentication-token-webhook-config-file: %w", err)
		}
		tokens = append(tokens, wh)
	}
	list = append(list, tokens...)
	list = append(list, auth.WebSocketProtocol{Tokens: tokens})
	switch {
	case f.anonymousAuth:
		list = append(list, auth.Anonymous{})
	case fileCfg != nil:
		list = append(list, fileCfg.Anonymous())
	}
	return list, ts, fileCfg, nil
}

// headerList is a flag.Func that sets *dst to a comma-separated list of
// header names, replacing the default at its first use and adding to it
// after.
func headerList(dst *[]string) func(string) error {
	set := false
	return func(v string) error {
		if !set {
			*dst, set = nil, true
		}
		for _, h := range splitList(v) {
			if strings.ContainsAny(h, " \t:") {
				return fmt.Errorf("%q is not a header name", h)
			}
			*dst = append(*dst, h)
		}
		return nil
	}
}

// keyValues is a flag of key=value pairs, repeated or separated by commas.
type keyValues map[string]string

func (kv *keyValues) String() string {
	if kv == nil {
		return ""
	}
	var out []string
	for k, v := range *kv {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func (kv *keyValues) Set(s string) error {
	if *kv == nil {
		*kv = map[string]string{}
	}
	for _, item := range splitList(s) {
		k, v, ok := strings.Cut(item, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q is not key=value", item)
		}
		(*kv)[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return nil
}

func caPool(ca *pki.CA) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// maxAuditLogs bounds the audit logs of servers sharing a data directory.
const maxAuditLogs = 64

// openAudit opens the audit log, or returns nil when it is disabled.
func openAudit(f serveFlags, clk clock.Clock, log *slog.Logger) (*audit.Logger, error) {
	policy := audit.DefaultPolicy()
	if f.auditPolicyFile != "" {
		p, err := audit.LoadPolicy(f.auditPolicyFile, log)
		if err != nil {
			return nil, err
		}
		policy = p
	}
	var webhook *audit.WebhookConfig
	if f.auditWebhookFile != "" {
		c, err := auth.NewWebhookClient(f.auditWebhookFile)
		if err != nil {
			return nil, fmt.Errorf("--audit-webhook-config-file: %w", err)
		}
		webhook = &f.auditWebhook
		webhook.Post = func(ctx context.Context, body []byte) error {
			_, err := c.Post(ctx, body)
			return err
		}
	}
	var out io.Writer
	switch f.auditLogPath {
	case "none":
		if webhook == nil {
			return nil, nil
		}
	case "-":
		out = struct{ io.Writer }{os.Stdout} // not closed at the end
	default:
		// Replicas sharing a data directory each write a log of their own
		// there: audit.log, then audit.2.log, audit.3.log, ... as they
		// find them in use.
		path, defaulted := f.auditLogPath, f.auditLogPath == ""
		for n := 1; ; n++ {
			if defaulted {
				path = filepath.Join(f.dataDir, "audit.log")
				if n > 1 {
					path = filepath.Join(f.dataDir, fmt.Sprintf("audit.%d.log", n))
				}
			}
			rf, err := audit.OpenRotating(audit.RotateConfig{
				Path: path, MaxBytes: int64(f.auditMaxSize) << 20,
				MaxAge: time.Duration(f.auditMaxAge) * 24 * time.Hour, MaxBackups: f.auditMaxBackup, Compress: f.auditCompress,
			})
			switch {
			case errors.Is(err, audit.ErrInUse) && defaulted && n < maxAuditLogs:
				continue
			case errors.Is(err, audit.ErrInUse):
				return nil, fmt.Errorf("audit log: %w; give each server its own --audit-log-path", err)
			case err != nil:
				return nil, fmt.Errorf("audit log: %w", err)
			}
			if path != filepath.Join(f.dataDir, "audit.log") && defaulted {
				log.Info("audit.log is another server's: writing the audit log to a file of its own", "path", path)
			}
			out = rf
			break
		}
	}
	return audit.New(audit.Config{Out: out, Webhook: webhook, Policy: policy, BufferSize: f.auditBufferSize, BatchMaxWait: f.auditBatchMaxWait, Clock: clk, Logger: log})
}

// parseWatchCacheSizes reads --watch-cache-sizes: resource[.group]#size,
// comma-separated, the group left out for the core API's resources.
func parseWatchCacheSizes(s string) (map[schema.GroupResource]int, error) {
	items := splitList(s)
	if len(items) == 0 {
		return nil, nil
	}
	sizes := make(map[schema.GroupResource]int, len(items))
	for _, item := range items {
		name, size, ok := strings.Cut(item, "#")
		n, err := strconv.Atoi(size)
		if !ok || name == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("--watch-cache-sizes: %q is not resource[.group]#size with a size of 0 or more", item)
		}
		sizes[schema.ParseGroupResource(name)] = n
	}
	return sizes, nil
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// connectionLimit is how many client connections the serving port holds at
// once: flag when set, else what apiserver.ConnectionBudget leaves of the
// process's open-file limit, which Go raises to the hard limit at start.
func connectionLimit(flag int, log *slog.Logger) (int, error) {
	if flag < 0 {
		return 0, fmt.Errorf("--max-connections %d must be 0 (from the open-file limit) or more", flag)
	}
	limit, err := openFileLimit()
	if err != nil {
		return 0, err
	}
	budget := apiserver.ConnectionBudget(limit)
	if flag == 0 {
		log.Info("serving at most this many client connections at once", "connections", budget, "openFileLimit", limit)
		return budget, nil
	}
	if flag > budget {
		log.Warn("--max-connections leaves etcd and the server few files of the open-file limit: a fleet that takes every connection can stop the embedded etcd", "maxConnections", flag, "openFileLimit", limit, "suggested", budget)
	}
	return flag, nil
}

// openFileLimit is how many files this process may have open: the soft
// limit, which Go raises to the hard one at start.
func openFileLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("reading the open-file limit: %w", err)
	}
	return rl.Cur, nil
}

// newHTTPServer is the HTTP server of `leasehold serve` for h: HTTP/2 (or
// HTTP/1.1) over TLS 1.2 or later with tc's certificates, 1 000 concurrent
// streams a connection. `leasehold bench echo-server` serves with it too, so
// that what it measures is this transport. Its Shutdown closes, a second
// after it begins, connections that have sent nothing since their handshake
// (apiserver.CloseSilentAtShutdown).
func newHTTPServer(h http.Handler, tc *tls.Config, clk clock.Clock, log *slog.Logger) *http.Server {
	tc.MinVersion = tls.VersionTLS12
	tc.NextProtos = []string{"h2", "http/1.1"}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		TLSConfig:         tc,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 1000,
			// Response headers go out without HPACK's dynamic table (no
			// entry fits in a byte). Every response carries an Audit-Id of
			// its own, which took a new entry each time and soon pushed out
			// the headers that do repeat, so the table held little but
			// Audit-Ids nobody would see again: some 10 KB of every
			// connection's memory, and as much in each client's.
			MaxEncoderHeaderTableSize: 1,
			// The largest frame read stays allocated for the connection's
			// life: with net/http's 1 MiB, one large body (even one answered
			// 401) left as much on every connection it came on. 16 KiB is
			// HTTP/2's own default; leasehold's objects fit in a few frames.
			MaxReadFrameSize: 16 << 10,
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	apiserver.CloseSilentAtShutdown(srv, clk, time.Second)
	return srv
}

// serveTLS serves srv on ln with the TLS configuration tc (srv's, or
// another for a listener of its own, made from it). Handshakes run ahead of
// net/http, each within srv's ReadHeaderTimeout (net/http's own bound for
// them), so that a connection's serving goroutine does not keep the stack
// its handshake grew (apiserver.HandshakeFirst).
func serveTLS(srv *http.Server, ln net.Listener, tc *tls.Config, clk clock.PassiveClock, log *slog.Logger) error {
	return srv.Serve(apiserver.HandshakeFirst(ln, tc, srv.ReadHeaderTimeout, clk, log))
}
