package openapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// flavor is the OpenAPI version a schema is built for. The two differ the
// way kube-apiserver's documents differ: v2 refers to #/definitions and
// carries no defaults; v3 refers to #/components/schemas, keeps defaults,
// wraps references that have siblings in allOf, and spells Quantity and
// IntOrString with oneOf.
type flavor int

const (
	v2 flavor = iota
	v3
)

func (f flavor) refPrefix() string {
	if f == v3 {
		return "#/components/schemas/"
	}
	return "#/definitions/"
}

// Extension names Kubernetes uses in its OpenAPI documents.
const (
	extGVK           = "x-kubernetes-group-version-kind"
	extAction        = "x-kubernetes-action"
	extPatchStrategy = "x-kubernetes-patch-strategy"
	extPatchMergeKey = "x-kubernetes-patch-merge-key"
	extListType      = "x-kubernetes-list-type"
	extListMapKeys   = "x-kubernetes-list-map-keys"
	extMapType       = "x-kubernetes-map-type"
	extIntOrString   = "x-kubernetes-int-or-string"
)

var (
	timeType        = reflect.TypeFor[metav1.Time]()
	microTimeType   = reflect.TypeFor[metav1.MicroTime]()
	durationType    = reflect.TypeFor[metav1.Duration]()
	quantityType    = reflect.TypeFor[resource.Quantity]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	rawExtType      = reflect.TypeFor[runtime.RawExtension]()
	bytesType       = reflect.TypeFor[[]byte]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// specialDefinitions are types whose JSON form is not their Go structure;
// each has a definition of its own, as in kube-apiserver's documents.
func specialDefinition(t reflect.Type, f flavor) (spec.Schema, bool) {
	var s spec.Schema
	switch t {
	case timeType:
		s.Description = "Time is a timestamp in RFC 3339 form with second precision, in UTC (for example 2006-01-02T15:04:05Z)."
		s.Type, s.Format = spec.StringOrArray{"string"}, "date-time"
	case microTimeType:
		s.Description = "MicroTime is a timestamp in RFC 3339 form with microsecond precision, in UTC (for example 2006-01-02T15:04:05.000000Z)."
		s.Type, s.Format = spec.StringOrArray{"string"}, "date-time"
	case durationType:
		s.Description = "Duration is a length of time written as a Go duration string, for example \"1m30s\"."
		s.Type = spec.StringOrArray{"string"}
	case quantityType:
		s.Description = "Quantity is a fixed-point number with an optional suffix: a binary SI suffix (Ki, Mi, Gi, Ti, Pi, Ei), a decimal SI suffix (n, u, m, \"\", k, M, G, T, P, E) or a decimal exponent (e3, E6). It is written as a string, for example \"100m\", \"1.5Gi\" or \"2e3\"."
		if f == v3 {
			s.OneOf = []spec.Schema{{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}}}, {SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"number"}}}}
		} else {
			s.Type = spec.StringOrArray{"string"}
		}
	case intOrStringType:
		s.Description = "IntOrString holds either a 32-bit integer or a string; in JSON it is written as the number or the string itself."
		s.Format = "int-or-string"
		if f == v3 {
			s.OneOf = []spec.Schema{{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"integer"}}}, {SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}}}}
			s.AddExtension(extIntOrString, true)
		} else {
			s.Type = spec.StringOrArray{"string"}
		}
	case rawExtType:
		s.Description = "RawExtension holds a complete embedded object (with its own apiVersion and kind) or arbitrary JSON."
		s.Type = spec.StringOrArray{"object"}
	default:
		return s, false
	}
	return s, true
}

// schemaBuilder turns Go types into OpenAPI schemas by reflection, reading
// json and patch struct tags, SwaggerDoc descriptions and the comment
// markers recorded in zz_generated.markers.go.
type schemaBuilder struct {
	flavor flavor
	scheme *runtime.Scheme
	defs   spec.Definitions
	names  map[reflect.Type]string
	// deps are the definitions each definition refers to directly.
	deps map[string][]string
}

