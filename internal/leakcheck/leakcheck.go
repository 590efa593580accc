// Package leakcheck lets a package's TestMain fail the test binary when the
// tests leave goroutines of the code under test running. It waits up to
// five seconds for them to finish (real time: it runs after the tests, not
// inside them).
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs the tests and returns the exit code, which is 1 when they
// passed but a goroutine whose stack contains one of markers (for example
// "nodelifecycle.(*Controller)") is still running. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, "pkg.(*T)")) }
func Main(m *testing.M, markers ...string) int {
	code := m.Run()
	if code == 0 {
		if leaked := Leaked(5*time.Second, markers...); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left running:\n%s\n", leaked)
			code = 1
		}
	}
	return code
}

// Leaked returns the stacks of goroutines that contain one of markers and
// are still running after up to wait, or "".
func Leaked(wait time.Duration, markers ...string) string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		// The first stack is this goroutine's own.
		for _, g := range strings.Split(string(buf), "\n\n")[1:] {
			for _, m := range markers {
				if strings.Contains(g, m) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
