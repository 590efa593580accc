package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/auth"
)

// TestTokenDeleteDataDir: token delete on a data directory's tokens.json
// removes what it selects; --expired with nothing expired succeeds (a
// clean-up from cron), while an ID that names no token is an error.
func TestTokenDeleteDataDir(t *testing.T) {
	dir := t.TempDir()
	past := time.Now().Add(-time.Hour)
	err := auth.UpdateTokenStore(tokenStorePath(dir), func([]auth.StoredToken) ([]auth.StoredToken, error) {
		return []auth.StoredToken{
			{ID: "aaaaaaaaaaaa", SHA256: strings.Repeat("a", 64), User: "gone", Created: past, Expires: &past},
			{ID: "bbbbbbbbbbbb", SHA256: strings.Repeat("b", 64), User: "kept", Created: past},
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	users := func() []string {
		t.Helper()
		entries, err := auth.ReadTokenStore(tokenStorePath(dir))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.User)
		}
		return out
	}
	for round := range 2 {
		if err := tokenDelete([]string{"--data-dir", dir, "--expired"}); err != nil {
			t.Fatalf("delete --expired, round %d: %v", round, err)
		}
		if got := users(); len(got) != 1 || got[0] != "kept" {
			t.Fatalf("after delete --expired, round %d: %v", round, got)
		}
	}
	if err := tokenDelete([]string{"--data-dir", dir, "cccccccccccc"}); !errors.Is(err, errNoToken) {
		t.Errorf("delete of an ID no token has: %v, want %v", err, errNoToken)
	}
	if err := tokenDelete([]string{"--data-dir", dir, "--user", "kept"}); err != nil || len(users()) != 0 {
		t.Errorf("delete --user kept: %v, left %v", err, users())
	}
}
