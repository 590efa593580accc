package e2e

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

// replaceFile writes data to path as a tool renewing certificates does:
// beside it, then renamed over it.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// servedSerial is the serial number of the certificate the server at addr
// presents, unverified.
func servedSerial(addr string) (*big.Int, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// TestOwnCertificates: --tls-cert-file and --tls-private-key-file serve a
// certificate of another PKI, and --client-ca-file lets that PKI's client
// certificates in, as kube-apiserver's flags do. The admin kubeconfig, and
// those `leasehold token create` and `cert issue` write, trust the chain's
// root; the server's controllers keep working on its loopback port, which
// keeps the server's own certificate. Files replaced while the server runs
// are taken within seconds, a half-written pair is not, and a restart
// without the flags goes back to the server's own certificate and CA.
func TestOwnCertificates(t *testing.T) {
	needKubectl(t)
	t.Parallel()
	dir := t.TempDir()
	root := pkitest.Issue(t, "company root", nil, "ca")
	server := pkitest.Issue(t, "leasehold.example", root, "server")
	clientCA := pkitest.Issue(t, "company people", nil, "ca")
	carol := pkitest.Issue(t, "carol", clientCA, "client", "devs")

	certFile, keyFile, clientCAFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.crt")
	replaceFile(t, certFile, append(server.CertPEM(), root.CertPEM()...))
	replaceFile(t, keyFile, server.KeyPEM(t))
	replaceFile(t, clientCAFile, clientCA.CertPEM())
	s := serveFor(t, filepath.Join(dir, "data"), "", dir,
		"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--client-ca-file", clientCAFile)

	// kubectl through the admin kubeconfig, which trusts the root.
	if got := s.kubectl(t, "get", "namespace", "default", "-o", "name"); strings.TrimSpace(got) != "namespace/default" {
		t.Fatalf("kubectl get namespace default: %q", got)
	}
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Clusters["leasehold"].CertificateAuthorityData; !bytes.Equal(got, root.CertPEM()) {
		t.Errorf("the admin kubeconfig trusts %q; want the company root", got)
	}
	if serial, err := servedSerial(s.listen); err != nil || serial.Cmp(server.Cert.SerialNumber) != 0 {
		t.Fatalf("served certificate %v, %v; want the company's", serial, err)
	}
	// The controllers reach the server on its loopback port: this
	// replica's identity Lease is published through it.
	eventually(t, 30*time.Second, func() error {
		out, stderr, err := s.runKubectl(t, "get", "lease", "-n", "kube-system", "-l", "apiserver.kubernetes.io/identity", "-o", "name")
		if err != nil || !strings.HasPrefix(out, "lease.coordination.k8s.io/apiserver-") {
			return fmt.Errorf("identity lease: %q %v %s", out, err, stderr)
		}
		return nil
	})

	// carol's certificate is the company's, bob's the server's CA's; a
	// token's kubeconfig from `leasehold token create` trusts the root.
	carolKC := filepath.Join(dir, "carol.kubeconfig")
	writeCertKubeconfig(t, carolKC, s.url(), root.CertPEM(), carol.CertPEM(), carol.KeyPEM(t))
	whoami := func(kc string) (string, error) {
		out, stderr, err := s.withKubeconfig(t, kc, "", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, stderr)
		}
		return out, nil
	}
	if got, err := whoami(carolKC); err != nil || got != `carol ["devs","system:authenticated"]` {
		t.Errorf("carol: %q, %v", got, err)
	}
	bobKC := filepath.Join(dir, "bob.kubeconfig")
	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "bob", "--kubeconfig-out", bobKC)
	daveKC := filepath.Join(dir, "dave.kubeconfig")
	leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", "dave", "--kubeconfig-out", daveKC)
	for kc, want := range map[string]string{bobKC: "bob", daveKC: "dave"} {
		eventually(t, 10*time.Second, func() error {
			got, err := whoami(kc)
			if err != nil || !strings.HasPrefix(got, want+" ") {
				return fmt.Errorf("%s: %q, %v", want, got, err)
			}
			return nil
		})
	}

	// A renewal in place, the certificate written before its key: until
	// the key comes the pair does not match, and the first certificate
	// stays.
	renewed := pkitest.Issue(t, "leasehold.example", root, "server")
	replaceFile(t, certFile, append(renewed.CertPEM(), root.CertPEM()...))
	eventually(t, 30*time.Second, func() error {
		if log := s.logTail(); !strings.Contains(log, "keeping the certificate in use") {
			return errors.New("no complaint of the half-written pair in the log")
		}
		return nil
	})
	if serial, err := servedSerial(s.listen); err != nil || serial.Cmp(server.Cert.SerialNumber) != 0 {
		t.Fatalf("served certificate %v, %v with a half-written pair; want the first", serial, err)
	}
	replaceFile(t, keyFile, renewed.KeyPEM(t))
	eventually(t, 30*time.Second, func() error {
		serial, err := servedSerial(s.listen)
		if err != nil || serial.Cmp(renewed.Cert.SerialNumber) != 0 {
			return fmt.Errorf("served certificate %v, %v; want the renewed one", serial, err)
		}
		return nil
	})
	s.kubectl(t, "get", "namespace", "default")

	// The people's CA replaced by another: carol is no longer let in
	// (401, as for any certificate that chains to no CA the server
	// trusts), and a certificate of the new CA is.
	otherCA := pkitest.Issue(t, "company people 2", nil, "ca")
	erin := pkitest.Issue(t, "erin", otherCA, "client")
	erinKC := filepath.Join(dir, "erin.kubeconfig")
	writeCertKubeconfig(t, erinKC, s.url(), root.CertPEM(), erin.CertPEM(), erin.KeyPEM(t))
	replaceFile(t, clientCAFile, otherCA.CertPEM())
	eventually(t, 30*time.Second, func() error {
		if got, err := whoami(erinKC); err != nil || !strings.HasPrefix(got, "erin ") {
			return fmt.Errorf("erin: %q, %v", got, err)
		}
		return nil
	})
	if got, err := whoami(carolKC); err == nil || !strings.Contains(err.Error(), "(Unauthorized)") {
		t.Errorf("carol after her CA was replaced: %q, %v; want 401", got, err)
	}

	// Without the flags the server serves its own certificate again, and
	// the admin kubeconfig trusts the server's CA.
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	s2 := serveFor(t, s.dataDir, s.listen, dir)
	s2.kubectl(t, "get", "namespace", "default")
	caPEM, err := os.ReadFile(filepath.Join(s.dataDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = clientcmd.LoadFromFile(s.kubeconfig); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Clusters["leasehold"].CertificateAuthorityData; !bytes.Equal(got, caPEM) {
		t.Errorf("the admin kubeconfig after a start without --tls-cert-file trusts %q; want the server's CA", got)
	}
}

// writeCertKubeconfig writes a kubeconfig for a client certificate.
func writeCertKubeconfig(t *testing.T, path, server string, caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	if err := pki.WriteKubeconfig(path, pki.KubeconfigSpec{Server: server, CAPEM: caPEM, User: "user", ClientCertPEM: certPEM, ClientKeyPEM: keyPEM}); err != nil {
		t.Fatal(err)
	}
}
