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

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/pki"
)

// Tokens made by `leasehold token create` live in a token store: only their
// SHA-256 digests, with the user, groups and creation time. The running
// server follows changes (it polls a file every second, and watches etcd),
// so `leasehold token delete` revokes a token within a second, with no API
// call and no restart; a token it does not know makes it look at the store at once, so
// a new token works at its first use. By default the command works on the
// data directory's store (tokens.json, mode 0600), like the server's own
// credentials, which that server alone reads. With --etcd-servers it works
// on the tokens in the external etcd instead, one key each, which every
// server on that etcd (and --etcd-prefix) follows with a watch: the store
// for several replicas, and for a fleet with a token per machine.

func init() {
	register(&command{name: "token", summary: "create, list and delete bearer tokens, or copy a data directory's into etcd (create|list|delete|import)", run: runToken})
}

func runToken(ctx context.Context, args []string) error {
	const usage = "usage: leasehold token create|list|delete|import [flags]"
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
	case "import":
		return tokenImport(args[1:])
	}
	return fmt.Errorf("unknown token subcommand %q (want create, list, delete or import)", args[0])
}

// tokenImport copies the tokens of a data directory's tokens.json (their
// digests; the tokens themselves are nowhere) into etcd, so that every
// server on it accepts them: the way from one replica's tokens to tokens
// for all, without giving machines new ones.
func tokenImport(args []string) error {
	var stores tokenStoreFlags
	fs := newFlagSet("token import")
	stores.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if stores.etcdServers == "" {
		return errors.New("leasehold token import: --etcd-servers is required (the tokens of --data-dir are copied there)")
	}
	entries, err := auth.ReadTokenStore(tokenStorePath(stores.dataDir))
	if err != nil {
		return err
	}
	store, ctx, done, err := stores.open()
	if err != nil {
		return err
	}
	defer done()
	copied, had := 0, 0
	for _, e := range entries {
		switch err := store.add(ctx, e); {
		case errors.Is(err, auth.ErrTokenExists):
			had++
		case err != nil:
			return fmt.Errorf("after copying %d token(s): %w", copied, err)
		default:
			copied++
		}
	}
	fmt.Fprintf(os.Stderr, "copied %d token(s) of %s into etcd (%d there already); %s accepts them now. They stay in the file too: leasehold token delete --data-dir to remove them there.\n",
		copied, tokenStorePath(stores.dataDir), had, store.where)
	return nil
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

// tokenStoreFlags say which token store a `leasehold token` command works
// on: the data directory's file, or the one in etcd.
type tokenStoreFlags struct {
	dataDir, etcdServers, etcdPrefix, caFile, certFile, keyFile string
}

func (f *tokenStoreFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", "./leasehold-data", "the server's data directory, whose tokens.json that server alone reads")
	fs.StringVar(&f.etcdServers, "etcd-servers", "", "comma-separated client URLs of the external etcd, as serve's flag: work on the tokens kept there, which every server on it reads, instead of the data directory's")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", "/registry", "with --etcd-servers: the servers' --etcd-prefix")
	fs.StringVar(&f.caFile, "etcd-cafile", "", "with --etcd-servers: CA bundle to verify etcd with")
	fs.StringVar(&f.certFile, "etcd-certfile", "", "with --etcd-servers: client certificate for etcd")
	fs.StringVar(&f.keyFile, "etcd-keyfile", "", "with --etcd-servers: client key for etcd")
}

// tokenStoreTimeout bounds a command's work on the tokens in etcd.
const tokenStoreTimeout = 30 * time.Second

// tokenStoreAccess reads and changes one token store.
type tokenStoreAccess struct {
	entries func(context.Context) ([]auth.StoredToken, error)
	add     func(context.Context, auth.StoredToken) error
	// remove deletes the tokens match selects, and says how many.
	remove func(context.Context, func(auth.StoredToken) bool) (int, error)
	// where names the store to its user.
	where string
}

// open returns access to the store the flags name, a context for the
// command's work on it (tokenStoreTimeout), and what ends both.
func (f *tokenStoreFlags) open() (tokenStoreAccess, context.Context, func(), error) {
	store, closeStore, err := f.openStore()
	if err != nil {
		return tokenStoreAccess{}, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), tokenStoreTimeout)
	return store, ctx, func() { cancel(); closeStore() }, nil
}

