package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/pki"
)

func bearer(token string) *http.Request {
	r := httptest.NewRequest("GET", "/api", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func TestParseBearer(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"  Bearer   abc  ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer a b", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			got, ok := parseBearer(tt.header)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseBearer(%q) = %q, %v; want %q, %v", tt.header, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseTokenFile(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		token   string
		want    *User
		wantErr string
	}{
		{"three columns", "t1,alice,uid-1\n", "t1", &User{Name: "alice", UID: "uid-1"}, ""},
		{"groups", "t2,bob,uid-2,\"devs,ops\"\n", "t2", &User{Name: "bob", UID: "uid-2", Groups: []string{"devs", "ops"}}, ""},
		{"comment and blank lines", "# tokens\n\nt3,carol,\n", "t3", &User{Name: "carol"}, ""},
		{"too few columns", "t4,dave\n", "", nil, "at least 3 columns"},
		{"empty token", ",eve,uid\n", "", nil, "empty token"},
		{"duplicate", "t5,a,1\nt5,b,2\n", "", nil, "duplicate token"},
		{"malformed quotes do not echo the line", "secret-token,\"alice,1\n", "", nil, "malformed CSV"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			toks, err := ParseTokenFile(strings.NewReader(tt.file))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secret-token") {
					t.Errorf("error %q quotes a token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			u, ok, err := toks.Authenticate(bearer(tt.token))
			if !ok || err != nil || u.Name != tt.want.Name || u.UID != tt.want.UID || !slices.Equal(u.Groups, tt.want.Groups) {
				t.Errorf("got %+v, %v, %v; want %+v", u, ok, err, tt.want)
			}
		})
	}
}

func TestUnionAndAnonymous(t *testing.T) {
	toks := NewTokens()
	toks.Add("good", &User{Name: "alice"})
	later, unset := &Later{}, &Later{}
	more := NewTokens()
	more.Add("later", &User{Name: "bob"})
	later.Set(more)
	tests := []struct {
		name      string
		a         Authenticator
		token     string
		wantUser  string
		wantOK    bool
		wantError bool
	}{
		{"known token gets system:authenticated", Union{toks}, "good", "alice", true, false},
		{"unknown token", Union{toks}, "bad", "", false, true},
		{"no token", Union{toks}, "", "", false, false},
		{"no token, anonymous enabled", Union{toks, Anonymous{}}, "", UserAnonymous, true, false},
		{"bad token is never anonymous", Union{toks, Anonymous{}}, "bad", "", false, true},
		{"a Later once set", Union{toks, later, Anonymous{}}, "later", "bob", true, false},
		{"a Later not set recognises nothing", Union{unset}, "later", "", false, false},
		{"a Later not set beside another", Union{toks, unset}, "later", "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, ok, err := tt.a.Authenticate(bearer(tt.token))
			if ok != tt.wantOK || (err != nil) != tt.wantError {
				t.Fatalf("got %+v, %v, %v; want ok %v, error %v", u, ok, err, tt.wantOK, tt.wantError)
			}
			if ok && u.Name != tt.wantUser {
				t.Errorf("user %q, want %q", u.Name, tt.wantUser)
			}
			if ok && u.Name != UserAnonymous && !u.InGroup(GroupAuthenticated) {
				t.Errorf("groups %v lack %s", u.Groups, GroupAuthenticated)
			}
			if ok && u.Name == UserAnonymous && (u.InGroup(GroupAuthenticated) || !u.InGroup(GroupUnauthenticated)) {
				t.Errorf("anonymous groups %v", u.Groups)
			}
		})
	}
	if errors.Is(ErrInvalidToken, nil) || strings.Contains(ErrInvalidToken.Error(), "bad") {
		t.Error("the invalid-token error must not quote the token")
	}
}

