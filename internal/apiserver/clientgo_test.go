package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/store"
)

// protobuf is the content type Kubernetes' own components use.
const protobuf = "application/vnd.kubernetes.protobuf"

// wait bounds every poll and every wait for a watch event in these tests.
const wait = 20 * time.Second

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// cgEnv is what each client-go case gets: the shared server, a protobuf
// clientset and a fresh namespace of its own.
type cgEnv struct {
	s      *apiservertest.Server
	cs     kubernetes.Interface
	ns     string
	leases coordinationv1client.LeaseInterface
}

// TestClientGo drives one in-process server on embedded etcd with client-go
// as Kubernetes components use it: typed clientsets speaking protobuf,
// informers, watches, the metadata client and server-side apply.
func TestClientGo(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Store: store.Config{BookmarkInterval: 100 * time.Millisecond}})
	cs := s.Client(t, protobuf)
	cases := []struct {
		name string
		run  func(t *testing.T, e *cgEnv)
	}{
		{"CRUDEveryLeaseSpecField", testCRUD},
		{"StatusErrors", testStatusErrors},
		{"Invalid", testInvalid},
		{"DryRun", testDryRun},
		{"FieldValidation", testFieldValidation},
		{"DeprecationWarnings", testDeprecationWarnings},
		{"PatchTypes", testPatchTypes},
		{"DeletePreconditions", testDeletePreconditions},
		{"DeleteCollection", testDeleteCollection},
		{"Selectors", testSelectors},
		{"Pagination", testPagination},
		{"ContinueTokenStaysInNamespace", testContinueOtherNamespace},
		{"ResourceVersionMatch", testResourceVersionMatch},
		{"WatchResume", testWatchResume},
		{"WatchBookmarks", testWatchBookmarks},
		{"InformerWatchList", func(t *testing.T, e *cgEnv) { testInformer(t, e, true) }},
		{"InformerListWatch", func(t *testing.T, e *cgEnv) { testInformer(t, e, false) }},
		{"Table", testTable},
		{"MetadataClient", testMetadataClient},
		{"NamespaceDeletion", testNamespaceDeletion},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("cg-%02d", i)
			createNamespace(t, cs, ns)
			tc.run(t, &cgEnv{s: s, cs: cs, ns: ns, leases: cs.CoordinationV1().Leases(ns)})
		})
	}
}

