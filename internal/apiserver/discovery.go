package apiserver

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/munnerz/goautoneg"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/version"
)

func (s *Server) serveVersion(w http.ResponseWriter, r *http.Request) {
	// version.Info is not a runtime.Object; JSON is all clients ask for.
	writeJSON(w, http.StatusOK, wantPretty(r, r.URL.Query()), version.Info())
}

// groups returns the API groups and their versions in registry order, the
// preferred (first registered) version first.
func groups() (names []string, versions map[string][]string) {
	versions = map[string][]string{}
	for _, r := range registry.All() {
		g := r.GroupVersion.Group
		if _, ok := versions[g]; !ok {
			names = append(names, g)
		}
		if !slices.Contains(versions[g], r.GroupVersion.Version) {
			versions[g] = append(versions[g], r.GroupVersion.Version)
		}
	}
	return names, versions
}

// wantsAggregated reports whether the client asks for aggregated discovery
// (apidiscovery.k8s.io/v2 APIGroupDiscoveryList) and in which serializer.
func wantsAggregated(r *http.Request) (mediaType string, ok bool) {
	for _, clause := range goautoneg.ParseAccept(r.Header.Get("Accept")) {
		mt, params := clause.Type+"/"+clause.SubType, clause.Params
		if params["as"] == "APIGroupDiscoveryList" && params["g"] == apidiscoveryv2.SchemeGroupVersion.Group && params["v"] == "v2" {
			if mt == mediaJSON || mt == mediaProtobuf {
				return mt, true
			}
		}
	}
	return "", false
}

func (s *Server) serveDiscovery(w http.ResponseWriter, r *http.Request, path string) {
	names, versions := groups()
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case path == "/api":
		if mt, ok := wantsAggregated(r); ok {
			s.instrumented(w, r, "api", requestComponent, func(w http.ResponseWriter, r *http.Request) { s.writeAggregated(w, r, mt, []string{""}) })
			return
		}
		s.writeMeta(w, r, &metav1.APIVersions{
			Versions:                   versions[""],
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}},
		})
	case path == "/apis":
		var groupNames []string
		for _, g := range names {
			if g != "" {
				groupNames = append(groupNames, g)
			}
		}
		if mt, ok := wantsAggregated(r); ok {
			s.instrumented(w, r, "apis", requestComponent, func(w http.ResponseWriter, r *http.Request) { s.writeAggregated(w, r, mt, groupNames) })
			return
		}
		list := &metav1.APIGroupList{}
		for _, g := range groupNames {
			list.Groups = append(list.Groups, apiGroup(g, versions[g]))
		}
		s.writeMeta(w, r, list)
	case len(parts) == 2 && parts[0] == "api" && slices.Contains(versions[""], parts[1]):
		s.writeMeta(w, r, resourceList(schema.GroupVersion{Version: parts[1]}))
	case len(parts) == 2 && parts[0] == "apis" && versions[parts[1]] != nil && parts[1] != "":
		g := apiGroup(parts[1], versions[parts[1]])
		s.writeMeta(w, r, &g)
	case len(parts) == 3 && parts[0] == "apis" && slices.Contains(versions[parts[1]], parts[2]) && parts[1] != "":
		s.writeMeta(w, r, resourceList(schema.GroupVersion{Group: parts[1], Version: parts[2]}))
	default:
		s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
	}
}

func apiGroup(name string, versions []string) metav1.APIGroup {
	g := metav1.APIGroup{Name: name}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

func resourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	list := &metav1.APIResourceList{GroupVersion: gv.String(), APIResources: []metav1.APIResource{}}
	for _, r := range registry.All() {
		if r.GroupVersion != gv {
			continue
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.Name, SingularName: r.SingularName, Namespaced: r.Namespaced, Kind: r.Kind,
			Verbs: r.AllVerbs(), ShortNames: r.ShortNames, Categories: r.Categories,
			StorageVersionHash: storageVersionHash(r),
		})
		for _, sub := range subresources(r) {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Name + "/" + sub.name, Namespaced: r.Namespaced, Kind: sub.kind, Verbs: sub.verbs,
			})
		}
	}
	return list
}

