package cli

import (
	"bytes"
	"crypto/tls"
	"errors"
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

// representation is one of HPACK's kinds of header field representation
// (RFC 7541, section 6).
type representation int

const (
	indexed           representation = iota // from a table
	literalIndexing                         // a literal the tables keep from now on
	tableSizeUpdate                         // not a field: the table's new size
	literalNotIndexed                       // a literal, not indexed or never indexed
)

// hpackField is a representation and the integer it starts with: a table
// index (0 for a literal name), or the size of an update.
type hpackField struct {
	kind  representation
	index uint64
}

// hpackFields splits an HPACK header block into its representations.
func hpackFields(block []byte) ([]hpackField, error) {
	var out []hpackField
	// integer reads an integer with an n-bit prefix at the start of block.
	integer := func(n uint) (uint64, error) {
		if len(block) == 0 {
			return 0, errors.New("block ends in an integer")
		}
		max := uint64(1)<<n - 1
		v := uint64(block[0]) & max
		block = block[1:]
		if v < max {
			return v, nil
		}
		for shift := uint(0); ; shift += 7 {
			if len(block) == 0 || shift > 56 {
				return 0, errors.New("bad integer")
			}
			b := block[0]
			block = block[1:]
			v += uint64(b&0x7f) << shift
			if b&0x80 == 0 {
				return v, nil
			}
		}
	}
	str := func() error {
		n, err := integer(7)
		if err != nil {
			return err
		}
		if uint64(len(block)) < n {
			return errors.New("block ends in a string")
		}
		block = block[n:]
		return nil
	}
	for len(block) > 0 {
		var kind representation
		var prefix uint
		switch b := block[0]; {
		case b&0x80 != 0:
			kind, prefix = indexed, 7
		case b&0xc0 == 0x40:
			kind, prefix = literalIndexing, 6
		case b&0xe0 == 0x20:
			kind, prefix = tableSizeUpdate, 5
		default:
			kind, prefix = literalNotIndexed, 4
		}
		i, err := integer(prefix)
		if err != nil {
			return nil, err
		}
		if kind == literalIndexing || kind == literalNotIndexed {
			if i == 0 {
				if err := str(); err != nil {
					return nil, err
				}
			}
			if err := str(); err != nil {
				return nil, err
			}
		}
		out = append(out, hpackField{kind, i})
	}
	return out, nil
}

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
// frame by frame: every field is a static index, or a literal that is not
// indexed; the first block shrinks the table to nothing that fits.
func TestResponseHeadersUseNoDynamicTable(t *testing.T) {
	n := 0
	fr := h2Framer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // one stream at a time
		w.Header().Set("Audit-Id", fmt.Sprintf("audit-%d", n))
		w.Header().Set("Cache-Control", "no-cache, private")
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		w.Write([]byte("body"))
	}))
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
				fields, err := hpackFields(f.HeaderBlockFragment())
				if err != nil {
					t.Fatalf("stream %d: %v", stream, err)
				}
				for i, field := range fields {
					switch {
					case stream == 1 && i == 0 && field == hpackField{tableSizeUpdate, 1}:
					case field.kind == indexed && field.index <= 61: // the static table
					case field.kind == literalNotIndexed:
					default:
						t.Errorf("stream %d, field %d: %+v; want a static index (1 to 61) or a literal not indexed", stream, i, field)
					}
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
