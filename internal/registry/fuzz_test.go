package registry_test

import (
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// leaseFields are the spec paths ValidateLease may report.
var leaseFields = map[string]bool{
	"spec.leaseDurationSeconds": true, "spec.leaseTransitions": true,
	"spec.strategy.strategy": true, "spec.preferredHolder": true,
}

// FuzzValidateLease builds leases from fuzzed fields (each pointer field
// present or not, per bit of set) and checks that ValidateLease never
// panics, never changes its input, gives the same answer twice, reports
// only LeaseSpec paths, and rejects exactly the out-of-range numbers.
func FuzzValidateLease(f *testing.F) {
	f.Add(uint8(0), "", int32(0), int32(0), "", "", int64(0))
	f.Add(uint8(0xff), "holder", int32(40), int32(1), "OldestEmulationVersion", "other", int64(1700000000123456000))
	f.Add(uint8(0xff), "", int32(0), int32(-1), "Newest", "p", int64(-1))
	f.Add(uint8(0x1c), "h", int32(-2147483648), int32(2147483647), "example.com/s", "", int64(0))
	f.Add(uint8(0x30), "", int32(1), int32(0), "", "p", int64(0))
	f.Add(uint8(0x30), "\xff\x00", int32(1), int32(0), "a/b/c", "\u00e9", int64(0))
	f.Add(uint8(0x30), "", int32(1), int32(0), "example.com/"+strings.Repeat("x", 70), "p", int64(0))
	f.Fuzz(func(t *testing.T, set uint8, holder string, duration, transitions int32, strategy, preferred string, nanos int64) {
		var spec coordinationv1.LeaseSpec
		ts := metav1.NewMicroTime(time.Unix(0, nanos))
		if set&1 != 0 {
			spec.HolderIdentity = ptr.To(holder)
		}
		if set&2 != 0 {
			spec.LeaseDurationSeconds = ptr.To(duration)
		}
		if set&4 != 0 {
			spec.LeaseTransitions = ptr.To(transitions)
		}
		if set&8 != 0 {
			spec.Strategy = ptr.To(coordinationv1.CoordinatedLeaseStrategy(strategy))
		}
		if set&16 != 0 {
			spec.PreferredHolder = ptr.To(preferred)
		}
		if set&32 != 0 {
			spec.AcquireTime, spec.RenewTime = &ts, &ts
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "default"}, Spec: spec}
		before := l.DeepCopy()

		errs := registry.ValidateLease(l)
		if !reflect.DeepEqual(l, before) {
			t.Fatalf("ValidateLease changed its input: %+v → %+v", before.Spec, l.Spec)
		}
		if again := registry.ValidateLease(l); !reflect.DeepEqual(errorTexts(errs), errorTexts(again)) {
			t.Fatalf("not deterministic: %v then %v", errs, again)
		}
		byField := map[string]int{}
		for _, e := range errs {
			if !leaseFields[e.Field] {
				t.Fatalf("error on unexpected path %s: %v", e.Field, e)
			}
			byField[e.Field]++
		}
		if want := set&2 != 0 && duration <= 0; want != (byField["spec.leaseDurationSeconds"] > 0) {
			t.Fatalf("duration %d (set %v): errors %v", duration, set&2 != 0, errs)
		}
		if want := set&4 != 0 && transitions < 0; want != (byField["spec.leaseTransitions"] > 0) {
			t.Fatalf("transitions %d (set %v): errors %v", transitions, set&4 != 0, errs)
		}
		hasStrategy := set&8 != 0 && strategy != ""
		if want := set&16 != 0 && preferred != "" && !hasStrategy; want != (byField["spec.preferredHolder"] > 0) {
			t.Fatalf("preferredHolder %q with strategy %q: errors %v", preferred, strategy, errs)
		}
		if set&8 == 0 && byField["spec.strategy.strategy"] > 0 {
			t.Fatalf("strategy error without a strategy: %v", errs)
		}
		if set&8 != 0 && strategy == string(coordinationv1.OldestEmulationVersion) && byField["spec.strategy.strategy"] > 0 {
			t.Fatalf("known strategy rejected: %v", errs)
		}
	})
}

func errorTexts(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, string(e.Type)+" "+e.Error())
	}
	return out
}

