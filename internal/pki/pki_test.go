package pki

import (
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// t0 is the fake "now" every test starts from.
var t0 = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

func newTestCA(t *testing.T, dir string) *CA {
	t.Helper()
	ca, err := LoadOrCreateCA(dir, testingclock.NewFakePassiveClock(t0))
	if err != nil {
		t.Fatalf("LoadOrCreateCA: %v", err)
	}
	return ca
}

// parsePair parses an issued certificate and key, and fails the test
// unless the key is the certificate's.
func parsePair(t *testing.T, certPEM, keyPEM []byte) *x509.Certificate {
	t.Helper()
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !keyMatches(cert, key) {
		t.Error("key does not match certificate")
	}
	return cert
}

func checkMode(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("%s: mode %o, want 600", filepath.Base(path), got)
	}
}

// checkNoTemp fails if dir holds anything but the named files.
func checkOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("files in %s: got %v, want %v", dir, got, names)
	}
}

func TestLoadOrCreateCA(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) // prepares dir before the call
		now     time.Time
		wantErr string // substring; "" means success
		same    bool   // the CA already in dir must be returned
	}{
		{name: "fresh directory", now: t0},
		{
			name:  "reuses existing",
			setup: func(t *testing.T, dir string) { newTestCA(t, dir) },
			now:   t0.Add(365 * 24 * time.Hour),
			same:  true,
		},
		{
			name:    "certificate without key",
			setup:   func(t *testing.T, dir string) { newTestCA(t, dir); os.Remove(filepath.Join(dir, CAKeyFile)) },
			now:     t0,
			wantErr: "no such file",
		},
		{
			name:    "key without certificate",
			setup:   func(t *testing.T, dir string) { newTestCA(t, dir); os.Remove(filepath.Join(dir, CACertFile)) },
			now:     t0,
			wantErr: "no such file",
		},
		{
			name: "damaged certificate",
			setup: func(t *testing.T, dir string) {
				newTestCA(t, dir)
				os.WriteFile(filepath.Join(dir, CACertFile), []byte("garbage"), 0o600)
			},
			now:     t0,
			wantErr: "no CERTIFICATE",
		},
		{
			name: "damaged key",
			setup: func(t *testing.T, dir string) {
				newTestCA(t, dir)
				os.WriteFile(filepath.Join(dir, CAKeyFile), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
			},
			now:     t0,
			wantErr: "PKCS#8",
		},
		{
			name: "key of another CA",
			setup: func(t *testing.T, dir string) {
				newTestCA(t, dir)
				other := t.TempDir()
				newTestCA(t, other)
				key, _ := os.ReadFile(filepath.Join(other, CAKeyFile))
				os.WriteFile(filepath.Join(dir, CAKeyFile), key, 0o600)
			},
			now:     t0,
			wantErr: "does not hold the key",
		},
		{
			name: "not a CA",
			setup: func(t *testing.T, dir string) {
				ca := newTestCA(t, dir)
				if _, err := ca.LoadOrIssueServing(dir, nil, testingclock.NewFakePassiveClock(t0)); err != nil {
					t.Fatal(err)
				}
				os.Rename(filepath.Join(dir, ServingCertFile), filepath.Join(dir, CACertFile))
				os.Rename(filepath.Join(dir, ServingKeyFile), filepath.Join(dir, CAKeyFile))
			},
			now:     t0,
			wantErr: "not a CA",
		},
		{
			name:    "expired",
			setup:   func(t *testing.T, dir string) { newTestCA(t, dir) },
			now:     t0.Add(caValidity + time.Second),
			wantErr: "not now",
		},
		{
			name:    "not yet valid",
			setup:   func(t *testing.T, dir string) { newTestCA(t, dir) },
			now:     t0.Add(-backdate - time.Second),
			wantErr: "not now",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			var before []byte
			if tc.setup != nil {
				tc.setup(t, dir)
				before, _ = os.ReadFile(filepath.Join(dir, CACertFile))
			}
			ca, err := LoadOrCreateCA(dir, testingclock.NewFakePassiveClock(tc.now))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				if after, _ := os.ReadFile(filepath.Join(dir, CACertFile)); string(after) != string(before) {
					t.Errorf("a failed load changed %s", CACertFile)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			if !ca.Cert.IsCA {
				t.Errorf("got IsCA false, want true")
			}
			if !keyMatches(ca.Cert, ca.Key) {
				t.Errorf("key does not match certificate")
			}
			onDisk, _ := os.ReadFile(filepath.Join(dir, CACertFile))
			if string(ca.CertPEM) != string(onDisk) {
				t.Errorf("CertPEM differs from %s", CACertFile)
			}
			if tc.same && string(before) != string(onDisk) {
				t.Errorf("existing CA was replaced")
			}
			if !ca.Cert.NotBefore.Equal(t0.Add(-backdate)) && !tc.same {
				t.Errorf("NotBefore %s, want %s", ca.Cert.NotBefore, t0.Add(-backdate))
			}
			if got, want := ca.Cert.NotAfter.Sub(ca.Cert.NotBefore), caValidity+backdate; got != want {
				t.Errorf("validity %s, want %s", got, want)
			}
			checkMode(t, filepath.Join(dir, CACertFile))
			checkMode(t, filepath.Join(dir, CAKeyFile))
			checkOnly(t, dir, CACertFile, CAKeyFile)
			st, _ := os.Stat(dir)
			if st.Mode().Perm() != 0o700 {
				t.Errorf("data dir mode %o, want 700", st.Mode().Perm())
			}
		})
	}
}

