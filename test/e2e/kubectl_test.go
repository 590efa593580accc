package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"sigs.k8s.io/yaml"
)

var nsCounter atomic.Int64

// testNamespace creates a namespace of the test's own on s and returns its
// name.
func testNamespace(t *testing.T, s *server) string {
	t.Helper()
	name := strings.ToLower(t.Name())
	name = regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(name, "-")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("e2e-%s-%d", strings.Trim(name, "-"), nsCounter.Add(1))
	if got, want := strings.TrimSpace(s.kubectl(t, "create", "namespace", name)), "namespace/"+name+" created"; got != want {
		t.Fatalf("kubectl create namespace printed %q, want %q", got, want)
	}
	return name
}

// writeFile writes content to a new file in the test's temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// leaseManifest is a Lease in YAML with the given holder and extra spec
// lines (each already indented by two spaces).
func leaseManifest(name, namespace, holder string, specLines ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n", name, namespace)
	if holder != "" {
		fmt.Fprintf(&b, "  holderIdentity: %s\n", holder)
	}
	for _, l := range specLines {
		b.WriteString(l + "\n")
	}
	if holder == "" && len(specLines) == 0 {
		b.WriteString("  {}\n")
	}
	return b.String()
}

// getLease reads a lease, managedFields included, through `kubectl get -o
// json`.
func getLease(t *testing.T, s *server, namespace, name string) *coordinationv1.Lease {
	t.Helper()
	out := s.kubectl(t, "get", "lease", name, "-n", namespace, "-o", "json", "--show-managed-fields")
	var l coordinationv1.Lease
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("decoding kubectl get lease -o json: %v\n%s", err, out)
	}
	return &l
}

// holder is the lease's holderIdentity, "" when unset.
func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// tableRows splits kubectl's table output into its header fields and the
// fields of each row.
func tableRows(t *testing.T, out string) (header []string, rows [][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("kubectl printed no table:\n%s", out)
	}
	for _, l := range lines[1:] {
		rows = append(rows, strings.Fields(l))
	}
	return strings.Fields(lines[0]), rows
}

// rowNamed returns the row whose column col is name.
func rowNamed(rows [][]string, col int, name string) []string {
	for _, r := range rows {
		if len(r) > col && r[col] == name {
			return r
		}
	}
	return nil
}

var ageRE = regexp.MustCompile(`^(\d+s|\d+m(\d+s)?|\d+h(\d+m)?|\d+d)$`)

func notFoundLine(resource, name string) string {
	return fmt.Sprintf("Error from server (NotFound): %s %q not found", resource, name)
}

func TestGetLeaseAllNamespaces(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("all-1", ns, "holder-all"), "apply", "-f", "-")

	header, rows := tableRows(t, s.kubectl(t, "get", "lease", "-A"))
	if want := []string{"NAMESPACE", "NAME", "HOLDER", "AGE"}; !slices.Equal(header, want) {
		t.Errorf("kubectl get lease -A header = %q, want %q", header, want)
	}
	// The shared server may hold other tests' all-1 (go test -count).
	var row []string
	for _, r := range rows {
		if len(r) > 1 && r[0] == ns && r[1] == "all-1" {
			row = r
		}
	}
	if len(row) != 4 || row[2] != "holder-all" || !ageRE.MatchString(row[3]) {
		t.Errorf("kubectl get lease -A row for all-1 = %q, want [%s all-1 holder-all <age>]", row, ns)
	}

	out := s.kubectl(t, "get", "lease", "-A", "--field-selector", "metadata.namespace="+ns, "-o", "name")
	if got, want := strings.TrimSpace(out), "lease.coordination.k8s.io/all-1"; got != want {
		t.Errorf("kubectl get lease -A --field-selector metadata.namespace=%s -o name = %q, want %q", ns, got, want)
	}
}

func TestApplyCreateUnchangedConfigured(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	path := writeFile(t, "lease.yaml", leaseManifest("my-lease", ns, "a", "  leaseDurationSeconds: 15"))

	steps := []struct {
		name, manifest, want, wantHolder string
	}{
		{"create", "", "lease.coordination.k8s.io/my-lease created", "a"},
		{"re-apply unchanged", "", "lease.coordination.k8s.io/my-lease unchanged", "a"},
		{"change holder", leaseManifest("my-lease", ns, "c", "  leaseDurationSeconds: 15"), "lease.coordination.k8s.io/my-lease configured", "c"},
		{"re-apply changed", "", "lease.coordination.k8s.io/my-lease unchanged", "c"},
	}
	for _, st := range steps {
		if st.manifest != "" {
			if err := os.WriteFile(path, []byte(st.manifest), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := strings.TrimSpace(s.kubectl(t, "apply", "-f", path)); got != st.want {
			t.Errorf("%s: kubectl apply printed %q, want %q", st.name, got, st.want)
		}
		if got := holder(getLease(t, s, ns, "my-lease")); got != st.wantHolder {
			t.Errorf("%s: holder = %q, want %q", st.name, got, st.wantHolder)
		}
	}
	l := getLease(t, s, ns, "my-lease")
	if _, ok := l.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; !ok {
		t.Errorf("client-side apply left no last-applied-configuration annotation: %v", l.Annotations)
	}
}

// TestApplyPrune: kubectl apply --prune deletes the labelled leases that
// left the manifests, given the allowlist the README names; without it
// kubectl stops at a kind of its default list that leasehold does not serve.
func TestApplyPrune(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	labelled := func(name string) string {
		return strings.Replace(leaseManifest(name, ns, "h"), "metadata:\n", "metadata:\n  labels:\n    app: pruned\n", 1)
	}
	path := writeFile(t, "leases.yaml", labelled("keep")+"---\n"+labelled("gone"))
	prune := []string{"apply", "-n", ns, "-f", path, "--prune", "-l", "app=pruned", "--prune-allowlist=coordination.k8s.io/v1/Lease"}
	s.kubectl(t, prune...)
	if err := os.WriteFile(path, []byte(labelled("keep")), 0o600); err != nil {
		t.Fatal(err)
	}
	if errOut := s.kubectlFails(t, "", prune[:len(prune)-1]...); !strings.Contains(errOut, `no matches for kind "ConfigMap" in version "v1"`) {
		t.Errorf("kubectl apply --prune without an allowlist: %q", errOut)
	}
	out := s.kubectl(t, prune...)
	if !strings.Contains(out, "lease.coordination.k8s.io/gone pruned") {
		t.Errorf("kubectl apply --prune printed %q; want gone pruned", out)
	}
	if got := strings.TrimSpace(s.kubectl(t, "get", "leases", "-n", ns, "-o", "name")); got != "lease.coordination.k8s.io/keep" {
		t.Errorf("leases after the prune: %q; want keep alone", got)
	}
}

func TestGetLeaseTableColumns(t *testing.T) {
	t.Parallel()
	s := shared(t)
	const ns = "kube-node-lease"
	name := fmt.Sprintf("e2e-node-%d", nsCounter.Add(1))
	empty := name + "-noholder"
	s.kubectlStdin(t, leaseManifest(name, ns, "node-holder", "  leaseDurationSeconds: 40")+"---\n"+leaseManifest(empty, ns, ""), "apply", "-f", "-")
	t.Cleanup(func() { _, _, _ = s.runKubectl(t, "delete", "lease", "-n", ns, name, empty) })

	for _, args := range [][]string{
		{"get", "lease", "-n", ns},
		{"get", "lease", "-n", ns, "-o", "wide"},
		{"get", "leases.coordination.k8s.io", "-n", ns},
	} {
		out := s.kubectl(t, args...)
		first := strings.SplitN(out, "\n", 2)[0]
		if !regexp.MustCompile(`^NAME +HOLDER +AGE$`).MatchString(first) {
			t.Errorf("kubectl %s: header %q, want NAME HOLDER AGE", strings.Join(args, " "), first)
		}
		_, rows := tableRows(t, out)
		if r := rowNamed(rows, 0, name); len(r) != 3 || r[1] != "node-holder" || !ageRE.MatchString(r[2]) {
			t.Errorf("kubectl %s: row %q, want [%s node-holder <age>]\n%s", strings.Join(args, " "), r, name, out)
		}
		// No holder: an empty HOLDER cell, as Kubernetes prints it.
		if r := rowNamed(rows, 0, empty); len(r) != 2 || !ageRE.MatchString(r[1]) {
			t.Errorf("kubectl %s: row %q, want [%s <age>] (empty holder)\n%s", strings.Join(args, " "), r, empty, out)
		}
	}

	out := s.kubectl(t, "get", "lease", "-n", ns, name, "--no-headers")
	if f := strings.Fields(out); len(f) != 3 || f[0] != name {
		t.Errorf("kubectl get lease %s --no-headers = %q, want one row", name, out)
	}
}

func TestGetLeaseYAML(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	manifest := strings.Replace(leaseManifest("my-lease", ns, "a", "  leaseDurationSeconds: 15"),
		"metadata:\n", "metadata:\n  labels:\n    app: demo\n", 1)
	before := time.Now().Add(-time.Minute)
	s.kubectlStdin(t, manifest, "apply", "-f", "-")

	out := s.kubectl(t, "get", "lease", "my-lease", "-n", ns, "-o", "yaml")
	for _, want := range []string{"apiVersion: coordination.k8s.io/v1\n", "kind: Lease\n", "  resourceVersion: \"", "  uid: ", "  creationTimestamp: \"", "  holderIdentity: a\n", "  leaseDurationSeconds: 15\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get lease -o yaml lacks %q:\n%s", want, out)
		}
	}
	var l coordinationv1.Lease
	if err := yaml.UnmarshalStrict([]byte(out), &l); err != nil {
		t.Fatalf("decoding -o yaml: %v\n%s", err, out)
	}
	if l.APIVersion != "coordination.k8s.io/v1" || l.Kind != "Lease" {
		t.Errorf("apiVersion/kind = %s/%s, want coordination.k8s.io/v1/Lease", l.APIVersion, l.Kind)
	}
	if l.Name != "my-lease" || l.Namespace != ns || l.Labels["app"] != "demo" {
		t.Errorf("metadata = %s/%s labels %v, want %s/my-lease labels app=demo", l.Namespace, l.Name, l.Labels, ns)
	}
	rv, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil || rv <= 0 {
		t.Errorf("resourceVersion = %q, want a positive integer", l.ResourceVersion)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(string(l.UID)) {
		t.Errorf("uid = %q, want a UUID", l.UID)
	}
	if ct := l.CreationTimestamp.Time; ct.Before(before) || ct.After(time.Now().Add(time.Minute)) {
		t.Errorf("creationTimestamp = %v, want about now", ct)
	}
	if holder(&l) != "a" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 15 {
		t.Errorf("spec = %+v, want holderIdentity a, leaseDurationSeconds 15", l.Spec)
	}

	// A change moves resourceVersion forward and keeps uid and creationTimestamp.
	s.kubectl(t, "patch", "lease", "my-lease", "-n", ns, "--type", "merge", "-p", `{"spec":{"holderIdentity":"b"}}`)
	l2 := getLease(t, s, ns, "my-lease")
	rv2, _ := strconv.ParseInt(l2.ResourceVersion, 10, 64)
	if rv2 <= rv || l2.UID != l.UID || !l2.CreationTimestamp.Equal(&l.CreationTimestamp) {
		t.Errorf("after a patch: rv %d→%d, uid %s→%s, created %v→%v; want rv to grow, uid and creationTimestamp kept",
			rv, rv2, l.UID, l2.UID, l.CreationTimestamp, l2.CreationTimestamp)
	}

	// The list form.
	out = s.kubectl(t, "get", "lease", "-n", ns, "-o", "yaml")
	var list struct {
		APIVersion string                 `json:"apiVersion"`
		Kind       string                 `json:"kind"`
		Items      []coordinationv1.Lease `json:"items"`
	}
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decoding list -o yaml: %v\n%s", err, out)
	}
	if list.Kind != "List" || len(list.Items) != 1 || list.Items[0].Name != "my-lease" {
		t.Errorf("kubectl get lease -o yaml: kind %q with %d items, want a List holding my-lease\n%s", list.Kind, len(list.Items), out)
	}
}

