package openapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/registry"
)

// testResources are the registry's resources plus kinds others will add:
// a cluster-scoped kind with status, events, RBAC, a beta group version and
// a virtual create-only kind.
func testResources() []*registry.Resource {
	rs := slices.Clone(registry.All())
	return append(rs,
		&registry.Resource{GroupVersion: corev1.SchemeGroupVersion, Name: "nodes", SingularName: "node", Kind: "Node", StatusSubresource: true,
			New: func() runtime.Object { return &corev1.Node{} }, NewList: func() runtime.Object { return &corev1.NodeList{} }},
		&registry.Resource{GroupVersion: corev1.SchemeGroupVersion, Name: "events", SingularName: "event", Kind: "Event", Namespaced: true,
			New: func() runtime.Object { return &corev1.Event{} }, NewList: func() runtime.Object { return &corev1.EventList{} }},
		&registry.Resource{GroupVersion: eventsv1.SchemeGroupVersion, Name: "events", SingularName: "event", Kind: "Event", Namespaced: true,
			New: func() runtime.Object { return &eventsv1.Event{} }, NewList: func() runtime.Object { return &eventsv1.EventList{} }},
		&registry.Resource{GroupVersion: rbacv1.SchemeGroupVersion, Name: "clusterroles", SingularName: "clusterrole", Kind: "ClusterRole",
			New: func() runtime.Object { return &rbacv1.ClusterRole{} }, NewList: func() runtime.Object { return &rbacv1.ClusterRoleList{} }},
		&registry.Resource{GroupVersion: coordinationv1beta1.SchemeGroupVersion, Name: "leasecandidates", SingularName: "leasecandidate", Kind: "LeaseCandidate", Namespaced: true,
			New: func() runtime.Object { return &coordinationv1beta1.LeaseCandidate{} }, NewList: func() runtime.Object { return &coordinationv1beta1.LeaseCandidateList{} }},
		&registry.Resource{GroupVersion: authorizationv1.SchemeGroupVersion, Name: "subjectaccessreviews", SingularName: "subjectaccessreview", Kind: "SubjectAccessReview",
			Virtual: true, Verbs: []string{"create"}, New: func() runtime.Object { return &authorizationv1.SubjectAccessReview{} }},
		&registry.Resource{GroupVersion: authorizationv1.SchemeGroupVersion, Name: "localsubjectaccessreviews", SingularName: "localsubjectaccessreview", Kind: "LocalSubjectAccessReview",
			Namespaced: true, Virtual: true, Verbs: []string{"create"}, New: func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} }},
	)
}

