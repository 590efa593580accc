package openapi

import (
	"bytes"
	"os"
	"testing"

	"github.com/leasehold/leasehold/internal/openapi/internal/markergen"
)

// TestMarkersUpToDate regenerates zz_generated.markers.go from the API
// sources of the module's k8s.io/api and k8s.io/apimachinery and compares:
// after a dependency upgrade, run go generate ./internal/openapi.
func TestMarkersUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("scans the Kubernetes API sources")
	}
	pkgs, err := markergen.ModulePackages()
	if err != nil {
		t.Fatal(err)
	}
	m, err := markergen.Scan(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	want, err := markergen.Render("openapi", m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("zz_generated.markers.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("zz_generated.markers.go is stale: run go generate ./internal/openapi")
	}
}
