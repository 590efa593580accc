package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/leakcheck"
	"github.com/leasehold/leasehold/internal/registry"
)

// listWriter is one of the writers of lists from their items, with the
// media type and form of the serializer whose bytes it writes.
type listWriter struct {
	name   string
	mt     string
	pretty bool
	write  func(w io.Writer, l *itemList, workers int) error
	// most is how many items a test gives it at most: YAML's conversion
	// is slow.
	most int
}

var listWriters = []listWriter{
	{"protobuf", mediaProtobuf, false, writeProtobufListWith, 3000},
	{"json", mediaJSON, false, func(w io.Writer, l *itemList, workers int) error {
		return writeJSONListWith(w, l, compactJSON, workers)
	}, 3000},
	{"json-indented", mediaJSON, true, func(w io.Writer, l *itemList, workers int) error {
		return writeJSONListWith(w, l, indentedJSON, workers)
	}, 3000},
	{"yaml", mediaYAML, false, writeYAMLListWith, 500},
}

// protobufLeases returns n node leases as the watch cache holds them, the
// big ones (every seventh, when big is set) with an annotation larger
// than a batch.
func protobufLeases(n int, big bool) []runtime.Object {
	items := make([]runtime.Object, n)
	for i := range items {
		l := &coordinationv1.Lease{
			TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%06d", i), Namespace: "kube-node-lease",
				ResourceVersion: fmt.Sprint(1000 + i), UID: types.UID(fmt.Sprint("u-", i))},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(fmt.Sprintf("node-%06d", i)),
				LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: time.Unix(1700000000, int64(i)*1000)}},
		}
		if big && i%7 == 0 {
			l.Annotations = map[string]string{"note": strings.Repeat("x", listBatchBytes+i)}
		}
		items[i] = l
	}
	return items
}

// variedLeases returns protobufLeases(n, big), a third carrying their kind,
// some with labels that JSON escapes, and some with annotations that YAML
// quotes, folds or writes as blocks.
func variedLeases(n int, big bool) []runtime.Object {
	items := protobufLeases(n, big)
	values := []string{
		strings.Repeat("a long value with spaces that YAML folds at its line width ", 4),
		"two\nlines\n", "  leading spaces", "- dash", "key: value", "# hash", "yes", "null", "0x1F", "1e3", "",
		"tab\there", "\u00e9\u4e16\U0001F600", "'quoted'", "\"double\"", "trailing space ",
	}
	for i, item := range items {
		l := item.(*coordinationv1.Lease)
		if i%3 != 1 {
			l.TypeMeta = metav1.TypeMeta{}
		}
		if i%5 == 2 {
			l.Labels = map[string]string{"z": "<a&b>", "a": "\u2028é\"\\"}
		}
		if i%4 == 3 {
			l.Annotations = map[string]string{"v": values[i%len(values)], "w": values[(i/4)%len(values)]}
		}
	}
	return items
}

// sampleNodes returns n Nodes as a fleet's agents post them.
func sampleNodes(n int) []runtime.Object {
	items := make([]runtime.Object, n)
	now := metav1.NewTime(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	for i := range items {
		name := fmt.Sprintf("node-%05d", i)
		items[i] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: fmt.Sprint(500 + i), UID: types.UID("n-" + name),
				Labels: map[string]string{"kubernetes.io/hostname": name, "zone": fmt.Sprintf("z-%d", i%3)}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "a b: c", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1900m"), corev1.ResourceMemory: resource.MustParse("7.5Gi")},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now,
					Reason: "KubeletReady", Message: strings.Repeat("the agent is posting ready status ", i%4)}},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250)}},
				NodeInfo:  corev1.NodeSystemInfo{KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)", Architecture: "amd64"},
			},
		}
	}
	return items
}