func TestGetLeaseWatch(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("w", ns, "a"), "apply", "-f", "-")

	w := s.startKubectl(t, "get", "lease", "-n", ns, "-w")
	w.waitLine(t, time.Minute, "the header", func(f []string) bool { return slices.Equal(f, []string{"NAME", "HOLDER", "AGE"}) })
	w.waitLine(t, time.Minute, "the lease w held by a", func(f []string) bool { return len(f) == 3 && f[0] == "w" && f[1] == "a" })

	s.kubectl(t, "patch", "lease", "w", "-n", ns, "--type", "merge", "-p", `{"spec":{"holderIdentity":"b"}}`)
	w.waitLine(t, time.Minute, "the lease w held by b", func(f []string) bool { return len(f) == 3 && f[0] == "w" && f[1] == "b" })

	s.kubectlStdin(t, leaseManifest("w2", ns, "c"), "apply", "-f", "-")
	w.waitLine(t, time.Minute, "the new lease w2", func(f []string) bool { return len(f) == 3 && f[0] == "w2" && f[1] == "c" })

	s.kubectl(t, "delete", "lease", "w2", "-n", ns)
	w.waitLine(t, time.Minute, "the deleted lease w2", func(f []string) bool { return len(f) == 3 && f[0] == "w2" })

	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = w.wait(t, 30*time.Second)
}

func TestPatch(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("p", ns, "a", "  leaseDurationSeconds: 10"), "apply", "-f", "-")

	steps := []struct {
		name, typ, patch, wantOut, wantHolder string
	}{
		{"merge", "merge", `{"spec":{"holderIdentity":"b"}}`, "lease.coordination.k8s.io/p patched", "b"},
		{"json", "json", `[{"op":"replace","path":"/spec/holderIdentity","value":"j"}]`, "lease.coordination.k8s.io/p patched", "j"},
		{"strategic", "strategic", `{"spec":{"holderIdentity":"s"}}`, "lease.coordination.k8s.io/p patched", "s"},
		{"default type, no change", "", `{"spec":{"holderIdentity":"s"}}`, "lease.coordination.k8s.io/p patched (no change)", "s"},
		{"json add label", "json", `[{"op":"add","path":"/metadata/labels","value":{"team":"x"}}]`, "lease.coordination.k8s.io/p patched", "s"},
		{"merge remove holder", "merge", `{"spec":{"holderIdentity":null}}`, "lease.coordination.k8s.io/p patched", ""},
	}
	for _, st := range steps {
		args := []string{"patch", "lease", "p", "-n", ns, "-p", st.patch}
		if st.typ != "" {
			args = append(args, "--type", st.typ)
		}
		if got := strings.TrimSpace(s.kubectl(t, args...)); got != st.wantOut {
			t.Errorf("%s patch: kubectl printed %q, want %q", st.name, got, st.wantOut)
		}
		l := getLease(t, s, ns, "p")
		if got := holder(l); got != st.wantHolder {
			t.Errorf("%s patch: holder = %q, want %q", st.name, got, st.wantHolder)
		}
		if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 10 {
			t.Errorf("%s patch: leaseDurationSeconds = %v, want 10 kept", st.name, l.Spec.LeaseDurationSeconds)
		}
	}
	if l := getLease(t, s, ns, "p"); l.Labels["team"] != "x" {
		t.Errorf("labels = %v, want team=x from the JSON patch", l.Labels)
	}

	// An invalid result is refused with Kubernetes' 422 message and changes nothing.
	before := getLease(t, s, ns, "p")
	errOut := s.kubectlFails(t, "", "patch", "lease", "p", "-n", ns, "--type", "merge", "-p", `{"spec":{"leaseDurationSeconds":0}}`)
	for _, want := range []string{`The Lease "p" is invalid`, "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("invalid patch: stderr lacks %q:\n%s", want, errOut)
		}
	}
	if after := getLease(t, s, ns, "p"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("invalid patch changed the lease: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
	}

	// The uid is immutable, even beside a renewal (which takes the
	// server's fast path); a node's owner references name it.
	errOut = s.kubectlFails(t, "", "patch", "lease", "p", "-n", ns, "--type", "merge", "-p", `{"metadata":{"uid":"123"},"spec":{"renewTime":"2026-01-01T00:00:00.000000Z"}}`)
	if want := `metadata.uid: Invalid value: "123": field is immutable`; !strings.Contains(errOut, want) {
		t.Errorf("uid patch: stderr lacks %q:\n%s", want, errOut)
	}
	if after := getLease(t, s, ns, "p"); after.ResourceVersion != before.ResourceVersion || after.UID != before.UID {
		t.Errorf("uid patch changed the lease: resourceVersion %s → %s, uid %s → %s", before.ResourceVersion, after.ResourceVersion, before.UID, after.UID)
	}

	// A JSON patch whose test fails is refused.
	s.kubectlFails(t, "", "patch", "lease", "p", "-n", ns, "--type", "json", "-p", `[{"op":"test","path":"/spec/leaseDurationSeconds","value":99}]`)
	if after := getLease(t, s, ns, "p"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("failed JSON patch test changed the lease: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
	}

	// Patching what does not exist is 404.
	errOut = s.kubectlFails(t, "", "patch", "lease", "nope", "-n", ns, "--type", "merge", "-p", `{"spec":{"holderIdentity":"b"}}`)
	if !strings.Contains(errOut, notFoundLine("leases.coordination.k8s.io", "nope")) {
		t.Errorf("patch of a missing lease: stderr %q, want NotFound", errOut)
	}
}

// managedEntry finds the managedFields entry of manager and operation.
func managedEntry(l *coordinationv1.Lease, manager string, op metav1.ManagedFieldsOperationType) *metav1.ManagedFieldsEntry {
	for i := range l.ManagedFields {
		if e := &l.ManagedFields[i]; e.Manager == manager && e.Operation == op {
			return e
		}
	}
	return nil
}

// ownsField says whether e's fieldsV1 contains the path, e.g. "f:spec",
// "f:holderIdentity".
func ownsField(t *testing.T, e *metav1.ManagedFieldsEntry, path ...string) bool {
	t.Helper()
	if e == nil || e.FieldsV1 == nil {
		return false
	}
	var m map[string]any
	if err := json.Unmarshal(e.FieldsV1.Raw, &m); err != nil {
		t.Fatalf("fieldsV1 of %s: %v", e.Manager, err)
	}
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			return false
		}
		m = next
	}
	return true
}

