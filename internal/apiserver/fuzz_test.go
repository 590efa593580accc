package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// The fuzz targets call the server's handler in-process (no network), with
// the admin token, against a real embedded etcd. Writes are dry runs where
// the API allows it, so every input meets the same stored state.

const fuzzLeases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"

// fuzzServer starts a server holding one lease, default/fixed, with every
// LeaseSpec field set.
func fuzzServer(f *testing.F) http.Handler {
	// The default test logger writes through f, which a fuzz function must
	// not use; server errors go to fuzzLog and show in failures.
	log := slog.New(slog.NewTextHandler(&fuzzLog, &slog.HandlerOptions{Level: slog.LevelError}))
	s := apiservertest.Start(f, apiservertest.Options{Logger: log})
	l := fixedLease()
	if _, err := s.Client(f, protobuf).CoordinationV1().Leases("default").Create(testContext(f), l, metav1.CreateOptions{FieldManager: "fuzz-setup"}); err != nil {
		f.Fatal(err)
	}
	return s.API.Handler()
}

func fixedLease() *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC))
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: "fixed", Namespace: "default", Labels: map[string]string{"app": "fuzz"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](10),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](1),
			Strategy: ptr.To(coordinationv1.OldestEmulationVersion), PreferredHolder: ptr.To("b"),
		},
	}
}

// fuzzLog collects what the server logs at level error.
var fuzzLog syncbuf.Buffer

// flushCanceler ends the request once the handler flushes: a watch has then
// sent its initial events and would otherwise stream until it times out.
type flushCanceler struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (w *flushCanceler) Flush() {
	w.ResponseRecorder.Flush()
	w.cancel()
}

// serveFuzz runs one request through h. target must not be parsed by
// net/http's strict request-line rules: fuzzed paths reach the handler as
// they are.
func serveFuzz(h http.Handler, method string, u *url.URL, header http.Header, body []byte) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
	req := (&http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
		Host: "leasehold.test", RemoteAddr: "127.0.0.1:40000", RequestURI: u.RequestURI(),
	}).WithContext(ctx)
	rec := &flushCanceler{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	fuzzLog.Take()
	h.ServeHTTP(rec, req)
	return rec.ResponseRecorder
}

// checkFuzzResponse fails on any 5xx other than kube-apiserver's 504s, for
// a revision the server has not reached or a deadline the request's own
// ?timeout= set, and on an error response that is not a Status with the
// HTTP code. wantLease says a success must carry a Lease.
func checkFuzzResponse(t *testing.T, rec *httptest.ResponseRecorder, wantLease bool, what string) {
	t.Helper()
	code, body := rec.Code, rec.Body.Bytes()
	mt, _, _ := mime.ParseMediaType(rec.Header().Get("Content-Type"))
	decodable := mt == "application/json" || mt == "application/yaml" || mt == protobuf
	var st *metav1.Status
	if code >= 400 && decodable && len(body) > 0 {
		obj, _, err := registry.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		var ok bool
		if st, ok = obj.(*metav1.Status); err != nil || !ok {
			t.Fatalf("%s: HTTP %d with a body that is not a Status (%v): %q", what, code, err, truncate(body))
		}
		if int(st.Code) != code || st.Status != metav1.StatusFailure || st.Reason == "" {
			t.Fatalf("%s: HTTP %d with Status code %d status %q reason %q", what, code, st.Code, st.Status, st.Reason)
		}
	}
	if code >= 500 {
		if code == http.StatusGatewayTimeout && st != nil && st.Reason == metav1.StatusReasonTimeout {
			return
		}
		t.Fatalf("%s: HTTP %d: %s\nserver log:\n%s", what, code, truncate(body), fuzzLog.Take())
	}
	if wantLease && code < 300 {
		var l coordinationv1.Lease
		if err := json.Unmarshal(body, &l); err != nil || l.Kind != "Lease" || l.Name == "" {
			t.Fatalf("%s: HTTP %d with a body that is not a Lease (%v): %s", what, code, err, truncate(body))
		}
	}
}

