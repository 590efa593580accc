package apiserver

import (
	"bytes"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
