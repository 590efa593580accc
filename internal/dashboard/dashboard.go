// Package dashboard holds leasehold's web dashboard: one page that shows a
// fleet at a glance, live. It lists the nodes with their Ready condition,
// taints and the age of their heartbeat (their Lease in kube-node-lease),
// the other Leases (leader elections) with their holders, and the server
// replicas' identity Leases in kube-system.
//
// The files are static and embedded in the binary; `leasehold serve`
// serves them under /dashboard/ without credentials, since they carry no
// data. The page asks for a bearer token, keeps it in the tab's
// sessionStorage only, and reads everything through the Kubernetes API
// with it: a paged list, then a watch from the list's resourceVersion,
// listing again after 410 Gone, as client-go's reflector does. So RBAC
// decides what a user sees, and the audit log records the page's requests
// like any client's. A read-only user needs get, list and watch on nodes
// and leases.
//
// Ages are the Lease's renewTime against the server's clock, which the
// page learns from the Date header of the server's answers (so a browser
// whose clock is off still shows them right), and are for display only:
// whether a node is Ready is the node lifecycle controller's judgement,
// read from the Node.
package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed assets
var assets embed.FS

// Files returns the dashboard's files: index.html and what it loads.
func Files() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return sub
}
