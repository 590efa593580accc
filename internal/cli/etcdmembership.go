package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// `leasehold etcd member list|add|remove` change who is in an etcd cluster,
// as `etcdctl member` does, so that a cluster of `leasehold etcd` members
// can replace one whose machine or disk is lost: remove it, add its
// successor, and start the successor with --initial-cluster-state existing
// on an empty data directory. They work on any etcd v3 cluster.

// etcdMemberTimeout bounds each membership command's calls.
const etcdMemberTimeout = 30 * time.Second

const etcdMemberUsage = "usage: leasehold etcd member list|add|promote|remove [flags] [NAME|ID], leasehold etcd status [flags], or leasehold etcd snapshot [flags] FILE"

func runEtcdMember(ctx context.Context, args []string) error {
	if done, err := noSubcommand(args, etcdMemberUsage, "etcd member"); done {
		return err
	}
	var endpoints, caFile, certFile, keyFile, peerURLs string
	var learner bool
	command := "etcd member " + args[0]
	if args[0] == "status" || args[0] == "snapshot" {
		command = "etcd " + args[0]
	}
	fs := newFlagSet(command)
	fs.StringVar(&endpoints, "etcd-servers", "http://127.0.0.1:2379", "comma-separated client URLs of the cluster's members, as serve's --etcd-servers")
	fs.StringVar(&caFile, "etcd-cafile", "", "CA bundle to verify etcd with")
	fs.StringVar(&certFile, "etcd-certfile", "", "client certificate for etcd")
	fs.StringVar(&keyFile, "etcd-keyfile", "", "client key for etcd")
	var run func(context.Context, *clientv3.Client, []string) error
	switch args[0] {
	case "list":
		run = func(ctx context.Context, c *clientv3.Client, _ []string) error { return memberList(ctx, c, os.Stdout) }
	case "add":
		fs.StringVar(&peerURLs, "peer-urls", "", "comma-separated peer URLs of the new member (its --initial-advertise-peer-urls); required")
		fs.BoolVar(&learner, "learner", false, "add the member as a learner, which takes in the data without a vote until leasehold etcd member promote, so that its catching up counts in no quorum")
		run = func(ctx context.Context, c *clientv3.Client, names []string) error {
			return memberAdd(ctx, c, names[0], splitList(peerURLs), learner, os.Stdout)
		}
	case "status":
		run = func(ctx context.Context, c *clientv3.Client, _ []string) error {
			return endpointStatus(ctx, c, os.Stdout)
		}
	case "snapshot":
		run = func(ctx context.Context, c *clientv3.Client, file []string) error {
			return etcdSnapshot(ctx, c, file[0], os.Stdout)
		}
	case "promote":
		run = func(ctx context.Context, c *clientv3.Client, names []string) error {
			return memberPromote(ctx, c, names[0], os.Stdout)
		}
	case "remove":
		run = func(ctx context.Context, c *clientv3.Client, names []string) error {
			return memberRemove(ctx, c, names[0], os.Stdout)
		}
	default:
		return fmt.Errorf("unknown etcd member subcommand %q (want list, add, promote or remove)", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	names := 1
	if args[0] == "list" || args[0] == "status" {
		names = 0
	}
	if fs.NArg() != names {
		return fmt.Errorf("%s\n(flags go before the member's name: leasehold etcd member add --peer-urls URL NAME)", etcdMemberUsage)
	}
	if args[0] == "add" && len(splitList(peerURLs)) == 0 {
		return errors.New("leasehold etcd member add: --peer-urls is required")
	}
	urls := splitList(endpoints)
	if len(urls) == 0 {
		return errors.New("--etcd-servers names no URL")
	}
	log, err := newLogger("text", "error")
	if err != nil {
		return err
	}
	cfg, err := etcdClientConfig(urls, caFile, certFile, keyFile, log)
	if err != nil {
		return err
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("connecting to etcd: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, etcdMemberTimeout)
	defer cancel()
	if err := run(ctx, c, fs.Args()); err != nil {
		hint := ""
		if certFile == "" && slices.ContainsFunc(urls, func(u string) bool { return strings.HasPrefix(u, "https://") }) {
			// etcd answers a TLS client without a certificate it asks for
			// with nothing but a closed connection.
			hint = " (on https: a cluster that asks for client certificates needs --etcd-cafile, --etcd-certfile and --etcd-keyfile)"
		}
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("etcd at %s did not answer within %s%s", strings.Join(urls, ","), etcdMemberTimeout, hint)
		case errors.Is(err, errNoAnswer):
			return fmt.Errorf("%w%s", err, hint)
		}
		return err
	}
	return nil
}

// memberList writes a table of the cluster's members. A member added but
// not yet started has no name and no client URLs.
func memberList(ctx context.Context, c *clientv3.Client, w io.Writer) error {
	resp, err := c.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tPEER URLS\tCLIENT URLS\tLEARNER")
	for _, m := range resp.Members {
		status := "started"
		if m.Name == "" {
			status = "unstarted"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\n", types.ID(m.ID), m.Name, status,
			strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","), m.IsLearner)
	}
	return tw.Flush()
}

// endpointStatus writes a table of what each of c's endpoints says of its
// member, as `etcdctl endpoint status` does, and the cluster's alarms. An
// endpoint that does not answer within etcdStatusTimeout gets a row of
// its error, and the command fails once the table is written.
func endpointStatus(ctx context.Context, c *clientv3.Client, w io.Writer) error {
	names := map[uint64]string{}
	if members, err := c.MemberList(ctx, clientv3.WithSerializable()); err == nil {
		for _, m := range members.Members {
			names[m.ID] = m.Name
		}
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tID\tNAME\tVERSION\tDB SIZE\tIN USE\tLEADER\tLEARNER\tRAFT TERM\tRAFT INDEX\tERRORS")
	var failed []string
	for _, ep := range c.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, etcdStatusTimeout)
		st, err := c.Status(sctx, ep)
		cancel()
		if err != nil {
			failed = append(failed, ep)
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no answer within %s", etcdStatusTimeout)
			}
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\t\t\t%v\n", ep, err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\t%t\t%d\t%d\t%s\n", ep, types.ID(st.Header.MemberId), names[st.Header.MemberId],
			st.Version, humanize.IBytes(uint64(st.DbSize)), humanize.IBytes(uint64(st.DbSizeInUse)),
			st.Leader == st.Header.MemberId, st.IsLearner, st.RaftTerm, st.RaftIndex, strings.Join(st.Errors, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if alarms, err := c.AlarmList(ctx); err == nil {
		for _, a := range alarms.Alarms {
			fmt.Fprintf(w, "alarm %s raised by member %s %s\n", a.Alarm, types.ID(a.MemberID), names[a.MemberID])
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s %w", strings.Join(failed, ", "), errNoAnswer)
	}
	return nil
}

// errNoAnswer is endpoints that did not answer a status request.
var errNoAnswer = errors.New("did not answer")

// etcdSnapshot saves a snapshot of the cluster at c into file, as
// `leasehold snapshot save` saves one through a server: for a cluster of
// `leasehold etcd` members backed up apart from its servers.
func etcdSnapshot(ctx context.Context, c *clientv3.Client, file string, w io.Writer) error {
	rev, size, err := saveSnapshotFile(file, fromStream(ctx, c.Snapshot))
	if err != nil {
		return err
	}
	snapshotSaved(w, file, rev, size)
	return nil
}

// etcdStatusTimeout bounds the wait for one endpoint's status.
const etcdStatusTimeout = 5 * time.Second

// memberAdd adds a member, a learner if learner is set, and writes how to
// start it. It refuses while another added member has not started: etcd
// counts a voting one in the quorum already, and the new member's
// --initial-cluster could not name it.
func memberAdd(ctx context.Context, c *clientv3.Client, name string, peerURLs []string, learner bool, w io.Writer) error {
	before, err := c.MemberList(ctx)
	if err != nil {
		return err
	}
	for _, m := range before.Members {
		if m.Name == "" {
			return fmt.Errorf("member %s (%s) was added but has not started: start it, or remove it, before adding another", types.ID(m.ID), strings.Join(m.PeerURLs, ","))
		}
		if m.Name == name {
			return fmt.Errorf("the cluster has a member named %s already (%s)", name, types.ID(m.ID))
		}
	}
	add, what := c.MemberAdd, "member"
	if learner {
		add, what = c.MemberAddAsLearner, "learner"
	}
	resp, err := add(ctx, peerURLs)
	if err != nil {
		return fmt.Errorf("adding %s %s: %w%s", what, name, err, unhealthyHint(err))
	}
	fmt.Fprintf(w, "Added %s %s (ID %s) to the cluster. Start it on an empty data directory with:\n\n%s\n",
		what, name, types.ID(resp.Member.ID).String(), joinCommand(name, resp.Member.ID, peerURLs, resp.Members))
	if learner {
		fmt.Fprintf(w, "\nOnce it has caught up, let it vote: leasehold etcd member promote %s\n", name)
	}
	return nil
}

// memberPromote makes the learner named, by its name or its hexadecimal
// ID, a voting member.
func memberPromote(ctx context.Context, c *clientv3.Client, which string, w io.Writer) error {
	m, err := findMember(ctx, c, which)
	if err != nil {
		return err
	}
	if _, err := c.MemberPromote(ctx, m.ID); err != nil {
		hint := unhealthyHint(err)
		if errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			hint = " (it has yet to catch up with the leader: try again in a few seconds)"
		}
		return fmt.Errorf("promoting member %s: %w%s", which, err, hint)
	}
	fmt.Fprintf(w, "Promoted member %s (ID %s): it votes.\n", cmp.Or(m.Name, "(unstarted)"), types.ID(m.ID))
	return nil
}

// findMember is the member named, by its name or its hexadecimal ID.
func findMember(ctx context.Context, c *clientv3.Client, which string) (*pb.Member, error) {
	resp, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(resp.Members, func(m *pb.Member) bool { return m.Name == which || types.ID(m.ID).String() == which })
	if i < 0 {
		var names []string
		for _, m := range resp.Members {
			names = append(names, cmp.Or(m.Name, "(unstarted)")+" "+types.ID(m.ID).String())
		}
		return nil, fmt.Errorf("no member is named %s or has that ID; the members: %s", which, strings.Join(names, ", "))
	}
	return resp.Members[i], nil
}

// joinCommand is the `leasehold etcd` command line that starts member id,
// just added as name, into the cluster of members.
func joinCommand(name string, id uint64, peerURLs []string, members []*pb.Member) string {
	var cluster []string
	for _, m := range members {
		n := m.Name
		if m.ID == id {
			n = name
		}
		for _, u := range m.PeerURLs {
			cluster = append(cluster, n+"="+u)
		}
	}
	peers := strings.Join(peerURLs, ",")
	cmd := fmt.Sprintf("  leasehold etcd --name %s --data-dir DIR --listen-client-urls URL \\\n"+
		"    --listen-peer-urls %s --initial-advertise-peer-urls %s \\\n"+
		"    --initial-cluster %s --initial-cluster-state %s",
		name, peers, peers, strings.Join(cluster, ","), embed.ClusterStateFlagExisting)
	if !slices.ContainsFunc(peerURLs, func(u string) bool { return strings.HasPrefix(u, "https://") }) {
		return cmd
	}
	// A cluster on TLS: the member needs a certificate of the cluster's CA
	// and the flags of the other members.
	return fmt.Sprintf("  leasehold etcd cert --member %[1]s --hosts HOST    # where the cluster's CA is; copy %[1]s.crt, %[1]s.key and ca.crt to PKI\n"+
		"%[2]s \\\n"+
		"    --cert-file PKI/%[1]s.crt --key-file PKI/%[1]s.key --trusted-ca-file PKI/ca.crt --client-cert-auth \\\n"+
		"    --peer-cert-file PKI/%[1]s.crt --peer-key-file PKI/%[1]s.key --peer-trusted-ca-file PKI/ca.crt --peer-client-cert-auth",
		name, cmd)
}

// memberRemove removes the member named, by its name or its hexadecimal ID.
func memberRemove(ctx context.Context, c *clientv3.Client, which string, w io.Writer) error {
	m, err := findMember(ctx, c, which)
	if err != nil {
		return err
	}
	if _, err := c.MemberRemove(ctx, m.ID); err != nil {
		return fmt.Errorf("removing member %s: %w%s", which, err, unhealthyHint(err))
	}
	fmt.Fprintf(w, "Removed member %s (ID %s) from the cluster. It cannot rejoin with its data: to bring it back, add it again and start it on an empty data directory.\n",
		cmp.Or(m.Name, "(unstarted)"), types.ID(m.ID).String())
	return nil
}

// unhealthyHint says why etcd refused a change of members as unhealthy:
// with its strict reconfiguration check, the leader adds a member only
// when it has been connected to every voting member for etcd's health
// interval (5 s), and removes one only when those that remain and are
// connected are a quorum.
func unhealthyHint(err error) string {
	if !errors.Is(err, rpctypes.ErrUnhealthy) {
		return ""
	}
	return " (etcd makes no change of members unless every member it keeps has been connected to it for 5 s, so that the cluster keeps its quorum: with a member down, remove it before adding its successor; right after a start or a change, try again in a few seconds)"
}
