// Package version holds the leasehold version, set at build time with
// -ldflags "-X github.com/leasehold/leasehold/internal/version.Version=…".
package version

import (
	"runtime"

	"k8s.io/apimachinery/pkg/version"
)

// Version is leasehold's own version.
var Version = "v0.1.0-dev"

// KubernetesVersion is the Kubernetes API version leasehold speaks; /version
// reports it so that clients' version checks pass.
const KubernetesVersion = "v1.33.0"

// Info is what GET /version returns.
func Info() version.Info {
	return version.Info{
		Major:      "1",
		Minor:      "33",
		GitVersion: KubernetesVersion + "+leasehold-" + Version,
		GoVersion:  runtime.Version(),
		Compiler:   runtime.Compiler,
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
}
