// Package cli implements the leasehold command line: one file per
// subcommand, each registering itself with register. Main parses the
// subcommand name, sets up logging and signal handling, and runs it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"syscall"

	"k8s.io/klog/v2"
)

// command is one subcommand. run gets a context cancelled on SIGINT or
// SIGTERM and the arguments after the subcommand name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// exitError carries a process exit status out of a subcommand.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Main runs the subcommand named by args[0] and returns the exit status.
func Main(args []string) int {
	if len(args) > 1 && args[0] == "help" {
		// leasehold help COMMAND [SUBCOMMAND]: its --help.
		args = append(args[1:], "--help")
	}
	if len(args) == 0 || helpAsked(args) {
		usage(os.Stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "leasehold: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	err := c.run(ctx, args[1:])
	var exit exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &exit):
		return exit.code
	default:
		fmt.Fprintf(os.Stderr, "leasehold %s: %v\n", c.name, err)
		return 1
	}
}

// signalContext ends with the first SIGINT or SIGTERM, which starts a
// command's graceful stop; a second one ends the process at once, with
// status 1, as kube-apiserver's does (a stop waiting on a stuck request or
// a full disk is cut short by asking again).
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "leasehold: a second signal: exiting at once")
		os.Exit(1)
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "leasehold: the Kubernetes Lease mechanism as a standalone coordination service")
	fmt.Fprintln(w, "\nUsage: leasehold COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'leasehold COMMAND --help' for a command's flags.")
}

// helpAsked reports whether args, a command's arguments where a
// subcommand would be, ask for its usage instead.
func helpAsked(args []string) bool {
	return len(args) > 0 && slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0])
}

// printUsage answers a command's --help with its usage, on stdout, and a
// pointer to its subcommands' flags.
func printUsage(usage, command string) error {
	fmt.Printf("%s\n\nRun 'leasehold %s SUBCOMMAND --help' for a subcommand's flags.\n", usage, command)
	return nil
}

// noSubcommand answers a command whose args name no subcommand: without
// arguments, an error that shows its usage; asked for help, the usage.
// done says whether it answered.
func noSubcommand(args []string, usage, command string) (done bool, err error) {
	switch {
	case len(args) == 0:
		return true, errors.New(usage)
	case helpAsked(args):
		return true, printUsage(usage, command)
	}
	return false, nil
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("leasehold "+name, flag.ContinueOnError)
	return fs
}

// parseFlags parses args into fs, for a command that takes flags alone.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// newLogger returns the process logger: text or JSON on stderr at level,
// watched by the log health check (logOutput).
// The libraries that log through klog (client-go, component-helpers) log
// through it too, so that the process writes one format.
func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var log *slog.Logger
	switch format {
	case "text", "":
		log = slog.New(slog.NewTextHandler(logOutput, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(logOutput, opts))
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
	}
	klog.SetSlogLogger(log)
	return log, nil
}