// FuzzValidateResourceQuota: any quota is validated without a panic or a
// change to it, and one accepted limits only object counts, in whole
// numbers of at least zero, without scopes.
func FuzzValidateResourceQuota(f *testing.F) {
	f.Add("count/leases.coordination.k8s.io", "2", false)
	f.Add("pods", "1", false)
	f.Add("count/events", "-1", true)
	f.Add("count/x", "1500m", false)
	f.Fuzz(func(t *testing.T, name, value string, scoped bool) {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return
		}
		rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "default"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceName(name): q}}}
		if scoped {
			rq.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}
		}
		before := rq.DeepCopy()
		errs := registry.ValidateResourceQuota(rq)
		if !reflect.DeepEqual(rq, before) {
			t.Fatalf("ValidateResourceQuota changed its input")
		}
		if len(errs) == 0 && (scoped || !strings.HasPrefix(name, "count/") || q.Sign() < 0 || q.MilliValue()%1000 != 0) {
			t.Fatalf("accepted %q=%s (scoped %v)", name, value, scoped)
		}
	})
}

// FuzzValidateEvent builds events.k8s.io/v1 Events from fuzzed fields and
// checks that the validators never panic or change their input, that the
// rules of creation through events.k8s.io/v1 include those of v1, and that
// an event those accept may be written again as it is, and with a series.
func FuzzValidateEvent(f *testing.F) {
	f.Add("default", "", "leasehold-agent", "web-1", "Starting", "Starting", "Normal", "note", int64(1700000000123456000), int32(0))
	f.Add("kube-system", "", "", "", "", "", "", "", int64(0), int32(0))
	f.Add("default", "kube-node-lease", "example.com/ctl", "i", "A", "R", "Warning", strings.Repeat("n", 1025), int64(1), int32(1))
	f.Add("other", "", "bad name", strings.Repeat("i", 129), "a", "r", "Info", "", int64(-5), int32(7))
	f.Fuzz(func(t *testing.T, ns, objNS, controller, instance, action, reason, typ, note string, nanos int64, count int32) {
		e := &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{Name: "e", Namespace: ns},
			ReportingController: controller, ReportingInstance: instance,
			Action: action, Reason: reason, Type: typ, Note: note,
			Regarding: corev1.ObjectReference{Kind: "Lease", Namespace: objNS, Name: "x"},
		}
		if nanos != 0 {
			e.EventTime = metav1.NewMicroTime(time.Unix(0, nanos))
		}
		if count != 0 {
			e.Series = &eventsv1.EventSeries{Count: count, LastObservedTime: e.EventTime}
		}
		before := e.DeepCopy()
		strict := registry.ValidateEventV1(e)
		legacy := registry.ValidateEvent(registry.EventToCore(e))
		update := registry.ValidateEventV1Update(e, e)
		if !reflect.DeepEqual(e, before) {
			t.Fatal("the validators changed their input")
		}
		for _, err := range legacy {
			if !slices.ContainsFunc(strict, func(s *field.Error) bool { return s.Error() == err.Error() }) {
				t.Fatalf("v1 refuses (%v) what events.k8s.io/v1 accepts: %v", err, strict)
			}
		}
		if !slices.EqualFunc(update, legacy, func(a, b *field.Error) bool { return a.Error() == b.Error() }) {
			t.Fatalf("writing an event again as it is: %v, want the rules of v1 alone: %v", update, legacy)
		}
		if len(strict) > 0 {
			return
		}
		if e.EventTime.IsZero() || (typ != corev1.EventTypeNormal && typ != corev1.EventTypeWarning) {
			t.Fatalf("accepted an event without eventTime or with type %q", typ)
		}
		again := e.DeepCopy()
		again.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: e.EventTime}
		if errs := registry.ValidateEventV1Update(again, e); len(errs) > 0 {
			t.Fatalf("a series of an accepted event is refused: %v", errs)
		}
	})
}

