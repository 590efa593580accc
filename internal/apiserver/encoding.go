package apiserver

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/munnerz/goautoneg"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

var (
	coreV1 = schema.GroupVersion{Version: "v1"}
	// apiextensionsV1 is the group of CustomResourceDefinitions, which
	// leasehold does not serve (see serveResource).
	apiextensionsV1 = schema.GroupVersion{Group: "apiextensions.k8s.io", Version: "v1"}
	metaV1          = metav1.SchemeGroupVersion
)

// Media types leasehold reads and writes.
const (
	mediaJSON     = runtime.ContentTypeJSON
	mediaYAML     = runtime.ContentTypeYAML
	mediaProtobuf = runtime.ContentTypeProtobuf
)

// encoding is the negotiated response format: a serializer and, for the
// meta.k8s.io transformations, what to turn objects into first.
type encoding struct {
	info      runtime.SerializerInfo
	mediaType string // the Content-Type written
	pretty    bool
	// as is "", "Table", "PartialObjectMetadata" or
	// "PartialObjectMetadataList", and meta the version of meta.k8s.io
	// asked for it (v1 or v1beta1).
	as   string
	meta schema.GroupVersion
}

// Header values written on most responses, made once: http.Header.Set
// makes a new slice for every value it sets. Nothing changes a header
// value in place (net/http copies a response's header before it writes
// it), so responses may share them.
var (
	noCacheValue        = []string{"no-cache, private"}
	contentTypeJSON     = []string{mediaJSON}
	contentTypeYAML     = []string{mediaYAML}
	contentTypeProtobuf = []string{mediaProtobuf}
)

// setContentType sets h's Content-Type to mediaType, with a shared value
// for the three plain media types.
func setContentType(h http.Header, mediaType string) {
	switch mediaType {
	case mediaJSON:
		h["Content-Type"] = contentTypeJSON
	case mediaYAML:
		h["Content-Type"] = contentTypeYAML
	case mediaProtobuf:
		h["Content-Type"] = contentTypeProtobuf
	default:
		h.Set("Content-Type", mediaType)
	}
}

// objectMediaTypes are the serializers for what is not a list
// (registry.ObjectCodecs).
var objectMediaTypes = registry.ObjectCodecs.SupportedMediaTypes()

func serializerFor(mediaType string) (runtime.SerializerInfo, bool) {
	return runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), mediaType)
}

// negotiate reads the Accept header the way kube-apiserver does: the
// acceptable entry of the highest quality wins, the first of equals;
// wildcards mean JSON; as=Table and
// as=PartialObjectMetadata[List] with g=meta.k8s.io turn objects into those
// forms. query is r's parsed URL query.
func (s *Server) negotiate(r *http.Request, query url.Values) (encoding, error) {
	e, err := negotiateAccept(r.Header.Get("Accept"))
	if err != nil {
		return encoding{}, err
	}
	e.pretty = wantPretty(r, query)
	return e, nil
}

// acceptCache holds what negotiateAccept made of the Accept headers seen
// first, up to acceptCacheSize of them: a client sends the same header
// with every request, and parsing it was 1 % of the server's CPU in the
// throughput scenario. Headers beyond those are parsed every time, so that
// no client can grow the cache.
var acceptCache struct {
	m sync.Map // Accept header → encoding
	n atomic.Int32
}

const acceptCacheSize = 64

// negotiateAccept is negotiate for an Accept header, pretty left false.
func negotiateAccept(accept string) (encoding, error) {
	if e, ok := acceptCache.m.Load(accept); ok {
		return e.(encoding), nil
	}
	e, err := parseAccept(accept)
	// The Load first keeps the count from wrapping around once the cache
	// is full and misses go on.
	if err == nil && acceptCache.n.Load() < acceptCacheSize && acceptCache.n.Add(1) <= acceptCacheSize {
		acceptCache.m.Store(accept, e)
	}
	return e, err
}

func parseAccept(accept string) (encoding, error) {
	if accept == "" {
		info, _ := serializerFor(mediaJSON)
		return encoding{info: info, mediaType: mediaJSON}, nil
	}
	for _, clause := range goautoneg.ParseAccept(accept) {
		mt, params := clause.Type+"/"+clause.SubType, clause.Params
		switch mt {
		case "*/*", "application/*":
			mt = mediaJSON
		}
		info, ok := serializerFor(mt)
		if !ok {
			continue
		}
		e := encoding{info: info, mediaType: mt}
		if as := params["as"]; as != "" {
			if params["g"] != metav1.GroupName || (params["v"] != "v1" && params["v"] != "v1beta1") {
				continue
			}
			switch as {
			case "Table":
				// Tables are served in JSON and YAML only, as in Kubernetes.
				if mt == mediaProtobuf {
					continue
				}
			case "PartialObjectMetadata", "PartialObjectMetadataList":
			default:
				continue
			}
			e.as, e.meta = as, schema.GroupVersion{Group: metav1.GroupName, Version: params["v"]}
			e.mediaType = fmt.Sprintf("%s;as=%s;v=%s;g=%s", mt, as, e.meta.Version, metav1.GroupName)
		}
		return e, nil
	}
	return encoding{}, notAcceptable("application/json, application/yaml, application/vnd.kubernetes.protobuf")
}

