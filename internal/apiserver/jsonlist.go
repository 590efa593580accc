package apiserver

import (
	"bytes"
	"encoding/json"
	"io"
	goruntime "runtime"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// A list in JSON is written as apimachinery's JSON serializer streams a
// typed list, byte for byte: the list's kind, apiVersion and metadata, then
// each item as encoding/json writes it. The serializer encodes the items
// one after another on the handler's goroutine, at some 5 µs a lease by
// reflection, and first needs the typed list, whose slice of structs is a
// copy of every item (for 100 000 leases, 40 MB). Here the items are
// encoded from the store's objects as they are, in batches spread over
// GOMAXPROCS goroutines (writeItems), and written in order.
//
// The serializer's indented form, which curl gets unless it asks for
// pretty=false, is no stream at all: json.MarshalIndent of the whole list,
// in memory (for 100 000 node leases, 142 MB, and the server's memory
// twice as large while it is written). Here it is written in batches too,
// in the same bytes.

// jsonLayout is what a JSON list puts between its parts: compact, as the
// serializer streams a list, or indented, as its pretty form (for curl
// and ?pretty=true) writes it with json.MarshalIndent.
type jsonLayout struct {
	field, colon, itemsOpen, itemSep, itemsClose, end string
	prefix, indent                                    string // of an item
}

var (
	compactJSON  = jsonLayout{colon: ":", itemSep: ",", end: "}\n"}
	indentedJSON = jsonLayout{field: "\n  ", colon: ": ", itemsOpen: "\n    ", itemSep: ",\n    ", itemsClose: "\n  ", end: "\n}",
		prefix: "    ", indent: "  "}
)

// writeJSONList writes l, whose TypeMeta names its list kind, in JSON,
// indented when pretty is set.
func writeJSONList(w io.Writer, l *itemList, pretty bool) error {
	layout := compactJSON
	if pretty {
		layout = indentedJSON
	}
	return writeJSONListWith(w, l, layout, goruntime.GOMAXPROCS(0))
}

// writeJSONListWith is writeJSONList with up to workers goroutines.
func writeJSONListWith(w io.Writer, l *itemList, layout jsonLayout, workers int) error {
	head, err := layout.head(l)
	if err != nil {
		return err
	}
	items := l.Items
	if len(items) > 0 {
		head = append(head, layout.itemsOpen...)
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	batches, err := jsonBatches(items)
	if err != nil {
		return err
	}
	_, err = writeItems(w, len(items), batches, workers, func(from, to int) (*[]byte, error) {
		return layout.encodeBatch(items, l.itemKinds, from, to)
	})
	if err != nil {
		return err
	}
	tail := "]" + layout.end
	if len(items) > 0 {
		tail = layout.itemsClose + tail
	}
	_, err = io.WriteString(w, tail)
	return err
}

// head is the list up to the opening bracket of its items.
func (j jsonLayout) head(l *itemList) ([]byte, error) {
	head := []byte{'{'}
	var err error
	if l.Kind != "" {
		head, err = j.appendField(head, "kind", l.Kind)
	}
	if err == nil && l.APIVersion != "" {
		head, err = j.appendField(head, "apiVersion", l.APIVersion)
	}
	if err == nil {
		head, err = j.appendField(head, "metadata", l.ListMeta)
	}
	if err != nil {
		return nil, err
	}
	return append(append(append(head, j.field...), `"items"`...), j.colon+"["...), nil
}

// jsonBatches divides items into batches of about listBatchBytes of
// JSON, going by the first item, and returns the index of each batch's
// first item.
func jsonBatches(items []runtime.Object) ([]int, error) {
	if len(items) == 0 {
		return nil, nil
	}
	first, err := json.Marshal(items[0])
	if err != nil {
		return nil, err
	}
	per := max(1, listBatchBytes/(len(first)+1))
	batches := make([]int, 0, (len(items)+per-1)/per)
	for i := 0; i < len(items); i += per {
		batches = append(batches, i)
	}
	return batches, nil
}

// appendField appends the list's field key with its value, and a comma.
func (j jsonLayout) appendField(b []byte, key string, value any) ([]byte, error) {
	k, err := json.Marshal(key)
	if err != nil {
		return b, err
	}
	var v []byte
	if j.indent != "" {
		v, err = json.MarshalIndent(value, "  ", j.indent)
	} else {
		v, err = json.Marshal(value)
	}
	if err != nil {
		return b, err
	}
	b = append(append(append(b, j.field...), k...), j.colon...)
	return append(append(b, v...), ','), nil
}

// encodeBatch encodes items[from:to] into a buffer from listBuffers, each
// followed by the separator of items but the list's last, and with its
// kind when itemKinds is set.
func (j jsonLayout) encodeBatch(items []runtime.Object, itemKinds bool, from, to int) (*[]byte, error) {
	buf := listBuffers.Get().(*[]byte)
	bb := bytes.NewBuffer((*buf)[:0])
	err := j.appendItems(bb, items[from:to], itemKinds)
	if err == nil && to < len(items) {
		bb.WriteString(j.itemSep)
	}
	*buf = bb.Bytes()
	return buf, err
}

// appendItems appends items to bb, separated by the separator of items,
// each without the kind and apiVersion it carries unless itemKinds is set.
// kube-apiserver's items of a built-in kind's list carry neither: its
// objects are in their internal version, which has no kind, and the
// conversion of the list to the version asked for gives the list alone
// its kind. The items from the watch cache do carry theirs, and are
// shared, so the fields are cut from each item's JSON once it is written.
func (j jsonLayout) appendItems(bb *bytes.Buffer, items []runtime.Object, itemKinds bool) error {
	// An Encoder writes each item into bb, where json.Marshal would return
	// a copy of each; both escape HTML alike, and indent as
	// json.MarshalIndent does.
	enc := json.NewEncoder(bb)
	enc.SetIndent(j.prefix, j.indent)
	var typed typeFields
	for i, item := range items {
		if i > 0 {
			bb.WriteString(j.itemSep)
		}
		start := bb.Len()
		if err := enc.Encode(item); err != nil {
			return err
		}
		bb.Truncate(bb.Len() - 1) // the newline Encode ends a value with
		if itemKinds {
			continue
		}
		fields, err := typed.of(j, item)
		if err != nil {
			return err
		}
		if b := bb.Bytes()[start:]; len(fields) > 0 && bytes.HasPrefix(b[1:], fields) {
			copy(b[1:], b[1+len(fields):])
			bb.Truncate(bb.Len() - len(fields))
		}
	}
	return nil
}

// typeFields is how an item's kind and apiVersion open its JSON, right
// after its brace, for the last kind and apiVersion asked for: a list's
// items are all of one kind.
type typeFields struct {
	kind, apiVersion string
	json             []byte
}

// of returns the JSON of item's kind and apiVersion, each with the comma
// after it, as the layout j writes them: empty for an item that has none.
func (t *typeFields) of(j jsonLayout, item runtime.Object) ([]byte, error) {
	var kind, apiVersion string
	if tm, ok := item.GetObjectKind().(*metav1.TypeMeta); ok {
		kind, apiVersion = tm.Kind, tm.APIVersion
	} else {
		apiVersion, kind = item.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	}
	if t.json != nil && kind == t.kind && apiVersion == t.apiVersion {
		return t.json, nil
	}
	b := []byte{}
	for _, f := range [][2]string{{"kind", kind}, {"apiVersion", apiVersion}} {
		if f[1] == "" {
			continue
		}
		if j.indent != "" {
			b = append(append(append(b, '\n'), j.prefix...), j.indent...)
		}
		v, err := json.Marshal(f[1])
		if err != nil {
			return nil, err
		}
		b = append(append(append(append(append(b, '"'), f[0]...), '"'), j.colon...), v...)
		b = append(b, ',')
	}
	t.kind, t.apiVersion, t.json = kind, apiVersion, b
	return b, nil
}
