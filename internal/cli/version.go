package cli

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/internal/version"
)

func init() {
	register(&command{name: "version", summary: "print the version", run: runVersion})
}

func runVersion(_ context.Context, args []string) error {
	fs := newFlagSet("version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	info := version.Info()
	fmt.Printf("leasehold %s (Kubernetes API %s, %s, %s)\n", version.Version, version.KubernetesVersion, info.GoVersion, info.Platform)
	return nil
}
