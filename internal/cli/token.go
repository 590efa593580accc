package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/pki"
)

// Tokens made by `leasehold token create` live in the data directory's
// token store (tokens.json, mode 0600): only their SHA-256 digests, with the
// user, groups and creation time. The running server polls the file every
// second and follows changes, so `leasehold token delete` revokes a token
// within a second, with no API call and no restart; a token it does not
// know makes it look at the file at once, so a new token works at its
// first use. The command works on
// the data directory of the server (--data-dir), like the server's own
// credentials; with several servers on one etcd, each has its own store.

func init() {
	register(&command{name: "token", summary: "create, list and delete bearer tokens (create|list|delete)", run: runToken})
}

func runToken(ctx context.Context, args []string) error {
	const usage = "usage: leasehold token create|list|delete [flags]"
	if done, err := noSubcommand(args, usage, "token"); done {
		return err
	}
	switch args[0] {
	case "create":
		return tokenCreate(args[1:])
	case "list":
		return tokenList(args[1:])
	case "delete", "revoke":
		return tokenDelete(args[1:])
	}
	return fmt.Errorf("unknown token subcommand %q (want create, list or delete)", args[0])
}

// stringsFlag collects a repeatable, comma-separable flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error {
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*s = append(*s, x)
		}
	}
	return nil
}

// identityFlags name the user a credential is for.
type identityFlags struct {
	user, uid, node string
	groups          stringsFlag
}

func (f *identityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.user, "user", "", "user name")
	fs.StringVar(&f.uid, "uid", "", "user UID (optional)")
	fs.Var(&f.groups, "group", "group; repeat or separate with commas")
	fs.StringVar(&f.node, "node", "", "node name: the identity system:node:NAME in group system:nodes (instead of --user)")
}

func (f *identityFlags) toUser() (*auth.User, error) {
	switch {
	case f.node != "" && f.user != "":
		return nil, errors.New("give --user or --node, not both")
	case f.node != "":
		// A node's credential is only good for a Node it may register.
		if errs := validation.IsDNS1123Subdomain(f.node); len(errs) > 0 {
			return nil, fmt.Errorf("--node %q is not a valid node name: %s", f.node, strings.Join(errs, "; "))
		}
		u := auth.NodeUser(f.node)
		u.Groups = slices.DeleteFunc(u.Groups, func(g string) bool { return g == auth.GroupAuthenticated })
		for _, g := range f.groups {
			if !slices.Contains(u.Groups, g) {
				u.Groups = append(u.Groups, g)
			}
		}
		return u, nil
	case f.user != "":
		return &auth.User{Name: f.user, UID: f.uid, Groups: f.groups}, nil
	}
	return nil, errors.New("--user or --node is required")
}

func tokenStorePath(dataDir string) string { return filepath.Join(dataDir, auth.TokenStoreFile) }

func tokenCreate(args []string) error {
	var id identityFlags
	var dataDir, description, kubeconfigOut, server string
	var ttl time.Duration
	fs := newFlagSet("token create")
	fs.StringVar(&dataDir, "data-dir", "./leasehold-data", "the server's data directory")
	id.register(fs)
	fs.StringVar(&description, "description", "", "what the token is for (shown by token list)")
	fs.StringVar(&kubeconfigOut, "kubeconfig-out", "", "write a kubeconfig with the token to this file instead of printing the token")
	fs.StringVar(&server, "server", "", "server URL for --kubeconfig-out (default the one in DATA_DIR/admin.kubeconfig)")
	fs.DurationVar(&ttl, "ttl", 0, "how long the token authenticates, as kubeadm token create's flag (0: until deleted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if ttl < 0 {
		return fmt.Errorf("--ttl %v is negative", ttl)
	}
	u, err := id.toUser()
	if err != nil {
		return err
	}
	if _, err := os.Stat(dataDir); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	token, err := pki.NewToken()
	if err != nil {
		return err
	}
	entry := auth.NewStoredToken(token, u, time.Now(), ttl, description)
	if err := auth.UpdateTokenStore(tokenStorePath(dataDir), func(cur []auth.StoredToken) ([]auth.StoredToken, error) {
		return append(cur, entry), nil
	}); err != nil {
		return err
	}
	if kubeconfigOut == "" {
		fmt.Println(token)
		return nil
	}
	spec, err := kubeconfigSpec(dataDir, server, u.Name)
	if err != nil {
		return err
	}
	spec.Token = token
	if err := pki.WriteKubeconfig(kubeconfigOut, spec); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s for %s (token id %s)\n", kubeconfigOut, u.Name, entry.ID)
	return nil
}

