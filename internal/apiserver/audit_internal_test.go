package apiserver

import (
	"net/http"
	"slices"
	"testing"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// sourceIPs answers what apimachinery's SourceIPs does, written out, for
// any peer address and proxy headers: its shortcut for a plain peer
// address changes nothing.
func FuzzSourceIPs(f *testing.F) {
	for _, c := range [][3]string{
		{"127.0.0.1:443", "", ""},
		{"10.0.0.7:51234", "192.0.2.1, 10.9.9.9", ""},
		{"10.0.0.7:51234", "", "192.0.2.1"},
		{"[::1]:443", "", ""},
		{"[2001:db8::1]:80", "", ""},
		{"[2001:DB8:0:0::1]:80", "", ""},
		{"[::ffff:10.0.0.1]:80", "", ""},
		{"[fe80::1%eth0]:80", "", ""},
		{"010.000.000.001:80", "", ""},
		{"127.0.0.1", "", ""},
		{"not an address", "", ""},
		{"", "", ""},
	} {
		f.Add(c[0], c[1], c[2])
	}
	f.Fuzz(func(t *testing.T, remote, forwarded, realIP string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		if forwarded != "" {
			r.Header.Set("X-Forwarded-For", forwarded)
		}
		if realIP != "" {
			r.Header.Set("X-Real-Ip", realIP)
		}
		var want []string
		for _, ip := range utilnet.SourceIPs(r) {
			want = append(want, ip.String())
		}
		if got := sourceIPs(r); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("remote %q, X-Forwarded-For %q, X-Real-Ip %q: %q, want %q", remote, forwarded, realIP, got, want)
		}
	})
}

func TestSourceIPsAllocations(t *testing.T) {
	r := &http.Request{RemoteAddr: "10.0.0.7:51234", Header: http.Header{}}
	if n := testing.AllocsPerRun(100, func() { sourceIPs(r) }); n > 1 {
		t.Errorf("%v allocations for a plain peer address, want 1 (the slice)", n)
	}
}