// serializerTypedList writes items in the media type mt as leasehold did
// before writing lists from their items: copied into the typed list, then
// by apimachinery's serializer (its indenting one when pretty is set).
func serializerTypedList(w io.Writer, res *registry.Resource, mt string, pretty bool, items []runtime.Object, rv, cont string) error {
	info, _ := serializerFor(mt)
	e := encoding{info: info, mediaType: mt, pretty: pretty}
	l := &itemList{Items: items}
	l.ResourceVersion, l.Continue = rv, cont
	list, err := l.typed(res.NewList())
	if err != nil {
		return err
	}
	return encodeTo(w, e, list, res.GroupVersion)
}

// compareWithSerializer writes items of res with lw, through forEncoding as
// a response does, and with the serializer, and tells how they differ.
func compareWithSerializer(lw listWriter, res *registry.Resource, items []runtime.Object, rv, cont string, workers int) error {
	var want bytes.Buffer
	wantErr := serializerTypedList(&want, res, lw.mt, lw.pretty, items, rv, cont)
	list := &itemList{Items: items}
	list.ResourceVersion, list.Continue = rv, cont
	obj, err := list.forEncoding(res)
	if err != nil {
		return err
	}
	l, ok := obj.(*itemList)
	if !ok {
		return fmt.Errorf("forEncoding gave %T, not the list as it is", obj)
	}
	var got bytes.Buffer
	err = lw.write(&got, l, workers)
	switch {
	case (err != nil) != (wantErr != nil):
		return fmt.Errorf("error %v, the serializer's %v", err, wantErr)
	case err == nil && !bytes.Equal(got.Bytes(), want.Bytes()):
		return fmt.Errorf("differs from the serializer's\n got %.600q\nwant %.600q", got.Bytes(), want.Bytes())
	}
	return nil
}

// TestListWriters: a list written from its items is the serializer's
// bytes for the typed list, in protobuf, JSON (compact and indented) and
// YAML, whatever the number of items, their sizes against a batch's, the
// strings they hold, and the goroutines marshalling them.
func TestListWriters(t *testing.T) {
	for _, lw := range listWriters {
		for _, tc := range []struct {
			n   int
			big bool
		}{{0, false}, {1, false}, {2, false}, {lw.most, false}, {40, true}, {1, true}} {
			items := variedLeases(tc.n, tc.big)
			for _, workers := range []int{1, 2, 3, 8} {
				if err := compareWithSerializer(lw, registry.Leases, items, "99999", "next", workers); err != nil {
					t.Errorf("%s, %d items (big %v), %d workers: %v", lw.name, tc.n, tc.big, workers, err)
				}
			}
		}
		// Nodes: quantities, conditions, addresses, taints.
		for _, workers := range []int{1, 3} {
			if err := compareWithSerializer(lw, registry.Nodes, sampleNodes(150), "99999", "", workers); err != nil {
				t.Errorf("%s, nodes, %d workers: %v", lw.name, workers, err)
			}
		}
	}

	// The leases hold what the formats escape, quote and fold.
	for _, c := range []struct{ mt, want string }{
		{mediaJSON, `\u003ca\u0026b\u003e`},
		{mediaYAML, " long value\n        with spaces"},
		{mediaYAML, "|\n        two\n        lines\n"},
	} {
		var b bytes.Buffer
		if err := serializerTypedList(&b, registry.Leases, c.mt, false, variedLeases(20, false), "1", ""); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%s has no %q:\n%.2000s", c.mt, c.want, b.Bytes())
		}
	}
}

// failingWriter takes n bytes, then fails every write.
type failingWriter struct{ n int }

var errClientGone = errors.New("client gone")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		n := w.n
		w.n = 0
		return n, errClientGone
	}
	w.n -= len(p)
	return len(p), nil
}

// TestListWriteFails: when the client goes, a list stops with the write's
// error, and no goroutine marshalling its items outlives it.
func TestListWriteFails(t *testing.T) {
	items := variedLeases(5000, false)
	for _, lw := range listWriters {
		for _, after := range []int{0, 10, 3 * listBatchBytes} {
			list := &itemList{Items: items}
			list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
			err := lw.write(&failingWriter{n: after}, list, 2)
			if !errors.Is(err, errClientGone) {
				t.Errorf("%s, failing after %d bytes: %v, want the write's error", lw.name, after, err)
			}
			if leaked := leakcheck.Leaked(0, "apiserver.writeItems"); leaked != "" {
				t.Fatalf("%s, failing after %d bytes, still marshalling:\n%s", lw.name, after, leaked)
			}
		}
	}
}

