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
	"time"

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

// TestParallelGzipStopsAtRelease: when a list stops part way, because the
// client went or because an item could not be encoded, release returns
// only once pgzip's goroutines are done with the response: none may write
// to it after the handler has returned (net/http's HTTP/2 response then
// panics, and the process with it).
func TestParallelGzipStopsAtRelease(t *testing.T) {
	if goruntime.GOMAXPROCS(0) == 1 {
		t.Skip("GOMAXPROCS is 1: nothing is gzipped in parallel")
	}
	// The client goes: the list ends with the response's error.
	list := leaseList(agentLeases(20000))
	w := &failingResponse{failingWriter: failingWriter{n: 200 << 10}, h: http.Header{}}
	if err := writeGzippedList(w, list, true); !errors.Is(err, errClientGone) {
		t.Errorf("got %v, want the response's error", err)
	}
	if leaked := leakcheck.Leaked(5*time.Second, "pgzip"); leaked != "" {
		t.Fatalf("still gzipping after release:\n%s", leaked)
	}

	// The list fails while pgzip's writer is still sending a block (held
	// in Write here): release waits for it.
	held := &heldResponse{h: http.Header{}, entered: make(chan struct{}), proceed: make(chan struct{}), left: make(chan struct{})}
	releasing, released := make(chan struct{}), make(chan struct{})
	go func() { // the handler
		g := newGzipResponse(held, http.StatusOK, true)
		// Three blocks of 1 MiB: the first is sent, the others queue.
		g.Write(bytes.Repeat([]byte("lease "), 3<<20/6))
		close(releasing)
		g.release() // as writeObject's deferred release, the encoding having failed
		held.released.Store(true)
		close(released)
	}()
	<-held.entered
	<-releasing
	for range 1000 {
		goruntime.Gosched() // a release that did not wait would be done by now
	}
	close(held.proceed)
	<-released
	<-held.left
	if n := held.late.Load(); n > 0 {
		t.Errorf("%d writes to the response were still under way when release returned", n)
	}
}

// heldResponse holds its second write (pgzip's first block, after the
// header) until proceed is closed, and counts the writes that return after
// released is set; left is closed when the held write returns.
type heldResponse struct {
	h                http.Header
	writes           atomic.Int64
	entered, proceed chan struct{}
	left             chan struct{}
	released         atomic.Bool
	late             atomic.Int64
}

func (r *heldResponse) Header() http.Header { return r.h }
func (r *heldResponse) WriteHeader(int)     {}
func (r *heldResponse) Write(p []byte) (int, error) {
	n := r.writes.Add(1)
	if n == 2 {
		close(r.entered)
		<-r.proceed
	}
	if r.released.Load() {
		r.late.Add(1)
	}
	if n == 2 {
		close(r.left)
	}
	return len(p), nil
}

type bufferResponse struct {
	h http.Header
	b *bytes.Buffer
}

func (r *bufferResponse) Header() http.Header         { return r.h }
func (r *bufferResponse) WriteHeader(int)             {}
func (r *bufferResponse) Write(p []byte) (int, error) { return r.b.Write(p) }

// failingResponse is a failingWriter as a response.
type failingResponse struct {
	failingWriter
	h http.Header
}

func (r *failingResponse) Header() http.Header { return r.h }
func (r *failingResponse) WriteHeader(int)     {}
