package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

// frontProxy starts an authenticating proxy in front of s, as a company's
// single sign-on gateway would run: it signs every request in as alice of
// devs and oncall (dropping what credentials the client sent) and
// forwards it with a client certificate named cn of proxyCA. It returns a
// kubeconfig that reaches s through it.
func frontProxy(t *testing.T, s *server, proxyCA *pkitest.Cert, cn string) string {
	t.Helper()
	cert := pkitest.Issue(t, cn, proxyCA, "client")
	pair, err := tls.X509KeyPair(cert.CertPEM(), cert.KeyPEM(t))
	if err != nil {
		t.Fatal(err)
	}
	serverCA, err := os.ReadFile(filepath.Join(s.dataDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serverCA)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "https", Host: s.listen})
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}, ForceAttemptHTTP2: true}
	forward := rp.Director
	rp.Director = func(r *http.Request) {
		forward(r)
		r.Header.Del("Authorization")
		r.Header.Set("X-Remote-User", "alice")
		r.Header.Set("X-Remote-Uid", "alice-0001")
		r.Header["X-Remote-Group"] = []string{"devs", "oncall"}
		r.Header.Set("X-Remote-Extra-Example.com%2fReason", "paged at night")
	}
	srv := httptest.NewTLSServer(rp)
	t.Cleanup(srv.Close)
	// The client's credentials are the proxy's business: a session token
	// it would check, and drops.
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	cfg.AuthInfos["via-proxy"] = &clientcmdapi.AuthInfo{Token: "sso-session"}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "via-proxy"}
	cfg.CurrentContext = "proxy"
	path := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRequestHeaderProxy: with --requestheader-client-ca-file the user an
// authenticating proxy names in X-Remote-* headers is the request's user,
// for kubectl through the proxy, RBAC and the audit log; a proxy
// certificate of a name not allowed gets 401; and nobody else's headers
// are read.
func TestRequestHeaderProxy(t *testing.T) {
	t.Parallel()
	proxyCA := pkitest.Issue(t, "front-proxy-ca", nil, "ca")
	caFile := writeFile(t, "front-proxy-ca.crt", string(proxyCA.CertPEM()))
	s := newServer(t, "--requestheader-client-ca-file", caFile, "--requestheader-allowed-names", "front-proxy,spare-proxy", "--requestheader-uid-headers", "X-Remote-Uid")
	s.kubectl(t, "create", "clusterrolebinding", "devs-view", "--clusterrole", "view", "--group", "devs")

	via := frontProxy(t, s, proxyCA, "front-proxy")
	out, errOut, err := s.withKubeconfig(t, via, "", "auth", "whoami", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl auth whoami through the proxy: %v\n%s", err, errOut)
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	u := review.Status.UserInfo
	if u.Username != "alice" || u.UID != "alice-0001" || !slices.Equal(u.Groups, []string{"devs", "oncall", "system:authenticated"}) || !slices.Equal(u.Extra["example.com/reason"], authenticationv1.ExtraValue{"paged at night"}) {
		t.Errorf("through the proxy: %+v, want alice (uid alice-0001) in devs, oncall and system:authenticated, example.com/reason paged at night", u)
	}
	if _, errOut, err := s.withKubeconfig(t, via, "", "get", "leases", "-A"); err != nil {
		t.Errorf("kubectl get leases -A through the proxy (devs may view): %v\n%s", err, errOut)
	}
	if _, errOut, err := s.withKubeconfig(t, via, "", "create", "namespace", "alices"); err == nil || !strings.Contains(errOut, `User "alice" cannot create resource "namespaces"`) {
		t.Errorf("kubectl create namespace through the proxy: %v, %q; want Forbidden for alice", err, errOut)
	}
	eventually(t, 5*time.Second, func() error {
		var alices []string
		for _, ev := range auditEvents(t, s) {
			if ev.User.Username != "alice" {
				continue
			}
			alices = append(alices, fmt.Sprintf("%s %s %+v %d", ev.Stage, ev.Verb, ev.ObjectRef, ev.ResponseStatus.Code))
			if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "namespaces" && ev.ResponseStatus.Code == http.StatusForbidden {
				return nil
			}
		}
		return fmt.Errorf("the audit log has no create of a namespace by alice answered 403; alice's events: %q", alices)
	})

	// A proxy whose certificate has a name not allowed: 401.
	rogue := frontProxy(t, s, proxyCA, "mallory")
	if _, errOut, err := s.withKubeconfig(t, rogue, "", "get", "ns"); err == nil || !strings.Contains(errOut, "You must be logged in") {
		t.Errorf("kubectl through a proxy named mallory: %v, %q; want 401", err, errOut)
	}

	// A user of a client certificate of the server's CA who sends the
	// headers stays who the certificate says.
	kc := filepath.Join(t.TempDir(), "bob.kubeconfig")
	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "bob", "--kubeconfig-out", kc)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("X-Remote-User", "alice")
			r.Header.Set("X-Remote-Group", "system:masters")
			return rt.RoundTrip(r)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || got.Status.UserInfo.Username != "bob" || slices.Contains(got.Status.UserInfo.Groups, "system:masters") {
		t.Errorf("bob sending X-Remote-* headers: %+v, %v; want bob, not in system:masters", got.Status.UserInfo, err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
