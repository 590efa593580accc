package auth

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAuthorizationConfigFromModes(t *testing.T) {
	cfg, err := AuthorizationConfigFromModes([]string{"RBAC", "Node"}, AuthorizationWebhookFlags{})
	if err != nil || len(cfg.Authorizers) != 2 || cfg.Authorizers[0].Name != "rbac" || cfg.Authorizers[1].Name != "node" {
		t.Fatalf("RBAC,Node: %+v, %v", cfg, err)
	}
	wh := AuthorizationWebhookFlags{ConfigFile: writeWebhookKubeconfig(t, "https://policy.example", nil), AllowedTTL: time.Minute}
	cfg, err = AuthorizationConfigFromModes([]string{"Node", "Webhook", "RBAC"}, wh)
	if err != nil || cfg.Authorizers[1].Name != "webhook" || cfg.Authorizers[1].Webhook == nil ||
		*cfg.Authorizers[1].Webhook.ConnectionInfo.KubeConfigFile != wh.ConfigFile || !cfg.Authorizers[1].Webhook.CacheAuthorizedRequests || cfg.Authorizers[1].Webhook.CacheUnauthorizedRequests {
		t.Fatalf("Node,Webhook,RBAC: %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		modes []string
		wh    AuthorizationWebhookFlags
		want  string
	}{
		{[]string{"RBAC", "RBAC"}, AuthorizationWebhookFlags{}, `authorization mode "RBAC" given twice`},
		{[]string{"RBAC", "ABAC"}, AuthorizationWebhookFlags{}, `unknown authorization mode "ABAC"`},
		{[]string{"Webhook"}, AuthorizationWebhookFlags{}, ErrNoWebhookConfig.Error()},
		{[]string{"RBAC"}, wh, "needs Webhook in --authorization-mode"},
		{nil, AuthorizationWebhookFlags{}, "--authorization-mode: Required value: at least one"},
		{[]string{"Webhook"}, AuthorizationWebhookFlags{ConfigFile: "/nonexistent/authz.kubeconfig"}, "--authorization-webhook-config-file: Invalid value"},
	} {
		if _, err := AuthorizationConfigFromModes(tc.modes, tc.wh); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.modes, err, tc.want)
		}
	}
	if _, err := AuthorizationConfigFromModes([]string{"Webhook"}, AuthorizationWebhookFlags{}); !errors.Is(err, ErrNoWebhookConfig) {
		t.Errorf("Webhook without a file: %v", err)
	}
	// The flag takes a path relative to the working directory, as
	// kube-apiserver's does.
	t.Chdir(filepath.Dir(wh.ConfigFile))
	cfg, err = AuthorizationConfigFromModes([]string{"Webhook"}, AuthorizationWebhookFlags{ConfigFile: filepath.Base(wh.ConfigFile)})
	if err != nil || *cfg.Authorizers[0].Webhook.ConnectionInfo.KubeConfigFile != wh.ConfigFile {
		t.Errorf("a relative path: %+v, %v; want the file at %s", cfg, err, wh.ConfigFile)
	}
}

const goodAuthzConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Node
  name: node
- type: Webhook
  name: policy
  webhook:
    timeout: 3s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: Deny
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: /etc/leasehold/policy.kubeconfig
    matchConditions:
    - expression: has(request.resourceAttributes) && request.resourceAttributes.namespace == 'kube-system'
- type: RBAC
  name: rbac
- type: Webhook
  name: audit-only
  webhook:
    timeout: 1s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: NoOpinion
    connectionInfo: {type: KubeConfigFile, kubeConfigFile: /etc/leasehold/other.kubeconfig}