// TestClientGoWatchCompacted has a server of its own with a small watch
// cache, so that an old revision falls out of the cache and, once etcd
// compacts it, can no longer be watched or listed exactly.
func TestClientGoWatchCompacted(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Store: store.Config{WatchCacheSize: 8}})
	ctx := testContext(t)
	leases := s.Client(t, protobuf).CoordinationV1().Leases("default")
	l, err := leases.Create(ctx, newLease("churn", "h0"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := l.ResourceVersion
	for i := range 12 {
		l.Spec.HolderIdentity = ptr.To(fmt.Sprintf("h%d", i+1))
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Store.Compact(ctx, parseRV(t, l.ResourceVersion)); err != nil {
		t.Fatal(err)
	}

	w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: first})
	if err != nil {
		t.Fatalf("watch from compacted revision: got %v, want a stream with one ERROR event", err)
	}
	defer w.Stop()
	ev := nextEvent(t, w)
	if ev.Type != watch.Error {
		t.Fatalf("first event: got %s %T, want ERROR", ev.Type, ev.Object)
	}
	werr := apierrors.FromObject(ev.Object)
	if !apierrors.IsResourceExpired(werr) && !apierrors.IsGone(werr) {
		t.Errorf("ERROR event: got %v, want 410 Expired/Gone", werr)
	}
	if st, ok := ev.Object.(*metav1.Status); !ok || st.Code != http.StatusGone {
		t.Errorf("ERROR event object: got %#v, want a Status with code 410", ev.Object)
	}

	_, err = leases.List(ctx, metav1.ListOptions{ResourceVersion: first, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("exact list at compacted revision: got %v, want 410 Expired/Gone", err)
	}
	// The current state is still there.
	got, err := leases.Get(ctx, "churn", metav1.GetOptions{})
	if err != nil || got.ResourceVersion != l.ResourceVersion {
		t.Errorf("get after compaction: got %v %v, want resourceVersion %s", got, err, l.ResourceVersion)
	}
}

func testCRUD(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	now := time.Now().Truncate(time.Microsecond)
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To("holder-a"),
		LeaseDurationSeconds: ptr.To[int32](40),
		AcquireTime:          &metav1.MicroTime{Time: now},
		RenewTime:            &metav1.MicroTime{Time: now.Add(1500 * time.Microsecond)},
		LeaseTransitions:     ptr.To[int32](2),
		Strategy:             ptr.To(coordinationv1.OldestEmulationVersion),
		PreferredHolder:      ptr.To("holder-b"),
	}
	in := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "every-field", Labels: map[string]string{"app": "crud"}, Annotations: map[string]string{"note": "x"}},
		Spec:       spec,
	}
	created, err := e.leases.Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Namespace != e.ns || created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Errorf("create: server-set metadata missing: %+v", created.ObjectMeta)
	}
	if created.Labels["app"] != "crud" || created.Annotations["note"] != "x" {
		t.Errorf("create: labels/annotations: got %v %v", created.Labels, created.Annotations)
	}
	checkSpec(t, "create", created.Spec, spec)

	got, err := e.leases.Get(ctx, "every-field", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSpec(t, "get", got.Spec, spec)
	if got.ResourceVersion != created.ResourceVersion || got.UID != created.UID {
		t.Errorf("get: got rv %s uid %s, want %s %s", got.ResourceVersion, got.UID, created.ResourceVersion, created.UID)
	}
	cached, err := e.leases.Get(ctx, "every-field", metav1.GetOptions{ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	checkSpec(t, "get at resourceVersion", cached.Spec, spec)

	later := now.Add(3 * time.Second)
	spec2 := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To("holder-b"),
		LeaseDurationSeconds: ptr.To[int32](15),
		AcquireTime:          &metav1.MicroTime{Time: later},
		RenewTime:            &metav1.MicroTime{Time: later},
		LeaseTransitions:     ptr.To[int32](3),
		Strategy:             ptr.To(coordinationv1.CoordinatedLeaseStrategy("example.com/custom")),
	}
	got.Spec = spec2
	updated, err := e.leases.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSpec(t, "update", updated.Spec, spec2)
	if parseRV(t, updated.ResourceVersion) <= parseRV(t, created.ResourceVersion) {
		t.Errorf("update: resourceVersion %s not after %s", updated.ResourceVersion, created.ResourceVersion)
	}
	if !updated.CreationTimestamp.Equal(&created.CreationTimestamp) || updated.UID != created.UID {
		t.Errorf("update changed creationTimestamp or uid")
	}

	list, err := e.leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].ResourceVersion != updated.ResourceVersion {
		t.Fatalf("list: got %d items, want the updated lease", len(list.Items))
	}
	checkSpec(t, "list", list.Items[0].Spec, spec2)
	if parseRV(t, list.ResourceVersion) < parseRV(t, updated.ResourceVersion) {
		t.Errorf("list resourceVersion %s older than the update %s", list.ResourceVersion, updated.ResourceVersion)
	}

	if err := e.leases.Delete(ctx, "every-field", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.leases.Get(ctx, "every-field", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: got %v, want NotFound", err)
	}
}

func testStatusErrors(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	_, err := e.leases.Get(ctx, "missing", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("get missing: got %v, want NotFound", err)
	}
	wantDetails(t, err, "missing", "coordination.k8s.io", "leases")
	if want := `leases.coordination.k8s.io "missing" not found`; err.Error() != want {
		t.Errorf("get missing: message %q, want %q", err.Error(), want)
	}
	if err := e.leases.Delete(ctx, "missing", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("delete missing: got %v, want NotFound", err)
	}
	// As kube-apiserver: a PUT of a missing Lease creates it.
	if l, err := e.leases.Update(ctx, newLease("put-created", "x"), metav1.UpdateOptions{}); err != nil || l.UID == "" {
		t.Errorf("update missing: got %v, want the lease created", err)
	} else if err := e.leases.Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	l, err := e.leases.Create(ctx, newLease("a", "x"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.leases.Create(ctx, newLease("a", "y"), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: got %v, want AlreadyExists", err)
	}
	wantDetails(t, err, "a", "coordination.k8s.io", "leases")

	fresh := l.DeepCopy()
	fresh.Spec.HolderIdentity = ptr.To("y")
	if _, err := e.leases.Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("z")
	_, err = e.leases.Update(ctx, l, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale update: got %v, want Conflict", err)
	}
	wantDetails(t, err, "a", "coordination.k8s.io", "leases")
	want := `Operation cannot be fulfilled on leases.coordination.k8s.io "a": the object has been modified; please apply your changes to the latest version and try again`
	if err.Error() != want {
		t.Errorf("stale update: message %q, want %q", err.Error(), want)
	}
	if _, err := e.cs.CoordinationV1().Leases("no-such-namespace").Create(ctx, newLease("a", "x"), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("create in missing namespace: got %v, want NotFound", err)
	} else {
		wantDetails(t, err, "no-such-namespace", "", "namespaces")
	}
}

func testInvalid(t *testing.T, e *cgEnv) {
	// Field paths, types and messages as kube-apiserver reports them for the
	// same objects (pkg/apis/coordination/validation).
	cases := []struct {
		name  string
		spec  coordinationv1.LeaseSpec
		cause metav1.StatusCause
	}{
		{
			name:  "zero-duration",
			spec:  coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](0)},
			cause: metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.leaseDurationSeconds", Message: "Invalid value: 0: must be greater than 0"},
		},
		{
			name:  "negative-transitions",
			spec:  coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](-1)},
			cause: metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.leaseTransitions", Message: "Invalid value: -1: must be greater than or equal to 0"},
		},
		{
			name:  "preferred-holder-without-strategy",
			spec:  coordinationv1.LeaseSpec{PreferredHolder: ptr.To("b")},
			cause: metav1.StatusCause{Type: metav1.CauseTypeForbidden, Field: "spec.preferredHolder", Message: "Forbidden: may only be specified if `strategy` is defined"},
		},
		{
			name:  "unknown-strategy",
			spec:  coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.CoordinatedLeaseStrategy("Newest"))},
			cause: metav1.StatusCause{Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec.strategy.strategy", Message: `Unsupported value: "Newest": supported values: "OldestEmulationVersion"`},
		},
	}
	ctx := testContext(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "bad-" + tc.name
			in := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tc.spec}
			_, err := e.leases.Create(ctx, in, metav1.CreateOptions{})
			checkInvalid(t, "create", err, name, tc.cause)

			ok, err := e.leases.Create(ctx, newLease(name, "x"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ok.Spec = tc.spec
			_, err = e.leases.Update(ctx, ok, metav1.UpdateOptions{})
			checkInvalid(t, "update", err, name, tc.cause)
			got, err := e.leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil || got.ResourceVersion != ok.ResourceVersion {
				t.Errorf("rejected update changed the lease: %v %v", got, err)
			}
		})
	}
}

func checkInvalid(t *testing.T, op string, err error, name string, cause metav1.StatusCause) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("%s: got %v, want Invalid", op, err)
	}
	st := err.(apierrors.APIStatus).Status()
	if st.Code != http.StatusUnprocessableEntity {
		t.Errorf("%s: code %d, want 422", op, st.Code)
	}
	wantMsg := fmt.Sprintf(`Lease.coordination.k8s.io %q is invalid: %s: %s`, name, cause.Field, cause.Message)
	if st.Message != wantMsg {
		t.Errorf("%s: message\n got %q\nwant %q", op, st.Message, wantMsg)
	}
	if st.Details == nil || st.Details.Name != name || st.Details.Group != "coordination.k8s.io" || st.Details.Kind != "Lease" {
		t.Errorf("%s: details %+v, want name %s group coordination.k8s.io kind Lease", op, st.Details, name)
		return
	}
	if len(st.Details.Causes) != 1 || st.Details.Causes[0] != cause {
		t.Errorf("%s: causes\n got %+v\nwant [%+v]", op, st.Details.Causes, cause)
	}
}

