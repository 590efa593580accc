package openapi

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/leasehold/leasehold/internal/registry"
)

// Media types of request and response bodies.
const (
	mediaJSON          = "application/json"
	mediaYAML          = "application/yaml"
	mediaProtobuf      = "application/vnd.kubernetes.protobuf"
	mediaJSONWatch     = "application/json;stream=watch"
	mediaProtobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
	mediaAny           = "*/*"
)

// patchMediaTypes are the patch bodies kube-apiserver accepts.
var patchMediaTypes = []string{
	"application/json-patch+json",
	"application/merge-patch+json",
	"application/strategic-merge-patch+json",
	"application/apply-patch+yaml",
}

// param is a path or query parameter.
type param struct {
	name, in, typ, description string
	required                   bool
}

// response is one status code of an operation; typ nil means no body.
type response struct {
	code        int
	description string
	typ         reflect.Type
}

// operation is one HTTP method on one path, in a form both the v2 and the
// v3 documents are rendered from.
type operation struct {
	method      string // get, put, post, patch, delete
	id          string
	description string
	action      string // x-kubernetes-action
	gvk         *schema.GroupVersionKind
	params      []param // sorted by name
	body        reflect.Type
	bodyMedia   []string
	bodyRequire bool
	produces    []string
	responses   []response
	tag         string
}

// pathItem is a path, its parameters shared by all methods, and the methods.
type pathItem struct {
	path   string
	params []param
	ops    []operation
}

var (
	listOptionsDoc   = metav1.ListOptions{}.SwaggerDoc()
	deleteOptionsDoc = metav1.DeleteOptions{}.SwaggerDoc()
	createOptionsDoc = metav1.CreateOptions{}.SwaggerDoc()
	updateOptionsDoc = metav1.UpdateOptions{}.SwaggerDoc()
	patchOptionsDoc  = metav1.PatchOptions{}.SwaggerDoc()
)

func query(name, typ string, doc map[string]string) param {
	return param{name: name, in: "query", typ: typ, description: doc[name]}
}

var (
	prettyParam = param{name: "pretty", in: "query", typ: "string",
		description: "If 'true', the response is indented for reading. Defaults to 'false' unless the user-agent is a browser or a command-line HTTP tool (curl, wget)."}
	namespaceParam = param{name: "namespace", in: "path", typ: "string", required: true,
		description: "object name and auth scope, such as for teams and projects"}

	// listParams are the query parameters of list and watch.
	listParams = []param{
		query("allowWatchBookmarks", "boolean", listOptionsDoc),
		query("continue", "string", listOptionsDoc),
		query("fieldSelector", "string", listOptionsDoc),
		query("labelSelector", "string", listOptionsDoc),
		query("limit", "integer", listOptionsDoc),
		query("resourceVersion", "string", listOptionsDoc),
		query("resourceVersionMatch", "string", listOptionsDoc),
		query("sendInitialEvents", "boolean", listOptionsDoc),
		query("timeoutSeconds", "integer", listOptionsDoc),
		query("watch", "boolean", listOptionsDoc),
	}
	createParams = []param{
		query("dryRun", "string", createOptionsDoc),
		query("fieldManager", "string", createOptionsDoc),
		query("fieldValidation", "string", createOptionsDoc),
	}
	updateParams = []param{
		query("dryRun", "string", updateOptionsDoc),
		query("fieldManager", "string", updateOptionsDoc),
		query("fieldValidation", "string", updateOptionsDoc),
	}
	patchParams = []param{
		query("dryRun", "string", patchOptionsDoc),
		query("fieldManager", "string", patchOptionsDoc),
		query("fieldValidation", "string", patchOptionsDoc),
		query("force", "boolean", patchOptionsDoc),
	}
	deleteParams = []param{
		query("dryRun", "string", deleteOptionsDoc),
		query("gracePeriodSeconds", "integer", deleteOptionsDoc),
		query("orphanDependents", "boolean", deleteOptionsDoc),
		query("propagationPolicy", "string", deleteOptionsDoc),
	}
)

// deleteCollectionParams are the list selection parameters (less the watch
// ones) and the delete options, by name.
func deleteCollectionParams() []param {
	var ps []param
	for _, p := range listParams {
		if p.name != "watch" && p.name != "allowWatchBookmarks" {
			ps = append(ps, p)
		}
	}
	ps = append(ps, deleteParams...)
	slices.SortFunc(ps, func(a, b param) int { return strings.Compare(a.name, b.name) })
	return ps
}

