package pki

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

// TLSVersions are the values of --tls-min-version leasehold takes,
// kube-apiserver's names for them. It serves TLS 1.2 or later only: HTTP/2
// refuses anything older.
var TLSVersions = map[string]uint16{
	"VersionTLS12": tls.VersionTLS12,
	"VersionTLS13": tls.VersionTLS13,
}

// ParseTLSVersion reads a --tls-min-version value; "" is TLS 1.2.
func ParseTLSVersion(name string) (uint16, error) {
	if name == "" {
		return tls.VersionTLS12, nil
	}
	if v, ok := TLSVersions[name]; ok {
		return v, nil
	}
	switch name {
	case "VersionTLS10", "VersionTLS11":
		return 0, fmt.Errorf("%s: leasehold serves TLS 1.2 or later (HTTP/2 refuses older versions); use VersionTLS12 or VersionTLS13", name)
	}
	return 0, fmt.Errorf("%q is not a TLS version; use VersionTLS12 or VersionTLS13", name)
}

// http2Suites are the cipher suites HTTP/2 requires a TLS 1.2 server to
// offer (RFC 7540, section 9.2.2): one of them, for the key it serves.
var http2Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
}

// ParseCipherSuites reads a --tls-cipher-suites list: IANA names, as Go's
// crypto/tls and kube-apiserver know them, separated by commas. An empty
// list is Go's defaults. Names of TLS 1.3 suites are taken and have no
// effect: TLS 1.3's suites are not configurable. It also returns the names
// of insecure suites in the list, for a warning; minVersion is the
// --tls-min-version in force, below TLS 1.3 of which HTTP/2 needs one of
// its required suites.
func ParseCipherSuites(list string, minVersion uint16) (ids []uint16, insecure []string, err error) {
	known := map[string]*tls.CipherSuite{}
	for _, s := range tls.CipherSuites() {
		known[s.Name] = s
	}
	for _, s := range tls.InsecureCipherSuites() {
		known[s.Name] = s
	}
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		s, ok := known[name]
		if !ok {
			return nil, nil, fmt.Errorf("%q is not a cipher suite Go's crypto/tls knows (such as TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)", name)
		}
		if s.Insecure {
			insecure = append(insecure, name)
		}
		if !slices.Contains(ids, s.ID) {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) > 0 && minVersion < tls.VersionTLS13 && !slices.ContainsFunc(http2Suites, func(id uint16) bool { return slices.Contains(ids, id) }) {
		return nil, nil, fmt.Errorf("HTTP/2 over TLS 1.2 needs TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 (for an ECDSA key, such as the server's own) or TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (for an RSA key) in the list")
	}
	return ids, insecure, nil
}
