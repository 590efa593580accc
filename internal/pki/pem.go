package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

const (
	pemTypeCertificate = "CERTIFICATE"
	pemTypePKCS8       = "PRIVATE KEY"
	pemTypeECKey       = "EC PRIVATE KEY"
	pemTypeRSAKey      = "RSA PRIVATE KEY"
)

// encodeCertPEM returns der as one PEM CERTIFICATE block.
func encodeCertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemTypeCertificate, Bytes: der})
}

// encodeKeyPEM returns key as one PEM PKCS#8 PRIVATE KEY block.
func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemTypePKCS8, Bytes: der}), nil
}

// ParseCertPEM returns the first CERTIFICATE in data, skipping any other PEM
// blocks before it. It fails when data holds no certificate.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	for len(data) > 0 {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != pemTypeCertificate {
			continue
		}
		if len(b.Headers) != 0 {
			return nil, errors.New("certificate PEM block has headers")
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		return c, nil
	}
	return nil, errors.New("no CERTIFICATE PEM block found")
}

// ParseKeyPEM returns the first private key in data: PKCS#8 ("PRIVATE
// KEY"), SEC 1 ("EC PRIVATE KEY") or PKCS#1 ("RSA PRIVATE KEY"). Encrypted
// keys are not supported.
func ParseKeyPEM(data []byte) (crypto.Signer, error) {
	for len(data) > 0 {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if len(b.Headers) != 0 && (b.Type == pemTypePKCS8 || b.Type == pemTypeECKey || b.Type == pemTypeRSAKey) {
			return nil, fmt.Errorf("%s PEM block has headers (encrypted keys are not supported)", b.Type)
		}
		switch b.Type {
		case pemTypePKCS8:
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse PKCS#8 private key: %w", err)
			}
			switch k := k.(type) {
			case *ecdsa.PrivateKey:
				return k, nil
			case *rsa.PrivateKey:
				return k, nil
			case ed25519.PrivateKey:
				return k, nil
			default:
				return nil, fmt.Errorf("unsupported private key type %T", k)
			}
		case pemTypeECKey:
			k, err := x509.ParseECPrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse EC private key: %w", err)
			}
			return k, nil
		case pemTypeRSAKey:
			k, err := x509.ParsePKCS1PrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse RSA private key: %w", err)
			}
			return k, nil
		}
	}
	return nil, errors.New("no private key PEM block found")
}
