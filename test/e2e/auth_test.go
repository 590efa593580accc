package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

// leasehold runs the leasehold binary with args and returns its stdout.
func leasehold(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, leaseholdBin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("leasehold %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// asToken runs kubectl with a bearer token instead of the admin's.
func (s *server) asToken(t *testing.T, token string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return s.runKubectl(t, append([]string{"--token=" + token}, args...)...)
}

// withKubeconfig runs kubectl with another kubeconfig.
func (s *server) withKubeconfig(t *testing.T, kubeconfig, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return s.runKubectlEnv(t, []string{"KUBECONFIG=" + kubeconfig}, stdin, args...)
}

func TestAuthUnauthenticated(t *testing.T) {
	s := shared(t)
	pool := certPool(t, filepath.Join(s.dataDir, "ca.crt"))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	for _, token := range []string{"", "not-a-token"} {
		req, _ := http.NewRequest("GET", s.url()+"/api/v1/namespaces", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st struct{ Kind, Reason string }
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || st.Kind != "Status" || st.Reason != "Unauthorized" {
			t.Errorf("token %q: got %d %+v, want 401 Status Unauthorized", token, resp.StatusCode, st)
		}
	}
	_, errOut, err := s.asToken(t, "not-a-token", "get", "lease", "-n", "default")
	if err == nil || !strings.Contains(errOut, "error: You must be logged in to the server") {
		t.Errorf("kubectl with a wrong token: %v\n%s", err, errOut)
	}
}

func TestAuthRBACWithKubectl(t *testing.T) {
	s := shared(t)
	ns := testNamespace(t, s)
	user := "alice-" + ns
	token := strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", user, "--group", "devs"))
	// A new token works at its first use, unless another test's unknown
	// token made the server check the store in the last 10 ms; then at
	// the next check.
	eventually(t, 20*time.Second, func() error {
		out, errOut, err := s.asToken(t, token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil || out != user {
			return fmt.Errorf("whoami: %q %v %s", out, err, errOut)
		}
		return nil
	})

	_, errOut, err := s.asToken(t, token, "get", "lease", "x", "-n", ns)
	want := fmt.Sprintf(`Error from server (Forbidden): leases.coordination.k8s.io "x" is forbidden: User %q cannot get resource "leases" in API group "coordination.k8s.io" in the namespace %q`, user, ns)
	if err == nil || strings.TrimSpace(errOut) != want {
		t.Errorf("without a binding:\n got %s\nwant %s", errOut, want)
	}
	// can-i answers "no" with exit status 1.
	if out, _, err := s.runKubectl(t, "auth", "can-i", "update", "leases", "-n", ns, "--as", user); err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("can-i before the binding: %q, %v; want no", out, err)
	}

	s.kubectl(t, "create", "role", "lease-writer", "--verb=get,list,watch,update,create", "--resource=leases", "-n", ns)
	s.kubectl(t, "create", "rolebinding", "alice-writes", "--role", "lease-writer", "--user", user, "-n", ns)
	out := s.kubectl(t, "get", "rolebinding", "alice-writes", "-n", ns, "-o", "wide")
	if header, rows := tableRows(t, out); len(rows) != 1 || strings.Join(header, " ") != "NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS" || rows[0][1] != "Role/lease-writer" || rows[0][3] != user {
		t.Errorf("kubectl get rolebinding -o wide:\n%s", out)
	}
	if header, _ := tableRows(t, s.kubectl(t, "get", "role", "-n", ns)); strings.Join(header, " ") != "NAME CREATED AT" {
		t.Errorf("role columns %v", header)
	}
	eventually(t, 20*time.Second, func() error {
		_, errOut, err := s.runKubectlStdin(t, leaseManifest("x", ns, user), "--token="+token, "create", "-f", "-")
		if err != nil {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		return nil
	})
	if out := strings.TrimSpace(s.kubectl(t, "auth", "can-i", "update", "leases", "-n", ns, "--as", user)); out != "yes" {
		t.Errorf("can-i update after the binding: %q", out)
	}
	if out, _, err := s.runKubectl(t, "auth", "can-i", "delete", "leases", "-n", ns, "--as", user); err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("can-i delete: %q, %v; want no", out, err)
	}
	if out, _, err := s.runKubectl(t, "auth", "can-i", "update", "leases", "-n", "default", "--as", user); err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("can-i in another namespace: %q, %v; want no", out, err)
	}
	list, _, err := s.asToken(t, token, "auth", "can-i", "--list", "-n", ns)
	if err != nil || !strings.Contains(list, "leases.coordination.k8s.io") || !strings.Contains(list, "[get list watch update create]") {
		t.Errorf("can-i --list: %v\n%s", err, list)
	}
	if out, _, err := s.asToken(t, token, "get", "lease", "x", "-n", ns, "-o", "jsonpath={.spec.holderIdentity}"); err != nil || out != user {
		t.Errorf("get after the binding: %q, %v", out, err)
	}

	// The audit log has both decisions with their reasons.
	eventually(t, 20*time.Second, func() error {
		events := auditEvents(t, s)
		var forbid, allow bool
		for _, ev := range events {
			if ev.User.Username != user || ev.Stage != "ResponseComplete" || ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns {
				continue
			}
			switch ev.Annotations["authorization.k8s.io/decision"] {
			case "forbid":
				forbid = forbid || ev.ResponseStatus.Code == 403
			case "allow":
				allow = allow || strings.HasPrefix(ev.Annotations["authorization.k8s.io/reason"], `RBAC: allowed by RoleBinding "alice-writes/`+ns+`" of Role "lease-writer" to User "`+user+`"`)
			}
		}
		if !forbid || !allow {
			return fmt.Errorf("audit events for %s: forbid %v, allow %v", user, forbid, allow)
		}
		return nil
	})
	if data, _ := os.ReadFile(filepath.Join(s.dataDir, "audit.log")); strings.Contains(string(data), token) {
		t.Error("the audit log holds a bearer token")
	}

	// Revoked, the token stops working.
	leasehold(t, "token", "delete", "--data-dir", s.dataDir, "--user", user)
	eventually(t, 20*time.Second, func() error {
		_, errOut, err := s.asToken(t, token, "get", "lease", "x", "-n", ns)
		if err == nil || !strings.Contains(errOut, "You must be logged in to the server") {
			return fmt.Errorf("revoked token still works: %v %s", err, errOut)
		}
		return nil
	})
}

func TestAuthNodeIdentity(t *testing.T) {
	s := shared(t)
	dir := t.TempDir()
	suffix := fmt.Sprint(time.Now().UnixNano() % 100000)
	web1, web2 := "auth-web-1-"+suffix, "auth-web-2-"+suffix
	kc1, kc2 := filepath.Join(dir, "web-1.kubeconfig"), filepath.Join(dir, "web-2.kubeconfig")
	leasehold(t, "token", "create", "--data-dir", s.dataDir, "--node", web1, "--kubeconfig-out", kc1)
	leasehold(t, "token", "create", "--data-dir", s.dataDir, "--node", web2, "--kubeconfig-out", kc2)
	nodeLease := func(name string) string {
		return leaseManifest(name, "kube-node-lease", name)
	}
	for _, n := range []struct{ name, kc string }{{web1, kc1}, {web2, kc2}} {
		eventually(t, 20*time.Second, func() error {
			_, errOut, err := s.withKubeconfig(t, n.kc, "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+n.name+"\n", "create", "-f", "-")
			if err != nil && !strings.Contains(errOut, "AlreadyExists") {
				return fmt.Errorf("%s creating its node: %v %s", n.name, err, errOut)
			}
			return nil
		})
		if _, errOut, err := s.withKubeconfig(t, n.kc, nodeLease(n.name), "create", "-f", "-"); err != nil {
			t.Fatalf("%s creating its lease: %v %s", n.name, err, errOut)
		}
	}
	t.Cleanup(func() { s.runKubectl(t, "delete", "node", web1, web2, "--wait=false") })
	if out, errOut, err := s.withKubeconfig(t, kc1, "", "label", "lease", web1, "-n", "kube-node-lease", "renewed=yes"); err != nil {
		t.Errorf("web-1 labelling its own lease: %v %s %s", err, out, errOut)
	}
	checks := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"web-1 updating web-2's lease", "", []string{"annotate", "lease", web2, "-n", "kube-node-lease", "x=y"},
			fmt.Sprintf(`leases.coordination.k8s.io %q is forbidden: User "system:node:%s" cannot get resource "leases"`, web2, web1)},
		{"web-1 replacing web-2's lease", nodeLease(web2), []string{"replace", "-f", "-"},
			fmt.Sprintf(`leases.coordination.k8s.io %q is forbidden: User "system:node:%s" cannot update resource "leases"`, web2, web1)},
		{"web-1 updating web-2's node", "", []string{"label", "node", web2, "x=y"},
			fmt.Sprintf(`nodes %q is forbidden: User "system:node:%s" cannot get resource "nodes" in API group "" at the cluster scope`, web2, web1)},
		// Authorized, as in Kubernetes, and refused by node restriction.
		// (kubectl replace sends the PUT without reading the node first.)
		{"web-1 replacing web-2's node", "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + web2 + "\n", []string{"replace", "-f", "-"},
			fmt.Sprintf(`nodes %q is forbidden: node %q is not allowed to modify node %q`, web2, web1, web2)},
		{"web-1 replacing web-2's node status", "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + web2 + "\n", []string{"replace", "--subresource=status", "-f", "-"},
			fmt.Sprintf(`nodes %q is forbidden: node %q is not allowed to modify node %q`, web2, web1, web2)},
		{"web-1 creating a lease named web-2", strings.Replace(nodeLease(web2), "name: "+web2, "name: "+web2+"-x", 1), []string{"create", "-f", "-"},
			"can only access node lease with the same name as the requesting node"},
		{"web-1 reading leases elsewhere", "", []string{"get", "lease", "-n", "default"}, "forbidden"},
		{"web-1 giving itself a role", "", []string{"label", "node", web1, "node-role.kubernetes.io/db="},
			fmt.Sprintf(`nodes %q is forbidden: is not allowed to modify labels: node-role.kubernetes.io/db`, web1)},
		{"web-1 tainting itself", "", []string{"taint", "node", web1, "dedicated=db:NoSchedule"},
			fmt.Sprintf(`nodes %q is forbidden: node %q is not allowed to modify taints`, web1, web1)},
	}
	for _, c := range checks {
		_, errOut, err := s.withKubeconfig(t, kc1, c.stdin, c.args...)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: %v\n got %s\nwant it to contain %s", c.name, err, errOut, c.want)
		}
	}
	// As Kubernetes' node authorizer since 1.34: a node reads its own
	// Node, not its peers'.
	if out, _, err := s.withKubeconfig(t, kc1, "", "get", "nodes", web1, "-o", "name"); err != nil || strings.TrimSpace(out) != "node/"+web1 {
		t.Errorf("web-1 reading its own node: %q, %v", out, err)
	}
	if _, errOut, err := s.withKubeconfig(t, kc1, "", "get", "nodes", web2, "-o", "name"); err == nil || !strings.Contains(errOut, "forbidden") {
		t.Errorf("web-1 reading web-2's node: %v %s, want forbidden", err, errOut)
	}
	if _, errOut, err := s.withKubeconfig(t, kc1, "", "get", "nodes"); err == nil || !strings.Contains(errOut, "forbidden") {
		t.Errorf("web-1 listing the nodes: %v %s, want forbidden", err, errOut)
	}
	if out, _, err := s.withKubeconfig(t, kc1, "", "auth", "can-i", "update", "leases/"+web1, "-n", "kube-node-lease"); err != nil || strings.TrimSpace(out) != "yes" {
		t.Errorf("can-i update own lease: %q %v", out, err)
	}
	if out, _, _ := s.withKubeconfig(t, kc1, "", "auth", "can-i", "update", "leases/"+web2, "-n", "kube-node-lease"); !strings.HasPrefix(strings.TrimSpace(out), "no") {
		t.Errorf("can-i update web-2's lease: %q", out)
	}
	// Kubernetes' node authorizer allows writes of any Node, and its
	// NodeRestriction admission refuses another node's: can-i says yes.
	if out, _, err := s.withKubeconfig(t, kc1, "", "auth", "can-i", "patch", "nodes/"+web2); err != nil || strings.TrimSpace(out) != "yes" {
		t.Errorf("can-i patch web-2's node: %q %v, want yes as in Kubernetes", out, err)
	}
}

