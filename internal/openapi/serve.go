package openapi

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/munnerz/goautoneg"
)

// Media types of the OpenAPI documents themselves.
const (
	subtypeJSON        = "json"
	subtypeV2Proto     = "com.github.proto-openapi.spec.v2.v1.0+protobuf"
	subtypeV2ProtoOld  = "com.github.proto-openapi.spec.v2@v1.0+protobuf"
	subtypeV3Proto     = "com.github.proto-openapi.spec.v3.v1.0+protobuf"
	subtypeV3ProtoOld  = "com.github.proto-openapi.spec.v3@v1.0+protobuf"
	contentTypeJSON    = "application/json"
	contentTypeV2Proto = "application/" + subtypeV2Proto
	contentTypeV3Proto = "application/" + subtypeV3Proto
)

// ServeHTTP serves /openapi/v2, /openapi/v3 and /openapi/v3/<api/v1|apis/g/v>;
// other paths 404.
//
// Every response carries an ETag (the document's SHA-512) and answers
// If-None-Match with 304. A v3 document asked for with ?hash= matching its
// current hash is marked immutable for a year; a stale hash is redirected
// to the current URL, as kube-apiserver does.
func (d *Documents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case path == "/openapi/v2":
		if !allowMethod(w, r) {
			return
		}
		d.serveV2(w, r)
	case path == "/openapi/v3":
		if !allowMethod(w, r) {
			return
		}
		w.Header().Set("Content-Type", contentTypeJSON)
		w.Header().Set("Etag", strconv.Quote(d.v3DiscoveryETag))
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(d.v3Discovery))
	case strings.HasPrefix(path, "/openapi/v3/"):
		doc, ok := d.v3[strings.TrimPrefix(path, "/openapi/v3/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if !allowMethod(w, r) {
			return
		}
		d.serveV3(w, r, strings.TrimPrefix(path, "/openapi/v3/"), doc)
	default:
		http.NotFound(w, r)
	}
}

func allowMethod(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// negotiate returns the first offered subtype the Accept header admits, in
// the header's order of preference, or "" if none.
func negotiate(r *http.Request, offers ...string) string {
	accept := r.Header.Get("Accept")
	if accept == "" {
		accept = "*/*"
	}
	for _, c := range goautoneg.ParseAccept(accept) {
		if c.Type != "application" && c.Type != "*" {
			continue
		}
		for _, o := range offers {
			if c.SubType == o || c.SubType == "*" {
				return o
			}
		}
	}
	return ""
}

func (d *Documents) serveV2(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	var body []byte
	switch negotiate(r, subtypeJSON, subtypeV2ProtoOld, subtypeV2Proto) {
	case subtypeJSON:
		w.Header().Set("Content-Type", contentTypeJSON)
		body = []byte(d.v2JSON)
	case subtypeV2Proto, subtypeV2ProtoOld:
		b, err := d.v2Proto.get()
		if err != nil {
			http.Error(w, "encoding the OpenAPI v2 document: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", contentTypeV2Proto)
		body = b
	default:
		http.Error(w, "not acceptable", http.StatusNotAcceptable)
		return
	}
	// The protobuf shares the JSON's ETag: Vary: Accept keeps them apart.
	w.Header().Set("Etag", strconv.Quote(d.v2ETag))
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

func (d *Documents) serveV3(w http.ResponseWriter, r *http.Request, key string, doc *v3Document) {
	w.Header().Add("Vary", "Accept")
	var body []byte
	switch negotiate(r, subtypeJSON, subtypeV3Proto, subtypeV3ProtoOld) {
	case subtypeJSON:
		w.Header().Set("Content-Type", contentTypeJSON)
		body = doc.json
	case subtypeV3Proto, subtypeV3ProtoOld:
		b, err := doc.proto.get()
		if err != nil {
			http.Error(w, "encoding the OpenAPI v3 document: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", contentTypeV3Proto)
		body = b
	default:
		http.Error(w, "not acceptable", http.StatusNotAcceptable)
		return
	}
	w.Header().Set("Etag", strconv.Quote(doc.etag))
	if hash := r.URL.Query().Get("hash"); hash != "" {
		if hash != doc.etag {
			http.Redirect(w, r, "/openapi/v3/"+key+"?hash="+doc.etag, http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Cache-Control", "public, immutable")
		w.Header().Set("Expires", d.clock.Now().AddDate(1, 0, 0).UTC().Format(http.TimeFormat))
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}