// negotiateOrJSON is negotiate for error responses: they are always
// written, in JSON when nothing else is acceptable.
func (s *Server) negotiateOrJSON(r *http.Request, query url.Values) encoding {
	e, err := s.negotiate(r, query)
	if err != nil || e.as != "" {
		info, _ := serializerFor(mediaJSON)
		mt := mediaJSON
		if err == nil {
			info, mt = e.info, e.info.MediaType
		}
		return encoding{info: info, mediaType: mt, pretty: wantPretty(r, query)}
	}
	return e
}

// wantPretty tells whether to indent the response to r, whose parsed URL
// query is query.
func wantPretty(r *http.Request, query url.Values) bool {
	if p := query.Get("pretty"); p != "" {
		return p == "true" || p == "1"
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl") || strings.HasPrefix(ua, "Wget")
}

// encode serializes obj as gv in e's format. obj is not modified: it may
// be shared (objects from the watch cache are).
func encode(e encoding, obj runtime.Object, gv schema.GroupVersion) ([]byte, error) {
	var buf bytes.Buffer
	if err := encodeTo(&buf, e, obj, gv); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func encodeTo(w io.Writer, e encoding, obj runtime.Object, gv schema.GroupVersion) error {
	info := e.info
	if _, list := obj.(metav1.ListMetaAccessor); !list {
		if oi, ok := runtime.SerializerInfoForMediaType(objectMediaTypes, info.MediaType); ok {
			info = oi
		}
	}
	l, isItemList := obj.(*itemList)
	if isItemList {
		switch info.MediaType {
		case mediaProtobuf:
			return writeProtobufList(w, l)
		case mediaJSON:
			return writeJSONList(w, l, e.pretty)
		case mediaYAML:
			return writeYAMLList(w, l)
		}
	}
	var ser runtime.Encoder = info.Serializer
	if e.pretty && info.PrettySerializer != nil {
		ser = info.PrettySerializer
	}
	if wa, ok := ser.(runtime.EncoderWithAllocator); ok {
		// The protobuf encoder then reuses one buffer for every item of a
		// streamed list (as kube-apiserver does) instead of allocating one
		// per item.
		alloc := runtime.AllocatorPool.Get().(*runtime.Allocator)
		defer runtime.AllocatorPool.Put(alloc)
		ser = runtime.NewEncoderWithAllocator(wa, alloc)
	}
	if isItemList {
		// Not a registered type: it carries its own apiVersion and kind.
		return ser.Encode(l, w)
	}
	if ts, ok := obj.(*tableStream); ok {
		if e.info.MediaType == mediaJSON && !e.pretty {
			return writeTableJSON(w, ts)
		}
		if e.info.MediaType == mediaJSON {
			iw := &indentWriter{w: w}
			if err := writeTableJSON(iw, ts); err != nil {
				return err
			}
			return iw.flush()
		}
		t, err := ts.table()
		if err != nil {
			return err
		}
		obj = t
	}
	// Serializers write the apiVersion and kind the object carries. Objects
	// decoded from a request or from etcd already carry their own, and are
	// written as they are; any other is shallow-copied before its kind is
	// set, since objects from the watch cache are shared.
	kind, err := kindIn(obj, gv)
	if err != nil {
		return err
	}
	if kind.Empty() {
		return ser.Encode(obj, w)
	}
	if obj.GetObjectKind().GroupVersionKind() != kind {
		obj = store.ShallowCopy(obj)
		obj.GetObjectKind().SetGroupVersionKind(kind)
	}
	return ser.Encode(obj, w)
}

// kindIn returns the kind obj is written as in gv, chosen the way
// runtime.WithVersionEncoder chooses it: gv's own kind of obj's type, or
// else the first the scheme knows. It is empty for a type the scheme does
// not know, which is written with whatever kind it carries.
func kindIn(obj runtime.Object, gv schema.GroupVersion) (schema.GroupVersionKind, error) {
	kinds, _, err := registry.Scheme.ObjectKinds(obj)
	if err != nil {
		if runtime.IsNotRegisteredError(err) {
			return schema.GroupVersionKind{}, nil
		}
		return schema.GroupVersionKind{}, err
	}
	if k, ok := gv.KindForGroupVersionKinds(kinds); ok {
		return k, nil
	}
	return kinds[0], nil
}

// itemList is a list whose items are the objects a store list returned
// (from the watch cache, shared). The in-process ListerWatcher hands it to
// client-go's reflector, which takes runtime.Object elements as they are. A
// list response in protobuf, JSON or YAML is written from it as it is
// (writeProtobufList, writeJSONList, writeYAMLList): the same bytes as the
// kind's typed list, without copying every item into the typed list's
// slice of structs first (for 100 000 leases, 40 MB copied, and scanned by
// the garbage collector, per list), and so are a Table's rows and partial
// metadata.
type itemList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []runtime.Object `json:"items" protobuf:"bytes,2,rep,name=items"`
	// itemKinds: the items are written with the kind and apiVersion they
	// carry, as a PartialObjectMetadataList's are, and not without, as a
	// stored kind's are (appendItems).
	itemKinds bool
}

func (l *itemList) DeepCopyObject() runtime.Object {
	c := &itemList{TypeMeta: l.TypeMeta, Items: make([]runtime.Object, len(l.Items)), itemKinds: l.itemKinds}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	for i, item := range l.Items {
		c.Items[i] = item.DeepCopyObject()
	}
	return c
}

// forEncoding returns l itself, naming the resource's list kind; a Table
// or partial metadata is made from its items as they are too. A resource
// whose list kind the scheme does not know in its group version gets its
// typed list with the same items.
func (l *itemList) forEncoding(res *registry.Resource) (runtime.Object, error) {
	list := res.NewList()
	kinds, _, err := registry.Scheme.ObjectKinds(list)
	if err != nil {
		return nil, err
	}
	for _, k := range kinds {
		if k.GroupVersion() == res.GroupVersion {
			l.SetGroupVersionKind(k)
			return l, nil
		}
	}
	return l.typed(list)
}

// typed fills list, a kind's typed list, with copies of l's items and its
// metadata. The copies carry no kind or apiVersion, as the items of
// kube-apiserver's lists do not (appendItems).
func (l *itemList) typed(list runtime.Object) (runtime.Object, error) {
	if err := meta.SetList(list, l.Items); err != nil {
		return nil, err
	}
	if err := meta.EachListItem(list, func(item runtime.Object) error {
		item.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		return nil
	}); err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	lm.SetResourceVersion(l.ResourceVersion)
	lm.SetContinue(l.Continue)
	lm.SetRemainingItemCount(l.RemainingItemCount)
	return list, nil
}

// streamBuffer is how much of a streamed list is gathered before it is
// handed to the connection.
const streamBuffer = 64 << 10

// streamWriters keep the buffers of streamed lists between responses:
// [0] of streamBuffer bytes, [1] of more than gzipThreshold for a client
// that accepts gzip. Every list takes one, however short, and a paginated
// list one for each page: 200 for 100 000 leases in pages of 500.
var streamWriters [2]sync.Pool

func takeStreamWriter(pool *sync.Pool, w io.Writer, size int) *bufio.Writer {
	if bw, ok := pool.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, size)
}

