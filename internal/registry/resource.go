package registry

import (
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Resource is one REST resource: its names, types and strategy. Nil hooks do
// nothing; a nil Validate accepts everything but metadata errors (the API
// server always validates ObjectMeta).
type Resource struct {
	// GroupVersion is the API group and version, e.g. coordination.k8s.io/v1;
	// it does not change once the resource is registered.
	GroupVersion schema.GroupVersion
	// Name is the plural resource name in URLs, e.g. "leases".
	Name string
	// SingularName is the lower-case singular name, e.g. "lease".
	SingularName string
	// Kind is the object kind, e.g. "Lease"; the list kind is Kind+"List".
	Kind string
	// ShortNames are kubectl's abbreviations, e.g. "ns" for namespaces.
	ShortNames []string
	// Categories group resources for kubectl get, e.g. "all".
	Categories []string
	// Namespaced says whether objects live in a namespace.
	Namespaced bool
	// Verbs are the verbs discovery advertises; nil means the full set
	// (create, delete, deletecollection, get, list, patch, update, watch).
	Verbs []string
	// StatusSubresource says whether /status is served; if so, writes to the
	// main resource keep the old status and writes to /status keep the old
	// spec (see PrepareForUpdate and PrepareForStatusUpdate).
	StatusSubresource bool
	// Storage says whether objects persist (false for virtual resources such
	// as access reviews, which only answer create).
	Virtual bool

	// KeyPrefix overrides the etcd key prefix (default Name).
	KeyPrefix string
	// NameRule validates metadata.name; nil means a DNS subdomain.
	NameRule func(name string, prefix bool) []string
	// KubeFinalizers says the kind's metadata is checked by Kubernetes'
	// core validation, which requires a finalizer name without a "/" to be
	// a standard one (kubernetes, orphan, foregroundDeletion): the core
	// kinds but v1 Events, RBAC's, events.k8s.io's; not Leases.
	KubeFinalizers bool

	// New returns an empty object of Kind; NewList an empty list.
	New     func() runtime.Object
	NewList func() runtime.Object

	// PrepareForCreate clears or defaults fields before validation on create.
	PrepareForCreate func(obj runtime.Object)
	// PrepareForUpdate does the same on update of the main resource; old is
	// the stored object (for example to keep its status).
	PrepareForUpdate func(obj, old runtime.Object)
	// PrepareForStatusUpdate does the same on update of /status (for example
	// to keep the stored spec).
	PrepareForStatusUpdate func(obj, old runtime.Object)
	// Validate checks a new object (ObjectMeta is checked by the caller).
	Validate func(obj runtime.Object) field.ErrorList
	// ValidateUpdate checks an update against the stored object.
	ValidateUpdate func(obj, old runtime.Object) field.ErrorList
	// Warnings are what a valid create or update of the main resource is
	// warned of (a Warning header each), as kube-apiserver's strategies'
	// WarningsOnCreate and WarningsOnUpdate give them.
	Warnings func(obj runtime.Object) []string

	// Columns are the Table columns after the implicit first column NAME
	// (or all of them when OwnColumns is set).
	Columns []metav1.TableColumnDefinition
	// OwnColumns says Columns and Cells include the name column themselves,
	// for kinds Kubernetes prints with the name elsewhere (events).
	OwnColumns bool
	// Cells returns one cell per entry of Columns; now is the time ages are
	// measured against.
	Cells func(obj runtime.Object, now time.Time) []interface{}

	// SelectableFields returns field selector values beyond metadata.name and
	// metadata.namespace, which every resource has.
	SelectableFields func(obj runtime.Object) map[string]string

	// Storage, when set, is the resource whose objects this one serves in
	// another group or version (events.k8s.io/v1 Events are core v1 Events
	// in storage). ToStorage and FromStorage convert between the two.
	Storage     *Resource
	ToStorage   func(obj runtime.Object) (runtime.Object, error)
	FromStorage func(obj runtime.Object) (runtime.Object, error)

	// ChangedFields, when set, lists the field paths (as managedFields
	// spells them, e.g. ["f:spec","f:renewTime"]) that differ between obj
	// and old, ignoring metadata the server manages. ok is false when it
	// cannot tell, and whenever the metadata differs (SameMetadata): the
	// server then computes managed fields in full and validates the
	// metadata. It lets a heartbeat skip both (see apiserver's
	// managedfields.go).
	ChangedFields func(obj, old runtime.Object) (paths [][]string, ok bool)

	// SharedStrings, when set, calls common with a pointer to each string
	// of obj that most objects of the kind have in common, and named with
	// each that usually repeats obj's name, so that the watch cache can
	// point them at one shared copy (store.StringSharing). It may point
	// obj's pointer fields at shared values itself, as a Lease's holder at
	// its own name.
	SharedStrings func(obj runtime.Object, common, named func(*string))

	// AllowCreateOnUpdate lets PUT create a missing object.
	AllowCreateOnUpdate bool
	// AllowUnconditionalUpdate lets PUT without a resourceVersion overwrite.
	AllowUnconditionalUpdate bool

	// apiVersion is GroupVersion.String(), set by register.
	apiVersion string
}

// DefaultVerbs is what a stored resource supports.
var DefaultVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// GroupVersionResource names the resource.
func (r *Resource) GroupVersionResource() schema.GroupVersionResource {
	return r.GroupVersion.WithResource(r.Name)
}

// APIVersion is GroupVersion as an object's apiVersion spells it, e.g.
// coordination.k8s.io/v1: built once for a registered resource rather than
// on every request that needs it.
func (r *Resource) APIVersion() string {
	if r.apiVersion == "" {
		return r.GroupVersion.String()
	}
	return r.apiVersion
}

// GroupVersionKind names its kind.
func (r *Resource) GroupVersionKind() schema.GroupVersionKind {
	return r.GroupVersion.WithKind(r.Kind)
}

// GroupResource is the group-qualified name Kubernetes uses in error
// messages, e.g. leases.coordination.k8s.io.
func (r *Resource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.GroupVersion.Group, Resource: r.Name}
}

