package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeIP: --node-ip chooses the node's InternalIP as the kubelet's
// flag does: an address of the host is posted alone beside the Hostname,
// one the host does not have is left out with a warning in the agent's
// log, and a loopback address is refused at the start.
func TestNodeIP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newNodeServer(t, filepath.Join(dir, "data"), "", dir)

	out, err := exec.Command(leaseholdBin, "agent", "--kubeconfig", s.kubeconfig, "--node-name", "looped", "--node-ip", "127.0.0.1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--node-ip: 127.0.0.1 is a loopback address") {
		t.Errorf("leasehold agent --node-ip 127.0.0.1: %v\n%s", err, out)
	}

	addresses := func(node string) string {
		return s.kubectl(t, "get", "node", node, "-o", `jsonpath={range .status.addresses[*]}{.type}={.address}{" "}{end}`)
	}
	// 198.51.100.0/24 is for documentation: a host should not have it.
	absent := startAgent(t, s.kubeconfig, dir, "absent", "--node-ip", "198.51.100.77")
	eventually(t, 30*time.Second, func() error {
		if got := strings.TrimSpace(addresses("absent")); got != "Hostname=absent" {
			return fmt.Errorf("node absent: addresses %q, want the Hostname alone", got)
		}
		if log := absent.logTail(); !strings.Contains(log, "the host has no such address") || !strings.Contains(log, "198.51.100.77") {
			return fmt.Errorf("the agent logged no warning about 198.51.100.77:\n%s", log)
		}
		return nil
	})

	ip := usableIP(t)
	if ip == "" {
		t.Log("this machine has no address but loopback and link-local ones: the chosen-address half is left out")
		return
	}
	startAgent(t, s.kubeconfig, dir, "chosen", "--node-ip", ip)
	eventually(t, 30*time.Second, func() error {
		if got, want := strings.TrimSpace(addresses("chosen")), "InternalIP="+ip+" Hostname=chosen"; got != want {
			return fmt.Errorf("node chosen: addresses %q, want %q", got, want)
		}
		return nil
	})
}

// usableIP returns an address of this machine that --node-ip takes, or "".
func usableIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() && !n.IP.IsMulticast() && !n.IP.IsUnspecified() {
			return n.IP.String()
		}
	}
	return ""
}
