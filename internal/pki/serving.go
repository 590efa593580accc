package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
)

// defaultServingHosts are in every serving certificate.
var defaultServingHosts = []string{"localhost", "127.0.0.1", "::1"}

// LoadOrIssueServing returns the serving certificate in dir (serving.crt,
// serving.key), issuing and writing a new one when it is missing, damaged,
// not signed by ca, about to expire, or when its SANs do not cover every
// host in hosts plus localhost, 127.0.0.1 and ::1.
//
// A host is a DNS name (a leading "*." wildcard is allowed) or an IP
// address, optionally in brackets ("[::1]"). Unspecified addresses
// ("", "0.0.0.0", "::") are skipped: they name no host a client dials, so a
// server listening on all interfaces should pass the names it is reached by.
func (ca *CA) LoadOrIssueServing(dir string, hosts []string, clk clock.PassiveClock) (tls.Certificate, error) {
	dnsNames, ips, err := splitHosts(append(slices.Clone(defaultServingHosts), hosts...))
	if err != nil {
		return tls.Certificate{}, err
	}
	certPath := filepath.Join(dir, ServingCertFile)
	keyPath := filepath.Join(dir, ServingKeyFile)
	if certPEM, keyPEM, err := readPair(certPath, keyPath); err == nil {
		if c, ok := ca.reusableServing(certPEM, keyPEM, dnsNames, ips, clk); ok {
			return c, nil
		}
	}
	return ca.issueServing(dir, dnsNames, ips, clk)
}

// reusableServing returns the certificate in certPEM/keyPEM if it is still
// good for dnsNames and ips at clk.Now().
func (ca *CA) reusableServing(certPEM, keyPEM []byte, dnsNames []string, ips []net.IP, clk clock.PassiveClock) (tls.Certificate, bool) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return tls.Certificate{}, false
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil || !keyMatches(cert, key) {
		return tls.Certificate{}, false
	}
	if ca.verify(cert, x509.ExtKeyUsageServerAuth, clk) != nil {
		return tls.Certificate{}, false
	}
	if renewalDue(cert, clk) {
		return tls.Certificate{}, false
	}
	for _, n := range dnsNames {
		if !slices.Contains(cert.DNSNames, n) {
			return tls.Certificate{}, false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return tls.Certificate{}, false
		}
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, true
}

// renewalDue says whether a serving certificate is within
// servingRenewBefore of its expiry at clk.Now().
func renewalDue(cert *x509.Certificate, clk clock.PassiveClock) bool {
	return clk.Now().Add(servingRenewBefore).After(cert.NotAfter)
}

// issueServing issues a serving certificate for dnsNames and ips and writes
// it to dir.
func (ca *CA) issueServing(dir string, dnsNames []string, ips []net.IP, clk clock.PassiveClock) (tls.Certificate, error) {
	key, err := newKey()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue serving certificate: %w", err)
	}
	now := clk.Now()
	cert, err := ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "leasehold", Organization: []string{"leasehold"}},
		NotBefore:   now.Add(-backdate).UTC(),
		NotAfter:    now.Add(servingValidity).UTC(),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	}, key.Public())
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue serving certificate: %w", err)
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue serving certificate: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, ServingKeyFile), keyPEM, 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("write serving key: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, ServingCertFile), encodeCertPEM(cert.Raw), 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("write serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// splitHosts normalizes hosts into sorted, deduplicated DNS names and IP
// addresses, skipping unspecified addresses.
func splitHosts(hosts []string) (dnsNames []string, ips []net.IP, err error) {
	for _, h := range hosts {
		h = strings.TrimSuffix(strings.TrimSpace(h), ".")
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if ip.IsUnspecified() {
				continue
			}
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
			continue
		}
		name := strings.ToLower(h)
		if errs := validation.IsDNS1123Subdomain(strings.TrimPrefix(name, "*.")); len(errs) > 0 {
			return nil, nil, fmt.Errorf("serving certificate host %q: %s", h, strings.Join(errs, "; "))
		}
		if !slices.Contains(dnsNames, name) {
			dnsNames = append(dnsNames, name)
		}
	}
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, nil, errors.New("serving certificate needs at least one host")
	}
	slices.Sort(dnsNames)
	// IPv4 (4 bytes) before IPv6 (16 bytes), then by value.
	slices.SortFunc(ips, func(a, b net.IP) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return bytes.Compare(a, b)
	})
	return dnsNames, ips, nil
}