func describeManaged(l *coordinationv1.Lease) string {
	var b strings.Builder
	for _, e := range l.ManagedFields {
		raw := ""
		if e.FieldsV1 != nil {
			raw = string(e.FieldsV1.Raw)
		}
		fmt.Fprintf(&b, "  manager=%s operation=%s apiVersion=%s fields=%s\n", e.Manager, e.Operation, e.APIVersion, raw)
	}
	return b.String()
}

func TestServerSideApply(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	path := writeFile(t, "ssa.yaml", leaseManifest("ssa", ns, "ssa-a", "  leaseDurationSeconds: 20"))

	if got, want := strings.TrimSpace(s.kubectl(t, "apply", "--server-side", "-f", path)), "lease.coordination.k8s.io/ssa serverside-applied"; got != want {
		t.Errorf("kubectl apply --server-side printed %q, want %q", got, want)
	}
	l := getLease(t, s, ns, "ssa")
	if holder(l) != "ssa-a" {
		t.Errorf("holder = %q, want ssa-a", holder(l))
	}
	// -o yaml hides managedFields unless asked.
	if out := s.kubectl(t, "get", "lease", "ssa", "-n", ns, "-o", "yaml", "--show-managed-fields"); !strings.Contains(out, "managedFields:") || !strings.Contains(out, "manager: kubectl") {
		t.Errorf("kubectl get -o yaml --show-managed-fields shows no kubectl manager:\n%s", out)
	}

	t.Run("create records an Apply entry for kubectl", func(t *testing.T) {
		// kube-apiserver records the object created by an apply patch as
		// {manager: kubectl, operation: Apply}, owning what was applied.
		e := managedEntry(l, "kubectl", metav1.ManagedFieldsOperationApply)
		if e == nil {
			t.Fatalf("no managedFields entry {manager: kubectl, operation: Apply} after kubectl apply --server-side created the lease; got:\n%s", describeManaged(l))
		}
		if !ownsField(t, e, "f:spec", "f:holderIdentity") || !ownsField(t, e, "f:spec", "f:leaseDurationSeconds") {
			t.Errorf("kubectl's Apply entry does not own spec.holderIdentity and spec.leaseDurationSeconds:\n%s", describeManaged(l))
		}
		if e.APIVersion != "coordination.k8s.io/v1" || e.FieldsType != "FieldsV1" || e.Time == nil {
			t.Errorf("entry = %+v, want apiVersion coordination.k8s.io/v1, fieldsType FieldsV1 and a time", e)
		}
	})

	// Re-applying the same manifest keeps the object.
	rv := l.ResourceVersion
	s.kubectl(t, "apply", "--server-side", "-f", path)
	if l = getLease(t, s, ns, "ssa"); l.ResourceVersion != rv {
		t.Errorf("re-applying the same manifest changed resourceVersion %s → %s", rv, l.ResourceVersion)
	}

	// Another manager changing an owned field conflicts.
	other := writeFile(t, "other.yaml", leaseManifest("ssa", ns, "ssa-b", "  leaseDurationSeconds: 20"))
	errOut := s.kubectlFails(t, "", "apply", "--server-side", "--field-manager=other", "-f", other)
	for _, want := range []string{"Apply failed with 1 conflict", `conflict with "kubectl"`, ".spec.holderIdentity", "--force-conflicts"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("conflicting apply: stderr lacks %q:\n%s", want, errOut)
		}
	}
	if l = getLease(t, s, ns, "ssa"); holder(l) != "ssa-a" || l.ResourceVersion != rv {
		t.Errorf("conflicting apply changed the lease: holder %q rv %s, want ssa-a rv %s", holder(l), l.ResourceVersion, rv)
	}

	// --force-conflicts takes the field over.
	if got, want := strings.TrimSpace(s.kubectl(t, "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", other)), "lease.coordination.k8s.io/ssa serverside-applied"; got != want {
		t.Errorf("kubectl apply --server-side --force-conflicts printed %q, want %q", got, want)
	}
	l = getLease(t, s, ns, "ssa")
	if holder(l) != "ssa-b" {
		t.Errorf("after --force-conflicts holder = %q, want ssa-b", holder(l))
	}
	oe := managedEntry(l, "other", metav1.ManagedFieldsOperationApply)
	if !ownsField(t, oe, "f:spec", "f:holderIdentity") || !ownsField(t, oe, "f:spec", "f:leaseDurationSeconds") {
		t.Errorf("manager other does not own holderIdentity and leaseDurationSeconds after forcing:\n%s", describeManaged(l))
	}
	for _, e := range l.ManagedFields {
		if e.Manager == "kubectl" && ownsField(t, &e, "f:spec", "f:holderIdentity") {
			t.Errorf("kubectl still owns holderIdentity after other forced it:\n%s", describeManaged(l))
		}
	}

	// An update by a client-side patch shows up as an Update entry.
	s.kubectl(t, "patch", "lease", "ssa", "-n", ns, "--type", "merge", "-p", `{"spec":{"leaseTransitions":1}}`)
	l = getLease(t, s, ns, "ssa")
	if e := managedEntry(l, "kubectl-patch", metav1.ManagedFieldsOperationUpdate); !ownsField(t, e, "f:spec", "f:leaseTransitions") {
		t.Errorf("no {manager: kubectl-patch, operation: Update} entry owning leaseTransitions:\n%s", describeManaged(l))
	}
}

