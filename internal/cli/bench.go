package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/agent"
	"github.com/leasehold/leasehold/internal/bench"
	"github.com/leasehold/leasehold/internal/controller/nodelifecycle"
	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/version"
)

func init() {
	register(&command{name: "bench", summary: "load an API server: throughput, fleet, watch or list scenario; plot or merge fleet results", run: runBench})
}

const benchUsage = `Usage: leasehold bench SCENARIO [flags]

Scenarios:
  throughput   concurrent clients each updating a lease of their own as fast as they can;
               with --etcd-embedded or --etcd-endpoint, the same load on a bare etcd
  fleet        virtual node agents registering a Node and Lease and renewing on schedule;
               with --kill-fraction, the delay from an agent's death to its Node's Ready=Unknown
  watch        watchers on a namespace's leases while writers renew: delivery delay
  list         full lists of a namespace's leases, one at a time, optionally in chunks

Progress goes to stderr, the results table (or JSON with --json) to stdout;
--report FILE also writes the JSON to FILE.
Run 'leasehold bench SCENARIO --help' for a scenario's flags.

  leasehold bench plot [--out FILE] [--title TITLE] REPORT.json...
               draws fleet reports (--json output; several per file allowed) as an
               SVG scaling curve: CPU per 1000 renewals, memory per lease, p99 latency
  leasehold bench merge [--json] [--report FILE] REPORT.json...
               combines the fleet reports of load generators that measured one server
               at once (fleet --node-prefix and --start-at): one fleet from several machines
  leasehold bench echo-server [--dir DIR] [--listen ADDR]
               answers the throughput and fleet scenarios with their own requests, over
               the same HTTPS as leasehold serve: what the load costs with no server work
`

// benchScenario builds a scenario from the parsed flags.
type benchScenario struct {
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, common bench.Common) (*bench.Report, error)
}

func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Print(benchUsage)
		if len(args) == 0 {
			return exitError{code: 2}
		}
		return nil
	}
	switch args[0] {
	case "plot":
		return runBenchPlot(args[1:])
	case "merge":
		return runBenchMerge(args[1:])
	case "echo-server":
		return runEchoServer(ctx, args[1:])
	}
	scenarios := map[string]*benchScenario{
		"throughput": throughputScenario(),
		"fleet":      fleetScenario(),
		"watch":      watchScenario(),
		"list":       listScenario(),
	}
	name := args[0]
	sc, ok := scenarios[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "leasehold bench: unknown scenario %q\n\n%s", name, benchUsage)
		return exitError{code: 2}
	}
	var (
		conn             clientFlags
		common           bench.Common
		jsonOut, quiet   bool
		logLevel, logFmt string
		reportFile       string
	)
	fs := newFlagSet("bench " + name)
	conn.register(fs)
	fs.IntVar(&common.Connections, "connections", bench.DefaultConnections, "HTTP/2 connections the clients share")
	fs.DurationVar(&common.Duration, "duration", bench.DefaultDuration, "how long to measure")
	fs.DurationVar(&common.ProgressInterval, "progress-interval", bench.DefaultProgressInterval, "time between two progress lines")
	fs.IntVar(&common.ServerPID, "server-pid", 0, "the server's process id, for its CPU and memory (default: the local process listening on the server's port; -1: none here). A server not measured here is measured from its /metrics")
	fs.IntVar(&common.EtcdPID, "etcd-pid", 0, "the process id of the server's etcd when it runs apart from the server on this machine, for its CPU and memory (default: none)")
	fs.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	fs.StringVar(&reportFile, "report", "", "also write the results as JSON to this file")
	fs.BoolVar(&quiet, "quiet", false, "print no progress lines")
	fs.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	fs.StringVar(&logFmt, "log-format", "text", "text or json")
	sc.flags(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if limit, err := openFileLimit(); err == nil {
		if err := checkOpenFiles(common.Connections, limit); err != nil {
			return err
		}
	}
	log, err := newLogger(logFmt, logLevel)
	if err != nil {
		return err
	}
	// client-go logs every request cut off at the end of a run; that is
	// noise here unless debugging.
	if logLevel == "debug" {
		klog.SetSlogLogger(log)
	} else {
		klog.SetLogger(logr.Discard())
	}
	configs, err := conn.configs("leasehold-bench/" + version.Version)
	if err != nil {
		return err
	}
	if len(configs) > 1 {
		return errors.New("--server: a scenario loads one server; give it once")
	}
	common.REST = configs[0]
	common.Logger = log
	if !quiet {
		common.Progress = os.Stderr
	}
	fmt.Fprintf(os.Stderr, "leasehold bench %s against %s for %s\n", name, common.REST.Host, common.Duration)
	r, err := sc.run(ctx, common)
	if err != nil {
		return err
	}
	return writeReports(r, reportFile, jsonOut)
}

