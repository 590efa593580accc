// Package testbin builds this module's commands for tests that run them as
// processes (the end-to-end and safety suites), and picks the ports those
// processes listen on.
package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Build runs `go build -o out pkg` in the module root; pkg is a path
// relative to it, such as "./cmd/leasehold".
func Build(out, pkg string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, buf.String())
	}
	return nil
}

// ModuleRoot is the directory holding go.mod at or above the working
// directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// FreeLoopbackAddr returns a loopback address whose port nobody listened on
// a moment ago, below the kernel's range of ephemeral ports, and not handed
// out before by this process, for a process the test starts to listen on.
// A port from that range (what a listen on port 0 gets) can be taken,
// between this check and the bind of that process, as the local port of
// any outgoing connection on the machine: an etcd member then failed to
// start with "address already in use". Below the range, only another
// caller of this function could take it, in another test binary at the
// same moment.
func FreeLoopbackAddr() (string, error) {
	low := ephemeralPortsLow()
	for range 1000 {
		port := low - 1 - rand.IntN(portsBelowEphemeral)
		portsMu.Lock()
		taken := portsGiven[port]
		portsGiven[port] = true
		portsMu.Unlock()
		if taken {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		return ln.Addr().String(), ln.Close()
	}
	return "", fmt.Errorf("no free port in the %d below %d", portsBelowEphemeral, low)
}

// portsBelowEphemeral is how many ports below the ephemeral range
// FreeLoopbackAddr picks from.
const portsBelowEphemeral = 10000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralPortsLow is the first port of the kernel's ephemeral range
// (Linux's net.ipv4.ip_local_port_range), or Linux's default.
func ephemeralPortsLow() int {
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > portsBelowEphemeral+1024 {
				low = n
			}
		}
	}
	return low
}