func TestExplain(t *testing.T) {
	t.Parallel()
	s := shared(t)
	out := s.kubectl(t, "explain", "lease.spec")
	for _, want := range []string{
		"GROUP:      coordination.k8s.io\n",
		"KIND:       Lease\n",
		"VERSION:    v1\n",
		"FIELD: spec <LeaseSpec>\n",
		"DESCRIPTION:\n",
		"FIELDS:\n",
		"  acquireTime\t<string>\n",
		"  holderIdentity\t<string>\n",
		"  leaseDurationSeconds\t<integer>\n",
		"  leaseTransitions\t<integer>\n",
		"  preferredHolder\t<string>\n",
		"  renewTime\t<string>\n",
		"  strategy\t<string>\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain lease.spec lacks %q:\n%s", want, out)
		}
	}

	out = s.kubectl(t, "explain", "lease")
	for _, want := range []string{"KIND:       Lease\n", "  metadata\t<ObjectMeta>\n", "  spec\t<LeaseSpec>\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain lease lacks %q:\n%s", want, out)
		}
	}

	out = s.kubectl(t, "explain", "lease.spec.holderIdentity")
	if !strings.Contains(out, "FIELD: holderIdentity <string>") {
		t.Errorf("kubectl explain lease.spec.holderIdentity:\n%s", out)
	}

	out = s.kubectl(t, "api-resources", "--api-group=coordination.k8s.io")
	if _, rows := tableRows(t, out); rowNamed(rows, 0, "leases") == nil {
		t.Errorf("kubectl api-resources --api-group=coordination.k8s.io lists no leases:\n%s", out)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	manifest := strings.Replace(leaseManifest("my-lease", ns, "a", "  leaseDurationSeconds: 15"),
		"metadata:\n", "metadata:\n  labels:\n    app: demo\n", 1)
	s.kubectlStdin(t, manifest, "apply", "-f", "-")

	out := s.kubectl(t, "describe", "lease", "my-lease", "-n", ns)
	for _, re := range []string{
		`(?m)^Name:\s+my-lease$`,
		`(?m)^Namespace:\s+` + regexp.QuoteMeta(ns) + `$`,
		`(?m)^Labels:\s+app=demo$`,
		`(?m)^API Version:\s+coordination.k8s.io/v1$`,
		`(?m)^Kind:\s+Lease$`,
		`(?m)^\s+Holder Identity:\s+a$`,
		`(?m)^\s+Lease Duration Seconds:\s+15$`,
		`(?m)^\s+UID:\s+\S+$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("kubectl describe lease lacks a line matching %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "last-applied-configuration") {
		t.Errorf("kubectl describe shows the last-applied annotation:\n%s", out)
	}

	// Describe by label lists every match.
	out = s.kubectl(t, "describe", "lease", "-n", ns, "-l", "app=demo")
	if !regexp.MustCompile(`(?m)^Name:\s+my-lease$`).MatchString(out) {
		t.Errorf("kubectl describe lease -l app=demo:\n%s", out)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("my-lease", ns, "a")+"---\n"+leaseManifest("x1", ns, "b")+"---\n"+leaseManifest("x2", ns, "c"), "apply", "-f", "-")

	if got, want := strings.TrimSpace(s.kubectl(t, "delete", "lease", "my-lease", "-n", ns)), `lease.coordination.k8s.io "my-lease" deleted`; got != want {
		t.Errorf("kubectl delete printed %q, want %q", got, want)
	}
	errOut := s.kubectlFails(t, "", "get", "lease", "my-lease", "-n", ns)
	if got, want := strings.TrimSpace(errOut), notFoundLine("leases.coordination.k8s.io", "my-lease"); got != want {
		t.Errorf("get after delete: stderr %q, want %q", got, want)
	}
	errOut = s.kubectlFails(t, "", "delete", "lease", "my-lease", "-n", ns)
	if got, want := strings.TrimSpace(errOut), notFoundLine("leases.coordination.k8s.io", "my-lease"); got != want {
		t.Errorf("second delete: stderr %q, want %q", got, want)
	}
	if out := s.kubectl(t, "delete", "lease", "my-lease", "-n", ns, "--ignore-not-found"); strings.TrimSpace(out) != "" {
		t.Errorf("delete --ignore-not-found printed %q, want nothing", out)
	}

	// --all deletes every lease of the namespace.
	out := s.kubectl(t, "delete", "lease", "--all", "-n", ns)
	for _, want := range []string{`lease.coordination.k8s.io "x1" deleted`, `lease.coordination.k8s.io "x2" deleted`} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl delete lease --all lacks %q:\n%s", want, out)
		}
	}
	out, errOut, err := s.runKubectl(t, "get", "lease", "-n", ns)
	if err != nil || strings.TrimSpace(out) != "" || strings.TrimSpace(errOut) != "No resources found in "+ns+" namespace." {
		t.Errorf("get after delete --all: err %v, stdout %q, stderr %q; want no resources", err, out, errOut)
	}
}

func TestNamespaces(t *testing.T) {
	t.Parallel()
	s := shared(t)
	out := s.kubectl(t, "get", "ns")
	header, rows := tableRows(t, out)
	if want := []string{"NAME", "STATUS", "AGE"}; !slices.Equal(header, want) {
		t.Errorf("kubectl get ns header = %q, want %q", header, want)
	}
	for _, name := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if r := rowNamed(rows, 0, name); len(r) != 3 || r[1] != "Active" {
			t.Errorf("kubectl get ns: row for %s = %q, want [%s Active <age>]\n%s", name, r, name, out)
		}
	}

	// A lease in a namespace that does not exist is refused with 404.
	errOut := s.kubectlFails(t, leaseManifest("l", "no-such-ns", "a"), "create", "-f", "-")
	if !strings.Contains(errOut, `Error from server (NotFound): error when creating "STDIN": namespaces "no-such-ns" not found`) {
		t.Errorf("creating a lease in a missing namespace: stderr %q, want namespaces \"no-such-ns\" not found", errOut)
	}
	errOut = s.kubectlFails(t, "", "get", "ns", "no-such-ns")
	if got, want := strings.TrimSpace(errOut), notFoundLine("namespaces", "no-such-ns"); got != want {
		t.Errorf("get of a missing namespace: %q, want %q", got, want)
	}

	// Only its deletion makes a namespace Terminating: a write of its
	// phase through /status is refused, as kube-apiserver refuses it.
	ns := testNamespace(t, s)
	errOut = s.kubectlFails(t, "", "patch", "ns", ns, "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Terminating"}}`)
	if want := "status.Phase: Invalid value: \"Terminating\": may only be 'Active' if `deletionTimestamp` is empty"; !strings.Contains(errOut, want) {
		t.Errorf("setting a namespace's phase: stderr %q, want %q", errOut, want)
	}
	if got := s.kubectl(t, "get", "ns", ns, "-o", "jsonpath={.status.phase}"); got != "Active" {
		t.Errorf("namespace %s phase %q after the refused write, want Active", ns, got)
	}
}

func TestNamespaceDeletionRemovesLeases(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("inside", ns, "a")+"---\n"+leaseManifest("inside-2", ns, "b"), "apply", "-f", "-")

	if got, want := strings.TrimSpace(s.kubectl(t, "delete", "namespace", ns, "--wait=false")), `namespace "`+ns+`" deleted`; got != want {
		t.Errorf("kubectl delete namespace printed %q, want %q", got, want)
	}
	eventually(t, 90*time.Second, func() error {
		for _, name := range []string{"inside", "inside-2"} {
			if out, errOut, err := s.runKubectl(t, "get", "lease", name, "-n", ns); err == nil || !strings.Contains(errOut, "NotFound") {
				return fmt.Errorf("lease %s/%s still there: %v\n%s%s", ns, name, err, out, errOut)
			}
		}
		if out, errOut, err := s.runKubectl(t, "get", "ns", ns); err == nil || !strings.Contains(errOut, "NotFound") {
			return fmt.Errorf("namespace %s still there: %v\n%s%s", ns, err, out, errOut)
		}
		return nil
	})
	errOut := s.kubectlFails(t, leaseManifest("late", ns, "a"), "create", "-f", "-")
	if !strings.Contains(errOut, fmt.Sprintf("namespaces %q not found", ns)) {
		t.Errorf("creating a lease in the deleted namespace: stderr %q, want NotFound", errOut)
	}
}

