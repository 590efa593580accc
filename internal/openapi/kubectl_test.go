package openapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/leasehold/leasehold/internal/registry"
)

// kubectlPath finds kubectl; the test is skipped without it unless CI=true,
// where a missing kubectl is a failure.
func kubectlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubectl not found on PATH (required when CI=true): %v", err)
		}
		t.Skipf("kubectl not found on PATH: %v", err)
	}
	return p
}

// fakeAPIServer serves legacy discovery built from resources, the OpenAPI
// documents, and just enough of Leases for kubectl apply: objects are kept
// in memory and every write is recorded.
type fakeAPIServer struct {
	docs      *Documents
	resources []*registry.Resource

	mu     sync.Mutex
	leases map[string][]byte // "ns/name" -> JSON
	writes []recordedWrite
}

type recordedWrite struct {
	method, path, contentType string
	query                     map[string][]string
	body                      string
}

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/openapi/") {
		s.docs.ServeHTTP(w, r)
		return
	}
	// Aggregated discovery is not offered: kubectl falls back to the
	// legacy documents when the answer is plain application/json.
	writeJSON := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	gvs := map[schema.GroupVersion]*metav1.APIResourceList{}
	var groups metav1.APIGroupList
	for _, res := range s.resources {
		l, ok := gvs[res.GroupVersion]
		if !ok {
			l = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: res.GroupVersion.String()}
			gvs[res.GroupVersion] = l
			if res.GroupVersion.Group != "" {
				gvd := metav1.GroupVersionForDiscovery{GroupVersion: res.GroupVersion.String(), Version: res.GroupVersion.Version}
				groups.Groups = append(groups.Groups, metav1.APIGroup{Name: res.GroupVersion.Group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd})
			}
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: res.Name, SingularName: res.SingularName, Namespaced: res.Namespaced, Kind: res.Kind,
			Verbs: res.AllVerbs(), ShortNames: res.ShortNames, Categories: res.Categories,
		})
		if res.StatusSubresource {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: res.Name + "/status", Namespaced: res.Namespaced, Kind: res.Kind, Verbs: []string{"get", "patch", "update"}})
		}
	}
	switch p := strings.TrimSuffix(r.URL.Path, "/"); {
	case p == "/api":
		writeJSON(metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}}})
	case p == "/apis":
		groups.TypeMeta = metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}
		writeJSON(groups)
	case p == "/version":
		writeJSON(version.Info{GitVersion: "v1.32.0", Major: "1", Minor: "32"})
	case strings.HasPrefix(p, "/apis/coordination.k8s.io/v1/namespaces/"):
		s.serveLease(w, r)
	default:
		for gv, l := range gvs {
			if p == "/"+groupVersionPath(gv) {
				writeJSON(l)
				return
			}
		}
		http.NotFound(w, r)
	}
}

func (s *fakeAPIServer) serveLease(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// /apis/coordination.k8s.io/v1/namespaces/<ns>/leases[/<name>]
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/apis/coordination.k8s.io/v1/namespaces/"), "/")
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodGet {
		s.writes = append(s.writes, recordedWrite{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"), query: r.URL.Query(), body: string(body)})
	}
	w.Header().Set("Content-Type", "application/json")
	notFound := func(name string) {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: `leases.coordination.k8s.io "` + name + `" not found`,
			Details: &metav1.StatusDetails{Name: name, Group: "coordination.k8s.io", Kind: "leases"}})
	}
	switch {
	case len(parts) == 2 && r.Method == http.MethodPost:
		var l coordinationv1.Lease
		if err := json.Unmarshal(body, &l); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.Namespace, l.ResourceVersion, l.UID = parts[0], "1", "4b6f07a4-0000-4000-8000-000000000001"
		out, _ := json.Marshal(l)
		s.leases[parts[0]+"/"+l.Name] = out
		w.WriteHeader(http.StatusCreated)
		w.Write(out)
	case len(parts) == 3 && r.Method == http.MethodGet:
		obj, ok := s.leases[parts[0]+"/"+parts[2]]
		if !ok {
			notFound(parts[2])
			return
		}
		w.Write(obj)
	case len(parts) == 3 && r.Method == http.MethodPatch:
		obj, ok := s.leases[parts[0]+"/"+parts[2]]
		if !ok {
			notFound(parts[2])
			return
		}
		w.Write(obj) // the patch is recorded, not applied
	default:
		http.Error(w, "not served by this fake", http.StatusMethodNotAllowed)
	}
}

// kubectlEnv starts the fake server and writes a kubeconfig for it.
func kubectlEnv(t *testing.T, resources []*registry.Resource) (run func(stdin string, args ...string) (string, error), srv *fakeAPIServer) {
	t.Helper()
	kubectl := kubectlPath(t)
	docs, err := New(resources, version.Info{GitVersion: "v1.32.0"})
	if err != nil {
		t.Fatal(err)
	}
	srv = &fakeAPIServer{docs: docs, resources: resources, leases: map[string][]byte{}}
	ts := httptest.NewTLSServer(srv)
	t.Cleanup(ts.Close)

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters:
- name: leasehold
  cluster:
    server: ` + ts.URL + `
    insecure-skip-tls-verify: true
users:
- name: tester
  user:
    token: any-token
contexts:
- name: leasehold
  context: {cluster: leasehold, user: tester, namespace: default}
current-context: leasehold
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	run = func(stdin string, args ...string) (string, error) {
		args = append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(dir, "cache")}, args...)
		cmd := exec.Command(kubectl, args...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "KUBECONFIG="+kubeconfig)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	return run, srv
}

