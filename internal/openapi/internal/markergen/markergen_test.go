package markergen

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const source = `package sample

// Phase is where a thing is.
// +enum
type Phase string

const (
	PhaseUp   Phase = "Up"
	PhaseDown Phase = "Down"
	other           = "not a phase"
)

const DefaultPort = "8080"

// Ref points at something.
// +structType=atomic
type Ref struct {
	Name string ` + "`json:\"name\"`" + `
}

// Labels is a plain map.
// +mapType=atomic
type Labels map[string]string

type Thing struct {
	// +optional
	Note string ` + "`json:\"note\"`" + `
	// +required
	Owner string ` + "`json:\"owner,omitempty\"`" + `
	// +optional
	Plain string ` + "`json:\"plain,omitempty\"`" + `
	Must string ` + "`json:\"must\"`" + `
	// +listType=map
	// +listMapKey=name
	// +listMapKey=kind
	Refs []Ref ` + "`json:\"refs,omitempty\"`" + `
	// +listType=set
	Tags []string ` + "`json:\"tags,omitempty\"`" + `
	// +mapType=atomic
	Extra map[string]string ` + "`json:\"extra,omitempty\"`" + `
	// +default="TCP"
	Protocol string ` + "`json:\"protocol,omitempty\"`" + `
	// +default=ref(DefaultPort)
	Port string ` + "`json:\"port,omitempty\"`" + `
	// +default={"a": 1}
	Shape map[string]int ` + "`json:\"shape,omitempty\"`" + `
	// + not a marker
	Prose string ` + "`json:\"prose,omitempty\"`" + `
}
`

func TestScan(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "types.go"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "types_test.go"), []byte("package sample\n\ntype Ignored struct {\n\t// +listType=atomic\n\tX []int\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Scan([]Package{{Path: "example.com/sample", Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	wantFields := map[string]Field{
		"example.com/sample.Thing.Note":     {Optional: true},
		"example.com/sample.Thing.Owner":    {Required: true},
		"example.com/sample.Thing.Refs":     {ListType: "map", ListMapKeys: []string{"name", "kind"}},
		"example.com/sample.Thing.Tags":     {ListType: "set"},
		"example.com/sample.Thing.Extra":    {MapType: "atomic"},
		"example.com/sample.Thing.Protocol": {Default: `"TCP"`},
		"example.com/sample.Thing.Port":     {Default: `"8080"`},
		"example.com/sample.Thing.Shape":    {Default: `{"a":1}`},
	}
	if !reflect.DeepEqual(m.Fields, wantFields) {
		t.Errorf("fields:\n got %#v\nwant %#v", m.Fields, wantFields)
	}
	wantTypes := map[string]Type{
		"example.com/sample.Phase":  {Enum: []string{"Down", "Up"}},
		"example.com/sample.Ref":    {MapType: "atomic"},
		"example.com/sample.Labels": {MapType: "atomic"},
	}
	if !reflect.DeepEqual(m.Types, wantTypes) {
		t.Errorf("types:\n got %#v\nwant %#v", m.Types, wantTypes)
	}

	src, err := Render("sample", m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"package sample",
		`"example.com/sample.Thing.Refs":`,
		`listMapKeys: []string{"name", "kind"}`,
		`enum: []string{"Down", "Up"}`,
		`"example.com/sample": true`,
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("rendered source lacks %q:\n%s", want, src)
		}
	}
}

func TestScanErrors(t *testing.T) {
	tests := []struct {
		name, src string
	}{
		{"bad default", "package p\ntype T struct {\n\t// +default=nope\n\tX string `json:\"x\"`\n}\n"},
		{"unknown ref", "package p\ntype T struct {\n\t// +default=ref(Missing)\n\tX string `json:\"x\"`\n}\n"},
		{"syntax", "package p\ntype T struct {"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "types.go"), []byte(tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Scan([]Package{{Path: "p", Dir: dir}}); err == nil {
				t.Error("Scan succeeded, want an error")
			}
		})
	}
}
