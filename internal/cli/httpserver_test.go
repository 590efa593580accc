package cli

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

// h2Framer serves h with newHTTPServer and serveTLS on a loopback port,
// and returns a framer on an HTTP/2 connection to it whose preface and
// settings are sent.
func h2Framer(t *testing.T, h http.Handler) *http2.Framer {
	t.Helper()
	serving, roots := pkitest.Serving(t)
	srv := newHTTPServer(h, &tls.Config{Certificates: []tls.Certificate{serving}}, slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serveTLS(srv, ln, clock.RealClock{}, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}

// requestBlock is the HPACK block of a request's pseudo-headers.
func requestBlock(method string) []byte {
	var req bytes.Buffer
	enc := hpack.NewEncoder(&req)
	for _, f := range [][2]string{{":method", method}, {":scheme", "https"}, {":authority", "leasehold"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return req.Bytes()
}

// The server's HTTP/2 responses use no entry of HPACK's dynamic table and
// add none to it, so that neither side keeps one for headers that change
// with every response (Audit-Id). Ten responses on one connection, read
// frame by frame, are decoded with a table of one byte, which no entry
// fits: a reference to an entry the server kept, or a table grown back,
// fails to decode. With net/http's default the second response refers to
// the headers the first one added.
func TestResponseHeadersUseNoDynamicTable(t *testing.T) {
	n := 0
	fr := h2Framer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // one stream at a time
		w.Header().Set("Audit-Id", fmt.Sprintf("audit-%d", n))
		w.Header().Set("Cache-Control", "no-cache, private")
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		w.Write([]byte("body"))
	}))
	dec := hpack.NewDecoder(1, nil)
	get := requestBlock("GET")
	for stream := uint32(1); stream <= 19; stream += 2 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: get, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		// Read until this stream's response has ended.
		for done := false; !done; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			switch f := f.(type) {
			case *http2.HeadersFrame:
				if !f.HeadersEnded() {
					t.Fatal("a response's headers span CONTINUATION frames; this test reads one frame")
				}
				fields, err := dec.DecodeFull(f.HeaderBlockFragment())
				if err != nil {
					t.Fatalf("stream %d: %v", stream, err)
				}
				if len(fields) == 0 || fields[0].Name != ":status" {
					t.Fatalf("stream %d: fields %v", stream, fields)
				}
				done = f.StreamEnded()
			case *http2.DataFrame:
				done = f.StreamEnded()
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			}
		}
	}
}

// The server reads frames of at most 16 KiB, HTTP/2's default, where
// net/http's own default is 1 MiB: the largest frame a connection has read
// stays allocated for as long as it lasts, whatever the request's answer.
// A DATA frame one byte larger ends the connection with FRAME_SIZE_ERROR.
func TestRequestFramesAreBounded(t *testing.T) {
	// The handler answers once it has read the whole body, so an answer
	// means the frame was read.
	fr := h2Framer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: requestBlock("PUT"), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// Frames larger than the server's setting are refused by this side too.
	fr.SetMaxReadFrameSize(1 << 20)
	if err := fr.WriteData(1, true, make([]byte, 16<<10+1)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without a GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeFrameSize {
				t.Errorf("GOAWAY %v, want %v", f.ErrCode, http2.ErrCodeFrameSize)
			}
			return
		case *http2.HeadersFrame:
			t.Fatalf("the server read a DATA frame of %d bytes and answered the request", 16<<10+1)
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		}
	}
}
