package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
)

func init() {
	register(&command{name: "cert", summary: "issue client certificates signed by the server's CA (issue)", run: runCert})
}

func runCert(ctx context.Context, args []string) error {
	const usage = "usage: leasehold cert issue --user NAME [--uid UID] [--group G]... (--out-dir DIR | --kubeconfig-out FILE)"
	switch {
	case helpAsked(args):
		return printUsage(usage, "cert")
	case len(args) == 0 || args[0] != "issue":
		return errors.New(usage)
	}
	var id identityFlags
	var dataDir, outDir, kubeconfigOut, server string
	var validity time.Duration
	fs := newFlagSet("cert issue")
	fs.StringVar(&dataDir, "data-dir", "./leasehold-data", "the server's data directory (holds ca.crt and ca.key)")
	id.register(fs)
	fs.StringVar(&outDir, "out-dir", "", "write USER.crt and USER.key (mode 0600) to this directory")
	fs.StringVar(&kubeconfigOut, "kubeconfig-out", "", "write a kubeconfig embedding the certificate and key to this file")
	fs.StringVar(&server, "server", "", "server URL for --kubeconfig-out (default the one in DATA_DIR/admin.kubeconfig)")
	fs.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificate is valid")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	u, err := id.toUser()
	if err != nil {
		return err
	}
	if outDir == "" && kubeconfigOut == "" {
		return errors.New("--out-dir or --kubeconfig-out is required")
	}
	ca, err := existingCA(dataDir)
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := ca.IssueClient(u.Name, u.UID, u.Groups, validity, clock.RealClock{})
	if err != nil {
		return err
	}
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o700); err != nil {
			return err
		}
		base := filepath.Join(outDir, filepath.Base(sanitizeFileName(u.Name)))
		if err := os.WriteFile(base+".key", keyPEM, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(base+".crt", certPEM, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s.crt and %s.key for %s\n", base, base, u.Name)
	}
	if kubeconfigOut != "" {
		spec, err := kubeconfigSpec(dataDir, server, u.Name)
		if err != nil {
			return err
		}
		spec.ClientCertPEM, spec.ClientKeyPEM = certPEM, keyPEM
		if err := pki.WriteKubeconfig(kubeconfigOut, spec); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s for %s\n", kubeconfigOut, u.Name)
	}
	return nil
}

// sanitizeFileName makes a user name (which may hold ':') a file name.
func sanitizeFileName(s string) string {
	out := []rune(s)
	for i, r := range out {
		switch r {
		case '/', ':', '\\':
			out[i] = '_'
		}
	}
	return string(out)
}

// existingCA loads the CA in dataDir, under its lock (a server starting
// there may be creating it), and refuses to create one: a new CA would be
// trusted by no server.
func existingCA(dataDir string) (*pki.CA, error) {
	if _, err := os.Stat(filepath.Join(dataDir, pki.CAKeyFile)); err != nil {
		return nil, fmt.Errorf("no CA in --data-dir: %w", err)
	}
	release, err := pki.LockDir(dataDir)
	if err != nil {
		return nil, err
	}
	defer release()
	return pki.LoadOrCreateCA(dataDir, clock.RealClock{})
}
