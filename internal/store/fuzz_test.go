package store

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeContinue feeds arbitrary continue tokens to the decoder: it
// never panics, rejects with ErrInvalidContinue, and what it accepts is a
// token encodeContinue could have written (positive revision, no ".." in the
// start key) that survives another round trip unchanged.
func FuzzDecodeContinue(f *testing.F) {
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, s := range []string{
		encodeContinue(5, "default/a\x00"),
		encodeContinue(1<<62, ""),
		encodeContinue(7, "kube-node-lease/node-1\x00"),
		"",
		"not-a-token",
		"!!!",
		"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MH0",
		raw(`{"v":"meta.k8s.io/v1","rv":3,"start":"../secrets/x"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":-3,"start":"a"}`),
		raw(`{"v":"meta.k8s.io/v2","rv":3,"start":"a"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":3.5,"start":"a"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":"3","start":"a"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":3,"start":1}`),
		raw(`{"v":"meta.k8s.io/v1","rv":3,"start":"a","extra":[1,2,3]}`),
		raw(`null`),
		raw(`[]`),
		raw(`{"v":"meta.k8s.io/v1","rv":99999999999999999999,"start":"a"}`),
		base64.StdEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":3,"start":"a"}`)),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := decodeContinue(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidContinue) {
				t.Fatalf("decodeContinue(%q): error %v is not ErrInvalidContinue", s, err)
			}
			return
		}
		if tok.ResourceVersion <= 0 || tok.APIVersion != "meta.k8s.io/v1" || strings.Contains(tok.Start, "..") {
			t.Fatalf("decodeContinue(%q) accepted %+v", s, tok)
		}
		again, err := decodeContinue(encodeContinue(tok.ResourceVersion, tok.Start))
		if err != nil || again != tok {
			t.Fatalf("round trip of %+v: got %+v, %v", tok, again, err)
		}
	})
}
