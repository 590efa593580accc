package registry

import (
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The four RBAC kinds of rbac.authorization.k8s.io/v1, stored and served
// like every other resource so kubectl manages them, with Kubernetes'
// validation, defaulting and table columns. Their names are path segments
// (they may hold ':' as in system:node).
var (
	Roles = &Resource{
		GroupVersion: rbacv1.SchemeGroupVersion, Name: "roles", SingularName: "role", Kind: "Role",
		Namespaced: true, NameRule: path.ValidatePathSegmentName, KubeFinalizers: true, AllowCreateOnUpdate: true, AllowUnconditionalUpdate: true,
		New:     func() runtime.Object { return &rbacv1.Role{} },
		NewList: func() runtime.Object { return &rbacv1.RoleList{} },
		Validate: func(obj runtime.Object) field.ErrorList {
			return ValidateRules(obj.(*rbacv1.Role).Rules, true, field.NewPath("rules"))
		},
		ValidateUpdate: func(obj, _ runtime.Object) field.ErrorList {
			return ValidateRules(obj.(*rbacv1.Role).Rules, true, field.NewPath("rules"))
		},
		Columns: []metav1.TableColumnDefinition{createdAtColumn},
		Cells: func(obj runtime.Object, _ time.Time) []interface{} {
			return []interface{}{createdAt(obj.(*rbacv1.Role).CreationTimestamp)}
		},
	}
	ClusterRoles = &Resource{
		GroupVersion: rbacv1.SchemeGroupVersion, Name: "clusterroles", SingularName: "clusterrole", Kind: "ClusterRole",
		NameRule: path.ValidatePathSegmentName, KubeFinalizers: true, AllowCreateOnUpdate: true, AllowUnconditionalUpdate: true,
		New:     func() runtime.Object { return &rbacv1.ClusterRole{} },
		NewList: func() runtime.Object { return &rbacv1.ClusterRoleList{} },
		Validate: func(obj runtime.Object) field.ErrorList {
			return validateClusterRole(obj.(*rbacv1.ClusterRole))
		},
		ValidateUpdate: func(obj, _ runtime.Object) field.ErrorList {
			return validateClusterRole(obj.(*rbacv1.ClusterRole))
		},
		Columns: []metav1.TableColumnDefinition{createdAtColumn},
		Cells: func(obj runtime.Object, _ time.Time) []interface{} {
			return []interface{}{createdAt(obj.(*rbacv1.ClusterRole).CreationTimestamp)}
		},
	}
	RoleBindings = &Resource{
		GroupVersion: rbacv1.SchemeGroupVersion, Name: "rolebindings", SingularName: "rolebinding", Kind: "RoleBinding",
		Namespaced: true, NameRule: path.ValidatePathSegmentName, KubeFinalizers: true, AllowCreateOnUpdate: true, AllowUnconditionalUpdate: true,
		New:     func() runtime.Object { return &rbacv1.RoleBinding{} },
		NewList: func() runtime.Object { return &rbacv1.RoleBindingList{} },
		PrepareForCreate: func(obj runtime.Object) {
			b := obj.(*rbacv1.RoleBinding)
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		PrepareForUpdate: func(obj, _ runtime.Object) {
			b := obj.(*rbacv1.RoleBinding)
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		Validate: func(obj runtime.Object) field.ErrorList {
			b := obj.(*rbacv1.RoleBinding)
			return validateBinding(b.RoleRef, b.Subjects, true)
		},
		ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
			b := obj.(*rbacv1.RoleBinding)
			errs := validateBinding(b.RoleRef, b.Subjects, true)
			if b.RoleRef != old.(*rbacv1.RoleBinding).RoleRef {
				errs = append(errs, field.Invalid(field.NewPath("roleRef"), b.RoleRef, "cannot change roleRef"))
			}
			return errs
		},
		Columns: bindingColumns,
		Cells: func(obj runtime.Object, now time.Time) []interface{} {
			b := obj.(*rbacv1.RoleBinding)
			return bindingCells(b.RoleRef, b.Subjects, b.CreationTimestamp, now)
		},
	}
	ClusterRoleBindings = &Resource{
		GroupVersion: rbacv1.SchemeGroupVersion, Name: "clusterrolebindings", SingularName: "clusterrolebinding", Kind: "ClusterRoleBinding",
		NameRule: path.ValidatePathSegmentName, KubeFinalizers: true, AllowCreateOnUpdate: true, AllowUnconditionalUpdate: true,
		New:     func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
		NewList: func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
		PrepareForCreate: func(obj runtime.Object) {
			b := obj.(*rbacv1.ClusterRoleBinding)
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		PrepareForUpdate: func(obj, _ runtime.Object) {
			b := obj.(*rbacv1.ClusterRoleBinding)
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		Validate: func(obj runtime.Object) field.ErrorList {
			b := obj.(*rbacv1.ClusterRoleBinding)
			return validateBinding(b.RoleRef, b.Subjects, false)
		},
		ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
			b := obj.(*rbacv1.ClusterRoleBinding)
			errs := validateBinding(b.RoleRef, b.Subjects, false)
			if b.RoleRef != old.(*rbacv1.ClusterRoleBinding).RoleRef {
				errs = append(errs, field.Invalid(field.NewPath("roleRef"), b.RoleRef, "cannot change roleRef"))
			}
			return errs
		},
		Columns: bindingColumns,
		Cells: func(obj runtime.Object, now time.Time) []interface{} {
			b := obj.(*rbacv1.ClusterRoleBinding)
			return bindingCells(b.RoleRef, b.Subjects, b.CreationTimestamp, now)
		},
	}
)

func init() {
	register(ClusterRoleBindings)
	register(ClusterRoles)
	register(RoleBindings)
	register(Roles)
}

var createdAtColumn = metav1.TableColumnDefinition{
	Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
}

// createdAt is how kubectl prints a role's creation time: RFC 3339 in UTC.
func createdAt(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

var bindingColumns = []metav1.TableColumnDefinition{
	{Name: "Role", Type: "string", Description: rbacv1.RoleBinding{}.SwaggerDoc()["roleRef"]},
	AgeColumn,
	{Name: "Users", Type: "string", Priority: 1, Description: "Users in the roleBinding"},
	{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the roleBinding"},
	{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the roleBinding"},
}

func bindingCells(ref rbacv1.RoleRef, subjects []rbacv1.Subject, created metav1.Time, now time.Time) []interface{} {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	return []interface{}{
		ref.Kind + "/" + ref.Name, Age(created, now),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", "),
	}
}

// defaultBinding fills in the API group of the role reference and of user
// and group subjects, as Kubernetes' defaulting does.
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

func validateClusterRole(r *rbacv1.ClusterRole) field.ErrorList {
	errs := ValidateRules(r.Rules, false, field.NewPath("rules"))
	if r.AggregationRule != nil {
		p := field.NewPath("aggregationRule", "clusterRoleSelectors")
		if len(r.AggregationRule.ClusterRoleSelectors) == 0 {
			errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
		}
		for i, sel := range r.AggregationRule.ClusterRoleSelectors {
			if _, err := metav1.LabelSelectorAsSelector(&sel); err != nil {
				errs = append(errs, field.Invalid(p.Index(i), sel, err.Error()))
			}
		}
	}
	return errs
}

// ValidateRules checks policy rules as Kubernetes does: verbs are
// required; a rule is about resources (apiGroups and resources required) or
// about non-resource URLs, never both; namespaced roles have no
// non-resource rules.
func ValidateRules(rules []rbacv1.PolicyRule, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		rp := p.Index(i)
		if len(r.Verbs) == 0 {
			errs = append(errs, field.Required(rp.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(r.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(rp.Child("nonResourceURLs"), r.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(r.APIGroups) > 0 || len(r.Resources) > 0 || len(r.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(rp.Child("nonResourceURLs"), r.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(rp.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(rp.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	rp := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(rp.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	switch {
	case ref.Kind == "ClusterRole", namespaced && ref.Kind == "Role":
	default:
		errs = append(errs, field.NotSupported(rp.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(rp.Child("name"), ""))
	} else {
		for _, msg := range path.ValidatePathSegmentName(ref.Name, false) {
			errs = append(errs, field.Invalid(rp.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		sp := field.NewPath("subjects").Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.Name != "" {
				for _, msg := range apivalidation.NameIsDNSSubdomain(s.Name, false) {
					errs = append(errs, field.Invalid(sp.Child("name"), s.Name, msg))
				}
			}
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, field.Required(sp.Child("namespace"), ""))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != rbacv1.GroupName {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
			}
		default:
			errs = append(errs, field.NotSupported(sp.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
		}
	}
	return errs
}
