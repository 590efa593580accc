package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// etcdMemberCommand runs `leasehold etcd member` with args, and returns
// what it wrote and how it exited.
func etcdMemberCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return startEtcdCommand(t, append([]string{"member"}, args...)...)
}

// startEtcdCommand runs `leasehold etcd` with args to its end, and returns
// what it wrote and how it exited.
func startEtcdCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	p := startProcess(t, append([]string{"etcd"}, args...)...)
	err := p.cmd.Wait()
	return p.out.String(), err
}

// runPrintedMember runs the `leasehold etcd` command that `member add`
// printed in out, as a user would: with its DIR and URL filled in (dataDir,
// and a free loopback address).
func runPrintedMember(t *testing.T, out, dataDir string) *etcdMember {
	t.Helper()
	printed := regexp.MustCompile(`(?s)\n\n  leasehold (etcd .*?)(\n\n|\n$)`).FindStringSubmatch(out)
	if printed == nil {
		t.Fatalf("member add printed no command:\n%s", out)
	}
	client := "http://" + freeAddrs(t, 1)[0]
	args := strings.Fields(strings.NewReplacer("\\\n", " ", " DIR ", " "+dataDir+" ", " URL ", " "+client+" ").Replace(printed[1] + " "))
	return runEtcdMember(t, dataDir+".log", client, args[1:]...)
}

// TestReplaceLostEtcdMember: a member of three `leasehold etcd` members
// loses its machine and its data. Started again on an empty directory, it
// is refused with directions; `leasehold etcd member remove` takes it out,
// `member add` takes its successor in and prints the command that starts
// it, and that command, run as printed, starts a member that the cluster
// needs for its quorum once another member is lost: the server's writes
// go on through the one original member left and the successor.
func TestReplaceLostEtcdMember(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	members := startEtcdCluster(t, dir, "a", "b", "c")
	a, b, c := members[0], members[1], members[2]
	s := serveFor(t, filepath.Join(dir, "data"), "", dir, "--etcd-servers", endpoints(members))
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("kept", ns, "before"), "create", "-f", "-")

	c.kill(t)
	if err := os.RemoveAll(filepath.Join(dir, "etcdc")); err != nil {
		t.Fatal(err)
	}
	again := startProcess(t, append([]string{"etcd"}, c.args...)...)
	if err := again.cmd.Wait(); err == nil || !strings.Contains(again.out.String(), "leasehold etcd member remove c") {
		t.Fatalf("member c started again on an empty directory: want a failure that says to remove it; got %v:\n%s", err, again.out.String())
	}

	survivors := "--etcd-servers=" + a.url + "," + b.url
	peer := "http://" + freeAddrs(t, 1)[0]
	if out, err := etcdMemberCommand(t, "add", survivors, "--peer-urls", peer, "d"); err == nil || !strings.Contains(out, "remove it before adding its successor") {
		t.Fatalf("member add with a member down: want etcd's refusal and what to do; got %v:\n%s", err, out)
	}
	if out, err := etcdMemberCommand(t, "remove", survivors, "c"); err != nil || !strings.Contains(out, "Removed member c") {
		t.Fatalf("member remove c: %v\n%s", err, out)
	}
	// etcd adds a member only once the leader has been connected to every
	// other for 5 s, which a cluster this young may not have been.
	var out string
	eventually(t, 30*time.Second, func() error {
		var err error
		if out, err = etcdMemberCommand(t, "add", survivors, "--peer-urls", peer, "d"); err != nil {
			if !strings.Contains(out, "try again in a few seconds") {
				t.Fatalf("member add d: %v\n%s", err, out)
			}
			return fmt.Errorf("member add d: %v\n%s", err, out)
		}
		return nil
	})

	d := runPrintedMember(t, out, filepath.Join(dir, "etcdd"))
	d.waitHealthy(t)
	out, err := etcdMemberCommand(t, "list", "--etcd-servers="+d.url)
	if err != nil {
		t.Fatalf("member list: %v\n%s", err, out)
	}
	for _, name := range []string{"a", "b", "d"} {
		if !regexp.MustCompile(`(?m)^[0-9a-f]+ +` + name + ` +started `).MatchString(out) {
			t.Errorf("member list does not show %s started:\n%s", name, out)
		}
	}
	if strings.Contains(out, " c ") {
		t.Errorf("member list still shows c:\n%s", out)
	}

	// Without d's vote, b alone is no quorum of a, b and d.
	a.kill(t)
	eventually(t, time.Minute, func() error {
		_, stderr, err := s.runKubectl(t, "patch", "lease", "kept", "-n", ns, "--type", "merge", "-p", `{"spec":{"holderIdentity":"after"}}`)
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		return nil
	})
	if got := holder(getLease(t, s, ns, "kept")); got != "after" {
		t.Errorf("holder %q after the patch, want after", got)
	}
	// The server stops while b and d still make a quorum, before their
	// cleanups stop d.
	if err := s.stop(); err != nil {
		t.Errorf("leasehold serve did not stop cleanly: %v", err)
	}
}

