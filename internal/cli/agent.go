package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/leasehold/leasehold/internal/agent"
	"github.com/leasehold/leasehold/internal/version"
)

func init() {
	register(&command{name: "agent", summary: "keep this machine's Node registered and its Lease renewed", run: runAgent})
}

func runAgent(ctx context.Context, args []string) error {
	var (
		conn                           clientFlags
		nodeName                       string
		leaseDuration, renew, statusRP time.Duration
		labels                         []string
		evictionHard, taints, nodeIP   string
		pressurePeriod                 time.Duration
		metricsAddr                    string
		logLevel, logFormat            string
		reportCapacity                 bool
	)
	fs := newFlagSet("agent")
	conn.register(fs)
	fs.StringVar(&nodeName, "node-name", "", "the Node's name (default the host name)")
	fs.DurationVar(&leaseDuration, "lease-duration", agent.DefaultLeaseDuration, "the lease's leaseDurationSeconds")
	fs.DurationVar(&renew, "renew-interval", 0, "time between renewals (default lease-duration/4)")
	fs.DurationVar(&statusRP, "node-status-report-period", agent.DefaultNodeStatusReportPeriod, "longest time between two full node status posts")
	fs.Func("label", "extra node label KEY=VALUE; repeatable", func(s string) error {
		if !strings.Contains(s, "=") {
			return fmt.Errorf("want KEY=VALUE, got %q", s)
		}
		labels = append(labels, s)
		return nil
	})
	fs.StringVar(&nodeIP, "node-ip", "", "the node's IP address, or comma-separated IPv4 and IPv6 ones for a dual-stack node, as the kubelet's flag: posted as its InternalIP while the host has them; 0.0.0.0 or :: for the host's addresses of that family (default every usable address of the host)")
	fs.StringVar(&taints, "register-with-taints", "", "comma-separated KEY=VALUE:EFFECT taints the node is registered with, as the kubelet's flag (a node that exists keeps its own)")
	fs.StringVar(&evictionHard, "eviction-hard", agent.DefaultEvictionHard, "comma-separated SIGNAL<QUANTITY or SIGNAL<PERCENT% thresholds (memory.available, nodefs.available, nodefs.inodesFree, pid.available) below which the node reports MemoryPressure, DiskPressure or PIDPressure, as the kubelet's flag; none for none")
	fs.DurationVar(&pressurePeriod, "eviction-pressure-transition-period", agent.DefaultPressureTransitionPeriod, "how long a pressure condition stays True after its signal was last below its threshold")
	fs.BoolVar(&reportCapacity, "report-capacity", false, "post the node's capacity and allocatable (cpu, memory, ephemeral-storage) as the kubelet does, allocatable less the memory.available and nodefs.available thresholds; each Node then costs the server about 4.7 KiB more of memory")
	fs.StringVar(&metricsAddr, "metrics-listen", "", "HOST:PORT to serve /metrics on (off by default)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", "text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(logFormat, logLevel)
	if err != nil {
		return err
	}
	configs, err := conn.configs("leasehold-agent/" + version.Version)
	if err != nil {
		return err
	}
	// Each request gets the renew interval, as the kubelet's heartbeat
	// client does: a server that stopped answering with its connection
	// open (a frozen machine, a partition) is then left for the next in
	// time to renew the lease, instead of once HTTP/2's health check
	// closes the connection some 45 s later, after the lease expired.
	timeout := renew
	if timeout == 0 {
		timeout = agent.DefaultRenewInterval(leaseDuration)
	}
	var clients []kubernetes.Interface
	for _, rc := range configs {
		rc.Timeout = timeout
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	extra := map[string]string{}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		extra[k] = v
	}
	regTaints, err := agent.ParseTaints(taints)
	if err != nil {
		return fmt.Errorf("--register-with-taints: %w", err)
	}
	nodeIPs, err := agent.ParseNodeIP(nodeIP)
	if err != nil {
		return fmt.Errorf("--node-ip: %w", err)
	}
	a, err := agent.New(agent.Config{
		Clients: clients, NodeName: nodeName, LeaseDuration: leaseDuration, RenewInterval: renew,
		NodeStatusReportPeriod: statusRP, Labels: extra, Logger: log,
		EvictionHard: evictionHard, PressureTransitionPeriod: pressurePeriod, Taints: regTaints, NodeIPs: nodeIPs,
		ReportCapacity: reportCapacity,
	})
	if err != nil {
		return err
	}
	if metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg.MustRegister(a.Collectors()...)
		srv := &http.Server{Addr: metricsAddr, Handler: promhttp.HandlerFor(prometheus.Gatherers{reg, clientMetrics}, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener", "err", err)
			}
		}()
		defer srv.Close()
	}
	return a.Run(ctx)
}
