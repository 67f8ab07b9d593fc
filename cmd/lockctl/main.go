// Command lockctl takes, inspects, renews and releases locks of the lock
// service, and runs a command while holding one:
//
//	lockctl run nightly-report --ttl 60 -E 0 -q -- /usr/local/bin/report.sh
//
// Run `lockctl help` for the subcommands, flags, environment and exit codes,
// and `lockctl COMMAND --help` for one command.
package main

import (
	"os"

	"github.com/ft288/locks/cmd/lockctl/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, Environ: os.Environ(),
	}))
}