// TestNamespaceHeldByFinalizer: a namespace whose content a finalizer
// holds stays Terminating, and kubectl describe namespace says what is
// left and which finalizer holds it, in kube-apiserver's conditions; once
// the finalizer goes, so does the namespace. The namespace's content is
// deleted in the background, as Kubernetes' namespace controller deletes
// it: an owner that asked for a foreground deletion of its dependents
// goes at once, not held by the dependent a finalizer keeps.
func TestNamespaceHeldByFinalizer(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	owner := strings.Replace(leaseManifest("owner", ns, "o"), "metadata:\n", "metadata:\n  finalizers: [foregroundDeletion]\n", 1)
	s.kubectlStdin(t, owner, "apply", "-f", "-")
	uid := s.kubectl(t, "get", "lease", "owner", "-n", ns, "-o", "jsonpath={.metadata.uid}")
	held := strings.Replace(leaseManifest("held", ns, "a"), "metadata:\n", "metadata:\n  finalizers: [example.com/hold]\n"+
		"  ownerReferences: [{apiVersion: coordination.k8s.io/v1, kind: Lease, name: owner, uid: "+uid+", blockOwnerDeletion: true}]\n", 1)
	s.kubectlStdin(t, held+"---\n"+leaseManifest("free", ns, "b"), "apply", "-f", "-")
	s.kubectl(t, "delete", "namespace", ns, "--wait=false")

	want := []string{
		"NamespaceContentRemaining True SomeResourcesRemain Some resources are remaining: leases.coordination.k8s.io has 1 resource instances",
		"NamespaceFinalizersRemaining True SomeFinalizersRemain Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances",
	}
	eventually(t, 30*time.Second, func() error {
		out := s.kubectl(t, "get", "namespace", ns, "-o", `jsonpath={range .status.conditions[*]}{.type} {.status} {.reason} {.message}{"\n"}{end}`)
		for _, w := range want {
			if !strings.Contains(out, w+"\n") {
				return fmt.Errorf("namespace %s conditions:\n%s\nwant a line %q", ns, out, w)
			}
		}
		return nil
	})
	if out := s.kubectl(t, "describe", "namespace", ns); !strings.Contains(out, "Status:       Terminating") || !strings.Contains(out, "SomeFinalizersRemain") ||
		!strings.Contains(out, "No LimitRange resource.") {
		t.Errorf("kubectl describe namespace %s:\n%s", ns, out)
	}

	s.kubectl(t, "patch", "lease", "held", "-n", ns, "--type", "json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
	eventually(t, 30*time.Second, func() error {
		if out, errOut, err := s.runKubectl(t, "get", "ns", ns); err == nil || !strings.Contains(errOut, "NotFound") {
			return fmt.Errorf("namespace %s still there: %v\n%s%s", ns, err, out, errOut)
		}
		return nil
	})
}

// TestNamespaceOfOthersFinalizer: a namespace whose only spec finalizer is
// another's (set through /finalize) is still emptied when deleted, as
// Kubernetes' namespace controller empties it, and goes once that
// finalizer is taken away.
func TestNamespaceOfOthersFinalizer(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("inside", ns, "a"), "apply", "-f", "-")
	finalize := func(finalizers string) {
		t.Helper()
		body := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + ns + `"},"spec":{"finalizers":[` + finalizers + `]}}`
		s.kubectlStdin(t, body, "replace", "--raw", "/api/v1/namespaces/"+ns+"/finalize", "-f", "-")
	}
	finalize(`"example.com/ns"`)
	s.kubectl(t, "delete", "namespace", ns, "--wait=false")
	eventually(t, 30*time.Second, func() error {
		if out, errOut, err := s.runKubectl(t, "get", "lease", "inside", "-n", ns); err == nil || !strings.Contains(errOut, "NotFound") {
			return fmt.Errorf("lease inside still there: %v\n%s%s", err, out, errOut)
		}
		out := s.kubectl(t, "get", "namespace", ns, "-o", `jsonpath={range .status.conditions[*]}{.type}={.status}{"\n"}{end}`)
		if !strings.Contains(out, "NamespaceContentRemaining=False\n") {
			return fmt.Errorf("namespace %s conditions:\n%s\nwant NamespaceContentRemaining=False", ns, out)
		}
		return nil
	})
	finalize("")
	eventually(t, 30*time.Second, func() error {
		if out, errOut, err := s.runKubectl(t, "get", "ns", ns); err == nil || !strings.Contains(errOut, "NotFound") {
			return fmt.Errorf("namespace %s still there: %v\n%s%s", ns, err, out, errOut)
		}
		return nil
	})
}

func TestSelectorsAndPagination(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	var docs []string
	for i := 1; i <= 5; i++ {
		parity := "even"
		if i%2 == 1 {
			parity = "odd"
		}
		m := strings.Replace(leaseManifest(fmt.Sprintf("page-%d", i), ns, fmt.Sprintf("h%d", i)),
			"metadata:\n", fmt.Sprintf("metadata:\n  labels:\n    parity: %s\n    idx: %q\n    run: %s\n", parity, strconv.Itoa(i), ns), 1)
		docs = append(docs, m)
	}
	// Two more in a second namespace, for pages that cross namespaces.
	ns2 := testNamespace(t, s)
	for i := 1; i <= 2; i++ {
		docs = append(docs, strings.Replace(leaseManifest(fmt.Sprintf("other-%d", i), ns2, "o"),
			"metadata:\n", fmt.Sprintf("metadata:\n  labels:\n    run: %s\n", ns), 1))
	}
	s.kubectlStdin(t, strings.Join(docs, "---\n"), "apply", "-f", "-")

	names := func(out string) []string {
		var n []string
		for _, l := range strings.Fields(out) {
			n = append(n, strings.TrimPrefix(l, "lease.coordination.k8s.io/"))
		}
		return n
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-l", "parity=odd"}, []string{"page-1", "page-3", "page-5"}},
		{[]string{"-l", "parity!=odd"}, []string{"page-2", "page-4"}},
		{[]string{"-l", "idx in (2,5)"}, []string{"page-2", "page-5"}},
		{[]string{"-l", "parity=odd,idx notin (1)"}, []string{"page-3", "page-5"}},
		{[]string{"-l", "nolabel"}, nil},
		{[]string{"-l", "!nolabel,parity=even"}, []string{"page-2", "page-4"}},
		{[]string{"--field-selector", "metadata.name=page-3"}, []string{"page-3"}},
		{[]string{"--field-selector", "metadata.name!=page-3"}, []string{"page-1", "page-2", "page-4", "page-5"}},
		{[]string{"--field-selector", "metadata.namespace=" + ns, "-l", "parity=even"}, []string{"page-2", "page-4"}},
		{[]string{"--chunk-size=2"}, []string{"page-1", "page-2", "page-3", "page-4", "page-5"}},
		{[]string{"--chunk-size=2", "-l", "parity=odd"}, []string{"page-1", "page-3", "page-5"}},
	} {
		args := append([]string{"get", "lease", "-n", ns, "-o", "name"}, tc.args...)
		if got := names(s.kubectl(t, args...)); !slices.Equal(got, tc.want) {
			t.Errorf("kubectl %s = %q, want %q", strings.Join(args, " "), got, tc.want)
		}
	}

	// Across namespaces, one lease a page, with a label selector. Lists come
	// in key order, so namespaces sort as strings ("…-10" before "…-8").
	want := []string{ns + "/page-1", ns + "/page-2", ns + "/page-3", ns + "/page-4", ns + "/page-5", ns2 + "/other-1", ns2 + "/other-2"}
	if ns2 < ns {
		want = append(want[5:], want[:5]...)
	}
	for _, chunk := range []string{"1", "2", "500"} {
		out := s.kubectl(t, "get", "lease", "-A", "-l", "run="+ns, "--chunk-size="+chunk, "--no-headers", "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name")
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 {
				got = append(got, f[0]+"/"+f[1])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("get lease -A -l run=%s --chunk-size=%s = %q, want %q", ns, chunk, got, want)
		}
	}

	// A field selector on an unsupported field is refused as by Kubernetes.
	errOut := s.kubectlFails(t, "", "get", "lease", "-n", ns, "--field-selector", "spec.holderIdentity=h1")
	if !strings.Contains(errOut, "BadRequest") || !strings.Contains(errOut, "spec.holderIdentity") {
		t.Errorf("unsupported field selector: stderr %q, want a BadRequest naming the field", errOut)
	}

	// --chunk-size=2 over 5 leases reads 3 pages, following continue tokens,
	// and prints one table.
	out, errOut, err := s.runKubectl(t, "get", "lease", "-n", ns, "--chunk-size=2", "-v=6")
	if err != nil {
		t.Fatalf("%s: %v", describeRun([]string{"get", "lease", "--chunk-size=2", "-v=6"}, out, errOut), err)
	}
	var pages, continued int
	for _, l := range strings.Split(errOut, "\n") {
		if strings.Contains(l, "/namespaces/"+ns+"/leases?") && strings.Contains(l, "limit=2") {
			pages++
			if strings.Contains(l, "continue=") {
				continued++
			}
		}
	}
	if pages != 3 || continued != 2 {
		t.Errorf("--chunk-size=2 over 5 leases made %d list requests (%d with continue), want 3 (2)\n%s", pages, continued, errOut)
	}
	header, rows := tableRows(t, out)
	if !slices.Equal(header, []string{"NAME", "HOLDER", "AGE"}) || len(rows) != 5 {
		t.Errorf("--chunk-size=2 printed header %q and %d rows, want NAME HOLDER AGE and 5 rows:\n%s", header, len(rows), out)
	}
	for i, r := range rows {
		if want := fmt.Sprintf("page-%d", i+1); len(r) != 3 || r[0] != want || r[1] != fmt.Sprintf("h%d", i+1) {
			t.Errorf("--chunk-size=2 row %d = %q, want [%s h%d <age>]", i, r, want, i+1)
		}
	}
}

