package apiserver

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/leasehold/leasehold/internal/leakcheck"
	"github.com/leasehold/leasehold/internal/registry"
)

// jsonLeases returns protobufLeases(n, big), some carrying their kind and
// some with labels that JSON escapes.
func jsonLeases(n int, big bool) []runtime.Object {
	items := protobufLeases(n, big)
	for i, item := range items {
		l := item.(*coordinationv1.Lease)
		if i%3 == 1 {
			l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
		}
		if i%5 == 2 {
			l.Labels = map[string]string{"z": "<a&b>", "a": "\u2028é\"\\"}
		}
	}
	return items
}

// serializerJSONList writes items in JSON as leasehold did before
// writeJSONList: copied into the typed list, then by apimachinery's
// serializer, its pretty one when pretty is set.
func serializerJSONList(w io.Writer, items []runtime.Object, rv, cont string, pretty bool) error {
	return serializerTypedList(w, mediaJSON, pretty, items, rv, cont)
}

// serializerTypedList writes items in the media type mt as leasehold did
// before writing lists from their items: copied into the typed list, then
// by apimachinery's serializer.
func serializerTypedList(w io.Writer, mt string, pretty bool, items []runtime.Object, rv, cont string) error {
	info, _ := serializerFor(mt)
	e := encoding{info: info, mediaType: mt, pretty: pretty}
	list := registry.Leases.NewList()
	if err := meta.SetList(list, items); err != nil {
		return err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	lm.SetResourceVersion(rv)
	lm.SetContinue(cont)
	return encodeTo(w, e, list, registry.Leases.GroupVersion)
}

// TestJSONListBatches: a list in JSON, compact or indented, is the
// serializer's bytes for the typed list, whatever the number of items,
// their sizes against a batch's, and the goroutines encoding them.
func TestJSONListBatches(t *testing.T) {
	info, _ := serializerFor(mediaJSON)
	for _, pretty := range []bool{false, true} {
		e := encoding{info: info, mediaType: mediaJSON, pretty: pretty}
		layout := compactJSON
		if pretty {
			layout = indentedJSON
		}
		for _, tc := range []struct {
			n   int
			big bool
		}{{0, false}, {1, false}, {2, false}, {3000, false}, {40, true}, {1, true}} {
			items := jsonLeases(tc.n, tc.big)
			var want bytes.Buffer
			if err := serializerJSONList(&want, items, "99999", "next", pretty); err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{1, 2, 3, 8} {
				list := &itemList{Items: items}
				list.ResourceVersion, list.Continue = "99999", "next"
				obj, err := list.forEncoding(registry.Leases, e)
				if err != nil {
					t.Fatal(err)
				}
				var got bytes.Buffer
				if err := writeJSONListWith(&got, obj.(*itemList), layout, workers); err != nil {
					t.Fatalf("pretty %v, %d items (big %v), %d workers: %v", pretty, tc.n, tc.big, workers, err)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Errorf("pretty %v, %d items (big %v), %d workers: differs from the serializer's\n got %.400q\nwant %.400q",
						pretty, tc.n, tc.big, workers, got.Bytes(), want.Bytes())
				}
			}
			if tc.n == 3000 && !strings.Contains(want.String(), `\u003ca\u0026b\u003e`) {
				t.Errorf("the labels were not escaped: %s", want.Bytes())
			}
		}
	}
}

// TestJSONListWriteFails: when the client goes, the list stops with the
// write's error, and no goroutine encoding its items outlives it.
func TestJSONListWriteFails(t *testing.T) {
	items := jsonLeases(5000, false)
	for _, after := range []int{0, 10, 3 * listBatchBytes} {
		list := &itemList{Items: items}
		list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
		err := writeJSONListWith(&failingWriter{n: after}, list, compactJSON, 2)
		if !errors.Is(err, errClientGone) {
			t.Errorf("failing after %d bytes: %v, want the write's error", after, err)
		}
		if leaked := leakcheck.Leaked(0, "apiserver.writeItems"); leaked != "" {
			t.Fatalf("failing after %d bytes, still encoding:\n%s", after, leaked)
		}
	}
}

// FuzzJSONList: whatever strings the items hold, a list in JSON, compact
// or indented, is the serializer's bytes for the typed list, in one batch
// or many.
func FuzzJSONList(f *testing.F) {
	f.Add("node-1", "<a&b>", uint8(3), uint8(2))
	f.Add("", "\u2028\xff\"", uint8(0), uint8(1))
	f.Add("x", strings.Repeat("y", 300), uint8(40), uint8(3))
	f.Fuzz(func(t *testing.T, name, value string, n, workers uint8) {
		if len(value) > 1000 {
			value = value[:1000]
		}
		items := make([]runtime.Object, int(n)%64)
		for i := range items {
			items[i] = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: value, Labels: map[string]string{value: name},
					Annotations: map[string]string{"a": strings.Repeat(value, i*20)}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &value},
			}
		}
		for _, pretty := range []bool{false, true} {
			var want bytes.Buffer
			wantErr := serializerJSONList(&want, items, name, value, pretty)
			list := &itemList{Items: items}
			list.ResourceVersion, list.Continue = name, value
			list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
			layout := compactJSON
			if pretty {
				layout = indentedJSON
			}
			var got bytes.Buffer
			err := writeJSONListWith(&got, list, layout, 1+int(workers)%4)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("pretty %v: error %v, the serializer's %v", pretty, err, wantErr)
			}
			if err == nil && !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("pretty %v: differs from the serializer's\n got %.300q\nwant %.300q", pretty, got.Bytes(), want.Bytes())
			}
		}
	})
}

// BenchmarkJSONList: a list of 100 000 node leases written in JSON, by
// the serializer from the typed list (as before writeJSONList, the copy
// into it included) and here, with as many goroutines as GOMAXPROCS.
func BenchmarkJSONList(b *testing.B) {
	items := protobufLeases(100000, false)
	info, _ := serializerFor(mediaJSON)
	list := &itemList{Items: items}
	list.ResourceVersion = "12345"
	obj, err := list.forEncoding(registry.Leases, encoding{info: info, mediaType: mediaJSON})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		write func(w *bytes.Buffer) error
	}{
		{"serializer", func(w *bytes.Buffer) error { return serializerJSONList(w, items, "12345", "", false) }},
		{"batches", func(w *bytes.Buffer) error { return writeJSONList(w, obj.(*itemList), false) }},
		{"serializer-pretty", func(w *bytes.Buffer) error { return serializerJSONList(w, items, "12345", "", true) }},
		{"batches-pretty", func(w *bytes.Buffer) error { return writeJSONList(w, obj.(*itemList), true) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var w bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				w.Reset()
				if err := bc.write(&w); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(w.Len()))
		})
	}
}
