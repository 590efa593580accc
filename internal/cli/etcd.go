package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/leasehold/leasehold/internal/store/embedded"
)

func init() {
	register(&command{name: "etcd", summary: "run one etcd member (for an external cluster behind several servers)", run: runEtcd})
}

func runEtcd(ctx context.Context, args []string) error {
	var dataDir, name, clientURLs, peerURLs, initialCluster, logLevel, logFormat string
	var catchUp uint64
	fs := newFlagSet("etcd")
	fs.StringVar(&dataDir, "data-dir", "./leasehold-etcd", "the member's data directory")
	fs.StringVar(&name, "name", "leasehold", "the member's name in --initial-cluster")
	fs.StringVar(&clientURLs, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve clients on")
	fs.StringVar(&peerURLs, "listen-peer-urls", "http://127.0.0.1:2380", "comma-separated URLs to talk to other members on")
	fs.StringVar(&initialCluster, "initial-cluster", "", "NAME=PEER-URL,… of every member of a new cluster (default this member alone)")
	fs.Uint64Var(&catchUp, "snapshot-catchup-entries", 0, fmt.Sprintf("raft entries kept in memory after each snapshot for followers that fall behind (default %d in a cluster of several, %d for a member alone)", embedded.ClusterCatchUpEntries, embedded.SingleMemberCatchUpEntries))
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(logFormat, logLevel)
	if err != nil {
		return err
	}
	clients, err := parseURLs(clientURLs)
	if err != nil {
		return fmt.Errorf("--listen-client-urls: %w", err)
	}
	peers, err := parseURLs(peerURLs)
	if err != nil {
		return fmt.Errorf("--listen-peer-urls: %w", err)
	}
	e, err := embedded.Start(embedded.Config{Dir: dataDir, Name: name, ClientURLs: clients, PeerURLs: peers, InitialCluster: initialCluster, CatchUpEntries: catchUp, Logger: log})
	if err != nil {
		return err
	}
	defer e.Close()
	log.Info("etcd member serving clients", "name", name, "clientURLs", strings.Join(e.Endpoints(), ","))
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
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