// FuzzValidateNode writes a Node over a stored one, both from fuzzed pod
// CIDRs (comma-separated), provider IDs and addresses, through the Node
// resource's prepare and validate steps, and checks what kube-apiserver's
// rules say: podCIDR is podCIDRs' first after the write, a provider ID or
// pod CIDRs once set are refused any change, an address listed twice is
// refused, CIDRs that parse strictly (two at most, of two families) pass
// and ones that do not parse at all do not (unless the stored Node had the
// same at the same place: ratcheting); and the stored Node is never
// changed.
func FuzzValidateNode(f *testing.F) {
	f.Add("", "", "10.0.0.0/24", "", "", "aws:///a", "10.0.0.1,web-1")
	f.Add("10.0.0.0/24", "10.0.0.0/24", "", "10.0.0.0/24,fd00::/64", "aws:///a", "aws:///b", "10.0.0.1,10.0.0.1")
	f.Add("fd00::/64", "", "10.1.0.0/24", "10.0.0.0/24,10.1.0.0/24,fd00::/64", "", "", "")
	f.Add("", "010.0.0.0/24,x", "10.0.0.1", "", "p", "p", "::1,::1,web-1")
	f.Fuzz(func(t *testing.T, oldCIDR, oldCIDRs, newCIDR, newCIDRs, oldProvider, newProvider, addresses string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
			Spec: corev1.NodeSpec{PodCIDR: oldCIDR, PodCIDRs: split(oldCIDRs), ProviderID: oldProvider}}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
			Spec: corev1.NodeSpec{PodCIDR: newCIDR, PodCIDRs: split(newCIDRs), ProviderID: newProvider}}
		for _, a := range split(addresses) {
			typ := corev1.NodeInternalIP
			if net.ParseIP(a) == nil {
				typ = corev1.NodeHostName
			}
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: typ, Address: a})
		}
		created := n.DeepCopy()
		registry.Nodes.PrepareForCreate(created)
		before := old.DeepCopy()
		status := n.Status
		registry.Nodes.PrepareForUpdate(n, old)
		n.Status = status // as an update of /status would keep them
		errs := registry.Nodes.ValidateUpdate(n, old)
		if !reflect.DeepEqual(old, before) {
			t.Fatal("the stored node changed")
		}
		if again := registry.Nodes.ValidateUpdate(n, old); !reflect.DeepEqual(errorTexts(errs), errorTexts(again)) {
			t.Fatalf("not deterministic: %v then %v", errs, again)
		}
		for _, spec := range []corev1.NodeSpec{created.Spec, n.Spec} {
			if len(spec.PodCIDRs) > 0 && spec.PodCIDR != spec.PodCIDRs[0] || len(spec.PodCIDRs) == 0 && spec.PodCIDR != "" {
				t.Fatalf("podCIDR %q, podCIDRs %q", spec.PodCIDR, spec.PodCIDRs)
			}
			if newCIDR != "" && spec.PodCIDR != newCIDR {
				t.Fatalf("podCIDR %q became %q", newCIDR, spec.PodCIDR)
			}
		}

		count := map[string]int{}
		for _, e := range errs {
			path := e.Field
			if i := strings.IndexByte(path, '['); i >= 0 {
				path = path[:i]
			}
			count[path+" "+string(e.Type)]++
		}
		storedCIDRs := old.Spec.PodCIDRs
		if oldCIDR != "" && (len(storedCIDRs) == 0 || storedCIDRs[0] != oldCIDR) {
			storedCIDRs = []string{oldCIDR}
		}
		if want := len(storedCIDRs) > 0 && !slices.Equal(storedCIDRs, n.Spec.PodCIDRs); want != (count["spec.podCIDRs "+string(field.ErrorTypeForbidden)] > 0) {
			t.Fatalf("stored pod CIDRs %q, new %q: errors %v", storedCIDRs, n.Spec.PodCIDRs, errs)
		}
		if want := oldProvider != "" && oldProvider != newProvider; want != (count["spec.providerID "+string(field.ErrorTypeForbidden)] > 0) {
			t.Fatalf("provider ID %q → %q: errors %v", oldProvider, newProvider, errs)
		}
		repeated := 0
		for i, a := range n.Status.Addresses {
			if slices.Contains(n.Status.Addresses[:i], a) {
				repeated++
			}
		}
		if got := count["status.addresses "+string(field.ErrorTypeDuplicate)]; got != repeated {
			t.Fatalf("%d addresses repeated, %d errors: %v", repeated, got, errs)
		}

		strictly, families := true, map[bool]bool{}
		for i, c := range n.Spec.PodCIDRs {
			p, err := netip.ParsePrefix(c)
			strictly = strictly && err == nil
			families[err == nil && p.Addr().Unmap().Is4()] = true
			// One the stored node had at that place already is ratcheted.
			stored := i < len(old.Spec.PodCIDRs) && old.Spec.PodCIDRs[i] == c
			if _, _, err := netutils.ParseCIDRSloppy(c); err != nil && !stored && !slices.ContainsFunc(errs, func(e *field.Error) bool {
				return e.Field == fmt.Sprintf("spec.podCIDRs[%d]", i) && e.Type == field.ErrorTypeInvalid
			}) {
				t.Fatalf("pod CIDR %q accepted: %v", c, errs)
			}
		}
		accepted := count["spec.podCIDRs "+string(field.ErrorTypeInvalid)] == 0 && count["spec.podCIDRs "+string(field.ErrorTypeDuplicate)] == 0
		if strictly && len(families) == len(n.Spec.PodCIDRs) && !accepted {
			t.Fatalf("pod CIDRs %q refused: %v", n.Spec.PodCIDRs, errs)
		}
	})
}

