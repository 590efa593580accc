package registry

import (
	"maps"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
)

// TestFields: the lazy fields answer as the whole set does, for every
// resource and every field it can be selected by.
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
		set := r.ObjectFields("n", m.GetNamespace(), obj)
		lazy := r.Fields("n", m.GetNamespace(), obj)
		for _, field := range append(slices.Collect(maps.Keys(set)), "metadata.namespace", "no.such.field") {
			if lazy.Has(field) != set.Has(field) || lazy.Get(field) != set.Get(field) {
				t.Errorf("%s %s: lazy %v %q, set %v %q", r.Name, field, lazy.Has(field), lazy.Get(field), set.Has(field), set.Get(field))
			}
		}
	}
}
