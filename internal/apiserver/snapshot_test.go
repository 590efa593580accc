package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestSnapshotIdle: a snapshot of which etcd sends nothing for the
// request timeout is a 504, one that stops part way is cut, and one that
// keeps coming is whole however long it takes in all (a fake clock
// measures it; nothing sleeps).
func TestSnapshotIdle(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	// The fake etcd sends what the test puts in chunks, ends the snapshot
	// when chunks is closed, and fails when its context ends. The server
	// sets its idle timer before it asks for the snapshot: called tells
	// the test that the timer is there.
	var chunks chan []byte
	called := make(chan struct{}, 1)
	s := apiservertest.Start(t, apiservertest.Options{Clock: clk, RequestTimeout: time.Minute,
		Snapshot: func(ctx context.Context) (io.ReadCloser, error) {
			called <- struct{}{}
			pr, pw := io.Pipe()
			in := chunks
			go func() {
				for {
					select {
					case c, ok := <-in:
						if !ok {
							pw.Close()
							return
						}
						pw.Write(c)
					case <-ctx.Done():
						pw.CloseWithError(ctx.Err())
						return
					}
				}
			}()
			return pr, nil
		}})
	client, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	// get starts a GET of the snapshot and waits until the server has
	// asked for it; its func waits for the answer.
	get := func() func() *http.Response {
		got := make(chan *http.Response, 1)
		go func() {
			resp, err := client.Get(s.URL + apiserver.SnapshotPath)
			if err != nil {
				t.Error(err)
			}
			got <- resp
		}()
		select {
		case <-called:
		case <-time.After(30 * time.Second):
			t.Fatal("the server did not ask for the snapshot")
		}
		return func() *http.Response {
			select {
			case resp := <-got:
				return resp
			case <-time.After(30 * time.Second):
				t.Fatal("no answer to the snapshot's GET")
				return nil
			}
		}
	}
	// step moves the clock. The server's idle timer is set by then: before
	// it asked for the snapshot (get), and again before it sent each chunk
	// the test has read. Waiting for the clock to have waiters would not
	// do: another of the server's timers waits on it from its start, and a
	// loaded machine (CI's, running every package at once) stepped the
	// clock before the snapshot's timer was set, which then never fired.
	step := clk.Step

	t.Run("never starts", func(t *testing.T) {
		chunks = make(chan []byte)
		got := get()
		step(time.Minute)
		resp := got()
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		var st metav1.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusGatewayTimeout ||
			st.Reason != metav1.StatusReasonTimeout || st.Message != "Timeout: etcd sent no snapshot within 1m0s" {
			t.Errorf("a snapshot that never starts: HTTP %d, %+v, %v; want 504 Timeout", resp.StatusCode, st, err)
		}
	})

	// readChunk reads the next chunk's bytes from body.
	readChunk := func(t *testing.T, body io.Reader, want []byte) {
		t.Helper()
		b := make([]byte, len(want))
		if _, err := io.ReadFull(body, b); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("read %q, %v; want %q", b, err, want)
		}
	}

	t.Run("stops part way", func(t *testing.T) {
		chunks = make(chan []byte)
		got := get()
		chunks <- []byte("first")
		resp := got()
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
		readChunk(t, resp.Body, []byte("first"))
		step(time.Minute)
		if rest, err := io.ReadAll(resp.Body); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("a snapshot that stopped part way ended well, with %q after the first chunk", rest)
		}
	})

	t.Run("keeps coming", func(t *testing.T) {
		chunks = make(chan []byte)
		got := get()
		chunks <- []byte("one")
		resp := got()
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		readChunk(t, resp.Body, []byte("one"))
		for _, c := range []string{"two", "three", "four"} {
			// Each chunk comes just within the idle time: three minutes in all.
			step(time.Minute - time.Second)
			chunks <- []byte(c)
			readChunk(t, resp.Body, []byte(c))
		}
		close(chunks)
		if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
			t.Errorf("the end of a whole snapshot: %q, %v", rest, err)
		}
	})
}
