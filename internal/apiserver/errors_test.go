package apiserver_test

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/store"
)

// errCase is one bad request and the Status kube-apiserver answers it with.
type errCase struct {
	name        string
	method      string
	path        string // below the server URL, query included
	contentType string
	accept      string // default application/json
	body        string
	token       *string // nil: the admin token; "": no Authorization header
	// watch: the request opens a watch stream whose first event is an
	// ERROR carrying the Status (the HTTP code is then 200).
	watch bool

	code   int32
	reason metav1.StatusReason
	// message, when set, is compared exactly; contains and excludes are
	// substrings the message must have or lack.
	message  string
	contains []string
	excludes []string
	// details, when set, is compared with the Status details (causes too).
	details *metav1.StatusDetails
}

// TestErrorStatus sends every kind of bad request of the API over raw HTTPS
// and checks that each is answered with the metav1.Status kube-apiserver
// gives (kind, apiVersion, status, code, reason, message, details) and that
// no stored data changed: etcd's revision and every stored object are the
// same before and after.
func TestErrorStatus(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Store: store.Config{WatchCacheSize: 8}})
	ctx := testContext(t)
	leases := s.Client(t, protobuf).CoordinationV1().Leases("default")
	existing, err := leases.Create(ctx, newLease("existing", "h"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := existing.ResourceVersion
	existing.Spec.HolderIdentity = ptr.To("h2")
	if existing, err = leases.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A revision that has left both the watch cache and etcd.
	churn, err := leases.Create(ctx, newLease("churn", "c0"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	compacted := churn.ResourceVersion
	for i := range 12 {
		churn.Spec.HolderIdentity = ptr.To(fmt.Sprint("c", i+1))
		if churn, err = leases.Update(ctx, churn, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Store.Compact(ctx, parseRV(t, churn.ResourceVersion)); err != nil {
		t.Fatal(err)
	}

	const base = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	leaseGR := func(name string) *metav1.StatusDetails {
		return &metav1.StatusDetails{Name: name, Group: "coordination.k8s.io", Kind: "leases"}
	}
	valid := leaseBody("new-lease", "", `"holderIdentity":"x"`)
	cases := []errCase{
		// 400: bodies the server cannot read.
		{name: "malformed JSON on create", method: "POST", path: base, contentType: "application/json", body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",`,
			code: 400, reason: metav1.StatusReasonBadRequest,
			contains: []string{`the object provided is unrecognized (must be of type Lease): `, ` ({"apiVersion":"coordination.k8 ...)`}},
		{name: "a field of the wrong type on create", method: "POST", path: base, contentType: "application/json", body: leaseBody("wrongtype", "", `"leaseDurationSeconds":"10"`),
			code: 400, reason: metav1.StatusReasonBadRequest,
			contains: []string{`Lease in version "v1" cannot be handled as a Lease: json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32`}},
		{name: "not protobuf", method: "POST", path: base, contentType: protobuf, body: "nonsense",
			code: 400, reason: metav1.StatusReasonBadRequest,
			contains: []string{`the object provided is unrecognized (must be of type Lease): `, ` (6e6f6e73656e7365)`}},
		{name: "malformed JSON on update", method: "PUT", path: base + "/existing", contentType: "application/json", body: `{"kind":`,
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "malformed YAML on create", method: "POST", path: base, contentType: "application/yaml", body: "kind: Lease\n  : : [",
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "malformed protobuf on create", method: "POST", path: base, contentType: protobuf, body: "k8s\x00\x0a\xff\xff",
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "malformed JSON patch", method: "PATCH", path: base + "/existing", contentType: "application/json-patch+json", body: `{"op":`,
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "malformed merge patch", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json", body: `{"spec":`,
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "malformed apply patch", method: "PATCH", path: base + "/existing?fieldManager=m", contentType: "application/apply-patch+yaml", body: "kind: [",
			code: 400, reason: metav1.StatusReasonBadRequest},

		// 400: kind, apiVersion, namespace or name not matching the URL.
		{name: "kind not matching the URL", method: "POST", path: base, contentType: "application/json",
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Namespace","metadata":{"name":"k"}}`,
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "apiVersion not matching the URL", method: "POST", path: base, contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Lease","metadata":{"name":"k"}}`,
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "apiVersion not matching the URL on apply", method: "PATCH", path: base + "/existing?fieldManager=m", contentType: "application/apply-patch+yaml",
			body: "apiVersion: v1\nkind: Lease\nmetadata:\n  name: existing\n",
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "namespace in body differs on create", method: "POST", path: base, contentType: "application/json",
			body: leaseBody("n", "kube-system", ""),
			code: 400, reason: metav1.StatusReasonBadRequest, message: "the namespace of the provided object does not match the namespace sent on the request"},
		{name: "namespace in body differs on update", method: "PUT", path: base + "/existing", contentType: "application/json",
			body: leaseBody("existing", "kube-system", ""),
			code: 400, reason: metav1.StatusReasonBadRequest, message: "the namespace of the provided object does not match the namespace sent on the request"},
		{name: "name in body differs on update", method: "PUT", path: base + "/existing", contentType: "application/json",
			body: leaseBody("other", "", ""),
			code: 400, reason: metav1.StatusReasonBadRequest, message: "the name of the object (other) does not match the name on the URL (existing)"},

		{name: "timeout that is not a duration", method: "GET", path: base + "?timeout=abc",
			code: 400, reason: metav1.StatusReasonBadRequest, message: `invalid timeout specified in the request URL - time: invalid duration "abc"`},

		// 415.
		{name: "text/plain on create", method: "POST", path: base, contentType: "text/plain", body: valid,
			code: 415, reason: metav1.StatusReasonUnsupportedMediaType,
			contains: []string{"the body of the request was in an unknown format - accepted media types include: ", "application/json", "application/yaml", protobuf}, excludes: []string{"text/plain"}},
		// A patch's media type is matched exactly, as kube-apiserver's
		// router matches it, and refused in its router's words.
		{name: "application/xml on patch", method: "PATCH", path: base + "/existing", contentType: "application/xml", body: `<spec/>`,
			code: 415, reason: metav1.StatusReasonUnsupportedMediaType, message: "415: Unsupported Media Type"},
		{name: "application/json on patch", method: "PATCH", path: base + "/existing", contentType: "application/json", body: `{}`,
			code: 415, reason: metav1.StatusReasonUnsupportedMediaType, message: "415: Unsupported Media Type"},
		{name: "a patch type in capitals", method: "PATCH", path: base + "/existing", contentType: "Application/Merge-Patch+JSON", body: `{}`,
			code: 415, reason: metav1.StatusReasonUnsupportedMediaType, message: "415: Unsupported Media Type"},
		{name: "a merge patch that is not JSON, of a missing object", method: "PATCH", path: base + "/missing", contentType: "application/merge-patch+json", body: `{bad`,
			code: 400, reason: metav1.StatusReasonBadRequest, message: "invalid JSON patch"},
		{name: "an apply body of another kind", method: "PATCH", path: base + "/existing?fieldManager=m", contentType: "application/apply-patch+yaml",
			body: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"existing"}}`,
			code: 400, reason: metav1.StatusReasonBadRequest, message: "invalid object type: /v1, Kind=Node"},

		// 413.
		{name: "body over 3 MiB", method: "POST", path: base, contentType: "application/json",
			body: leaseBody("huge", "", `"holderIdentity":"`+strings.Repeat("x", 3<<20)+`"`),
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge, message: "Request entity too large: limit is 3145728"},
		{name: "patch over 3 MiB", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"spec":{"holderIdentity":"` + strings.Repeat("x", 3<<20) + `"}}`,
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge},

		// 401.
		{name: "missing token", method: "GET", path: base, token: ptr.To(""),
			code: 401, reason: metav1.StatusReasonUnauthorized, message: "Unauthorized"},
		{name: "wrong token", method: "GET", path: base + "/existing", token: ptr.To("not-the-token"),
			code: 401, reason: metav1.StatusReasonUnauthorized, message: "Unauthorized"},
		{name: "wrong token on create", method: "POST", path: base, contentType: "application/json", body: valid, token: ptr.To("not-the-token"),
			code: 401, reason: metav1.StatusReasonUnauthorized, message: "Unauthorized"},

		// 404.
		{name: "get missing lease", method: "GET", path: base + "/missing",
			code: 404, reason: metav1.StatusReasonNotFound, message: `leases.coordination.k8s.io "missing" not found`, details: leaseGR("missing")},
		// A PUT of a missing Lease creates it, as in kube-apiserver; not of
		// a missing Node.
		{name: "update missing node", method: "PUT", path: "/api/v1/nodes/missing", contentType: "application/json", body: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"missing"}}`,
			code: 404, reason: metav1.StatusReasonNotFound, message: `nodes "missing" not found`, details: &metav1.StatusDetails{Name: "missing", Kind: "nodes"}},
		{name: "merge patch of missing lease", method: "PATCH", path: base + "/missing", contentType: "application/merge-patch+json", body: `{}`,
			code: 404, reason: metav1.StatusReasonNotFound, message: `leases.coordination.k8s.io "missing" not found`, details: leaseGR("missing")},
		{name: "delete missing lease", method: "DELETE", path: base + "/missing",
			code: 404, reason: metav1.StatusReasonNotFound, message: `leases.coordination.k8s.io "missing" not found`, details: leaseGR("missing")},
		{name: "create in missing namespace", method: "POST", path: "/apis/coordination.k8s.io/v1/namespaces/nope/leases", contentType: "application/json", body: valid,
			code: 404, reason: metav1.StatusReasonNotFound, message: `namespaces "nope" not found`, details: &metav1.StatusDetails{Name: "nope", Kind: "namespaces"}},
		{name: "unknown resource", method: "GET", path: "/apis/coordination.k8s.io/v1/namespaces/default/widgets",
			code: 404, reason: metav1.StatusReasonNotFound, message: "the server could not find the requested resource"},
		{name: "unknown group version", method: "GET", path: "/apis/coordination.k8s.io/v9/namespaces/default/leases",
			code: 404, reason: metav1.StatusReasonNotFound, message: "the server could not find the requested resource"},

		// 405.
		{name: "create on an object path", method: "POST", path: base + "/existing", contentType: "application/json", body: leaseBody("via-post", "", ""),
			code: 405, reason: metav1.StatusReasonMethodNotAllowed, message: "the server does not allow this method on the requested resource"},
		// HEAD is authorized as a get, then not routed, as in kube-apiserver.
		{name: "HEAD of a lease", method: "HEAD", path: base + "/existing", code: 405},
		{name: "HEAD of the leases", method: "HEAD", path: base, code: 405},
		{name: "delete of every namespace", method: "DELETE", path: "/api/v1/namespaces",
			code: 405, reason: metav1.StatusReasonMethodNotAllowed, message: "the server does not allow this method on the requested resource"},
		// Of every namespace, leases are listed and watched, nothing else.
		{name: "delete of the leases of every namespace", method: "DELETE", path: "/apis/coordination.k8s.io/v1/leases",
			code: 405, reason: metav1.StatusReasonMethodNotAllowed, message: "the server does not allow this method on the requested resource"},
		{name: "create in no namespace", method: "POST", path: "/apis/coordination.k8s.io/v1/leases", contentType: "application/json", body: leaseBody("nowhere", "", ""),
			code: 405, reason: metav1.StatusReasonMethodNotAllowed, message: "the server does not allow this method on the requested resource"},

		// 406: Table and PartialObjectMetadata exist only in JSON and YAML.
		{name: "table in protobuf", method: "GET", path: base, accept: protobuf + ";as=Table;v=v1;g=meta.k8s.io",
			code: 406, reason: metav1.StatusReasonNotAcceptable},
		{name: "unknown media type", method: "GET", path: base + "/existing", accept: "text/html",
			code: 406, reason: metav1.StatusReasonNotAcceptable},

		// 409.
		{name: "create existing", method: "POST", path: base, contentType: "application/json", body: leaseBody("existing", "", `"holderIdentity":"other"`),
			code: 409, reason: metav1.StatusReasonAlreadyExists, message: `leases.coordination.k8s.io "existing" already exists`, details: leaseGR("existing")},
		{name: "update with stale resourceVersion", method: "PUT", path: base + "/existing", contentType: "application/json",
			body: leaseBodyRV("existing", stale, `"holderIdentity":"late"`),
			code: 409, reason: metav1.StatusReasonConflict, details: leaseGR("existing"),
			message: `Operation cannot be fulfilled on leases.coordination.k8s.io "existing": the object has been modified; please apply your changes to the latest version and try again`},
		{name: "patch with stale resourceVersion", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"metadata":{"resourceVersion":"` + stale + `"},"spec":{"holderIdentity":"late"}}`,
			code: 409, reason: metav1.StatusReasonConflict, details: leaseGR("existing"),
			message: `Operation cannot be fulfilled on leases.coordination.k8s.io "existing": the object has been modified; please apply your changes to the latest version and try again`},
		{name: "apply with stale resourceVersion", method: "PATCH", path: base + "/existing?fieldManager=m&force=true", contentType: "application/apply-patch+yaml",
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"existing","resourceVersion":"` + stale + `"},"spec":{"holderIdentity":"late"}}`,
			code: 409, reason: metav1.StatusReasonConflict, details: leaseGR("existing"),
			message: `Operation cannot be fulfilled on leases.coordination.k8s.io "existing": the object has been modified; please apply your changes to the latest version and try again`},
		{name: "delete with wrong uid precondition", method: "DELETE", path: base + "/existing", contentType: "application/json",
			body: `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}`,
			code: 409, reason: metav1.StatusReasonConflict, details: &metav1.StatusDetails{Name: "existing", Group: "coordination.k8s.io", Kind: "Lease"},
			contains: []string{`Operation cannot be fulfilled on Lease.coordination.k8s.io "existing": the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match the UID in record (`,
				"). The object might have been deleted and then recreated"}},
		{name: "delete with stale resourceVersion precondition", method: "DELETE", path: base + "/existing", contentType: "application/json",
			body: `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"` + stale + `"}}`,
			code: 409, reason: metav1.StatusReasonConflict, details: &metav1.StatusDetails{Name: "existing", Group: "coordination.k8s.io", Kind: "Lease"},
			contains: []string{"the ResourceVersion in the precondition (" + stale + ") does not match the ResourceVersion in record (", "). The object might have been modified"}},

		{name: "update with another uid", method: "PUT", path: base + "/existing", contentType: "application/json",
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"existing","uid":"00000000-0000-0000-0000-000000000000"},"spec":{"holderIdentity":"late"}}`,
			code: 409, reason: metav1.StatusReasonConflict, details: leaseGR("existing"), contains: []string{"Precondition failed: UID in precondition: 00000000-0000-0000-0000-000000000000, UID in object meta: "}},

		// 504: the client's deadline passed; nothing was stored.
		{name: "create past its timeout", method: "POST", path: base + "?timeout=1ns", contentType: "application/json", body: leaseBody("late", "", ""),
			code: 504, reason: metav1.StatusReasonTimeout, message: "Timeout: request did not complete within the allotted timeout"},

		// 422.
		{name: "patch of the uid", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"metadata":{"uid":"00000000-0000-0000-0000-000000000000"}}`,
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `Lease.coordination.k8s.io "existing" is invalid: metadata.uid: Invalid value: "00000000-0000-0000-0000-000000000000": field is immutable`},
		{name: "patch of the uid beside a renewal", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"metadata":{"uid":"00000000-0000-0000-0000-000000000000"},"spec":{"renewTime":"2026-01-01T00:00:00.000000Z"}}`,
			code: 422, reason: metav1.StatusReasonInvalid, contains: []string{"metadata.uid: Invalid value"}},
		{name: "patch that sets a deletionTimestamp", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}}`,
			code: 422, reason: metav1.StatusReasonInvalid, contains: []string{`metadata.deletionTimestamp: Invalid value: "2026-01-01T00:00:00Z": field is immutable`}},
		{name: "patch that sets a deletionGracePeriodSeconds", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"metadata":{"deletionGracePeriodSeconds":30}}`,
			code: 422, reason: metav1.StatusReasonInvalid, contains: []string{"metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable"}},
		{name: "apply of another uid", method: "PATCH", path: base + "/existing?fieldManager=m&force=true", contentType: "application/apply-patch+yaml",
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"existing","uid":"00000000-0000-0000-0000-000000000000"}}`,
			code: 422, reason: metav1.StatusReasonInvalid, contains: []string{"metadata.uid: Invalid value"}},
		{name: "delete with an unknown propagation policy", method: "DELETE", path: base + "/existing?propagationPolicy=Bogus",
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Bogus": supported values: "Foreground", "Background", "Orphan", "nil"`,
			details: &metav1.StatusDetails{Group: "meta.k8s.io", Kind: "DeleteOptions", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Bogus": supported values: "Foreground", "Background", "Orphan", "nil"`, Field: "propagationPolicy"}}}},
		{name: "delete orphaning and with a propagation policy", method: "DELETE", path: base + "/existing", contentType: "application/json",
			body: `{"kind":"DeleteOptions","apiVersion":"v1","orphanDependents":true,"propagationPolicy":"Background"}`,
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Background": orphanDependents and deletionPropagation cannot be both set`},
		// Write options, checked by apimachinery's validation.
		{name: "a field manager with an unprintable character", method: "POST", path: base + "?fieldManager=a%01b", contentType: "application/json", body: valid,
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `CreateOptions.meta.k8s.io "" is invalid: fieldManager: Invalid value: "a\x01b": invalid character U+0001 (at position 1)`},
		{name: "two unknown dry runs", method: "POST", path: base + "?dryRun=foo&dryRun=bar", contentType: "application/json", body: valid,
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["foo","bar"]: supported values: "All"`},
		// Apply creates only an object it names, and never one of a uid.
		{name: "apply creating an object of a uid", method: "PATCH", path: base + "/of-a-uid?fieldManager=m", contentType: "application/apply-patch+yaml",
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"of-a-uid","uid":"abc"}}`,
			code: 409, reason: metav1.StatusReasonConflict,
			message: `Operation cannot be fulfilled on leases.coordination.k8s.io "of-a-uid": uid mismatch: the provided object specified uid abc, and no existing object was found`},
		{name: "apply creating an object it does not name", method: "PATCH", path: base + "/noname?fieldManager=m", contentType: "application/apply-patch+yaml",
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease"}`,
			code: 400, reason: metav1.StatusReasonBadRequest,
			message: `the name of the object (noname based on URL) was undeterminable: name must be provided`},
		{name: "a JSON patch of too many operations", method: "PATCH", path: base + "/existing", contentType: "application/json-patch+json",
			body: "[" + strings.Repeat(`{"op":"test","path":"/kind","value":"Lease"},`, 10000) + `{"op":"test","path":"/kind","value":"Lease"}]`,
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge,
			message: `Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001`},
		{name: "a patch of a collection", method: "PATCH", path: base, contentType: "application/merge-patch+json", body: `{}`,
			code: 405, reason: metav1.StatusReasonMethodNotAllowed},
		{name: "a patch that leaves the object undecodable", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"spec":{"leaseDurationSeconds":"x"}}`,
			code: 422, reason: metav1.StatusReasonInvalid, contains: []string{`patch: Invalid value: "{`, `cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32`}},
		// Every update's metadata is checked as a create's is, finalizers
		// included.
		{name: "patch of conflicting finalizers", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"metadata":{"finalizers":["orphan","foregroundDeletion"]}}`,
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `Lease.coordination.k8s.io "existing" is invalid: metadata.finalizers: Invalid value: ["orphan","foregroundDeletion"]: finalizer orphan and foregroundDeletion cannot be both set`},
		// A create without a name is told of its other errors too.
		{name: "create without a name", method: "POST", path: base, contentType: "application/json",
			body: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"labels":{"a b":"c"}},"spec":{"leaseDurationSeconds":-1}}`,
			code: 422, reason: metav1.StatusReasonInvalid,
			contains: []string{`metadata.name: Required value: name or generateName is required`, `metadata.labels: Invalid value: "a b"`, `spec.leaseDurationSeconds: Invalid value: -1`}},
		{name: "invalid lease on create", method: "POST", path: base, contentType: "application/json", body: leaseBody("bad", "", `"leaseDurationSeconds":0`),
			code: 422, reason: metav1.StatusReasonInvalid,
			message: `Lease.coordination.k8s.io "bad" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0`,
			details: &metav1.StatusDetails{Name: "bad", Group: "coordination.k8s.io", Kind: "Lease", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: 0: must be greater than 0", Field: "spec.leaseDurationSeconds"}}}},
		// As kube-apiserver: a Lease is replaced only at the version named.
		{name: "update of a lease without a resourceVersion", method: "PUT", path: base + "/existing", contentType: "application/json",
			body: leaseBody("existing", "", `"holderIdentity":"h3"`), code: 422, reason: metav1.StatusReasonInvalid,
			message: `leases.coordination.k8s.io "existing" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update`,
			details: &metav1.StatusDetails{Name: "existing", Group: "coordination.k8s.io", Kind: "leases", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: 0: must be specified for an update", Field: "metadata.resourceVersion"}}}},
		{name: "invalid lease on update", method: "PUT", path: base + "/existing", contentType: "application/json",
			body: strings.Replace(leaseBody("existing", "", `"leaseTransitions":-1,"preferredHolder":"p"`),
				`"name":"existing"`, `"name":"existing","resourceVersion":"`+existing.ResourceVersion+`"`, 1),
			code: 422, reason: metav1.StatusReasonInvalid,
			message: "Lease.coordination.k8s.io \"existing\" is invalid: [spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0, spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined]",
			details: &metav1.StatusDetails{Name: "existing", Group: "coordination.k8s.io", Kind: "Lease", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: -1: must be greater than or equal to 0", Field: "spec.leaseTransitions"},
				{Type: metav1.CauseTypeForbidden, Message: "Forbidden: may only be specified if `strategy` is defined", Field: "spec.preferredHolder"}}}},
		{name: "invalid lease by patch", method: "PATCH", path: base + "/existing", contentType: "application/merge-patch+json",
			body: `{"spec":{"strategy":"Newest"}}`,
			code: 422, reason: metav1.StatusReasonInvalid,
			details: &metav1.StatusDetails{Name: "existing", Group: "coordination.k8s.io", Kind: "Lease", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Newest": supported values: "OldestEmulationVersion"`, Field: "spec.strategy.strategy"}}}},
		{name: "invalid name", method: "POST", path: base, contentType: "application/json", body: leaseBody("Not_A_Name", "", ""),
			code: 422, reason: metav1.StatusReasonInvalid,
			details: &metav1.StatusDetails{Name: "Not_A_Name", Group: "coordination.k8s.io", Kind: "Lease", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Field: "metadata.name",
					Message: `Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}}}},
		{name: "failed JSON patch test", method: "PATCH", path: base + "/existing", contentType: "application/json-patch+json",
			body: `[{"op":"test","path":"/spec/holderIdentity","value":"nope"}]`,
			code: 422, reason: metav1.StatusReasonInvalid,
			details: &metav1.StatusDetails{Name: "existing", Group: "coordination.k8s.io", Kind: "leases", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Field: "patch", Message: "the JSON patch could not be applied: testing value /spec/holderIdentity failed: test failed"}}}},
		{name: "apply without fieldManager", method: "PATCH", path: base + "/existing", contentType: "application/apply-patch+yaml",
			body: "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: existing\n",
			code: 422, reason: metav1.StatusReasonInvalid,
			details: &metav1.StatusDetails{Group: "meta.k8s.io", Kind: "PatchOptions", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueRequired, Message: "Required value: is required for apply patch", Field: "fieldManager"}}}},
		// kube-apiserver validates CreateOptions: an unknown fieldValidation
		// directive is a 422 on CreateOptions.meta.k8s.io, not a 400.
		{name: "bad fieldValidation value", method: "POST", path: base + "?fieldValidation=Bogus", contentType: "application/json", body: valid,
			code: 422, reason: metav1.StatusReasonInvalid,
			details: &metav1.StatusDetails{Group: "meta.k8s.io", Kind: "CreateOptions", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Bogus": supported values: "", "Ignore", "Strict", "Warn"`, Field: "fieldValidation"}}}},
		{name: "bad dryRun value", method: "POST", path: base + "?dryRun=Some", contentType: "application/json", body: valid,
			code: 422, reason: metav1.StatusReasonInvalid},
		{name: "strict field validation", method: "POST", path: base + "?fieldValidation=Strict", contentType: "application/json",
			body: leaseBody("strict", "", `"holderIdentity":"x","bogus":true`),
			code: 400, reason: metav1.StatusReasonBadRequest, contains: []string{`Lease in version "v1" cannot be handled as a Lease: strict decoding error: unknown field "spec.bogus"`}},

		// 400: a resourceVersion that is no revision, in kube-apiserver's
		// words for a list (a get or watch from one is a 500 there).
		{name: "list from a resourceVersion that is not one", method: "GET", path: base + "?resourceVersion=A",
			code: 400, reason: metav1.StatusReasonBadRequest,
			contains: []string{`invalid resource version: resourceVersion: Invalid value: "A": strconv.ParseUint: parsing "A": invalid syntax`}},
		{name: "get at a resourceVersion that is not one", method: "GET", path: base + "/x?resourceVersion=A",
			code: 400, reason: metav1.StatusReasonBadRequest,
			contains: []string{`invalid resource version: resourceVersion: Invalid value: "A": strconv.ParseUint: parsing "A": invalid syntax`}},
		// Before the watch starts, so an answer, not an ERROR event.
		{name: "watch from a negative resourceVersion", method: "GET", path: base + "?watch=true&resourceVersion=-1",
			code: 400, reason: metav1.StatusReasonBadRequest},

		// 410.
		{name: "watch from a compacted revision", method: "GET", path: base + "?watch=true&resourceVersion=" + compacted, watch: true,
			code: 410, reason: metav1.StatusReasonExpired, message: "The resourceVersion for the provided watch is too old."},
		{name: "continue of a list at a compacted revision", method: "GET",
			path: base + "?limit=1&continue=" + base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":`+compacted+`,"start":"default/existing\u0000"}`)),
			code: 410, reason: metav1.StatusReasonExpired,
			message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."},
		{name: "exact list at a compacted revision", method: "GET", path: base + "?resourceVersionMatch=Exact&resourceVersion=" + compacted,
			code: 410, reason: metav1.StatusReasonExpired, message: "The resourceVersion for the provided list is too old."},

		// 400: list and watch parameters.
		{name: "bad continue token", method: "GET", path: base + "?limit=1&continue=not-a-token",
			code: 400, reason: metav1.StatusReasonBadRequest, message: `invalid continue token: continue key is not valid: invalid character '\u009e' looking for beginning of value`},
		{name: "continue token of valid base64 but bad content", method: "GET", path: base + "?limit=1&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MH0",
			code: 400, reason: metav1.StatusReasonBadRequest,
			message: "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"},
		{name: "continue with a resourceVersion", method: "GET", path: base + "?limit=1&resourceVersion=5&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MH0",
			code: 400, reason: metav1.StatusReasonBadRequest, message: "specifying resource version is not allowed when using continue"},
		{name: "unknown field selector on list", method: "GET", path: base + "?fieldSelector=spec.holderIdentity%3Dx",
			code: 400, reason: metav1.StatusReasonBadRequest, message: `"spec.holderIdentity" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{name: "unknown field selector on watch", method: "GET", path: base + "?watch=true&fieldSelector=spec.holderIdentity%3Dx",
			code: 400, reason: metav1.StatusReasonBadRequest, message: `"spec.holderIdentity" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{name: "unknown field selector on a core kind that selects more", method: "GET", path: "/api/v1/nodes?fieldSelector=spec.podCIDR%3Dx",
			code: 400, reason: metav1.StatusReasonBadRequest, message: "field label not supported: spec.podCIDR"},
		{name: "unknown field selector on deletecollection", method: "DELETE", path: base + "?fieldSelector=spec.holderIdentity%3Dx",
			code: 400, reason: metav1.StatusReasonBadRequest, message: `"spec.holderIdentity" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{name: "unparsable label selector", method: "GET", path: base + "?labelSelector=a%3D%3D%3Db",
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "resourceVersionMatch without resourceVersion", method: "GET", path: base + "?resourceVersionMatch=Exact",
			code: 422, reason: metav1.StatusReasonInvalid},

		// 504: a revision the server has not reached (client-go's reflector
		// recognizes the ResourceVersionTooLarge cause and relists).
		{name: "exact list at a future revision", method: "GET", path: base + "?resourceVersionMatch=Exact&resourceVersion=999999999",
			code: 504, reason: metav1.StatusReasonTimeout,
			details: &metav1.StatusDetails{RetryAfterSeconds: 0, Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}}},
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := storedState(t, s)
			st := doErrorRequest(t, client, s.URL, tc)
			checkStatus(t, st, tc)
			if after := storedState(t, s); after != before {
				t.Errorf("stored data changed:%s", lineDiff(before, after))
			}
		})
	}
}

func leaseBody(name, namespace, spec string) string {
	ns := ""
	if namespace != "" {
		ns = `,"namespace":"` + namespace + `"`
	}
	return `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"` + name + `"` + ns + `},"spec":{` + spec + `}}`
}

func leaseBodyRV(name, rv, spec string) string {
	return `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"` + name + `","resourceVersion":"` + rv + `"},"spec":{` + spec + `}}`
}

// doErrorRequest sends tc and returns the Status it was answered with.
func doErrorRequest(t *testing.T, client *http.Client, baseURL string, tc errCase) *metav1.Status {
	t.Helper()
	var body io.Reader
	if tc.body != "" {
		body = strings.NewReader(tc.body)
	}
	req, err := http.NewRequestWithContext(testContext(t), tc.method, baseURL+tc.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if tc.contentType != "" {
		req.Header.Set("Content-Type", tc.contentType)
	}
	req.Header.Set("Accept", "application/json")
	if tc.accept != "" {
		req.Header.Set("Accept", tc.accept)
	}
	token := apiservertest.AdminToken
	if tc.token != nil {
		token = *tc.token
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if tc.method == http.MethodHead {
		return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(resp.StatusCode)} // the headers alone
	}
	if tc.watch {
		if resp.StatusCode != http.StatusOK {
			t.Errorf("watch: HTTP %d, want 200 and an ERROR event", resp.StatusCode)
		}
		var ev metav1.WatchEvent
		if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
			t.Fatalf("watch: reading first event: %v", err)
		}
		if ev.Type != "ERROR" {
			t.Fatalf("watch: first event %s %s, want ERROR", ev.Type, ev.Object.Raw)
		}
		return decodeStatus(t, ev.Object.Raw)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if int32(resp.StatusCode) != tc.code {
		t.Errorf("HTTP %d, want %d; body %s", resp.StatusCode, tc.code, truncate(raw))
	}
	return decodeStatus(t, raw)
}

func decodeStatus(t *testing.T, raw []byte) *metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("body is not a Status: %v\n%s", err, truncate(raw))
	}
	return &st
}

func checkStatus(t *testing.T, st *metav1.Status, tc errCase) {
	t.Helper()
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure {
		t.Errorf("got kind %q apiVersion %q status %q, want Status v1 Failure", st.Kind, st.APIVersion, st.Status)
	}
	if st.Code != tc.code || st.Reason != tc.reason {
		t.Errorf("got code %d reason %q, want %d %q (message %q)", st.Code, st.Reason, tc.code, tc.reason, st.Message)
	}
	if tc.message != "" && st.Message != tc.message {
		t.Errorf("message\n got %q\nwant %q", st.Message, tc.message)
	}
	for _, c := range tc.contains {
		if !strings.Contains(st.Message, c) {
			t.Errorf("message %q lacks %q", st.Message, c)
		}
	}
	for _, c := range tc.excludes {
		if strings.Contains(st.Message, c) {
			t.Errorf("message %q should not contain %q", st.Message, c)
		}
	}
	if tc.details != nil {
		got := st.Details
		if got == nil {
			got = &metav1.StatusDetails{}
		}
		if got.Name != tc.details.Name || got.Group != tc.details.Group || got.Kind != tc.details.Kind ||
			!slices.Equal(got.Causes, tc.details.Causes) {
			t.Errorf("details\n got %+v\nwant %+v", got, tc.details)
		}
	}
}

// storedState renders everything stored that a request could change: etcd's
// current revision and every lease and namespace.
func storedState(t *testing.T, s *apiservertest.Server) string {
	t.Helper()
	ctx := testContext(t)
	var b bytes.Buffer
	fmt.Fprintf(&b, "revision=%d", currentRevision(t, s))
	// A list with a limit is read from etcd, not from the watch cache.
	cs := s.Client(t, "")
	leases, err := cs.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range leases.Items {
		b.WriteString("\n")
		b.Write(objectJSON(t, &leases.Items[i]))
	}
	namespaces, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range namespaces.Items {
		b.WriteString("\n")
		b.Write(objectJSON(t, &namespaces.Items[i]))
	}
	return b.String()
}

func objectJSON(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	if l, ok := obj.(*coordinationv1.Lease); ok {
		// Keep huge holders from making failure output unreadable.
		l = l.DeepCopy()
		if h := l.Spec.HolderIdentity; h != nil && len(*h) > 100 {
			l.Spec.HolderIdentity = ptr.To((*h)[:100] + "…")
		}
		obj = l
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out strings.Builder
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out.WriteString("\n- " + l)
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out.WriteString("\n+ " + l)
		}
	}
	return out.String()
}

func truncate(b []byte) string {
	if len(b) > 500 {
		return string(b[:500]) + "…"
	}
	return string(b)
}