// writeReports writes r to reportFile as JSON, when one is named, and to
// stdout as a table or JSON.
func writeReports(r *bench.Report, reportFile string, jsonOut bool) error {
	if reportFile != "" {
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			return err
		}
		if err := os.WriteFile(reportFile, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return writeReport(os.Stdout, r, jsonOut)
}

func writeReport(w io.Writer, r *bench.Report, jsonOut bool) error {
	if jsonOut {
		return r.WriteJSON(w)
	}
	fmt.Fprintln(w)
	return r.WriteTable(w)
}

func throughputScenario() *benchScenario {
	var cfg bench.ThroughputConfig
	var etcdEndpoints string
	return &benchScenario{
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.Clients, "clients", bench.DefaultClients, "concurrent clients, each updating its own lease")
			fs.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the leases")
			fs.StringVar(&etcdEndpoints, "etcd-endpoint", "", "comma-separated client URLs of a bare etcd to compare with (one put per update, same concurrency)")
			fs.BoolVar(&cfg.EtcdEmbedded, "etcd-embedded", false, "compare with a bare etcd started in this process (data in --etcd-dir)")
			fs.StringVar(&cfg.EtcdDir, "etcd-dir", "", "data directory of the --etcd-embedded etcd (default a temporary directory, removed afterwards)")
			fs.BoolVar(&cfg.Keep, "keep", false, "keep the leases afterwards")
		},
		run: func(ctx context.Context, c bench.Common) (*bench.Report, error) {
			cfg.Common = c
			for _, e := range strings.Split(etcdEndpoints, ",") {
				if e = strings.TrimSpace(e); e != "" {
					cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, e)
				}
			}
			t, err := bench.NewThroughput(cfg)
			if err != nil {
				return nil, err
			}
			return t.Run(ctx)
		},
	}
}

func fleetScenario() *benchScenario {
	var cfg bench.FleetConfig
	return &benchScenario{
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.Nodes, "nodes", bench.DefaultNodes, "virtual agents, one Node and Lease each")
			fs.DurationVar(&cfg.Interval, "interval", bench.DefaultInterval, "time between two renewals of one agent")
			fs.DurationVar(&cfg.LeaseDuration, "lease-duration", 40*time.Second, "the leases' leaseDurationSeconds")
			fs.DurationVar(&cfg.NodeStatusReportPeriod, "node-status-report-period", agent.DefaultNodeStatusReportPeriod, "longest time between two node status posts of one agent")
			fs.BoolVar(&cfg.ReportCapacity, "report-capacity", false, "each agent posts its node's capacity and allocatable, as leasehold agent --report-capacity")
			fs.StringVar(&cfg.NodePrefix, "node-prefix", bench.DefaultNodePrefix, "start of every node name (existing nodes of that name are adopted)")
			fs.Float64Var(&cfg.KillFraction, "kill-fraction", 0, "fraction of the agents to stop at one instant, timing their nodes' Ready=Unknown")
			fs.DurationVar(&cfg.KillAfter, "kill-after", 0, "when to stop them, from the start of the measurement (default a third of --duration)")
			fs.BoolVar(&cfg.Cleanup, "cleanup", false, "delete the nodes at the end (the garbage collector deletes their leases)")
			fs.Uint64Var(&cfg.Seed, "seed", 1, "seed choosing the agents to stop")
			fs.Func("start-at", "when to start the measurement, as an RFC 3339 time (default: once registered); load generators on several machines, each with a --node-prefix of its own, then measure the same window, and 'leasehold bench merge' combines their reports", func(v string) error {
				t, err := time.Parse(time.RFC3339, v)
				if err != nil {
					return fmt.Errorf("not an RFC 3339 time such as 2006-01-02T15:04:05Z: %q", v)
				}
				cfg.StartAt = t
				return nil
			})
		},
		run: func(ctx context.Context, c bench.Common) (*bench.Report, error) {
			cfg.Common = c
			f, err := bench.NewFleet(cfg)
			if err != nil {
				return nil, err
			}
			if note := graceNote(cfg.Interval); note != "" {
				fmt.Fprintln(os.Stderr, note)
			}
			return f.Run(ctx)
		},
	}
}

