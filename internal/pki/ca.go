package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/utils/clock"
)

// CA is a certificate authority: its certificate, its private key, and the
// certificate as PEM (what kubeconfigs embed as certificate-authority-data).
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// LoadOrCreateCA loads ca.crt and ca.key from dir, or, when neither exists,
// creates dir (mode 0700) and a new self-signed CA in it. It fails, rather
// than replacing anything, when only one of the two files exists, when they
// do not parse or do not belong together, when the certificate is not a CA,
// or when it is not valid at clk.Now().
func LoadOrCreateCA(dir string, clk clock.PassiveClock) (*CA, error) {
	certPath := filepath.Join(dir, CACertFile)
	keyPath := filepath.Join(dir, CAKeyFile)
	certPEM, keyPEM, err := readPair(certPath, keyPath)
	switch {
	case errors.Is(err, errNoPair):
		return createCA(dir, clk)
	case err != nil:
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certPath, err)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", keyPath, err)
	}
	if !keyMatches(cert, key) {
		return nil, fmt.Errorf("load CA: %s does not hold the key of %s", keyPath, certPath)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("load CA: %s is not a CA certificate", certPath)
	}
	now := clk.Now()
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return nil, fmt.Errorf("load CA: %s is valid from %s to %s, not now (%s)",
			certPath, cert.NotBefore.UTC(), cert.NotAfter.UTC(), now.UTC())
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCertPEM(cert.Raw)}, nil
}

// createCA makes a new CA and writes it to dir.
func createCA(dir string, clk clock.PassiveClock) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	now := clk.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "leasehold-ca", Organization: []string{"leasehold"}},
		NotBefore:             now.Add(-backdate).UTC(),
		NotAfter:              now.Add(caValidity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	certPEM := encodeCertPEM(der)
	// The key goes first: a crash between the two writes leaves a key
	// without a certificate, which the next start reports, never a
	// certificate whose key is lost.
	if err := WriteFileAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write CA key: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, CACertFile), certPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// sign issues a certificate for pub from tmpl, filling in the serial number
// and capping NotAfter at the CA's own expiry.
func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey) (*x509.Certificate, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

// verify reports whether cert chains to ca for usage at the time of clk.
func (ca *CA) verify(cert *x509.Certificate, usage x509.ExtKeyUsage, clk clock.PassiveClock) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: clk.Now(),
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	return err
}
