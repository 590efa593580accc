package cli

import (
	"context"
	"strings"
	"testing"
)

// TestStrayArguments: a word among the flags of a command that takes none
// is refused, not the end of the flags (Go's flag package stops there, so
// the flags after it were silently dropped).
func TestStrayArguments(t *testing.T) {
	for _, args := range [][]string{
		{"agent", "--kubeconfig", "k", "stray", "--node-name", "w10"},
		{"token", "list", "stray"},
		{"version", "stray"},
	} {
		err := commands[args[0]].run(context.Background(), args[1:])
		if err == nil || !strings.Contains(err.Error(), `unexpected arguments ["stray"`) {
			t.Errorf("leasehold %s: %v, want unexpected arguments", strings.Join(args, " "), err)
		}
	}
}
