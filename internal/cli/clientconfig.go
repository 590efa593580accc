package cli

import (
	"flag"
	"fmt"
	"os"
	"strings"

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