func newTestDocuments(t testing.TB) *Documents {
	t.Helper()
	d, err := New(testResources(), version.Info{GitVersion: "v1.32.0"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func get(t *testing.T, d *Documents, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	return rec
}

func v2Doc(t *testing.T, d *Documents) *spec.Swagger {
	t.Helper()
	var s spec.Swagger
	if err := json.Unmarshal([]byte(d.v2JSON), &s); err != nil {
		t.Fatalf("decode v2: %v", err)
	}
	return &s
}

func v3Doc(t *testing.T, d *Documents, key string) *spec3.OpenAPI {
	t.Helper()
	doc, ok := d.v3[key]
	if !ok {
		t.Fatalf("no v3 document %q", key)
	}
	var s spec3.OpenAPI
	if err := json.Unmarshal(doc.json, &s); err != nil {
		t.Fatalf("decode v3 %s: %v", key, err)
	}
	return &s
}

// refs collects every "$ref" in a JSON document.
func refs(t *testing.T, raw []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "$ref" {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

func TestReferencesResolve(t *testing.T) {
	d := newTestDocuments(t)
	t.Run("v2", func(t *testing.T) {
		s := v2Doc(t, d)
		for _, r := range refs(t, []byte(d.v2JSON)) {
			name, ok := strings.CutPrefix(r, "#/definitions/")
			if !ok {
				t.Errorf("v2 ref %q does not point into #/definitions", r)
				continue
			}
			if _, ok := s.Definitions[name]; !ok {
				t.Errorf("v2 ref %q: no such definition", r)
			}
		}
	})
	for key, doc := range d.v3 {
		t.Run("v3 "+key, func(t *testing.T) {
			s := v3Doc(t, d, key)
			used := map[string]bool{}
			for _, r := range refs(t, doc.json) {
				name, ok := strings.CutPrefix(r, "#/components/schemas/")
				if !ok {
					t.Errorf("ref %q does not point into #/components/schemas", r)
					continue
				}
				used[name] = true
				if _, ok := s.Components.Schemas[name]; !ok {
					t.Errorf("ref %q: no such schema", r)
				}
			}
			for name := range s.Components.Schemas {
				// WatchEvent is carried for the stream=watch responses of
				// list, whose items it describes.
				if !used[name] && name != "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent" {
					t.Errorf("schema %s is carried but never referred to", name)
				}
			}
		})
	}
}

func TestGroupVersionKinds(t *testing.T) {
	d := newTestDocuments(t)
	lease := map[string]any{"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"}
	tests := []struct {
		def  string
		want map[string]any
	}{
		{"io.k8s.api.coordination.v1.Lease", lease},
		{"io.k8s.api.coordination.v1.LeaseList", map[string]any{"group": "coordination.k8s.io", "version": "v1", "kind": "LeaseList"}},
		{"io.k8s.api.core.v1.Namespace", map[string]any{"group": "", "version": "v1", "kind": "Namespace"}},
		{"io.k8s.apimachinery.pkg.apis.meta.v1.Status", map[string]any{"group": "", "version": "v1", "kind": "Status"}},
		{"io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions", map[string]any{"group": "coordination.k8s.io", "version": "v1", "kind": "DeleteOptions"}},
		{"io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions", map[string]any{"group": "", "version": "v1", "kind": "DeleteOptions"}},
		{"io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent", map[string]any{"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "WatchEvent"}},
	}
	v2 := v2Doc(t, d)
	v3 := v3Doc(t, d, "apis/coordination.k8s.io/v1")
	for _, tt := range tests {
		t.Run(tt.def, func(t *testing.T) {
			for flavor, ext := range map[string]spec.Extensions{"v2": v2.Definitions[tt.def].Extensions, "v3": schemaOrEmpty(v3, tt.def).Extensions} {
				if flavor == "v3" && tt.def == "io.k8s.api.core.v1.Namespace" {
					continue // not in the coordination document
				}
				var got []map[string]any
				if err := ext.GetObject(extGVK, &got); err != nil {
					t.Fatalf("%s: %v", flavor, err)
				}
				if !slices.ContainsFunc(got, func(g map[string]any) bool { return reflect.DeepEqual(g, tt.want) }) {
					t.Errorf("%s: %s = %v, want it to include %v", flavor, extGVK, got, tt.want)
				}
			}
		})
	}
	if _, ok := v2.Definitions["io.k8s.api.coordination.v1.LeaseSpec"].Extensions[extGVK]; ok {
		t.Error("LeaseSpec has a group-version-kind; only kinds should")
	}
}

func schemaOrEmpty(doc *spec3.OpenAPI, name string) spec.Schema {
	if s, ok := doc.Components.Schemas[name]; ok {
		return *s
	}
	return spec.Schema{}
}

func TestFieldSchemas(t *testing.T) {
	d := newTestDocuments(t)
	v2 := v2Doc(t, d)
	v3 := v3Doc(t, d, "api/v1")
	prop := func(s spec.Schema, path ...string) spec.Schema {
		for _, p := range path {
			s = s.Properties[p]
		}
		return s
	}
	ext := func(s spec.Schema, name string) any { return s.Extensions[name] }
	tests := []struct {
		name  string
		def   string
		field []string
		check func(t *testing.T, v2, v3 spec.Schema)
	}{
		{"ownerReferences is a map keyed by uid", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", []string{"ownerReferences"}, func(t *testing.T, v2, v3 spec.Schema) {
			for _, s := range []spec.Schema{v2, v3} {
				if ext(s, extListType) != "map" || !reflect.DeepEqual(ext(s, extListMapKeys), []any{"uid"}) ||
					ext(s, extPatchStrategy) != "merge" || ext(s, extPatchMergeKey) != "uid" {
					t.Errorf("extensions = %v", s.Extensions)
				}
			}
		}},
		{"finalizers is a set merged on patch", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", []string{"finalizers"}, func(t *testing.T, v2, v3 spec.Schema) {
			if ext(v3, extListType) != "set" || ext(v3, extPatchStrategy) != "merge" {
				t.Errorf("extensions = %v", v3.Extensions)
			}
			if v3.Items.Schema.Default != "" || v2.Items.Schema.Default != nil {
				t.Errorf("item defaults v2 %v v3 %v, want none and \"\"", v2.Items.Schema.Default, v3.Items.Schema.Default)
			}
		}},
		{"managedFields is atomic", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", []string{"managedFields"}, func(t *testing.T, _, v3 spec.Schema) {
			if ext(v3, extListType) != "atomic" {
				t.Errorf("extensions = %v", v3.Extensions)
			}
		}},
		{"labels is a string map", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", []string{"labels"}, func(t *testing.T, v2, v3 spec.Schema) {
			if !v2.Type.Contains("object") || v2.AdditionalProperties == nil || !v2.AdditionalProperties.Schema.Type.Contains("string") {
				t.Errorf("v2 labels = %+v", v2)
			}
			if v3.AdditionalProperties.Schema.Default != "" {
				t.Errorf("v3 value default = %v, want \"\"", v3.AdditionalProperties.Schema.Default)
			}
		}},
		{"creationTimestamp refers to Time", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", []string{"creationTimestamp"}, func(t *testing.T, v2, v3 spec.Schema) {
			if v2.Ref.String() != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Time" || v2.Description == "" {
				t.Errorf("v2 = %+v", v2)
			}
			if len(v3.AllOf) != 1 || v3.AllOf[0].Ref.String() != "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Time" || v3.Default != nil {
				t.Errorf("v3 = %+v, want allOf with the Time reference and no default", v3)
			}
		}},
		{"generation is int64", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", []string{"generation"}, func(t *testing.T, v2, _ spec.Schema) {
			if !v2.Type.Contains("integer") || v2.Format != "int64" {
				t.Errorf("v2 = %v %v", v2.Type, v2.Format)
			}
		}},
		{"taints are atomic", "io.k8s.api.core.v1.NodeSpec", []string{"taints"}, func(t *testing.T, _, v3 spec.Schema) {
			if ext(v3, extListType) != "atomic" {
				t.Errorf("extensions = %v", v3.Extensions)
			}
		}},
		{"node conditions merge by type", "io.k8s.api.core.v1.NodeStatus", []string{"conditions"}, func(t *testing.T, _, v3 spec.Schema) {
			if ext(v3, extListType) != "map" || !reflect.DeepEqual(ext(v3, extListMapKeys), []any{"type"}) || ext(v3, extPatchMergeKey) != "type" {
				t.Errorf("extensions = %v", v3.Extensions)
			}
		}},
		{"capacity holds quantities", "io.k8s.api.core.v1.NodeStatus", []string{"capacity"}, func(t *testing.T, v2, _ spec.Schema) {
			if v2.AdditionalProperties.Schema.Ref.String() != "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity" {
				t.Errorf("v2 = %+v", v2.AdditionalProperties.Schema)
			}
		}},
		{"taint effect is an enum", "io.k8s.api.core.v1.Taint", []string{"effect"}, func(t *testing.T, v2, v3 spec.Schema) {
			want := []any{"NoExecute", "NoSchedule", "PreferNoSchedule"}
			if !reflect.DeepEqual(v3.Enum, want) {
				t.Errorf("enum = %v, want %v", v3.Enum, want)
			}
		}},
		{"namespace phase is an enum", "io.k8s.api.core.v1.NamespaceStatus", []string{"phase"}, func(t *testing.T, v2, v3 spec.Schema) {
			if !reflect.DeepEqual(v2.Enum, []any{"Active", "Terminating"}) {
				t.Errorf("enum = %v", v2.Enum)
			}
		}},
		{"metadata defaults to {} in v3 only", "io.k8s.api.core.v1.Namespace", []string{"metadata"}, func(t *testing.T, v2, v3 spec.Schema) {
			if v2.Default != nil || !reflect.DeepEqual(v3.Default, map[string]any{}) {
				t.Errorf("defaults v2 %v v3 %v", v2.Default, v3.Default)
			}
		}},
		{"a marker default", "io.k8s.api.core.v1.NodeStatus", []string{"daemonEndpoints"}, func(t *testing.T, v2, v3 spec.Schema) {
			if !reflect.DeepEqual(v3.Default, map[string]any{}) {
				t.Errorf("default = %v", v3.Default)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d2, ok := v2.Definitions[tt.def]
			if !ok {
				t.Fatalf("no v2 definition %s", tt.def)
			}
			d3, ok := v3.Components.Schemas[tt.def]
			if !ok {
				t.Fatalf("no v3 schema %s", tt.def)
			}
			tt.check(t, prop(d2, tt.field...), prop(*d3, tt.field...))
		})
	}
}

func TestRequired(t *testing.T) {
	d := newTestDocuments(t)
	defs := d.Definitions()
	tests := []struct {
		def  string
		want []string
	}{
		{"io.k8s.api.coordination.v1.LeaseList", []string{"items"}},
		{"io.k8s.api.coordination.v1.LeaseSpec", nil},
		{"io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference", []string{"apiVersion", "kind", "name", "uid"}},
		{"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", nil},
		// +optional on fields without omitempty: not required.
		{"io.k8s.api.core.v1.Event", []string{"metadata", "involvedObject"}},
		{"io.k8s.api.core.v1.Taint", []string{"key", "effect"}},
		{"io.k8s.api.core.v1.NodeCondition", []string{"type", "status"}},
		// +required on a field with omitempty: required.
		{"io.k8s.api.coordination.v1beta1.LeaseCandidateSpec", []string{"leaseName", "binaryVersion", "strategy"}},
		{"io.k8s.api.rbac.v1.PolicyRule", []string{"verbs"}},
	}
	for _, tt := range tests {
		t.Run(tt.def, func(t *testing.T) {
			s, ok := defs[tt.def]
			if !ok {
				t.Fatalf("no definition %s", tt.def)
			}
			if !slices.Equal(s.Required, tt.want) {
				t.Errorf("required = %v, want %v", s.Required, tt.want)
			}
		})
	}
}

func TestSpecialTypes(t *testing.T) {
	d := newTestDocuments(t)
	sw := v2Doc(t, d)
	oa := v3Doc(t, d, "api/v1")
	tests := []struct {
		def            string
		v2Type, format string
		v3OneOf        []string
	}{
		{"io.k8s.apimachinery.pkg.apis.meta.v1.Time", "string", "date-time", nil},
		{"io.k8s.apimachinery.pkg.api.resource.Quantity", "string", "", []string{"string", "number"}},
		{"io.k8s.apimachinery.pkg.util.intstr.IntOrString", "string", "int-or-string", []string{"integer", "string"}},
		{"io.k8s.apimachinery.pkg.runtime.RawExtension", "object", "", nil},
		{"io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1", "object", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.def, func(t *testing.T) {
			s2, ok := sw.Definitions[tt.def]
			if !ok {
				if tt.def == "io.k8s.apimachinery.pkg.util.intstr.IntOrString" {
					return // no served kind reaches it
				}
				t.Fatalf("no v2 definition %s", tt.def)
			}
			if !s2.Type.Contains(tt.v2Type) || s2.Format != tt.format || s2.Description == "" {
				t.Errorf("v2 = %v %q %q", s2.Type, s2.Format, s2.Description)
			}
			s3, ok := oa.Components.Schemas[tt.def]
			if !ok {
				if tt.def == "io.k8s.apimachinery.pkg.util.intstr.IntOrString" {
					return // core/v1 Namespace and Node do not reach it
				}
				t.Fatalf("no v3 schema %s", tt.def)
			}
			var oneOf []string
			for _, o := range s3.OneOf {
				oneOf = append(oneOf, o.Type...)
			}
			if !slices.Equal(oneOf, tt.v3OneOf) {
				t.Errorf("v3 oneOf = %v, want %v", oneOf, tt.v3OneOf)
			}
		})
	}
	// []byte is base64 text.
	b := newSchemaBuilder(v2, nil)
	s, err := b.schemaOf(reflect.TypeFor[[]byte](), "")
	if err != nil || !s.Type.Contains("string") || s.Format != "byte" {
		t.Errorf("[]byte = %v %q, %v", s.Type, s.Format, err)
	}
	// IntOrString in v2: a string of format int-or-string.
	if _, err := b.define(intOrStringType); err != nil {
		t.Fatal(err)
	}
	if s := b.defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]; !s.Type.Contains("string") || s.Format != "int-or-string" {
		t.Errorf("v2 IntOrString = %v %q", s.Type, s.Format)
	}
	// IntOrString in v3: a oneOf with the int-or-string extension.
	b3 := newSchemaBuilder(v3, nil)
	if _, err := b3.define(intOrStringType); err != nil {
		t.Fatal(err)
	}
	if got := b3.defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"].Extensions[extIntOrString]; got != true {
		t.Errorf("v3 IntOrString %s = %v", extIntOrString, got)
	}
}

