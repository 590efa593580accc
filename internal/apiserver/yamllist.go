package apiserver

import (
	"bytes"
	"fmt"
	"io"
	goruntime "runtime"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// A list in YAML is what apimachinery's YAML serializer makes of the typed
// list: its JSON, turned into YAML by sigs.k8s.io/yaml, which decodes the
// whole document into maps and writes them out with their keys sorted.
// For 100 000 node leases that took a minute of both CPUs and 7 GB of
// memory. Here each batch of items goes through the same conversion on
// its own, as the items of a one-key document {"items": [...]}: in the
// whole list's YAML the items sequence is the value of a top-level key
// too, so each item is laid out, indented and folded in the same columns,
// and the batch's YAML is the whole list's lines for those items. What
// surrounds them (apiVersion before, kind and metadata after, in sorted
// order) comes from the conversion of the list with one item, 0, in their
// place.

// yamlItemsKey is how a top-level items sequence opens in YAML.
const yamlItemsKey = "items:\n"

// yamlPlaceholder is the line of the one item in the list whose YAML
// frames the items.
const yamlPlaceholder = "- 0\n"

// writeYAMLList writes l, whose TypeMeta names its list kind, in YAML.
func writeYAMLList(w io.Writer, l *itemList) error {
	return writeYAMLListWith(w, l, goruntime.GOMAXPROCS(0))
}

// writeYAMLListWith is writeYAMLList with up to workers goroutines.
func writeYAMLListWith(w io.Writer, l *itemList, workers int) error {
	head, err := compactJSON.head(l)
	if err != nil {
		return err
	}
	items := l.Items
	if len(items) == 0 {
		y, err := yaml.JSONToYAML(append(head, "]}"...))
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	frame, err := yaml.JSONToYAML(append(head, "0]}"...))
	if err != nil {
		return err
	}
	at := bytes.Index(frame, []byte("\n"+yamlItemsKey+yamlPlaceholder)) + 1
	if !bytes.HasPrefix(frame[at:], []byte(yamlItemsKey+yamlPlaceholder)) {
		return fmt.Errorf("no top-level items in the list's YAML: %.200q", frame)
	}
	if _, err := w.Write(frame[:at+len(yamlItemsKey)]); err != nil {
		return err
	}
	batches, err := jsonBatches(items)
	if err != nil {
		return err
	}
	_, err = writeItems(w, len(items), batches, workers, func(from, to int) (*[]byte, error) {
		return yamlBatch(items, l.itemKinds, from, to)
	})
	if err != nil {
		return err
	}
	_, err = w.Write(frame[at+len(yamlItemsKey)+len(yamlPlaceholder):])
	return err
}

// yamlBatch writes items[from:to] as the lines of a YAML items sequence
// into a buffer from listBuffers, with their kinds when itemKinds is set.
func yamlBatch(items []runtime.Object, itemKinds bool, from, to int) (*[]byte, error) {
	buf := listBuffers.Get().(*[]byte)
	bb := bytes.NewBuffer((*buf)[:0])
	bb.WriteString(`{"items":[`)
	err := compactJSON.appendItems(bb, items[from:to], itemKinds)
	bb.WriteString("]}")
	*buf = bb.Bytes()
	if err != nil {
		return buf, err
	}
	y, err := yaml.JSONToYAML(*buf)
	if err != nil {
		return buf, err
	}
	if !bytes.HasPrefix(y, []byte(yamlItemsKey)) {
		return buf, fmt.Errorf("items in YAML begin %.100q", y)
	}
	*buf = append((*buf)[:0], y[len(yamlItemsKey):]...)
	return buf, nil
}