// TestTokenStoreFollowsFile creates and revokes tokens in the store file
// while a TokenStore runs; time is the synctest bubble's, so the polls
// happen without waiting.
func TestTokenStoreFollowsFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), TokenStoreFile)
		ts, err := NewTokenStore(TokenStoreConfig{Path: path, Clock: clock.RealClock{}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { ts.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		if _, ok, _ := ts.Authenticate(bearer("tok-alice")); ok {
			t.Fatal("empty store authenticated a token")
		}
		add := func(token string, u *User) {
			t.Helper()
			if err := UpdateTokenStore(path, func(cur []StoredToken) ([]StoredToken, error) {
				return append(cur, NewStoredToken(token, u, time.Now(), 0, "")), nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		add("tok-alice", &User{Name: "alice", Groups: []string{"devs"}})
		add("tok-web-1", NodeUser("web-1"))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "tok-alice") {
			t.Fatal("the store file holds a token in clear")
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Errorf("store file mode %v, want 0600", fi.Mode().Perm())
		}
		time.Sleep(1500 * time.Millisecond) // virtual: one poll
		synctest.Wait()
		if u, ok, _ := ts.Authenticate(bearer("tok-alice")); !ok || u.Name != "alice" {
			t.Errorf("after a poll: alice's token gives %+v, %v", u, ok)
		}
		u, _, _ := ts.Authenticate(bearer("tok-web-1"))
		if n, ok := NodeName(u); !ok || n != "web-1" {
			t.Errorf("node token authenticated as %+v", u)
		}
		if err := UpdateTokenStore(path, func(cur []StoredToken) ([]StoredToken, error) {
			return slices.DeleteFunc(cur, func(e StoredToken) bool { return e.User == "alice" }), nil
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if _, ok, err := ts.Authenticate(bearer("tok-alice")); ok || !errors.Is(err, ErrInvalidToken) {
			t.Errorf("revoked token: got ok %v, err %v", ok, err)
		}
		if _, ok, _ := ts.Authenticate(bearer("tok-web-1")); !ok {
			t.Error("the remaining token stopped working")
		}
	})
}

// TestTokenStoreChecksOnMiss: a token added to the file works at its first
// use, with no poll between; unknown tokens check the file at most once a
// MissInterval; known tokens never do, so a revocation waits for a poll.
func TestTokenStoreChecksOnMiss(t *testing.T) {
	path := filepath.Join(t.TempDir(), TokenStoreFile)
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	ts, err := NewTokenStore(TokenStoreConfig{Path: path, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	write := func(change func([]StoredToken) []StoredToken) {
		t.Helper()
		if err := UpdateTokenStore(path, func(cur []StoredToken) ([]StoredToken, error) { return change(cur), nil }); err != nil {
			t.Fatal(err)
		}
	}
	add := func(token, user string) {
		write(func(cur []StoredToken) []StoredToken {
			return append(cur, NewStoredToken(token, &User{Name: user}, clk.Now(), 0, ""))
		})
	}
	check := func(token string, want bool) {
		t.Helper()
		u, ok, err := ts.Authenticate(bearer(token))
		if ok != want || (!ok && !errors.Is(err, ErrInvalidToken)) {
			t.Fatalf("%s at %v: ok %v, err %v; want ok %v", token, clk.Now().Format(time.StampMilli), ok, err, want)
		}
		if ok && u.Name != strings.TrimPrefix(token, "tok-") {
			t.Fatalf("%s authenticated as %q", token, u.Name)
		}
	}

	add("tok-alice", "alice")
	check("tok-alice", true) // the first miss reads the file
	add("tok-bob", "bob")
	check("tok-bob", false) // within 10 ms of that check
	clk.Step(9 * time.Millisecond)
	check("tok-bob", false)
	clk.Step(time.Millisecond)
	check("tok-bob", true)

	clk.Step(time.Second)
	check("tok-nobody", false) // checks, and finds nothing new
	add("tok-carol", "carol")
	for range 100 {
		check("tok-nobody", false)
	}
	check("tok-carol", false) // the misses above did not check again
	clk.Step(10 * time.Millisecond)
	check("tok-carol", true)

	write(func(cur []StoredToken) []StoredToken {
		return slices.DeleteFunc(cur, func(e StoredToken) bool { return e.User == "alice" })
	})
	clk.Step(time.Second)
	check("tok-alice", true) // a known token checks nothing
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	check("tok-alice", false)
	check("tok-bob", true)
}

func TestClientCerts(t *testing.T) {
	clk := clock.RealClock{}
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.LoadOrCreateCA(filepath.Join(dir, "other"), clk)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cc := NewClientCerts(func() *x509.CertPool { return pool }, clk)
	issueUID := func(ca *pki.CA, user, uid string, groups []string) *x509.Certificate {
		certPEM, _, err := ca.IssueClient(user, uid, groups, time.Hour, clk)
		if err != nil {
			t.Fatal(err)
		}
		c, err := pki.ParseCertPEM(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	issue := func(ca *pki.CA, user string, groups []string) *x509.Certificate {
		return issueUID(ca, user, "", groups)
	}
	r := httptest.NewRequest("GET", "/api", nil)
	carol := issue(ca, "carol", []string{"devs", "ops"})
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{carol}}
	u, ok, err := cc.Authenticate(r)
	if !ok || err != nil || u.Name != "carol" || !slices.Equal(slices.Sorted(slices.Values(u.Groups)), []string{"devs", "ops"}) || u.UID != "" {
		t.Errorf("got %+v, %v, %v; want carol in devs and ops, without a uid", u, ok, err)
	}
	// The credential ID is the certificate's SHA-256, as Kubernetes gives it.
	sum := sha256.Sum256(carol.Raw)
	if got := u.Extra["authentication.kubernetes.io/credential-id"]; !slices.Equal(got, []string{"X509SHA256=" + hex.EncodeToString(sum[:])}) {
		t.Errorf("credential ID %q", got)
	}
	// The subject's UID attribute is the uid.
	r.TLS.PeerCertificates = []*x509.Certificate{issueUID(ca, "dave", "dave-uid", nil)}
	if u, ok, err := cc.Authenticate(r); !ok || err != nil || u.Name != "dave" || u.UID != "dave-uid" {
		t.Errorf("a certificate with a UID: got %+v, %v, %v; want dave with uid dave-uid", u, ok, err)
	}
	r.TLS.PeerCertificates = []*x509.Certificate{issue(other, "mallory", nil)}
	if _, ok, err := cc.Authenticate(r); ok || err == nil {
		t.Errorf("a certificate of another CA: got ok %v, err %v", ok, err)
	}
	// A refused certificate is credentials refused, never an anonymous
	// request: 401, as kube-apiserver answers it with anonymous requests
	// enabled.
	if u, ok, err := (Union{cc, Anonymous{}}).Authenticate(r); ok || err == nil {
		t.Errorf("a certificate of another CA, anonymous requests enabled: got %+v, ok %v, err %v; want the error", u, ok, err)
	}
	if _, ok, err := cc.Authenticate(httptest.NewRequest("GET", "/", nil)); ok || err != nil {
		t.Errorf("no certificate: got ok %v, err %v; want neither", ok, err)
	}
}

func TestImpersonation(t *testing.T) {
	tests := []struct {
		name       string
		headers    map[string][]string
		wantNil    bool
		wantErr    bool
		wantChecks []string // resource/name of each check
		wantGroups []string
	}{
		{"none", nil, true, false, nil, nil},
		{"user", map[string][]string{"Impersonate-User": {"alice"}}, false, false, []string{"users/alice"}, []string{GroupAuthenticated}},
		{"user and groups", map[string][]string{"Impersonate-User": {"alice"}, "Impersonate-Group": {"devs", "ops"}}, false, false,
			[]string{"users/alice", "groups/devs", "groups/ops"}, []string{"devs", "ops", GroupAuthenticated}},
		{"service account", map[string][]string{"Impersonate-User": {"system:serviceaccount:team-a:job"}}, false, false,
			[]string{"serviceaccounts/job"}, []string{GroupServiceAccounts, GroupServiceAccounts + ":team-a", GroupAuthenticated}},
		{"uid and extra", map[string][]string{"Impersonate-User": {"alice"}, "Impersonate-Uid": {"u-1"}, "Impersonate-Extra-Scopes": {"view"}}, false, false,
			[]string{"users/alice", "uids/u-1", "userextras/view"}, []string{GroupAuthenticated}},
		{"groups without a user", map[string][]string{"Impersonate-Group": {"system:masters"}}, false, true, nil, nil},
		// As Kubernetes: not made authenticated when unauthenticated.
		{"a user in system:unauthenticated", map[string][]string{"Impersonate-User": {"carol"}, "Impersonate-Group": {GroupUnauthenticated}}, false, false,
			[]string{"users/carol", "groups/" + GroupUnauthenticated}, []string{GroupUnauthenticated}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				for _, x := range v {
					h.Add(k, x)
				}
			}
			imp, err := ParseImpersonation(h)
			if (err != nil) != tt.wantErr || (imp == nil) != (tt.wantNil || tt.wantErr) {
				t.Fatalf("got %+v, %v", imp, err)
			}
			if imp == nil {
				return
			}
			var checks []string
			for _, c := range imp.ImpersonationChecks() {
				if c.Verb != "impersonate" {
					t.Errorf("check verb %q", c.Verb)
				}
				checks = append(checks, c.Resource+"/"+c.Name)
			}
			slices.Sort(checks)
			want := slices.Sorted(slices.Values(tt.wantChecks))
			if !slices.Equal(checks, want) {
				t.Errorf("checks %v, want %v", checks, want)
			}
			if u := imp.ImpersonatedUser(); !slices.Equal(u.Groups, tt.wantGroups) {
				t.Errorf("groups %v, want %v", u.Groups, tt.wantGroups)
			}
		})
	}
}

// TestTokenStoreExpiry: a token made with a TTL authenticates until its
// expiry, by the store's clock, and is refused after it as expired; one
// without keeps working.
func TestTokenStoreExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), TokenStoreFile)
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	if err := UpdateTokenStore(path, func(cur []StoredToken) ([]StoredToken, error) {
		return append(cur,
			NewStoredToken("tok-brief", &User{Name: "brief"}, clk.Now(), time.Hour, ""),
			NewStoredToken("tok-lasting", &User{Name: "lasting"}, clk.Now(), 0, "")), nil
	}); err != nil {
		t.Fatal(err)
	}
	entries, err := ReadTokenStore(path)
	if err != nil || len(entries) != 2 || entries[0].Expires == nil || !entries[0].Expires.Equal(clk.Now().Add(time.Hour)) || entries[1].Expires != nil {
		t.Fatalf("stored %+v, %v", entries, err)
	}
	ts, err := NewTokenStore(TokenStoreConfig{Path: path, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	check := func(token string, want bool, wantErr error) {
		t.Helper()
		_, ok, err := ts.Authenticate(bearer(token))
		if ok != want || !errors.Is(err, wantErr) {
			t.Fatalf("%s at %v: ok %v, err %v; want %v, %v", token, clk.Now(), ok, err, want, wantErr)
		}
	}
	check("tok-brief", true, nil)
	clk.Step(time.Hour - time.Nanosecond)
	check("tok-brief", true, nil)
	clk.Step(time.Nanosecond)
	check("tok-brief", false, ErrTokenExpired)
	check("tok-lasting", true, nil)
}

// TestClientCertExpiry: each request's client certificate has its time left
// observed, whether it verifies or not, as kube-apiserver observes it for
// the alert on certificates about to lapse.
func TestClientCertExpiry(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	ca, err := pki.LoadOrCreateCA(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	certPEM, _, err := ca.IssueClient("carol", "", nil, time.Hour, clk)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	cc := NewClientCerts(func() *x509.CertPool { return pool }, clk)
	r := httptest.NewRequest("GET", "/api", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	observed := func() (count uint64, sum float64) {
		var m dto.Metric
		if err := clientCertExpiry.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	count0, sum0 := observed()
	if _, ok, err := cc.Authenticate(r); !ok || err != nil {
		t.Fatalf("a valid certificate: ok %v, err %v", ok, err)
	}
	clk.Step(2 * time.Hour)
	if _, ok, _ := cc.Authenticate(r); ok {
		t.Fatal("an expired certificate was accepted")
	}
	left := cert.NotAfter.Sub(clk.Now().Add(-2 * time.Hour)) // at the first request
	count, sum := observed()
	if want := left.Seconds() + (left - 2*time.Hour).Seconds(); count != count0+2 || math.Abs(sum-sum0-want) > 1e-6 {
		t.Errorf("observed %d more certificates, %v s left in all; want 2, %v s (%v left, then %v)", count-count0, sum-sum0, want, left, left-2*time.Hour)
	}
}