// graceNote warns, when agents renewing every interval would outlast the
// default grace period of a node lifecycle controller (leasehold serve's,
// as kube-controller-manager's), that such a server marks their nodes
// Unknown between renewals: the bench cannot read the server's setting,
// and the controller's writes would then meet the agents' status posts.
func graceNote(interval time.Duration) string {
	if interval < nodelifecycle.DefaultGracePeriod {
		return ""
	}
	return fmt.Sprintf("leasehold bench: note: the agents renew every %v, not within the default --node-monitor-grace-period (%v): a server left at that default marks their nodes Unknown between renewals; give it a grace period longer than %v",
		interval, nodelifecycle.DefaultGracePeriod, interval)
}

func watchScenario() *benchScenario {
	var cfg bench.WatchConfig
	return &benchScenario{
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.Watchers, "watchers", bench.DefaultWatchers, "watches on the namespace's leases")
			fs.IntVar(&cfg.Writers, "writers", bench.DefaultWriters, "writers, each renewing a lease of its own")
			fs.Float64Var(&cfg.Rate, "rate", 0, "total renewals per second, spread over the writers (0: as fast as they can)")
			fs.StringVar(&cfg.Namespace, "namespace", "kube-node-lease", "namespace of the leases")
			fs.BoolVar(&cfg.Keep, "keep", false, "keep the leases afterwards")
		},
		run: func(ctx context.Context, c bench.Common) (*bench.Report, error) {
			cfg.Common = c
			w, err := bench.NewWatch(cfg)
			if err != nil {
				return nil, err
			}
			return w.Run(ctx)
		},
	}
}

func listScenario() *benchScenario {
	var cfg bench.ListConfig
	return &benchScenario{
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&cfg.Namespace, "namespace", "kube-node-lease", "namespace of the leases")
			fs.Int64Var(&cfg.ChunkSize, "chunk-size", 0, "leases per page, as kubectl's --chunk-size (0: one unpaginated list)")
			fs.StringVar(&cfg.ResourceVersion, "resource-version", "", `resourceVersion of the lists: "" the most recent (a consistent read, as kubectl), "0" any`)
			fs.StringVar(&cfg.Accept, "accept", "protobuf", "format of the lists asked for: protobuf (as Kubernetes' components) or json (as client-go by default, and kubectl)")
			fs.BoolVar(&cfg.DisableCompression, "disable-compression", false, "ask for the lists as they are, as client-go's DisableCompression; by default they are asked for gzipped, as client-go and kubectl ask, which the server spends CPU on")
		},
		run: func(ctx context.Context, c bench.Common) (*bench.Report, error) {
			cfg.Common = c
			l, err := bench.NewList(cfg)
			if err != nil {
				return nil, err
			}
			return l.Run(ctx)
		},
	}
}

// benchSpareFiles is how many open files a scenario needs beside its
// connections: its reports, /proc and the server's /metrics.
const benchSpareFiles = 64

// checkOpenFiles refuses more connections than a process that may have
// openFiles files open can make: each is an open file, and those past the
// limit would fail one by one, as errors of the agents that use them.
func checkOpenFiles(connections int, openFiles uint64) error {
	if uint64(connections)+benchSpareFiles > openFiles {
		return fmt.Errorf("--connections %d: each connection is an open file, and this process may have %d open (ulimit -n), %d of them for the rest; use fewer connections or raise the limit",
			connections, openFiles, benchSpareFiles)
	}
	return nil
}