// TestRestoreEtcdCluster: a cluster of `leasehold etcd` members whose
// every disk is lost comes back from a `leasehold etcd snapshot` file:
// each member restored from it with `leasehold etcd restore` and its own
// flags, and started as before. The server on it, whether stopped for the
// restore or left running through it, serves what the snapshot held, not
// what came after, and its clients' old revisions are gone.
func TestRestoreEtcdCluster(t *testing.T) {
	t.Parallel()
	for _, running := range []bool{false, true} {
		t.Run(map[bool]string{false: "server stopped", true: "server running"}[running], func(t *testing.T) {
			t.Parallel()
			needKubectl(t)
			dir, members, s := clusterServer(t)
			ns := testNamespace(t, s)
			s.kubectlStdin(t, leaseManifest("kept", ns, "before"), "create", "-f", "-")
			file := filepath.Join(dir, "backup.db")
			if out := leasehold(t, "etcd", "snapshot", "--etcd-servers", endpoints(members), file); !strings.Contains(out, "Snapshot saved at "+file) {
				t.Errorf("etcd snapshot printed %q", out)
			}
			s.kubectlStdin(t, leaseManifest("later", ns, "after"), "create", "-f", "-")
			seen := getLease(t, s, ns, "later").ResourceVersion
			if !running {
				if err := s.stop(); err != nil {
					t.Fatal(err)
				}
			}

			// Every member is stopped before any restored one starts: the old
			// cluster's members would lead the restored ones, whose log is shorter.
			for _, m := range members {
				m.stop(t)
			}
			var restarted []*etcdMember
			for _, m := range members {
				data := m.flag("--data-dir")
				if err := os.RemoveAll(data); err != nil {
					t.Fatal(err)
				}
				out := leasehold(t, "etcd", "restore", "--data-dir", data, "--name", m.flag("--name"), "--initial-cluster", m.flag("--initial-cluster"), file)
				if !strings.Contains(out, "as member "+m.flag("--name")) {
					t.Errorf("etcd restore printed %q", out)
				}
				restarted = append(restarted, runEtcdMember(t, m.logFile+".restored", m.url, m.args...))
			}
			for _, m := range restarted {
				m.waitHealthy(t)
			}
			if !running {
				s = s.restart(t)
			}
			// A running server's watch caches find their revisions compacted by
			// the restore's bump, and list again. A list is served from the
			// cache, once it has caught up with etcd.
			back := time.Now()
			eventually(t, time.Minute, func() error {
				out, stderr, err := s.runKubectl(t, "get", "leases", "-n", ns, "-o", "name")
				if err != nil || strings.TrimSpace(out) != "lease.coordination.k8s.io/kept" {
					return fmt.Errorf("the leases after the restore: %v, %q %s; want kept alone", err, out, stderr)
				}
				return nil
			})
			if out, stderr, err := s.runKubectl(t, "get", "lease", "later", "-n", ns); err == nil || !strings.Contains(stderr, "NotFound") {
				t.Errorf("the lease created after the snapshot: %v, %s%s", err, out, stderr)
			}
			t.Logf("the server served the snapshot's state %v after etcd was back", time.Since(back).Round(time.Millisecond))
			if got := holder(getLease(t, s, ns, "kept")); got != "before" {
				t.Errorf("the restored lease's holder %q, want before", got)
			}
			watchGone(t, s.clientset(t).CoordinationV1().Leases(ns), seen)
			list := leasehold(t, "etcd", "member", "list", "--etcd-servers="+members[0].url)
			if n := strings.Count(list, " started "); n != 3 {
				t.Errorf("member list after the restore, want 3 started:\n%s", list)
			}
			// The server stops before the restored members' cleanups stop
			// them; after, it would wait for them to delete its identity.
			if err := s.stop(); err != nil {
				t.Errorf("leasehold serve did not stop cleanly: %v", err)
			}
		})
	}
}

