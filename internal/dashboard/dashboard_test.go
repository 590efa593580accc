package dashboard

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestFilesComplete checks that every file index.html loads is embedded,
// and that nothing runs or styles inline, which the server's
// Content-Security-Policy would block.
func TestFilesComplete(t *testing.T) {
	files := Files()
	page, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) == 0 {
		t.Fatal("index.html loads nothing")
	}
	for _, m := range refs {
		ref := m[1]
		if strings.HasPrefix(ref, "data:") {
			continue
		}
		if _, err := fs.Stat(files, ref); err != nil {
			t.Errorf("index.html loads %q: %v", ref, err)
		}
	}
	for _, inline := range []string{"<script>", "<style", " style=", " onclick=", " onload=", "javascript:"} {
		if strings.Contains(string(page), inline) {
			t.Errorf("index.html has inline %q", inline)
		}
	}
}