func TestDryRunServer(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	m := leaseManifest("dry", ns, "a")

	if got, want := strings.TrimSpace(s.kubectlStdin(t, m, "create", "--dry-run=server", "-f", "-")), "lease.coordination.k8s.io/dry created (server dry run)"; got != want {
		t.Errorf("create --dry-run=server printed %q, want %q", got, want)
	}
	if got, want := strings.TrimSpace(s.kubectlStdin(t, m, "apply", "--dry-run=server", "-f", "-")), "lease.coordination.k8s.io/dry created (server dry run)"; got != want {
		t.Errorf("apply --dry-run=server printed %q, want %q", got, want)
	}
	s.kubectlStdin(t, m, "apply", "--server-side", "--dry-run=server", "-f", "-")
	if errOut := s.kubectlFails(t, "", "get", "lease", "dry", "-n", ns); !strings.Contains(errOut, "NotFound") {
		t.Errorf("after dry runs: get lease dry: %q, want NotFound", errOut)
	}

	// A dry-run create still validates.
	errOut := s.kubectlFails(t, leaseManifest("dry-bad", ns, "a", "  leaseDurationSeconds: -5"), "create", "--dry-run=server", "-f", "-")
	if !strings.Contains(errOut, "spec.leaseDurationSeconds: Invalid value: -5") {
		t.Errorf("invalid dry-run create: stderr %q, want the 422 field error", errOut)
	}

	s.kubectlStdin(t, m, "create", "-f", "-")
	before := getLease(t, s, ns, "dry")
	s.kubectl(t, "patch", "lease", "dry", "-n", ns, "--dry-run=server", "--type", "merge", "-p", `{"spec":{"holderIdentity":"b"}}`)
	if got, want := strings.TrimSpace(s.kubectl(t, "delete", "lease", "dry", "-n", ns, "--dry-run=server")), `lease.coordination.k8s.io "dry" deleted (server dry run)`; got != want {
		t.Errorf("delete --dry-run=server printed %q, want %q", got, want)
	}
	s.kubectlStdin(t, leaseManifest("dry", ns, "c"), "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-")
	after := getLease(t, s, ns, "dry")
	if holder(after) != "a" || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("dry runs changed the lease: holder %q rv %s, want a rv %s", holder(after), after.ResourceVersion, before.ResourceVersion)
	}
}

func TestLeaseSpecRoundTrip(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	m := leaseManifest("full", ns, "holder-1",
		"  leaseDurationSeconds: 40",
		`  acquireTime: "2025-01-02T03:04:05.123456Z"`,
		`  renewTime: "2025-01-02T03:04:06.654321Z"`,
		"  leaseTransitions: 3",
		"  strategy: OldestEmulationVersion",
		"  preferredHolder: holder-2")
	path := writeFile(t, "full.yaml", m)
	s.kubectl(t, "apply", "-f", path)

	out := s.kubectl(t, "get", "lease", "full", "-n", ns, "-o", "json")
	var raw struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"holderIdentity":       "holder-1",
		"leaseDurationSeconds": float64(40),
		"acquireTime":          "2025-01-02T03:04:05.123456Z",
		"renewTime":            "2025-01-02T03:04:06.654321Z",
		"leaseTransitions":     float64(3),
		"strategy":             "OldestEmulationVersion",
		"preferredHolder":      "holder-2",
	}
	for k, v := range want {
		if raw.Spec[k] != v {
			t.Errorf("spec.%s = %#v, want %#v", k, raw.Spec[k], v)
		}
	}
	for k := range raw.Spec {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected spec.%s = %#v", k, raw.Spec[k])
		}
	}
	if got, want := strings.TrimSpace(s.kubectl(t, "apply", "-f", path)), "lease.coordination.k8s.io/full unchanged"; got != want {
		t.Errorf("re-applying every field printed %q, want %q", got, want)
	}

	// jsonpath reads each field back too.
	if got := s.kubectl(t, "get", "lease", "full", "-n", ns, "-o", "jsonpath={.spec.renewTime} {.spec.preferredHolder}"); got != "2025-01-02T03:04:06.654321Z holder-2" {
		t.Errorf("jsonpath = %q", got)
	}

	// And the same through server-side apply on a second lease.
	s.kubectlStdin(t, strings.Replace(m, "name: full", "name: full-ssa", 1), "apply", "--server-side", "-f", "-")
	l := getLease(t, s, ns, "full-ssa")
	if l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Equal(&metav1.MicroTime{Time: time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC)}) ||
		l.Spec.RenewTime == nil || l.Spec.RenewTime.UTC().Nanosecond() != 654321000 ||
		l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 3 ||
		l.Spec.Strategy == nil || *l.Spec.Strategy != coordinationv1.OldestEmulationVersion ||
		l.Spec.PreferredHolder == nil || *l.Spec.PreferredHolder != "holder-2" ||
		holder(l) != "holder-1" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("server-side applied spec did not round-trip: %+v", l.Spec)
	}
}

func TestFieldValidation(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	unknown := leaseManifest("bad", ns, "x", "  bogusField: 1")

	// Strict (kubectl's default): refused, nothing created.
	errOut := s.kubectlFails(t, unknown, "apply", "-f", "-")
	if !strings.Contains(errOut, `strict decoding error: unknown field "spec.bogusField"`) {
		t.Errorf("apply with an unknown field: stderr %q, want a strict decoding error", errOut)
	}
	if e := s.kubectlFails(t, "", "get", "lease", "bad", "-n", ns); !strings.Contains(e, "NotFound") {
		t.Errorf("the refused lease exists: %q", e)
	}

	// Warn: created, with a warning, without the field.
	out, errOut, err := s.runKubectlStdin(t, unknown, "apply", "--validate=warn", "-f", "-")
	if err != nil {
		t.Fatalf("%s: %v", describeRun([]string{"apply", "--validate=warn"}, out, errOut), err)
	}
	if !strings.Contains(errOut, `Warning: unknown field "spec.bogusField"`) {
		t.Errorf("apply --validate=warn: stderr %q, want Warning: unknown field \"spec.bogusField\"", errOut)
	}
	if strings.TrimSpace(out) != "lease.coordination.k8s.io/bad created" {
		t.Errorf("apply --validate=warn printed %q", out)
	}
	if l := getLease(t, s, ns, "bad"); holder(l) != "x" {
		t.Errorf("holder = %q, want x", holder(l))
	}
	spec := s.kubectl(t, "get", "lease", "bad", "-n", ns, "-o", "jsonpath={.spec}")
	if strings.Contains(spec, "bogus") {
		t.Errorf("the unknown field was stored: spec = %s", spec)
	}

	// Ignore: created silently.
	out, errOut, err = s.runKubectlStdin(t, strings.Replace(unknown, "name: bad", "name: bad-ignored", 1), "apply", "--validate=false", "-f", "-")
	if err != nil || strings.Contains(errOut, "Warning") {
		t.Errorf("apply --validate=false: err %v, stderr %q; want success without warnings", err, errOut)
	}
	_ = out

	// Strict on update (a PATCH) too.
	errOut = s.kubectlFails(t, strings.Replace(unknown, "holderIdentity: x", "holderIdentity: x2", 1), "apply", "-f", "-")
	if !strings.Contains(errOut, `strict decoding error: unknown field "spec.bogusField"`) {
		t.Errorf("re-apply with an unknown field: stderr %q, want a strict decoding error", errOut)
	}
	if l := getLease(t, s, ns, "bad"); holder(l) != "x" {
		t.Errorf("refused re-apply changed holder to %q", holder(l))
	}

	// Invalid values: 422 with Kubernetes' field errors.
	errOut = s.kubectlFails(t, leaseManifest("inv", ns, "", "  leaseDurationSeconds: 0", "  leaseTransitions: -1"), "create", "-f", "-")
	for _, want := range []string{
		`The Lease "inv" is invalid`,
		"spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
		"spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("invalid lease: stderr lacks %q:\n%s", want, errOut)
		}
	}
	// A body over 3 MiB is refused with 413.
	big := strings.Replace(leaseManifest("big", ns, "a"), "metadata:\n", "metadata:\n  annotations:\n    big: "+strings.Repeat("x", 4<<20)+"\n", 1)
	errOut = s.kubectlFails(t, big, "create", "-f", "-")
	if !strings.Contains(errOut, "Error from server (RequestEntityTooLarge)") || !strings.Contains(errOut, "limit is 3145728") {
		t.Errorf("creating a 4 MiB lease: stderr %.300q, want RequestEntityTooLarge with limit 3145728", errOut)
	}
	if e := s.kubectlFails(t, "", "get", "lease", "big", "-n", ns); !strings.Contains(e, "NotFound") {
		t.Errorf("the refused big lease exists: %q", e)
	}

	errOut = s.kubectlFails(t, leaseManifest("Bad_Name", ns, "a"), "create", "-f", "-")
	if !strings.Contains(errOut, `The Lease "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"`) {
		t.Errorf("invalid name: stderr %q", errOut)
	}
}

