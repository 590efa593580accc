package agent

import (
	"fmt"
	"net"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseOSRelease(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"double quoted", "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n", "Debian GNU/Linux 12 (bookworm)"},
		{"single quoted", "PRETTY_NAME='Alpine Linux v3.20'\n", "Alpine Linux v3.20"},
		{"bare", "PRETTY_NAME=Fedora\n", "Fedora"},
		{"escaped quote", `PRETTY_NAME="My \"Linux\""`, `My "Linux"`},
		{"shell escapes", "PRETTY_NAME=\"cost \\$0 \\\\ \\`x\\` \\n\"", "cost $0 \\ `x` \\n"},
		{"indented", "  PRETTY_NAME=\"Arch Linux\"  \n", "Arch Linux"},
		{"missing", "NAME=Linux\n", ""},
		{"empty", "", ""},
		{"lone quote", `PRETTY_NAME="`, `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseOSRelease(tt.content); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzParseOSRelease(f *testing.F) {
	f.Add("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")
	f.Add("PRETTY_NAME='x'")
	f.Add("PRETTY_NAME=")
	f.Fuzz(func(t *testing.T, content string) {
		parseOSRelease(content) // must not panic
	})
}

func TestNodeAddresses(t *testing.T) {
	ipnet := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	internal := func(s string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: s} }
	host := corev1.NodeAddress{Type: corev1.NodeHostName, Address: "web-1"}
	tests := []struct {
		name     string
		hostname string
		addrs    []net.Addr
		want     []corev1.NodeAddress
	}{
		{"none", "web-1", nil, []corev1.NodeAddress{host}},
		{"no hostname", "", []net.Addr{ipnet("10.0.0.1/8")}, []corev1.NodeAddress{internal("10.0.0.1")}},
		{
			"filtered and ordered", "web-1",
			[]net.Addr{
				ipnet("127.0.0.1/8"), ipnet("::1/128"), ipnet("fe80::1/64"), ipnet("169.254.1.1/16"),
				ipnet("2001:db8::7/64"), ipnet("10.0.0.7/24"), &net.IPAddr{IP: net.ParseIP("192.168.1.7")},
				ipnet("10.0.0.7/24"), &net.UnixAddr{Name: "/x"},
			},
			[]corev1.NodeAddress{internal("10.0.0.7"), internal("192.168.1.7"), internal("2001:db8::7"), host},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeAddresses(tt.hostname, tt.addrs); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHostNodeInfo(t *testing.T) {
	info := hostNodeInfo("v1.2.3")
	if info.KubeletVersion != "v1.2.3" || info.KubeProxyVersion != "" || info.OperatingSystem != runtime.GOOS || info.Architecture != runtime.GOARCH {
		t.Errorf("got %+v", info)
	}
	if runtime.GOOS == "linux" && (info.KernelVersion == "" || info.BootID == "") {
		t.Errorf("got kernel %q, boot id %q, want both on Linux", info.KernelVersion, info.BootID)
	}
}
