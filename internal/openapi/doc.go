// Package openapi builds and serves the OpenAPI documents of leasehold's API:
// /openapi/v2 (Swagger 2.0, JSON or protobuf) and /openapi/v3 with one
// OpenAPI 3.0 document per group version, as kube-apiserver publishes them,
// so that kubectl explain, kubectl apply and client-side validation work
// unchanged.
//
// Schemas are built by reflection from the Go types of k8s.io/api and
// k8s.io/apimachinery: names from OpenAPIModelName (or the package path),
// descriptions from SwaggerDoc, property names and requiredness from json
// tags, patch extensions from patchStrategy/patchMergeKey tags. What only
// the types' comment markers say (+optional on a field without omitempty,
// +listType, +listMapKey, +mapType, +structType, +default, +enum) comes
// from zz_generated.markers.go, which `go generate` rebuilds from the
// sources in the module cache; a test fails when it is stale.
//
// Paths and operations follow the verbs of each registry.Resource. All
// documents are built and encoded once by New and served from memory.
package openapi
