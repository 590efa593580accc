package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/leakcheck"
	"github.com/leasehold/leasehold/internal/registry"
)

// protobufLeases returns n node leases as the watch cache holds them, the
// big ones (every seventh, when big is set) with an annotation larger
// than a batch.
func protobufLeases(n int, big bool) []runtime.Object {
	items := make([]runtime.Object, n)
	for i := range items {
		l := &coordinationv1.Lease{
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

// TestProtobufListBatches: a list in protobuf is the serializer's bytes
// for the typed list, whatever the number of items, their sizes against a
// batch's, and the goroutines marshalling them.
func TestProtobufListBatches(t *testing.T) {
	info, _ := serializerFor(mediaProtobuf)
	proto := encoding{info: info, mediaType: mediaProtobuf}
	for _, tc := range []struct {
		n   int
		big bool
	}{{0, false}, {1, false}, {2, false}, {3000, false}, {40, true}, {1, true}} {
		items := protobufLeases(tc.n, tc.big)
		typed := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "99999", Continue: "next"}}
		for _, item := range items {
			typed.Items = append(typed.Items, *item.(*coordinationv1.Lease))
		}
		var want bytes.Buffer
		if err := encodeTo(&want, proto, typed, registry.Leases.GroupVersion); err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{1, 2, 3, 8} {
			list := &itemList{Items: items}
			list.ResourceVersion, list.Continue = "99999", "next"
			obj, err := list.forEncoding(registry.Leases, proto)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := writeProtobufListWith(&got, obj.(*itemList), workers); err != nil {
				t.Fatalf("%d items (big %v), %d workers: %v", tc.n, tc.big, workers, err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("%d items (big %v), %d workers: %d bytes, differing from the serializer's %d",
					tc.n, tc.big, workers, got.Len(), want.Len())
			}
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

// TestProtobufListWriteFails: when the client goes, the list stops with
// the write's error, and no goroutine marshalling its items outlives it.
func TestProtobufListWriteFails(t *testing.T) {
	items := protobufLeases(5000, false)
	for _, after := range []int{0, 10, 3 * listBatchBytes} {
		list := &itemList{Items: items}
		list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
		err := writeProtobufListWith(&failingWriter{n: after}, list, 2)
		if !errors.Is(err, errClientGone) {
			t.Errorf("failing after %d bytes: %v, want the write's error", after, err)
		}
		if leaked := leakcheck.Leaked(0, "apiserver.writeItems"); leaked != "" {
			t.Fatalf("failing after %d bytes, still marshalling:\n%s", after, leaked)
		}
	}
}

// TestProtobufListRejectsOthers: an item without protobuf methods is an
// error before anything is written.
func TestProtobufListRejectsOthers(t *testing.T) {
	list := &itemList{Items: []runtime.Object{&coordinationv1.Lease{}, &itemList{}}}
	var b bytes.Buffer
	if err := writeProtobufList(&b, list); err == nil || b.Len() != 0 {
		t.Errorf("got %v with %d bytes written, want an error and nothing written", err, b.Len())
	}
}

// serializerList writes list in protobuf as leasehold did before
// writeProtobufList: by apimachinery's serializer, with a pooled allocator.
func serializerList(w io.Writer, list runtime.Object) error {
	info, _ := serializerFor(mediaProtobuf)
	alloc := runtime.AllocatorPool.Get().(*runtime.Allocator)
	defer runtime.AllocatorPool.Put(alloc)
	return runtime.NewEncoderWithAllocator(info.Serializer.(runtime.EncoderWithAllocator), alloc).Encode(list, w)
}

// BenchmarkProtobufList: a list of 100 000 node leases written in
// protobuf, by the serializer and here, with as many goroutines as
// GOMAXPROCS.
func BenchmarkProtobufList(b *testing.B) {
	items := protobufLeases(100000, false)
	info, _ := serializerFor(mediaProtobuf)
	proto := encoding{info: info, mediaType: mediaProtobuf}
	list := &itemList{Items: items}
	list.ResourceVersion = "12345"
	obj, err := list.forEncoding(registry.Leases, proto)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		write func(w *bytes.Buffer) error
	}{
		{"serializer", func(w *bytes.Buffer) error { return serializerList(w, obj) }},
		{"batches", func(w *bytes.Buffer) error { return writeProtobufList(w, obj.(*itemList)) }},
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

// BenchmarkProtobufListBeside writes lists of 100 000 node leases one
// after another, by the serializer and here, while another goroutine
// wakes every millisecond, as each step of a renewal waits its turn for a
// CPU beside a list; it reports how late those wakings ran (p99, p999 and
// the longest, in µs).
func BenchmarkProtobufListBeside(b *testing.B) {
	items := protobufLeases(100000, false)
	list := &itemList{Items: items}
	list.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("LeaseList"))
	for _, bc := range []struct {
		name  string
		write func() error
	}{
		{"serializer", func() error { return serializerList(io.Discard, list) }},
		{"batches", func() error { return writeProtobufList(io.Discard, list) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stop := make(chan struct{})
			var late []time.Duration
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case at := <-tick.C:
						late = append(late, time.Since(at))
					}
				}
			})
			for b.Loop() {
				if err := bc.write(); err != nil {
					b.Fatal(err)
				}
			}
			close(stop)
			wg.Wait()
			slices.Sort(late)
			if len(late) == 0 {
				return
			}
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
			b.ReportMetric(us(late[len(late)*99/100]), "late-p99-µs")
			b.ReportMetric(us(late[len(late)*999/1000]), "late-p999-µs")
			b.ReportMetric(us(late[len(late)-1]), "late-max-µs")
		})
	}
}
