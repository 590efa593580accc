package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// clientFlags are the connection flags of every client command.
type clientFlags struct {
	kubeconfig string
	servers    []string
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	fs.Func("server", "server URL, overriding the kubeconfig's; repeat for failover between servers", func(s string) error {
		for _, u := range strings.Split(s, ",") {
			if u = strings.TrimSpace(u); u != "" {
				c.servers = append(c.servers, u)
			}
		}
		return nil
	})
}

// configs returns one REST config per server: the kubeconfig's credentials
// and CA with each --server URL, or the kubeconfig's own server.
func (c *clientFlags) configs(userAgent string) ([]*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.kubeconfig != "" {
		if _, err := os.Stat(c.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		rules.ExplicitPath = c.kubeconfig
	}
	base, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	base.UserAgent = userAgent
	if len(c.servers) == 0 {
		return []*rest.Config{base}, nil
	}
	out := make([]*rest.Config, 0, len(c.servers))
	for _, s := range c.servers {
		rc := rest.CopyConfig(base)
		rc.Host = s
		out = append(out, rc)
	}
	return out, nil
}

// failoverConfig returns one REST config for all the servers of configs:
// its requests go to one server at a time, and move on to the next after
// a request that got no answer from it (a connection refused, a TLS
// failure, a timeout) or that it answered 5xx or 429, as the agent moves
// on. The request that failed is not sent again; the caller retries as it
// would against one server. Each server keeps its own transport (TLS,
// credentials), and its URL's scheme and host replace the request's.
func failoverConfig(configs []*rest.Config) (*rest.Config, error) {
	if len(configs) == 1 {
		return configs[0], nil
	}
	ft := &failoverTransport{}
	for _, c := range configs {
		u, err := url.Parse(c.Host)
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", c.Host, err)
		}
		rt, err := rest.TransportFor(c)
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", c.Host, err)
		}
		ft.hosts = append(ft.hosts, u)
		ft.rts = append(ft.rts, rt)
	}
	first := configs[0]
	return &rest.Config{
		Host: first.Host, APIPath: first.APIPath, ContentConfig: first.ContentConfig, UserAgent: first.UserAgent,
		QPS: first.QPS, Burst: first.Burst, RateLimiter: first.RateLimiter, Timeout: first.Timeout,
		Transport: ft,
	}, nil
}

// failoverTransport is failoverConfig's transport.
type failoverTransport struct {
	hosts   []*url.URL
	rts     []http.RoundTripper
	current atomic.Int32
}

func (f *failoverTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	i := int(f.current.Load())
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = f.hosts[i].Scheme, f.hosts[i].Host, ""
	resp, err := f.rts[i].RoundTrip(r)
	if err != nil && errors.Is(context.Cause(req.Context()), context.Canceled) {
		return nil, err // the caller gave up: no word on the server
	}
	if err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		f.current.CompareAndSwap(int32(i), int32((i+1)%len(f.rts)))
	}
	return resp, err
}
