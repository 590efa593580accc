package pki

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
)

func TestParseTLSVersion(t *testing.T) {
	for name, want := range map[string]uint16{"": tls.VersionTLS12, "VersionTLS12": tls.VersionTLS12, "VersionTLS13": tls.VersionTLS13} {
		if got, err := ParseTLSVersion(name); err != nil || got != want {
			t.Errorf("ParseTLSVersion(%q) = %#x, %v; want %#x", name, got, err, want)
		}
	}
	for name, msg := range map[string]string{"VersionTLS10": "TLS 1.2 or later", "VersionTLS11": "TLS 1.2 or later", "1.3": "not a TLS version", "versiontls13": "not a TLS version"} {
		if _, err := ParseTLSVersion(name); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseTLSVersion(%q) error %v, want one saying %q", name, err, msg)
		}
	}
}

func TestParseCipherSuites(t *testing.T) {
	tests := []struct {
		list     string
		min      uint16
		want     []uint16
		insecure []string
		err      string
	}{
		{"", tls.VersionTLS12, nil, nil, ""},
		{" , ", tls.VersionTLS12, nil, nil, ""},
		{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}, nil, ""},
		{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", tls.VersionTLS12,
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}, nil, ""},
		{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_RC4_128_SHA", tls.VersionTLS12,
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_RC4_128_SHA}, []string{"TLS_RSA_WITH_RC4_128_SHA"}, ""},
		{"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", tls.VersionTLS12, nil, nil, "HTTP/2 over TLS 1.2 needs"},
		{"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", tls.VersionTLS13, []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}, nil, ""},
		{"TLS_AES_128_GCM_SHA256", tls.VersionTLS13, []uint16{tls.TLS_AES_128_GCM_SHA256}, nil, ""},
		{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,ECDHE-ECDSA-AES128-GCM-SHA256", tls.VersionTLS12, nil, nil, `"ECDHE-ECDSA-AES128-GCM-SHA256" is not a cipher suite`},
	}
	for _, tt := range tests {
		got, insecure, err := ParseCipherSuites(tt.list, tt.min)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseCipherSuites(%q) error %v, want one saying %q", tt.list, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) || !slices.Equal(insecure, tt.insecure) {
			t.Errorf("ParseCipherSuites(%q) = %v, %v, %v; want %v, %v", tt.list, got, insecure, err, tt.want, tt.insecure)
		}
	}
}

// FuzzParseCipherSuites: any list is parsed or refused without a panic,
// and a list taken for TLS 1.2 always leaves HTTP/2 a suite it needs.
func FuzzParseCipherSuites(f *testing.F) {
	f.Add("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_RC4_128_SHA", false)
	f.Add("TLS_AES_128_GCM_SHA256", true)
	f.Add(",,x", false)
	f.Fuzz(func(t *testing.T, list string, tls13 bool) {
		min := uint16(tls.VersionTLS12)
		if tls13 {
			min = tls.VersionTLS13
		}
		ids, _, err := ParseCipherSuites(list, min)
		if err != nil || len(ids) == 0 || tls13 {
			return
		}
		if !slices.ContainsFunc(http2Suites, func(id uint16) bool { return slices.Contains(ids, id) }) {
			t.Errorf("ParseCipherSuites(%q) = %v, without a suite HTTP/2 needs", list, ids)
		}
	})
}
