package store

import (
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