func TestDefinitionName(t *testing.T) {
	type local struct{}
	tests := []struct {
		t    reflect.Type
		want string
	}{
		{reflect.TypeFor[coordinationv1.Lease](), "io.k8s.api.coordination.v1.Lease"},
		{reflect.TypeFor[corev1.ObjectReference](), "io.k8s.api.core.v1.ObjectReference"},
		{reflect.TypeFor[local](), "com.github.leasehold.leasehold.internal.openapi.local"},
	}
	for _, tt := range tests {
		if got := definitionName(tt.t); got != tt.want {
			t.Errorf("definitionName(%v) = %q, want %q", tt.t, got, tt.want)
		}
	}
}

// TestOperations checks paths and operations per verb, and that every PATCH
// carries fieldValidation the way kubectl looks for it: the first PATCH
// operation tagged with the kind must list the parameter.
func TestOperations(t *testing.T) {
	d := newTestDocuments(t)
	type op struct{ method, path, id, action string }
	tests := []struct {
		doc  string
		want []op
		none []string // paths that must not exist
	}{
		{"apis/coordination.k8s.io/v1", []op{
			{"get", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", "listCoordinationV1NamespacedLease", "list"},
			{"post", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", "createCoordinationV1NamespacedLease", "post"},
			{"delete", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", "deleteCoordinationV1CollectionNamespacedLease", "deletecollection"},
			{"get", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "readCoordinationV1NamespacedLease", "get"},
			{"put", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "replaceCoordinationV1NamespacedLease", "put"},
			{"patch", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "patchCoordinationV1NamespacedLease", "patch"},
			{"delete", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "deleteCoordinationV1NamespacedLease", "delete"},
			{"get", "/apis/coordination.k8s.io/v1/leases", "listCoordinationV1LeaseForAllNamespaces", "list"},
			{"get", "/apis/coordination.k8s.io/v1/", "getCoordinationV1APIResources", ""},
		}, []string{"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}/status"}},
		{"api/v1", []op{
			{"get", "/api/v1/namespaces", "listCoreV1Namespace", "list"},
			{"get", "/api/v1/namespaces/{name}/status", "readCoreV1NamespaceStatus", "get"},
			{"patch", "/api/v1/namespaces/{name}/status", "patchCoreV1NamespaceStatus", "patch"},
			{"put", "/api/v1/nodes/{name}/status", "replaceCoreV1NodeStatus", "put"},
			{"get", "/api/v1/events", "listCoreV1EventForAllNamespaces", "list"},
		}, []string{"/api/v1/namespaces/{namespace}/namespaces"}},
		{"apis/rbac.authorization.k8s.io/v1", []op{
			{"patch", "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}", "patchRbacAuthorizationV1ClusterRole", "patch"},
		}, nil},
		{"apis/authorization.k8s.io/v1", []op{
			{"post", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "createAuthorizationV1SubjectAccessReview", "post"},
			{"post", "/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews", "createAuthorizationV1NamespacedLocalSubjectAccessReview", "post"},
		}, []string{"/apis/authorization.k8s.io/v1/subjectaccessreviews/{name}", "/apis/authorization.k8s.io/v1/localsubjectaccessreviews"}},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			s := v3Doc(t, d, tt.doc)
			for _, w := range tt.want {
				p, ok := s.Paths.Paths[w.path]
				if !ok {
					t.Errorf("no path %s", w.path)
					continue
				}
				o := map[string]*spec3.Operation{"get": p.Get, "put": p.Put, "post": p.Post, "patch": p.Patch, "delete": p.Delete}[w.method]
				if o == nil {
					t.Errorf("%s %s: no operation", w.method, w.path)
					continue
				}
				if o.OperationId != w.id {
					t.Errorf("%s %s: operationId %s, want %s", w.method, w.path, o.OperationId, w.id)
				}
				if got, _ := o.Extensions.GetString(extAction); got != w.action {
					t.Errorf("%s %s: action %q, want %q", w.method, w.path, got, w.action)
				}
			}
			for _, p := range tt.none {
				if _, ok := s.Paths.Paths[p]; ok {
					t.Errorf("unexpected path %s", p)
				}
			}
		})
	}

	for key := range d.v3 {
		s := v3Doc(t, d, key)
		for path, p := range s.Paths.Paths {
			if p.Patch == nil {
				continue
			}
			var gvk map[string]string
			if err := p.Patch.Extensions.GetObject(extGVK, &gvk); err != nil || gvk["kind"] == "" {
				t.Errorf("PATCH %s: no %s (%v)", path, extGVK, err)
			}
			var names []string
			for _, prm := range p.Patch.Parameters {
				names = append(names, prm.Name)
			}
			for _, want := range []string{"dryRun", "fieldManager", "fieldValidation", "force"} {
				if !slices.Contains(names, want) {
					t.Errorf("PATCH %s: parameters %v lack %s", path, names, want)
				}
			}
			var media []string
			for m := range p.Patch.RequestBody.Content {
				media = append(media, m)
			}
			slices.Sort(media)
			want := slices.Sorted(slices.Values(patchMediaTypes))
			if !slices.Equal(media, want) {
				t.Errorf("PATCH %s: body media %v, want %v", path, media, want)
			}
		}
	}

	// Swagger 2.0 keeps consumes and produces on each operation.
	v2 := v2Doc(t, d)
	patch := v2.Paths.Paths["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"].Patch
	if !slices.Contains(patch.Consumes, "application/apply-patch+yaml") || !slices.Contains(patch.Produces, "application/vnd.kubernetes.protobuf") {
		t.Errorf("v2 patch consumes %v produces %v", patch.Consumes, patch.Produces)
	}
	list := v2.Paths.Paths["/api/v1/namespaces"].Get
	if !slices.Contains(list.Produces, "application/json;stream=watch") {
		t.Errorf("v2 list produces %v", list.Produces)
	}
}

// TestV3RoundTrip decodes each v3 document into spec3.OpenAPI and encodes
// it again: nothing may be lost.
func TestV3RoundTrip(t *testing.T) {
	d := newTestDocuments(t)
	for key, doc := range d.v3 {
		t.Run(key, func(t *testing.T) {
			var s spec3.OpenAPI
			if err := json.Unmarshal(doc.json, &s); err != nil {
				t.Fatal(err)
			}
			again, err := json.Marshal(&s)
			if err != nil {
				t.Fatal(err)
			}
			var a, b any
			json.Unmarshal(doc.json, &a)
			json.Unmarshal(again, &b)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("document changed in a round trip through spec3.OpenAPI")
			}
			if s.Version != "3.0.0" || s.Info.Version != "v1.32.0" {
				t.Errorf("openapi %q info.version %q", s.Version, s.Info.Version)
			}
		})
	}
}