func (f *tokenStoreFlags) openStore() (tokenStoreAccess, func(), error) {
	if f.etcdServers == "" {
		path := tokenStorePath(f.dataDir)
		if _, err := os.Stat(f.dataDir); err != nil {
			return tokenStoreAccess{}, nil, fmt.Errorf("--data-dir: %w", err)
		}
		return tokenStoreAccess{
			entries: func(context.Context) ([]auth.StoredToken, error) { return auth.ReadTokenStore(path) },
			add: func(_ context.Context, entry auth.StoredToken) error {
				return auth.UpdateTokenStore(path, func(cur []auth.StoredToken) ([]auth.StoredToken, error) { return append(cur, entry), nil })
			},
			remove: func(_ context.Context, match func(auth.StoredToken) bool) (int, error) {
				removed := 0
				err := auth.UpdateTokenStore(path, func(cur []auth.StoredToken) ([]auth.StoredToken, error) {
					out := slices.DeleteFunc(cur, match)
					if removed = len(cur) - len(out); removed == 0 {
						return nil, errNoToken // nothing to write
					}
					return out, nil
				})
				if errors.Is(err, errNoToken) {
					return 0, nil // as the etcd store says it
				}
				return removed, err
			},
			where: "the server",
		}, func() {}, nil
	}
	prefix, err := cleanEtcdPrefix(f.etcdPrefix)
	if err != nil {
		return tokenStoreAccess{}, nil, err
	}
	urls := splitList(f.etcdServers)
	if len(urls) == 0 {
		return tokenStoreAccess{}, nil, errors.New("--etcd-servers names no URL")
	}
	log, err := newLogger("text", "error")
	if err != nil {
		return tokenStoreAccess{}, nil, err
	}
	cfg, err := etcdClientConfig(urls, f.caFile, f.certFile, f.keyFile, log)
	if err != nil {
		return tokenStoreAccess{}, nil, err
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return tokenStoreAccess{}, nil, fmt.Errorf("connecting to etcd: %w", err)
	}
	store := auth.EtcdTokenStore{Client: c, Prefix: prefix}
	return tokenStoreAccess{
		entries: func(ctx context.Context) ([]auth.StoredToken, error) {
			entries, _, err := store.Entries(ctx)
			return entries, err
		},
		add:    store.Add,
		remove: store.Remove,
		where:  "every server on that etcd",
	}, func() { c.Close() }, nil
}

// errNoToken is a deletion that matched no token.
var errNoToken = errors.New("no matching token")

func tokenCreate(args []string) error {
	var id identityFlags
	var stores tokenStoreFlags
	var description, kubeconfigOut, server string
	var ttl time.Duration
	fs := newFlagSet("token create")
	stores.register(fs)
	id.register(fs)
	fs.StringVar(&description, "description", "", "what the token is for (shown by token list)")
	fs.StringVar(&kubeconfigOut, "kubeconfig-out", "", "write a kubeconfig with the token to this file instead of printing the token")
	fs.StringVar(&server, "server", "", "server URL for --kubeconfig-out (default the one in DATA_DIR/admin.kubeconfig)")
	fs.DurationVar(&ttl, "ttl", 0, "how long the token authenticates, as kubeadm token create's flag (0: until deleted)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("--ttl %v is negative", ttl)
	}
	u, err := id.toUser()
	if err != nil {
		return err
	}
	store, ctx, done, err := stores.open()
	if err != nil {
		return err
	}
	defer done()
	var spec pki.KubeconfigSpec
	if kubeconfigOut != "" {
		// Before the token is stored, so that a data directory without a
		// CA stores none that no kubeconfig holds.
		if spec, err = kubeconfigSpec(stores.dataDir, server, u.Name); err != nil {
			return err
		}
	}
	token, err := pki.NewToken()
	if err != nil {
		return err
	}
	entry := auth.NewStoredToken(token, u, time.Now(), ttl, description)
	if err := store.add(ctx, entry); err != nil {
		return err
	}
	if kubeconfigOut == "" {
		fmt.Println(token)
		return nil
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
			return pki.KubeconfigSpec{}, fmt.Errorf("reading the server CA: %w (a kubeconfig takes the server's address and CA from --data-dir, a server's data directory)", err)
		}
		spec.CAPEM = caPEM
	}
	if server != "" {
		spec.Server = server
	}
	return spec, nil
}

func tokenList(args []string) error {
	var stores tokenStoreFlags
	fs := newFlagSet("token list")
	stores.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	store, ctx, done, err := stores.open()
	if err != nil {
		return err
	}
	defer done()
	entries, err := store.entries(ctx)
	if err != nil {
		return err
	}
	// Oldest first, as the file keeps them (etcd gives them in digest order).
	slices.SortStableFunc(entries, func(a, b auth.StoredToken) int { return a.Created.Compare(b.Created) })
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
	var stores tokenStoreFlags
	var user, node string
	var expired bool
	fs := newFlagSet("token delete")
	stores.register(fs)
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
	store, ctx, done, err := stores.open()
	if err != nil {
		return err
	}
	defer done()
	now := time.Now()
	removed, err := store.remove(ctx, func(e auth.StoredToken) bool {
		return (user != "" && e.User == user) || (expired && e.Expires != nil && !now.Before(*e.Expires)) || slices.ContainsFunc(ids, func(id string) bool {
			return id != "" && (id == e.ID || (len(id) >= 6 && strings.HasPrefix(e.SHA256, id)))
		})
	})
	switch {
	case err != nil:
		return err
	case removed == 0 && expired && len(ids) == 0 && user == "":
		// A clean-up with nothing to clean (as from cron) did its job.
		fmt.Fprintln(os.Stderr, "no token has expired")
		return nil
	case removed == 0:
		return errNoToken
	}
	fmt.Fprintf(os.Stderr, "deleted %d token(s); %s stops accepting them within a second\n", removed, store.where)
	return nil
}