func TestRawEndpoints(t *testing.T) {
	t.Parallel()
	s := shared(t)

	out := s.kubectl(t, "get", "--raw", "/version")
	var v version.Info
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("/version: %v\n%s", err, out)
	}
	if v.Major != "1" || !strings.HasPrefix(v.GitVersion, "v1.") || v.GoVersion == "" || v.Platform == "" {
		t.Errorf("/version = %+v, want a Kubernetes-shaped version (major 1, gitVersion v1.*)", v)
	}
	out = s.kubectl(t, "version", "-o", "json")
	if !strings.Contains(out, `"serverVersion"`) || !strings.Contains(out, v.GitVersion) {
		t.Errorf("kubectl version -o json has no serverVersion %s:\n%s", v.GitVersion, out)
	}

	for _, path := range []string{"/readyz", "/livez", "/healthz", "/readyz/etcd", "/livez/ping"} {
		if got := strings.TrimSpace(s.kubectl(t, "get", "--raw", path)); got != "ok" {
			t.Errorf("%s = %q, want ok", path, got)
		}
	}
	// kube-apiserver's checks, each on its line; one left out by name.
	if got, want := s.kubectl(t, "get", "--raw", "/readyz?verbose&exclude=etcd"), "[+]ping ok\n[+]log ok\n[+]etcd excluded: ok\n[+]etcd-readiness ok\n[+]shutdown ok\nreadyz check passed\n"; got != want {
		t.Errorf("/readyz?verbose&exclude=etcd = %q, want %q", got, want)
	}
	if out := s.kubectlFails(t, "", "get", "--raw", "/readyz/informer-sync"); !strings.Contains(out, "NotFound") {
		t.Errorf("/readyz/informer-sync, a check leasehold does not have: %s", out)
	}

	s.kubectl(t, "get", "lease", "-n", "kube-system")
	out = s.kubectl(t, "get", "--raw", "/metrics")
	// The Go collector's CPU estimate and collections, which leasehold
	// bench reads over each measurement, are there too.
	for _, want := range []string{"# TYPE apiserver_request_total counter", "# TYPE apiserver_request_duration_seconds histogram",
		"# TYPE apiserver_request_sli_duration_seconds histogram", "# TYPE apiserver_longrunning_requests gauge",
		"\nauthentication_attempts{result=\"success\"} ", "\nauthorization_attempts_total{result=\"allowed\"} ",
		"\ngo_cpu_classes_gc_total_cpu_seconds_total ", "\ngo_gc_cycles_total_gc_cycles_total ",
		// client-go's, as kube-apiserver and kube-controller-manager serve
		// them: the server's own requests, and its controllers' queues.
		"# TYPE rest_client_requests_total counter", "\nworkqueue_depth{name=\"garbage_collector_attempt_to_delete\"} ",
		"\nworkqueue_adds_total{name=\"namespace\"} "} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// kube-apiserver's labels, as its dashboards and alerts select them
	// (the text form sorts them by name).
	if !regexp.MustCompile(`(?m)^apiserver_request_total\{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="LIST",version="v1"\} [1-9]`).MatchString(out) {
		t.Errorf("/metrics counts no lease lists as kube-apiserver labels them:\n%s", grepLines(out, "apiserver_request_total"))
	}
	// Objects counted once the caches are filled: from the watch cache for
	// leases, from etcd for events, which have none.
	eventually(t, 30*time.Second, func() error {
		out := s.kubectl(t, "get", "--raw", "/metrics")
		for _, re := range []string{`(?m)^apiserver_storage_objects\{resource="leases.coordination.k8s.io"\} [1-9]`, `(?m)^apiserver_storage_objects\{resource="events"\} \d+$`} {
			if !regexp.MustCompile(re).MatchString(out) {
				return fmt.Errorf("/metrics lacks %s:\n%s", re, grepLines(out, "apiserver_storage_objects"))
			}
		}
		return nil
	})
	// The embedded etcd member's own metrics come with leasehold's.
	if !regexp.MustCompile(`(?m)^etcd_disk_wal_fsync_duration_seconds_count [1-9]`).MatchString(out) || !strings.Contains(out, "\netcd_server_has_leader 1\n") {
		t.Errorf("/metrics lacks the embedded etcd's fsyncs or leader:\n%s", grepLines(out, "etcd_"))
	}

	for _, path := range []string{"/api", "/apis", "/apis/coordination.k8s.io/v1", "/api/v1", "/openapi/v2", "/openapi/v3"} {
		if _, errOut, err := s.runKubectl(t, "get", "--raw", path); err != nil {
			t.Errorf("get --raw %s: %v\n%s", path, err, errOut)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestConsistentListAfterOtherResourceWrite lists one resource right after
// a write to another. A list without resourceVersion is a consistent read
// and must answer with the current state at once, whatever was written
// last.
func TestConsistentListAfterOtherResourceWrite(t *testing.T) {
	// Not parallel: a concurrent write to the listed resource would hide a
	// list that waits for one.
	s := shared(t)
	ns := testNamespace(t, s)
	for i := 0; i < 2; i++ {
		// A namespace write, then a lease list.
		s.kubectl(t, "create", "namespace", fmt.Sprintf("%s-x%d", ns, i))
		start := time.Now()
		out, errOut, err := s.runKubectl(t, "get", "--raw", "/apis/coordination.k8s.io/v1/leases")
		if err != nil || !strings.Contains(out, `"kind":"LeaseList"`) {
			t.Errorf("GET /apis/coordination.k8s.io/v1/leases right after creating a namespace: err %v after %v\nstdout: %.200s\nstderr: %s\nwant 200 with a LeaseList",
				err, time.Since(start).Round(time.Millisecond), out, errOut)
		}
		// A lease write, then a namespace list.
		s.kubectlStdin(t, leaseManifest(fmt.Sprintf("l%d", i), ns, "a"), "apply", "-f", "-")
		start = time.Now()
		out, errOut, err = s.runKubectl(t, "get", "--raw", "/api/v1/namespaces")
		if err != nil || !strings.Contains(out, `"kind":"NamespaceList"`) {
			t.Errorf("GET /api/v1/namespaces right after creating a lease: err %v after %v\nstdout: %.200s\nstderr: %s\nwant 200 with a NamespaceList",
				err, time.Since(start).Round(time.Millisecond), out, errOut)
		}
	}
}

func TestMoreVerbs(t *testing.T) {
	t.Parallel()
	s := shared(t)
	ns := testNamespace(t, s)
	m := leaseManifest("v", ns, "a")
	s.kubectlStdin(t, m, "create", "-f", "-")

	t.Run("create twice is AlreadyExists", func(t *testing.T) {
		errOut := s.kubectlFails(t, m, "create", "-f", "-")
		if want := `Error from server (AlreadyExists): error when creating "STDIN": leases.coordination.k8s.io "v" already exists`; strings.TrimSpace(errOut) != want {
			t.Errorf("stderr %q, want %q", errOut, want)
		}
	})

	t.Run("replace", func(t *testing.T) {
		cur := s.kubectl(t, "get", "lease", "v", "-n", ns, "-o", "yaml")
		stale := strings.Replace(m, "metadata:\n", "metadata:\n  resourceVersion: \"1\"\n", 1)
		errOut := s.kubectlFails(t, stale, "replace", "-f", "-")
		if !strings.Contains(errOut, `Error from server (Conflict): error when replacing "STDIN": Operation cannot be fulfilled on leases.coordination.k8s.io "v": the object has been modified; please apply your changes to the latest version and try again`) {
			t.Errorf("replace with a stale resourceVersion: stderr %q, want Kubernetes' Conflict", errOut)
		}
		cur = strings.Replace(cur, "holderIdentity: a", "holderIdentity: r", 1)
		if got, want := strings.TrimSpace(s.kubectlStdin(t, cur, "replace", "-f", "-")), "lease.coordination.k8s.io/v replaced"; got != want {
			t.Errorf("replace printed %q, want %q", got, want)
		}
		if h := holder(getLease(t, s, ns, "v")); h != "r" {
			t.Errorf("after replace holder = %q, want r", h)
		}
	})

	t.Run("label and annotate", func(t *testing.T) {
		if got := strings.TrimSpace(s.kubectl(t, "label", "lease", "v", "-n", ns, "team=blue")); got != "lease.coordination.k8s.io/v labeled" {
			t.Errorf("label printed %q", got)
		}
		if got := strings.TrimSpace(s.kubectl(t, "annotate", "lease", "v", "-n", ns, "note=hi")); got != "lease.coordination.k8s.io/v annotated" {
			t.Errorf("annotate printed %q", got)
		}
		l := getLease(t, s, ns, "v")
		if l.Labels["team"] != "blue" || l.Annotations["note"] != "hi" {
			t.Errorf("labels %v annotations %v, want team=blue and note=hi", l.Labels, l.Annotations)
		}
		header, rows := tableRows(t, s.kubectl(t, "get", "lease", "v", "-n", ns, "--show-labels"))
		if !slices.Equal(header, []string{"NAME", "HOLDER", "AGE", "LABELS"}) || len(rows) != 1 || rows[0][len(rows[0])-1] != "team=blue" {
			t.Errorf("get --show-labels: header %q rows %q", header, rows)
		}
	})

	t.Run("edit", func(t *testing.T) {
		env := []string{"KUBE_EDITOR=sed -i s/holderIdentity:.*/holderIdentity:\\ edited/"}
		out, errOut, err := s.runKubectlEnv(t, env, "", "edit", "lease", "v", "-n", ns)
		if err != nil || strings.TrimSpace(out) != "lease.coordination.k8s.io/v edited" {
			t.Errorf("kubectl edit: err %v stdout %q stderr %q", err, out, errOut)
		}
		if h := holder(getLease(t, s, ns, "v")); h != "edited" {
			t.Errorf("after edit holder = %q, want edited", h)
		}
	})

	t.Run("diff", func(t *testing.T) {
		if _, err := exec.LookPath("diff"); err != nil {
			t.Skip("kubectl diff needs diff on the PATH")
		}
		s.kubectlStdin(t, leaseManifest("dv", ns, "a"), "apply", "-f", "-")
		same := writeFile(t, "same.yaml", leaseManifest("dv", ns, "a"))
		if out, errOut, err := s.runKubectl(t, "diff", "-f", same); err != nil || out != "" {
			t.Errorf("kubectl diff of the applied manifest: err %v stdout %q stderr %q; want no difference", err, out, errOut)
		}
		changed := writeFile(t, "changed.yaml", leaseManifest("dv", ns, "b"))
		for _, args := range [][]string{{"diff", "-f", changed}, {"diff", "--server-side", "-f", changed}} {
			out, errOut, err := s.runKubectl(t, args...)
			var exit interface{ ExitCode() int }
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "-  holderIdentity: a") || !strings.Contains(out, "+  holderIdentity: b") {
				t.Errorf("kubectl %s: err %v stdout %q stderr %q; want exit 1 and the holder's diff", strings.Join(args, " "), err, out, errOut)
			}
		}
		if h := holder(getLease(t, s, ns, "dv")); h != "a" {
			t.Errorf("kubectl diff changed the lease: holder %q", h)
		}
	})

	t.Run("wait", func(t *testing.T) {
		s.kubectlStdin(t, leaseManifest("wt", ns, "a"), "apply", "-f", "-")
		byPath := s.startKubectl(t, "wait", "-n", ns, "--for=jsonpath={.spec.holderIdentity}=b", "lease/wt", "--timeout=90s")
		s.kubectl(t, "patch", "lease", "wt", "-n", ns, "--type", "merge", "-p", `{"spec":{"holderIdentity":"b"}}`)
		byPath.waitLine(t, time.Minute, "condition met", func(f []string) bool {
			return slices.Equal(f, []string{"lease.coordination.k8s.io/wt", "condition", "met"})
		})
		if err := byPath.wait(t, 30*time.Second); err != nil {
			t.Errorf("kubectl wait --for=jsonpath: %v\n%s", err, byPath.stderr.String())
		}

		// kubectl wait --for=delete prints "condition met" when it sees the
		// deletion, and nothing when the lease is already gone by its first
		// look; either way it exits 0.
		gone := s.startKubectl(t, "wait", "-n", ns, "--for=delete", "lease/wt", "--timeout=90s")
		s.kubectl(t, "delete", "lease", "wt", "-n", ns)
		if err := gone.wait(t, time.Minute); err != nil {
			t.Errorf("kubectl wait --for=delete: %v\n%s", err, gone.stderr.String())
		}
		for line := range gone.lines {
			if f := strings.Fields(line); !slices.Equal(f, []string{"lease.coordination.k8s.io/wt", "condition", "met"}) {
				t.Errorf("kubectl wait --for=delete printed %q", line)
			}
		}
	})

	t.Run("delete by label", func(t *testing.T) {
		out := s.kubectl(t, "delete", "lease", "-n", ns, "-l", "team=blue")
		if strings.TrimSpace(out) != `lease.coordination.k8s.io "v" deleted` {
			t.Errorf("delete -l team=blue printed %q", out)
		}
	})

	t.Run("wrong token is 401", func(t *testing.T) {
		data := readFile(t, s.kubeconfig)
		bad := regexp.MustCompile(`(?m)^(\s*token:).*$`).ReplaceAllString(data, "${1} not-the-token")
		if bad == data {
			t.Fatalf("admin.kubeconfig has no token line:\n%s", data)
		}
		path := writeFile(t, "bad.kubeconfig", bad)
		_, errOut, err := s.runKubectlEnv(t, []string{"KUBECONFIG=" + path}, "", "get", "lease", "-n", ns)
		if err == nil || strings.TrimSpace(errOut) != "error: You must be logged in to the server (Unauthorized)" {
			t.Errorf("kubectl with a wrong token: err %v stderr %q, want Unauthorized", err, errOut)
		}
	})
}

// TestImmortalNamespaces: kubectl may not delete default, kube-system or
// kube-public, with Kubernetes' own answer.
func TestImmortalNamespaces(t *testing.T) {
	s := shared(t)
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		_, errOut, err := s.runKubectl(t, "delete", "namespace", ns)
		if want := `Error from server (Forbidden): namespaces "` + ns + `" is forbidden: this namespace may not be deleted`; err == nil || strings.TrimSpace(errOut) != want {
			t.Errorf("kubectl delete namespace %s: %v, %q; want %q", ns, err, errOut, want)
		}
	}
}

