package coordinator

import (
	"os"
	"testing"

	"github.com/leasehold/leasehold/internal/leakcheck"
)

// TestMain fails the package if a test leaves a coordinator goroutine behind.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m, "controller/coordinator.(*Coordinator)"))
}