// FuzzValidateRBAC checks a role's rules and a binding's reference and
// subject, from fuzzed fields, against the rules kube-apiserver applies:
// a rule has verbs, and either API groups and resources or, in a
// ClusterRole only, non-resource URLs alone; a binding refers to a
// ClusterRole (or, in a namespace, a Role) by a name that may be a path
// segment, and each subject has a name and a kind it knows, a service
// account a DNS subdomain for a name and, bound cluster-wide, a namespace.
func FuzzValidateRBAC(f *testing.F) {
	f.Add("get,list", "coordination.k8s.io", "leases", "", false, "ClusterRole", "lease-reader", "User", "bob", "", "")
	f.Add("get", "", "", "/healthz", true, "Role", "r", "ServiceAccount", "Bad_Name", "", "")
	f.Add("", "x", "", "/metrics", false, "Role", "a/b", "Group", "", "", "example.com")
	f.Add("*", "*", "*", "", true, "", "", "Robot", "r", "ns", "rbac.authorization.k8s.io")
	f.Fuzz(func(t *testing.T, verbs, groups, resources, urls string, namespaced bool, refKind, refName, kind, name, namespace, apiGroup string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		rule := rbacv1.PolicyRule{Verbs: split(verbs), APIGroups: split(groups), Resources: split(resources), NonResourceURLs: split(urls)}
		var roleErrs field.ErrorList
		if namespaced {
			roleErrs = registry.Roles.Validate(&rbacv1.Role{Rules: []rbacv1.PolicyRule{rule}})
		} else {
			roleErrs = registry.ClusterRoles.Validate(&rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{rule}})
		}
		ruleOK := len(rule.Verbs) > 0
		if len(rule.NonResourceURLs) > 0 {
			ruleOK = ruleOK && !namespaced && len(rule.APIGroups) == 0 && len(rule.Resources) == 0
		} else {
			ruleOK = ruleOK && len(rule.APIGroups) > 0 && len(rule.Resources) > 0
		}
		if ruleOK != (len(roleErrs) == 0) {
			t.Fatalf("rule %+v (namespaced %v): errors %v", rule, namespaced, roleErrs)
		}

		ref := rbacv1.RoleRef{Kind: refKind, Name: refName}
		subject := rbacv1.Subject{Kind: kind, Name: name, Namespace: namespace, APIGroup: apiGroup}
		var bindErrs field.ErrorList
		if namespaced {
			b := &rbacv1.RoleBinding{RoleRef: ref, Subjects: []rbacv1.Subject{subject}}
			registry.RoleBindings.PrepareForCreate(b)
			bindErrs = registry.RoleBindings.Validate(b)
			ref, subject = b.RoleRef, b.Subjects[0]
		} else {
			b := &rbacv1.ClusterRoleBinding{RoleRef: ref, Subjects: []rbacv1.Subject{subject}}
			registry.ClusterRoleBindings.PrepareForCreate(b)
			bindErrs = registry.ClusterRoleBindings.Validate(b)
			ref, subject = b.RoleRef, b.Subjects[0]
		}
		if len(bindErrs) > 0 {
			return
		}
		if ref.APIGroup != rbacv1.GroupName || !(ref.Kind == "ClusterRole" || namespaced && ref.Kind == "Role") ||
			len(path.ValidatePathSegmentName(ref.Name, false)) > 0 || subject.Name == "" {
			t.Fatalf("accepted roleRef %+v, subject %+v (namespaced %v)", ref, subject, namespaced)
		}
		switch subject.Kind {
		case rbacv1.ServiceAccountKind:
			if subject.APIGroup != "" || len(apivalidation.NameIsDNSSubdomain(subject.Name, false)) > 0 || !namespaced && subject.Namespace == "" {
				t.Fatalf("accepted service account subject %+v (namespaced %v)", subject, namespaced)
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if subject.APIGroup != rbacv1.GroupName {
				t.Fatalf("accepted subject %+v", subject)
			}
		default:
			t.Fatalf("accepted a subject of kind %q", subject.Kind)
		}
	})
}
