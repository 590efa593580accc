package agent

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
)

// ParseNodeIP reads the kubelet's --node-ip: one IP, or an IPv4 and an
// IPv6 one for a dual-stack node; 0.0.0.0 or :: alone stand for the
// host's addresses of that family. As the kubelet does, it refuses
// loopback, link-local and multicast addresses; unlike the kubelet, which
// ignores what does not parse, it refuses that too. "" is no choice.
func ParseNodeIP(s string) ([]net.IP, error) {
	if s == "" {
		return nil, nil
	}
	ips, invalid, err := nodeutil.ParseNodeIPArgument(s, "")
	if len(invalid) > 0 {
		return nil, fmt.Errorf("%q is not an IP address", strings.Join(invalid, ","))
	}
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		switch {
		case ip.IsLoopback():
			return nil, fmt.Errorf("%s is a loopback address", ip)
		case ip.IsLinkLocalUnicast():
			return nil, fmt.Errorf("%s is a link-local address", ip)
		case ip.IsMulticast():
			return nil, fmt.Errorf("%s is a multicast address", ip)
		}
	}
	if len(ips) == 0 {
		return nil, errors.New("no IP address")
	}
	return ips, nil
}

// chosenAddresses returns the node's addresses when --node-ip chose them:
// each of ips that the host has, as InternalIP in the order given (for
// 0.0.0.0 or ::, the host's usable addresses of that family), then
// hostname as Hostname; and the chosen IPs the host does not have, which
// the kubelet too leaves out of the node's addresses.
func chosenAddresses(hostname string, ips []net.IP, addrs []net.Addr) (out []corev1.NodeAddress, missing []string) {
	host := nodeAddresses("", addrs)
	for _, ip := range ips {
		v4 := ip.To4() != nil
		if ip.IsUnspecified() {
			for _, a := range host {
				if (net.ParseIP(a.Address).To4() != nil) == v4 {
					out = append(out, a)
				}
			}
			continue
		}
		if slices.ContainsFunc(host, func(a corev1.NodeAddress) bool { return net.ParseIP(a.Address).Equal(ip) }) {
			out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
		} else {
			missing = append(missing, ip.String())
		}
	}
	if hostname != "" {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: hostname})
	}
	return out, missing
}
