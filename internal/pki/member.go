package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"

	"k8s.io/utils/clock"
)

// IssueMember issues a certificate and a new key for an etcd member named
// name, reached at hosts (DNS names or IP addresses, as the serving
// certificate's; localhost, 127.0.0.1 and ::1 are always in it). It is good
// for both ends of a connection: a member serves its clients and its peers
// with it, and dials its peers with it. Valid for a year, never past the
// CA. Nothing is written to disk.
func (ca *CA) IssueMember(name string, hosts []string, clk clock.PassiveClock) (certPEM, keyPEM []byte, err error) {
	if name == "" {
		return nil, nil, errors.New("issue member certificate: name is empty")
	}
	dnsNames, ips, err := splitHosts(append(slices.Clone(defaultServingHosts), hosts...))
	if err != nil {
		return nil, nil, fmt.Errorf("issue member certificate: %w", err)
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("issue member certificate: %w", err)
	}
	now := clk.Now()
	cert, err := ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		NotBefore:   now.Add(-backdate).UTC(),
		NotAfter:    now.Add(servingValidity).UTC(),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	}, key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("issue member certificate: %w", err)
	}
	keyPEM, err = encodeKeyPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue member certificate: %w", err)
	}
	return encodeCertPEM(cert.Raw), keyPEM, nil
}