func TestAuthClientCertificate(t *testing.T) {
	s := shared(t)
	kc := filepath.Join(t.TempDir(), "carol.kubeconfig")
	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "carol", "--group", "devs", "--kubeconfig-out", kc)
	out, errOut, err := s.withKubeconfig(t, kc, "", "auth", "whoami")
	if err != nil || !strings.Contains(out, "carol") || !strings.Contains(out, "devs") {
		t.Errorf("whoami with a client certificate: %v\n%s%s", err, out, errOut)
	}

	// A certificate of a CA the server does not trust gets 401, as
	// kube-apiserver answers it, not a broken handshake.
	other := pkitest.Issue(t, "mallory", pkitest.Issue(t, "another CA", nil, "ca"), "client")
	pair, err := tls.X509KeyPair(other.CertPEM(), other.KeyPEM(t))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: certPool(t, filepath.Join(s.dataDir, "ca.crt")),
		// As client-go does: its certificate whatever CAs the server names.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil },
	}}}
	resp, err := client.Get(s.url() + "/api/v1/namespaces")
	if err != nil {
		t.Fatalf("a certificate of another CA: %v; want a 401 answer", err)
	}
	defer resp.Body.Close()
	var st metav1.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusUnauthorized || st.Kind != "Status" || st.Reason != metav1.StatusReasonUnauthorized || st.Code != http.StatusUnauthorized {
		t.Errorf("a certificate of another CA: %d %+v, %v; want a 401 Status of reason Unauthorized", resp.StatusCode, st, err)
	}
}

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	APIVersion string `json:"apiVersion"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Namespace, Name, Resource string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Annotations map[string]string `json:"annotations"`
}

func auditEvents(t *testing.T, s *server) []auditEvent {
	t.Helper()
	f, err := os.Open(filepath.Join(s.dataDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if ev.APIVersion != "audit.k8s.io/v1" {
			t.Fatalf("audit line of apiVersion %q", ev.APIVersion)
		}
		out = append(out, ev)
	}
	return out
}

// TestTokenReview: a service that its callers reach with leasehold tokens
// asks the server who holds one, as services on Kubernetes do, with the
// permission of system:auth-delegator; kubectl create -f sends reviews.
func TestTokenReview(t *testing.T) {
	s := shared(t)
	suffix := fmt.Sprint(time.Now().UnixNano() % 100000)
	reviewer, caller := "reviewer-"+suffix, "caller-"+suffix
	kc := filepath.Join(t.TempDir(), "reviewer.kubeconfig")
	leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", reviewer, "--kubeconfig-out", kc)
	token := strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", caller, "--group", "callers"))
	review := func(tok string) string { // JSON, as kubectl create --raw sends its file as it is
		return fmt.Sprintf(`{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": %q}}`, tok)
	}
	raw := []string{"create", "--raw", "/apis/authentication.k8s.io/v1/tokenreviews", "-f", "-"}
	var errOut string
	eventually(t, 20*time.Second, func() error {
		var err error
		if _, errOut, err = s.withKubeconfig(t, kc, review(token), raw...); err == nil || !strings.Contains(errOut, "Forbidden") {
			return fmt.Errorf("%s reviewing a token unbound: %v %s", reviewer, err, errOut)
		}
		return nil
	})
	s.kubectl(t, "create", "clusterrolebinding", reviewer, "--clusterrole=system:auth-delegator", "--user="+reviewer)
	t.Cleanup(func() { s.runKubectl(t, "delete", "clusterrolebinding", reviewer) })
	var got authenticationv1.TokenReview
	eventually(t, 20*time.Second, func() error {
		out, errOut, err := s.withKubeconfig(t, kc, review(token), raw...)
		if err != nil {
			return fmt.Errorf("%s reviewing: %v %s", reviewer, err, errOut)
		}
		return json.Unmarshal([]byte(out), &got)
	})
	if want := []string{"callers", "system:authenticated"}; !got.Status.Authenticated || got.Status.User.Username != caller || !slices.Equal(got.Status.User.Groups, want) {
		t.Errorf("the caller's token: %+v; want %s in %v", got.Status, caller, want)
	}
	// The same delegation's other half: may the caller do something?
	sar := fmt.Sprintf(`{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": %q, "groups": ["callers"],
		"resourceAttributes": {"verb": "get", "group": "coordination.k8s.io", "resource": "leases", "namespace": "default"}}}`, caller)
	if out, errOut, err := s.withKubeconfig(t, kc, sar, "create", "--raw", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "-f", "-"); err != nil || !strings.Contains(out, `"allowed":false`) {
		t.Errorf("%s's SubjectAccessReview: %v %s %s", reviewer, err, out, errOut)
	}
	// kubectl create -f validates a review (a kind without PATCH) by
	// listing the CustomResourceDefinitions, as it does against Kubernetes.
	if out, errOut, err := s.runKubectlStdin(t, review(token), "create", "-f", "-", "-o", "jsonpath={.status.user.username}"); err != nil || out != caller {
		t.Errorf("kubectl create -f of a TokenReview: %q %v %s", out, err, errOut)
	}
	if out, errOut, err := s.runKubectlStdin(t, "apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\n", "create", "-f", "-", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != "leasehold-admin" {
		t.Errorf("kubectl create -f of a SelfSubjectReview: %q %v %s", out, err, errOut)
	}
	leasehold(t, "token", "delete", "--data-dir", s.dataDir, "--user", caller)
	eventually(t, 20*time.Second, func() error {
		out, errOut, err := s.withKubeconfig(t, kc, review(token), raw...)
		if err != nil || strings.Contains(out, `"authenticated":true`) || !strings.Contains(out, `"error":"invalid bearer token"`) {
			return fmt.Errorf("a deleted token: %v %s %s", err, out, errOut)
		}
		return nil
	})
}

