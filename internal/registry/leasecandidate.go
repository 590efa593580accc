package registry

import (
	"time"

	"github.com/blang/semver/v4"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// LeaseCandidates is coordination.k8s.io/v1beta1 LeaseCandidate: a
// contender's entry in coordinated leader election. The coordinator picks
// the Lease holder among the candidates for a lease name.
var LeaseCandidates = &Resource{
	GroupVersion: coordinationv1beta1.SchemeGroupVersion,
	Name:         "leasecandidates",
	SingularName: "leasecandidate",
	Kind:         "LeaseCandidate",
	Namespaced:   true,
	NameRule: func(name string, _ bool) []string {
		// A trailing "-" is allowed, as for ConfigMap keys.
		return validation.IsConfigMapKey(name)
	},
	New:     func() runtime.Object { return &coordinationv1beta1.LeaseCandidate{} },
	NewList: func() runtime.Object { return &coordinationv1beta1.LeaseCandidateList{} },
	Validate: func(obj runtime.Object) field.ErrorList {
		return validateLeaseCandidate(obj.(*coordinationv1beta1.LeaseCandidate))
	},
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		c, o := obj.(*coordinationv1beta1.LeaseCandidate), old.(*coordinationv1beta1.LeaseCandidate)
		errs := validateLeaseCandidate(c)
		return append(errs, apivalidation.ValidateImmutableField(c.Spec.LeaseName, o.Spec.LeaseName, field.NewPath("spec", "leaseName"))...)
	},
	AllowCreateOnUpdate: true,
	// As kube-apiserver: a PUT must say which version it replaces.
	AllowUnconditionalUpdate: false,
	Columns: []metav1.TableColumnDefinition{
		{Name: "LeaseName", Type: "string", Description: coordinationv1beta1.LeaseCandidateSpec{}.SwaggerDoc()["leaseName"]},
		{Name: "BinaryVersion", Type: "string", Description: coordinationv1beta1.LeaseCandidateSpec{}.SwaggerDoc()["binaryVersion"]},
		{Name: "EmulationVersion", Type: "string", Description: coordinationv1beta1.LeaseCandidateSpec{}.SwaggerDoc()["emulationVersion"]},
		AgeColumn,
	},
	Cells: func(obj runtime.Object, now time.Time) []interface{} {
		c := obj.(*coordinationv1beta1.LeaseCandidate)
		return []interface{}{c.Spec.LeaseName, c.Spec.BinaryVersion, c.Spec.EmulationVersion, Age(c.CreationTimestamp, now)}
	},
	SelectableFields: func(obj runtime.Object) map[string]string {
		return map[string]string{"spec.leaseName": obj.(*coordinationv1beta1.LeaseCandidate).Spec.LeaseName}
	},
}

func init() { register(LeaseCandidates) }

// validateLeaseCandidate follows kube-apiserver: a lease name, semantic
// versions with binaryVersion ≥ emulationVersion, and a known strategy
// (OldestEmulationVersion needs an emulationVersion).
func validateLeaseCandidate(c *coordinationv1beta1.LeaseCandidate) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if c.Spec.LeaseName == "" {
		errs = append(errs, field.Required(spec.Child("leaseName"), ""))
	}
	// Parsed as Kubernetes parses them (blang/semver: no "v", no spaces);
	// one that does not parse counts as 0.0.0 in the checks that follow.
	var ev, bv semver.Version
	if c.Spec.EmulationVersion != "" {
		var err error
		if ev, err = semver.Parse(c.Spec.EmulationVersion); err != nil {
			errs = append(errs, field.Invalid(spec.Child("emulationVersion"), c.Spec.EmulationVersion, "must be a valid semantic version"))
		}
	}
	if c.Spec.BinaryVersion == "" {
		errs = append(errs, field.Required(spec.Child("binaryVersion"), ""))
	} else {
		var err error
		if bv, err = semver.Parse(c.Spec.BinaryVersion); err != nil {
			errs = append(errs, field.Invalid(spec.Child("binaryVersion"), c.Spec.BinaryVersion, "must be a valid semantic version"))
		}
	}
	if c.Spec.BinaryVersion != "" && c.Spec.EmulationVersion != "" && bv.LT(ev) {
		errs = append(errs, field.Invalid(spec.Child("binaryVersion"), c.Spec.BinaryVersion, "must be greater than or equal to `emulationVersion`"))
	}
	switch {
	case c.Spec.Strategy == "":
		errs = append(errs, field.Required(spec.Child("strategy"), ""))
	default:
		if c.Spec.Strategy == coordinationv1.OldestEmulationVersion && ev.EQ(semver.Version{}) {
			errs = append(errs, field.Required(spec.Child("emulationVersion"), "must be specified when `strategy` is 'OldestEmulationVersion'"))
		}
		errs = append(errs, validateLeaseStrategy(c.Spec.Strategy, spec.Child("strategy"))...)
	}
	return errs
}
