package cli

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/store/embedded"
)

func init() {
	register(&command{name: "etcd", summary: "run one etcd member (for an external cluster behind several servers); etcd member list|add|promote|remove changes who is in the cluster, etcd status shows each member's state, etcd snapshot saves and etcd restore restores the cluster's data, etcd cert issues certificates", run: runEtcd})
}

func runEtcd(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "member":
			return runEtcdMember(ctx, args[1:])
		case "cert":
			return runEtcdCert(args[1:])
		case "restore":
			return etcdRestore(args[1:])
		case "status", "snapshot":
			return runEtcdMember(ctx, args)
		}
	}
	var dataDir, name, clientURLs, peerURLs, advertiseClients, advertisePeers, initialCluster, clusterState, logLevel, logFormat string
	var catchUp uint64
	var quota int64
	var clientTLS, peerTLS transport.TLSInfo
	fs := newFlagSet("etcd")
	fs.StringVar(&dataDir, "data-dir", "./leasehold-etcd", "the member's data directory")
	fs.StringVar(&name, "name", "leasehold", "the member's name in --initial-cluster")
	fs.StringVar(&clientURLs, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve clients on")
	fs.StringVar(&peerURLs, "listen-peer-urls", "http://127.0.0.1:2380", "comma-separated URLs to talk to other members on")
	fs.StringVar(&advertiseClients, "advertise-client-urls", "", "comma-separated client URLs the member gives for itself (default --listen-client-urls)")
	fs.StringVar(&advertisePeers, "initial-advertise-peer-urls", "", "comma-separated peer URLs the member gives the others for itself, as --initial-cluster names them (default --listen-peer-urls)")
	fs.StringVar(&initialCluster, "initial-cluster", "", "NAME=PEER-URL,… of every member of a new cluster, or of the cluster a member joins (default this member alone)")
	fs.StringVar(&clusterState, "initial-cluster-state", embed.ClusterStateFlagNew, "new: start a new cluster of --initial-cluster; existing: join the running cluster as a member added with leasehold etcd member add (read only on the first start)")
	fs.Int64Var(&quota, "quota-backend-bytes", embedded.DefaultQuotaBackendBytes, "the database size limit: at it the cluster refuses writes but deletions, and once objects are deleted the member reclaims its space (compacts, defragments and disarms its NOSPACE alarm) within 10 s")
	fs.StringVar(&clientTLS.CertFile, "cert-file", "", "certificate to serve clients with, over https:// client URLs (leasehold etcd cert --member issues one)")
	fs.StringVar(&clientTLS.KeyFile, "key-file", "", "key of --cert-file")
	fs.StringVar(&clientTLS.TrustedCAFile, "trusted-ca-file", "", "CA bundle that clients' certificates must chain to, with --client-cert-auth")
	fs.BoolVar(&clientTLS.ClientCertAuth, "client-cert-auth", false, "serve only clients with a certificate that --trusted-ca-file signed")
	fs.StringVar(&peerTLS.CertFile, "peer-cert-file", "", "certificate to serve and dial the other members with, over https:// peer URLs")
	fs.StringVar(&peerTLS.KeyFile, "peer-key-file", "", "key of --peer-cert-file")
	fs.StringVar(&peerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CA bundle that the other members' certificates must chain to")
	fs.BoolVar(&peerTLS.ClientCertAuth, "peer-client-cert-auth", false, "accept only members with a certificate that --peer-trusted-ca-file signed")
	fs.Uint64Var(&catchUp, "snapshot-catchup-entries", 0, fmt.Sprintf("raft entries kept in memory after each snapshot for followers that fall behind (default %d in a cluster of several, %d for a member alone)", embedded.ClusterCatchUpEntries, embedded.SingleMemberCatchUpEntries))
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("leasehold etcd takes flags only, not %q (its commands: leasehold etcd member|status|snapshot|restore|cert)", fs.Arg(0))
	}
	log, err := newLogger(logFormat, logLevel)
	if err != nil {
		return err
	}
	if quota <= 0 {
		return fmt.Errorf("--quota-backend-bytes must be positive, not %d", quota)
	}
	cfg := embedded.Config{Dir: dataDir, Name: name, InitialCluster: initialCluster, ClusterState: clusterState,
		ClientTLS: clientTLS, PeerTLS: peerTLS, QuotaBackendBytes: quota, CatchUpEntries: catchUp, Logger: log}
	for _, l := range []struct {
		flag, value string
		urls        *[]url.URL
		optional    bool
	}{
		{"--listen-client-urls", clientURLs, &cfg.ClientURLs, false},
		{"--listen-peer-urls", peerURLs, &cfg.PeerURLs, false},
		{"--advertise-client-urls", advertiseClients, &cfg.AdvertiseClientURLs, true},
		{"--initial-advertise-peer-urls", advertisePeers, &cfg.AdvertisePeerURLs, true},
	} {
		if l.optional && l.value == "" {
			continue
		}
		if *l.urls, err = parseURLs(l.value); err != nil {
			return fmt.Errorf("%s: %w", l.flag, err)
		}
	}
	for _, side := range []struct {
		what       string
		urls       []url.URL
		advertised []url.URL
		tls        transport.TLSInfo
	}{
		{"client", cfg.ClientURLs, orURLs(cfg.AdvertiseClientURLs, cfg.ClientURLs), clientTLS},
		{"peer", cfg.PeerURLs, orURLs(cfg.AdvertisePeerURLs, cfg.PeerURLs), peerTLS},
	} {
		if err := checkTLSURLs(side.what, side.urls, side.tls); err != nil {
			return err
		}
		if err := checkCertificateHosts(side.tls.CertFile, side.advertised, name); err != nil {
			return err
		}
	}
	// etcd serves the default registry's metrics on its client URLs.
	prometheus.MustRegister(certificateFileExpiry(map[string]string{
		"etcd-client": clientTLS.CertFile, "etcd-peer": peerTLS.CertFile,
		"etcd-ca": clientTLS.TrustedCAFile, "etcd-peer-ca": peerTLS.TrustedCAFile,
	})...)
	e, err := embedded.Start(cfg)
	if err != nil {
		if strings.Contains(err.Error(), "has already been bootstrapped") {
			// etcd's words for a member that lost its data directory and
			// is started again as if its cluster were new.
			err = fmt.Errorf("%w: the cluster already has a member %s, started before with data that %s does not hold; to replace a member whose data is lost, remove it (leasehold etcd member remove %s), add it again (leasehold etcd member add), and start it with --initial-cluster-state existing", err, name, dataDir, name)
		}
		return err
	}
	defer e.Close()
	log.Info("etcd member serving clients", "name", name, "clientURLs", strings.Join(e.Endpoints(), ","))
	// As the embedded member's server does: once objects are deleted
	// from a full database, its space is reclaimed and writes resume.
	space := e.SpaceKeeper(log, "--quota-backend-bytes")
	space.Check(ctx)
	spaceCtx, stopSpace := context.WithCancel(ctx)
	spaceDone := make(chan struct{})
	go func() { space.Run(spaceCtx, clock.RealClock{}, spaceCheckInterval); close(spaceDone) }()
	defer func() { stopSpace(); <-spaceDone }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
}

