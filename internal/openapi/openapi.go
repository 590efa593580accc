package openapi

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"sync"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	openapiv3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/registry"
)

// Documents holds the encoded OpenAPI documents of a set of resources. It is
// built once and read-only afterwards; ServeHTTP is safe for concurrent use.
type Documents struct {
	clock clock.PassiveClock

	definitions map[string]*spec.Schema

	v2JSON, v2ETag string
	v2Proto        lazyBytes

	v3Discovery     []byte
	v3DiscoveryETag string
	v3              map[string]*v3Document
}

// v3Document is one group version's OpenAPI 3.0 document, e.g. api/v1.
type v3Document struct {
	json  []byte
	etag  string // hex SHA-512 of json, also the hash in its URL
	proto lazyBytes
}

// lazyBytes computes an encoding the first time it is asked for.
type lazyBytes struct {
	once sync.Once
	b    []byte
	err  error
	make func() ([]byte, error)
}

func (l *lazyBytes) get() ([]byte, error) {
	l.once.Do(func() { l.b, l.err = l.make() })
	return l.b, l.err
}

// discoveryDoc is the body of GET /openapi/v3.
type discoveryDoc struct {
	Paths map[string]discoveryEntry `json:"paths"`
}

type discoveryEntry struct {
	ServerRelativeURL string `json:"serverRelativeURL"`
}

