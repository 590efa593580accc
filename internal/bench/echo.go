package bench

import (
	"bytes"
	"io"
	"net/http"
	"sync"
)

// EchoHandler answers the requests of the throughput and fleet scenarios
// while doing as little as a server can: a create or an update gets its
// own body back, in the Content-Type it came in (201 for a create), as if
// stored unchanged; a delete gets a Status of Success; anything else gets
// 404, since nothing is kept.
//
// Run against `leasehold bench echo-server`, which serves it over the same
// HTTPS and HTTP/2 settings as `leasehold serve`, a scenario measures what
// its requests cost without a server behind them: the transport on both
// ends and the load generator. No server on Go's HTTP/2 and TLS does better
// under the same load on the same machine: a server's own figures are best
// read against it.
func EchoHandler() http.Handler {
	return http.HandlerFunc(serveEcho)
}

// The answers other than echoes, as kube-apiserver spells them.
var (
	echoSuccess  = []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}` + "\n")
	echoNotFound = []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the echo server keeps nothing","reason":"NotFound","code":404}` + "\n")
)

// echoBuffers hold request bodies from read to write.
var echoBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func serveEcho(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	case http.MethodDelete:
		h.Set("Content-Type", "application/json")
		w.Write(echoSuccess)
		return
	default:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write(echoNotFound)
		return
	}
	buf := echoBuffers.Get().(*bytes.Buffer)
	defer func() {
		buf.Reset()
		echoBuffers.Put(buf)
	}()
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, 3<<20)); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.Set("Content-Type", r.Header.Get("Content-Type"))
	if r.Method == http.MethodPost {
		w.WriteHeader(http.StatusCreated)
	}
	w.Write(buf.Bytes())
}