// TestTokenTTL: `leasehold token create --ttl` makes a token that
// authenticates until it expires and gets 401 after, and `token list`
// says when each token expires.
func TestTokenTTL(t *testing.T) {
	s := shared(t)
	token := strings.TrimSpace(leasehold(t, "token", "create", "--data-dir", s.dataDir, "--user", "brief", "--ttl", "10s", "--description", "ttl test"))
	created := time.Now()
	whoami := func() (string, error) {
		out, stderr, err := s.asToken(t, token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, stderr)
		}
		return out, nil
	}
	if got, err := whoami(); err != nil || got != "brief" {
		// Only a very slow start could take the token past its 10 s.
		t.Fatalf("brief at once: %q, %v (%v after its creation)", got, err, time.Since(created))
	}
	list := leasehold(t, "token", "list", "--data-dir", s.dataDir)
	line := grepLines(list, "ttl test")
	if !strings.Contains(line, "brief") || strings.Contains(line, "<never>") || strings.Contains(line, "(expired)") {
		t.Errorf("token list, the brief token before its expiry: %q", line)
	}
	eventually(t, 30*time.Second, func() error {
		if got, err := whoami(); err == nil || !strings.Contains(err.Error(), "(Unauthorized)") {
			return fmt.Errorf("brief after the TTL: %q, %v; want 401", got, err)
		}
		return nil
	})
	if line := grepLines(leasehold(t, "token", "list", "--data-dir", s.dataDir), "ttl test"); !strings.Contains(line, "(expired)") {
		t.Errorf("token list after the expiry: %q", line)
	}
	leasehold(t, "token", "delete", "--data-dir", s.dataDir, "--expired")
	if line := grepLines(leasehold(t, "token", "list", "--data-dir", s.dataDir), "ttl test"); line != "" {
		t.Errorf("token list after token delete --expired: %q", line)
	}
	// Nothing left to clean is no failure (a cron job runs it).
	leasehold(t, "token", "delete", "--data-dir", s.dataDir, "--expired")
}