`

// authzConfigWith is goodAuthzConfig with kubeconfigs that exist.
func authzConfigWith(t *testing.T) string {
	t.Helper()
	kc := writeWebhookKubeconfig(t, "https://policy.example", nil)
	return strings.NewReplacer("/etc/leasehold/policy.kubeconfig", kc, "/etc/leasehold/other.kubeconfig", kc).Replace(goodAuthzConfig)
}

func TestParseAuthorizationConfig(t *testing.T) {
	goodAuthzConfig := authzConfigWith(t)
	cfg, err := ParseAuthorizationConfig([]byte(goodAuthzConfig))
	if err != nil || len(cfg.Authorizers) != 4 {
		t.Fatalf("a good file: %+v, %v", cfg, err)
	}
	// v1's defaults: cache both answers, 5m and 30s.
	if w := cfg.Authorizers[1].Webhook; !w.CacheAuthorizedRequests || w.AuthorizedTTL.Duration != 5*time.Minute || w.UnauthorizedTTL.Duration != 30*time.Second {
		t.Errorf("defaults: %+v", w)
	}
	if _, err := ParseAuthorizationConfig([]byte(strings.Replace(goodAuthzConfig, "/v1\n", "/v1beta1\n", 1))); err != nil {
		t.Errorf("v1beta1: %v", err)
	}
	for name, tc := range map[string]struct{ file, want string }{
		"an unknown field":        {strings.Replace(goodAuthzConfig, "  name: node\n", "  name: node\n  color: blue\n", 1), "unknown field"},
		"ABAC":                    {strings.Replace(goodAuthzConfig, "type: Node", "type: ABAC", 1), "Unsupported value"},
		"in a cluster":            {"apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: Webhook\n  name: w\n  webhook: {timeout: 1s, subjectAccessReviewVersion: v1, matchConditionSubjectAccessReviewVersion: v1, failurePolicy: Deny, connectionInfo: {type: InClusterConfig}}\n", "leasehold runs in no cluster"},
		"a kubeconfig missing":    {strings.Replace(goodAuthzConfig, "kubeConfigFile: /", "kubeConfigFile: /nonexistent/", 1), "kubeConfigFile"},
		"a broken matchCondition": {strings.Replace(goodAuthzConfig, "== 'kube-system'", "==", 1), "compilation failed"},
		"RBAC twice":              {goodAuthzConfig + "- type: RBAC\n  name: rbac2\n", "Duplicate"},
		"a name twice":            {strings.Replace(goodAuthzConfig, "name: audit-only", "name: policy", 1), "Duplicate"},
		"no failurePolicy":        {strings.Replace(goodAuthzConfig, "    failurePolicy: Deny\n", "", 1), "failurePolicy"},
		"no authorizers":          {"apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n", "at least one"},
		"another kind":            {"apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n", "AuthorizationConfiguration"},
	} {
		if _, err := ParseAuthorizationConfig([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// FuzzParseAuthorizationConfig: any file either is refused or gives
// authorizers of the types leasehold knows, webhooks with a kubeconfig.
func FuzzParseAuthorizationConfig(f *testing.F) {
	f.Add(goodAuthzConfig)
	f.Add("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers: [{type: RBAC, name: rbac}]\n")
	f.Add(`{"apiVersion":"apiserver.config.k8s.io/v1beta1","kind":"AuthorizationConfiguration","authorizers":[{"type":"AlwaysDeny","name":"no"}]}`)
	f.Fuzz(func(t *testing.T, file string) {
		cfg, err := ParseAuthorizationConfig([]byte(file))
		if err != nil {
			return
		}
		if len(cfg.Authorizers) == 0 {
			t.Fatal("no authorizers accepted")
		}
		for _, a := range cfg.Authorizers {
			if !authorizerTypes.Has(string(a.Type)) {
				t.Fatalf("type %q accepted", a.Type)
			}
			if (a.Type == "Webhook") != (a.Webhook != nil) || (a.Webhook != nil && a.Webhook.ConnectionInfo.KubeConfigFile == nil) {
				t.Fatalf("authorizer %+v accepted", a)
			}
		}
	})
}

// TestWebhookClientConfig: a webhook's client is not rate-limited (client-go
// holds a client without a QPS to five requests a second after a burst of
// ten), takes the configured timeout, and needs an https server.
func TestWebhookClientConfig(t *testing.T) {
	rc, err := webhookClientConfig(writeWebhookKubeconfig(t, "https://policy.example", nil), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rc.QPS >= 0 || rc.RateLimiter != nil || rc.Timeout != 3*time.Second {
		t.Errorf("QPS %v, rate limiter %v, timeout %v; want no limit and 3s", rc.QPS, rc.RateLimiter, rc.Timeout)
	}
	if _, err := webhookClientConfig(writeWebhookKubeconfig(t, "http://policy.example", nil), time.Second); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("an http server: %v", err)
	}
}
