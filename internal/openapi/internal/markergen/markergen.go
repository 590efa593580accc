// Package markergen reads the comment markers of Kubernetes API types from
// their Go source and renders them as a Go table.
//
// The markers (+optional, +required, +listType, +listMapKey, +mapType,
// +structType, +default, +enum) shape the OpenAPI schema kube-apiserver
// publishes, but they live in comments, which reflection cannot see.
// leasehold's openapi package builds its schemas by reflection and consults
// the table this package generates for everything comments decide.
package markergen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Package is one Go package to scan: its import path and source directory.
type Package struct {
	Path string
	Dir  string
}

// Field holds the markers of one struct field that change its schema.
type Field struct {
	Optional    bool     // +optional on a field whose json tag lacks omitempty
	Required    bool     // +required on a field whose json tag has omitempty
	ListType    string   // +listType
	ListMapKeys []string // +listMapKey, in order
	MapType     string   // +mapType
	Default     string   // +default, as JSON
}

func (f Field) empty() bool { return reflect.DeepEqual(f, Field{}) }

// Type holds the markers of one named type.
type Type struct {
	MapType string   // +structType on a struct, +mapType on a map type
	Enum    []string // values of a +enum string type, sorted
}

// Markers is what a scan found, keyed by "importpath.Type" and
// "importpath.Type.GoField".
type Markers struct {
	Packages []string
	Fields   map[string]Field
	Types    map[string]Type
}

// Scan parses the non-test Go files of each package.
func Scan(pkgs []Package) (*Markers, error) {
	m := &Markers{Fields: map[string]Field{}, Types: map[string]Type{}}
	for _, p := range pkgs {
		if err := m.scanPackage(p); err != nil {
			return nil, fmt.Errorf("package %s: %w", p.Path, err)
		}
		m.Packages = append(m.Packages, p.Path)
	}
	sort.Strings(m.Packages)
	return m, nil
}

func (m *Markers) scanPackage(p Package) error {
	entries, err := os.ReadDir(p.Dir)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments)
		if err != nil {
			return err
		}
		files = append(files, f)
	}

	// String constants by type, for +enum, and by name, for +default=ref(...).
	constsByType := map[string][]string{}
	constsByName := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						continue
					}
					constsByName[name.Name] = v
					if id, ok := vs.Type.(*ast.Ident); ok {
						constsByType[id.Name] = append(constsByType[id.Name], v)
					}
				}
			}
		}
	}

	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				tags := commentTags(doc)
				key := p.Path + "." + ts.Name.Name
				var t Type
				switch typ := ts.Type.(type) {
				case *ast.StructType:
					t.MapType = first(tags["structType"])
					if err := m.scanStruct(key, typ, constsByName); err != nil {
						return fmt.Errorf("%s: %w", ts.Name.Name, err)
					}
				case *ast.MapType:
					t.MapType = first(tags["mapType"])
				}
				if _, ok := tags["enum"]; ok {
					vals := slices.Clone(constsByType[ts.Name.Name])
					sort.Strings(vals)
					t.Enum = slices.Compact(vals)
				}
				if t.MapType != "" || len(t.Enum) > 0 {
					m.Types[key] = t
				}
			}
		}
	}
	return nil
}

func (m *Markers) scanStruct(typeKey string, st *ast.StructType, consts map[string]string) error {
	for _, field := range st.Fields.List {
		if len(field.Names) == 0 {
			continue // embedded: its own type carries its markers
		}
		tags := commentTags(field.Doc)
		jsonTag := ""
		if field.Tag != nil {
			raw, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				return err
			}
			jsonTag = reflect.StructTag(raw).Get("json")
		}
		omitempty := slices.Contains(strings.Split(jsonTag, ",")[1:], "omitempty")
		_, optional := tags["optional"]
		_, required := tags["required"]
		var fm Field
		fm.Optional = optional && !required && !omitempty
		fm.Required = required && !optional && omitempty
		fm.ListType = first(tags["listType"])
		fm.ListMapKeys = tags["listMapKey"]
		fm.MapType = first(tags["mapType"])
		if d, ok := tags["default"]; ok && len(d) > 0 {
			def, err := defaultJSON(d[0], consts)
			if err != nil {
				return fmt.Errorf("field %s: %w", field.Names[0].Name, err)
			}
			fm.Default = def
		}
		if fm.empty() {
			continue
		}
		for _, name := range field.Names {
			m.Fields[typeKey+"."+name.Name] = fm
		}
	}
	return nil
}

// defaultJSON turns a +default value into JSON; ref(Name) names a string
// constant of the same package.
func defaultJSON(v string, consts map[string]string) (string, error) {
	if inner, ok := strings.CutPrefix(v, "ref("); ok {
		name := strings.TrimSuffix(inner, ")")
		name = name[strings.LastIndex(name, ".")+1:]
		c, ok := consts[name]
		if !ok {
			return "", fmt.Errorf("default refers to unknown constant %q", inner)
		}
		b, err := json.Marshal(c)
		return string(b), err
	}
	var x any
	if err := json.Unmarshal([]byte(v), &x); err != nil {
		return "", fmt.Errorf("default %q is not JSON: %w", v, err)
	}
	b, err := json.Marshal(x)
	return string(b), err
}

