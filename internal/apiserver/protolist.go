package apiserver

import (
	"context"
	"fmt"
	"io"
	goruntime "runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"

	"github.com/leasehold/leasehold/internal/store"
)

// A list in protobuf is written as apimachinery's protobuf serializer
// streams one, byte for byte: the envelope, the list's metadata, then each
// item behind its field tag and length. The serializer does it on the
// handler's goroutine alone: it sizes every item, and then marshals one
// item after another, each marshal waiting for the write before it. For
// 100 000 leases that is some 0.3 s of one CPU before the last byte leaves,
// while the other CPUs wait: marshalling copies each lease's strings out
// of objects scattered over the heap, at the pace of memory. Here the
// sizing and the marshalling are spread over GOMAXPROCS goroutines, and
// the handler writes the items in order as they are done.
//
// Those goroutines never wait for anything but each other, so they yield
// their CPU after each chunk and batch (a fraction of a millisecond each):
// otherwise a list would hold every CPU for Go's time slice of 10 ms at a
// time, and each step of a renewal beside it (its handler, the group
// commit, etcd, the HTTP/2 connection) would wait that long for one.

// listBatchBytes is about how much of a list one goroutine marshals at a
// time, and how much each batch done but not yet written holds.
const listBatchBytes = 64 << 10

// listSizeChunk is how many items one goroutine sizes at a time.
const listSizeChunk = 1024

// protoItem is what apimachinery's generated types implement, and what the
// serializer's streamed list requires of an item.
type protoItem interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// The list fields, as the serializer writes them: ListMeta is field 1 and
// the items field 2, both length-delimited.
var (
	listMetaTag = protowire.AppendTag(nil, 1, protowire.BytesType)[0]
	listItemTag = protowire.AppendTag(nil, 2, protowire.BytesType)[0]
)

// listBuffers recycle the batches' buffers, from one list to the next.
// A buffer that a large item grew past maxListBuffer is left to the
// collector.
var listBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2*listBatchBytes); return &b }}

const maxListBuffer = 4 * listBatchBytes

func putListBuffer(b *[]byte) {
	if cap(*b) <= maxListBuffer {
		listBuffers.Put(b)
	}
}

// writeProtobufList writes l, whose TypeMeta names its list kind, in
// Kubernetes' protobuf envelope.
func writeProtobufList(w io.Writer, l *itemList) error {
	return writeProtobufListWith(w, l, goruntime.GOMAXPROCS(0))
}

// writeProtobufListWith is writeProtobufList with up to workers goroutines.
func writeProtobufListWith(w io.Writer, l *itemList, workers int) error {
	for _, obj := range l.Items {
		if _, ok := obj.(protoItem); !ok {
			return fmt.Errorf("%T cannot be encoded in protobuf", obj)
		}
	}
	sizes := make([]int, len(l.Items))
	if len(l.Items) <= listSizeChunk {
		// One chunk: sized here, without a goroutine.
		for i, obj := range l.Items {
			sizes[i] = obj.(protoItem).Size()
		}
	} else {
		workqueue.ParallelizeUntil(context.Background(), workers, len(l.Items), func(i int) {
			sizes[i] = l.Items[i].(protoItem).Size()
			if i%listSizeChunk == listSizeChunk-1 {
				goruntime.Gosched()
			}
		}, workqueue.WithChunkSize(listSizeChunk))
	}

	meta, err := l.ListMeta.Marshal()
	if err != nil {
		return err
	}
	rawSize := 1 + protowire.SizeBytes(len(meta))
	// batches[k] is the index of batch k's first item; the last batch ends
	// with the list.
	batches := []int{0}
	batchSize := 0
	for i, s := range sizes {
		n := 1 + protowire.SizeBytes(s)
		if batchSize > 0 && batchSize+n > listBatchBytes {
			batches = append(batches, i)
			batchSize = 0
		}
		batchSize += n
		rawSize += n
	}
	if len(l.Items) == 0 {
		batches = nil
	}

	if _, err := w.Write(store.ProtobufPrefix); err != nil {
		return err
	}
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: l.APIVersion, Kind: l.Kind}}
	_, err = unk.MarshalToWriter(w, rawSize, func(w io.Writer) (int, error) {
		written := 0
		b := protowire.AppendBytes([]byte{listMetaTag}, meta)
		n, err := w.Write(b)
		written += n
		if err != nil {
			return written, err
		}
		n, err = writeItems(w, len(l.Items), batches, workers, func(from, to int) (*[]byte, error) {
			return marshalBatch(l.Items, sizes, from, to)
		})
		return written + n, err
	})
	return err
}

// batchDone is one batch marshalled, or the error that stopped it.
type batchDone struct {
	buf *[]byte
	err error
}

// writeItems marshals a list's n items in batches, with up to workers
// goroutines, and writes them to w in order. batches[k] is the index of
// batch k's first item, and the last batch ends at n; marshal(from, to)
// marshals items[from:to] into a buffer from listBuffers, which writeItems
// returns to it. Batches done but not yet written are at most twice the
// workers, so a list holds a few hundred KiB however long it is. A failed
// write (the client gone) stops the workers after the batches they are on.
func writeItems(w io.Writer, n int, batches []int, workers int, marshal func(from, to int) (*[]byte, error)) (int, error) {
	end := func(k int) int {
		if k+1 < len(batches) {
			return batches[k+1]
		}
		return n
	}
	if len(batches) <= 1 || workers <= 1 {
		written := 0
		for k := range batches {
			buf, err := marshal(batches[k], end(k))
			if err == nil {
				var m int
				m, err = w.Write(*buf)
				written += m
			}
			putListBuffer(buf)
			if err != nil {
				return written, err
			}
		}
		return written, nil
	}

	workers = min(workers, len(batches))
	done := make([]chan batchDone, len(batches))
	for k := range done {
		done[k] = make(chan batchDone, 1)
	}
	ahead := make(chan struct{}, 2*workers) // a token per batch taken and not yet written
	stop := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				select {
				case ahead <- struct{}{}:
				case <-stop:
					return
				}
				k := int(next.Add(1) - 1)
				if k >= len(batches) {
					return
				}
				buf, err := marshal(batches[k], end(k))
				done[k] <- batchDone{buf, err}
				goruntime.Gosched()
			}
		})
	}
	written := 0
	var err error
	for k := range batches {
		d := <-done[k]
		err = d.err
		if err == nil {
			var m int
			m, err = w.Write(*d.buf)
			written += m
		}
		putListBuffer(d.buf)
		<-ahead
		if err != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	return written, err
}

// marshalBatch marshals items[from:to], each behind the items field's tag
// and its length, into a buffer from listBuffers.
func marshalBatch(items []runtime.Object, sizes []int, from, to int) (*[]byte, error) {
	buf := listBuffers.Get().(*[]byte)
	b := (*buf)[:0]
	for i := from; i < to; i++ {
		s := sizes[i]
		b = protowire.AppendVarint(append(b, listItemTag), uint64(s))
		at := len(b)
		b = append(b, make([]byte, s)...)
		n, err := items[i].(protoItem).MarshalToSizedBuffer(b[at:])
		if err == nil && n != s {
			err = fmt.Errorf("%T was %d bytes when sized, and %d when marshalled", items[i], s, n)
		}
		if err != nil {
			*buf = b
			return buf, err
		}
	}
	*buf = b
	return buf, nil
}
