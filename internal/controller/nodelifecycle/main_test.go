package nodelifecycle

import (
	"os"
	"testing"

	"github.com/leasehold/leasehold/internal/leakcheck"
)

// TestMain fails the package if a test leaves a controller goroutine behind.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m, "nodelifecycle.(*Controller)"))
}
