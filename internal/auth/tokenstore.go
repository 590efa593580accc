package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/tick"
)

// TokenStoreFile is the token store's file name in the data directory.
const TokenStoreFile = "tokens.json"

// StoredToken is one entry of the token store: never the token itself,
// only its SHA-256 digest, with the identity it authenticates as.
type StoredToken struct {
	// ID names the token for listing and deletion: the first 12 hex
	// digits of the digest.
	ID string `json:"id"`
	// SHA256 is the hex SHA-256 digest of the token.
	SHA256  string    `json:"sha256"`
	User    string    `json:"user"`
	UID     string    `json:"uid,omitempty"`
	Groups  []string  `json:"groups,omitempty"`
	Created time.Time `json:"created"`
	// Description is free text, e.g. what the token is for.
	Description string `json:"description,omitempty"`
	// Expires, when set, is when the token stops authenticating.
	Expires *time.Time `json:"expires,omitempty"`
}

// user is the identity the entry's token authenticates as.
func (e StoredToken) user() *User { return &User{Name: e.User, UID: e.UID, Groups: e.Groups} }

type tokenFile struct {
	Tokens []StoredToken `json:"tokens"`
}

// ReadTokenStore returns the entries of the token store at path; a missing
// file is an empty store.
func ReadTokenStore(path string) ([]StoredToken, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseTokenStore(path, data)
}

// parseTokenStore decodes a token store's JSON document; where names it in
// errors.
func parseTokenStore(where string, data []byte) ([]StoredToken, error) {
	var f tokenFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("token store %s: %w", where, err)
	}
	for i, t := range f.Tokens {
		if sum, err := hex.DecodeString(t.SHA256); err != nil || len(sum) != sha256.Size || t.User == "" {
			return nil, fmt.Errorf("token store %s: entry %d is corrupt", where, i+1)
		}
	}
	return f.Tokens, nil
}

// changeTokenStore applies change to the entries cur and returns the
// store's new JSON document.
func changeTokenStore(cur []StoredToken, change func([]StoredToken) ([]StoredToken, error)) ([]byte, error) {
	next, err := change(cur)
	if err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(tokenFile{Tokens: next}, "", "  ")
	return append(data, '\n'), err
}

// UpdateTokenStore changes the token store at path under an exclusive lock
// (path + ".lock"), so concurrent `leasehold token` runs do not lose each
// other's changes, and writes it atomically with mode 0600.
func UpdateTokenStore(path string, change func([]StoredToken) ([]StoredToken, error)) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	cur, err := ReadTokenStore(path)
	if err != nil {
		return err
	}
	data, err := changeTokenStore(cur, change)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tokens-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// missDefaults fills in the defaults of a token store's miss interval
// (10 ms), clock and logger.
func missDefaults(miss *time.Duration, clk *clock.WithTicker, log **slog.Logger) {
	if *miss <= 0 {
		*miss = 10 * time.Millisecond
	}
	if *clk == nil {
		*clk = clock.RealClock{}
	}
	if *log == nil {
		*log = slog.Default()
	}
}

// NewStoredToken returns the store entry for token, which expires ttl
// after created (0: never).
func NewStoredToken(token string, u *User, created time.Time, ttl time.Duration, description string) StoredToken {
	sum := sha256.Sum256([]byte(token))
	h := hex.EncodeToString(sum[:])
	e := StoredToken{ID: h[:12], SHA256: h, User: u.Name, UID: u.UID, Groups: slices.Clone(u.Groups), Created: created.UTC(), Description: description}
	if ttl > 0 {
		expires := created.Add(ttl).UTC()
		e.Expires = &expires
	}
	return e
}

// tokenSource is where a TokenStore reads its entries: the file at
// TokenStoreConfig.Path, or a test's.
type tokenSource interface {
	// Load returns the entries if their version differs from since ("" at
	// first), with their version, and whether it read them.
	Load(ctx context.Context, since string) (entries []StoredToken, version string, read bool, err error)
	// String names the source in logs.
	String() string
}

// fileTokenSource is the token store file at a path, whose version is its
// modification time and size.
type fileTokenSource string

func (f fileTokenSource) String() string { return string(f) }

func (f fileTokenSource) Load(_ context.Context, since string) ([]StoredToken, string, bool, error) {
	version := "absent"
	fi, err := os.Stat(string(f))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, "", false, err
	default:
		version = fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), fi.Size())
	}
	if version == since {
		return nil, since, false, nil
	}
	entries, err := ReadTokenStore(string(f))
	return entries, version, err == nil, err
}

