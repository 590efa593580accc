package pki

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// SNIPair is one --tls-sni-cert-key: a certificate and key read again as
// their files change, and the names a handshake's server name must match
// for it to be served. Without names, the certificate's own are used
// (its DNS names and a common name that is a host name).
type SNIPair struct {
	Pair  *Reloading[*tls.Certificate]
	Names []string
	// Flag is the flag's value, for logs.
	Flag string
}

// ParseSNIFlag reads a --tls-sni-cert-key value, as kube-apiserver's:
// "CERT,KEY" or "CERT,KEY:NAME,NAME", where a name may start with "*."
// to match any one label in its place.
func ParseSNIFlag(v string) (certFile, keyFile string, names []string, err error) {
	files, patterns, hasNames := strings.Cut(v, ":")
	certFile, keyFile, ok := strings.Cut(files, ",")
	certFile, keyFile = strings.TrimSpace(certFile), strings.TrimSpace(keyFile)
	if !ok || certFile == "" || keyFile == "" || strings.Contains(keyFile, ",") {
		return "", "", nil, fmt.Errorf("%q: want CERT,KEY or CERT,KEY:NAME,NAME", v)
	}
	if hasNames {
		for n := range strings.SplitSeq(patterns, ",") {
			n = strings.ToLower(strings.TrimSpace(n))
			host := strings.TrimPrefix(n, "*.")
			if errs := validation.IsDNS1123Subdomain(host); len(errs) > 0 {
				return "", "", nil, fmt.Errorf("%q: name %q: %s", v, n, strings.Join(errs, "; "))
			}
			names = append(names, n)
		}
	}
	return certFile, keyFile, names, nil
}

// SNI picks the certificate for a handshake's server name among pairs, as
// kube-apiserver does: a name matches exactly before it matches a wildcard
// ("*.example.com" stands for any one label), names given with a pair
// before the certificates' own, and an earlier pair before a later one.
type SNI []SNIPair

// Get returns the certificate for serverName, nil when no pair has it.
func (s SNI) Get(serverName string) *tls.Certificate {
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	if name == "" {
		return nil
	}
	if c := s.lookup(name); c != nil {
		return c
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		return s.lookup("*" + name[i:])
	}
	return nil
}

// lookup finds the pair that has name, given names first.
func (s SNI) lookup(name string) *tls.Certificate {
	for _, p := range s {
		if slices.Contains(p.Names, name) {
			return p.Pair.Get()
		}
	}
	for _, p := range s {
		if len(p.Names) > 0 {
			continue
		}
		if c := p.Pair.Get(); slices.Contains(OwnNames(c), name) {
			return c
		}
	}
	return nil
}

// OwnNames are the names a certificate is served for without names of its
// own flag: its DNS names, lower-cased, and its common name if it is a
// host name (or a wildcard of one) not among them.
func OwnNames(c *tls.Certificate) []string {
	if c.Leaf == nil {
		return nil
	}
	var names []string
	for _, n := range c.Leaf.DNSNames {
		names = append(names, strings.ToLower(n))
	}
	cn := strings.ToLower(c.Leaf.Subject.CommonName)
	if cn != "" && len(validation.IsDNS1123Subdomain(strings.TrimPrefix(cn, "*."))) == 0 && !slices.Contains(names, cn) {
		names = append(names, cn)
	}
	return names
}
