package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/internal/testbin"
)

// freeAddrs returns n free loopback addresses (HOST:PORT).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		var err error
		if addrs[i], err = testbin.FreeLoopbackAddr(); err != nil {
			t.Fatal(err)
		}
	}
	return addrs
}

// process is a leasehold command a test runs for what it writes, without
// the readiness checks of a server (startServer): its output is kept
// whole, and it is killed when the test ends if it still runs.
type process struct {
	cmd *exec.Cmd
	out syncbuf.Buffer
}

// startProcess runs leasehold with args.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(leaseholdBin, args...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// waitOutput waits until the output holds text.
func (p *process) waitOutput(t *testing.T, text string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() error {
		if !strings.Contains(p.out.String(), text) {
			return fmt.Errorf("leasehold %s has not written %q", p.cmd.Args[1], text)
		}
		return nil
	})
}

// stop sends SIGTERM and returns how the process exited.
func (p *process) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	return p.cmd.Wait()
}