// TestAddLearnerMember: a member lost and removed, its successor added as
// a learner (`member add --learner`) takes in the data without a vote;
// `member promote` then makes it vote, and the cluster keeps its quorum
// through another loss thanks to it.
func TestAddLearnerMember(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	members := startEtcdCluster(t, dir, "a", "b", "c")
	a, b, c := members[0], members[1], members[2]
	c.kill(t)
	up := "--etcd-servers=" + a.url + "," + b.url
	if out, err := etcdMemberCommand(t, "remove", up, "c"); err != nil {
		t.Fatalf("member remove c: %v\n%s", err, out)
	}
	peer := "http://" + freeAddrs(t, 1)[0]
	var out string
	eventually(t, 30*time.Second, func() error {
		var err error
		if out, err = etcdMemberCommand(t, "add", up, "--learner", "--peer-urls", peer, "d"); err != nil {
			return fmt.Errorf("member add --learner d: %v\n%s", err, out)
		}
		return nil
	})
	if !strings.Contains(out, "leasehold etcd member promote d") {
		t.Errorf("member add --learner does not say how to promote:\n%s", out)
	}
	if list, err := etcdMemberCommand(t, "list", up); err != nil || !regexp.MustCompile(`(?m)^[0-9a-f]+ +unstarted .* true$`).MatchString(list) {
		t.Errorf("member list after add --learner: %v; want an unstarted learner:\n%s", err, list)
	}
	runPrintedMember(t, out, filepath.Join(dir, "etcdd"))
	eventually(t, time.Minute, func() error {
		if out, err := etcdMemberCommand(t, "promote", up, "d"); err != nil {
			return fmt.Errorf("member promote d: %v\n%s", err, out)
		}
		return nil
	})
	list, err := etcdMemberCommand(t, "list", up)
	if err != nil || !regexp.MustCompile(`(?m)^[0-9a-f]+ +d +started .* false$`).MatchString(list) {
		t.Errorf("member list: %v; want d started and voting:\n%s", err, list)
	}

	// `etcd status` shows each member's state: one leader among them,
	// and d no longer a learner.
	d := "http://" + regexp.MustCompile(`(?m)^[0-9a-f]+ +d +started +http://\S+ +http://(\S+)`).FindStringSubmatch(list)[1]
	all := "--etcd-servers=" + a.url + "," + b.url + "," + d
	status, err := startEtcdCommand(t, "status", all)
	if err != nil || strings.Count(status, " 3.7.") != 3 || len(regexp.MustCompile(`(?m)^http://\S+ +[0-9a-f]+ +\S+ +\S+ +\S+ \S+ +\S+ \S+ +true `).FindAllString(status, -1)) != 1 {
		t.Errorf("etcd status: %v; want three members and one leader:\n%s", err, status)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(d) + ` +[0-9a-f]+ +d .* false +[0-9]+ +[0-9]+ *$`).MatchString(status) {
		t.Errorf("etcd status: want d a voting member:\n%s", status)
	}

	// Without d's vote, b alone is no quorum of a, b and d: a put through
	// b's gateway commits only with it. (Raft counts no learner.)
	a.kill(t)
	if status, err := startEtcdCommand(t, "status", all); err == nil || !strings.Contains(status, a.url+" ") {
		t.Errorf("etcd status with a member down: %v; want a failure naming it:\n%s", err, status)
	}
	eventually(t, time.Minute, func() error {
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Post(b.url+"/v3/kv/put", "application/json", strings.NewReader(`{"key":"bGVhcm5lcg==","value":"dm90ZXM="}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("put through b: %s %s", resp.Status, body)
		}
		return nil
	})
}