func TestServeHTTP(t *testing.T) {
	d := newTestDocuments(t)
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	d.clock = clocktesting.NewFakePassiveClock(now)

	var disc discoveryDoc
	rec := get(t, d, "/openapi/v3", nil)
	if rec.Code != http.StatusOK || rec.Header().Get("Etag") == "" {
		t.Fatalf("GET /openapi/v3: %d %v", rec.Code, rec.Header())
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &disc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"api", "api/v1", "apis", "apis/coordination.k8s.io", "apis/coordination.k8s.io/v1", "apis/coordination.k8s.io/v1beta1", "apis/events.k8s.io/v1", "version"} {
		if _, ok := disc.Paths[key]; !ok {
			t.Errorf("discovery lacks %s", key)
		}
	}
	leaseURL := disc.Paths["apis/coordination.k8s.io/v1"].ServerRelativeURL
	hash := leaseURL[strings.Index(leaseURL, "hash=")+5:]

	tests := []struct {
		name        string
		path        string
		header      map[string]string
		code        int
		contentType string
		cache       string
		location    string
	}{
		{"v2 json", "/openapi/v2", map[string]string{"Accept": "application/json"}, 200, "application/json", "", ""},
		{"v2 default", "/openapi/v2", nil, 200, "application/json", "", ""},
		{"v2 protobuf", "/openapi/v2", map[string]string{"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}, 200, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", "", ""},
		{"v2 protobuf new name", "/openapi/v2", map[string]string{"Accept": "application/com.github.proto-openapi.spec.v2.v1.0+protobuf, application/json"}, 200, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", "", ""},
		{"v2 not acceptable", "/openapi/v2", map[string]string{"Accept": "text/html"}, 406, "", "", ""},
		{"v2 not modified", "/openapi/v2", map[string]string{"If-None-Match": `"` + d.v2ETag + `"`}, 304, "", "", ""},
		{"v3 gv", leaseURL, nil, 200, "application/json", "public, immutable", ""},
		{"v3 gv no hash", "/openapi/v3/apis/coordination.k8s.io/v1", nil, 200, "application/json", "", ""},
		{"v3 stale hash", "/openapi/v3/apis/coordination.k8s.io/v1?hash=OLD", nil, 301, "", "", leaseURL},
		{"v3 protobuf", leaseURL, map[string]string{"Accept": "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"}, 200, "application/com.github.proto-openapi.spec.v3.v1.0+protobuf", "public, immutable", ""},
		{"v3 not modified", "/openapi/v3/apis/coordination.k8s.io/v1", map[string]string{"If-None-Match": `"` + hash + `"`}, 304, "", "", ""},
		{"v3 unknown gv", "/openapi/v3/apis/example.com/v1", nil, 404, "", "", ""},
		{"v3 trailing slash", "/openapi/v3/", nil, 404, "", "", ""},
		{"elsewhere", "/openapi/v4", nil, 404, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(t, d, tt.path, tt.header)
			if rec.Code != tt.code {
				t.Fatalf("code = %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			if tt.contentType != "" && rec.Header().Get("Content-Type") != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", rec.Header().Get("Content-Type"), tt.contentType)
			}
			if got := rec.Header().Get("Cache-Control"); got != tt.cache {
				t.Errorf("Cache-Control = %q, want %q", got, tt.cache)
			}
			if tt.cache != "" {
				if got, want := rec.Header().Get("Expires"), now.AddDate(1, 0, 0).Format(http.TimeFormat); got != want {
					t.Errorf("Expires = %q, want %q", got, want)
				}
			}
			if got := rec.Header().Get("Location"); got != tt.location {
				t.Errorf("Location = %q, want %q", got, tt.location)
			}
			if tt.code == 200 && rec.Header().Get("Etag") == "" {
				t.Error("no ETag")
			}
		})
	}

	// The protobuf is the JSON document, parsed.
	rec = get(t, d, "/openapi/v2", map[string]string{"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
	var doc openapiv2.Document
	if err := proto.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("v2 protobuf: %v", err)
	}
	found := false
	for _, p := range doc.GetDefinitions().GetAdditionalProperties() {
		if p.GetName() == "io.k8s.api.coordination.v1.Lease" {
			found = true
		}
	}
	if !found {
		t.Error("v2 protobuf lacks the Lease definition")
	}

	req := httptest.NewRequest(http.MethodPost, "/openapi/v2", nil)
	rec = httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /openapi/v2: %d, want 405", rec.Code)
	}
}

func TestNewRejectsResourceWithoutType(t *testing.T) {
	_, err := New([]*registry.Resource{{GroupVersion: corev1.SchemeGroupVersion, Name: "things", Kind: "Thing"}}, version.Info{})
	if err == nil {
		t.Fatal("New accepted a resource without New")
	}
}

func FuzzServeHTTP(f *testing.F) {
	d, err := New(registry.All(), version.Info{GitVersion: "v1.32.0"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("/openapi/v2", "application/json", "")
	f.Add("/openapi/v3/api/v1", "application/com.github.proto-openapi.spec.v3@v1.0+protobuf;q=0.5, */*", "x")
	f.Add("/openapi/v3/apis", "*/*;q=0", "")
	f.Fuzz(func(t *testing.T, path, accept, hash string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path = path
		req.URL.RawQuery = "hash=" + hash
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 301, 304, 404, 406:
		default:
			t.Fatalf("%s (Accept %q): status %d", path, accept, rec.Code)
		}
	})
}

func BenchmarkNew(b *testing.B) {
	rs := testResources()
	for b.Loop() {
		if _, err := New(rs, version.Info{GitVersion: "v1.32.0"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDefinitionsDriveServerSideApply feeds Definitions to apimachinery's
// type converter, as an API server does for server-side apply, and checks
// that list types come through: ownerReferences merge by uid.
func TestDefinitionsDriveServerSideApply(t *testing.T) {
	d := newTestDocuments(t)
	tc, err := managedfields.NewTypeConverter(d.Definitions(), false)
	if err != nil {
		t.Fatalf("NewTypeConverter: %v", err)
	}
	lease := func(holder string, owners ...string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "kube-node-lease"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}
		for _, uid := range owners {
			l.OwnerReferences = append(l.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n1", UID: types.UID(uid)})
		}
		return l
	}
	live, err := tc.ObjectToTyped(lease("a", "u1"))
	if err != nil {
		t.Fatalf("ObjectToTyped: %v", err)
	}
	applied, err := tc.ObjectToTyped(lease("b", "u2"))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := live.Merge(applied)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	obj, err := tc.TypedToObject(merged)
	if err != nil {
		t.Fatal(err)
	}
	u := obj.(*unstructured.Unstructured)
	owners, _, _ := unstructured.NestedSlice(u.Object, "metadata", "ownerReferences")
	if len(owners) != 2 {
		t.Errorf("merged ownerReferences = %v, want both (a map keyed by uid, not atomic)", owners)
	}
	holder, _, _ := unstructured.NestedString(u.Object, "spec", "holderIdentity")
	if holder != "b" {
		t.Errorf("holderIdentity = %q, want b", holder)
	}
}
