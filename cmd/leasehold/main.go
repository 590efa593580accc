// Command leasehold is the Kubernetes Lease mechanism as a standalone
// coordination service. See internal/cli for its subcommands.
package main

import (
	"os"

	"github.com/leasehold/leasehold/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
