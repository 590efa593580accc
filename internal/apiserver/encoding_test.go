package apiserver

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// TestItemListProtobuf: a list written from its items as they are is the
// same protobuf, byte for byte, as the typed list (the other formats:
// TestListWriters).
func TestItemListProtobuf(t *testing.T) {
	items := []runtime.Object{
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "kube-node-lease", ResourceVersion: "7", Labels: map[string]string{"x": "y"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](40)}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "kube-node-lease", ResourceVersion: "9"}},
	}
	list := &itemList{Items: items}
	list.ResourceVersion, list.Continue, list.RemainingItemCount = "12", "token", ptr.To[int64](3)

	typed := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "12", Continue: "token", RemainingItemCount: ptr.To[int64](3)}}
	for _, item := range items {
		typed.Items = append(typed.Items, *item.(*coordinationv1.Lease))
	}
	info, _ := serializerFor(mediaProtobuf)
	proto := encoding{info: info, mediaType: mediaProtobuf}
	var want, got bytes.Buffer
	if err := encodeTo(&want, proto, typed, registry.Leases.GroupVersion); err != nil {
		t.Fatal(err)
	}
	obj, err := list.forEncoding(registry.Leases)
	if err != nil {
		t.Fatal(err)
	}
	if err := encodeTo(&got, proto, obj, registry.Leases.GroupVersion); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("protobuf differs from the typed list's:\n got %q\nwant %q", got.Bytes(), want.Bytes())
	}
}

// TestItemListForms: a Table and a PartialObjectMetadataList made from a
// list's items as they are, in every format they are served in, are the
// same bytes as those made from the typed list, and, for the latter, as
// the serializer writes a PartialObjectMetadataList.
func TestItemListForms(t *testing.T) {
	items := variedLeases(30, false)
	typed := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "12", Continue: "token", RemainingItemCount: ptr.To[int64](3)}}
	for _, item := range items {
		typed.Items = append(typed.Items, *item.(*coordinationv1.Lease))
	}
	s := &Server{clock: clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))}
	for _, c := range []struct {
		as, mt, include string
		meta            schema.GroupVersion
	}{
		{"Table", mediaJSON, "", metaV1}, {"Table", mediaJSON, "Object", metaV1}, {"Table", mediaJSON, "None", metaV1},
		{"Table", mediaYAML, "", metaV1}, {"Table", mediaJSON, "", metav1beta1.SchemeGroupVersion},
		{"PartialObjectMetadataList", mediaJSON, "", metaV1}, {"PartialObjectMetadataList", mediaYAML, "", metaV1},
		{"PartialObjectMetadataList", mediaProtobuf, "", metaV1},
		// Old clients' version, a type of its own.
		{"PartialObjectMetadataList", mediaJSON, "", metav1beta1.SchemeGroupVersion},
		{"PartialObjectMetadataList", mediaProtobuf, "", metav1beta1.SchemeGroupVersion},
	} {
		info, _ := serializerFor(c.mt)
		e := encoding{info: info, mediaType: c.mt, as: c.as, meta: c.meta}
		req := &request{res: registry.Leases, info: requestInfo{query: url.Values{"includeObject": {c.include}}}}
		encoded := func(obj runtime.Object) []byte {
			var b bytes.Buffer
			if err := encodeTo(&b, e, obj, c.meta); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}
		write := func(obj runtime.Object) []byte {
			var err error
			if c.as == "Table" {
				obj, err = s.table(req, e, obj)
			} else {
				obj, err = partialMetadata(obj, c.as, c.meta)
			}
			if err != nil {
				t.Fatal(err)
			}
			return encoded(obj)
		}
		list := &itemList{Items: items}
		list.ResourceVersion, list.Continue, list.RemainingItemCount = "12", "token", ptr.To[int64](3)
		obj, err := list.forEncoding(registry.Leases)
		if err != nil {
			t.Fatal(err)
		}
		got, want := write(obj), write(typed)
		if c.as == "PartialObjectMetadataList" {
			// As the serializer writes the typed list, whose items
			// carry their kind, as kube-apiserver's do.
			pom := &metav1.PartialObjectMetadataList{ListMeta: typed.ListMeta}
			for _, l := range typed.Items {
				pom.Items = append(pom.Items, metav1.PartialObjectMetadata{
					TypeMeta:   metav1.TypeMeta{APIVersion: c.meta.String(), Kind: "PartialObjectMetadata"},
					ObjectMeta: l.ObjectMeta,
				})
			}
			want = encoded(pom)
			if c.meta == metav1beta1.SchemeGroupVersion {
				want = encoded(&metav1beta1.PartialObjectMetadataList{ListMeta: pom.ListMeta, Items: pom.Items})
			}
		}
		if apiVersion := []byte(`"apiVersion":"` + c.meta.String() + `"`); c.mt == mediaJSON && !bytes.Contains(got, apiVersion) {
			t.Errorf("%s in %s: no %s: %.200q", c.as, c.mt, apiVersion, got)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s %s in %s (include %q): differs from the typed list's\n got %.400q\nwant %.400q", c.meta, c.as, c.mt, c.include, got, want)
		}
		if len(want) < 30*50 {
			t.Errorf("%s in %s: %d bytes for 30 leases: %q", c.as, c.mt, len(want), want)
		}
	}
}