// New builds the documents for the given resources.
func New(resources []*registry.Resource, info version.Info) (*Documents, error) {
	docVersion := info.GitVersion
	if docVersion == "" {
		docVersion = "v0.0.0"
	}

	// Paths, grouped into the v3 documents kube-apiserver serves: one per
	// group version, one per group, and api, apis and version.
	docs := map[string][]pathItem{}
	var order []string
	add := func(key string, items ...pathItem) {
		if _, ok := docs[key]; !ok {
			order = append(order, key)
		}
		docs[key] = append(docs[key], items...)
	}
	var gvs []schema.GroupVersion
	byGV := map[schema.GroupVersion][]*registry.Resource{}
	for _, r := range resources {
		if _, ok := byGV[r.GroupVersion]; !ok {
			gvs = append(gvs, r.GroupVersion)
		}
		byGV[r.GroupVersion] = append(byGV[r.GroupVersion], r)
	}
	groupsSeen := map[string]bool{}
	add("api", discoveryPath("/api/", "getCoreAPIVersions", "get available API versions", "core", apiVersionsType))
	add("apis", discoveryPath("/apis/", "getAPIVersions", "get available API versions", "apis", groupListType))
	for _, gv := range gvs {
		if gv.Group != "" && !groupsSeen[gv.Group] {
			groupsSeen[gv.Group] = true
			add("apis/"+gv.Group, discoveryPath("/apis/"+gv.Group+"/", "get"+groupCamel(gv.Group)+"APIGroup",
				"get information of a group", lowerFirst(groupCamel(gv.Group)), groupType))
		}
		key := groupVersionPath(gv)
		add(key, discoveryPath("/"+key+"/", "get"+groupCamel(gv.Group)+upperFirst(gv.Version)+"APIResources",
			"get available resources", gvTag(gv), resourceListType))
		for _, r := range byGV[gv] {
			items, err := resourcePaths(r)
			if err != nil {
				return nil, err
			}
			add(key, items...)
		}
	}
	versionPath := discoveryPath("/version/", "getCodeVersion", "get the version information for this server", "version", versionInfoType)
	versionPath.ops[0].produces = []string{mediaJSON}
	add("version", versionPath)

	d := &Documents{clock: clock.RealClock{}, v3: map[string]*v3Document{}}

	// Swagger 2.0: every path in one document.
	b2 := newSchemaBuilder(v2, registry.Scheme)
	swagger := &spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Swagger: "2.0",
		Info:    &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: docVersion}},
		Paths:   &spec.Paths{Paths: map[string]spec.PathItem{}},
		SecurityDefinitions: spec.SecurityDefinitions{"BearerToken": &spec.SecurityScheme{SecuritySchemeProps: spec.SecuritySchemeProps{
			Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication",
		}}},
		Security: []map[string][]string{{"BearerToken": {}}},
	}}
	for _, key := range order {
		for _, p := range docs[key] {
			var buildErr error
			ref := func(t reflect.Type) spec.Ref {
				name, err := b2.define(t)
				if err != nil && buildErr == nil {
					buildErr = err
				}
				return spec.MustCreateRef(v2.refPrefix() + name)
			}
			swagger.Paths.Paths[p.path] = pathItem2(p, ref)
			for _, o := range p.ops {
				if slices.Contains(o.produces, mediaJSONWatch) {
					ref(watchEventType)
				}
			}
			if buildErr != nil {
				return nil, buildErr
			}
		}
	}
	swagger.Definitions = b2.defs
	v2JSON, err := json.Marshal(swagger)
	if err != nil {
		return nil, fmt.Errorf("encode openapi v2: %w", err)
	}
	d.v2JSON = string(v2JSON)
	d.v2ETag = etag(v2JSON)
	d.v2Proto.make = func() ([]byte, error) {
		doc, err := openapiv2.ParseDocument(v2JSON)
		if err != nil {
			return nil, err
		}
		return proto.Marshal(doc)
	}
	d.definitions = make(map[string]*spec.Schema, len(b2.defs))
	for name, s := range b2.defs {
		s := s
		d.definitions[name] = &s
	}

	// OpenAPI 3.0: one document per key, each with the schemas its paths
	// reach.
	b3 := newSchemaBuilder(v3, registry.Scheme)
	disc := discoveryDoc{Paths: map[string]discoveryEntry{}}
	for _, key := range order {
		doc := &spec3.OpenAPI{
			Version: "3.0.0",
			Info:    &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: docVersion}},
			Paths:   &spec3.Paths{Paths: map[string]*spec3.Path{}},
			Components: &spec3.Components{
				Schemas: map[string]*spec.Schema{},
				SecuritySchemes: spec3.SecuritySchemes{"BearerToken": &spec3.SecurityScheme{SecuritySchemeProps: spec3.SecuritySchemeProps{
					Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication",
				}}},
			},
			SecurityRequirement: []map[string][]string{{"BearerToken": {}}},
		}
		var roots []string
		var buildErr error
		ref := func(t reflect.Type) spec.Ref {
			name, err := b3.define(t)
			if err != nil && buildErr == nil {
				buildErr = err
			}
			roots = append(roots, name)
			return spec.MustCreateRef(v3.refPrefix() + name)
		}
		for _, p := range docs[key] {
			doc.Paths.Paths[p.path] = pathItem3(p, ref)
			for _, o := range p.ops {
				if slices.Contains(o.produces, mediaJSONWatch) {
					ref(watchEventType)
				}
			}
		}
		if buildErr != nil {
			return nil, buildErr
		}
		for _, name := range closure(roots, b3.deps) {
			s := b3.defs[name]
			doc.Components.Schemas[name] = &s
		}
		j, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("encode openapi v3 %s: %w", key, err)
		}
		v := &v3Document{json: j, etag: etag(j)}
		v.proto.make = func() ([]byte, error) {
			doc, err := openapiv3.ParseDocument(j)
			if err != nil {
				return nil, err
			}
			return proto.Marshal(doc)
		}
		d.v3[key] = v
		disc.Paths[key] = discoveryEntry{ServerRelativeURL: "/openapi/v3/" + key + "?hash=" + url.QueryEscape(v.etag)}
	}
	d.v3Discovery, err = json.Marshal(disc)
	if err != nil {
		return nil, err
	}
	d.v3DiscoveryETag = etag(d.v3Discovery)
	return d, nil
}

// Definitions returns the Swagger 2.0 definitions by name, e.g.
// io.k8s.api.coordination.v1.Lease. Callers must not modify them.
func (d *Documents) Definitions() map[string]*spec.Schema { return d.definitions }

// etag is the upper-case hex SHA-512 of a document, kube-apiserver's ETag
// and v3 hash.
func etag(b []byte) string { return fmt.Sprintf("%X", sha512.Sum512(b)) }

// closure returns the definitions reachable from roots, sorted.
func closure(roots []string, deps map[string][]string) []string {
	seen := map[string]bool{}
	var visit func(string)
	visit = func(n string) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, d := range deps[n] {
			visit(d)
		}
	}
	for _, r := range roots {
		visit(r)
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