// TokenStoreConfig configures a TokenStore.
type TokenStoreConfig struct {
	// Path of the store file. Required.
	Path string
	// source, when set, is read instead of the file at Path (tests).
	source tokenSource
	// Interval between checks of the source; default 1 s.
	Interval time.Duration
	// MissInterval is the least time between the extra checks that
	// unknown tokens cause; default 10 ms. See TokenStore.Authenticate.
	MissInterval time.Duration
	// Clock; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// TokenStore authenticates the tokens of a token store file and follows
// changes to it: a token deleted from the file stops working within one
// Interval; a token added works at its first use.
type TokenStore struct {
	cfg    TokenStoreConfig
	tokens *Tokens

	// mu serialises the checks of the source and guards what follows.
	mu sync.Mutex
	// version is the source's when last loaded.
	version string
	loaded  bool
	// loads counts the loads, for a miss to tell whether one came since
	// it looked.
	loads atomic.Uint64
	// lastMiss is when an unknown token last caused a check.
	lastMiss time.Time
}

var _ Authenticator = (*TokenStore)(nil)

// NewTokenStore loads the store at cfg.Path (missing means empty).
func NewTokenStore(cfg TokenStoreConfig) (*TokenStore, error) {
	switch {
	case cfg.source != nil:
	case cfg.Path == "":
		return nil, errors.New("token store: Path is required")
	default:
		cfg.source = fileTokenSource(cfg.Path)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	missDefaults(&cfg.MissInterval, &cfg.Clock, &cfg.Logger)
	s := &TokenStore{cfg: cfg, tokens: NewTokens()}
	s.tokens.clock = cfg.Clock
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Authenticate implements Authenticator. A token the store does not know
// makes it check the source before it refuses the token, so that a token
// `leasehold token create` has just written works at once rather than
// after the next poll. Those checks come at most once every MissInterval,
// whatever the rate of unknown tokens; a token refused between them is
// refused as before, unless the check it waited for found it (requests
// that a client sends at once with a new token). Known tokens never cause
// a check.
func (s *TokenStore) Authenticate(r *http.Request) (*User, bool, error) {
	loads := s.loads.Load()
	u, ok, err := s.tokens.Authenticate(r)
	if !errors.Is(err, ErrInvalidToken) {
		return u, ok, err
	}
	if s.checkOnMiss(r.Context()); s.loads.Load() == loads {
		return u, ok, err // nothing new to look in
	}
	return s.tokens.Authenticate(r)
}

// checkOnMiss reloads the source if no miss has checked it within
// MissInterval, and reports whether the tokens were reloaded.
func (s *TokenStore) checkOnMiss(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	if !s.lastMiss.IsZero() && now.Sub(s.lastMiss) < s.cfg.MissInterval {
		return false
	}
	s.lastMiss = now
	changed, err := s.reload(ctx)
	if err != nil {
		s.cfg.Logger.Error("token store check failed; keeping the previous tokens", "path", s.cfg.source.String(), "err", err)
	}
	return changed
}

// Reload reads the file again if its modification time or size changed.
func (s *TokenStore) Reload() error {
	return s.ReloadContext(context.Background())
}

// ReloadContext is Reload within ctx.
func (s *TokenStore) ReloadContext(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.reload(ctx)
	return err
}

// reload is Reload with s.mu held; it reports whether it read the source.
func (s *TokenStore) reload(ctx context.Context) (bool, error) {
	since := s.version
	if !s.loaded {
		since = ""
	}
	entries, version, read, err := s.cfg.source.Load(ctx, since)
	if err != nil || !read {
		return false, err
	}
	s.tokens.replaceEntries(entries)
	s.loads.Add(1)
	if s.loaded {
		s.cfg.Logger.Info("token store reloaded", "path", s.cfg.source.String(), "tokens", len(entries))
	}
	s.version, s.loaded = version, true
	return true, nil
}

// Run checks the source every Interval until ctx ends. A source that fails
// to load keeps the previous tokens in force and is logged, once for as
// long as it fails the same way (a file that stays unreadable would
// otherwise be logged every second), and again when it loads.
func (s *TokenStore) Run(ctx context.Context) error {
	failing := ""
	tick.Every(ctx, s.cfg.Clock, s.cfg.Interval, func() {
		err := s.ReloadContext(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil && err.Error() != failing:
			failing = err.Error()
			s.cfg.Logger.Error("token store reload failed; keeping the previous tokens", "path", s.cfg.source.String(), "err", err)
		case err == nil && failing != "":
			failing = ""
			s.cfg.Logger.Info("token store read again", "path", s.cfg.source.String())
		}
	})
	return nil
}