var fuzzContentTypes = []string{
	"application/json", "application/yaml", protobuf, "",
	"text/plain", "application/json; charset=utf-8", protobuf + ";foo=bar", "application/merge-patch+json",
	"application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1", "multipart/form-data; boundary=x", "application/json;;",
}

// FuzzRequestBody posts (create) or puts (update of default/fixed)
// arbitrary bytes under various content types, as dry runs.
func FuzzRequestBody(f *testing.F) {
	h := fuzzServer(f)
	lease := fixedLease()
	js, _ := json.Marshal(lease)
	pb := encodeProtobuf(f, lease)
	yml := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: fixed\nspec:\n  holderIdentity: y\n  leaseDurationSeconds: 5\n"
	seeds := []struct {
		method, ct uint8
		body       string
	}{
		{0, 0, string(js)}, {1, 0, string(js)}, {0, 1, yml}, {1, 1, yml}, {0, 2, string(pb)}, {1, 2, string(pb)},
		{0, 3, string(js)}, {0, 4, string(js)}, {0, 5, string(js)}, {0, 6, string(pb)}, {0, 7, string(js)},
		{0, 0, ""}, {0, 0, "{}"}, {0, 0, "null"}, {0, 0, "[]"}, {1, 0, `"string"`}, {0, 2, "k8s\x00"}, {0, 2, "k8s\x00\x0a\x02"},
		{0, 0, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"x","namespace":"other"}}`},
		{0, 0, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`},
		{0, 0, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"x"},"spec":{"leaseDurationSeconds":1e400}}`},
		{0, 0, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"x","name":"y"},"spec":{"bogus":1}}`},
		{0, 0, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"generateName":"g-"},"spec":{"renewTime":"not a time"}}`},
		{0, 0, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"x","managedFields":[{"manager":"m","fieldsType":"FieldsV1","fieldsV1":{"f:x":{}}}]}}`},
		{1, 0, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"fixed","resourceVersion":"1"}}`},
		{1, 0, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"fixed","uid":"other"}}`},
		{0, 0, strings.Repeat("[", 10000)},
		{0, 1, "a: &a [*a, *a]\nb: *a\n"},
		{0, 0, "\xff\xfe{"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.ct, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method, ct uint8, body []byte) {
		header := http.Header{"Accept": {"application/json"}}
		if c := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]; c != "" {
			header.Set("Content-Type", c)
		}
		u := &url.URL{Path: fuzzLeases, RawQuery: "dryRun=All"}
		m := http.MethodPost
		if method%2 == 1 {
			m, u.Path = http.MethodPut, fuzzLeases+"/fixed"
		}
		rec := serveFuzz(h, m, u, header, body)
		checkFuzzResponse(t, rec, true, m+" "+header.Get("Content-Type"))
	})
}

