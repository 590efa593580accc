// Package version holds the leasehold version, set at build time with
// -ldflags "-X github.com/leasehold/leasehold/internal/version.Version=…".
package version

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/version"
)

// Version is leasehold's own version.
var Version = "v0.1.0-dev"

// Commit is the commit the binary was built from, set at build time as
// Version is ("" when unknown).
var Commit = ""

// KubernetesVersion is the Kubernetes API version leasehold speaks; /version
// reports it so that clients' version checks pass.
const KubernetesVersion = "v1.33.0"

// kubeMinor is KubernetesVersion's minor version.
const kubeMinor = 33

// Info is what GET /version returns: kube-apiserver 1.33's fields, with
// its emulation version (its own) and minimum compatibility version (one
// minor version back), and the commit the binary was built from when the
// Go toolchain recorded it.
func Info() version.Info {
	commit, treeState := vcs()
	return version.Info{
		Major:                 "1",
		Minor:                 strconv.Itoa(kubeMinor),
		EmulationMajor:        "1",
		EmulationMinor:        strconv.Itoa(kubeMinor),
		MinCompatibilityMajor: "1",
		MinCompatibilityMinor: strconv.Itoa(kubeMinor - 1),
		GitVersion:            KubernetesVersion + "+leasehold-" + Version,
		GitCommit:             commit,
		GitTreeState:          treeState,
		GoVersion:             runtime.Version(),
		Compiler:              runtime.Compiler,
		Platform:              runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// vcs returns the commit of the build and whether its tree was "clean" or
// "dirty": Commit, and the state Version's -dirty suffix tells (git
// describe --dirty, as make build sets them), or else what the go command
// records in a build from a git checkout; "" for both when neither says.
var vcs = sync.OnceValues(func() (commit, treeState string) {
	if Commit != "" {
		treeState = "clean"
		if strings.HasSuffix(Version, "-dirty") {
			treeState = "dirty"
		}
		return Commit, treeState
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", ""
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			treeState = "clean"
			if s.Value == "true" {
				treeState = "dirty"
			}
		}
	}
	return commit, treeState
})