// TestEncodeLeavesObject: an object is written with its kind's apiVersion
// and kind whether it carries them or not, in every format, and is left as
// it was: objects from the watch cache are shared by concurrent requests
// (run with -race). One that carries them is written without a copy.
func TestEncodeLeavesObject(t *testing.T) {
	bare := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "7"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a")}}
	kinded := bare.DeepCopy()
	kinded.APIVersion, kinded.Kind = "coordination.k8s.io/v1", "Lease"
	for _, mt := range []string{mediaProtobuf, mediaJSON, mediaYAML} {
		info, _ := serializerFor(mt)
		e := encoding{info: info, mediaType: mt}
		fromBare, err := encode(e, bare, registry.Leases.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		if bare.APIVersion != "" || bare.Kind != "" {
			t.Errorf("%s: encoding set the object's kind: %+v", mt, bare.TypeMeta)
		}
		var wg sync.WaitGroup
		got := make([][]byte, 4)
		errs := make([]error, len(got))
		for i := range got {
			wg.Go(func() {
				got[i], errs[i] = encode(e, kinded, registry.Leases.GroupVersion)
			})
		}
		wg.Wait()
		for i, g := range got {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if !bytes.Equal(g, fromBare) {
				t.Errorf("%s: an object carrying its kind encodes as\n%q\nwithout it as\n%q", mt, g, fromBare)
			}
		}
		if !bytes.Contains(fromBare, []byte("coordination.k8s.io/v1")) {
			t.Errorf("%s: no apiVersion written: %q", mt, fromBare)
		}
	}

	// Written as it is, an object costs what the serializer alone spends.
	info, _ := serializerFor(mediaProtobuf)
	pb := encoding{info: info, mediaType: mediaProtobuf}
	var buf bytes.Buffer
	var alloc runtime.SimpleAllocator
	ser := runtime.NewEncoderWithAllocator(info.Serializer.(runtime.EncoderWithAllocator), &alloc)
	direct := testing.AllocsPerRun(100, func() {
		buf.Reset()
		if err := ser.Encode(kinded, &buf); err != nil {
			t.Fatal(err)
		}
	})
	through := testing.AllocsPerRun(100, func() {
		buf.Reset()
		if err := encodeTo(&buf, pb, kinded, registry.Leases.GroupVersion); err != nil {
			t.Fatal(err)
		}
	})
	if through > direct {
		t.Errorf("encoding an object that carries its kind: %v allocations, the serializer alone %v; want no more (no copy)", through, direct)
	}
}

// FuzzDecodeProtobufBody: a protobuf request body decodes to what the
// serializer alone makes of it, and fails where and as the serializer does.
func FuzzDecodeProtobufBody(f *testing.F) {
	info, _ := serializerFor(mediaProtobuf)
	pb := encoding{info: info, mediaType: mediaProtobuf}
	seed := func(obj runtime.Object, gv schema.GroupVersion) []byte {
		data, err := encode(pb, obj, gv)
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	lease := seed(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"x": "y"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), RenewTime: ptr.To(metav1.NewMicroTime(time.Unix(1, 2000)))}}, registry.Leases.GroupVersion)
	f.Add(lease)
	f.Add(lease[:len(lease)-3])
	f.Add(seed(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, registry.Nodes.GroupVersion))
	f.Add(bytes.Replace(lease, []byte("coordination.k8s.io/v1"), []byte("coordination.k8s.io/v2"), 1))
	f.Add([]byte("k8s\x00"))
	gvk := registry.Leases.GroupVersionKind()
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := decodeBody(mediaProtobuf, data, &coordinationv1.Lease{}, registry.Leases.APIVersion(), gvk, true)
		want, wantErr := decodeWith(info, data, &coordinationv1.Lease{}, gvk, true)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("error %v, the serializer's %v", gotErr, wantErr)
		}
		if wantErr == nil && !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("decoded %#v, the serializer %#v", got, want)
		}
	})
}

