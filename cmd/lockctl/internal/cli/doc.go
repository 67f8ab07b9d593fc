// Package cli is lockctl, the command-line client of the lock service: its
// subcommands, flags, exit codes and the supervision of a command run under
// a lock. cmd/lockctl only calls Main.
//
// # Layout
//
// cli.go holds the command table, Main and the flag parsing every command
// shares; call.go runs one request of a command and maps its outcome to an
// exit code; help.go renders `lockctl help` and `lockctl COMMAND --help`.
// Each command has its own file (acquire.go, status.go, renew.go,
// release.go, ls.go, forcerelease.go, version.go, run.go, elect.go,
// watch.go); the process supervision of run and elect is in run_unix.go
// (run_other.go refuses it elsewhere), over a hold (hold.go): one lease, or
// a lock set's leases (run --lock), under the same rules.
//
// # Leases nobody heard of
//
// A request that waits at the service is answered at the end of its round
// (up to client.MaxServerWait after it was sent), so a lease may be granted
// after lockctl stopped waiting for it: --wait ran out, or a signal came.
// The client releases such a grant with its fencing token, and an attempt
// whose outcome is unknown (a network failure, a 5xx) by owner when the
// owner is lockctl's own generated one. A clean "held" answer needs no
// clean-up. Before it exits, lockctl waits for those releases (up to
// drainTimeout, or until a second SIGINT/SIGTERM): a grant nobody heard of
// would block the next run for a whole TTL.
//
// # run
//
// `lockctl run` takes the lock (giving up on SIGINT, SIGTERM or SIGHUP),
// runs the command in its own process group with the lease renewing itself,
// forwards those signals to the group (Ctrl-C escalating: SIGINT, naming
// what still runs a second later, then SIGTERM, then SIGKILL), stops and
// continues the group with lockctl on Ctrl-Z, and stops the group (the
// --on-lost hook, SIGTERM, then SIGKILL after --grace) when the lease is
// lost. The lease covers the whole group: lockctl
// releases it only once the main process has exited and the group is
// empty. The exit code is the command's own, or ExitLeaseLost when the
// lease was lost, taken over or force released while the command ran.
//
// # elect
//
// `lockctl elect` is run in a loop: it campaigns for the lock (the
// election) without a time limit, runs the command under the lease with
// run's supervision, and after a loss campaigns again (with --once it
// exits as run does). The command's own end, or a signal, ends the loop.
package cli
