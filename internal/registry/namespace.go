package registry

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Namespaces is v1 Namespace. Deleting one marks it Terminating; the
// namespace controller empties it and then removes the "kubernetes"
// finalizer through the finalize subresource, as in Kubernetes.
var Namespaces = &Resource{
	GroupVersion:             corev1.SchemeGroupVersion,
	Name:                     "namespaces",
	SingularName:             "namespace",
	Kind:                     "Namespace",
	KubeFinalizers:           true,
	ShortNames:               []string{"ns"},
	NameRule:                 apivalidation.ValidateNamespaceName,
	Verbs:                    []string{"create", "delete", "get", "list", "patch", "update", "watch"},
	StatusSubresource:        true,
	AllowUnconditionalUpdate: true,
	New:                      func() runtime.Object { return &corev1.Namespace{} },
	NewList:                  func() runtime.Object { return &corev1.NamespaceList{} },
	PrepareForCreate: func(obj runtime.Object) {
		ns := obj.(*corev1.Namespace)
		ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
		if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
			ns.Spec.Finalizers = append(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
		}
		setNamespaceNameLabel(ns)
	},
	PrepareForUpdate: func(obj, old runtime.Object) {
		ns, o := obj.(*corev1.Namespace), old.(*corev1.Namespace)
		ns.Spec.Finalizers = o.Spec.Finalizers
		ns.Status = o.Status
		setNamespaceNameLabel(ns)
	},
	PrepareForStatusUpdate: func(obj, old runtime.Object) {
		ns, o := obj.(*corev1.Namespace), old.(*corev1.Namespace)
		ns.Spec = o.Spec
		// As kube-apiserver's decoding defaults it.
		if ns.Status.Phase == "" {
			ns.Status.Phase = corev1.NamespaceActive
		}
	},
	Validate: func(obj runtime.Object) field.ErrorList {
		return validateNamespaceFinalizers(obj.(*corev1.Namespace))
	},
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		ns, o := obj.(*corev1.Namespace), old.(*corev1.Namespace)
		errs := validateNamespaceFinalizers(ns)
		if ns.Status.Phase != o.Status.Phase {
			// A phase written before this rule stays until it changes.
			errs = append(errs, validateNamespacePhase(ns)...)
		}
		return errs
	},
	Columns: []metav1.TableColumnDefinition{
		{Name: "Status", Type: "string", Description: "The status of the namespace"},
		AgeColumn,
	},
	Cells: func(obj runtime.Object, now time.Time) []interface{} {
		ns := obj.(*corev1.Namespace)
		return []interface{}{string(ns.Status.Phase), Age(ns.CreationTimestamp, now)}
	},
	SelectableFields: func(obj runtime.Object) map[string]string {
		return map[string]string{"status.phase": string(obj.(*corev1.Namespace).Status.Phase)}
	},
}

func init() { register(Namespaces) }

// InitialNamespaces exist from the first start, as in a new cluster, and
// are made again when deleted (apiserver.Server.KeepNamespaces).
var InitialNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// ImmortalNamespaces may not be deleted, as Kubernetes' NamespaceLifecycle
// admission refuses: kube-node-lease may, and is made again.
var ImmortalNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic}

// setNamespaceNameLabel keeps the immutable kubernetes.io/metadata.name
// label Kubernetes puts on every namespace.
func setNamespaceNameLabel(ns *corev1.Namespace) {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

// validateNamespacePhase checks a written status.phase as kube-apiserver
// does: Active while the namespace is not being deleted, Terminating once
// it is (the server itself moves it there when it is deleted). The path is
// kube-apiserver's own, "status.Phase".
func validateNamespacePhase(ns *corev1.Namespace) field.ErrorList {
	path := field.NewPath("status", "Phase")
	switch {
	case ns.DeletionTimestamp.IsZero() && ns.Status.Phase != corev1.NamespaceActive:
		return field.ErrorList{field.Invalid(path, ns.Status.Phase, "may only be 'Active' if `deletionTimestamp` is empty")}
	case !ns.DeletionTimestamp.IsZero() && ns.Status.Phase != corev1.NamespaceTerminating:
		return field.ErrorList{field.Invalid(path, ns.Status.Phase, "may only be 'Terminating' if `deletionTimestamp` is not empty")}
	}
	return nil
}

// ValidateNamespaceFinalize checks a namespace written through its
// finalize subresource as Kubernetes does: each of spec.finalizers, at its
// index.
func ValidateNamespaceFinalize(ns *corev1.Namespace) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "finalizers")
	for i, f := range ns.Spec.Finalizers {
		errs = append(errs, validateFinalizerName(string(f), path.Index(i))...)
	}
	return errs
}

// validateNamespaceFinalizers checks spec.finalizers as Kubernetes does on
// create and update, reporting at the list's path without an index.
func validateNamespaceFinalizers(ns *corev1.Namespace) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "finalizers")
	for _, f := range ns.Spec.Finalizers {
		errs = append(errs, validateFinalizerName(string(f), path)...)
	}
	return errs
}