// AllVerbs returns Verbs or the default set.
func (r *Resource) AllVerbs() []string {
	if r.Verbs != nil {
		return r.Verbs
	}
	return DefaultVerbs
}

// StoragePrefix is the etcd key prefix below the registry root, Kubernetes'
// layout: "leases" holds /registry/leases/<namespace>/<name>, and Nodes keep
// their historical "minions".
func (r *Resource) StoragePrefix() string {
	if r.KeyPrefix != "" {
		return r.KeyPrefix
	}
	return r.Name
}

// Fields returns the selectable fields of obj, for a field selector to
// match: metadata.name, metadata.namespace (of a namespaced resource) and
// the resource's own. The first two are answered directly, the resource's
// own computed only when a selector asks for one of them: a watch with a
// field selector matches every change of the kind, renewals included.
func (r *Resource) Fields(name, namespace string, obj runtime.Object) fields.Fields {
	return &objectFields{r: r, name: name, namespace: namespace, obj: obj}
}

// SameView reports whether old and new, two versions of one object (same
// name and namespace), look the same to every label and field selector:
// whether their labels and selectable fields are equal.
func (r *Resource) SameView(old, new runtime.Object) bool {
	om, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	nm, err := meta.Accessor(new)
	if err != nil {
		return false
	}
	if !maps.Equal(om.GetLabels(), nm.GetLabels()) {
		return false
	}
	return r.SelectableFields == nil || maps.Equal(r.SelectableFields(old), r.SelectableFields(new))
}

type objectFields struct {
	r               *Resource
	name, namespace string
	obj             runtime.Object
	own             map[string]string // r.SelectableFields(obj), once asked for
}

func (f *objectFields) lookup(field string) (string, bool) {
	switch {
	case field == "metadata.name":
		return f.name, true
	case field == "metadata.namespace" && f.r.Namespaced:
		return f.namespace, true
	case f.r.SelectableFields == nil:
		return "", false
	}
	if f.own == nil {
		f.own = f.r.SelectableFields(f.obj)
	}
	v, ok := f.own[field]
	return v, ok
}

func (f *objectFields) Has(field string) bool {
	_, ok := f.lookup(field)
	return ok
}

func (f *objectFields) Get(field string) string {
	v, _ := f.lookup(field)
	return v
}

// All returns the served resources, in discovery order.
func All() []*Resource { return resources }

var resources []*Resource

// register adds a resource; each kind's file calls it from init.
func register(r *Resource) {
	r.apiVersion = r.GroupVersion.String()
	resources = append(resources, r)
}

// Lookup finds a resource by group, version and plural name.
func Lookup(gv schema.GroupVersion, name string) (*Resource, bool) {
	for _, r := range resources {
		if r.GroupVersion == gv && r.Name == name {
			return r, true
		}
	}
	return nil, false
}
