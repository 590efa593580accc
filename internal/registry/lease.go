package registry

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Leases is coordination.k8s.io/v1 Lease.
var Leases = &Resource{
	GroupVersion:        coordinationv1.SchemeGroupVersion,
	Name:                "leases",
	SingularName:        "lease",
	Kind:                "Lease",
	Namespaced:          true,
	New:                 func() runtime.Object { return &coordinationv1.Lease{} },
	NewList:             func() runtime.Object { return &coordinationv1.LeaseList{} },
	Validate:            func(obj runtime.Object) field.ErrorList { return ValidateLease(obj.(*coordinationv1.Lease)) },
	ValidateUpdate:      func(obj, _ runtime.Object) field.ErrorList { return ValidateLease(obj.(*coordinationv1.Lease)) },
	AllowCreateOnUpdate: true,
	// As kube-apiserver: a PUT must say which version it replaces. A lease
	// is a lock; a write that does not is how two holders would both win.
	AllowUnconditionalUpdate: false,
	ChangedFields:            leaseChangedFields,
	SharedStrings:            leaseSharedStrings,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Holder", Type: "string", Description: coordinationv1.LeaseSpec{}.SwaggerDoc()["holderIdentity"]},
		AgeColumn,
	},
	Cells: func(obj runtime.Object, now time.Time) []interface{} {
		l := obj.(*coordinationv1.Lease)
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return []interface{}{holder, Age(l.CreationTimestamp, now)}
	},
}

func init() { register(Leases) }

// leaseSharedStrings shares what a Lease's spec repeats. Its holder is, in
// kube-node-lease, the node's name and so the lease's own: the holder then
// points at the lease's name field itself, and the string and its pointer
// cost nothing of their own. Its duration and transitions point at shared
// copies of their values. At 100 000 node leases the heap held a tenth of
// a million objects fewer for the collector to mark, not two a lease: Go's
// allocator packs a 4-byte duration with other small objects into one
// block, which outlives it.
func leaseSharedStrings(obj runtime.Object, _, named func(*string)) {
	l := obj.(*coordinationv1.Lease)
	if h := l.Spec.HolderIdentity; h != nil {
		if *h == l.Name {
			l.Spec.HolderIdentity = &l.Name
		} else {
			named(h)
		}
	}
	l.Spec.LeaseDurationSeconds = sharedInt32(l.Spec.LeaseDurationSeconds)
	l.Spec.LeaseTransitions = sharedInt32(l.Spec.LeaseTransitions)
}

// smallInt32s holds the values sharedInt32 shares: durations of up to an
// hour, and as many transitions. Nothing writes to it after init.
var smallInt32s [3601]int32

func init() {
	for i := range smallInt32s {
		smallInt32s[i] = int32(i)
	}
}

// sharedInt32 returns a pointer to a shared copy of *p when it has one, and
// p otherwise (nil for nil).
func sharedInt32(p *int32) *int32 {
	if p != nil && *p >= 0 && int(*p) < len(smallInt32s) {
		return &smallInt32s[*p]
	}
	return p
}

// knownLeaseStrategies are the strategies Kubernetes defines; others must be
// prefixed ("example.com/my-strategy").
var knownLeaseStrategies = []coordinationv1.CoordinatedLeaseStrategy{coordinationv1.OldestEmulationVersion}

// ValidateLease checks a Lease's spec the way kube-apiserver does, with the
// same field paths and messages. Metadata is checked by the caller.
func ValidateLease(l *coordinationv1.Lease) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(spec.Child("leaseDurationSeconds"), *d, "must be greater than 0"))
	}
	if t := l.Spec.LeaseTransitions; t != nil && *t < 0 {
		errs = append(errs, field.Invalid(spec.Child("leaseTransitions"), *t, "must be greater than or equal to 0"))
	}
	if l.Spec.Strategy != nil {
		errs = append(errs, validateLeaseStrategy(*l.Spec.Strategy, spec.Child("strategy"))...)
	}
	if p := l.Spec.PreferredHolder; p != nil && *p != "" && (l.Spec.Strategy == nil || *l.Spec.Strategy == "") {
		errs = append(errs, field.Forbidden(spec.Child("preferredHolder"), "may only be specified if `strategy` is defined"))
	}
	return errs
}

