package agent

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
)

func TestParseNodeIP(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "10.0.0.7", want: "10.0.0.7"},
		{in: "10.0.0.7,fd00::7", want: "10.0.0.7,fd00::7"},
		{in: "fd00::7, 10.0.0.7", want: "fd00::7,10.0.0.7"},
		{in: "0.0.0.0", want: "0.0.0.0"},
		{in: "::", want: "::"},
		{in: "010.000.000.007", want: "10.0.0.7"}, // the kubelet's sloppy form, leading zeros
		{in: "10.0.0.7,10.0.0.8", err: "must contain either a single IP or a dual-stack pair of IPs"},
		{in: "10.0.0.7,fd00::7,fd00::8", err: "must contain either a single IP or a dual-stack pair of IPs"},
		{in: "0.0.0.0,::", err: "dual-stack node IP cannot include '0.0.0.0' or '::'"},
		{in: "web-1", err: `"web-1" is not an IP address`},
		{in: "10.0.0.7,", err: `"" is not an IP address`},
		{in: "127.0.0.1", err: "127.0.0.1 is a loopback address"},
		{in: "::1", err: "::1 is a loopback address"},
		{in: "fe80::1", err: "fe80::1 is a link-local address"},
		{in: "169.254.1.1", err: "169.254.1.1 is a link-local address"},
		{in: "224.0.0.1", err: "224.0.0.1 is a multicast address"},
	} {
		ips, err := ParseNodeIP(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParseNodeIP(%q) = %v, %v; want error %q", tc.in, ips, err, tc.err)
			}
			continue
		}
		if err != nil || joinIPs(ips) != tc.want {
			t.Errorf("ParseNodeIP(%q) = %v, %v; want %s", tc.in, ips, err, tc.want)
		}
	}
}

func joinIPs(ips []net.IP) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}

// FuzzParseNodeIP: what ParseNodeIP accepts is one IP or a pair of both
// families, none loopback, link-local or multicast, and reads back the
// same from its own string form.
func FuzzParseNodeIP(f *testing.F) {
	for _, s := range []string{"", "10.0.0.7", "10.0.0.7,fd00::7", "::", "0.0.0.0,::", "127.0.0.1", "a,b", " 10.0.0.1 ", "::ffff:10.0.0.7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ips, err := ParseNodeIP(s)
		if err != nil || s == "" {
			return
		}
		if len(ips) == 0 || len(ips) > 2 || len(ips) == 2 && (ips[0].To4() != nil) == (ips[1].To4() != nil) {
			t.Fatalf("ParseNodeIP(%q) = %v", s, ips)
		}
		for _, ip := range ips {
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
				t.Fatalf("ParseNodeIP(%q) accepted %s", s, ip)
			}
		}
		again, err := ParseNodeIP(joinIPs(ips))
		if err != nil || !slices.EqualFunc(again, ips, net.IP.Equal) {
			t.Fatalf("ParseNodeIP(%q) = %v, read back as %v, %v", s, ips, again, err)
		}
	})
}

func TestChosenAddresses(t *testing.T) {
	host := []net.Addr{
		&net.IPNet{IP: net.ParseIP("127.0.0.1")},
		&net.IPNet{IP: net.ParseIP("172.17.0.1")},
		&net.IPNet{IP: net.ParseIP("10.0.0.7")},
		&net.IPNet{IP: net.ParseIP("fe80::1")},
		&net.IPNet{IP: net.ParseIP("fd00::7")},
		&net.IPNet{IP: net.ParseIP("fd00::8")},
	}
	for _, tc := range []struct {
		nodeIP, want, missing string
	}{
		{"10.0.0.7", "InternalIP 10.0.0.7, Hostname web-1", ""},
		{"fd00::8,10.0.0.7", "InternalIP fd00::8, InternalIP 10.0.0.7, Hostname web-1", ""},
		{"0.0.0.0", "InternalIP 172.17.0.1, InternalIP 10.0.0.7, Hostname web-1", ""},
		{"::", "InternalIP fd00::7, InternalIP fd00::8, Hostname web-1", ""},
		{"10.9.9.9", "Hostname web-1", "10.9.9.9"},
		{"10.9.9.9,fd00::7", "InternalIP fd00::7, Hostname web-1", "10.9.9.9"},
	} {
		ips, err := ParseNodeIP(tc.nodeIP)
		if err != nil {
			t.Fatal(err)
		}
		out, missing := chosenAddresses("web-1", ips, host)
		var got []string
		for _, a := range out {
			got = append(got, fmt.Sprintf("%s %s", a.Type, a.Address))
		}
		if strings.Join(got, ", ") != tc.want || strings.Join(missing, ",") != tc.missing {
			t.Errorf("--node-ip %s: %q, missing %q; want %q, missing %q", tc.nodeIP, got, missing, tc.want, tc.missing)
		}
	}
}
