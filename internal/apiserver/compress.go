package apiserver

import (
	"io"
	"net/http"
	goruntime "runtime"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/pgzip"
)

// gzipThreshold is kube-apiserver's: a response body larger than this is
// gzipped for a client that accepts gzip; a smaller one, a renewal's
// answer for instance, costs nothing to send as it is.
const gzipThreshold = 128 << 10

// acceptsGzip reports whether r's Accept-Encoding names gzip, read as
// kube-apiserver reads it (a bare "gzip" among its comma-separated items;
// Go's HTTP client, and so client-go and kubectl, send exactly that).
func (s *Server) acceptsGzip(r *http.Request) bool {
	if !s.cfg.ResponseCompression {
		return false
	}
	for item := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(item) == "gzip" {
			return true
		}
	}
	return false
}

// gzipWriters are at level 1, kube-apiserver's: the least CPU for a ratio
// close to the higher levels' (a list of leases in protobuf shrinks about
// sixfold, in JSON fourteenfold). They are klauspost/compress's: at level
// 1 it compresses a list of node leases in protobuf more than twice as
// fast as compress/gzip, and a little smaller
// (BenchmarkGzippedProtobufList), and any gzip reader reads it.
var gzipWriters = sync.Pool{New: func() any {
	gw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return gw
}}

// parallelGzipItems is how many items (or a Table's rows) a list needs for
// its response to be gzipped on every core rather than on the handler's
// goroutine alone. A list of 100 000 node leases is 50 MB of protobuf,
// which one core gzips in 150-180 ms, and two, in blocks of 1 MiB, in
// 90-100 ms, no larger (BenchmarkGzippedProtobufList). A page of 500 is
// one block or less, and stays on one core. A variable for the tests.
var parallelGzipItems = 4096

// parallelGzipWriters are klauspost/pgzip's, at gzipWriters' level. Each
// cuts its input into blocks of 1 MiB and compresses up to GOMAXPROCS of
// them at once, each with the 32 KiB before it as its dictionary, so the
// result is one gzip stream as small as gzipWriters' (RFC 1952: any gzip
// reader reads it).
var parallelGzipWriters = sync.Pool{New: func() any {
	gw, _ := pgzip.NewWriterLevel(io.Discard, pgzip.BestSpeed)
	return gw
}}

// gzipResponse writes a response body gzipped (Content-Encoding: gzip,
// Vary: Accept-Encoding) when its first write is longer than
// gzipThreshold, as it is when the whole body is: the caller writes a body
// larger than that in one go, or through a buffer of more than
// gzipThreshold bytes, whose first write is either a full buffer or, at
// its Flush, all there is. The status line goes out at the first write.
//
// With parallel, a body that passes the threshold is gzipped on every core
// (parallelGzipWriters), whose goroutines write to w while the handler
// waits in Write and Close. release must then be called before the handler
// returns, on every path: it waits for them.
type gzipResponse struct {
	w        http.ResponseWriter
	code     int
	parallel bool
	out      io.Writer // once the status line is written
	gz       *gzip.Writer
	pgz      *pgzip.Writer
}

// newGzipResponse starts a response of status code for a client that
// accepts gzip; parallel asks for the body to be gzipped on every core,
// when there is more than one.
func newGzipResponse(w http.ResponseWriter, code int, parallel bool) *gzipResponse {
	return &gzipResponse{w: w, code: code, parallel: parallel && goruntime.GOMAXPROCS(0) > 1}
}

func (g *gzipResponse) Write(p []byte) (int, error) {
	if g.out == nil {
		g.start(len(p) > gzipThreshold)
	}
	return g.out.Write(p)
}

func (g *gzipResponse) start(compress bool) {
	g.out = g.w
	if compress {
		h := g.w.Header()
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		h.Del("Content-Length")
		if g.parallel {
			g.pgz = parallelGzipWriters.Get().(*pgzip.Writer)
			g.pgz.Reset(g.w)
			g.out = g.pgz
		} else {
			g.gz = gzipWriters.Get().(*gzip.Writer)
			g.gz.Reset(g.w)
			g.out = g.gz
		}
	}
	g.w.WriteHeader(g.code)
}

// Close ends the gzip stream, or sends the status line of an empty body.
func (g *gzipResponse) Close() error {
	if g.out == nil {
		g.start(false)
	}
	switch {
	case g.pgz != nil:
		return g.pgz.Close()
	case g.gz != nil:
		return g.gz.Close()
	}
	return nil
}

// release gives the gzip writer back, after Close or instead of it when
// the body could not be finished. A parallel writer's goroutines are done
// when it returns, and none of them writes to w again.
func (g *gzipResponse) release() {
	if g.pgz != nil {
		g.pgz.Reset(io.Discard) // waits for its goroutines
		parallelGzipWriters.Put(g.pgz)
		g.pgz = nil
	}
	if g.gz != nil {
		g.gz.Reset(io.Discard)
		gzipWriters.Put(g.gz)
		g.gz = nil
	}
}