func testDryRun(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	dry := []string{metav1.DryRunAll}
	rev := currentRevision(t, e.s)

	out, err := e.leases.Create(ctx, newLease("d", "x"), metav1.CreateOptions{DryRun: dry})
	if err != nil {
		t.Fatal(err)
	}
	if out.Name != "d" || out.UID == "" || *out.Spec.HolderIdentity != "x" {
		t.Errorf("dry-run create: got %+v, want the object as it would be stored", out)
	}
	if _, err := e.leases.Get(ctx, "d", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after dry-run create: got %v, want NotFound", err)
	}
	if got := currentRevision(t, e.s); got != rev {
		t.Errorf("dry-run create wrote to etcd: revision %d → %d", rev, got)
	}

	l, err := e.leases.Create(ctx, newLease("d", "x"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev = currentRevision(t, e.s)
	upd := l.DeepCopy()
	upd.Spec.HolderIdentity = ptr.To("y")
	if out, err := e.leases.Update(ctx, upd, metav1.UpdateOptions{DryRun: dry}); err != nil || *out.Spec.HolderIdentity != "y" {
		t.Errorf("dry-run update: got %v %v, want holder y", out, err)
	}
	patches := []struct {
		pt   types.PatchType
		data string
	}{
		{types.MergePatchType, `{"spec":{"holderIdentity":"m"}}`},
		{types.JSONPatchType, `[{"op":"replace","path":"/spec/holderIdentity","value":"j"}]`},
		{types.StrategicMergePatchType, `{"spec":{"holderIdentity":"s"}}`},
		{types.ApplyPatchType, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"d"},"spec":{"holderIdentity":"a"}}`},
	}
	for _, p := range patches {
		opts := metav1.PatchOptions{DryRun: dry}
		if p.pt == types.ApplyPatchType {
			opts.FieldManager, opts.Force = "dry", ptr.To(true)
		}
		if _, err := e.leases.Patch(ctx, "d", p.pt, []byte(p.data), opts); err != nil {
			t.Errorf("dry-run %s patch: %v", p.pt, err)
		}
	}
	if err := e.leases.Delete(ctx, "d", metav1.DeleteOptions{DryRun: dry}); err != nil {
		t.Errorf("dry-run delete: %v", err)
	}
	if err := e.cs.CoordinationV1().Leases(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{DryRun: dry}, metav1.ListOptions{}); err != nil {
		t.Errorf("dry-run deletecollection: %v", err)
	}
	got, err := e.leases.Get(ctx, "d", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != l.ResourceVersion || *got.Spec.HolderIdentity != "x" {
		t.Errorf("after dry runs: got rv %s holder %s, want %s x", got.ResourceVersion, *got.Spec.HolderIdentity, l.ResourceVersion)
	}
	if got := currentRevision(t, e.s); got != rev {
		t.Errorf("dry runs wrote to etcd: revision %d → %d", rev, got)
	}
}

func testFieldValidation(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(e.s.Config)
	cfg.WarningHandler = warnings
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := func(name string) []byte {
		return []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"` + name + `"},"spec":{"holderIdentity":"x","bogus":1}}`)
	}
	const unknown = `unknown field "spec.bogus"`
	cases := []struct {
		validation   string
		wantErr      bool
		wantWarnings []string
	}{
		{metav1.FieldValidationStrict, true, nil},
		{metav1.FieldValidationWarn, false, []string{unknown}},
		{metav1.FieldValidationIgnore, false, nil},
		{"", false, []string{unknown}}, // Warn is the server's default
	}
	for _, tc := range cases {
		t.Run("create-"+tc.validation, func(t *testing.T) {
			name := "fv-" + strings.ToLower(tc.validation)
			if tc.validation == "" {
				name = "fv-default"
			}
			warnings.reset()
			req := cs.CoordinationV1().RESTClient().Post().Namespace(e.ns).Resource("leases").Body(body(name)).SetHeader("Content-Type", "application/json")
			if tc.validation != "" {
				req = req.Param("fieldValidation", tc.validation)
			}
			err := req.Do(ctx).Error()
			if tc.wantErr {
				if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "strict decoding error: "+unknown) {
					t.Errorf("got %v, want 400 with %q", err, "strict decoding error: "+unknown)
				}
				if _, err := e.leases.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("rejected create stored the lease: %v", err)
				}
			} else if err != nil {
				t.Errorf("got %v, want success", err)
			}
			if got := warnings.get(); !slices.Equal(got, tc.wantWarnings) {
				t.Errorf("warnings: got %q, want %q", got, tc.wantWarnings)
			}
		})
	}
	t.Run("update-Strict", func(t *testing.T) {
		before, err := e.leases.Get(ctx, "fv-warn", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = cs.CoordinationV1().RESTClient().Put().Namespace(e.ns).Resource("leases").Name("fv-warn").
			Param("fieldValidation", "Strict").Body(body("fv-warn")).SetHeader("Content-Type", "application/json").Do(ctx).Error()
		if !apierrors.IsBadRequest(err) {
			t.Errorf("got %v, want 400", err)
		}
		after, _ := e.leases.Get(ctx, "fv-warn", metav1.GetOptions{})
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("rejected update changed the lease")
		}
	})
	// A patch is refused as kube-apiserver refuses it: 422 on the field
	// "patch", whose value is the patched object; the patch itself is
	// read strictly too, so a duplicate field in it is found.
	t.Run("patch-Strict", func(t *testing.T) {
		_, err := e.leases.Patch(ctx, "fv-warn", types.MergePatchType, []byte(`{"spec":{"bogus":2}}`), metav1.PatchOptions{FieldValidation: "Strict"})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `patch: Invalid value: "{`) || !strings.Contains(err.Error(), "strict decoding error: "+unknown) {
			t.Errorf("got %v, want 422 with %q", err, unknown)
		}
		_, err = e.leases.Patch(ctx, "fv-warn", types.StrategicMergePatchType, []byte(`{"spec":{"holderIdentity":"a","holderIdentity":"b"}}`), metav1.PatchOptions{FieldValidation: "Strict"})
		if want := `strict decoding error: duplicate field "spec.holderIdentity"`; !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "patch: Invalid value: \"map[spec:map[holderIdentity:b]]\": "+want) {
			t.Errorf("got %v, want 422 with %q", err, want)
		}
	})
	t.Run("patch-Warn", func(t *testing.T) {
		warnings.reset()
		if _, err := cs.CoordinationV1().Leases(e.ns).Patch(ctx, "fv-warn", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/holderIdentity","value":"w","bogus":1}]`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, want := warnings.get(), []string{`json patch unknown field "[0].bogus"`}; !slices.Equal(got, want) {
			t.Errorf("warnings: got %q, want %q", got, want)
		}
	})
}

