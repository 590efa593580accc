package auth_test

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/internal/auth"
)

// A node may update its own Lease but not another node's.
func ExampleNodeAuthorizer() {
	web1 := auth.NodeUser("web-1")
	lease := func(name string) auth.Attributes {
		return auth.Attributes{User: web1, Verb: "update", ResourceRequest: true,
			APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: name}
	}
	for _, name := range []string{"web-1", "web-2"} {
		d, reason, _ := auth.NodeAuthorizer{}.Authorize(context.Background(), lease(name))
		fmt.Printf("%s: %v %q\n", name, d, reason)
	}
	// Output:
	// web-1: allow ""
	// web-2: no opinion "can only access node lease with the same name as the requesting node"
}