func (s *Server) writeObject(w http.ResponseWriter, r *http.Request, code int, e encoding, obj runtime.Object, gv schema.GroupVersion) {
	if _, table := obj.(*tableStream); table || meta.IsListType(obj) {
		// A list is written as it is encoded, item by item (the codecs
		// stream collections, and writeTableJSON a Table's rows as it makes
		// them), rather than built whole in memory first: a list of 100 000
		// leases is some 50 MB, and their Table 80. An encoding error can then no
		// longer become a 500, so the response is cut off instead, which
		// every client sees as a failed request.
		setContentType(w.Header(), e.mediaType)
		var out io.Writer = w
		var gz *gzipResponse
		pool, size := &streamWriters[0], streamBuffer
		if s.acceptsGzip(r) {
			// A buffer larger than the threshold: its first write tells
			// gz whether the list passes it.
			gz = newGzipResponse(w, code, listItems(obj) >= parallelGzipItems)
			defer gz.release()
			out, pool, size = gz, &streamWriters[1], gzipThreshold+1
		} else {
			w.WriteHeader(code)
		}
		bw := takeStreamWriter(pool, out, size)
		err := encodeTo(bw, e, obj, gv)
		if err == nil {
			err = bw.Flush()
		}
		if err == nil && gz != nil {
			err = gz.Close()
		}
		if err != nil && r.Context().Err() == nil {
			s.log.Error("encoding response", "err", err, "path", r.URL.Path)
			panic(http.ErrAbortHandler)
		}
		bw.Reset(nil) // what is left unwritten, if the client went, with it
		pool.Put(bw)
		return
	}
	buf := responseBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledResponse {
			buf.Reset()
			responseBuffers.Put(buf)
		}
	}()
	if err := encodeTo(buf, e, obj, gv); err != nil {
		s.log.Error("encoding response", "err", err, "path", r.URL.Path)
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	setContentType(w.Header(), e.mediaType)
	if buf.Len() > gzipThreshold && s.acceptsGzip(r) {
		gz := newGzipResponse(w, code, false)
		if _, err := gz.Write(buf.Bytes()); err == nil {
			gz.Close()
		}
		gz.release()
		return
	}
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// listItems is how many items a list to be written holds: a Table's rows,
// a list's items.
func listItems(obj runtime.Object) int {
	switch l := obj.(type) {
	case *tableStream:
		return l.n
	case *itemList:
		return len(l.Items)
	}
	return meta.LenList(obj)
}

// responseBuffers hold an object's encoding from the encoder to the
// response's Write, which copies it (into the HTTP/2 stream's buffer, and
// the audit record's when it keeps bodies): a renewal's answer then grows
// no buffer of its own. Buffers above maxPooledResponse are left to the
// collector.
var responseBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledResponse = 64 << 10

// bodyMediaTypes are the request body formats, as 415 answers list them.
const bodyMediaTypes = mediaJSON + ", " + mediaYAML + ", " + mediaProtobuf

// decodeBody decodes a request body of the resource's kind, gvk, whose
// group version apiVersion spells. strict reports unknown and duplicate
// fields as a strict decoding error.
func decodeBody(contentType string, body []byte, into runtime.Object, apiVersion string, gvk schema.GroupVersionKind, strict bool) (runtime.Object, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || contentType == "" {
		mt = mediaJSON
	}
	info, ok := serializerFor(mt)
	if !ok {
		return nil, unsupportedMediaType(bodyMediaTypes)
	}
	if mt != mediaProtobuf {
		return decodeWith(info, body, into, gvk, strict)
	}
	// Without the serializer's copy of the object out of its envelope;
	// anything the fast way does not take (or fails on) goes the
	// serializer's way, which gives the errors.
	obj, err := into, error(nil)
	if ok, ferr := store.DecodeProtobuf(body, apiVersion, gvk, into); !ok || ferr != nil {
		if r, canReset := into.(interface{ Reset() }); ok && canReset {
			r.Reset()
		}
		if obj, err = decodeWith(info, body, into, gvk, strict); obj == nil {
			return nil, err
		}
	}
	if path, t := unrepresentableTime(obj); path != "" {
		return nil, badRequest("error decoding request body: %s: %s is outside the years 0000 to 9999, which JSON's times (RFC 3339) can carry",
			path, t.UTC().Format(time.RFC3339Nano))
	}
	return obj, err
}

// decodeWith decodes a request body with the serializer of info.
func decodeWith(info runtime.SerializerInfo, body []byte, into runtime.Object, gvk schema.GroupVersionKind, strict bool) (runtime.Object, error) {
	dec := runtime.Decoder(info.Serializer)
	if strict && info.StrictSerializer != nil {
		dec = info.StrictSerializer
	}
	obj, got, err := dec.Decode(body, &gvk, into)
	if err != nil && !runtime.IsStrictDecodingError(err) {
		if got != nil && got.Kind != "" && (got.Kind != gvk.Kind || got.GroupVersion() != gvk.GroupVersion()) {
			return nil, kindMismatch(*got, gvk)
		}
		// In kube-apiserver's words: which kind the body said it was, or a
		// glimpse of the body when it said none.
		if got != nil && got.Kind != "" {
			return nil, cannotHandle(*got, gvk, err)
		}
		return nil, badRequest("the object provided is unrecognized (must be of type %s): %v (%s)", gvk.Kind, err, glimpse(body, 30))
	}
	if got != nil && (got.Kind != gvk.Kind || got.GroupVersion() != gvk.GroupVersion()) {
		return nil, kindMismatch(*got, gvk)
	}
	return obj, err
}

// cannotHandle is the 400 of a body of kind got that did not decode into
// a want, as kube-apiserver words it.
func cannotHandle(got, want schema.GroupVersionKind, err error) error {
	return badRequest("%s in version %q cannot be handled as a %s: %v", got.Kind, got.Version, want.Kind, err)
}

// glimpse is the start of a body for an error: as it is if it is JSON,
// else in hex; at most n bytes of it, as kube-apiserver shows it.
func glimpse(body []byte, n int) string {
	more := ""
	if len(body) > n {
		body, more = body[:n], " ..."
	}
	switch {
	case len(body) == 0:
		return "<empty>"
	case body[0] == '{':
		return string(body) + more
	}
	return hex.EncodeToString(body) + more
}

func kindMismatch(got, want schema.GroupVersionKind) error {
	if got.GroupVersion() != want.GroupVersion() {
		return badRequest("the API version in the data (%s) does not match the expected API version (%s)", got.GroupVersion(), want.GroupVersion())
	}
	return badRequest("the kind in the data (%s) does not match the expected kind (%s)", got.Kind, want.Kind)
}
