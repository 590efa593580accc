package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// identityLeases lists the identity leases through s with kubectl, as
// "name holder" lines, sorted.
func identityLeases(t *testing.T, s *server) []string {
	t.Helper()
	out := s.kubectl(t, "get", "lease", "-n", "kube-system", "-l", "apiserver.kubernetes.io/identity=leasehold",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.holderIdentity}{"\n"}{end}`)
	var lines []string
	for l := range strings.Lines(out) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	return lines
}

// Two replicas on one etcd each publish an identity lease, named for the
// replica and held by name_uuid; a replica killed with SIGKILL has its
// lease collected once it goes unrenewed for its duration, and on its
// return publishes the same lease with a new holder.
func TestServerIdentityLeases(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	servers, _ := replicas(t, "--identity-lease-duration", "2s", "--identity-lease-renew-interval", "200ms")
	a, b := servers[0], servers[1]

	var before []string
	eventually(t, 30*time.Second, func() error {
		before = identityLeases(t, a)
		if len(before) != 2 {
			return fmt.Errorf("identity leases %q, want one for each of the two replicas", before)
		}
		for _, l := range before {
			name, holder, _ := strings.Cut(l, " ")
			if !strings.HasPrefix(name, "apiserver-") || !strings.HasPrefix(holder, name+"_") {
				return fmt.Errorf("identity lease %q: want apiserver-… held by its name, an underscore and a UUID", l)
			}
		}
		return nil
	})
	// kubectl's columns show the holder.
	if out := b.kubectl(t, "get", "lease", "-n", "kube-system", "-l", "apiserver.kubernetes.io/identity"); !strings.Contains(out, "HOLDER") || strings.Count(out, "apiserver-") != 4 {
		t.Errorf("kubectl get lease through the other replica:\n%s", out)
	}

	// Which lease is b's: the one that goes when b does.
	b.kill()
	var left []string
	eventually(t, 60*time.Second, func() error {
		left = identityLeases(t, a)
		if len(left) != 1 {
			return fmt.Errorf("identity leases %q after a replica was killed, want the live one alone", left)
		}
		return nil
	})
	var gone string
	for _, l := range before {
		if l != left[0] {
			gone = l
		}
	}
	if gone == "" {
		t.Fatalf("the surviving lease %q is not one of %q", left[0], before)
	}

	// The killed replica comes back on the same address: same lease name,
	// a new holder.
	b2 := b.restart(t)
	goneName, goneHolder, _ := strings.Cut(gone, " ")
	eventually(t, 30*time.Second, func() error {
		now := identityLeases(t, b2)
		for _, l := range now {
			name, holder, _ := strings.Cut(l, " ")
			if name == goneName && holder != goneHolder && strings.HasPrefix(holder, name+"_") && len(now) == 2 {
				return nil
			}
		}
		return fmt.Errorf("identity leases %q after the restart, want %s back with a new holder", now, goneName)
	})
}
