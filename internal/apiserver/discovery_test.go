package apiserver_test

import (
	"testing"

	"k8s.io/client-go/discovery"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestStorageVersionHash: the resource lists carry kube-apiserver's
// storageVersionHash, the hash of what each resource is stored as: these
// are kube-apiserver 1.37's own values (events.k8s.io Events are stored as
// v1 Events); reviews and subresources have none.
func TestStorageVersionHash(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	dc, err := discovery.NewDiscoveryClientForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"v1": {"events": "r2yiGXH7wu8=", "namespaces": "Q3oi5N2YM8M=", "nodes": "XwShjMxG9Fs=", "resourcequotas": "8uhSgffRX6w=",
			"nodes/status": "", "namespaces/finalize": ""},
		"coordination.k8s.io/v1":       {"leases": "gqkMMb/YqFM="},
		"events.k8s.io/v1":             {"events": "r2yiGXH7wu8="},
		"rbac.authorization.k8s.io/v1": {"clusterrolebindings": "48tpQ8gZHFc=", "clusterroles": "bYE5ZWDrJ44=", "rolebindings": "eGsCzGH6b1g=", "roles": "7FuwZcIIItM="},
		"authorization.k8s.io/v1":      {"selfsubjectaccessreviews": ""},
	}
	for gv, resources := range want {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range list.APIResources {
			got[r.Name] = r.StorageVersionHash
		}
		for name, hash := range resources {
			if h, ok := got[name]; !ok || h != hash {
				t.Errorf("%s %s: storageVersionHash %q (listed %v), want %q", gv, name, h, ok, hash)
			}
		}
	}
}
