// Command kube-apiserver is the upstream Kubernetes API server, built from
// the k8s.io/kubernetes Go module at the release that matches leasehold's
// k8s.io libraries. The compare scenario of hack/bench.sh builds it into
// bin/ and runs the same `leasehold bench fleet` against it and against
// leasehold, on one machine and the same kind of etcd member.
//
// It lives in a module of its own so that leasehold's module does not
// depend on Kubernetes' server code. k8s.io/kubernetes replaces its
// staging modules (k8s.io/api, k8s.io/apiserver, ...) with directories of
// its own repository; go.mod here points each at its published release.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
