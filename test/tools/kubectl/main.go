// Command kubectl is the upstream kubectl, built from its Go module so that
// leasehold's end-to-end tests can run the real client on machines that do
// not have one installed. hack/install-test-tools.sh builds it into bin/.
//
// It lives in its own Go module so that leasehold's module does not depend
// on kubectl's code.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// RunNoErrOutput leaves error printing to CheckErr, which formats API
	// errors ("Error from server (NotFound): ...") and picks the exit code
	// the way the kubectl release binary does.
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		cmdutil.CheckErr(err)
	}
	os.Exit(0)
}
