package pki

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigCluster is the cluster name in kubeconfigs leasehold writes.
const KubeconfigCluster = "leasehold"

// KubeconfigSpec is what a kubeconfig written by WriteKubeconfig holds.
// Exactly one of Token or the ClientCertPEM/ClientKeyPEM pair is set.
type KubeconfigSpec struct {
	// Server is the server URL, e.g. "https://127.0.0.1:6443".
	Server string
	// CAPEM is the CA certificate clients trust, embedded as
	// certificate-authority-data; empty, clients verify the server with
	// their system's roots.
	CAPEM []byte
	// User names the user entry; the context is named "USER@leasehold".
	User string
	// Token is a bearer token.
	Token string
	// ClientCertPEM and ClientKeyPEM are a client certificate and its key,
	// embedded as client-certificate-data and client-key-data.
	ClientCertPEM, ClientKeyPEM []byte
}

// WriteKubeconfig writes a kubeconfig for c to path, atomically and with
// mode 0600, creating the parent directory (0700) if needed. The file has
// one cluster ("leasehold"), one user (c.User), and one context joining
// them, which is the current context.
func WriteKubeconfig(path string, c KubeconfigSpec) error {
	cfg, err := kubeconfig(c)
	if err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// kubeconfig validates c and builds the config it describes.
func kubeconfig(c KubeconfigSpec) (*clientcmdapi.Config, error) {
	hasCert := len(c.ClientCertPEM) > 0 || len(c.ClientKeyPEM) > 0
	switch {
	case c.Server == "":
		return nil, errors.New("server URL is empty")
	case c.User == "":
		return nil, errors.New("user name is empty")
	case c.Token != "" && hasCert:
		return nil, errors.New("both a token and a client certificate are given; choose one")
	case c.Token == "" && !hasCert:
		return nil, errors.New("neither a token nor a client certificate is given")
	case hasCert && (len(c.ClientCertPEM) == 0 || len(c.ClientKeyPEM) == 0):
		return nil, errors.New("a client certificate needs both the certificate and the key")
	}
	if len(c.CAPEM) > 0 {
		if _, err := ParseCertPEM(c.CAPEM); err != nil {
			return nil, fmt.Errorf("CA certificate: %w", err)
		}
	}
	context := c.User + "@" + KubeconfigCluster
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = c.Server
	cluster.CertificateAuthorityData = c.CAPEM
	cfg.Clusters[KubeconfigCluster] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.Token = c.Token
	user.ClientCertificateData = c.ClientCertPEM
	user.ClientKeyData = c.ClientKeyPEM
	cfg.AuthInfos[c.User] = user
	ctx := clientcmdapi.NewContext()
	ctx.Cluster = KubeconfigCluster
	ctx.AuthInfo = c.User
	cfg.Contexts[context] = ctx
	cfg.CurrentContext = context
	return cfg, nil
}

// UpdateKubeconfigCluster makes caPEM what the kubeconfig at path trusts
// for the "leasehold" cluster (none: the system's roots), and server(old)
// its server URL, leaving the rest of the file as it is; it reports whether
// the file changed.
func UpdateKubeconfigCluster(path string, caPEM []byte, server func(old string) string) (bool, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return false, err
	}
	cluster, ok := cfg.Clusters[KubeconfigCluster]
	if !ok {
		return false, fmt.Errorf("%s has no cluster %q", path, KubeconfigCluster)
	}
	url := server(cluster.Server)
	if bytes.Equal(cluster.CertificateAuthorityData, caPEM) && cluster.CertificateAuthority == "" && url == cluster.Server {
		return false, nil
	}
	cluster.CertificateAuthorityData = caPEM
	cluster.CertificateAuthority = ""
	cluster.Server = url
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return false, err
	}
	return true, WriteFileAtomic(path, data, 0o600)
}
