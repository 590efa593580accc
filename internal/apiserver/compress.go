package apiserver

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"sync"
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
// sixfold, in JSON fourteenfold).
var gzipWriters = sync.Pool{New: func() any {
	gw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return gw
}}

// gzipResponse writes a response body, holding it back until it passes
// gzipThreshold: a body that does is sent gzipped (Content-Encoding: gzip,
// Vary: Accept-Encoding), a smaller one as it is at Close. The status line
// goes out when that is known. An audit event that keeps the response
// body gets it uncompressed.
type gzipResponse struct {
	w     http.ResponseWriter
	code  int
	held  []byte
	out   io.Writer // once the status line is written
	gz    *gzip.Writer
	audit io.Writer
}

func newGzipResponse(w http.ResponseWriter, code int) *gzipResponse {
	return &gzipResponse{w: w, code: code}
}

func (g *gzipResponse) Write(p []byte) (int, error) {
	if g.out == nil {
		g.held = append(g.held, p...)
		if len(g.held) <= gzipThreshold {
			return len(p), nil
		}
		g.start(true)
		held := g.held
		g.held = nil
		if _, err := g.write(held); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return g.write(p)
}

func (g *gzipResponse) write(p []byte) (int, error) {
	if g.audit != nil {
		g.audit.Write(p)
	}
	return g.out.Write(p)
}

func (g *gzipResponse) start(compress bool) {
	if compress {
		h := g.w.Header()
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		h.Del("Content-Length")
	}
	g.w.WriteHeader(g.code)
	if !compress {
		g.out = g.w
		return
	}
	g.audit = auditPlainBody(g.w)
	g.gz = gzipWriters.Get().(*gzip.Writer)
	g.gz.Reset(g.w)
	g.out = g.gz
}

// Close sends what is held back, or ends the gzip stream.
func (g *gzipResponse) Close() error {
	if g.out == nil {
		g.start(false)
		_, err := g.w.Write(g.held)
		g.held = nil
		return err
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
