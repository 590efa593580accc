package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
)

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
	list := leaseList(protobufLeases(100000, false))
	runListWrites(b, []listWrite{
		{"serializer", func(w *bytes.Buffer) error { return serializerList(w, list) }},
		{"batches", func(w *bytes.Buffer) error { return writeProtobufList(w, list) }},
	})
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

// agentLeases returns n node leases as agents write them (each owned by
// its node, which its managed fields name, with uids of their own), whose
// protobuf compresses as a fleet's lists do, about sixfold; the leases of
// protobufLeases, alike but for a counter, compress much further.
func agentLeases(n int) []runtime.Object {
	items := make([]runtime.Object, n)
	renewed := time.Unix(1700000000, 0)
	for i := range items {
		name := fmt.Sprintf("leasehold-bench-node-%d", i)
		owner := uuid.NewUUID()
		items[i] = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-node-lease", UID: uuid.NewUUID(),
				ResourceVersion: fmt.Sprint(1000 + i), CreationTimestamp: metav1.Time{Time: renewed},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: owner}},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "leasehold-agent", Operation: metav1.ManagedFieldsOperationUpdate,
					APIVersion: "coordination.k8s.io/v1", Time: &metav1.Time{Time: renewed}, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: fmt.Appendf(nil, `{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}},"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`, owner)}}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &metav1.MicroTime{Time: renewed.Add(time.Duration(rand.Int64N(int64(10 * time.Second))))}},
		}
	}
	return items
}

// discardResponse is an http.ResponseWriter that counts the bytes of the
// body and keeps none.
type discardResponse struct {
	h http.Header
	n int64
}

func (d *discardResponse) Header() http.Header         { return d.h }
func (d *discardResponse) WriteHeader(int)             {}
func (d *discardResponse) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }

// BenchmarkGzippedProtobufList: a list of 100 000 node leases written in
// protobuf and gzipped, as a client that accepts gzip (client-go, kubectl)
// gets it, on the handler's goroutine (one-core) and as such a list goes
// since it has parallelGzipItems items (every-core); the MB/s are of the
// list before compression, and ratio is how many times smaller it went out.
func BenchmarkGzippedProtobufList(b *testing.B) {
	list := leaseList(agentLeases(100000))
	var raw bytes.Buffer
	if err := writeProtobufList(&raw, list); err != nil {
		b.Fatal(err)
	}
	for _, parallel := range []bool{false, true} {
		b.Run(map[bool]string{false: "one-core", true: "every-core"}[parallel], func(b *testing.B) {
			b.SetBytes(int64(raw.Len()))
			w := &discardResponse{h: http.Header{}}
			for b.Loop() {
				w.n = 0
				if err := writeGzippedList(w, list, parallel); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(raw.Len())/float64(w.n), "ratio")
		})
	}
}
