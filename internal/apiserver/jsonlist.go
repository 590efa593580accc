package apiserver

import (
	"bytes"
	"encoding/json"
	"io"
	goruntime "runtime"

	"k8s.io/apimachinery/pkg/runtime"
)

// A list in JSON is written as apimachinery's JSON serializer streams a
// typed list, byte for byte: the list's kind, apiVersion and metadata, then
// each item as encoding/json writes it. The serializer encodes the items
// one after another on the handler's goroutine, at some 5 µs a lease by
// reflection, and first needs the typed list, whose slice of structs is a
// copy of every item (for 100 000 leases, 40 MB). Here the items are
// encoded from the watch cache's objects as they are, in batches spread
// over GOMAXPROCS goroutines (writeItems), and written in order.

// writeJSONList writes l, whose TypeMeta names its list kind, in JSON.
func writeJSONList(w io.Writer, l *itemList) error {
	return writeJSONListWith(w, l, goruntime.GOMAXPROCS(0))
}

// writeJSONListWith is writeJSONList with up to workers goroutines.
func writeJSONListWith(w io.Writer, l *itemList, workers int) error {
	head := []byte{'{'}
	var err error
	if l.Kind != "" {
		head, err = appendJSONField(head, "kind", l.Kind)
	}
	if err == nil && l.APIVersion != "" {
		head, err = appendJSONField(head, "apiVersion", l.APIVersion)
	}
	if err == nil {
		head, err = appendJSONField(head, "metadata", l.ListMeta)
	}
	if err != nil {
		return err
	}
	if _, err := w.Write(append(head, `"items":[`...)); err != nil {
		return err
	}

	items := l.Items
	var batches []int
	if len(items) > 0 {
		// Batches of about listBatchBytes, going by the first item.
		first, err := json.Marshal(items[0])
		if err != nil {
			return err
		}
		per := max(1, listBatchBytes/(len(first)+1))
		for i := 0; i < len(items); i += per {
			batches = append(batches, i)
		}
	}
	_, err = writeItems(w, len(items), batches, workers, func(from, to int) (*[]byte, error) {
		return encodeJSONBatch(items, from, to)
	})
	if err != nil {
		return err
	}
	_, err = w.Write([]byte("]}\n"))
	return err
}

// appendJSONField appends "key":value, to b.
func appendJSONField(b []byte, key string, value any) ([]byte, error) {
	k, err := json.Marshal(key)
	if err != nil {
		return b, err
	}
	v, err := json.Marshal(value)
	if err != nil {
		return b, err
	}
	b = append(append(b, k...), ':')
	return append(append(b, v...), ','), nil
}

// encodeJSONBatch encodes items[from:to] into a buffer from listBuffers,
// each followed by a comma but the list's last.
func encodeJSONBatch(items []runtime.Object, from, to int) (*[]byte, error) {
	buf := listBuffers.Get().(*[]byte)
	bb := bytes.NewBuffer((*buf)[:0])
	// An Encoder writes each item into the batch, where json.Marshal
	// would return a copy of each; both escape HTML alike.
	enc := json.NewEncoder(bb)
	for i := from; i < to; i++ {
		if err := enc.Encode(items[i]); err != nil {
			*buf = bb.Bytes()
			return buf, err
		}
		bb.Truncate(bb.Len() - 1) // the newline Encode ends a value with
		if i < len(items)-1 {
			bb.WriteByte(',')
		}
	}
	*buf = bb.Bytes()
	return buf, nil
}
