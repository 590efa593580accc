package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/auth/audit"
)

// TestBulkLoadGC: the collector's setting is raised for the fill and put
// back after; GOGC=off stays off.
func TestBulkLoadGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	restore := bulkLoadGC()
	if got := debug.SetGCPercent(400); got != 400 {
		t.Errorf("during the fill GOGC is %d, want 400", got)
	}
	restore()
	if got := debug.SetGCPercent(-1); got != 100 {
		t.Errorf("after the fill GOGC is %d, want 100 back", got)
	}
	// GOGC is now off.
	restore = bulkLoadGC()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("with GOGC off the fill set %d", got)
	}
	restore()
	if got := debug.SetGCPercent(100); got != -1 {
		t.Errorf("with GOGC off, after the fill: %d", got)
	}
}

// --max-connections: 0 takes what the open-file limit leaves, a number is
// used as given, and a negative one is refused.
func TestConnectionLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if n, err := connectionLimit(0, log); err != nil || n != apiserver.ConnectionBudget(rl.Cur) {
		t.Errorf("connectionLimit(0) = %d, %v; want %d from an open-file limit of %d", n, err, apiserver.ConnectionBudget(rl.Cur), rl.Cur)
	}
	if n, err := connectionLimit(5000000, log); err != nil || n != 5000000 {
		t.Errorf("connectionLimit(5000000) = %d, %v; want it as given", n, err)
	}
	if _, err := connectionLimit(-1, log); err == nil {
		t.Error("connectionLimit(-1) took a negative limit")
	}
}

// TestServeRejectsBadAuditBatchMaxWait: the flag is checked before
// anything starts, and the error names it.
func TestServeRejectsBadAuditBatchMaxWait(t *testing.T) {
	for _, v := range []string{"-1ms", "2s"} {
		dir := t.TempDir()
		// Should the flag be taken, the server would serve until the
		// context ends: the test then fails rather than hangs.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := runServe(ctx, []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--audit-log-batch-max-wait", v})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--audit-log-batch-max-wait") {
			t.Errorf("%s: %v, want an error naming the flag", v, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: the data directory holds %d entries, want none", v, len(entries))
		}
	}
}

