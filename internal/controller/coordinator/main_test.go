package coordinator

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package if a test leaves a Coordinator goroutine
// behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left running:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func leakedGoroutines() string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:goruntime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "controller/coordinator.(*Coordinator)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond) // only in TestMain, after the tests
	}
}
