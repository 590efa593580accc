package apiserver_test

import (
	"crypto/tls"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestPatchMetadataAsKube: what kube-apiserver's writes do with metadata,
// beyond validation: a status write stores the finalizers and owner
// references it sends; a cluster-scoped object's namespace in a patch is
// dropped; duplicate owner references are dropped with a warning; an empty
// managedFields resets them, and an object whose fields nobody manages
// stays so on an update, even a renewal's.
func TestPatchMetadataAsKube(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	ctx := testContext(t)
	cs := s.Client(t, "")

	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := `{"apiVersion":"v1","kind":"Namespace","name":"default","uid":"u-1"}`
	got, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["example.com/f"],"ownerReferences":[`+owner+`]},"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{"example.com/f"}) || len(got.OwnerReferences) != 1 {
		t.Errorf("a status patch stored finalizers %q and owner references %v, want what it sent", got.Finalizers, got.OwnerReferences)
	}
	if got, err = cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(`{"metadata":{"namespace":"foo","labels":{"a":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a patch giving a Node a namespace: %v, want it dropped", err)
	} else if got.Namespace != "" || got.Labels["a"] != "b" {
		t.Errorf("a patch giving a Node a namespace stored namespace %q, labels %v", got.Namespace, got.Labels)
	}

	// Each subresource has its field manager, as in Kubernetes: a finalize
	// is recorded as one.
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fz"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = append(ns.Spec.Finalizers, "example.com/f")
	if ns, err = cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{FieldManager: "fin"}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ns.ManagedFields, func(e metav1.ManagedFieldsEntry) bool { return e.Manager == "fin" && e.Subresource == "finalize" }) {
		t.Errorf("after a finalize, managedFields %v, want fin's entry for the finalize subresource", ns.ManagedFields)
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	const leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	do := func(method, path, contentType, body string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
		req.Header.Set("Content-Type", contentType)
		resp, out := roundTrip(t, client, req)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %s %s", method, path, resp.Status, out)
		}
		return resp, out
	}
	ref := `{"apiVersion":"v1","kind":"Node","name":"n1","uid":"` + string(node.UID) + `"}`
	resp, _ := do("POST", leases, "application/json", `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"twice","ownerReferences":[`+ref+`,`+ref+`]},"spec":{"holderIdentity":"a"}}`)
	want := `299 - ".metadata.ownerReferences contains duplicate entries; API server dedups owner references in 1.20+, and may reject such requests as early as 1.24; please fix your requests; duplicate UID(s) observed: ` + string(node.UID) + `"`
	if w := resp.Header.Values("Warning"); !slices.Contains(w, want) {
		t.Errorf("warnings %q, want %q", w, want)
	}
	lease, err := cs.CoordinationV1().Leases("default").Get(ctx, "twice", metav1.GetOptions{})
	if err != nil || len(lease.OwnerReferences) != 1 {
		t.Fatalf("stored owner references: %v (%v), want one", lease.OwnerReferences, err)
	}
	resp, _ = do("PATCH", leases+"/twice", "application/merge-patch+json", `{"metadata":{"ownerReferences":[`+ref+`,`+ref+`]}}`)
	if w := resp.Header.Values("Warning"); len(w) != 1 || !strings.Contains(w[0], "contains duplicate entries after mutating admission happens") {
		t.Errorf("a patch's warnings %q, want the one after admission", w)
	}

	if len(lease.ManagedFields) == 0 {
		t.Fatal("a created lease has no managedFields")
	}
	do("PATCH", leases+"/twice", "application/merge-patch+json", `{"metadata":{"managedFields":[]},"spec":{"renewTime":"2026-01-01T00:00:00.000000Z"}}`)
	do("PATCH", leases+"/twice", "application/merge-patch+json", `{"spec":{"renewTime":"2026-01-01T00:00:01.000000Z"}}`)
	if lease, err = cs.CoordinationV1().Leases("default").Get(ctx, "twice", metav1.GetOptions{}); err != nil || len(lease.ManagedFields) != 0 {
		t.Errorf("managedFields after a reset and a renewal: %v (%v), want none", lease.ManagedFields, err)
	}
}
