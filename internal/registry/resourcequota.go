package registry

import (
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ResourceQuotas is v1 ResourceQuota, for object counts: spec.hard names
// count/<resource>.<group> (count/<resource> in the core group, and
// resourcequotas as well as count/resourcequotas, see CountNames) and the
// most objects of that resource the namespace may hold. The API server
// refuses a create beyond it (apiserver's quota admission), and the
// resource quota controller keeps status.used counted.
var ResourceQuotas = &Resource{
	GroupVersion:             corev1.SchemeGroupVersion,
	Name:                     "resourcequotas",
	SingularName:             "resourcequota",
	Kind:                     "ResourceQuota",
	KubeFinalizers:           true,
	ShortNames:               []string{"quota"},
	Namespaced:               true,
	StatusSubresource:        true,
	AllowUnconditionalUpdate: true,
	New:                      func() runtime.Object { return &corev1.ResourceQuota{} },
	NewList:                  func() runtime.Object { return &corev1.ResourceQuotaList{} },
	PrepareForCreate: func(obj runtime.Object) {
		obj.(*corev1.ResourceQuota).Status = corev1.ResourceQuotaStatus{}
	},
	PrepareForUpdate: func(obj, old runtime.Object) {
		obj.(*corev1.ResourceQuota).Status = old.(*corev1.ResourceQuota).Status
	},
	PrepareForStatusUpdate: func(obj, old runtime.Object) {
		obj.(*corev1.ResourceQuota).Spec = old.(*corev1.ResourceQuota).Spec
	},
	Validate:       func(obj runtime.Object) field.ErrorList { return ValidateResourceQuota(obj.(*corev1.ResourceQuota)) },
	ValidateUpdate: func(obj, _ runtime.Object) field.ErrorList { return ValidateResourceQuota(obj.(*corev1.ResourceQuota)) },
	// kubectl's columns: what is used of each limit, under REQUEST, and
	// of the limits.* ones (which no object count is) under LIMIT.
	Columns: []metav1.TableColumnDefinition{
		// kube-apiserver's columns, in its order and words.
		{Name: "Request", Type: "string", Description: "Request represents a minimum amount of cpu/memory that a container may consume."},
		{Name: "Limit", Type: "string", Description: "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."},
		AgeColumn,
	},
	Cells: func(obj runtime.Object, now time.Time) []interface{} {
		q := obj.(*corev1.ResourceQuota)
		var request, limit []string
		for _, name := range slices.Sorted(maps.Keys(q.Status.Hard)) {
			used, hard := q.Status.Used[name], q.Status.Hard[name]
			cell := string(name) + ": " + used.String() + "/" + hard.String()
			if strings.HasPrefix(string(name), "limits.") {
				limit = append(limit, cell)
			} else {
				request = append(request, cell)
			}
		}
		return []interface{}{strings.Join(request, ", "), strings.Join(limit, ", "), Age(q.CreationTimestamp, now)}
	},
}

func init() { register(ResourceQuotas) }

// CountName is the quota name of the object count of a resource:
// count/<resource>.<group>, or count/<resource> in the core group.
func CountName(r *Resource) corev1.ResourceName {
	if g := r.GroupVersion.Group; g != "" {
		return corev1.ResourceName("count/" + r.Name + "." + g)
	}
	return corev1.ResourceName("count/" + r.Name)
}

// CountNames are the quota names that count a resource's objects:
// CountName's, and for ResourceQuotas also "resourcequotas", the name
// Kubernetes counted them by before count/ names and still takes (of its
// other such names, configmaps, secrets, services and the like, leasehold
// serves none).
func CountNames(r *Resource) []corev1.ResourceName {
	if r == ResourceQuotas {
		return []corev1.ResourceName{CountName(r), corev1.ResourceQuotas}
	}
	return []corev1.ResourceName{CountName(r)}
}

// ValidateResourceQuota checks a quota as Kubernetes does, for what
// leasehold enforces: object counts, whole and not negative, and no
// scopes (they select pods, which leasehold does not serve).
func ValidateResourceQuota(q *corev1.ResourceQuota) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	for name, v := range q.Spec.Hard {
		errs = append(errs, validateCount(spec.Child("hard").Key(string(name)), name, v, true)...)
	}
	if len(q.Spec.Scopes) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("scopes"), "leasehold's quotas count objects; scopes select pods, which it does not serve"))
	}
	if q.Spec.ScopeSelector != nil {
		errs = append(errs, field.Forbidden(spec.Child("scopeSelector"), "leasehold's quotas count objects; scopes select pods, which it does not serve"))
	}
	status := field.NewPath("status")
	for name, v := range q.Status.Hard {
		errs = append(errs, validateCount(status.Child("hard").Key(string(name)), name, v, false)...)
	}
	for name, v := range q.Status.Used {
		errs = append(errs, validateCount(status.Child("used").Key(string(name)), name, v, false)...)
	}
	return errs
}

// validateCount checks one entry of a quota; strict names must be object
// counts.
func validateCount(path *field.Path, name corev1.ResourceName, v resource.Quantity, strict bool) field.ErrorList {
	var errs field.ErrorList
	resourceName, ok := strings.CutPrefix(string(name), "count/")
	switch {
	case !ok && strict && name != corev1.ResourceQuotas:
		errs = append(errs, field.Invalid(path, string(name), "leasehold's quotas count objects: the name must be count/<resource>.<group>, such as count/leases.coordination.k8s.io, or count/<resource> in the core group (or resourcequotas)"))
	case ok:
		for _, msg := range validation.IsDNS1123Subdomain(resourceName) {
			errs = append(errs, field.Invalid(path, string(name), msg))
		}
	}
	if v.Sign() < 0 {
		errs = append(errs, field.Invalid(path, v.String(), "must be greater than or equal to 0"))
	} else if v.MilliValue()%1000 != 0 {
		errs = append(errs, field.Invalid(path, v.String(), "must be an integer"))
	}
	return errs
}