// validateLeaseStrategy checks a strategy name shared by Lease and
// LeaseCandidate. kube-apiserver reports an unknown short name one level
// below the field (".strategy.strategy"); clients see that path, so it is
// kept.
func validateLeaseStrategy(s coordinationv1.CoordinatedLeaseStrategy, path *field.Path) field.ErrorList {
	if !strings.Contains(string(s), "/") {
		if slices.Contains(knownLeaseStrategies, s) {
			return nil
		}
		return field.ErrorList{field.NotSupported(path.Child("strategy"), s, knownLeaseStrategies)}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(s)) {
		errs = append(errs, field.Invalid(path.Child("strategy"), s, msg))
	}
	return errs
}

// ValidateObjectMeta checks metadata on create: the name rule of the kind
// (DNS subdomain for most, DNS label for namespaces), labels, annotations,
// ownerReferences, finalizers, and namespace presence.
func ValidateObjectMeta(r *Resource, meta *metav1.ObjectMeta) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(meta, r.Namespaced, r.nameRule(), field.NewPath("metadata"))
	return append(errs, r.coreFinalizers(meta)...)
}

// ValidateObjectMetaUpdate checks metadata on update against the stored
// one, as kube-apiserver's update does: first the checks every update gets
// (k8s.io/apiserver's BeforeUpdate: the metadata on its own, its name as a
// path segment, then against the stored one), then the kind's own (the
// same comparison, with core's finalizer rule where the kind has it). A bad
// field is reported by each of them, as there; the message names it once.
func ValidateObjectMetaUpdate(r *Resource, meta, old *metav1.ObjectMeta) field.ErrorList {
	fld := field.NewPath("metadata")
	errs := apivalidation.ValidateObjectMeta(meta, r.Namespaced, path.ValidatePathSegmentName, fld)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(meta, old, fld)...)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(meta, old, fld)...)
	return append(errs, r.coreFinalizers(meta)...)
}

// coreFinalizers applies the rule of Kubernetes' core validation to
// metadata.finalizers, for the kinds validated by it (KubeFinalizers): a
// name without a "/" must be a standard one.
func (r *Resource) coreFinalizers(meta *metav1.ObjectMeta) field.ErrorList {
	if !r.KubeFinalizers {
		return nil
	}
	var errs field.ErrorList
	for i, f := range meta.Finalizers {
		errs = append(errs, kubeFinalizerName(f, field.NewPath("metadata", "finalizers").Index(i))...)
	}
	return errs
}

// standardFinalizers need no domain prefix.
var standardFinalizers = []string{string(corev1.FinalizerKubernetes), metav1.FinalizerOrphanDependents, metav1.FinalizerDeleteDependents}

// validateFinalizerName is a qualified name that, without a "/", must be a
// standard finalizer.
func validateFinalizerName(name string, path *field.Path) field.ErrorList {
	errs := apivalidation.ValidateFinalizerName(name, path)
	return append(errs, kubeFinalizerName(name, path)...)
}

func kubeFinalizerName(name string, path *field.Path) field.ErrorList {
	if strings.Contains(name, "/") || slices.Contains(standardFinalizers, name) {
		return nil
	}
	return field.ErrorList{field.Invalid(path, name, "name is neither a standard finalizer name nor is it fully qualified")}
}

func (r *Resource) nameRule() apivalidation.ValidateNameFunc {
	if r.NameRule != nil {
		return r.NameRule
	}
	return apivalidation.NameIsDNSSubdomain
}

// LeaseRenewTime is spec.renewTime as Leases.ChangedFields reports it: a
// renewal changes that alone. Callers only read it.
var LeaseRenewTime = []string{"f:spec", "f:renewTime"}

// leaseSpecPaths are the paths leaseChangedFields reports, in the order it
// checks them, built once: a renewal reports one on every request. Callers
// only read them.
var leaseSpecPaths = [...][]string{
	{"f:spec", "f:holderIdentity"}, {"f:spec", "f:leaseDurationSeconds"}, {"f:spec", "f:acquireTime"},
	LeaseRenewTime, {"f:spec", "f:leaseTransitions"}, {"f:spec", "f:strategy"},
	{"f:spec", "f:preferredHolder"},
}

