package registry

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAPIVersion checks that APIVersion spells GroupVersion, for the
// registered resources and for one that is not.
func TestAPIVersion(t *testing.T) {
	unregistered := &Resource{GroupVersion: schema.GroupVersion{Group: "example.com", Version: "v1alpha1"}, Name: "things"}
	for _, r := range append(All(), unregistered) {
		t.Run(r.GroupVersion.String()+"/"+r.Name, func(t *testing.T) {
			if got, want := r.APIVersion(), r.GroupVersion.String(); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
	var v string
	if got := testing.AllocsPerRun(10, func() { v = Leases.APIVersion() }); got != 0 {
		t.Errorf("Leases.APIVersion allocates %v times (%q), want none", got, v)
	}
}
