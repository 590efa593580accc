package apiserver

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestConnectionBudget(t *testing.T) {
	for _, tc := range []struct {
		openFiles uint64
		want      int
	}{
		{0, 1},
		{1, 1},
		{400, 200},
		{1024, 512},
		{2048, 1024},
		{20000, 18976},
		{1 << 20, 1<<20 - 1<<20/20},
		{^uint64(0), 1<<31 - 1}, // no limit
	} {
		if got := ConnectionBudget(tc.openFiles); got != tc.want {
			t.Errorf("ConnectionBudget(%d) = %d, want %d", tc.openFiles, got, tc.want)
		}
	}
}

// LimitConnections counts what it accepted until each closes, once however
// often it is closed, warns when full at most once a minute, and lets the
// next client in when one leaves.
func TestLimitConnections(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	var logs bytes.Buffer
	ln := LimitConnections(inner, 2, clk, slog.New(slog.NewTextHandler(&logs, nil)))
	defer ln.Close()
	if got := testutil.ToFloat64(connectionLimit); got != 2 {
		t.Errorf("leasehold_apiserver_connections_limit = %v, want 2", got)
	}
	before := testutil.ToFloat64(openConnections)
	open := func() float64 { return testutil.ToFloat64(openConnections) - before }
	warnings := func() int { return strings.Count(logs.String(), "serving the most client connections allowed") }

	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if open() != 1 || warnings() != 0 {
		t.Errorf("one accepted of two: %v open, %d warnings; want 1 and 0", open(), warnings())
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if open() != 2 || warnings() != 1 {
		t.Errorf("two accepted of two: %v open, %d warnings; want 2 and 1", open(), warnings())
	}

	third := make(chan net.Conn)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		third <- c
	}()
	a.Close()
	a.Close() // a second close gives nothing back
	c := <-third
	if open() != 2 {
		t.Errorf("after one left and the third came in: %v open, want 2", open())
	}
	if warnings() != 1 {
		t.Errorf("full again within a minute: %d warnings, want still 1", warnings())
	}

	b.Close()
	clk.Step(fullWarnEvery)
	d, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if open() != 2 || warnings() != 2 {
		t.Errorf("full again a minute later: %v open, %d warnings; want 2 and 2", open(), warnings())
	}
	c.Close()
	e.Close()
	if open() != 0 {
		t.Errorf("all closed: %v open, want 0", open())
	}
}
