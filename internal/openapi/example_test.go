package openapi_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sort"

	"k8s.io/apimachinery/pkg/version"

	"github.com/leasehold/leasehold/internal/openapi"
	"github.com/leasehold/leasehold/internal/registry"
)

// Build the documents once and serve them; clients find each group
// version's OpenAPI 3.0 document through /openapi/v3.
func ExampleNew() {
	docs, err := openapi.New(registry.All(), version.Info{GitVersion: "v1.32.0"})
	if err != nil {
		panic(err)
	}
	rec := httptest.NewRecorder()
	docs.ServeHTTP(rec, httptest.NewRequest("GET", "/openapi/v3", nil))

	var discovery struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &discovery); err != nil {
		panic(err)
	}
	var keys []string
	for k := range discovery.Paths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Println(k)
	}
	fmt.Println(docs.Definitions()["io.k8s.api.coordination.v1.Lease"].Description)
	// Output:
	// api
	// api/v1
	// apis
	// apis/authentication.k8s.io
	// apis/authentication.k8s.io/v1
	// apis/authorization.k8s.io
	// apis/authorization.k8s.io/v1
	// apis/coordination.k8s.io
	// apis/coordination.k8s.io/v1
	// apis/coordination.k8s.io/v1beta1
	// apis/events.k8s.io
	// apis/events.k8s.io/v1
	// apis/rbac.authorization.k8s.io
	// apis/rbac.authorization.k8s.io/v1
	// version
	// Lease defines a lease concept.
}
