package registry_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// The messages below are kube-apiserver's, character for character: client
// tools match on them, and `kubectl apply` prints them as they are.
const (
	nameMsg              = `a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`
	labelMsg             = `a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`
	namePartMsg          = `name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`
	qualifiedMsg         = `a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`
	notStandardFinalizer = "name is neither a standard finalizer name nor is it fully qualified"
)

// wantErr is one expected field error: its type and its full text
// ("path: Type: detail"), as kube-apiserver puts it in a Status cause.
type wantErr struct {
	typ  field.ErrorType
	text string
}

func checkErrors(t *testing.T, got field.ErrorList, want []wantErr) {
	t.Helper()
	var g, w []string
	for _, e := range got {
		g = append(g, string(e.Type)+" | "+e.Error())
	}
	for _, e := range want {
		w = append(w, string(e.typ)+" | "+e.text)
	}
	if !slices.Equal(g, w) {
		t.Errorf("errors\n got %s\nwant %s", strings.Join(g, "\n     "), strings.Join(w, "\n     "))
	}
}

func TestValidateLease(t *testing.T) {
	now := metav1.NewMicroTime(time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC))
	cases := []struct {
		name string
		spec coordinationv1.LeaseSpec
		want []wantErr
	}{
		{name: "empty spec"},
		{name: "every field valid", spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](40), AcquireTime: &now, RenewTime: &now,
			LeaseTransitions: ptr.To[int32](0), Strategy: ptr.To(coordinationv1.OldestEmulationVersion), PreferredHolder: ptr.To("b"),
		}},
		{name: "qualified custom strategy", spec: coordinationv1.LeaseSpec{
			Strategy: ptr.To(coordinationv1.CoordinatedLeaseStrategy("example.com/my-strategy")), PreferredHolder: ptr.To("b"),
		}},
		{name: "empty preferred holder needs no strategy", spec: coordinationv1.LeaseSpec{PreferredHolder: ptr.To("")}},
		{name: "largest duration", spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](1<<31 - 1)}},
		{name: "zero duration", spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](0)},
			want: []wantErr{{field.ErrorTypeInvalid, "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"}}},
		{name: "negative duration", spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](-5)},
			want: []wantErr{{field.ErrorTypeInvalid, "spec.leaseDurationSeconds: Invalid value: -5: must be greater than 0"}}},
		{name: "negative transitions", spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](-1)},
			want: []wantErr{{field.ErrorTypeInvalid, "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"}}},
		{name: "preferred holder without strategy", spec: coordinationv1.LeaseSpec{PreferredHolder: ptr.To("b")},
			want: []wantErr{{field.ErrorTypeForbidden, "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"}}},
		{name: "preferred holder with empty strategy", spec: coordinationv1.LeaseSpec{PreferredHolder: ptr.To("b"), Strategy: ptr.To(coordinationv1.CoordinatedLeaseStrategy(""))},
			want: []wantErr{
				{field.ErrorTypeNotSupported, `spec.strategy.strategy: Unsupported value: "": supported values: "OldestEmulationVersion"`},
				{field.ErrorTypeForbidden, "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"},
			}},
		{name: "unknown short strategy", spec: coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.CoordinatedLeaseStrategy("Newest"))},
			want: []wantErr{{field.ErrorTypeNotSupported, `spec.strategy.strategy: Unsupported value: "Newest": supported values: "OldestEmulationVersion"`}}},
		{name: "strategy with a bad name part", spec: coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.CoordinatedLeaseStrategy("example.com/Bad Name"))},
			want: []wantErr{{field.ErrorTypeInvalid, `spec.strategy.strategy: Invalid value: "example.com/Bad Name": ` + namePartMsg}}},
		{name: "strategy with two slashes", spec: coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.CoordinatedLeaseStrategy("a/b/c"))},
			want: []wantErr{{field.ErrorTypeInvalid, `spec.strategy.strategy: Invalid value: "a/b/c": ` + qualifiedMsg}}},
		{name: "errors in field order", spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To[int32](0), LeaseTransitions: ptr.To[int32](-2), PreferredHolder: ptr.To("p"),
		}, want: []wantErr{
			{field.ErrorTypeInvalid, "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"},
			{field.ErrorTypeInvalid, "spec.leaseTransitions: Invalid value: -2: must be greater than or equal to 0"},
			{field.ErrorTypeForbidden, "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "default"}, Spec: tc.spec}
			checkErrors(t, registry.ValidateLease(l), tc.want)
			// The resource's hooks are the same check, on create and update.
			checkErrors(t, registry.Leases.Validate(l), tc.want)
			checkErrors(t, registry.Leases.ValidateUpdate(l, l.DeepCopy()), tc.want)
		})
	}
}