// storageVersionHash is kube-apiserver's hash of the group, version and
// kind a resource's objects are stored as (the first 8 bytes of the SHA-256
// of "group/version/kind", in base64), which the storage version migrator
// compares; none for a resource without storage. (The function of
// k8s.io/apiserver that computes it comes with that module's whole
// endpoint stack.)
func storageVersionHash(r *registry.Resource) string {
	if r.Virtual {
		return ""
	}
	if r.Storage != nil {
		r = r.Storage
	}
	sum := sha256.Sum256([]byte(r.GroupVersion.Group + "/" + r.GroupVersion.Version + "/" + r.Kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

type subresource struct {
	name  string
	kind  string
	verbs []string
}

func subresources(r *registry.Resource) []subresource {
	var subs []subresource
	if r.StatusSubresource {
		subs = append(subs, subresource{"status", r.Kind, []string{"get", "patch", "update"}})
	}
	if r == registry.Namespaces {
		subs = append(subs, subresource{"finalize", r.Kind, []string{"update"}})
	}
	return subs
}

// writeAggregated answers with the aggregated discovery document of the
// given groups ("" is the core group, served at /api).
func (s *Server) writeAggregated(w http.ResponseWriter, r *http.Request, mediaType string, groupNames []string) {
	_, versions := groups()
	list := &apidiscoveryv2.APIGroupDiscoveryList{}
	for _, g := range groupNames {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}}
		for _, v := range versions[g] {
			vd := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			for _, res := range registry.All() {
				if res.GroupVersion != (schema.GroupVersion{Group: g, Version: v}) {
					continue
				}
				scope := apidiscoveryv2.ScopeCluster
				if res.Namespaced {
					scope = apidiscoveryv2.ScopeNamespace
				}
				rd := apidiscoveryv2.APIResourceDiscovery{
					Resource: res.Name, SingularResource: res.SingularName, Scope: scope,
					ResponseKind: &metav1.GroupVersionKind{Group: g, Version: v, Kind: res.Kind},
					Verbs:        res.AllVerbs(), ShortNames: res.ShortNames, Categories: res.Categories,
				}
				for _, sub := range subresources(res) {
					rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
						Subresource:  sub.name,
						ResponseKind: &metav1.GroupVersionKind{Group: g, Version: v, Kind: sub.kind},
						Verbs:        sub.verbs,
					})
				}
				vd.Resources = append(vd.Resources, rd)
			}
			gd.Versions = append(gd.Versions, vd)
		}
		list.Items = append(list.Items, gd)
	}
	info, _ := serializerFor(mediaType)
	e := encoding{info: info, pretty: wantPretty(r, r.URL.Query()),
		mediaType: mediaType + ";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}
	w.Header().Set("Vary", "Accept")
	s.writeObject(w, r, http.StatusOK, e, list, apidiscoveryv2.SchemeGroupVersion)
}

// writeMeta writes a discovery document (a meta/v1 type without a group of
// its own: kube-apiserver labels these apiVersion v1).
func (s *Server) writeMeta(w http.ResponseWriter, r *http.Request, obj interface{ GetObjectKind() schema.ObjectKind }) {
	kind := reflect.TypeOf(obj).Elem().Name()
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: kind})
	writeJSON(w, http.StatusOK, wantPretty(r, r.URL.Query()), obj)
}

func writeJSON(w http.ResponseWriter, code int, pretty bool, v any) {
	var data []byte
	if pretty {
		data, _ = json.MarshalIndent(v, "", "  ")
	} else {
		data, _ = json.Marshal(v)
	}
	setContentType(w.Header(), mediaJSON)
	w.WriteHeader(code)
	w.Write(append(data, '\n'))
}
