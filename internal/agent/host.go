package agent

import (
	"bufio"
	"net"
	"os"
	"runtime"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// hostNodeInfo describes this machine for status.nodeInfo. What it cannot
// read (other systems than Linux, files only root may read) stays empty.
func hostNodeInfo(version string) corev1.NodeSystemInfo {
	return corev1.NodeSystemInfo{
		MachineID:       readFirst("/etc/machine-id", "/var/lib/dbus/machine-id"),
		SystemUUID:      readFirst("/sys/class/dmi/id/product_uuid"),
		BootID:          readFirst("/proc/sys/kernel/random/boot_id"),
		KernelVersion:   readFirst("/proc/sys/kernel/osrelease"),
		OSImage:         osImage(),
		OperatingSystem: runtime.GOOS,
		Architecture:    runtime.GOARCH,
		KubeletVersion:  version,
		// No kubeProxyVersion: the field is deprecated, and the kubelet
		// leaves it empty since 1.33 (DisableNodeKubeProxyVersion).
	}
}

// readFirst returns the trimmed contents of the first of paths that can be
// read and is not empty, or "".
func readFirst(paths ...string) string {
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			if s := strings.TrimSpace(string(b)); s != "" {
				return s
			}
		}
	}
	return ""
}

func osImage() string {
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if b, err := os.ReadFile(p); err == nil {
			return parseOSRelease(string(b))
		}
	}
	return ""
}

// parseOSRelease returns PRETTY_NAME from the contents of an os-release(5)
// file, or "" if it has none.
func parseOSRelease(content string) string {
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		value, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "PRETTY_NAME=")
		if !ok {
			continue
		}
		if len(value) < 2 || value[0] != value[len(value)-1] {
			return value
		}
		switch value[0] {
		case '\'':
			return value[1 : len(value)-1]
		case '"':
			// Inside double quotes a backslash escapes $ " \ and `, as in sh.
			var b strings.Builder
			inner := value[1 : len(value)-1]
			for i := 0; i < len(inner); i++ {
				if inner[i] == '\\' && i+1 < len(inner) && strings.IndexByte("$\"\\`", inner[i+1]) >= 0 {
					i++
				}
				b.WriteByte(inner[i])
			}
			return b.String()
		}
		return value
	}
	return ""
}

// hostAddresses returns this machine's addresses for status.addresses.
func hostAddresses(hostname string) []corev1.NodeAddress {
	addrs, _ := net.InterfaceAddrs() // on error: only the Hostname address
	return nodeAddresses(hostname, addrs)
}

// nodeAddresses turns interface addresses into node addresses: the usable
// IPv4 addresses, then the IPv6 ones, each as InternalIP and once, then
// hostname as Hostname. Loopback, link-local, multicast and unspecified
// addresses are left out.
func nodeAddresses(hostname string, addrs []net.Addr) []corev1.NodeAddress {
	var v4, v6 []corev1.NodeAddress
	seen := map[string]bool{}
	for _, addr := range addrs {
		var ip net.IP
		switch a := addr.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		default:
			continue
		}
		if ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		s := ip.String()
		if seen[s] {
			continue
		}
		seen[s] = true
		a := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: s}
		if ip.To4() != nil {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	out := append(v4, v6...)
	if hostname != "" {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: hostname})
	}
	return out
}
