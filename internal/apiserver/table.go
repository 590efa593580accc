package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/leasehold/leasehold/internal/registry"
)

// table converts an object or a list into the Table kubectl prints: the
// NAME column, the resource's own columns, and per row the object's
// metadata (or the whole object, or nothing, per includeObject). Its rows
// are made as the Table is encoded (a *tableStream; see encodeTo).
func (s *Server) table(req *request, e encoding, obj runtime.Object) (*tableStream, error) {
	include := metav1.IncludeObjectPolicy(req.info.query.Get("includeObject"))
	switch include {
	case "":
		include = metav1.IncludeMetadata
	case metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
	default:
		return nil, badRequest("includeObject must be one of None, Metadata or Object")
	}
	t := &metav1.Table{ColumnDefinitions: req.res.Columns}
	if !req.res.OwnColumns {
		t.ColumnDefinitions = append([]metav1.TableColumnDefinition{registry.NameColumn}, req.res.Columns...)
	}
	var items []runtime.Object
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, err
		}
		lm, _ := meta.ListAccessor(obj)
		t.ResourceVersion, t.Continue, t.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
	} else {
		items = []runtime.Object{obj}
		m, _ := meta.Accessor(obj)
		t.ResourceVersion = m.GetResourceVersion()
	}
	// Embedded objects are encoded the way the response is (YAML responses
	// embed JSON, which YAML contains).
	embed := e
	embed.pretty = false
	if e.info.MediaType == mediaYAML {
		embed.info, _ = serializerFor(mediaJSON)
	}
	now := s.clock.Now()
	return &tableStream{head: t, gv: e.meta, n: len(items), row: func(i int) (metav1.TableRow, error) {
		return tableRow(req.res, items[i], include, embed, now)
	}}, nil
}

// tableStream is a Table whose rows are made one by one as it is written
// in JSON (writeTableJSON), rather than all before: the rows of 100 000
// leases hold 80 MB. Other encodings make the whole Table first (table).
// Only the response's encoding reads it.
type tableStream struct {
	head *metav1.Table       // without rows
	gv   schema.GroupVersion // meta.k8s.io/v1 or v1beta1, as asked
	n    int
	row  func(i int) (metav1.TableRow, error)
}

