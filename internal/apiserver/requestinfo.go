package apiserver

import (
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
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
	// named: the name is the path's, not a list's field selector's.
	named       bool
	subresource string
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
	info.named = info.name != ""
	info.query = r.URL.Query()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watchPath:
			info.verb = "watch"
		case info.name != "":
			// As kube-apiserver: ?watch on an object's own path is a get.
			info.verb = "get"
		default:
			info.verb = "list"
			if queryBool(info.query, "watch") {
				info.verb = "watch"
			}
			// A list or watch of one name asks for that object: RBAC's
			// resourceNames and the audit log see its name, as
			// kube-apiserver's request info gives it.
			info.name = selectedName(info.query)
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

// queryBool reads a boolean query parameter as apimachinery's parameter
// codec does: present with any first value but "0" or "false" (of any
// case) is true.
func queryBool(q url.Values, key string) bool {
	v := q[key]
	var b bool
	_ = runtime.Convert_Slice_string_To_bool(&v, &b, nil) // it never fails
	return b
}

// selectedName returns the name a list's field selector asks for exactly
// (metadata.name=N), or "" for none, an invalid selector, or a name no
// path could hold.
func selectedName(q url.Values) string {
	sel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return ""
	}
	name, ok := sel.RequiresExactMatch("metadata.name")
	if !ok || len(path.IsValidPathSegmentName(name)) > 0 {
		return ""
	}
	return name
}

// lookup finds the registered resource the request is about.
func (info requestInfo) lookup() (*registry.Resource, bool) {
	return registry.Lookup(info.gv, info.resource)
}

func notFoundPath(r *http.Request) error {
	return apierrors.NewGenericServerResponse(http.StatusNotFound, "get", schema.GroupResource{}, "", "the server could not find the requested resource", 0, false)
}

func unauthorized() error { return apierrors.NewUnauthorized("Unauthorized") }