func TestKubectlExplain(t *testing.T) {
	run, _ := kubectlEnv(t, testResources())
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"explain", "lease.spec"}, []string{"KIND:       Lease", "coordination.k8s.io", "holderIdentity\t<string>", "leaseDurationSeconds\t<integer>", "renewTime\t<string>", "acquireTime"}},
		{[]string{"explain", "lease", "--recursive"}, []string{"metadata\t<ObjectMeta>", "ownerReferences\t<[]OwnerReference>", "uid\t<string> -required-", "holderIdentity\t<string>", "leaseTransitions\t<integer>"}},
		{[]string{"explain", "namespace.status"}, []string{"KIND:       Namespace", "phase\t<string>", "enum: Active, Terminating", "conditions\t<[]NamespaceCondition>"}},
		{[]string{"explain", "leases.spec.holderIdentity"}, []string{"FIELD: holderIdentity <string>", "identity of the holder"}},
		{[]string{"explain", "ns.metadata.ownerReferences"}, []string{"FIELD: ownerReferences <[]OwnerReference>", "controller\t<boolean>"}},
		{[]string{"explain", "node.spec.taints"}, []string{"FIELD: taints <[]Taint>", "effect\t<string> -required-", "enum: NoExecute, NoSchedule, PreferNoSchedule"}},
		{[]string{"explain", "node.status.conditions"}, []string{"lastHeartbeatTime\t<string>", "type\t<string> -required-"}},
		{[]string{"explain", "events.regarding", "--api-version=events.k8s.io/v1"}, []string{"GROUP:      events.k8s.io", "FIELD: regarding <ObjectReference>"}},
		{[]string{"explain", "clusterrole.rules"}, []string{"verbs\t<[]string> -required-"}},
		{[]string{"explain", "leasecandidate.spec"}, []string{"VERSION:    v1beta1", "leaseName\t<string> -required-"}},
		{[]string{"explain", "subjectaccessreview.spec"}, []string{"resourceAttributes\t<ResourceAttributes>"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := run("", tt.args...)
			if err != nil {
				t.Fatalf("kubectl %v: %v\n%s", tt.args, err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl %v output lacks %q:\n%s", tt.args, w, out)
				}
			}
		})
	}
}

// TestKubectlApply checks what kubectl decides from the documents: that the
// server validates fields (fieldValidation on PATCH in the v3 document, so
// kubectl leaves an unknown field to the server rather than rejecting it
// itself), and that a re-apply is a strategic merge patch computed from the
// schema.
func TestKubectlApply(t *testing.T) {
	run, srv := kubectlEnv(t, registry.All())
	manifest := `apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: demo
  namespace: default
spec:
  holderIdentity: alpha
  leaseDurationSeconds: 40
  unknownField: left-to-the-server
`
	out, err := run(manifest, "apply", "-f", "-")
	if err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	if !strings.Contains(out, "lease.coordination.k8s.io/demo created") {
		t.Errorf("first apply output = %q, want created", out)
	}
	out, err = run(strings.Replace(manifest, "alpha", "beta", 1), "apply", "-f", "-")
	if err != nil {
		t.Fatalf("second apply: %v\n%s", err, out)
	}
	if !strings.Contains(out, "lease.coordination.k8s.io/demo configured") {
		t.Errorf("second apply output = %q, want configured", out)
	}

	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.writes) != 2 {
		t.Fatalf("got %d writes, want 2: %+v", len(srv.writes), srv.writes)
	}
	create, patch := srv.writes[0], srv.writes[1]
	if create.method != http.MethodPost || create.query["fieldValidation"][0] != "Strict" {
		t.Errorf("create = %s %v, want POST with fieldValidation=Strict", create.method, create.query)
	}
	if !strings.Contains(create.body, "unknownField") {
		t.Errorf("create body = %s, want the unknown field passed to the server", create.body)
	}
	if patch.method != http.MethodPatch || patch.contentType != "application/strategic-merge-patch+json" {
		t.Errorf("re-apply = %s %s, want a strategic merge PATCH", patch.method, patch.contentType)
	}
	if got := patch.query["fieldValidation"]; len(got) != 1 || got[0] != "Strict" {
		t.Errorf("re-apply fieldValidation = %v, want Strict", got)
	}
	if !strings.Contains(patch.body, `"holderIdentity":"beta"`) {
		t.Errorf("re-apply patch = %s, want holderIdentity beta", patch.body)
	}
}

// TestKubectlClientSideValidation serves Leases without patch: kubectl then
// finds no fieldValidation support and validates against the schema itself.
func TestKubectlClientSideValidation(t *testing.T) {
	noPatch := *registry.Leases
	noPatch.Verbs = []string{"create", "get", "list"}
	run, srv := kubectlEnv(t, []*registry.Resource{&noPatch})
	tests := []struct {
		name, spec string
		wantErr    string // "" means accepted
	}{
		{"valid", "  holderIdentity: alpha\n", ""},
		{"unknown field", "  holderIdentity: alpha\n  bogus: 1\n", `unknown field "bogus" in io.k8s.api.coordination.v1.LeaseSpec`},
		{"wrong type", "  leaseDurationSeconds: forty\n", `invalid type for io.k8s.api.coordination.v1.LeaseSpec.leaseDurationSeconds`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			manifest := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: v" + strconv.Itoa(i) + "\nspec:\n" + tt.spec
			out, err := run(manifest, "create", "-f", "-")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("create: %v\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(out, tt.wantErr) {
				t.Fatalf("create: err %v, output %q; want an error containing %q", err, out, tt.wantErr)
			}
		})
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.writes) != 1 {
		t.Errorf("server saw %d writes, want 1 (only the valid object)", len(srv.writes))
	}
}