func testPatchTypes(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	in := newLease("p", "created")
	in.Spec.LeaseDurationSeconds = ptr.To[int32](30)
	if _, err := e.leases.Create(ctx, in, metav1.CreateOptions{FieldManager: "creator"}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		pt      types.PatchType
		manager string
		data    string
	}{
		{types.JSONPatchType, "json-patcher", `[{"op":"replace","path":"/spec/holderIdentity","value":"j"}]`},
		{types.MergePatchType, "merger", `{"spec":{"leaseTransitions":4}}`},
		{types.StrategicMergePatchType, "strategist", `{"metadata":{"labels":{"tier":"gold"}}}`},
	}
	for _, s := range steps {
		if _, err := e.leases.Patch(ctx, "p", s.pt, []byte(s.data), metav1.PatchOptions{FieldManager: s.manager}); err != nil {
			t.Fatalf("%s patch: %v", s.pt, err)
		}
	}
	ac := coordinationv1ac.Lease("p", e.ns).WithSpec(coordinationv1ac.LeaseSpec().WithHolderIdentity("applied"))
	_, err := e.leases.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "applier"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("apply of a field another manager owns: got %v, want Conflict", err)
	}
	if !strings.Contains(err.Error(), "json-patcher") || !strings.Contains(err.Error(), ".spec.holderIdentity") {
		t.Errorf("apply conflict should name the manager and field: %v", err)
	}
	got, err := e.leases.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "applier", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Spec.HolderIdentity != "applied" || *got.Spec.LeaseDurationSeconds != 30 || *got.Spec.LeaseTransitions != 4 || got.Labels["tier"] != "gold" {
		t.Errorf("after patches: got spec %s labels %v", specJSON(got.Spec), got.Labels)
	}
	want := []string{"applier/Apply", "creator/Update", "merger/Update", "strategist/Update"}
	if m := managers(got); !slices.Equal(m, want) {
		t.Errorf("managedFields: got %v, want %v (json-patcher lost its only field to the forced apply)", m, want)
	}

	created, err := e.leases.Apply(ctx, coordinationv1ac.Lease("applied-new", e.ns).
		WithLabels(map[string]string{"a": "b"}).
		WithSpec(coordinationv1ac.LeaseSpec().WithHolderIdentity("n").WithLeaseDurationSeconds(10)), metav1.ApplyOptions{FieldManager: "applier"})
	if err != nil {
		t.Fatalf("apply creating a lease: %v", err)
	}
	if m := managers(created); !slices.Equal(m, []string{"applier/Apply"}) {
		t.Errorf("managedFields of applied lease: got %v", m)
	}
	if created.UID == "" || *created.Spec.HolderIdentity != "n" {
		t.Errorf("applied lease: %+v", created)
	}
}

func managers(l *coordinationv1.Lease) []string {
	var out []string
	for _, m := range l.ManagedFields {
		out = append(out, m.Manager+"/"+string(m.Operation))
	}
	slices.Sort(out)
	return out
}

