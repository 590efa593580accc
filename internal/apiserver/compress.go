package apiserver

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
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

// gzipResponse writes a response body gzipped (Content-Encoding: gzip,
// Vary: Accept-Encoding) when its first write is longer than
// gzipThreshold, as it is when the whole body is: the caller writes a body
// larger than that in one go, or through a buffer of more than
// gzipThreshold bytes, whose first write is either a full buffer or, at
// its Flush, all there is. The status line goes out at the first write.
type gzipResponse struct {
	w    http.ResponseWriter
	code int
	out  io.Writer // once the status line is written
	gz   *gzip.Writer
}

func newGzipResponse(w http.ResponseWriter, code int) *gzipResponse {
	return &gzipResponse{w: w, code: code}
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
		g.gz = gzipWriters.Get().(*gzip.Writer)
		g.gz.Reset(g.w)
		g.out = g.gz
	}
	g.w.WriteHeader(g.code)
}

// Close ends the gzip stream, or sends the status line of an empty body.
func (g *gzipResponse) Close() error {
	if g.out == nil {
		g.start(false)
	}
	if g.gz == nil {
		return nil
	}
	err := g.gz.Close()
	g.gz.Reset(io.Discard)
	gzipWriters.Put(g.gz)
	g.gz = nil
	return err
}
