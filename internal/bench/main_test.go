package bench

import (
	"os"
	"testing"

	"github.com/leasehold/leasehold/internal/leakcheck"
)

// TestMain fails the package if a test leaves one of its goroutines behind.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m, "internal/bench."))
}
