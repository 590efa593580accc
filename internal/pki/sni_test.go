package pki_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

func TestParseSNIFlag(t *testing.T) {
	for _, tt := range []struct {
		in        string
		cert, key string
		names     []string
		err       string
	}{
		{in: "a.crt,a.key", cert: "a.crt", key: "a.key"},
		{in: "a.crt, a.key:API.example.com, *.fleet.example.com", cert: "a.crt", key: "a.key", names: []string{"api.example.com", "*.fleet.example.com"}},
		{in: "a.crt", err: "want CERT,KEY"},
		{in: "a.crt,b.key,c", err: "want CERT,KEY"},
		{in: ",a.key", err: "want CERT,KEY"},
		{in: "a.crt,a.key:bad_name", err: `name "bad_name"`},
		{in: "a.crt,a.key:*", err: `name "*"`},
	} {
		cert, key, names, err := pki.ParseSNIFlag(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSNIFlag(%q) error %v, want one saying %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || cert != tt.cert || key != tt.key || !slices.Equal(names, tt.names) {
			t.Errorf("ParseSNIFlag(%q) = %q, %q, %q, %v", tt.in, cert, key, names, err)
		}
	}
}

// TestSNI: exact names before wildcards, names given with a pair before
// the certificates' own, earlier pairs before later ones.
func TestSNI(t *testing.T) {
	ca := pkitest.Issue(t, "company-root", nil, "ca")
	dir := t.TempDir()
	pair := func(cn string, dnsNames ...string) *pki.Reloading[*tls.Certificate] {
		t.Helper()
		c := pkitest.IssueServer(t, cn, ca, dnsNames...)
		certFile, keyFile := filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
		if err := os.WriteFile(certFile, c.CertPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, c.KeyPEM(t), 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := pki.NewReloading(pki.ParseServingPair, certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sni := pki.SNI{
		{Pair: pair("api", "api.example.com", "*.example.com")},
		{Pair: pair("fleet"), Names: []string{"*.fleet.example.com", "api.example.com"}},
		{Pair: pair("www.example.com")},
		{Pair: pair("later", "api.example.com", "*.fleet.example.com", "other.example.com")},
	}
	for name, want := range map[string]string{
		"api.example.com":     "fleet", // given names first
		"API.example.com.":    "fleet",
		"x.fleet.example.com": "fleet",
		"www.example.com":     "www.example.com", // exact (its common name) before the wildcard
		"db.example.com":      "api",             // the wildcard of its own names
		"other.example.com":   "later",           // exact before the earlier pair's wildcard
		"example.com":         "",
		"a.b.example.com":     "", // a wildcard stands for one label
		"":                    "",
	} {
		got := ""
		if c := sni.Get(name); c != nil {
			got = c.Leaf.Subject.CommonName
		}
		if got != want {
			t.Errorf("Get(%q) = certificate %q, want %q", name, got, want)
		}
	}
}

// FuzzParseSNIFlag: any value is parsed or refused without a panic, and
// what is parsed has both files and names that are host names, or
// wildcards of one, in lower case.
func FuzzParseSNIFlag(f *testing.F) {
	f.Add("a.crt,a.key")
	f.Add("a.crt,a.key:API.example.com,*.x.example.com")
	f.Add("a,b:*.,")
	f.Fuzz(func(t *testing.T, v string) {
		cert, key, names, err := pki.ParseSNIFlag(v)
		if err != nil {
			return
		}
		if cert == "" || key == "" {
			t.Fatalf("%q: files %q, %q", v, cert, key)
		}
		for _, n := range names {
			if n != strings.ToLower(n) || strings.Count(n, "*") > 1 || strings.Contains(n, "*") && !strings.HasPrefix(n, "*.") {
				t.Fatalf("%q: name %q", v, n)
			}
		}
	})
}