var (
	statusType        = reflect.TypeFor[metav1.Status]()
	deleteOptionsType = reflect.TypeFor[metav1.DeleteOptions]()
	patchType         = reflect.TypeFor[metav1.Patch]()
	watchEventType    = reflect.TypeFor[metav1.WatchEvent]()
	resourceListType  = reflect.TypeFor[metav1.APIResourceList]()
	apiVersionsType   = reflect.TypeFor[metav1.APIVersions]()
	groupListType     = reflect.TypeFor[metav1.APIGroupList]()
	groupType         = reflect.TypeFor[metav1.APIGroup]()
	versionInfoType   = reflect.TypeFor[version.Info]()
)

// groupVersionPath is the URL prefix of a group version and the key of its
// v3 document: api/v1 or apis/<group>/<version>.
func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// groupCamel is the group as it appears in operation IDs: Core for the
// core group, otherwise the name less ".k8s.io", each dotted part
// capitalized (rbac.authorization.k8s.io becomes RbacAuthorization).
func groupCamel(group string) string {
	if group == "" {
		return "Core"
	}
	group = strings.TrimSuffix(group, ".k8s.io")
	var b strings.Builder
	for _, part := range strings.FieldsFunc(group, func(r rune) bool { return r == '.' || r == '-' }) {
		b.WriteString(upperFirst(part))
	}
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

// gvTag is the tag of a group version's operations, e.g. coordination_v1.
func gvTag(gv schema.GroupVersion) string {
	return lowerFirst(groupCamel(gv.Group)) + "_" + gv.Version
}

func objectResponses(t reflect.Type, codes ...int) []response {
	names := map[int]string{200: "OK", 201: "Created", 202: "Accepted"}
	var rs []response
	for _, c := range codes {
		rs = append(rs, response{code: c, description: names[c], typ: t})
	}
	return append(rs, response{code: 401, description: "Unauthorized"})
}

var objectMedia = []string{mediaJSON, mediaYAML, mediaProtobuf}

// resourcePaths describes the paths kube-apiserver serves for one resource
// and the verbs it supports.
func resourcePaths(r *registry.Resource) ([]pathItem, error) {
	if r.New == nil {
		return nil, fmt.Errorf("resource %s has no New", r.GroupResource())
	}
	objType := reflect.TypeOf(r.New())
	for objType.Kind() == reflect.Pointer {
		objType = objType.Elem()
	}
	var listType reflect.Type
	if r.NewList != nil {
		listType = reflect.TypeOf(r.NewList())
		for listType.Kind() == reflect.Pointer {
			listType = listType.Elem()
		}
	}
	verbs := r.AllVerbs()
	has := func(v string) bool { return slices.Contains(verbs, v) }
	gvk := r.GroupVersionKind()
	id := groupCamel(r.GroupVersion.Group) + upperFirst(r.GroupVersion.Version)
	scope := ""
	if r.Namespaced {
		scope = "Namespaced"
	}
	kind := r.Kind
	tag := gvTag(r.GroupVersion)
	prefix := "/" + groupVersionPath(r.GroupVersion)
	collection := prefix + "/" + r.Name
	collectionParams := []param{prettyParam}
	if r.Namespaced {
		collection = prefix + "/namespaces/{namespace}/" + r.Name
		collectionParams = []param{namespaceParam, prettyParam}
	}
	nameParam := param{name: "name", in: "path", typ: "string", required: true, description: "name of the " + kind}
	itemParams := append([]param{nameParam}, collectionParams...)

	listProduces := objectMedia
	if has("watch") {
		listProduces = []string{mediaJSON, mediaYAML, mediaProtobuf, mediaJSONWatch, mediaProtobufWatch}
	}
	listOpParams := listParams
	if !has("watch") {
		listOpParams = nil
		for _, p := range listParams {
			if p.name != "watch" && p.name != "allowWatchBookmarks" && p.name != "sendInitialEvents" {
				listOpParams = append(listOpParams, p)
			}
		}
	}

	var items []pathItem
	coll := pathItem{path: collection, params: collectionParams}
	if has("list") && listType != nil {
		coll.ops = append(coll.ops, operation{
			method: "get", id: "list" + id + scope + kind, description: "list or watch objects of kind " + kind,
			action: "list", gvk: &gvk, params: listOpParams, produces: listProduces,
			responses: objectResponses(listType, 200), tag: tag,
		})
	}
	if has("create") {
		coll.ops = append(coll.ops, operation{
			method: "post", id: "create" + id + scope + kind, description: "create " + article(kind) + " " + kind,
			action: "post", gvk: &gvk, params: createParams, body: objType, bodyMedia: []string{mediaAny}, bodyRequire: true,
			produces: objectMedia, responses: objectResponses(objType, 200, 201, 202), tag: tag,
		})
	}
	if has("deletecollection") {
		coll.ops = append(coll.ops, operation{
			method: "delete", id: "delete" + id + "Collection" + scope + kind, description: "delete collection of " + kind,
			action: "deletecollection", gvk: &gvk, params: deleteCollectionParams(), body: deleteOptionsType, bodyMedia: []string{mediaAny},
			produces: objectMedia, responses: objectResponses(statusType, 200), tag: tag,
		})
	}
	if len(coll.ops) > 0 {
		items = append(items, coll)
	}

	item := pathItem{path: collection + "/{name}", params: itemParams}
	if has("get") {
		item.ops = append(item.ops, operation{
			method: "get", id: "read" + id + scope + kind, description: "read the specified " + kind,
			action: "get", gvk: &gvk, produces: objectMedia, responses: objectResponses(objType, 200), tag: tag,
		})
	}
	if has("update") {
		item.ops = append(item.ops, operation{
			method: "put", id: "replace" + id + scope + kind, description: "replace the specified " + kind,
			action: "put", gvk: &gvk, params: updateParams, body: objType, bodyMedia: []string{mediaAny}, bodyRequire: true,
			produces: objectMedia, responses: objectResponses(objType, 200, 201), tag: tag,
		})
	}
	if has("patch") {
		item.ops = append(item.ops, operation{
			method: "patch", id: "patch" + id + scope + kind, description: "partially update the specified " + kind,
			action: "patch", gvk: &gvk, params: patchParams, body: patchType, bodyMedia: patchMediaTypes, bodyRequire: true,
			produces: objectMedia, responses: objectResponses(objType, 200, 201), tag: tag,
		})
	}
	if has("delete") {
		item.ops = append(item.ops, operation{
			method: "delete", id: "delete" + id + scope + kind, description: "delete " + article(kind) + " " + kind,
			action: "delete", gvk: &gvk, params: deleteParams, body: deleteOptionsType, bodyMedia: []string{mediaAny},
			produces: objectMedia, responses: objectResponses(statusType, 200, 202), tag: tag,
		})
	}
	if len(item.ops) > 0 {
		items = append(items, item)
	}

	if r.StatusSubresource {
		status := pathItem{path: collection + "/{name}/status", params: itemParams}
		if has("get") {
			status.ops = append(status.ops, operation{
				method: "get", id: "read" + id + scope + kind + "Status", description: "read status of the specified " + kind,
				action: "get", gvk: &gvk, produces: objectMedia, responses: objectResponses(objType, 200), tag: tag,
			})
		}
		if has("update") {
			status.ops = append(status.ops, operation{
				method: "put", id: "replace" + id + scope + kind + "Status", description: "replace status of the specified " + kind,
				action: "put", gvk: &gvk, params: updateParams, body: objType, bodyMedia: []string{mediaAny}, bodyRequire: true,
				produces: objectMedia, responses: objectResponses(objType, 200, 201), tag: tag,
			})
		}
		if has("patch") {
			status.ops = append(status.ops, operation{
				method: "patch", id: "patch" + id + scope + kind + "Status", description: "partially update status of the specified " + kind,
				action: "patch", gvk: &gvk, params: patchParams, body: patchType, bodyMedia: patchMediaTypes, bodyRequire: true,
				produces: objectMedia, responses: objectResponses(objType, 200, 201), tag: tag,
			})
		}
		if len(status.ops) > 0 {
			items = append(items, status)
		}
	}

	if r.Namespaced && has("list") && listType != nil {
		all := pathItem{path: prefix + "/" + r.Name, params: append(slices.Clone(listOpParams), prettyParam)}
		slices.SortFunc(all.params, func(a, b param) int { return strings.Compare(a.name, b.name) })
		all.ops = append(all.ops, operation{
			method: "get", id: "list" + id + kind + "ForAllNamespaces", description: "list or watch objects of kind " + kind,
			action: "list", gvk: &gvk, produces: listProduces, responses: objectResponses(listType, 200), tag: tag,
		})
		items = append(items, all)
	}
	return items, nil
}

func article(kind string) string {
	if kind != "" && strings.ContainsRune("AEIOU", rune(kind[0])) {
		return "an"
	}
	return "a"
}

// discoveryPath is GET on a discovery document, e.g. /apis/coordination.k8s.io/v1/.
func discoveryPath(path, id, description, tag string, t reflect.Type) pathItem {
	return pathItem{path: path, ops: []operation{{
		method: "get", id: id, description: description, produces: objectMedia,
		responses: objectResponses(t, 200), tag: tag,
	}}}
}
