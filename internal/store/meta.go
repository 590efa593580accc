package store

import (
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// clearResourceVersion empties metadata.resourceVersion before storing.
func clearResourceVersion(obj runtime.Object) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion("")
	}
}

func metaAccessor(obj runtime.Object) (metav1.Object, error) { return meta.Accessor(obj) }

// ShallowCopy returns a new top-level struct with obj's field values: its
// TypeMeta and the scalar fields of its ObjectMeta (resourceVersion among
// them) may then be set without touching obj, which may be shared (a
// watch cache's), while everything else stays shared. For typed objects:
// an Unstructured's fields are all in one shared map.
func ShallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return obj
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(runtime.Object)
}