// fuzzKinds are the collections FuzzWriteAnyKind creates in, each with a
// well-formed object to seed it.
var fuzzKinds = []struct{ path, seed string }{
	{"/api/v1/nodes", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"spec":{"podCIDR":"10.0.0.0/24","taints":[{"key":"k","effect":"NoSchedule"}]},"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"capacity":{"cpu":"2"}}}`},
	{"/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns"}}`},
	{"/api/v1/namespaces/default/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e"},"involvedObject":{"kind":"Node","name":"n"},"reason":"R","message":"m","type":"Normal"}`},
	{"/apis/events.k8s.io/v1/namespaces/default/events", `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"e"},"eventTime":"2026-01-02T03:04:05.000000Z","reportingController":"example.com/c","reportingInstance":"i","action":"A","reason":"R","type":"Normal","regarding":{"kind":"Node","name":"n"}}`},
	{"/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates", `{"apiVersion":"coordination.k8s.io/v1beta1","kind":"LeaseCandidate","metadata":{"name":"c"},"spec":{"leaseName":"l","binaryVersion":"1.33.0","emulationVersion":"1.33.0","strategy":"OldestEmulationVersion"}}`},
	{"/api/v1/namespaces/default/resourcequotas", `{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"q"},"spec":{"hard":{"count/leases.coordination.k8s.io":"5"}}}`},
	{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"r"},"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["nodes"]}]}`},
	{"/apis/rbac.authorization.k8s.io/v1/clusterroles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"r"},"rules":[{"verbs":["get"],"nonResourceURLs":["/healthz"]}],"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"a":"b"}}]}}`},
	{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"b"},"roleRef":{"kind":"Role","name":"r"},"subjects":[{"kind":"ServiceAccount","name":"sa"}]}`},
	{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"b"},"roleRef":{"kind":"ClusterRole","name":"r"},"subjects":[{"kind":"User","name":"bob"}]}`},
}

// FuzzWriteAnyKind posts arbitrary bodies to the collection of every kind
// but Leases (FuzzRequestBody has those), as dry runs: each kind's decoding,
// defaulting and validation answer a Status for what they refuse, and an
// object of the collection's kind for what they take.
func FuzzWriteAnyKind(f *testing.F) {
	h := fuzzServer(f)
	for i, k := range fuzzKinds {
		f.Add(uint8(i), uint8(0), []byte(k.seed))
	}
	f.Add(uint8(0), uint8(0), []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"spec":{"podCIDRs":["x","10.0.0.0/8","10.0.0.0/8"]},"status":{"capacity":{"memory":"-1"},"addresses":[{"type":""}]}}`))
	f.Add(uint8(3), uint8(0), []byte(`{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"e"},"series":{"count":1}}`))
	f.Add(uint8(8), uint8(1), []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: b\nroleRef: {kind: Role, name: ''}\nsubjects: [{kind: ServiceAccount, name: Bad_Name}]\n"))
	f.Add(uint8(1), uint8(0), []byte(`{"apiVersion":"v1","kind":"Lease","metadata":{"name":"ns"}}`))
	f.Fuzz(func(t *testing.T, kind, ct uint8, body []byte) {
		k := fuzzKinds[int(kind)%len(fuzzKinds)]
		header := http.Header{"Accept": {"application/json"}}
		if c := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]; c != "" {
			header.Set("Content-Type", c)
		}
		rec := serveFuzz(h, http.MethodPost, &url.URL{Path: k.path, RawQuery: "dryRun=All"}, header, body)
		checkFuzzResponse(t, rec, false, "POST "+k.path+" "+header.Get("Content-Type"))
		if rec.Code >= 300 {
			return
		}
		var got metav1.TypeMeta
		var seed metav1.TypeMeta
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || json.Unmarshal([]byte(k.seed), &seed) != nil || got.Kind != seed.Kind {
			t.Fatalf("POST %s: HTTP %d with kind %q (%v), want %s: %s", k.path, rec.Code, got.Kind, err, seed.Kind, truncate(rec.Body.Bytes()))
		}
	})
}

var fuzzPatchTypes = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"}