// TestNegotiateQuality: the Accept header's q-values order its entries, as
// kube-apiserver reads them, whatever their order in the header.
func TestNegotiateQuality(t *testing.T) {
	for _, tc := range []struct{ accept, want string }{
		{"application/json;q=0.5, application/yaml", mediaYAML},
		{"application/yaml;q=0, application/json", mediaJSON},
		{"text/html, application/json;q=0.9", mediaJSON},
		{"application/json;q=0", mediaJSON},
		{"*/*;q=0.1, application/vnd.kubernetes.protobuf", mediaProtobuf},
		{"application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io", mediaJSON + ";as=Table;v=v1;g=meta.k8s.io"},
		{"application/yaml, application/json", mediaYAML},
	} {
		r := httptest.NewRequest("GET", "/api/v1/nodes", nil)
		r.Header.Set("Accept", tc.accept)
		e, err := (&Server{}).negotiate(r, r.URL.Query())
		if err != nil || e.mediaType != tc.want {
			t.Errorf("Accept %q: %q, %v; want %q", tc.accept, e.mediaType, err, tc.want)
		}
	}
}

// TestNegotiateAcceptCache: an Accept header answered from the cache gets
// what parsing it gets, the first time and every time after, and so do
// headers past the cache's capacity; refusals are never cached.
func TestNegotiateAcceptCache(t *testing.T) {
	headers := []string{
		"", "application/json", mediaProtobuf + ", */*",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
		"application/yaml;q=0.5, application/json", "text/html",
	}
	for i := range acceptCacheSize + 10 {
		// Distinct headers that negotiate, more than the cache holds, and
		// as many that are refused.
		headers = append(headers, fmt.Sprintf("application/x-%d, application/json", i), fmt.Sprintf("application/x-%d", i))
	}
	for round := range 3 {
		for _, h := range headers {
			want, wantErr := parseAccept(h)
			got, err := negotiateAccept(h)
			if (err != nil) != (wantErr != nil) || (err == nil && (got.mediaType != want.mediaType || got.as != want.as || got.meta != want.meta || got.info.MediaType != want.info.MediaType || got.pretty)) {
				t.Fatalf("round %d, Accept %q: %+v, %v; parsed %+v, %v", round, h, got, err, want, wantErr)
			}
			if _, cached := acceptCache.m.Load(h); cached && err != nil {
				t.Fatalf("Accept %q refused but cached", h)
			}
		}
	}
	n := 0
	acceptCache.m.Range(func(any, any) bool { n++; return true })
	if n != acceptCacheSize {
		t.Errorf("%d headers cached, want the cache full at %d", n, acceptCacheSize)
	}
	if c := acceptCache.n.Load(); c != acceptCacheSize {
		t.Errorf("count %d after the cache filled, want it kept at %d", c, acceptCacheSize)
	}
}
