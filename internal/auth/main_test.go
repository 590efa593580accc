package auth

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package if a test leaves a TokenStore goroutine
// behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for {
			buf := make([]byte, 1<<20)
			buf = buf[:goruntime.Stack(buf, true)]
			leaked := strings.Contains(string(buf), "auth.(*TokenStore).Run")
			if !leaked {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goroutines left running:\n%s\n", buf)
				code = 1
				break
			}
			time.Sleep(10 * time.Millisecond) // only in TestMain, after the tests
		}
	}
	os.Exit(code)
}
