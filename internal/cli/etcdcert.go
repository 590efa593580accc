package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
)

// `leasehold etcd cert` keeps a CA for an etcd cluster of its own, apart
// from the API server's: etcd requires no more of a client than a
// certificate its CA signed, so a CA shared with the API server would let
// every user given a client certificate (leasehold cert issue) into etcd.

func runEtcdCert(args []string) error {
	var dir, member, client, hosts string
	fs := newFlagSet("etcd cert")
	fs.StringVar(&dir, "dir", "./leasehold-etcd-pki", "directory of the etcd cluster's CA (ca.crt, ca.key, created on first use) and of the certificates issued, NAME.crt and NAME.key")
	fs.StringVar(&member, "member", "", "issue a member's certificate, for its clients and its peers, to NAME")
	fs.StringVar(&hosts, "hosts", "", "with --member: comma-separated DNS names and IP addresses the member is reached at (localhost and 127.0.0.1 are always in)")
	fs.StringVar(&client, "client", "", "issue a client certificate to NAME, for serve's --etcd-certfile")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || (member == "") == (client == "") {
		return errors.New("usage: leasehold etcd cert [--dir DIR] (--member NAME [--hosts H,...] | --client NAME)")
	}
	if hosts != "" && member == "" {
		return errors.New("--hosts goes with --member")
	}
	for _, apiFile := range []string{"admin-token.sha256", pki.ServingCertFile} {
		if _, err := os.Stat(filepath.Join(dir, apiFile)); err == nil {
			return fmt.Errorf("%s is a server's data directory (it holds %s): give etcd a CA of its own, in a directory of its own, since etcd lets in whoever holds a certificate its CA signed", dir, apiFile)
		}
	}
	release, err := pki.LockDir(dir)
	if err != nil {
		return err
	}
	defer release()
	clk := clock.RealClock{}
	ca, err := pki.LoadOrCreateCA(dir, clk)
	if err != nil {
		return err
	}
	name := member
	var certPEM, keyPEM []byte
	if member != "" {
		certPEM, keyPEM, err = ca.IssueMember(member, splitList(hosts), clk)
	} else {
		name = client
		certPEM, keyPEM, err = ca.IssueClient(client, "", nil, 0, clk)
	}
	if err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := pki.WritePair(certPath, keyPath, certPEM, keyPEM); err != nil {
		return err
	}
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s, valid until %s, signed by %s\n", certPath, keyPath,
		cert.NotAfter.UTC().Format("2006-01-02"), filepath.Join(dir, pki.CACertFile))
	return nil
}