func newSchemaBuilder(f flavor, scheme *runtime.Scheme) *schemaBuilder {
	return &schemaBuilder{flavor: f, scheme: scheme, defs: spec.Definitions{}, names: map[reflect.Type]string{}, deps: map[string][]string{}}
}

// definitionName is the name kube-apiserver gives a Go type: its
// OpenAPIModelName, or else its package path turned around at the domain
// (k8s.io/api/core/v1.Node becomes io.k8s.api.core.v1.Node).
func definitionName(t reflect.Type) string {
	if m, ok := reflect.Zero(t).Interface().(interface{ OpenAPIModelName() string }); ok {
		if n := m.OpenAPIModelName(); n != "" {
			return n
		}
	}
	parts := strings.Split(t.PkgPath(), "/")
	domain := strings.Split(parts[0], ".")
	slices.Reverse(domain)
	parts[0] = strings.Join(domain, ".")
	return strings.Join(parts, ".") + "." + t.Name()
}

// ref returns a reference to the definition of the named struct type t,
// building the definition (and those it refers to) first.
func (b *schemaBuilder) ref(t reflect.Type) (spec.Schema, error) {
	name, err := b.define(t)
	if err != nil {
		return spec.Schema{}, err
	}
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef(b.flavor.refPrefix() + name)}}, nil
}