// FuzzPatch applies arbitrary patches of all four types to default/fixed,
// as dry runs.
func FuzzPatch(f *testing.F) {
	h := fuzzServer(f)
	seeds := []struct {
		pt    uint8
		patch string
	}{
		{0, `[{"op":"replace","path":"/spec/holderIdentity","value":"j"}]`},
		{0, `[{"op":"add","path":"/metadata/labels/x","value":"y"},{"op":"remove","path":"/spec/preferredHolder"}]`},
		{0, `[{"op":"test","path":"/spec/leaseDurationSeconds","value":10},{"op":"copy","from":"/spec","path":"/metadata/annotations"}]`},
		{0, `[{"op":"move","from":"/metadata","path":"/spec/x"}]`},
		{0, `[{"op":"replace","path":"/metadata/name","value":"other"}]`},
		{0, `[{"op":"replace","path":"/kind","value":"Namespace"}]`},
		{0, `[{"op":"remove","path":"/"}]`},
		{0, `[]`},
		{1, `{"spec":{"leaseTransitions":4}}`},
		{1, `{"spec":null}`},
		{1, `{"metadata":{"resourceVersion":"1"}}`},
		{1, `{"metadata":{"uid":"x","creationTimestamp":"bad"}}`},
		{1, `{"apiVersion":"v2","spec":{"leaseDurationSeconds":0}}`},
		{1, `null`},
		{2, `{"metadata":{"labels":{"$patch":"replace","a":"b"}}}`},
		{2, `{"metadata":{"finalizers":["example.com/f"],"$setElementOrder/finalizers":["example.com/f"]}}`},
		{2, `{"$patch":"delete"}`},
		{2, `{"metadata":{"ownerReferences":[{"$patch":"delete","uid":"u"}]}}`},
		{2, `{"spec":{"strategy":"Newest"}}`},
		{3, "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: fixed\nspec:\n  holderIdentity: applied\n"},
		{3, "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: other\n"},
		{3, "apiVersion: coordination.k8s.io/v1\nkind: Lease\nspec:\n  unknown: 1\n"},
		{3, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"managedFields":[{"manager":"x"}]}}`},
		{3, "- a\n- b\n"},
		{3, ""},
		// What the patch itself is checked for: duplicate fields, unknown
		// keys of JSON patch operations, bodies that are not JSON.
		{0, `[{"op":"replace","path":"/spec/holderIdentity","value":"j","bogus":1}]`},
		{1, `{"spec":{"holderIdentity":"a","holderIdentity":"b"}}`},
		{2, `{"spec":{"holderIdentity":"a","holderIdentity":"b"},"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"n","uid":"u"},{"apiVersion":"v1","kind":"Node","name":"n","uid":"u"}]}}`},
		{1, `{bad`},
		{3, "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: fixed\n  uid: abc\nspec:\n  holderIdentity: a\n  holderIdentity: b\n"},
		{3, "apiVersion: v1\nkind: Node\n"},
	}
	for _, s := range seeds {
		f.Add(s.pt, []byte(s.patch))
	}
	f.Add(uint8(1), []byte(`{"metadata":{"uid":"x"},"spec":{"renewTime":"2026-01-01T00:00:00.000000Z"}}`))
	f.Add(uint8(2), []byte(`{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}}`))
	var stored metav1.ObjectMeta
	rec := serveFuzz(h, http.MethodGet, &url.URL{Path: fuzzLeases + "/fixed"}, http.Header{"Accept": {"application/json"}}, nil)
	if err := json.Unmarshal(rec.Body.Bytes(), &struct{ Metadata *metav1.ObjectMeta }{&stored}); err != nil || stored.UID == "" {
		f.Fatalf("reading default/fixed: %v: %s", err, rec.Body)
	}
	f.Fuzz(func(t *testing.T, pt uint8, patch []byte) {
		ct := fuzzPatchTypes[int(pt)%len(fuzzPatchTypes)]
		q := "dryRun=All&fieldManager=fuzz"
		if ct == "application/apply-patch+yaml" {
			q += "&force=true"
		}
		header := http.Header{"Accept": {"application/json"}, "Content-Type": {ct}}
		rec := serveFuzz(h, http.MethodPatch, &url.URL{Path: fuzzLeases + "/fixed", RawQuery: q}, header, patch)
		checkFuzzResponse(t, rec, true, "PATCH "+ct)
		if rec.Code >= 300 {
			return
		}
		// What no patch may change, as kube-apiserver has it.
		var got coordinationv1.Lease
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if m := got.ObjectMeta; m.UID != stored.UID || !m.CreationTimestamp.Equal(&stored.CreationTimestamp) || m.DeletionTimestamp != nil ||
			m.DeletionGracePeriodSeconds != nil || m.Name != stored.Name || m.Namespace != stored.Namespace {
			t.Fatalf("PATCH %s changed what it may not: uid %q, created %v, deletion %v %v, %s/%s; stored uid %q, created %v",
				ct, m.UID, m.CreationTimestamp, m.DeletionTimestamp, m.DeletionGracePeriodSeconds, m.Namespace, m.Name, stored.UID, stored.CreationTimestamp)
		}
	})
}

