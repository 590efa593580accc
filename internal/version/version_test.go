package version

import (
	"strings"
	"testing"
)

// TestInfo: /version is kube-apiserver's shape for the version leasehold
// speaks.
func TestInfo(t *testing.T) {
	i := Info()
	if "v"+i.Major+"."+i.Minor+".0" != KubernetesVersion || !strings.HasPrefix(i.GitVersion, KubernetesVersion+"+leasehold-") {
		t.Errorf("version %s.%s, gitVersion %s; want those of %s", i.Major, i.Minor, i.GitVersion, KubernetesVersion)
	}
	if i.EmulationMajor != i.Major || i.EmulationMinor != i.Minor || i.MinCompatibilityMajor != "1" || i.MinCompatibilityMinor != "32" {
		t.Errorf("emulation %s.%s, minimum compatibility %s.%s; want 1.33 and 1.32", i.EmulationMajor, i.EmulationMinor, i.MinCompatibilityMajor, i.MinCompatibilityMinor)
	}
	if i.GitTreeState != "" && i.GitTreeState != "clean" && i.GitTreeState != "dirty" {
		t.Errorf("gitTreeState %q", i.GitTreeState)
	}
}
