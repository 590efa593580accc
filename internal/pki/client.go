package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"
	"time"

	asn1util "k8s.io/apimachinery/pkg/apis/asn1"
	"k8s.io/utils/clock"
)

// IssueClient issues a client certificate and a new key for user, with
// groups as the subject's organizations and uid, unless empty, as its
// UID attribute: the identity Kubernetes' x509 authenticator reads (CN is
// the user name, O the groups, OID 1.3.6.1.4.1.57683.2 the uid). A zero
// validity means one year; the certificate never outlives the CA. Nothing
// is written to disk.
func (ca *CA) IssueClient(user, uid string, groups []string, validity time.Duration, clk clock.PassiveClock) (certPEM, keyPEM []byte, err error) {
	switch {
	case user == "":
		return nil, nil, errors.New("issue client certificate: user name is empty")
	case validity < 0:
		return nil, nil, fmt.Errorf("issue client certificate: validity %s is negative", validity)
	case validity == 0:
		validity = defaultClientValidity
	}
	if slices.Contains(groups, "") {
		return nil, nil, errors.New("issue client certificate: empty group name")
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("issue client certificate: %w", err)
	}
	now := clk.Now()
	subject := pkix.Name{CommonName: user, Organization: slices.Clone(groups)}
	if uid != "" {
		subject.ExtraNames = []pkix.AttributeTypeAndValue{{Type: asn1util.X509UID(), Value: uid}}
	}
	cert, err := ca.sign(&x509.Certificate{
		Subject:     subject,
		NotBefore:   now.Add(-backdate).UTC(),
		NotAfter:    now.Add(validity).UTC(),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("issue client certificate: %w", err)
	}
	keyPEM, err = encodeKeyPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue client certificate: %w", err)
	}
	return encodeCertPEM(cert.Raw), keyPEM, nil
}
