package auth

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// BenchmarkTokenStores is the authentication of one request by a token of
// the data directory's store, and by one kept in etcd, as serve orders
// them without OIDC: the built-in tokens, the data directory's store, then
// etcd's. A token in etcd is first missed by the two before (a digest
// each, and the file store's check of when it last looked at its file).
func BenchmarkTokenStores(b *testing.B) {
	builtin := NewTokens()
	builtin.Add("admin", &User{Name: "admin"})
	path := filepath.Join(b.TempDir(), TokenStoreFile)
	now := time.Now()
	if err := UpdateTokenStore(path, func(cur []StoredToken) ([]StoredToken, error) {
		return append(cur, NewStoredToken("in-the-file", &User{Name: "file"}, now, 0, "")), nil
	}); err != nil {
		b.Fatal(err)
	}
	file, err := NewTokenStore(TokenStoreConfig{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	etcd := &EtcdTokens{tokens: NewTokens(), cfg: EtcdTokensConfig{Clock: clock.RealClock{}, MissInterval: time.Hour}}
	etcd.tokens.Add("in-etcd", &User{Name: "etcd"})
	later := &Later{}
	later.Set(etcd)
	union := Union{builtin, file, later}
	for _, tc := range []struct{ name, token string }{{"file", "in-the-file"}, {"etcd", "in-etcd"}} {
		b.Run(tc.name, func(b *testing.B) {
			r := bearer(tc.token)
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, _ := union.Authenticate(r); !ok {
					b.Fatal("not authenticated")
				}
			}
		})
	}
}