// FuzzListWriters: whatever strings the items hold, a list written from
// its items is the serializer's bytes, in every format, in one batch or
// many.
func FuzzListWriters(f *testing.F) {
	f.Add("node-1", "<a&b>", uint8(3), uint8(2))
	f.Add("", "\u2028\xff\"", uint8(0), uint8(1))
	f.Add("x", strings.Repeat("y z ", 100), uint8(40), uint8(3))
	f.Add("a: b", "two\nlines\n", uint8(5), uint8(0))
	f.Fuzz(func(t *testing.T, name, value string, n, workers uint8) {
		// Items of up to some 40 KB, so that a list is a few batches and
		// its YAML takes a fraction of a second.
		name, value = name[:min(len(name), 200)], value[:min(len(value), 200)]
		items := make([]runtime.Object, int(n)%64)
		for i := range items {
			items[i] = &coordinationv1.Lease{
				// Every other item carries a kind and apiVersion, which
				// the items of a list are written without.
				TypeMeta: metav1.TypeMeta{Kind: name[:i%2*len(name)], APIVersion: value[:i%2*len(value)]},
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: value, Labels: map[string]string{value: name},
					Annotations: map[string]string{"a": strings.Repeat(value, i%8*25)}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &value},
			}
		}
		for _, lw := range listWriters {
			if err := compareWithSerializer(lw, registry.Leases, items, name, value, 1+int(workers)%4); err != nil {
				t.Fatalf("%s: %v", lw.name, err)
			}
		}
	})
}

// listWrite is a way to write a list, for runListWrites.
type listWrite struct {
	name  string
	write func(w *bytes.Buffer) error
}

// runListWrites runs each write as a sub-benchmark of b, into a buffer
// that every iteration reuses.
func runListWrites(b *testing.B, writes []listWrite) {
	for _, lw := range writes {
		b.Run(lw.name, func(b *testing.B) {
			var w bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				w.Reset()
				if err := lw.write(&w); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(w.Len()))
		})
	}
}

// leaseList is the list of items, as a response writes it.
func leaseList(items []runtime.Object) *itemList {
	list := &itemList{Items: items}
	list.ResourceVersion = "12345"
	list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
	return list
}

// BenchmarkJSONList: a list of 100 000 node leases written in JSON,
// compact and indented, by the serializer from the typed list (as before
// writeJSONList, the copy into it included) and here, with as many
// goroutines as GOMAXPROCS.
func BenchmarkJSONList(b *testing.B) {
	items := protobufLeases(100000, false)
	list := leaseList(items)
	runListWrites(b, []listWrite{
		{"serializer", func(w *bytes.Buffer) error {
			return serializerTypedList(w, registry.Leases, mediaJSON, false, items, "12345", "")
		}},
		{"batches", func(w *bytes.Buffer) error { return writeJSONList(w, list, false) }},
		{"serializer-pretty", func(w *bytes.Buffer) error {
			return serializerTypedList(w, registry.Leases, mediaJSON, true, items, "12345", "")
		}},
		{"batches-pretty", func(w *bytes.Buffer) error { return writeJSONList(w, list, true) }},
	})
}

// BenchmarkYAMLList: a list of 10 000 node leases written in YAML, by the
// serializer from the typed list and here, with as many goroutines as
// GOMAXPROCS.
func BenchmarkYAMLList(b *testing.B) {
	items := protobufLeases(10000, false)
	list := leaseList(items)
	runListWrites(b, []listWrite{
		{"serializer", func(w *bytes.Buffer) error {
			return serializerTypedList(w, registry.Leases, mediaYAML, false, items, "12345", "")
		}},
		{"batches", func(w *bytes.Buffer) error { return writeYAMLList(w, list) }},
	})
}