// TestResourceQuota: kubectl create quota limits the leases of a
// namespace; kubectl describe quota shows the count; the next lease is
// refused with Kubernetes' words, and a deletion frees its place.
func TestResourceQuota(t *testing.T) {
	s := shared(t)
	ns := testNamespace(t, s)
	s.kubectl(t, "create", "quota", "leases", "-n", ns, "--hard=count/leases.coordination.k8s.io=2")
	manifest := func(name string) string {
		return "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nspec:\n  holderIdentity: me\n"
	}
	eventually(t, 10*time.Second, func() error {
		if out := s.kubectl(t, "get", "quota", "leases", "-n", ns, "-o", "jsonpath={.status.used}"); !strings.Contains(out, `"count/leases.coordination.k8s.io":"0"`) {
			return fmt.Errorf("quota status used %q, want 0 leases counted", out)
		}
		return nil
	})
	for _, name := range []string{"a", "b"} {
		if _, errOut, err := s.runKubectlEnv(t, nil, manifest(name), "create", "-f", "-"); err != nil {
			t.Fatalf("kubectl create lease %s: %v\n%s", name, err, errOut)
		}
	}
	_, errOut, err := s.runKubectlEnv(t, nil, manifest("c"), "create", "-f", "-")
	want := `leases.coordination.k8s.io "c" is forbidden: exceeded quota: leases, requested: count/leases.coordination.k8s.io=1, used: count/leases.coordination.k8s.io=2, limited: count/leases.coordination.k8s.io=2`
	if err == nil || !strings.Contains(errOut, want) {
		t.Errorf("the third lease: %v, %q; want %q", err, errOut, want)
	}
	if out := s.kubectl(t, "describe", "quota", "leases", "-n", ns); !regexp.MustCompile(`(?m)^count/leases\.coordination\.k8s\.io\s+2\s+2$`).MatchString(out) {
		t.Errorf("kubectl describe quota shows no count/leases.coordination.k8s.io used 2 of 2:\n%s", out)
	}
	s.kubectl(t, "delete", "lease", "a", "-n", ns)
	eventually(t, 10*time.Second, func() error {
		_, errOut, err := s.runKubectlEnv(t, nil, manifest("c"), "create", "-f", "-")
		if err != nil {
			return fmt.Errorf("the third lease after a deletion: %v\n%s", err, errOut)
		}
		return nil
	})
}
