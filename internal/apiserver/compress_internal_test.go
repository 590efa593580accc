package apiserver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	goruntime "runtime"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/internal/leakcheck"
)

// writeGzippedList writes list in protobuf to w as writeObject does for a
// client that accepts gzip, gzipped on every core or not, and releases the
// writer on every path.
func writeGzippedList(w http.ResponseWriter, list *itemList, parallel bool) error {
	g := newGzipResponse(w, http.StatusOK, parallel)
	defer g.release()
	bw := bufio.NewWriterSize(g, gzipThreshold+1)
	err := writeProtobufList(bw, list)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = g.Close()
	}
	return err
}

// TestParallelGzip: a list gzipped on every core is one gzip stream that
// the standard library's reader reads back to the list, byte for byte.
func TestParallelGzip(t *testing.T) {
	if goruntime.GOMAXPROCS(0) == 1 {
		t.Skip("GOMAXPROCS is 1: nothing is gzipped in parallel")
	}
	list := leaseList(agentLeases(20000)) // 10 MB: ten blocks
	var raw bytes.Buffer
	if err := writeProtobufList(&raw, list); err != nil {
		t.Fatal(err)
	}
	for _, parallel := range []bool{false, true} {
		var out bytes.Buffer
		w := &bufferResponse{h: http.Header{}, b: &out}
		if err := writeGzippedList(w, list, parallel); err != nil {
			t.Fatal(err)
		}
		if got := w.h.Get("Content-Encoding"); got != "gzip" {
			t.Fatalf("parallel %v: Content-Encoding %q", parallel, got)
		}
		zr, err := gzip.NewReader(&out)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("parallel %v: reading the gzip stream: %v", parallel, err)
		}
		if !bytes.Equal(whole, raw.Bytes()) {
			t.Errorf("parallel %v: read back %d bytes, want the list's %d", parallel, len(whole), raw.Len())
		}
	}
}

// TestParallelGzipStopsAtRelease: when the client goes mid-list, release
// returns only once the writer's goroutines are done, so that none writes
// to the response after the handler has returned.
func TestParallelGzipStopsAtRelease(t *testing.T) {
	if goruntime.GOMAXPROCS(0) == 1 {
		t.Skip("GOMAXPROCS is 1: nothing is gzipped in parallel")
	}
	list := leaseList(agentLeases(20000))
	w := &failingResponse{failingWriter: failingWriter{n: 200 << 10}, h: http.Header{}}
	if err := writeGzippedList(w, list, true); !errors.Is(err, errClientGone) {
		t.Errorf("got %v, want the response's error", err)
	}
	w.done.Store(true)
	if leaked := leakcheck.Leaked(0, "pgzip"); leaked != "" {
		t.Fatalf("still gzipping after release:\n%s", leaked)
	}
	// Another list through the same pool: a writer the first one left
	// running would write to w now.
	g2 := newGzipResponse(&discardResponse{h: http.Header{}}, http.StatusOK, true)
	g2.Write(make([]byte, gzipThreshold+1))
	g2.Close()
	g2.release()
	if n := w.late.Load(); n > 0 {
		t.Errorf("%d writes to the response after release", n)
	}
}

type bufferResponse struct {
	h http.Header
	b *bytes.Buffer
}

func (r *bufferResponse) Header() http.Header         { return r.h }
func (r *bufferResponse) WriteHeader(int)             {}
func (r *bufferResponse) Write(p []byte) (int, error) { return r.b.Write(p) }

// failingResponse is a failingWriter as a response, which counts writes
// after done.
type failingResponse struct {
	failingWriter
	h    http.Header
	done atomic.Bool
	late atomic.Int64
}

func (r *failingResponse) Header() http.Header { return r.h }
func (r *failingResponse) WriteHeader(int)     {}
func (r *failingResponse) Write(p []byte) (int, error) {
	if r.done.Load() {
		r.late.Add(1)
	}
	return r.failingWriter.Write(p)
}