// kubeconfigSpec fills in the server and CA for a kubeconfig written from
// the data directory: those of the admin kubeconfig, which serve keeps
// trusting the certificate it serves (see --tls-cert-file), else the
// server's CA and its default address. server, when set, is the URL.
func kubeconfigSpec(dataDir, server, user string) (pki.KubeconfigSpec, error) {
	spec := pki.KubeconfigSpec{Server: "https://127.0.0.1:6443", User: user}
	trusted := false
	if cfg, err := clientcmd.LoadFromFile(filepath.Join(dataDir, "admin.kubeconfig")); err == nil {
		if c, ok := cfg.Clusters[pki.KubeconfigCluster]; ok {
			if c.Server != "" {
				spec.Server = c.Server
			}
			if c.CertificateAuthority == "" {
				spec.CAPEM, trusted = c.CertificateAuthorityData, true
			}
		}
	}
	if !trusted {
		caPEM, err := os.ReadFile(filepath.Join(dataDir, pki.CACertFile))
		if err != nil {
			return pki.KubeconfigSpec{}, fmt.Errorf("reading the server CA: %w", err)
		}
		spec.CAPEM = caPEM
	}
	if server != "" {
		spec.Server = server
	}
	return spec, nil
}

func tokenList(args []string) error {
	var dataDir string
	fs := newFlagSet("token list")
	fs.StringVar(&dataDir, "data-dir", "./leasehold-data", "the server's data directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	entries, err := auth.ReadTokenStore(tokenStorePath(dataDir))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tGROUPS\tCREATED\tEXPIRES\tDESCRIPTION")
	now := time.Now()
	for _, e := range entries {
		expires := "<never>"
		if e.Expires != nil {
			expires = e.Expires.Format(time.RFC3339)
			if !now.Before(*e.Expires) {
				expires += " (expired)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.User, strings.Join(e.Groups, ","), e.Created.Format(time.RFC3339), expires, e.Description)
	}
	return tw.Flush()
}

func tokenDelete(args []string) error {
	var dataDir, user, node string
	var expired bool
	fs := newFlagSet("token delete")
	fs.StringVar(&dataDir, "data-dir", "./leasehold-data", "the server's data directory")
	fs.StringVar(&user, "user", "", "delete every token of this user")
	fs.StringVar(&node, "node", "", "delete every token of this node")
	fs.BoolVar(&expired, "expired", false, "delete every token past its expiry (see token create --ttl)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ids := fs.Args()
	if node != "" {
		user = auth.NodeUserPrefix + node
	}
	if len(ids) == 0 && user == "" && !expired {
		return errors.New("usage: leasehold token delete ID... | --user NAME | --node NAME | --expired")
	}
	removed := 0
	now := time.Now()
	err := auth.UpdateTokenStore(tokenStorePath(dataDir), func(cur []auth.StoredToken) ([]auth.StoredToken, error) {
		out := slices.DeleteFunc(cur, func(e auth.StoredToken) bool {
			match := (user != "" && e.User == user) || (expired && e.Expires != nil && !now.Before(*e.Expires)) || slices.ContainsFunc(ids, func(id string) bool {
				return id != "" && (id == e.ID || (len(id) >= 6 && strings.HasPrefix(e.SHA256, id)))
			})
			if match {
				removed++
			}
			return match
		})
		if removed == 0 {
			return nil, errors.New("no matching token")
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "deleted %d token(s); the server stops accepting them within a second\n", removed)
	return nil
}
