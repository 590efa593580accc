package auth

import (
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// LoadTokenFile reads a static token file in Kubernetes' --token-auth-file
// format: CSV lines "token,user,uid[,\"group1,group2\"]"; lines starting with
// # are comments. It returns the tokens as a Tokens set. Errors never quote
// a token.
func LoadTokenFile(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	t, err := ParseTokenFile(f)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return t, nil
}

// ParseTokenFile parses the --token-auth-file format from r.
func ParseTokenFile(r io.Reader) (*Tokens, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	t := NewTokens()
	for n := 1; ; n++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				// The csv error may quote the line, which holds a token.
				return nil, fmt.Errorf("record %d: malformed CSV (%v)", pe.StartLine, pe.Err)
			}
			return nil, err
		}
		if len(rec) < 3 {
			return nil, fmt.Errorf("record %d: must have at least 3 columns (token, user name, user uid), found %d", n, len(rec))
		}
		token, name := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
		if token == "" {
			return nil, fmt.Errorf("record %d: empty token", n)
		}
		if name == "" {
			return nil, fmt.Errorf("record %d: empty user name", n)
		}
		u := &User{Name: name, UID: strings.TrimSpace(rec[2])}
		if len(rec) >= 4 && strings.TrimSpace(rec[3]) != "" {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		sum := sha256.Sum256([]byte(token))
		if _, dup := t.users[sum]; dup {
			return nil, fmt.Errorf("record %d: duplicate token", n)
		}
		t.users[sum] = u
	}
}