var (
	fuzzMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "BREW"}
	fuzzAccepts = []string{
		"", "application/json", "application/yaml", protobuf, "*/*", "text/html",
		"application/json;as=Table;v=v1;g=meta.k8s.io", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
		"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", "application/yaml;as=Table;v=v1;g=meta.k8s.io",
		"application/json;as=Table;v=v1beta1;g=meta.k8s.io", protobuf + ";as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io",
		"application/json;as=PartialObjectMetadata;v=v1beta1;g=meta.k8s.io",
	}
)

// FuzzRequestPath sends arbitrary paths, queries, methods and Accept
// headers without a body.
func FuzzRequestPath(f *testing.F) {
	h := fuzzServer(f)
	paths := []string{
		"/", "/api", "/apis", "/api/v1", "/apis/coordination.k8s.io", "/apis/coordination.k8s.io/v1",
		fuzzLeases, fuzzLeases + "/fixed", fuzzLeases + "/fixed/status", "/apis/coordination.k8s.io/v1/leases",
		"/api/v1/namespaces", "/api/v1/namespaces/default", "/api/v1/namespaces/default/status", "/api/v1/namespaces/default/finalize",
		"/api/v1/watch/namespaces", "/apis/coordination.k8s.io/v1/watch/namespaces/default/leases/fixed",
		"/openapi/v2", "/openapi/v3", "/openapi/v3/apis/coordination.k8s.io/v1", "/version", "/healthz", "/livez", "/readyz", "/metrics",
		"//", "/apis/coordination.k8s.io/v1/namespaces//leases", "/apis/../api", "/api/v1/namespaces/default/leases",
		"/apis/coordination.k8s.io/v1/namespaces/default/leases/fixed/a/b/c", "/apis/x/y/z/w",
	}
	queries := []string{
		"", "watch=true", "watch=1&resourceVersion=0", "labelSelector=app%3Dfuzz", "fieldSelector=metadata.name%3Dfixed",
		"limit=1", "limit=-1&continue=abc", "resourceVersion=0", "timeoutSeconds=1&watch=true", "pretty=true",
		"allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&watch=true", "includeObject=Object",
		"labelSelector=%21%21", "fieldSelector=spec.x%3D1", "dryRun=All", "propagationPolicy=Orphan&dryRun=All", "%zz",
		"dryRun=All&dryRun=Some", "dryRun=%FF%FE",
	}
	for i, p := range paths {
		f.Add(uint8(i), uint8(i), p, queries[i%len(queries)])
	}
	for i, q := range queries {
		f.Add(uint8(0), uint8(i), fuzzLeases, q)
	}
	f.Fuzz(func(t *testing.T, method, accept uint8, path, query string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		m := fuzzMethods[int(method)%len(fuzzMethods)]
		header := http.Header{}
		if a := fuzzAccepts[int(accept)%len(fuzzAccepts)]; a != "" {
			header.Set("Accept", a)
		}
		if m == "DELETE" || m == "POST" || m == "PUT" || m == "PATCH" {
			// Writes stay dry runs so inputs do not change what later ones see.
			query = "dryRun=All&" + query
		}
		rec := serveFuzz(h, m, &url.URL{Path: path, RawQuery: query}, header, nil)
		checkFuzzResponse(t, rec, false, m+" "+path+"?"+query)
	})
}

func encodeProtobuf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), protobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	b, err := runtime.Encode(registry.Codecs.EncoderForVersion(info.Serializer, coordinationv1.SchemeGroupVersion), obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