// runBenchPlot draws the fleet reports named in args as an SVG image.
func runBenchPlot(args []string) error {
	var (
		out string
		cfg bench.PlotConfig
	)
	fs := newFlagSet("bench plot")
	fs.StringVar(&out, "out", "-", "SVG file to write (-: standard output)")
	fs.StringVar(&cfg.Title, "title", "", `title of the image, for example the machine the runs were made on (default "leasehold fleet scaling")`)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: leasehold bench plot [--out FILE] [--title TITLE] REPORT.json...\n\n"+
			"Reads fleet reports, as 'leasehold bench fleet --json' prints them (a file may hold\n"+
			"several, one after another), and draws them as an SVG scaling curve: a marker per\n"+
			"run, and a line through the median of the runs at each number of nodes. Its panels:\n"+
			"the server's CPU per 1000 renewals, the part its Go collector took, the server's CPU\n"+
			"against the load generator's (a yardstick of the machine's speed), memory per lease\n"+
			"and p99 latency; a panel whose figures no report gives is left out.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitError{code: 2}
	}
	reports, err := readReportFiles(fs.Args())
	if err != nil {
		return err
	}
	for i, r := range reports {
		if r.Fleet == nil {
			return fmt.Errorf("report %d: a %q report, not a fleet one", i+1, r.Scenario)
		}
	}
	var b bytes.Buffer
	if err := bench.WritePlot(&b, reports, cfg); err != nil {
		return err
	}
	if out == "-" {
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "leasehold bench plot: %d reports drawn in %s\n", len(reports), out)
	return nil
}

// readReportFiles reads every report in the files named.
func readReportFiles(names []string) ([]*bench.Report, error) {
	var reports []*bench.Report
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		rs, err := bench.ReadReports(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		reports = append(reports, rs...)
	}
	return reports, nil
}

// runBenchMerge combines the fleet reports named in args into one.
func runBenchMerge(args []string) error {
	var (
		jsonOut    bool
		reportFile string
	)
	fs := newFlagSet("bench merge")
	fs.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	fs.StringVar(&reportFile, "report", "", "also write the results as JSON to this file")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: leasehold bench merge [--json] [--report FILE] REPORT.json...\n\n"+
			"Combines fleet reports (--json or --report output; a file may hold several) of load\n"+
			"generators that drove one server at the same time, each with a fleet of its own\n"+
			"(--node-prefix) and the same --start-at, into the report of one fleet: operations,\n"+
			"rates, nodes and the generators' CPU add up, latency percentiles come from the sum of\n"+
			"their histograms, and the server's figures are the mean of what each saw. Reports\n"+
			"whose measurements share less than 90% of the shortest are refused.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitError{code: 2}
	}
	reports, err := readReportFiles(fs.Args())
	if err != nil {
		return err
	}
	m, err := bench.Merge(reports)
	if err != nil {
		return err
	}
	return writeReports(m, reportFile, jsonOut)
}

// runEchoServer serves bench.EchoHandler until ctx ends, with a CA, a
// serving certificate and a kubeconfig of its own in --dir.
func runEchoServer(ctx context.Context, args []string) error {
	var dir, listen string
	fs := newFlagSet("bench echo-server")
	fs.StringVar(&dir, "dir", "./leasehold-echo", "directory for the echo server's CA, serving certificate and echo.kubeconfig")
	fs.StringVar(&listen, "listen", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger("text", "warn")
	if err != nil {
		return err
	}
	clk := clock.RealClock{}
	ca, err := pki.LoadOrCreateCA(dir, clk)
	if err != nil {
		return err
	}
	serving, err := ca.LoadOrIssueServing(dir, nil, clk)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	url := "https://" + ln.Addr().String()
	kubeconfig := filepath.Join(dir, "echo.kubeconfig")
	// The echo server checks no credentials; client-go wants some.
	if err := pki.WriteKubeconfig(kubeconfig, pki.KubeconfigSpec{Server: url, CAPEM: ca.CertPEM, User: "bench", Token: "echo"}); err != nil {
		ln.Close()
		return err
	}
	srv := newHTTPServer(bench.EchoHandler(), &tls.Config{Certificates: []tls.Certificate{serving}}, clk, log)
	serveErr := make(chan error, 1)
	go func() { serveErr <- serveTLS(srv, ln, srv.TLSConfig, clk, log) }()
	fmt.Fprintf(os.Stderr, "leasehold bench echo-server answering at %s (pid %d)\n\n  leasehold bench throughput --kubeconfig %s\n\n", url, os.Getpid(), kubeconfig)
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-serveErr:
		return err
	}
}