// define builds the definition of t and returns its name.
func (b *schemaBuilder) define(t reflect.Type) (string, error) {
	if name, ok := b.names[t]; ok {
		return name, nil
	}
	name := definitionName(t)
	b.names[t] = name
	if s, ok := specialDefinition(t, b.flavor); ok {
		b.defs[name] = s
		return name, nil
	}
	b.defs[name] = spec.Schema{} // placeholder: recursive types refer to it
	s, err := b.structSchema(t, name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	b.defs[name] = s
	return name, nil
}

func swaggerDoc(t reflect.Type) map[string]string {
	if d, ok := reflect.Zero(t).Interface().(interface{ SwaggerDoc() map[string]string }); ok {
		return d.SwaggerDoc()
	}
	return nil
}

// structSchema builds the object schema of struct type t.
func (b *schemaBuilder) structSchema(t reflect.Type, name string) (spec.Schema, error) {
	s := spec.Schema{SchemaProps: spec.SchemaProps{
		Description: swaggerDoc(t)[""],
		Type:        spec.StringOrArray{"object"},
	}}
	if err := b.addMembers(&s, t, name); err != nil {
		return s, err
	}
	if tm, ok := typeMarkerTable[typeKey(t)]; ok && tm.mapType != "" {
		s.AddExtension(extMapType, tm.mapType)
	}
	if gvks := b.kindsOf(t); len(gvks) > 0 {
		s.AddExtension(extGVK, gvks)
	}
	return s, nil
}

func typeKey(t reflect.Type) string { return t.PkgPath() + "." + t.Name() }

// addMembers adds the properties of t's fields to s, descending into
// inlined embedded structs (TypeMeta).
func (b *schemaBuilder) addMembers(s *spec.Schema, t reflect.Type, owner string) error {
	docs := swaggerDoc(t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		jsonName, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if jsonName == "-" && opts == "" {
			continue
		}
		if f.Anonymous && jsonName == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := b.addMembers(s, ft, owner); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if jsonName == "" {
			jsonName = f.Name
		}
		omitempty := slices.Contains(strings.Split(opts, ","), "omitempty")
		markers := fieldMarkerTable[typeKey(t)+"."+f.Name]
		prop, err := b.propertySchema(f, t, markers, omitempty, docs[jsonName], owner)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		if s.Properties == nil {
			s.Properties = map[string]spec.Schema{}
		}
		s.Properties[jsonName] = prop
		if markers.required || (!omitempty && !markers.optional) {
			s.Required = append(s.Required, jsonName)
		}
	}
	return nil
}

// propertySchema builds the schema of one field.
func (b *schemaBuilder) propertySchema(f reflect.StructField, owner reflect.Type, m fieldMarkers, omitempty bool, doc, ownerName string) (spec.Schema, error) {
	s, err := b.schemaOf(f.Type, ownerName)
	if err != nil {
		return s, err
	}
	s.Description = doc

	if b.flavor == v3 {
		if m.defaultJSON != "" {
			var d any
			if err := json.Unmarshal([]byte(m.defaultJSON), &d); err != nil {
				return s, err
			}
			s.Default = d
		} else if d, ok := enforcedDefault(f.Type, omitempty); ok {
			s.Default = d
		}
	}

	if ps := f.Tag.Get("patchStrategy"); ps != "" {
		s.AddExtension(extPatchStrategy, ps)
	}
	if pk := f.Tag.Get("patchMergeKey"); pk != "" {
		s.AddExtension(extPatchMergeKey, pk)
	}
	ft := f.Type
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	switch {
	case m.listType != "":
		s.AddExtension(extListType, m.listType)
		if len(m.listMapKeys) > 0 {
			s.AddExtension(extListMapKeys, slices.Clone(m.listMapKeys))
		}
	case ft.Kind() == reflect.Slice && ft != bytesType && !scannedPackages[owner.PkgPath()]:
		// A type from outside the Kubernetes API packages: infer the list
		// type from its patch strategy, as server-side apply does.
		if strings.Contains(f.Tag.Get("patchStrategy"), "merge") {
			if key := f.Tag.Get("patchMergeKey"); key != "" {
				s.AddExtension(extListType, "map")
				s.AddExtension(extListMapKeys, []string{key})
			} else if isScalar(ft.Elem()) {
				s.AddExtension(extListType, "set")
			}
		}
	}
	if m.mapType != "" {
		s.AddExtension(extMapType, m.mapType)
	}
	return b.wrapRef(s), nil
}

// wrapRef gives a v3 reference with siblings the allOf form kube-apiserver
// uses, since OpenAPI 3.0 ignores siblings of $ref.
func (b *schemaBuilder) wrapRef(s spec.Schema) spec.Schema {
	if b.flavor != v3 || s.Ref.String() == "" {
		return s
	}
	if reflect.DeepEqual(s, spec.Schema{SchemaProps: spec.SchemaProps{Ref: s.Ref}}) {
		return s
	}
	inner := spec.Schema{SchemaProps: spec.SchemaProps{Ref: s.Ref}}
	s.Ref = spec.Ref{}
	s.AllOf = []spec.Schema{inner}
	return s
}

func isScalar(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// schemaOf returns the schema of a value of type t: a reference for named
// structs, an inline schema otherwise.
func (b *schemaBuilder) schemaOf(t reflect.Type, ownerName string) (spec.Schema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == bytesType {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}, Format: "byte"}}, nil
	}
	if _, ok := specialDefinition(t, b.flavor); ok {
		return b.withDep(ownerName, t)
	}
	var s spec.Schema
	switch t.Kind() {
	case reflect.Struct:
		if t.Name() == "" {
			return b.structSchema(t, ownerName)
		}
		return b.withDep(ownerName, t)
	case reflect.Slice, reflect.Array:
		item, err := b.schemaOf(t.Elem(), ownerName)
		if err != nil {
			return s, err
		}
		if b.flavor == v3 {
			if d, ok := enforcedDefault(t.Elem(), false); ok {
				item.Default = d
				item = b.wrapRef(item)
			}
		}
		s.Type = spec.StringOrArray{"array"}
		s.Items = &spec.SchemaOrArray{Schema: &item}
	case reflect.Map:
		val, err := b.schemaOf(t.Elem(), ownerName)
		if err != nil {
			return s, err
		}
		if b.flavor == v3 {
			if d, ok := enforcedDefault(t.Elem(), false); ok {
				val.Default = d
				val = b.wrapRef(val)
			}
		}
		s.Type = spec.StringOrArray{"object"}
		s.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: &val}
		if tm, ok := typeMarkerTable[typeKey(t)]; ok && t.Name() != "" && tm.mapType != "" {
			s.AddExtension(extMapType, tm.mapType)
		}
	case reflect.Interface:
		s.Type = spec.StringOrArray{"object"}
	default:
		typ, format, ok := primitive(t.Kind())
		if !ok {
			return s, fmt.Errorf("unsupported type %v", t)
		}
		s.Type, s.Format = spec.StringOrArray{typ}, format
		if t.Name() != "" {
			if tm, ok := typeMarkerTable[typeKey(t)]; ok && len(tm.enum) > 0 {
				for _, v := range tm.enum {
					s.Enum = append(s.Enum, v)
				}
			}
		}
	}
	return s, nil
}

