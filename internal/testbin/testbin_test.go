package testbin

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeLoopbackAddr: every address is a loopback port below the
// ephemeral range, a new one each time, free to listen on.
func TestFreeLoopbackAddr(t *testing.T) {
	low := ephemeralPortsLow()
	seen := map[string]bool{}
	for range 50 {
		addr, err := FreeLoopbackAddr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(port); host != "127.0.0.1" || n >= low || n < low-portsBelowEphemeral {
			t.Errorf("%s: want 127.0.0.1 and a port in [%d, %d)", addr, low-portsBelowEphemeral, low)
		}
		if seen[addr] {
			t.Errorf("%s handed out twice", addr)
		}
		seen[addr] = true
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening on %s: %v", addr, err)
		}
		ln.Close()
	}
}
