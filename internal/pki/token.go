package pki

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

// tokenBytes is the entropy of a bearer token.
const tokenBytes = 32

// NewToken returns a random bearer token: 32 bytes from crypto/rand in
// unpadded URL-safe base64 (43 characters).
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
