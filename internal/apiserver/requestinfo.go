package apiserver

import (
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/leasehold/leasehold/internal/registry"
)

// requestInfo is what the URL and method say, following kube-apiserver's
// grammar:
//
//	/api/v1[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]
//	/apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]
//
// where /namespaces/{name}/{status|finalize} is a subresource of the
// namespace itself.
type requestInfo struct {
	resourceRequest bool
	verb            string // get list watch create update patch delete deletecollection
	gv              schema.GroupVersion
	resource        string
	namespace       string
	name            string
	subresource     string
	// query is the URL query, parsed once for every use the request makes
	// of it; nil when the request is not for a resource.
	query url.Values
}

var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

func parseRequest(r *http.Request) requestInfo {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var info requestInfo
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		info.gv = schema.GroupVersion{Version: parts[1]}
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		info.gv = schema.GroupVersion{Group: parts[1], Version: parts[2]}
		parts = parts[3:]
	default:
		return info
	}
	watchPath := false
	if parts[0] == "watch" {
		// The deprecated /watch/ form, still used by a few clients.
		watchPath, parts = true, parts[1:]
		if len(parts) == 0 {
			return info
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		info.namespace = parts[1]
		if len(parts) > 2 && !namespaceSubresources[parts[2]] {
			parts = parts[2:]
		} else {
			info.namespace = ""
			info.resource, info.name = "namespaces", parts[1]
			if len(parts) > 2 {
				info.subresource = parts[2]
			}
			parts = nil
		}
	}
	if parts != nil {
		info.resource = parts[0]
		if len(parts) > 1 {
			info.name = parts[1]
		}
		if len(parts) > 2 {
			info.subresource = strings.Join(parts[2:], "/")
		}
	}
	info.resourceRequest = true
	info.query = r.URL.Query()
	isWatch := watchPath || info.query.Get("watch") == "true" || info.query.Get("watch") == "1"
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case isWatch:
			info.verb = "watch"
		case info.name == "":
			info.verb = "list"
		default:
			info.verb = "get"
		}
	case http.MethodPost:
		info.verb = "create"
	case http.MethodPut:
		info.verb = "update"
	case http.MethodPatch:
		info.verb = "patch"
	case http.MethodDelete:
		if info.name == "" {
			info.verb = "deletecollection"
		} else {
			info.verb = "delete"
		}
	default:
		info.verb = strings.ToLower(r.Method)
	}
	return info
}

// lookup finds the registered resource the request is about.
func (info requestInfo) lookup() (*registry.Resource, bool) {
	return registry.Lookup(info.gv, info.resource)
}

func notFoundPath(r *http.Request) error {
	return apierrors.NewGenericServerResponse(http.StatusNotFound, "get", schema.GroupResource{}, "", "the server could not find the requested resource", 0, false)
}

func unauthorized() error { return apierrors.NewUnauthorized("Unauthorized") }