// TestServeEtcdServersList: --etcd-servers is read as a list written by
// hand, spaces and a trailing comma included; one that names no URL is
// refused before anything starts rather than taken for the embedded etcd.
func TestServeEtcdServersList(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	err := runServe(ctx, []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--etcd-servers", " , "})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "--etcd-servers") {
		t.Errorf("--etcd-servers ' , ': %v, want an error naming the flag", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the data directory holds %d entries, want none", len(entries))
	}
}

// TestServeRejectsBadFlags: flags that cannot work are refused with an
// error saying why, before anything starts; certificate files that hold no
// certificate are read once the data directory is made, and refused then.
func TestServeRejectsBadFlags(t *testing.T) {
	files := t.TempDir()
	junk := filepath.Join(files, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	anonymousConfig := filepath.Join(files, "authn.yaml")
	if err := os.WriteFile(anonymousConfig, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\nanonymous: {enabled: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		want    string
		started bool // the data directory is made before the files are read
	}{
		{[]string{"--tls-cert-file", junk}, "--tls-cert-file and --tls-private-key-file go together", false},
		{[]string{"--tls-private-key-file", junk}, "--tls-cert-file and --tls-private-key-file go together", false},
		{[]string{"--tls-cert-file", junk, "--tls-private-key-file", junk, "--tls-san", "a.example"}, "--tls-san", false},
		{[]string{"--tls-cert-file", junk, "--tls-private-key-file", junk}, "--tls-cert-file, --tls-private-key-file: tls: failed to find any PEM data", true},
		{[]string{"--tls-cert-file", filepath.Join(files, "missing.crt"), "--tls-private-key-file", junk}, "no such file", true},
		{[]string{"--client-ca-file", junk}, "--client-ca-file", true},
		{[]string{"--etcd-prefix", "registry"}, "--etcd-prefix", false},
		{[]string{"--etcd-prefix", "/"}, "--etcd-prefix", false},
		{[]string{"--etcd-prefix", ""}, "--etcd-prefix", false},
		{[]string{"--etcd-prefix", "//"}, "--etcd-prefix", false},
		{[]string{"--oidc-client-id", "c"}, "need --oidc-issuer-url", false},
		{[]string{"--oidc-issuer-url", "http://idp.example", "--oidc-client-id", "c"}, "--oidc-issuer-url: Invalid value: \"http://idp.example\": URL scheme must be https", false},
		{[]string{"--oidc-issuer-url", "https://idp.example"}, "--oidc-client-id: Required value", false},
		{[]string{"--oidc-issuer-url", "https://idp.example", "--oidc-client-id", "c", "--oidc-signing-algs", "RS256,none"}, `"none" is not one of`, false},
		{[]string{"--oidc-issuer-url", "https://idp.example", "--oidc-client-id", "c", "--oidc-required-claim", "hd"}, `"hd" is not key=value`, false},
		{[]string{"--oidc-issuer-url", "https://idp.example", "--oidc-client-id", "c", "--authentication-config", junk}, "mutually exclusive", false},
		{[]string{"--authentication-config", junk}, "--authentication-config: ", true},
		{[]string{"--authentication-config", filepath.Join(files, "missing.yaml")}, "no such file", true},
		{[]string{"--authentication-config", anonymousConfig, "--anonymous-auth"}, "--anonymous-auth may not be set", true},
		{[]string{"--authentication-token-webhook-cache-ttl", "-1s"}, "--authentication-token-webhook-cache-ttl", false},
		{[]string{"--goaway-chance", "0.5"}, "--goaway-chance must be between 0 and 0.02", false},
		{[]string{"--goaway-chance", "-0.01"}, "--goaway-chance must be between 0 and 0.02", false},
		{[]string{"--audit-webhook-mode", "blocking"}, "batch mode only", false},
		{[]string{"--audit-log-mode", "blocking"}, "batch mode only", false},
		{[]string{"--audit-log-format", "legacy"}, "json only", false},
		{[]string{"--audit-log-version", "audit.k8s.io/v1beta1"}, "audit.k8s.io/v1 events only", false},
		{[]string{"--audit-webhook-batch-max-size", "0"}, "must be positive", false},
		{[]string{"--audit-webhook-config-file", junk}, "--audit-webhook-config-file", true},
		{[]string{"--authorization-mode", "RBAC,Webhook"}, "authorization mode Webhook needs --authorization-webhook-config-file", false},
		{[]string{"--authorization-webhook-config-file", junk}, "--authorization-webhook-config-file needs Webhook in --authorization-mode", false},
		{[]string{"--authorization-mode", "RBAC,RBAC"}, `authorization mode "RBAC" given twice`, false},
		{[]string{"--authorization-mode", "RBAC,Webhook", "--authorization-webhook-config-file", junk, "--authorization-webhook-version", "v2"}, "--authorization-webhook-version: Unsupported value", false},
		{[]string{"--authorization-config", junk, "--authorization-mode", "RBAC"}, "mutually exclusive", false},
		{[]string{"--authorization-config", junk, "--authorization-webhook-cache-authorized-ttl", "1m"}, "mutually exclusive", false},
		{[]string{"--authorization-config", junk}, "--authorization-config: ", true},
		{[]string{"--authorization-mode", "Webhook", "--authorization-webhook-config-file", junk, "--authorization-webhook-cache-unauthorized-ttl", "-1s"}, "must not be negative", false},
		{[]string{"--authorization-mode", "Webhook", "--authorization-webhook-config-file", junk}, "--authorization-webhook-config-file", true},
		{[]string{"--authentication-token-webhook-config-file", junk}, "--authentication-token-webhook-config-file", true},
		{[]string{"--node-monitor-grace-period", "5s"}, "must be longer than --node-monitor-period", false},
		{[]string{"--node-monitor-period", "0s"}, "must be longer than --node-monitor-period", false},
		{[]string{"--node-startup-grace-period", "0s"}, "--node-startup-grace-period (0s) must be positive", false},
		{[]string{"--node-lease-checkpoint-interval", "26s"}, "--node-lease-checkpoint-interval (26s) must be between 0 and half --node-monitor-grace-period (50s)", false},
		{[]string{"--node-lease-checkpoint-interval", "-1s"}, "--node-lease-checkpoint-interval (-1s) must be between 0", false},
		{[]string{"--node-eviction-rate", "-1"}, "--node-eviction-rate", false},
		{[]string{"--secondary-node-eviction-rate", "NaN"}, "--secondary-node-eviction-rate", false},
		{[]string{"--large-cluster-size-threshold", "-1"}, "--large-cluster-size-threshold", false},
		{[]string{"--unhealthy-zone-threshold", "1.01"}, "--unhealthy-zone-threshold", false},
		{[]string{"--requestheader-allowed-names", "front-proxy"}, "--requestheader-allowed-names needs --requestheader-client-ca-file", false},
		{[]string{"--requestheader-client-ca-file", junk, "--requestheader-username-headers", ""}, "needs a header in --requestheader-username-headers", false},
		{[]string{"--requestheader-client-ca-file", junk, "--requestheader-group-headers", "X Group"}, `"X Group" is not a header name`, false},
		{[]string{"--requestheader-client-ca-file", junk}, "--requestheader-client-ca-file", true},
		{[]string{"--resource-quota-sync-period", "0s"}, "--resource-quota-sync-period must be positive", false},
		{[]string{"--shutdown-delay-duration", "-1s"}, "--shutdown-delay-duration (-1s) and --shutdown-grace-period (30s) must not be negative", false},
		{[]string{"--shutdown-grace-period", "-1s"}, "must not be negative", false},
		{[]string{"--event-ttl", "-1h"}, "--event-ttl must not be negative, not -1h0m0s", false},
		{[]string{"--etcd-compaction-interval", "-1s"}, "--etcd-compaction-interval must not be negative", false},
		{[]string{"--etcd-compaction-writes", "-5"}, "--etcd-compaction-writes must not be negative, not -5", false},
		{[]string{"--request-read-timeout", "-1s"}, "--request-read-timeout must not be negative", false},
		{[]string{"--max-requests-inflight", "-1"}, "--max-requests-inflight must not be negative, not -1", false},
		{[]string{"--max-requests-inflight-per-user", "-1"}, "--max-requests-inflight-per-user must not be negative", false},
		{[]string{"--tls-sni-cert-key", junk}, "want CERT,KEY", false},
		{[]string{"--tls-sni-cert-key", junk + "," + junk + ":not_a_name"}, `name "not_a_name"`, false},
		{[]string{"--tls-sni-cert-key", junk + "," + junk}, "--tls-sni-cert-key", true},
		{[]string{"--tls-min-version", "VersionTLS11"}, "--tls-min-version VersionTLS11: leasehold serves TLS 1.2 or later", false},
		{[]string{"--tls-cipher-suites", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"}, "--tls-cipher-suites: HTTP/2 over TLS 1.2 needs", false},
		{[]string{"--tls-cipher-suites", "AES128-SHA"}, `--tls-cipher-suites: "AES128-SHA" is not a cipher suite`, false},
	}
	for _, tc := range tests {
		dir := filepath.Join(t.TempDir(), "data")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := runServe(ctx, append([]string{"--data-dir", dir, "--listen", "127.0.0.1:0"}, tc.args...))
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
		if _, err := os.Stat(dir); !tc.started && err == nil {
			t.Errorf("%q: refused after the data directory was made", tc.args)
		}
	}
}

// TestKeyValuesFlag: --oidc-required-claim repeated and comma-separated.
func TestKeyValuesFlag(t *testing.T) {
	var kv keyValues
	for _, s := range []string{"hd=example.com", " tier = gold , team=ops"} {
		if err := kv.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := kv.String(); got != "hd=example.com,team=ops,tier=gold" {
		t.Errorf("got %q", got)
	}
}

// TestAuditLogsOfSharedDirectory: servers sharing a data directory each
// write an audit log of their own there (they rotate their files alone);
// a path given twice is refused.
func TestAuditLogsOfSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	f := serveFlags{dataDir: dir, auditMaxSize: 100, auditBufferSize: 10}
	var open []*audit.Logger // each holds its file's lock
	for _, want := range []string{"audit.log", "audit.2.log"} {
		l, err := openAudit(f, clock.RealClock{}, log)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, l)
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Errorf("%s: %v", want, err)
		}
	}
	f.auditLogPath = filepath.Join(dir, "audit.log")
	if _, err := openAudit(f, clock.RealClock{}, log); err == nil || !strings.Contains(err.Error(), "give each server its own --audit-log-path") {
		t.Errorf("an explicit path in use: %v", err)
	}
	runtime.KeepAlive(open)
}
