package apiserver

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/leasehold/leasehold/internal/leakcheck"
	"github.com/leasehold/leasehold/internal/registry"
)

// yamlLeases returns jsonLeases(n, big) with strings that YAML quotes,
// folds or writes as blocks.
func yamlLeases(n int, big bool) []runtime.Object {
	items := jsonLeases(n, big)
	values := []string{
		strings.Repeat("a long value with spaces that YAML folds at its line width ", 4),
		"two\nlines\n", "  leading spaces", "- dash", "key: value", "# hash", "yes", "null", "0x1F", "1e3", "",
		"tab\there", "\u00e9\u4e16\U0001F600", "'quoted'", "\"double\"", "trailing space ",
	}
	for i, item := range items {
		l := item.(*coordinationv1.Lease)
		if i%4 == 3 {
			l.Annotations = map[string]string{"v": values[i%len(values)], "w": values[(i/4)%len(values)]}
		}
	}
	return items
}

// TestYAMLListBatches: a list in YAML is the serializer's bytes for the
// typed list, whatever the number of items, their sizes against a batch's,
// the strings they hold, and the goroutines converting them.
func TestYAMLListBatches(t *testing.T) {
	info, _ := serializerFor(mediaYAML)
	e := encoding{info: info, mediaType: mediaYAML}
	for _, tc := range []struct {
		n   int
		big bool
	}{{0, false}, {1, false}, {2, false}, {500, false}, {12, true}, {1, true}} {
		items := yamlLeases(tc.n, tc.big)
		var want bytes.Buffer
		if err := serializerTypedList(&want, mediaYAML, false, items, "99999", "next"); err != nil {
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
			if err := writeYAMLListWith(&got, obj.(*itemList), workers); err != nil {
				t.Fatalf("%d items (big %v), %d workers: %v", tc.n, tc.big, workers, err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("%d items (big %v), %d workers: differs from the serializer's\n got %.600q\nwant %.600q",
					tc.n, tc.big, workers, got.Bytes(), want.Bytes())
			}
		}
		if tc.n == 500 && !strings.Contains(want.String(), " long value\n        with spaces") {
			t.Errorf("no folded value in the list:\n%.3000s", want.Bytes())
		}
	}
}

// TestYAMLListWriteFails: when the client goes, the list stops with the
// write's error, and no goroutine converting its items outlives it.
func TestYAMLListWriteFails(t *testing.T) {
	items := yamlLeases(1000, false)
	for _, after := range []int{0, 10, 3 * listBatchBytes} {
		list := &itemList{Items: items}
		list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
		err := writeYAMLListWith(&failingWriter{n: after}, list, 2)
		if !errors.Is(err, errClientGone) {
			t.Errorf("failing after %d bytes: %v, want the write's error", after, err)
		}
		if leaked := leakcheck.Leaked(0, "apiserver.writeItems"); leaked != "" {
			t.Fatalf("failing after %d bytes, still converting:\n%s", after, leaked)
		}
	}
}

// FuzzYAMLList: whatever strings the items hold, a list in YAML is the
// serializer's bytes for the typed list, in one batch or many.
func FuzzYAMLList(f *testing.F) {
	f.Add("node-1", "a: b", uint8(3), uint8(2))
	f.Add("", "two\nlines\n", uint8(0), uint8(1))
	f.Add("x", strings.Repeat("y z ", 100), uint8(40), uint8(3))
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
		var want bytes.Buffer
		wantErr := serializerTypedList(&want, mediaYAML, false, items, name, value)
		list := &itemList{Items: items}
		list.ResourceVersion, list.Continue = name, value
		list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
		var got bytes.Buffer
		err := writeYAMLListWith(&got, list, 1+int(workers)%4)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, the serializer's %v", err, wantErr)
		}
		if err == nil && !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("differs from the serializer's\n got %.600q\nwant %.600q", got.Bytes(), want.Bytes())
		}
	})
}

// BenchmarkYAMLList: a list of 10 000 node leases written in YAML, by the
// serializer from the typed list and here, with as many goroutines as
// GOMAXPROCS.
func BenchmarkYAMLList(b *testing.B) {
	items := protobufLeases(10000, false)
	info, _ := serializerFor(mediaYAML)
	list := &itemList{Items: items}
	list.ResourceVersion = "12345"
	obj, err := list.forEncoding(registry.Leases, encoding{info: info, mediaType: mediaYAML})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		write func(w *bytes.Buffer) error
	}{
		{"serializer", func(w *bytes.Buffer) error { return serializerTypedList(w, mediaYAML, false, items, "12345", "") }},
		{"batches", func(w *bytes.Buffer) error { return writeYAMLList(w, obj.(*itemList)) }},
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