func (b *schemaBuilder) withDep(ownerName string, t reflect.Type) (spec.Schema, error) {
	s, err := b.ref(t)
	if err != nil {
		return s, err
	}
	name := b.names[t]
	if !slices.Contains(b.deps[ownerName], name) {
		b.deps[ownerName] = append(b.deps[ownerName], name)
	}
	return s, nil
}

// primitive maps a Go kind to an OpenAPI type and format, as Kubernetes'
// generator does.
func primitive(k reflect.Kind) (typ, format string, ok bool) {
	switch k {
	case reflect.String:
		return "string", "", true
	case reflect.Bool:
		return "boolean", "", true
	case reflect.Int, reflect.Int16, reflect.Int32, reflect.Uint, reflect.Uint16:
		return "integer", "int32", true
	case reflect.Int64, reflect.Uint32, reflect.Uint64:
		return "integer", "int64", true
	case reflect.Int8, reflect.Uint8:
		return "integer", "byte", true
	case reflect.Float64:
		return "number", "double", true
	case reflect.Float32:
		return "number", "float", true
	}
	return "", "", false
}

// enforcedDefault is the default Kubernetes' generator writes for a value
// that JSON decoding leaves at its zero value: {} for a plain struct, and
// the zero scalar for a field that is always serialized. Types with their
// own JSON decoding (Time, Quantity, ...) decode null and get none.
func enforcedDefault(t reflect.Type, omitempty bool) (any, bool) {
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil, false
	}
	switch t.Kind() {
	case reflect.Struct:
		if t.NumField() == 1 && t.Field(0).Anonymous {
			return enforcedDefault(t.Field(0).Type, omitempty)
		}
		return map[string]any{}, true
	case reflect.String:
		if !omitempty {
			return "", true
		}
	case reflect.Bool:
		if !omitempty {
			return false, true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if !omitempty {
			return 0, true
		}
	}
	return nil, false
}

// kindsOf lists the group-version-kinds the scheme registers t under,
// sorted, internal versions left out.
func (b *schemaBuilder) kindsOf(t reflect.Type) []any {
	obj, ok := reflect.New(t).Interface().(runtime.Object)
	if !ok || b.scheme == nil {
		return nil
	}
	kinds, _, err := b.scheme.ObjectKinds(obj)
	if err != nil {
		return nil
	}
	var gvks []schema.GroupVersionKind
	for _, k := range kinds {
		if k.Version == runtime.APIVersionInternal || slices.Contains(gvks, k) {
			continue
		}
		gvks = append(gvks, k)
	}
	sort.Slice(gvks, func(i, j int) bool {
		a, c := gvks[i], gvks[j]
		if a.Group != c.Group {
			return a.Group < c.Group
		}
		if a.Version != c.Version {
			return a.Version < c.Version
		}
		return a.Kind < c.Kind
	})
	out := make([]any, 0, len(gvks))
	for _, k := range gvks {
		out = append(out, gvkExtension(k))
	}
	return out
}

func gvkExtension(k schema.GroupVersionKind) map[string]any {
	return map[string]any{"group": k.Group, "version": k.Version, "kind": k.Kind}
}