// commentTags extracts "+name=value" and "+name" lines, as Kubernetes'
// generators read them: one tag per line, a tag may repeat.
func commentTags(cg *ast.CommentGroup) map[string][]string {
	out := map[string][]string{}
	if cg == nil {
		return out
	}
	for _, c := range cg.List {
		line := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
		if !strings.HasPrefix(line, "+") {
			continue
		}
		line = line[1:]
		name, value, hasValue := strings.Cut(line, "=")
		if strings.ContainsAny(name, " \t") {
			continue
		}
		if !hasValue {
			out[name] = append(out[name], "")
			continue
		}
		out[name] = append(out[name], value)
	}
	return out
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// Render writes the markers as Go source of package pkg, declaring
// scannedPackages, fieldMarkerTable and typeMarkerTable.
func Render(pkg string, m *Markers) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by markergen from the Kubernetes API sources. DO NOT EDIT.\n\npackage %s\n\n", pkg)
	b.WriteString("// scannedPackages lists the Go packages whose comment markers are recorded\n// in fieldMarkerTable and typeMarkerTable.\nvar scannedPackages = map[string]bool{\n")
	for _, p := range m.Packages {
		fmt.Fprintf(&b, "\t%q: true,\n", p)
	}
	b.WriteString("}\n\n// fieldMarkerTable holds, per \"importpath.Type.GoField\", the markers that\n// change a field's schema.\nvar fieldMarkerTable = map[string]fieldMarkers{\n")
	for _, k := range sortedKeys(m.Fields) {
		f := m.Fields[k]
		var parts []string
		if f.Optional {
			parts = append(parts, "optional: true")
		}
		if f.Required {
			parts = append(parts, "required: true")
		}
		if f.ListType != "" {
			parts = append(parts, fmt.Sprintf("listType: %q", f.ListType))
		}
		if len(f.ListMapKeys) > 0 {
			parts = append(parts, fmt.Sprintf("listMapKeys: %#v", f.ListMapKeys))
		}
		if f.MapType != "" {
			parts = append(parts, fmt.Sprintf("mapType: %q", f.MapType))
		}
		if f.Default != "" {
			parts = append(parts, fmt.Sprintf("defaultJSON: %q", f.Default))
		}
		fmt.Fprintf(&b, "\t%q: {%s},\n", k, strings.Join(parts, ", "))
	}
	b.WriteString("}\n\n// typeMarkerTable holds, per \"importpath.Type\", the markers of named\n// types: atomic structs and maps, and the values of enums.\nvar typeMarkerTable = map[string]typeMarkers{\n")
	for _, k := range sortedKeys(m.Types) {
		t := m.Types[k]
		var parts []string
		if t.MapType != "" {
			parts = append(parts, fmt.Sprintf("mapType: %q", t.MapType))
		}
		if len(t.Enum) > 0 {
			parts = append(parts, fmt.Sprintf("enum: %#v", t.Enum))
		}
		fmt.Fprintf(&b, "\t%q: {%s},\n", k, strings.Join(parts, ", "))
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// apimachineryPackages are the packages of k8s.io/apimachinery whose types
// appear in API objects.
var apimachineryPackages = []string{
	"pkg/apis/meta/v1",
	"pkg/api/resource",
	"pkg/runtime",
	"pkg/util/intstr",
	"pkg/version",
}

// ModulePackages lists the API packages of k8s.io/api (every package with a
// types.go) and the apimachinery packages API objects use, located through
// `go list` in the current module.
func ModulePackages() ([]Package, error) {
	dirs, err := moduleDirs("k8s.io/api", "k8s.io/apimachinery")
	if err != nil {
		return nil, err
	}
	var pkgs []Package
	apiDir := dirs["k8s.io/api"]
	err = filepath.WalkDir(apiDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "roundtrip") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "types.go" {
			return nil
		}
		rel, err := filepath.Rel(apiDir, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkgs = append(pkgs, Package{Path: "k8s.io/api/" + filepath.ToSlash(rel), Dir: filepath.Dir(path)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, p := range apimachineryPackages {
		pkgs = append(pkgs, Package{Path: "k8s.io/apimachinery/" + p, Dir: filepath.Join(dirs["k8s.io/apimachinery"], filepath.FromSlash(p))})
	}
	return pkgs, nil
}

func moduleDirs(mods ...string) (map[string]string, error) {
	args := append([]string{"list", "-m", "-f", "{{.Path}} {{.Dir}}"}, mods...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	dirs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mod, dir, ok := strings.Cut(line, " ")
		if !ok || dir == "" {
			return nil, fmt.Errorf("go list -m: no source directory for %q (run go mod download)", line)
		}
		dirs[mod] = dir
	}
	return dirs, nil
}
