// Package pki keeps leasehold's certificate authority and the material
// derived from it: the server's serving certificate, client certificates for
// users, bearer tokens and kubeconfig files.
//
// Everything lives in one data directory as PEM files of mode 0600:
//
//	ca.crt, ca.key            the self-signed CA (ECDSA P-256, 10 years)
//	serving.crt, serving.key  the server's certificate (1 year), signed by the CA
//	credentials.lock          held by a process creating or reading them (LockDir)
//
// The first start creates them; later starts reuse them. The CA is never
// replaced silently, since every kubeconfig and client certificate trusts it:
// a damaged or expired CA is an error for the operator to resolve. The
// serving certificate is derived material and is issued again whenever it
// no longer covers the requested hosts, is not signed by the CA, is damaged,
// or comes within 30 days of expiry.
//
// Every file is written atomically (a temporary file in the same directory,
// synced, then renamed over the target), so a crash never leaves a
// half-written key or certificate behind.
//
// Time is read from an injected clock.PassiveClock; validity windows start a
// few minutes before "now" to tolerate small clock skew between machines.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// File names inside the data directory.
const (
	CACertFile      = "ca.crt"
	CAKeyFile       = "ca.key"
	ServingCertFile = "serving.crt"
	ServingKeyFile  = "serving.key"
)

const (
	// caValidity is how long a new CA is valid.
	caValidity = 10 * 365 * 24 * time.Hour
	// servingValidity is how long a serving certificate is valid.
	servingValidity = 365 * 24 * time.Hour
	// servingRenewBefore is how close to expiry a serving certificate is
	// issued again.
	servingRenewBefore = 30 * 24 * time.Hour
	// defaultClientValidity is used by IssueClient when validity is zero.
	defaultClientValidity = 365 * 24 * time.Hour
	// backdate moves NotBefore into the past to tolerate clock skew.
	backdate = 5 * time.Minute
)

// newKey returns a fresh ECDSA P-256 key.
func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return k, nil
}

// newSerial returns a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// keyMatches reports whether key is the private key of cert.
func keyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// errNoPair is returned by readPair when neither file exists.
var errNoPair = errors.New("neither file exists")

// readPair reads a certificate and key file. It returns errNoPair only when
// both files are missing; one file without the other is an error of its own.
func readPair(certPath, keyPath string) (certPEM, keyPEM []byte, err error) {
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return nil, nil, errNoPair
	case certErr != nil:
		return nil, nil, fmt.Errorf("%w (%s exists)", certErr, filepath.Base(keyPath))
	case keyErr != nil:
		return nil, nil, fmt.Errorf("%w (%s exists)", keyErr, filepath.Base(certPath))
	}
	return certPEM, keyPEM, nil
}

// WriteFileAtomic writes data to path with mode perm: it writes a temporary
// file in the same directory, syncs it, renames it over path and syncs the
// directory.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// WritePair writes a key and its certificate atomically, mode 0600, the
// key first: a crash between the two leaves the old certificate beside a
// new key, which does not load, never a certificate whose key is lost.
func WritePair(certPath, keyPath string, certPEM, keyPEM []byte) error {
	if err := WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(certPath, certPEM, 0o600)
}
