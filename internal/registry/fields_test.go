package registry

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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

// TestEventSource: a core Event is selected by source with its source
// component, or else, as for an event posted through events.k8s.io, with
// its reporting controller, as kube-apiserver selects it.
func TestEventSource(t *testing.T) {
	for _, c := range []struct {
		e    corev1.Event
		want string
	}{
		{corev1.Event{Source: corev1.EventSource{Component: "kubelet"}, ReportingController: "ctl"}, "kubelet"},
		{corev1.Event{ReportingController: "node-controller"}, "node-controller"},
		{corev1.Event{}, ""},
	} {
		if got := Events.SelectableFields(&c.e)["source"]; got != c.want {
			t.Errorf("%+v: source %q, want %q", c.e, got, c.want)
		}
		if got := EventsV1.SelectableFields(EventFromCore(&c.e))["source"]; got != c.want {
			t.Errorf("%+v through events.k8s.io: source %q, want %q", c.e, got, c.want)
		}
	}
}
