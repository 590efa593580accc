package registry

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Scheme knows every type leasehold reads or writes: the served resources,
// the meta types (Status, Table, options, WatchEvent) and discovery documents.
var Scheme = runtime.NewScheme()

// Codecs serializes to and from JSON, YAML and protobuf, strictly when asked.
// Lists are encoded one item at a time, as kube-apiserver does since 1.33:
// a list is written out without first building its whole encoding.
var Codecs = serializer.NewCodecFactory(Scheme, serializer.EnableStrict,
	serializer.WithStreamingCollectionEncodingToJSON(), serializer.WithStreamingCollectionEncodingToProtobuf())

// ObjectCodecs are Codecs without that streaming, for what is not a list.
// Codecs' encoders try every object as a list first, by reflection, and an
// object of three fields, as a list has (a Lease), costs an allocation of
// its ObjectMeta in that try before it is written as itself.
var ObjectCodecs = serializer.NewCodecFactory(Scheme, serializer.EnableStrict)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		coordinationv1.AddToScheme,
		coordinationv1beta1.AddToScheme,
		corev1.AddToScheme,
		eventsv1.AddToScheme,
		rbacv1.AddToScheme,
		authorizationv1.AddToScheme,
		authenticationv1.AddToScheme,
		apidiscoveryv2.AddToScheme,
	} {
		utilruntime.Must(add(Scheme))
	}
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(metav1.AddMetaToScheme(Scheme))
	// After v1's, so that v1 stays the first kind of the types both share.
	utilruntime.Must(metav1beta1.AddMetaToScheme(Scheme))
}