func testDeletePreconditions(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	l, err := e.leases.Create(ctx, newLease("pre", "x"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []metav1.Preconditions{
		{UID: ptr.To(types.UID("00000000-0000-0000-0000-000000000000"))},
		{ResourceVersion: ptr.To("1")},
		{UID: ptr.To(l.UID), ResourceVersion: ptr.To("1")},
	} {
		if err := e.leases.Delete(ctx, "pre", metav1.DeleteOptions{Preconditions: &p}); !apierrors.IsConflict(err) {
			t.Errorf("delete with precondition %+v: got %v, want Conflict", p, err)
		}
	}
	if got, err := e.leases.Get(ctx, "pre", metav1.GetOptions{}); err != nil || got.ResourceVersion != l.ResourceVersion {
		t.Fatalf("failed deletes changed the lease: %v %v", got, err)
	}
	err = e.leases.Delete(ctx, "pre", metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: ptr.To(l.UID), ResourceVersion: ptr.To(l.ResourceVersion)},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.leases.Get(ctx, "pre", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after delete: got %v, want NotFound", err)
	}
}

func testDeleteCollection(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	for i, app := range []string{"x", "y", "x", "y", "x"} {
		l := newLease(fmt.Sprintf("l%d", i), "h")
		l.Labels = map[string]string{"app": app}
		if _, err := e.leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=x"}); err != nil {
		t.Fatal(err)
	}
	list, err := e.leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(list.Items); !slices.Equal(got, []string{"l1", "l3"}) {
		t.Errorf("after deletecollection app=x: got %v, want [l1 l3]", got)
	}
}

func testSelectors(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	other := e.ns + "-other"
	createNamespace(t, e.cs, other)
	mk := func(ns, name, app string) *coordinationv1.Lease {
		l := newLease(name, "h")
		l.Labels = map[string]string{"app": app, "run": e.ns}
		out, err := e.cs.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b, c := mk(e.ns, "a", "x"), mk(e.ns, "b", "y"), mk(e.ns, "c", "x")
	mk(other, "a", "x")

	lists := []struct {
		name      string
		namespace string
		opts      metav1.ListOptions
		want      []string
	}{
		{"label-equals", e.ns, metav1.ListOptions{LabelSelector: "app=x"}, []string{e.ns + "/a", e.ns + "/c"}},
		{"label-not-equals", e.ns, metav1.ListOptions{LabelSelector: "app!=x"}, []string{e.ns + "/b"}},
		{"label-set", e.ns, metav1.ListOptions{LabelSelector: "app in (y,z)"}, []string{e.ns + "/b"}},
		{"name", e.ns, metav1.ListOptions{FieldSelector: "metadata.name=b"}, []string{e.ns + "/b"}},
		{"name-not", e.ns, metav1.ListOptions{FieldSelector: "metadata.name!=b"}, []string{e.ns + "/a", e.ns + "/c"}},
		{"namespace-all", "", metav1.ListOptions{FieldSelector: "metadata.namespace=" + e.ns}, []string{e.ns + "/a", e.ns + "/b", e.ns + "/c"}},
		{"name-all-namespaces", "", metav1.ListOptions{LabelSelector: "run=" + e.ns, FieldSelector: "metadata.name=a"}, []string{e.ns + "/a", other + "/a"}},
		{"label-and-field", e.ns, metav1.ListOptions{LabelSelector: "app=x", FieldSelector: "metadata.name=c"}, []string{e.ns + "/c"}},
		{"limit-with-selector", e.ns, metav1.ListOptions{LabelSelector: "app=x", Limit: 5}, []string{e.ns + "/a", e.ns + "/c"}},
	}
	for _, tc := range lists {
		list, err := e.cs.CoordinationV1().Leases(tc.namespace).List(ctx, tc.opts)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, l := range list.Items {
			got = append(got, l.Namespace+"/"+l.Name)
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := e.leases.List(ctx, metav1.ListOptions{FieldSelector: "spec.holderIdentity=h"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unknown field selector on list: got %v, want BadRequest", err)
	}
	if w, err := e.leases.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.holderIdentity=h"}); !apierrors.IsBadRequest(err) {
		if w != nil {
			w.Stop()
		}
		t.Errorf("unknown field selector on watch: got %v, want BadRequest", err)
	}

	from := c.ResourceVersion
	byLabel, err := e.leases.Watch(ctx, metav1.ListOptions{ResourceVersion: from, LabelSelector: "app=x"})
	if err != nil {
		t.Fatal(err)
	}
	defer byLabel.Stop()
	byName, err := e.leases.Watch(ctx, metav1.ListOptions{ResourceVersion: from, FieldSelector: "metadata.name=c"})
	if err != nil {
		t.Fatal(err)
	}
	defer byName.Stop()

	relabel := func(l *coordinationv1.Lease, app string) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Labels["app"] = app
		out, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	relabel(a, "z") // a leaves app=x
	relabel(b, "x") // b enters app=x
	c.Spec.HolderIdentity = ptr.To("h2")
	if _, err := e.leases.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.leases.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, "label selector app=x", byLabel, []string{"DELETED a", "ADDED b", "MODIFIED c", "DELETED b"})
	expectEvents(t, "field selector metadata.name=c", byName, []string{"MODIFIED c"})
}

func testPagination(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	var want []string
	for i := range 10 {
		name := fmt.Sprintf("lease-%02d", i)
		want = append(want, name)
		if _, err := e.leases.Create(ctx, newLease(name, "h"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := e.leases.List(ctx, metav1.ListOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 3 || first.Continue == "" {
		t.Fatalf("first page: got %d items continue %q, want 3 and a token", len(first.Items), first.Continue)
	}
	if first.RemainingItemCount == nil || *first.RemainingItemCount != 7 {
		t.Errorf("first page: remainingItemCount %v, want 7", first.RemainingItemCount)
	}
	// Written after the first page: not in this consistent list.
	if _, err := e.leases.Create(ctx, newLease("lease-99", "h"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := names(first.Items)
	sizes := []int{len(first.Items)}
	token := first.Continue
	for token != "" {
		page, err := e.leases.List(ctx, metav1.ListOptions{Limit: 3, Continue: token})
		if err != nil {
			t.Fatal(err)
		}
		if page.ResourceVersion != first.ResourceVersion {
			t.Errorf("page resourceVersion %s, want the first page's %s", page.ResourceVersion, first.ResourceVersion)
		}
		got = append(got, names(page.Items)...)
		sizes = append(sizes, len(page.Items))
		token = page.Continue
		if len(sizes) > 10 {
			t.Fatal("pagination does not end")
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("paginated names: got %v, want %v", got, want)
	}
	if !slices.Equal(sizes, []int{3, 3, 3, 1}) {
		t.Errorf("page sizes: got %v, want [3 3 3 1]", sizes)
	}
	all, err := e.leases.List(ctx, metav1.ListOptions{})
	if err != nil || len(all.Items) != 11 {
		t.Errorf("fresh list: got %d items (%v), want 11", len(all.Items), err)
	}
	if _, err := e.leases.List(ctx, metav1.ListOptions{Limit: 3, Continue: "not-a-token"}); !apierrors.IsBadRequest(err) {
		t.Errorf("bad continue token: got %v, want BadRequest", err)
	}
}

// testContinueOtherNamespace uses a continue token from a list of one
// namespace on a list of another. Kubernetes keeps a token's position
// relative to the namespace of the request, so the second list can never
// return objects of the first namespace.
func testContinueOtherNamespace(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	nsA, nsB := e.ns+"-a", e.ns+"-b"
	createNamespace(t, e.cs, nsA)
	createNamespace(t, e.cs, nsB)
	for _, ns := range []string{nsA, nsB} {
		for i := range 4 {
			if _, err := e.cs.CoordinationV1().Leases(ns).Create(ctx, newLease(fmt.Sprintf("l%d", i), "h"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	page, err := e.cs.CoordinationV1().Leases(nsA).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.cs.CoordinationV1().Leases(nsB).List(ctx, metav1.ListOptions{Limit: 10, Continue: page.Continue})
	if err != nil {
		if apierrors.IsBadRequest(err) {
			return // refusing the foreign token is fine too
		}
		t.Fatal(err)
	}
	for _, l := range other.Items {
		if l.Namespace != nsB {
			t.Errorf("list of namespace %s with a token from %s returned %s/%s", nsB, nsA, l.Namespace, l.Name)
		}
	}
}

func testResourceVersionMatch(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	l, err := e.leases.Create(ctx, newLease("rv", "old"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv1 := l.ResourceVersion
	l.Spec.HolderIdentity = ptr.To("new")
	l2, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	exact, err := e.leases.List(ctx, metav1.ListOptions{ResourceVersion: rv1, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	if exact.ResourceVersion != rv1 || len(exact.Items) != 1 || *exact.Items[0].Spec.HolderIdentity != "old" {
		t.Errorf("Exact at %s: got rv %s items %v, want the old holder at exactly %s", rv1, exact.ResourceVersion, exact.Items, rv1)
	}
	notOlder, err := e.leases.List(ctx, metav1.ListOptions{ResourceVersion: rv1, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	if parseRV(t, notOlder.ResourceVersion) < parseRV(t, rv1) || len(notOlder.Items) != 1 {
		t.Errorf("NotOlderThan %s: got rv %s with %d items", rv1, notOlder.ResourceVersion, len(notOlder.Items))
	}
	fresh, err := e.leases.List(ctx, metav1.ListOptions{ResourceVersion: l2.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil || len(fresh.Items) != 1 || *fresh.Items[0].Spec.HolderIdentity != "new" {
		t.Errorf("NotOlderThan %s: got %v %v, want the new holder", l2.ResourceVersion, fresh, err)
	}
	// NotOlderThan a revision, with a limit: in pages, as kube-apiserver
	// serves it (only at "0" does its cache ignore the limit).
	// Not older than the second lease's creation, which the cache may
	// otherwise not have yet.
	second, err := e.leases.Create(ctx, newLease("rv2", "h"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	page, err := e.leases.List(ctx, metav1.ListOptions{ResourceVersion: second.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 1})
	if err != nil || len(page.Items) != 1 || page.Continue == "" {
		t.Errorf("NotOlderThan %s, limit 1: got %v, %v, want one lease and a continue token", second.ResourceVersion, page, err)
	} else if rest, err := e.leases.List(ctx, metav1.ListOptions{Continue: page.Continue}); err != nil || len(rest.Items) != 1 || rest.Items[0].Name == page.Items[0].Name {
		t.Errorf("the next page: got %v", err)
	}
	if _, err := e.leases.List(ctx, metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchExact}); !apierrors.IsInvalid(err) {
		t.Errorf("Exact with resourceVersion 0: got %v, want Invalid", err)
	}
	if _, err := e.leases.List(ctx, metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchExact}); !apierrors.IsInvalid(err) {
		t.Errorf("resourceVersionMatch without resourceVersion: got %v, want Invalid", err)
	}
	// A revision the server has not reached: kube-apiserver answers 504
	// with the ResourceVersionTooLarge cause, which client-go's reflector
	// recognizes, and a Retry-After that client-go follows by itself (here
	// not, to see the answer).
	future := strconv.FormatInt(parseRV(t, l2.ResourceVersion)+1_000_000, 10)
	for _, match := range []metav1.ResourceVersionMatch{metav1.ResourceVersionMatchNotOlderThan, metav1.ResourceVersionMatchExact} {
		err := e.cs.CoordinationV1().RESTClient().Get().Namespace(e.ns).Resource("leases").MaxRetries(0).
			VersionedParams(&metav1.ListOptions{ResourceVersion: future, ResourceVersionMatch: match}, metav1.ParameterCodec).Do(ctx).Error()
		if !apierrors.IsTimeout(err) || !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
			t.Errorf("%s at a future revision: got %v (code %d), want 504 Timeout with cause ResourceVersionTooLarge", match, err, statusCode(err))
		}
		if delay, ok := apierrors.SuggestsClientDelay(err); !ok || delay != 1 {
			t.Errorf("%s at a future revision: retry after %d (%v), want 1", match, delay, ok)
		}
	}
	// A get names a minimum revision too: served once the server has
	// reached it, the same 504 if it does not.
	err = e.cs.CoordinationV1().RESTClient().Get().Namespace(e.ns).Resource("leases").Name("rv2").MaxRetries(0).
		VersionedParams(&metav1.GetOptions{ResourceVersion: future}, metav1.ParameterCodec).Do(ctx).Error()
	if !apierrors.IsTimeout(err) || !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Errorf("get at a future revision: got %v (code %d), want 504 Timeout with cause ResourceVersionTooLarge", err, statusCode(err))
	}
	if want := "Too large resource version: " + future + ", current: "; !strings.Contains(err.Error(), want) {
		t.Errorf("get at a future revision: %q, want it to say %q and the revision reached, as kube-apiserver does", err, want)
	}
	rv2, err := e.leases.Get(ctx, "rv2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.leases.Get(ctx, "rv2", metav1.GetOptions{ResourceVersion: rv2.ResourceVersion}); err != nil || got.ResourceVersion != rv2.ResourceVersion {
		t.Errorf("get at its own revision %s: %v %v", rv2.ResourceVersion, got, err)
	}
	if _, err := e.leases.Get(ctx, "absent", metav1.GetOptions{ResourceVersion: rv2.ResourceVersion}); !apierrors.IsNotFound(err) {
		t.Errorf("get of a lease that is not there, at revision %s: %v, want NotFound", rv2.ResourceVersion, err)
	}
}

func testWatchResume(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	a, err := e.leases.Create(ctx, newLease("a", "h1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	from := a.ResourceVersion
	a.Spec.HolderIdentity = ptr.To("h2")
	a2, err := e.leases.Update(ctx, a, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.leases.Create(ctx, newLease("b", "h1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.leases.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	w, err := e.leases.Watch(ctx, metav1.ListOptions{ResourceVersion: from})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// A change made after the watch opened marks the end of what it must
	// have delivered: nothing may come between.
	if _, err := e.leases.Create(ctx, newLease("sentinel", "h"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := expectEvents(t, "resumed watch", w, []string{"MODIFIED a", "ADDED b", "DELETED a", "ADDED sentinel"})
	if len(evs) == 4 {
		if rv := evs[0].Object.(*coordinationv1.Lease).ResourceVersion; rv != a2.ResourceVersion {
			t.Errorf("MODIFIED a: rv %s, want %s", rv, a2.ResourceVersion)
		}
		if rv := evs[1].Object.(*coordinationv1.Lease).ResourceVersion; rv != b.ResourceVersion {
			t.Errorf("ADDED b: rv %s, want %s", rv, b.ResourceVersion)
		}
		if h := *evs[2].Object.(*coordinationv1.Lease).Spec.HolderIdentity; h != "h2" {
			t.Errorf("DELETED a carries holder %s, want the last state h2", h)
		}
	}

	// Watching from the revision of the last event sees only what follows.
	w2, err := e.leases.Watch(ctx, metav1.ListOptions{ResourceVersion: b.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	expectEvents(t, "watch from b", w2, []string{"DELETED a", "ADDED sentinel"})
}

func testWatchBookmarks(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	list, err := e.leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	with, err := e.leases.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer with.Stop()
	without, err := e.leases.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer without.Stop()
	a, err := e.leases.Create(ctx, newLease("a", "h"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, "bookmark watch", with, []string{"ADDED a"})
	ev := nextEvent(t, with)
	if ev.Type != watch.Bookmark {
		t.Fatalf("after ADDED: got %s, want BOOKMARK", ev.Type)
	}
	bm, ok := ev.Object.(*coordinationv1.Lease)
	if !ok || bm.Name != "" || parseRV(t, bm.ResourceVersion) < parseRV(t, a.ResourceVersion) {
		t.Errorf("bookmark object: got %#v, want an empty Lease at resourceVersion ≥ %s", ev.Object, a.ResourceVersion)
	}
	// The watch that did not ask for bookmarks got none meanwhile.
	if _, err := e.leases.Create(ctx, newLease("b", "h"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, "watch without bookmarks", without, []string{"ADDED a", "ADDED b"})
}

// testInformer runs a shared informer in the watch-list mode (client-go's
// default: one watch with sendInitialEvents=true) or the classic
// list-then-watch mode, and checks which requests it made.
func testInformer(t *testing.T, e *cgEnv, watchList bool) {
	ctx := testContext(t)
	if !watchList {
		// client-go reads KUBE_FEATURE_* once per process, so the variable
		// only counts if nothing read the gates before; the override below
		// makes the mode certain either way.
		t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	}
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, watchList)

	var mu sync.Mutex
	var requests []string
	cfg := rest.CopyConfig(e.s.Config)
	cfg.ContentType, cfg.AcceptContentTypes = protobuf, protobuf
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if strings.HasSuffix(r.URL.Path, "/leases") && r.Method == http.MethodGet {
				code := 0
				if resp != nil {
					code = resp.StatusCode
				}
				mu.Lock()
				requests = append(requests, fmt.Sprintf("%d %s", code, r.URL.RawQuery))
				mu.Unlock()
			}
			return resp, err
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.leases.Create(ctx, newLease("before", "h"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	events := make(chan string, 100)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(e.ns))
	inf := factory.Coordination().V1().Leases().Informer()
	if _, err := inf.AddEventHandler(leaseEvents(events)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() { close(stop); factory.Shutdown() }()
	syncCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	expect := func(want string) { t.Helper(); expectEvent(t, events, want) }
	expect("add before")
	l, err := e.leases.Create(ctx, newLease("x", "h1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("add x")
	l.Spec.HolderIdentity = ptr.To("h2")
	if _, err := e.leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("update x h2")
	if err := e.leases.Delete(ctx, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("delete x")
	if got := len(inf.GetStore().List()); got != 1 {
		t.Errorf("informer store: %d leases, want 1", got)
	}

	mu.Lock()
	defer mu.Unlock()
	var lists, watchLists, watches int
	for _, r := range requests {
		switch {
		case !strings.Contains(r, "watch=true"):
			lists++
		case strings.Contains(r, "sendInitialEvents=true"):
			watchLists++
			if !strings.HasPrefix(r, "200 ") {
				t.Errorf("watch-list request failed: %s", r)
			}
		default:
			watches++
		}
	}
	if watchList && (watchLists == 0 || lists > 0) {
		t.Errorf("watch-list mode: want one watch with sendInitialEvents=true and no list; requests: %q", requests)
	}
	if !watchList && (lists == 0 || watches == 0 || watchLists > 0) {
		t.Errorf("list+watch mode: want a list then a watch; requests: %q", requests)
	}
}

func testTable(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	if _, err := e.leases.Create(ctx, newLease("t1", "holder-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "t2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
	for _, tc := range []struct {
		name     string
		req      *rest.Request
		wantRows [][2]string
	}{
		{"list", e.cs.CoordinationV1().RESTClient().Get().Namespace(e.ns).Resource("leases"), [][2]string{{"t1", "holder-1"}, {"t2", ""}}},
		{"get", e.cs.CoordinationV1().RESTClient().Get().Namespace(e.ns).Resource("leases").Name("t1"), [][2]string{{"t1", "holder-1"}}},
	} {
		raw, err := tc.req.SetHeader("Accept", accept).DoRaw(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var table metav1.Table
		if err := json.Unmarshal(raw, &table); err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, raw)
		}
		if table.Kind != "Table" || table.APIVersion != "meta.k8s.io/v1" {
			t.Errorf("%s: kind %s/%s, want meta.k8s.io/v1 Table", tc.name, table.APIVersion, table.Kind)
		}
		var cols []string
		for _, c := range table.ColumnDefinitions {
			cols = append(cols, c.Name+":"+c.Type)
		}
		if want := []string{"Name:string", "Holder:string", "Age:string"}; !slices.Equal(cols, want) {
			t.Errorf("%s: columns %v, want %v", tc.name, cols, want)
		}
		if len(table.Rows) != len(tc.wantRows) {
			t.Fatalf("%s: %d rows, want %d", tc.name, len(table.Rows), len(tc.wantRows))
		}
		for i, row := range table.Rows {
			if len(row.Cells) != 3 || row.Cells[0] != tc.wantRows[i][0] || row.Cells[1] != tc.wantRows[i][1] {
				t.Errorf("%s: row %d cells %v, want %v + age", tc.name, i, row.Cells, tc.wantRows[i])
				continue
			}
			if age, _ := row.Cells[2].(string); age == "" || age == "<unknown>" {
				t.Errorf("%s: row %d age %v", tc.name, i, row.Cells[2])
			}
			var pom metav1.PartialObjectMetadata
			if err := json.Unmarshal(row.Object.Raw, &pom); err != nil || pom.Name != tc.wantRows[i][0] || pom.Kind != "PartialObjectMetadata" {
				t.Errorf("%s: row %d object %s (%v), want PartialObjectMetadata of %s", tc.name, i, row.Object.Raw, err, tc.wantRows[i][0])
			}
		}
	}

	// A watch's Tables carry the column definitions in the first event
	// alone, as kube-apiserver's do.
	body, err := e.cs.CoordinationV1().RESTClient().Get().Namespace(e.ns).Resource("leases").
		Param("watch", "true").Param("resourceVersion", "0").SetHeader("Accept", accept).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	for i, want := range []int{3, 0} {
		var ev struct {
			Type   string
			Object metav1.Table
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("watch event %d: %v", i, err)
		}
		if len(ev.Object.ColumnDefinitions) != want || len(ev.Object.Rows) != 1 || len(ev.Object.Rows[0].Cells) != 3 {
			t.Errorf("watch event %d: %d column definitions, rows %v; want %d and a row of 3 cells", i, len(ev.Object.ColumnDefinitions), ev.Object.Rows, want)
		}
	}
}

func testMetadataClient(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	l := newLease("m", "h")
	l.Labels = map[string]string{"k": "v"}
	created, err := e.leases.Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metadata.NewForConfig(e.s.Config)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mc.Resource(leasesGVR).Namespace(e.ns).Get(ctx, "m", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != created.UID || got.ResourceVersion != created.ResourceVersion || got.Labels["k"] != "v" {
		t.Errorf("metadata get: got %+v", got.ObjectMeta)
	}
	list, err := mc.Resource(leasesGVR).Namespace(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "m" || list.ResourceVersion == "" {
		t.Errorf("metadata list: got %+v", list)
	}
	w, err := mc.Resource(leasesGVR).Namespace(e.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := e.leases.Delete(ctx, "m", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w)
	if pom, ok := ev.Object.(*metav1.PartialObjectMetadata); ev.Type != watch.Deleted || !ok || pom.Name != "m" {
		t.Errorf("metadata watch: got %s %#v, want DELETED m", ev.Type, ev.Object)
	}
}

func testNamespaceDeletion(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	doomed := e.ns + "-doomed"
	createNamespace(t, e.cs, doomed)
	for i := range 3 {
		if _, err := e.cs.CoordinationV1().Leases(doomed).Create(ctx, newLease(fmt.Sprintf("l%d", i), "h"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.leases.Create(ctx, newLease("survivor", "h"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Namespaces().Delete(ctx, doomed, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "namespace and its leases to go", func() (bool, error) {
		_, err := e.cs.CoreV1().Namespaces().Get(ctx, doomed, metav1.GetOptions{})
		if err == nil {
			return false, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		list, err := e.cs.CoordinationV1().Leases(doomed).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, err
	})
	if _, err := e.leases.Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Errorf("lease in another namespace: %v", err)
	}
}

// ---- shared helpers (also used by errors_test.go, fuzz_test.go, bench_test.go)

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// leaseEvents describes each informer event on a lease as a string:
// "add NAME", "update NAME HOLDER" or "delete NAME".
func leaseEvents(events chan<- string) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { events <- "add " + obj.(*coordinationv1.Lease).Name },
		UpdateFunc: func(_, obj any) {
			l := obj.(*coordinationv1.Lease)
			events <- "update " + l.Name + " " + ptr.Deref(l.Spec.HolderIdentity, "")
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			events <- "delete " + obj.(*coordinationv1.Lease).Name
		},
	}
}

// expectEvent waits for the next informer event, described as a string.
func expectEvent(t *testing.T, events <-chan string, want string) {
	t.Helper()
	select {
	case got := <-events:
		if got != want {
			t.Errorf("informer event: got %q, want %q", got, want)
		}
	case <-time.After(wait):
		t.Fatalf("informer event: timed out waiting for %q", want)
	}
}

// roundTrip sends req with client and reads the whole answer.
func roundTrip(t testing.TB, client *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func newLease(name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](40)},
	}
}

func createNamespace(t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(testContext(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func parseRV(t testing.TB, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

func currentRevision(t testing.TB, s *apiservertest.Server) int64 {
	t.Helper()
	rev, err := s.Store.CurrentRevision(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func names(items []coordinationv1.Lease) []string {
	var out []string
	for _, l := range items {
		out = append(out, l.Name)
	}
	return out
}

func specJSON(s coordinationv1.LeaseSpec) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func checkSpec(t *testing.T, op string, got, want coordinationv1.LeaseSpec) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s: spec\n got %s\nwant %s", op, specJSON(got), specJSON(want))
	}
}

func statusCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

func wantDetails(t *testing.T, err error, name, group, kind string) {
	t.Helper()
	s, ok := err.(apierrors.APIStatus)
	if !ok {
		t.Errorf("%v is not a Status error", err)
		return
	}
	d := s.Status().Details
	if d == nil || d.Name != name || d.Group != group || d.Kind != kind {
		t.Errorf("details: got %+v, want name %q group %q kind %q", d, name, group, kind)
	}
}

// nextEvent returns the next event of w or fails the test after wait.
func nextEvent(t testing.TB, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(wait):
		t.Fatal("timed out waiting for a watch event")
	}
	return watch.Event{}
}

// expectEvents reads len(want) non-bookmark events ("TYPE name") from w.
func expectEvents(t *testing.T, what string, w watch.Interface, want []string) []watch.Event {
	t.Helper()
	var got []string
	var evs []watch.Event
	for len(got) < len(want) {
		ev := nextEvent(t, w)
		if ev.Type == watch.Bookmark {
			continue
		}
		name := "?"
		switch o := ev.Object.(type) {
		case *coordinationv1.Lease:
			name = o.Name
		case *metav1.Status:
			name = o.Message
		}
		got = append(got, string(ev.Type)+" "+name)
		evs = append(evs, ev)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: events %q, want %q", what, got, want)
	}
	return evs
}

// poll calls f until it reports done, fails on error or after wait.
func poll(t *testing.T, what string, f func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		done, err := f()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// warningRecorder collects Warning headers as client-go reports them.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

var _ rest.WarningHandler = (*warningRecorder)(nil)

func (w *warningRecorder) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warningRecorder) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = nil
}

func (w *warningRecorder) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// testDeprecationWarnings: a Node that sets spec.externalID is warned of
// it on create and on update, as kube-apiserver warns; a status write,
// and a Node without it, are not.
func testDeprecationWarnings(t *testing.T, e *cgEnv) {
	ctx := testContext(t)
	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(e.s.Config)
	cfg.WarningHandler = warnings
	nodes := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	const deprecated = "spec.externalID: this field is deprecated, and is unused by Kubernetes"
	check := func(what string, want ...string) {
		t.Helper()
		if got := warnings.get(); !slices.Equal(got, want) {
			t.Errorf("%s: warnings %q, want %q", what, got, want)
		}
		warnings.reset()
	}
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "warned"}, Spec: corev1.NodeSpec{DoNotUseExternalID: "x"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("create", deprecated)
	n.Labels = map[string]string{"a": "b"}
	if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("update", deprecated)
	if _, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("status update")
	if _, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unwarned"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("create without it")
}

// TestMetadataWatchBookmarks: client-go's metadata informers (the garbage
// collector's) need every event, bookmarks included, as
// PartialObjectMetadata.
func TestMetadataWatchBookmarks(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Store: store.Config{BookmarkInterval: 50 * time.Millisecond}})
	mc, err := metadata.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	leases := mc.Resource(coordinationv1.SchemeGroupVersion.WithResource("leases")).Namespace("default")
	list, err := leases.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := leases.Watch(context.Background(), metav1.ListOptions{AllowWatchBookmarks: true, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// A bookmark carries a revision newer than the watcher has seen, as in
	// kube-apiserver: a write elsewhere (another namespace) makes one.
	createNamespace(t, s.Client(t, protobuf), "elsewhere")
	if _, err := s.Client(t, protobuf).CoordinationV1().Leases("elsewhere").Create(context.Background(), newLease("other", "h"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before a bookmark arrived")
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", ev.Object)
			}
			if ev.Type == watch.Bookmark {
				if _, ok := ev.Object.(*metav1.PartialObjectMetadata); !ok {
					t.Fatalf("bookmark object %T, want *PartialObjectMetadata", ev.Object)
				}
				return
			}
		case <-timeout:
			t.Fatal("no bookmark within 10s")
		}
	}
}
