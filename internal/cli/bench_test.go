package cli

import (
	"strings"
	"testing"
)

func TestCheckOpenFiles(t *testing.T) {
	for _, tc := range []struct {
		connections int
		openFiles   uint64
		ok          bool
	}{
		{8, 1024, true},
		{960, 1024, true},
		{961, 1024, false},
		{20000, 20000, false},
		{15000, 20000, true},
	} {
		err := checkOpenFiles(tc.connections, tc.openFiles)
		if (err == nil) != tc.ok {
			t.Errorf("checkOpenFiles(%d, %d) = %v, want ok %v", tc.connections, tc.openFiles, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "ulimit -n") {
			t.Errorf("checkOpenFiles(%d, %d): %v does not say what to raise", tc.connections, tc.openFiles, err)
		}
	}
}
