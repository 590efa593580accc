//go:build ignore

// gen_markers writes zz_generated.markers.go from the comment markers of the
// Kubernetes API sources in the module cache. Run it with go generate.
package main

import (
	"log"
	"os"

	"github.com/leasehold/leasehold/internal/openapi/internal/markergen"
)

func main() {
	pkgs, err := markergen.ModulePackages()
	if err != nil {
		log.Fatal(err)
	}
	m, err := markergen.Scan(pkgs)
	if err != nil {
		log.Fatal(err)
	}
	src, err := markergen.Render("openapi", m)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("zz_generated.markers.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