func TestLoadOrIssueServing(t *testing.T) {
	tests := []struct {
		name      string
		first     []string  // hosts of a first call at t0; nil means no first call
		damage    string    // a file to overwrite with garbage after the first call
		otherCA   bool      // the first call is made by another CA
		hosts     []string  // hosts of the call under test
		now       time.Time // time of the call under test
		reissued  bool
		wantDNS   []string
		wantIPs   []string
		wantError string
	}{
		{
			name:    "fresh",
			hosts:   []string{"127.0.0.1"},
			now:     t0,
			wantDNS: []string{"localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:    "extra names normalized",
			hosts:   []string{"[::1]", "Leasehold.Example.COM.", "10.0.0.5", "0.0.0.0", "", "*.svc.example"},
			now:     t0,
			wantDNS: []string{"*.svc.example", "leasehold.example.com", "localhost"}, wantIPs: []string{"10.0.0.5", "127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:    "same hosts reused",
			first:   []string{"example.org"},
			hosts:   []string{"example.org"},
			now:     t0.Add(300 * 24 * time.Hour),
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
		},
		{
			name:    "subset of hosts reused",
			first:   []string{"example.org", "192.0.2.1"},
			hosts:   []string{"192.0.2.1"},
			now:     t0,
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "192.0.2.1", "::1"},
		},
		{
			name:    "new host reissued",
			first:   []string{"example.org"},
			hosts:   []string{"example.net"},
			now:     t0,
			wantDNS: []string{"example.net", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:    "new IP reissued",
			first:   []string{"127.0.0.1"},
			hosts:   []string{"192.0.2.7"},
			now:     t0,
			wantDNS: []string{"localhost"}, wantIPs: []string{"127.0.0.1", "192.0.2.7", "::1"},
			reissued: true,
		},
		{
			name:    "just outside renewal window reused",
			first:   []string{"example.org"},
			hosts:   []string{"example.org"},
			now:     t0.Add(servingValidity - servingRenewBefore),
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
		},
		{
			name:    "inside renewal window reissued",
			first:   []string{"example.org"},
			hosts:   []string{"example.org"},
			now:     t0.Add(servingValidity - servingRenewBefore + time.Second),
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:    "expired reissued",
			first:   []string{"example.org"},
			hosts:   []string{"example.org"},
			now:     t0.Add(2 * servingValidity),
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:    "signed by another CA reissued",
			first:   []string{"example.org"},
			otherCA: true,
			hosts:   []string{"example.org"},
			now:     t0,
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:    "damaged key reissued",
			first:   []string{"example.org"},
			damage:  ServingKeyFile,
			hosts:   []string{"example.org"},
			now:     t0,
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:    "damaged certificate reissued",
			first:   []string{"example.org"},
			damage:  ServingCertFile,
			hosts:   []string{"example.org"},
			now:     t0,
			wantDNS: []string{"example.org", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
			reissued: true,
		},
		{
			name:      "invalid host",
			hosts:     []string{"not a host"},
			now:       t0,
			wantError: "not a host",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ca := newTestCA(t, dir)
			var firstRaw []byte
			if tc.first != nil {
				issuer := ca
				if tc.otherCA {
					issuer = newTestCA(t, t.TempDir())
				}
				c, err := issuer.LoadOrIssueServing(dir, tc.first, testingclock.NewFakePassiveClock(t0))
				if err != nil {
					t.Fatalf("first call: %v", err)
				}
				firstRaw = c.Leaf.Raw
				if tc.damage != "" {
					os.WriteFile(filepath.Join(dir, tc.damage), []byte("garbage"), 0o600)
				}
			}
			clk := testingclock.NewFakePassiveClock(tc.now)
			c, err := ca.LoadOrIssueServing(dir, tc.hosts, clk)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			leaf := c.Leaf
			if got := string(leaf.Raw) != string(firstRaw); got != tc.reissued {
				t.Errorf("reissued %v, want %v", got, tc.reissued)
			}
			if !slices.Equal(leaf.DNSNames, tc.wantDNS) {
				t.Errorf("DNS SANs %v, want %v", leaf.DNSNames, tc.wantDNS)
			}
			var ips []string
			for _, ip := range leaf.IPAddresses {
				ips = append(ips, ip.String())
			}
			slices.Sort(ips)
			if !slices.Equal(ips, tc.wantIPs) {
				t.Errorf("IP SANs %v, want %v", ips, tc.wantIPs)
			}
			if err := ca.verify(leaf, x509.ExtKeyUsageServerAuth, clk); err != nil {
				t.Errorf("does not verify against the CA: %v", err)
			}
			for _, h := range tc.hosts {
				h = strings.Trim(h, "[]")
				if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() || strings.HasPrefix(h, "*") {
					continue
				}
				if err := leaf.VerifyHostname(strings.TrimSuffix(h, ".")); err != nil {
					t.Errorf("VerifyHostname(%q): %v", h, err)
				}
			}
			// What was returned is what is on disk, and a second call reuses it.
			again, err := ca.LoadOrIssueServing(dir, tc.hosts, clk)
			if err != nil {
				t.Fatal(err)
			}
			if string(again.Leaf.Raw) != string(leaf.Raw) {
				t.Errorf("second call issued again")
			}
			checkMode(t, filepath.Join(dir, ServingCertFile))
			checkMode(t, filepath.Join(dir, ServingKeyFile))
			checkOnly(t, dir, CACertFile, CAKeyFile, ServingCertFile, ServingKeyFile)
		})
	}
}

func TestIssueClient(t *testing.T) {
	caDir := t.TempDir()
	ca := newTestCA(t, caDir)
	tests := []struct {
		name         string
		user         string
		groups       []string
		validity     time.Duration
		now          time.Time
		wantNotAfter time.Time
		wantErr      string
	}{
		{name: "admin", user: "admin", groups: []string{"system:masters"}, validity: time.Hour, now: t0, wantNotAfter: t0.Add(time.Hour)},
		{name: "no groups", user: "alice", now: t0.Add(time.Hour), validity: 24 * time.Hour, wantNotAfter: t0.Add(25 * time.Hour)},
		{name: "several groups", user: "system:node:n1", groups: []string{"system:nodes", "fleet"}, validity: time.Minute, now: t0, wantNotAfter: t0.Add(time.Minute)},
		{name: "default validity", user: "bob", now: t0, wantNotAfter: t0.Add(defaultClientValidity)},
		{name: "capped at CA expiry", user: "carol", validity: 20 * caValidity, now: t0, wantNotAfter: t0.Add(caValidity)},
		{name: "empty user", user: "", now: t0, wantErr: "user name is empty"},
		{name: "empty group", user: "dave", groups: []string{"a", ""}, now: t0, wantErr: "empty group"},
		{name: "negative validity", user: "erin", validity: -time.Second, now: t0, wantErr: "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakePassiveClock(tc.now)
			certPEM, keyPEM, err := ca.IssueClient(tc.user, "", tc.groups, tc.validity, clk)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			cert := parsePair(t, certPEM, keyPEM)
			if cert.Subject.CommonName != tc.user {
				t.Errorf("CN %q, want %q", cert.Subject.CommonName, tc.user)
			}
			// DER sorts the values of a SET, so compare the groups as a set.
			wantO := slices.Sorted(slices.Values(tc.groups))
			if !slices.Equal(cert.Subject.Organization, wantO) {
				t.Errorf("O %q, want %q", cert.Subject.Organization, wantO)
			}
			if want := tc.now.Add(-backdate); !cert.NotBefore.Equal(want) {
				t.Errorf("NotBefore %s, want %s", cert.NotBefore, want)
			}
			if !cert.NotAfter.Equal(tc.wantNotAfter) {
				t.Errorf("NotAfter %s, want %s", cert.NotAfter, tc.wantNotAfter)
			}
			if err := ca.verify(cert, x509.ExtKeyUsageClientAuth, clk); err != nil {
				t.Errorf("does not verify as a client certificate: %v", err)
			}
			if err := ca.verify(cert, x509.ExtKeyUsageServerAuth, clk); err == nil {
				t.Errorf("verifies as a serving certificate")
			}
			after := testingclock.NewFakePassiveClock(tc.wantNotAfter.Add(time.Second))
			if err := ca.verify(cert, x509.ExtKeyUsageClientAuth, after); err == nil {
				t.Errorf("still verifies after NotAfter")
			}
		})
	}
	checkOnly(t, caDir, CACertFile, CAKeyFile)
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 43 {
			t.Errorf("token %q has length %d, want 43", tok, len(tok))
		}
		if strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Errorf("token %q is not URL-safe", tok)
		}
		if seen[tok] {
			t.Errorf("token %q repeated", tok)
		}
		seen[tok] = true
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, content := range []string{"one", "two, longer", ""} {
		if err := WriteFileAtomic(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if string(got) != content {
			t.Errorf("got %q, want %q", got, content)
		}
		checkMode(t, path)
		checkOnly(t, dir, "f")
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "f"), nil, 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write into a missing directory: got %v, want not-exist", err)
	}
}