func TestValidateObjectMeta(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		name string
		res  *registry.Resource
		meta metav1.ObjectMeta
		want []wantErr
	}{
		{name: "lease ok", res: registry.Leases, meta: metav1.ObjectMeta{Name: "kube-node.a-1", Namespace: "default"}},
		// The server turns generateName into a name before validating.
		{name: "lease generateName only", res: registry.Leases, meta: metav1.ObjectMeta{GenerateName: "l-", Namespace: "default"},
			want: []wantErr{{field.ErrorTypeRequired, "metadata.name: Required value: name or generateName is required"}}},
		{name: "lease bad name", res: registry.Leases, meta: metav1.ObjectMeta{Name: "Bad_Name", Namespace: "default"},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.name: Invalid value: "Bad_Name": ` + nameMsg}}},
		{name: "lease without name or namespace", res: registry.Leases, meta: metav1.ObjectMeta{},
			want: []wantErr{
				{field.ErrorTypeRequired, "metadata.name: Required value: name or generateName is required"},
				{field.ErrorTypeRequired, "metadata.namespace: Required value"},
			}},
		{name: "lease bad label key", res: registry.Leases, meta: metav1.ObjectMeta{Name: "a", Namespace: "default", Labels: map[string]string{"bad key!": "v"}},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.labels: Invalid value: "bad key!": ` + namePartMsg}}},
		{name: "lease finalizer needs no standard name", res: registry.Leases, meta: metav1.ObjectMeta{Name: "a", Namespace: "default", Finalizers: []string{"foo"}}},
		{name: "namespace ok", res: registry.Namespaces, meta: metav1.ObjectMeta{Name: "kube-node-lease"}},
		{name: "namespace name is a DNS label", res: registry.Namespaces, meta: metav1.ObjectMeta{Name: "a.b"},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.name: Invalid value: "a.b": must not contain dots`}}},
		{name: "namespace bad name", res: registry.Namespaces, meta: metav1.ObjectMeta{Name: "Bad_Name"},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.name: Invalid value: "Bad_Name": ` + labelMsg}}},
		{name: "namespace name too long", res: registry.Namespaces, meta: metav1.ObjectMeta{Name: long},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.name: Invalid value: "` + long + `": must be no more than 63 characters`}}},
		{name: "namespace in a namespace", res: registry.Namespaces, meta: metav1.ObjectMeta{Name: "a", Namespace: "b"},
			want: []wantErr{{field.ErrorTypeForbidden, "metadata.namespace: Forbidden: not allowed on this type"}}},
		// kube-apiserver checks metadata.finalizers of core kinds (Namespace
		// among them) for standard or qualified names.
		{name: "namespace metadata finalizer not qualified", res: registry.Namespaces, meta: metav1.ObjectMeta{Name: "a", Finalizers: []string{"foo"}},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.finalizers[0]: Invalid value: "foo": ` + notStandardFinalizer}}},
		{name: "namespace metadata finalizers standard and qualified", res: registry.Namespaces,
			meta: metav1.ObjectMeta{Name: "a", Finalizers: []string{"kubernetes", "orphan", "example.com/x"}}},
		// RBAC's and events.k8s.io's validation is core's too; a v1
		// Event's metadata only gets the generic checks, its name as a
		// path segment.
		{name: "clusterrole finalizer not qualified", res: registry.ClusterRoles, meta: metav1.ObjectMeta{Name: "a", Finalizers: []string{"foo"}},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.finalizers[0]: Invalid value: "foo": ` + notStandardFinalizer}}},
		{name: "events.k8s.io finalizer not qualified", res: registry.EventsV1, meta: metav1.ObjectMeta{Name: "a", Namespace: "default", Finalizers: []string{"foo"}},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.finalizers[0]: Invalid value: "foo": ` + notStandardFinalizer}}},
		{name: "v1 event finalizer and name", res: registry.Events, meta: metav1.ObjectMeta{Name: "Foo_Bar", Namespace: "default", Finalizers: []string{"foo"}}},
		{name: "v1 event name not a path segment", res: registry.Events, meta: metav1.ObjectMeta{Name: "a/b", Namespace: "default"},
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.name: Invalid value: "a/b": may not contain '/'`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, registry.ValidateObjectMeta(tc.res, &tc.meta), tc.want)
		})
	}
}

func TestValidateObjectMetaUpdate(t *testing.T) {
	old := metav1.ObjectMeta{Name: "a", Namespace: "default", UID: "u1", ResourceVersion: "5", CreationTimestamp: metav1.Unix(100, 0)}
	// As kube-apiserver reports them: what the comparison with the stored
	// metadata finds twice (every update's, then the kind's), labels and
	// annotations three times (the metadata on its own, then both
	// comparisons), finalizers once (on its own), and core's finalizer rule
	// once.
	once := func(w wantErr) []wantErr { return []wantErr{w} }
	twice := func(w wantErr) []wantErr { return []wantErr{w, w} }
	thrice := func(w wantErr) []wantErr { return []wantErr{w, w, w} }
	cases := []struct {
		name   string
		res    *registry.Resource
		change func(m *metav1.ObjectMeta)
		want   []wantErr
	}{
		{name: "labels may change", change: func(m *metav1.ObjectMeta) { m.Labels = map[string]string{"a": "b"} }},
		{name: "uid is immutable", change: func(m *metav1.ObjectMeta) { m.UID = types.UID("u2") },
			want: twice(wantErr{field.ErrorTypeInvalid, `metadata.uid: Invalid value: "u2": field is immutable`})},
		{name: "name is immutable", change: func(m *metav1.ObjectMeta) { m.Name = "b" },
			want: twice(wantErr{field.ErrorTypeInvalid, `metadata.name: Invalid value: "b": field is immutable`})},
		{name: "namespace is immutable", change: func(m *metav1.ObjectMeta) { m.Namespace = "other" },
			want: twice(wantErr{field.ErrorTypeInvalid, `metadata.namespace: Invalid value: "other": field is immutable`})},
		{name: "a bad label", change: func(m *metav1.ObjectMeta) { m.Labels = map[string]string{"a b": "c"} },
			want: thrice(wantErr{field.ErrorTypeInvalid, `metadata.labels: Invalid value: "a b": ` + namePartMsg})},
		{name: "a finalizer that is not a qualified name", change: func(m *metav1.ObjectMeta) { m.Finalizers = []string{"-bad/x"} },
			want: once(wantErr{field.ErrorTypeInvalid, `metadata.finalizers: Invalid value: "-bad/x": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`})},
		{name: "orphan and foregroundDeletion", change: func(m *metav1.ObjectMeta) { m.Finalizers = []string{"orphan", "foregroundDeletion"} },
			want: once(wantErr{field.ErrorTypeInvalid, `metadata.finalizers: Invalid value: ["orphan","foregroundDeletion"]: finalizer orphan and foregroundDeletion cannot be both set`})},
		{name: "a short finalizer on a Lease", change: func(m *metav1.ObjectMeta) { m.Finalizers = []string{"foo"} }},
		{name: "a short finalizer on a Role", res: registry.Roles, change: func(m *metav1.ObjectMeta) { m.Finalizers = []string{"foo"} },
			want: []wantErr{{field.ErrorTypeInvalid, `metadata.finalizers[0]: Invalid value: "foo": ` + notStandardFinalizer}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.res
			if res == nil {
				res = registry.Leases
			}
			m := *old.DeepCopy()
			tc.change(&m)
			checkErrors(t, registry.ValidateObjectMetaUpdate(res, &m, &old), tc.want)
		})
	}
}

// TestValidateNamespace checks spec.finalizers as kube-apiserver does: each
// must be a qualified name and, without a domain, one of the standard
// finalizers; errors carry the path spec.finalizers without an index.
func TestValidateNamespace(t *testing.T) {
	cases := []struct {
		name       string
		finalizers []corev1.FinalizerName
		want       []wantErr
	}{
		{name: "none"},
		{name: "kubernetes", finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		{name: "qualified", finalizers: []corev1.FinalizerName{"kubernetes", "example.com/cleanup"}},
		{name: "not standard", finalizers: []corev1.FinalizerName{"kubernetes", "foo"},
			want: []wantErr{{field.ErrorTypeInvalid, `spec.finalizers: Invalid value: "foo": ` + notStandardFinalizer}}},
		{name: "not a qualified name", finalizers: []corev1.FinalizerName{"Bad Name"},
			want: []wantErr{
				{field.ErrorTypeInvalid, `spec.finalizers: Invalid value: "Bad Name": ` + namePartMsg},
				{field.ErrorTypeInvalid, `spec.finalizers: Invalid value: "Bad Name": ` + notStandardFinalizer},
			}},
		{name: "bad qualified name", finalizers: []corev1.FinalizerName{"example.com/Bad Name"},
			want: []wantErr{{field.ErrorTypeInvalid, `spec.finalizers: Invalid value: "example.com/Bad Name": ` + namePartMsg}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NamespaceSpec{Finalizers: tc.finalizers}}
			checkErrors(t, registry.Namespaces.Validate(ns), tc.want)
			checkErrors(t, registry.Namespaces.ValidateUpdate(ns, ns.DeepCopy()), tc.want)
		})
	}
}

// TestNamespacePrepare checks what the server sets on namespaces: the
// kubernetes finalizer and Active phase on create, the immutable name label,
// and spec and status kept from the stored object on update.
func TestNamespacePrepare(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{corev1.LabelMetadataName: "forged"}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	registry.Namespaces.PrepareForCreate(ns)
	if ns.Status.Phase != corev1.NamespaceActive || !slices.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{corev1.FinalizerKubernetes}) ||
		ns.Labels[corev1.LabelMetadataName] != "n" {
		t.Errorf("after PrepareForCreate: %+v", ns)
	}
	upd := ns.DeepCopy()
	upd.Spec.Finalizers = nil
	upd.Status.Phase = corev1.NamespaceTerminating
	delete(upd.Labels, corev1.LabelMetadataName)
	registry.Namespaces.PrepareForUpdate(upd, ns)
	if upd.Status.Phase != corev1.NamespaceActive || len(upd.Spec.Finalizers) != 1 || upd.Labels[corev1.LabelMetadataName] != "n" {
		t.Errorf("after PrepareForUpdate: %+v", upd)
	}
}

// TestNamespacePhase: a namespace's phase, written through /status, is
// Active until it is being deleted and Terminating after, as kube-apiserver
// has it; a phase stored before the rule does not hold back an update that
// keeps it.
func TestNamespacePhase(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	active := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	terminating := active.DeepCopy()
	terminating.DeletionTimestamp, terminating.Status.Phase = &deleted, corev1.NamespaceTerminating
	with := func(ns *corev1.Namespace, phase corev1.NamespacePhase) *corev1.Namespace {
		ns = ns.DeepCopy()
		ns.Status.Phase = phase
		return ns
	}
	for _, tc := range []struct {
		name     string
		obj, old *corev1.Namespace
		want     []wantErr
	}{
		{"active kept", active, active, nil},
		{"terminating while not deleted", with(active, corev1.NamespaceTerminating), active,
			[]wantErr{{field.ErrorTypeInvalid, `status.Phase: Invalid value: "Terminating": may only be 'Active' if ` + "`deletionTimestamp`" + ` is empty`}}},
		{"unknown phase", with(active, "Bogus"), active,
			[]wantErr{{field.ErrorTypeInvalid, `status.Phase: Invalid value: "Bogus": may only be 'Active' if ` + "`deletionTimestamp`" + ` is empty`}}},
		{"active again while deleted", with(terminating, corev1.NamespaceActive), terminating,
			[]wantErr{{field.ErrorTypeInvalid, `status.Phase: Invalid value: "Active": may only be 'Terminating' if ` + "`deletionTimestamp`" + ` is not empty`}}},
		{"a stored bad phase kept", with(active, "Bogus"), with(active, "Bogus"), nil},
		{"a stored bad phase mended", active, with(active, "Bogus"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, registry.Namespaces.ValidateUpdate(tc.obj, tc.old), tc.want)
		})
	}
}

// TestValidateEvent checks Events as kube-apiserver does: lenient through
// v1, where old clients write them; strict on create through
// events.k8s.io/v1; and an update through events.k8s.io/v1 may change the
// series and nothing it reported.
func TestValidateEvent(t *testing.T) {
	at := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC))
	node := corev1.ObjectReference{Kind: "Node", Name: "web-1"}
	lease := corev1.ObjectReference{Kind: "Lease", Namespace: "kube-node-lease", Name: "web-1"}
	v1 := func(ns string, eventTime metav1.MicroTime, regarding corev1.ObjectReference, f func(*eventsv1.Event)) *eventsv1.Event {
		e := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, EventTime: eventTime,
			ReportingController: "leasehold-agent", ReportingInstance: "web-1",
			Action: "Starting", Reason: "Starting", Type: corev1.EventTypeNormal, Regarding: regarding,
		}
		if f != nil {
			f(e)
		}
		return e
	}
	legacy := func(ns string, involved corev1.ObjectReference) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, InvolvedObject: involved, Reason: "Old"}
	}
	mismatch := func(ns string) wantErr {
		return wantErr{field.ErrorTypeInvalid, `involvedObject.namespace: Invalid value: "` + ns + `": does not match event.namespace`}
	}
	for _, c := range []struct {
		name string
		core *corev1.Event   // through v1
		ev   *eventsv1.Event // through events.k8s.io/v1
		want []wantErr
	}{
		{name: "v1 without eventTime, a node's in default", core: legacy("default", node)},
		{name: "v1 without eventTime, a node's in kube-system", core: legacy("kube-system", node), want: []wantErr{mismatch("")}},
		{name: "v1 without eventTime, a lease's in its namespace", core: legacy("kube-node-lease", lease)},
		{name: "v1 without eventTime, a lease's elsewhere", core: legacy("default", lease), want: []wantErr{mismatch("kube-node-lease")}},
		{name: "v1 without eventTime needs nothing else", core: &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "default"}}},
		{name: "v1 with eventTime names its reporter", core: &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "default"}, EventTime: at, InvolvedObject: node,
			ReportingController: "not a name!", Message: strings.Repeat("m", 1025),
		}, want: []wantErr{
			{field.ErrorTypeInvalid, `reportingController: Invalid value: "not a name!": ` + namePartMsg},
			{field.ErrorTypeRequired, "reportingInstance: Required value"},
			{field.ErrorTypeRequired, "action: Required value"},
			{field.ErrorTypeRequired, "reason: Required value"},
			{field.ErrorTypeInvalid, `message: Invalid value: "": can have at most 1024 characters`},
		}},
		{name: "events.k8s.io/v1, a node's in default", ev: v1("default", at, node, nil)},
		{name: "events.k8s.io/v1, a node's in kube-system", ev: v1("kube-system", at, node, nil)},
		{name: "events.k8s.io/v1, a node's in another namespace", ev: v1("kube-public", at, node, nil), want: []wantErr{mismatch("")}},
		// With eventTime, kube-apiserver does not hold a namespaced
		// object's events to its namespace.
		{name: "events.k8s.io/v1, a lease's elsewhere", ev: v1("default", at, lease, nil)},
		{name: "events.k8s.io/v1 with a series", ev: v1("default", at, node, func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: at}
		})},
		{name: "events.k8s.io/v1 needs eventTime", ev: v1("default", metav1.MicroTime{}, node, nil), want: []wantErr{
			{field.ErrorTypeRequired, "eventTime: Required value"},
		}},
		{name: "events.k8s.io/v1 without a reporter", ev: v1("default", at, node, func(e *eventsv1.Event) {
			e.ReportingController, e.ReportingInstance, e.Action, e.Reason = "", "", "", ""
		}), want: []wantErr{
			// kube-apiserver reports an empty name as missing and as
			// not a qualified name.
			{field.ErrorTypeRequired, "reportingController: Required value"},
			{field.ErrorTypeInvalid, `reportingController: Invalid value: "": name part must be non-empty`},
			{field.ErrorTypeInvalid, `reportingController: Invalid value: "": ` + namePartMsg},
			{field.ErrorTypeRequired, "reportingInstance: Required value"},
			{field.ErrorTypeRequired, "action: Required value"},
			{field.ErrorTypeRequired, "reason: Required value"},
		}},
		{name: "events.k8s.io/v1 too long", ev: v1("default", at, node, func(e *eventsv1.Event) {
			e.ReportingInstance, e.Action, e.Reason = strings.Repeat("i", 129), strings.Repeat("a", 129), strings.Repeat("r", 129)
			e.Note = strings.Repeat("n", 1024)
		}), want: []wantErr{
			{field.ErrorTypeInvalid, `reportingInstance: Invalid value: "": can have at most 128 characters`},
			{field.ErrorTypeInvalid, `action: Invalid value: "": can have at most 128 characters`},
			{field.ErrorTypeInvalid, `reason: Invalid value: "": can have at most 128 characters`},
		}},
		{name: "events.k8s.io/v1 bad series, type and deprecated fields", ev: v1("default", at, node, func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 1}
			e.Type = "Info"
			e.DeprecatedFirstTimestamp = metav1.NewTime(at.Time)
			e.DeprecatedLastTimestamp = metav1.NewTime(at.Time)
			e.DeprecatedCount = 3
			e.DeprecatedSource = corev1.EventSource{Host: "web-1"}
		}), want: []wantErr{
			{field.ErrorTypeInvalid, `series.count: Invalid value: "": should be at least 2`},
			{field.ErrorTypeRequired, "series.lastObservedTime: Required value"},
			{field.ErrorTypeInvalid, `type: Invalid value: "": has invalid value: Info`},
			{field.ErrorTypeInvalid, `firstTimestamp: Invalid value: "": needs to be unset`},
			{field.ErrorTypeInvalid, `lastTimestamp: Invalid value: "": needs to be unset`},
			{field.ErrorTypeInvalid, `count: Invalid value: "": needs to be unset`},
			{field.ErrorTypeInvalid, `source: Invalid value: "": needs to be unset`},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.core != nil {
				checkErrors(t, registry.ValidateEvent(c.core), c.want)
			} else {
				checkErrors(t, registry.ValidateEventV1(c.ev), c.want)
			}
		})
	}

	old := v1("default", at, node, nil)
	series := old.DeepCopy()
	series.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(at.Add(time.Minute))}
	series.Labels = map[string]string{"a": "b"}
	checkErrors(t, registry.ValidateEventV1Update(series, old), nil)
	badSeries := old.DeepCopy()
	badSeries.Series = &eventsv1.EventSeries{Count: 0, LastObservedTime: at}
	checkErrors(t, registry.ValidateEventV1Update(badSeries, old), []wantErr{
		{field.ErrorTypeInvalid, `series.count: Invalid value: "": should be at least 2`},
	})
	// A series kept as it was is not checked again.
	checkErrors(t, registry.ValidateEventV1Update(badSeries, badSeries), nil)
	changed := old.DeepCopy()
	changed.Note, changed.Action, changed.Type = "other", "Other", corev1.EventTypeWarning
	checkErrors(t, registry.ValidateEventV1Update(changed, old), []wantErr{
		{field.ErrorTypeInvalid, `message: Invalid value: "other": field is immutable`},
		{field.ErrorTypeInvalid, `type: Invalid value: "Warning": field is immutable`},
		{field.ErrorTypeInvalid, `action: Invalid value: "Other": field is immutable`},
	})
}

// TestValidateLeaseCandidate: versions are read as Kubernetes reads them
// (blang/semver: no leading "v", no spaces), and one that does not parse
// counts as 0.0.0 in the checks that follow, as there.
func TestValidateLeaseCandidate(t *testing.T) {
	cand := func(binary, emulation string) *coordinationv1beta1.LeaseCandidate {
		return &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
			Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: "l", BinaryVersion: binary, EmulationVersion: emulation,
				Strategy: coordinationv1.OldestEmulationVersion},
		}
	}
	const semverMsg = "must be a valid semantic version"
	cases := []struct {
		name              string
		binary, emulation string
		want              []wantErr
	}{
		{name: "valid", binary: "1.37.0", emulation: "1.36.0"},
		{name: "a leading v", binary: "v1.30.0", emulation: "1.30.0", want: []wantErr{
			{field.ErrorTypeInvalid, `spec.binaryVersion: Invalid value: "v1.30.0": ` + semverMsg},
			{field.ErrorTypeInvalid, `spec.binaryVersion: Invalid value: "v1.30.0": must be greater than or equal to ` + "`emulationVersion`"}}},
		{name: "spaces", binary: " 1.30.0 ", emulation: "1.30.0", want: []wantErr{
			{field.ErrorTypeInvalid, `spec.binaryVersion: Invalid value: " 1.30.0 ": ` + semverMsg},
			{field.ErrorTypeInvalid, `spec.binaryVersion: Invalid value: " 1.30.0 ": must be greater than or equal to ` + "`emulationVersion`"}}},
		{name: "emulation 0.0.0", binary: "1.30.0", emulation: "0.0.0", want: []wantErr{
			{field.ErrorTypeRequired, "spec.emulationVersion: Required value: must be specified when `strategy` is 'OldestEmulationVersion'"}}},
		{name: "emulation not a version", binary: "1.30.0", emulation: "bad", want: []wantErr{
			{field.ErrorTypeInvalid, `spec.emulationVersion: Invalid value: "bad": ` + semverMsg},
			{field.ErrorTypeRequired, "spec.emulationVersion: Required value: must be specified when `strategy` is 'OldestEmulationVersion'"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, registry.LeaseCandidates.Validate(cand(tc.binary, tc.emulation)), tc.want)
		})
	}
}

// TestNodeAddressesAsSent: a Node's addresses are not checked one by one,
// as kube-apiserver leaves them; a namespace's status written without a
// phase is Active, as kube-apiserver's decoding defaults it.
func TestNodeAddressesAsSent(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Address: "1.2.3.4"}, {Type: corev1.NodeHostName}}}}
	checkErrors(t, registry.Nodes.Validate(n), nil)
	ns, old := &corev1.Namespace{}, &corev1.Namespace{Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	registry.Namespaces.PrepareForStatusUpdate(ns, old)
	if ns.Status.Phase != corev1.NamespaceActive {
		t.Errorf("a status without a phase became %q, want Active", ns.Status.Phase)
	}
}

// TestValidateNamespaceFinalize: a finalize names each bad finalizer at
// its index, as Kubernetes' finalize validation does.
func TestValidateNamespaceFinalize(t *testing.T) {
	ns := &corev1.Namespace{Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes", "foo"}}}
	checkErrors(t, registry.ValidateNamespaceFinalize(ns), []wantErr{
		{field.ErrorTypeInvalid, `spec.finalizers[1]: Invalid value: "foo": ` + notStandardFinalizer}})
}