// leaseChangedFields compares two Leases field by field: a renewal differs
// in spec.renewTime only.
func leaseChangedFields(obj, old runtime.Object) ([][]string, bool) {
	l, o := obj.(*coordinationv1.Lease), old.(*coordinationv1.Lease)
	if !SameMetadata(&l.ObjectMeta, &o.ObjectMeta) {
		return nil, false
	}
	var paths [][]string
	for i, d := range leaseSpecDiffs(&l.Spec, &o.Spec) {
		if d {
			paths = append(paths, leaseSpecPaths[i])
		}
	}
	// A field going from set to unset changes ownership in ways only the
	// full computation gets right.
	for _, p := range paths {
		if leaseFieldUnset(l, p[1]) {
			return nil, false
		}
	}
	return paths, true
}

// leaseSpecDiffs tells, field by field in the order of leaseSpecPaths,
// whether two specs differ.
func leaseSpecDiffs(a, b *coordinationv1.LeaseSpec) [len(leaseSpecPaths)]bool {
	return [...]bool{
		!equalPtr(a.HolderIdentity, b.HolderIdentity),
		!equalPtr(a.LeaseDurationSeconds, b.LeaseDurationSeconds),
		!equalMicroTime(a.AcquireTime, b.AcquireTime),
		!equalMicroTime(a.RenewTime, b.RenewTime),
		!equalPtr(a.LeaseTransitions, b.LeaseTransitions),
		!equalPtr(a.Strategy, b.Strategy),
		!equalPtr(a.PreferredHolder, b.PreferredHolder),
	}
}

// EqualLeaseSpecs reports whether two Lease specs are equal, as
// equality.Semantic would, without reflection (a controller that watches
// Leases compares them on every renewal).
func EqualLeaseSpecs(a, b *coordinationv1.LeaseSpec) bool {
	return leaseSpecDiffs(a, b) == [len(leaseSpecPaths)]bool{}
}

func leaseFieldUnset(l *coordinationv1.Lease, f string) bool {
	switch f {
	case "f:holderIdentity":
		return l.Spec.HolderIdentity == nil
	case "f:leaseDurationSeconds":
		return l.Spec.LeaseDurationSeconds == nil
	case "f:acquireTime":
		return l.Spec.AcquireTime == nil
	case "f:renewTime":
		return l.Spec.RenewTime == nil
	case "f:leaseTransitions":
		return l.Spec.LeaseTransitions == nil
	case "f:strategy":
		return l.Spec.Strategy == nil
	case "f:preferredHolder":
		return l.Spec.PreferredHolder == nil
	}
	return true
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// equalMicroTime compares two optional times exactly.
func equalMicroTime(a, b *metav1.MicroTime) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Time.Equal(b.Time)
}

// SameMetadata reports whether two ObjectMetas agree on everything a client
// may change or try to (the server-managed fields it may not send are
// already copied over by then): labels, annotations, ownerReferences,
// finalizers and managedFields, and the uid and deletion fields, which
// validation refuses to see changed.
func SameMetadata(a, b *metav1.ObjectMeta) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && a.GenerateName == b.GenerateName && a.UID == b.UID &&
		equalPtr(a.DeletionGracePeriodSeconds, b.DeletionGracePeriodSeconds) &&
		a.DeletionTimestamp.Equal(b.DeletionTimestamp) &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) &&
		slices.Equal(a.Finalizers, b.Finalizers) &&
		slices.EqualFunc(a.OwnerReferences, b.OwnerReferences, sameOwnerReference) &&
		slices.EqualFunc(a.ManagedFields, b.ManagedFields, sameManagedFieldsEntry)
}

// sameOwnerReference and sameManagedFieldsEntry compare field by field, as
// equality.Semantic would, without reflection: renewals run them on every
// request.
func sameOwnerReference(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		equalPtr(a.Controller, b.Controller) && equalPtr(a.BlockOwnerDeletion, b.BlockOwnerDeletion)
}

func sameManagedFieldsEntry(a, b metav1.ManagedFieldsEntry) bool {
	sameTime := a.Time == nil && b.Time == nil || a.Time != nil && b.Time != nil && a.Time.Equal(b.Time)
	sameFields := a.FieldsV1 == nil && b.FieldsV1 == nil ||
		a.FieldsV1 != nil && b.FieldsV1 != nil && bytes.Equal(a.FieldsV1.Raw, b.FieldsV1.Raw)
	return a.Manager == b.Manager && a.Operation == b.Operation && a.APIVersion == b.APIVersion &&
		a.FieldsType == b.FieldsType && a.Subresource == b.Subresource && sameTime && sameFields
}