// TestMonitoringCertificate: the README's Prometheus credentials, a client
// certificate in the group system:monitoring, read /metrics and nothing
// else; the certificate's own time left is among the metrics read.
func TestMonitoringCertificate(t *testing.T) {
	s := shared(t)
	dir := t.TempDir()
	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "prometheus", "--group", "system:monitoring", "--out-dir", dir)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "prometheus.crt"), filepath.Join(dir, "prometheus.key"))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: certPool(t, filepath.Join(s.dataDir, "ca.crt")), Certificates: []tls.Certificate{pair}}}}
	t.Cleanup(client.CloseIdleConnections)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(s.url() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Issued for a year: beyond the histogram's last bound, 360 days. Each
	// read of /metrics counts its own certificate.
	yearLeft := func() int {
		t.Helper()
		code, body := get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics with the monitoring certificate: %d %s", code, body)
		}
		m := regexp.MustCompile(`(?m)^apiserver_client_certificate_expiration_seconds_bucket\{le="\+Inf"\} (\d+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no apiserver_client_certificate_expiration_seconds:\n%s", grepLines(body, "apiserver_client_certificate"))
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if first, second := yearLeft(), yearLeft(); second < first+1 {
		t.Errorf("certificates with a year left counted %d, then %d after another request with one", first, second)
	}
	if code, body := get("/api/v1/namespaces"); code != http.StatusForbidden {
		t.Errorf("listing namespaces with the monitoring certificate: %d %s, want 403", code, body)
	}
	// kube-apiserver's /metrics/slis: each health check's last result
	// and a count of its results, here after a /readyz.
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	code, body := get("/metrics/slis")
	if code != http.StatusOK {
		t.Fatalf("/metrics/slis with the monitoring certificate: %d %s", code, body)
	}
	for _, want := range []string{
		`kubernetes_healthcheck{name="etcd-readiness",type="readyz"} 1`,
		`kubernetes_healthcheck{name="log",type="readyz"} 1`,
		`kubernetes_healthchecks_total{name="shutdown",status="success",type="readyz"} `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics/slis lacks %q:\n%s", want, body)
		}
	}
}

// TestClientCertificateExpiresOnAnOpenConnection: a client certificate is
// checked at every request, not only when its connection is made. A
// client whose certificate expires while its HTTP/2 connection stays open
// gets 401, a Status of reason Unauthorized, on that same connection; so
// does kubectl on a new one; and a certificate issued again for the same
// user works at once, without a restart of the server.
func TestClientCertificateExpiresOnAnOpenConnection(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	s := serveFor(t, filepath.Join(dir, "data"), "", dir)
	kc := filepath.Join(dir, "dave.kubeconfig")
	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "dave", "--validity", "8s", "--kubeconfig-out", kc)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(cfg.CertData)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// whoami asks who the client is, and tells whether the request went on
	// a connection made before.
	whoami := func() (status int, st metav1.Status, reused bool) {
		t.Helper()
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url()+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("asking who dave is: %v", err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode >= 300 {
			if err := json.Unmarshal(data, &st); err != nil {
				t.Fatalf("%d answer %q: %v", resp.StatusCode, data, err)
			}
		} else if !strings.Contains(string(data), `"username":"dave"`) {
			t.Errorf("whoami with dave's certificate: %s", data)
		}
		return resp.StatusCode, st, reused
	}
	if code, st, _ := whoami(); code != http.StatusCreated {
		t.Fatalf("with a valid certificate: %d %+v; want 201", code, st)
	}

	// The fault: the certificate's end; nothing is timed.
	time.Sleep(time.Until(cert.NotAfter.Add(time.Second)))
	code, st, reused := whoami()
	if !reused {
		t.Error("the request after the expiry went on a new connection; want the one open before")
	}
	if code != http.StatusUnauthorized || st.Kind != "Status" || st.Reason != metav1.StatusReasonUnauthorized || st.Code != http.StatusUnauthorized {
		t.Errorf("with the certificate expired, on its open connection: %d %+v; want a 401 Status of reason Unauthorized", code, st)
	}
	if out, errOut, err := s.withKubeconfig(t, kc, "", "auth", "whoami"); err == nil || !strings.Contains(errOut, "Unauthorized") {
		t.Errorf("kubectl with the certificate expired: %v\n%s%s; want Unauthorized", err, out, errOut)
	}

	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "dave", "--kubeconfig-out", kc)
	if out, errOut, err := s.withKubeconfig(t, kc, "", "auth", "whoami"); err != nil || !strings.Contains(out, "dave") {
		t.Errorf("kubectl with a certificate issued again: %v\n%s%s", err, out, errOut)
	}
}
