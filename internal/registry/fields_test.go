package registry

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
)

// TestFields: every resource can be selected by metadata.name, by
// metadata.namespace when it is namespaced, and by its own fields, with
// their values; by nothing else.
func TestFields(t *testing.T) {
	for _, r := range All() {
		obj := r.New()
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		m.SetName("n")
		if r.Namespaced {
			m.SetNamespace("ns")
		}
		want := map[string]string{"metadata.name": "n"}
		if r.Namespaced {
			want["metadata.namespace"] = "ns"
		}
		if r.SelectableFields != nil {
			for k, v := range r.SelectableFields(obj) {
				want[k] = v
			}
		}
		f := r.Fields("n", m.GetNamespace(), obj)
		for field, v := range want {
			if !f.Has(field) || f.Get(field) != v {
				t.Errorf("%s %s: %v %q, want %q", r.Name, field, f.Has(field), f.Get(field), v)
			}
		}
		for _, field := range []string{"metadata.namespace", "no.such.field"} {
			if _, ok := want[field]; !ok && (f.Has(field) || f.Get(field) != "") {
				t.Errorf("%s %s: %v %q, want no such field", r.Name, field, f.Has(field), f.Get(field))
			}
		}
	}
}