// table returns the whole Table, its rows made.
func (ts *tableStream) table() (*metav1.Table, error) {
	t := *ts.head
	t.Rows = make([]metav1.TableRow, ts.n)
	for i := range t.Rows {
		var err error
		if t.Rows[i], err = ts.row(i); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

func (ts *tableStream) GetObjectKind() schema.ObjectKind { return &ts.head.TypeMeta }

func (ts *tableStream) DeepCopyObject() runtime.Object {
	t, err := ts.table()
	if err != nil {
		panic(err) // not expected: rows are made again as the first time
	}
	return t
}

func tableRow(res *registry.Resource, obj runtime.Object, include metav1.IncludeObjectPolicy, embed encoding, now time.Time) (metav1.TableRow, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return metav1.TableRow{}, err
	}
	var cells []interface{}
	if !res.OwnColumns {
		cells = []interface{}{m.GetName()}
	}
	if res.Cells != nil {
		cells = append(cells, res.Cells(obj, now)...)
	}
	row := metav1.TableRow{Cells: cells}
	var embedded runtime.Object
	gv := embed.meta
	switch include {
	case metav1.IncludeMetadata:
		embedded = &metav1.PartialObjectMetadata{ObjectMeta: *objectMeta(obj)}
	case metav1.IncludeObject:
		embedded, gv = obj, res.GroupVersion
	}
	if embedded != nil {
		raw, err := encode(embed, embedded, gv)
		if err != nil {
			return row, err
		}
		row.Object.Raw = bytes.TrimSpace(raw)
	}
	return row, nil
}

// partialMetadata converts an object or list into PartialObjectMetadata or
// PartialObjectMetadataList. Like a Table's rows, they hold copies of the
// objects' ObjectMeta structs that share their maps and slices: they are
// only encoded, and encoders leave objects alone. The items of a list
// carry their kind, PartialObjectMetadata of gv, as kube-apiserver's do.
func partialMetadata(obj runtime.Object, as string, gv schema.GroupVersion) (runtime.Object, error) {
	if !meta.IsListType(obj) {
		if as != "PartialObjectMetadata" {
			return nil, notAcceptable("PartialObjectMetadata for a single object")
		}
		return &metav1.PartialObjectMetadata{ObjectMeta: *objectMeta(obj)}, nil
	}
	if as != "PartialObjectMetadataList" {
		return nil, notAcceptable("PartialObjectMetadataList for a list")
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	lm, _ := meta.ListAccessor(obj)
	listMeta := metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount()}
	partialKind := metav1.TypeMeta{APIVersion: gv.String(), Kind: "PartialObjectMetadata"}
	if gv == metav1beta1.SchemeGroupVersion {
		// Its own type, whose protobuf numbers its fields the other way
		// round; only old clients ask for it, so it is not streamed.
		out := &metav1beta1.PartialObjectMetadataList{ListMeta: listMeta, Items: make([]metav1.PartialObjectMetadata, len(items))}
		for i, item := range items {
			out.Items[i].TypeMeta = partialKind
			out.Items[i].ObjectMeta = *objectMeta(item)
		}
		return out, nil
	}
	// The list is written as the serializer writes a
	// PartialObjectMetadataList (writeProtobufList, writeJSONList,
	// writeYAMLList), its items marshalled on every CPU.
	out := &itemList{
		TypeMeta:  metav1.TypeMeta{APIVersion: gv.String(), Kind: "PartialObjectMetadataList"},
		ListMeta:  listMeta,
		Items:     make([]runtime.Object, len(items)),
		itemKinds: true,
	}
	metas := make([]metav1.PartialObjectMetadata, len(items))
	for i, item := range items {
		metas[i].TypeMeta = partialKind
		metas[i].ObjectMeta = *objectMeta(item)
		out.Items[i] = &metas[i]
	}
	return out, nil
}

// writeTableJSON writes the Table of ts as the JSON serializer does, byte
// for byte, making each row as it goes and writing its object as it is:
// encoding/json validates and compacts again every RawExtension it
// writes, and that was the larger part of a Table's cost (kubectl asks for
// one on every get). The objects are the serializer's own compact output
// (tableRow), so they need neither.
func writeTableJSON(w io.Writer, ts *tableStream) error {
	head := *ts.head
	head.APIVersion, head.Kind = ts.gv.String(), "Table"
	head.Rows = nil
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // as json.Marshal writes, and a newline
	if err := enc.Encode(&head); err != nil {
		return err
	}
	// The rows go in place of the null the head ends with.
	if !bytes.HasSuffix(buf.Bytes(), []byte(`"rows":null}`+"\n")) {
		return fmt.Errorf("encoding a Table: unexpected end %q", buf.Bytes()[max(0, buf.Len()-20):])
	}
	buf.Truncate(buf.Len() - len("null}\n"))
	buf.WriteByte('[')
	// encode writes v with enc, without the newline.
	encode := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1)
		return nil
	}
	var row metav1.TableRow // one for all rows: encode takes its fields' addresses
	for i := range ts.n {
		var err error
		if row, err = ts.row(i); err != nil {
			return err
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"cells":`)
		if err := encode(&row.Cells); err != nil {
			return err
		}
		if len(row.Conditions) > 0 {
			buf.WriteString(`,"conditions":`)
			if err := encode(&row.Conditions); err != nil {
				return err
			}
		}
		buf.WriteString(`,"object":`)
		if row.Object.Raw != nil {
			buf.Write(row.Object.Raw)
		} else if err := encode(&row.Object); err != nil {
			return err
		}
		buf.WriteByte('}')
		if buf.Len() >= streamBuffer {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return err
			}
			buf.Reset()
		}
	}
	buf.WriteString("]}\n")
	_, err := w.Write(buf.Bytes())
	return err
}

// indentWriter indents the compact JSON written to it as it comes, the way
// json.Indent does with no prefix and two spaces: json.MarshalIndent's
// layout, which is the JSON serializer's pretty form (for curl, and for
// ?pretty=true). writeTableJSON's output goes through it, so that an
// indented Table is a stream too rather than a whole Table marshalled and
// then indented in memory (for 100 000 leases, 83 MB compact, and 2 to 4
// s). Whitespace outside strings is dropped, as the serializer's pretty
// form ends without the newline its compact form ends with. The input must
// be valid JSON, as writeTableJSON's is.
type indentWriter struct {
	w                             io.Writer
	buf                           []byte
	depth                         int
	inString, escaped, needIndent bool
}

func (iw *indentWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if iw.inString {
			iw.buf = append(iw.buf, c)
			switch {
			case iw.escaped:
				iw.escaped = false
			case c == '\\':
				iw.escaped = true
			case c == '"':
				iw.inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		// An object or array is opened on its line and its first element
		// goes on the next, unless it is empty: {} and [] stay whole.
		if iw.needIndent && c != '}' && c != ']' {
			iw.needIndent = false
			iw.depth++
			iw.newline()
		}
		switch c {
		case '"':
			iw.inString = true
			iw.buf = append(iw.buf, c)
		case '{', '[':
			iw.needIndent = true
			iw.buf = append(iw.buf, c)
		case ',':
			iw.buf = append(iw.buf, c)
			iw.newline()
		case ':':
			iw.buf = append(iw.buf, ':', ' ')
		case '}', ']':
			if iw.needIndent {
				iw.needIndent = false
			} else {
				iw.depth--
				iw.newline()
			}
			iw.buf = append(iw.buf, c)
		default:
			iw.buf = append(iw.buf, c)
		}
	}
	if len(iw.buf) >= streamBuffer {
		return len(p), iw.flush()
	}
	return len(p), nil
}

func (iw *indentWriter) newline() {
	iw.buf = append(iw.buf, '\n')
	for range iw.depth {
		iw.buf = append(iw.buf, ' ', ' ')
	}
}

// flush writes out what is indented so far.
func (iw *indentWriter) flush() error {
	_, err := iw.w.Write(iw.buf)
	iw.buf = iw.buf[:0]
	return err
}
