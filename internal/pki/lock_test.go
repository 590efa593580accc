package pki_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/pki"
)

// TestUseDir: the first user of a directory is alone, a second shares it
// while the first still runs, and once every user has gone the next is
// alone again; a user that outlives the first keeps the others shared.
func TestUseDir(t *testing.T) {
	dir := t.TempDir()
	use := func() (bool, func()) {
		t.Helper()
		shared, release, err := pki.UseDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return shared, release
	}
	shared, first := use()
	if shared {
		t.Error("the first user shares the directory")
	}
	shared, second := use()
	if !shared {
		t.Error("a second user is alone")
	}
	first()
	if shared, third := use(); !shared {
		t.Error("a user beside the second, after the first left, is alone")
	} else {
		third()
	}
	second()
	if shared, last := use(); shared {
		t.Error("after every user left, the next shares the directory")
	} else {
		last()
	}
}