// checkTLSURLs refuses what etcd takes with no more than a warning: TLS
// flags for URLs that are not https (etcd ignores them), and certificates
// required of clients without the CA that signs them. etcd itself refuses
// https URLs without a certificate, and a certificate without its key.
func checkTLSURLs(what string, urls []url.URL, tls transport.TLSInfo) error {
	secure := slices.ContainsFunc(urls, func(u url.URL) bool { return u.Scheme == "https" })
	switch {
	case !secure && (tls.CertFile != "" || tls.TrustedCAFile != "" || tls.ClientCertAuth):
		return fmt.Errorf("TLS flags are given for %s URLs that are not https://", what)
	case tls.ClientCertAuth && tls.TrustedCAFile == "":
		return fmt.Errorf("requiring %s certificates needs the CA file that signs them", what)
	}
	return nil
}

// checkCertificateHosts refuses a certificate that does not name the
// hosts of the URLs the member is reached at: every TLS handshake with it
// would fail, and only the other end would say why.
func checkCertificateHosts(certFile string, urls []url.URL, member string) error {
	if certFile == "" {
		return nil
	}
	data, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	cert, err := pki.ParseCertPEM(data)
	if err != nil {
		return fmt.Errorf("%s: %w", certFile, err)
	}
	for _, u := range urls {
		host := u.Hostname()
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue
		}
		if err := cert.VerifyHostname(host); err != nil {
			return fmt.Errorf("%s does not name %s, which the member is reached at (%s): issue it again with leasehold etcd cert --member %s --hosts %s", certFile, host, err, member, host)
		}
	}
	return nil
}

// orURLs is urls, or def when there are none.
func orURLs(urls, def []url.URL) []url.URL {
	if len(urls) == 0 {
		return def
	}
	return urls
}

func parseURLs(s string) ([]url.URL, error) {
	var out []url.URL
	for _, part := range splitList(s) {
		u, err := url.Parse(part)
		if err != nil {
			return nil, err
		}
		out = append(out, *u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no URL", s)
	}
	return out, nil
}
