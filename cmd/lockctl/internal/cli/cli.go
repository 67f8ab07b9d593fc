// Package cli is lockctl, the command-line client of the lock service: its
// subcommands, flags, exit codes and the supervision of a command run under
// a lock. cmd/lockctl only calls Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/client/awsauth"
)

// Exit codes of lockctl. `run` otherwise exits with its command's status
// (128+n when the command was killed by signal n).
const (
	// ExitOK means success.
	ExitOK = 0
	// ExitError means any failure not listed below: the service could not
	// be reached, answered an error, or the command could not be started.
	ExitError = 1
	// ExitUsage means bad flags or arguments.
	ExitUsage = 2
	// ExitNotFound means there is no live lease (status, renew, release).
	ExitNotFound = 3
	// ExitConflict means the lease belongs to another owner, or to a newer
	// lease of the same owner (renew, release).
	ExitConflict = 4
	// ExitHeld means the lock was held by another owner and could not be
	// had within --wait (acquire, run); EX_TEMPFAIL: try again later.
	// --held-exit replaces it.
	ExitHeld = 75
	// ExitLeaseLost means `run` lost its lease while the command ran, and
	// stopped the command.
	ExitLeaseLost = 76
)

// DefaultEndpoint is the service lockctl talks to without --endpoint or
// LOCKS_ENDPOINT: the local runner of `make run`.
const DefaultEndpoint = "http://127.0.0.1:8080"

// requestTimeout bounds single requests that are not part of a wait.
const requestTimeout = 30 * time.Second

// drainTimeout bounds how long lockctl waits, before it exits, for the
// release of a lease granted after it stopped waiting for it: a request
// that waits at the service may be answered up to client.MaxServerWait
// after it was sent, and the release follows.
const drainTimeout = client.MaxServerWait + 10*time.Second

// Env is what lockctl gets from its process: standard streams, environment
// variables (Getenv) and the environment handed to a command (Environ).
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Environ        []string
}

// command is one subcommand of lockctl.
type command struct {
	name     string
	synopsis string // what follows "lockctl NAME"
	summary  string // one line for `lockctl help`
	help     string // the rest of `lockctl NAME --help`, before the flags
	run      func(args []string, env Env) int
}

// commands lists the subcommands in the order `lockctl help` shows them;
// filled in by init, since their help refers back to it.
var commands []*command

func init() {
	commands = []*command{
		{
			name: "acquire", synopsis: "RESOURCE [--ttl 30] [--wait 0] [--owner X] [--lock-delay 0] [-E CODE] [-q]",
			summary: "take the lock and print the lease as JSON",
			help: `Takes the lock on RESOURCE and prints the lease as JSON; it stays held
until its TTL runs out unless renewed ('lockctl renew') or released
('lockctl release') with the owner and token printed. Without --owner the
owner is HOST:PID:RANDOM, unique to this call. With --lock-delay, a lease
that expires unreleased keeps others from the lock that much longer.

If --wait runs out while a request is in flight and the service grants it
after all, lockctl releases that lease before it exits.`,
			run: acquireCmd,
		},
		{
			name: "status", synopsis: "RESOURCE",
			summary: "print the live lease as JSON",
			help:    `Prints the live lease on RESOURCE as JSON; exits 3 when there is none.`,
			run:     statusCmd,
		},
		{
			name: "renew", synopsis: "RESOURCE --owner X [--ttl 30] [--token N]",
			summary: "extend the live lease and print it as JSON",
			help: `Extends the owner's live lease on RESOURCE to --ttl from now and prints it.
With --token the live lease must carry that fencing token.`,
			run: renewCmd,
		},
		{
			name: "release", synopsis: "RESOURCE --owner X [--token N]",
			summary: "end the live lease",
			help: `Ends the owner's live lease on RESOURCE. With --token the live lease must
carry that fencing token.`,
			run: releaseCmd,
		},
		{
			name: "run", synopsis: "RESOURCE [--ttl 30] [--wait 0] [--owner X] [--grace 10] [--lock-delay 0] [-E CODE] [-q] -- CMD [ARGS...]",
			summary: "run CMD while holding the lock",
			help:    runHelp,
			run:     runCmd,
		},
		{
			name: "ls", synopsis: "[PREFIX] [--json] [--limit N]",
			summary: "list the held locks (admin)",
			help: `Lists the leases that keep others from their lock — live leases, and
expired ones still in their lock-delay — whose name starts with PREFIX
(every lock without one), as a table: name, owner, fencing token, expiry
(UTC), lock-delay, and the IAM principal bound to the lease. With --json it
prints them as one JSON array instead. The service scans its table page by
page; lockctl follows every page.

An admin command: against the IAM-authorized API it needs an identity
allowed to call the /admin routes (see the README's Admin API).`,
			run: lsCmd,
		},
		{
			name: "force-release", synopsis: "RESOURCE --reason TEXT [--immediate] [--token N]",
			summary: "end the lease whoever holds it (admin, audited)",
			help: `Ends the lease on RESOURCE whoever holds it, and prints the lease it ended
as JSON with "reason", "immediate" and "free_at" (when others may take the
lock); exits 3 when no lease holds the lock. --reason (1 to 500 bytes) is
required: the service writes it to its audit log with your identity, the
owner and the fencing token it ended. The fencing counter survives: the
next grant gets a larger token, and the ended holder's renewals fail, so
its 'lockctl run' stops its command. Use it for a holder that is gone while
its lease runs on (a long TTL), not to take a lock from a live job.

By default the lease expires now but keeps its lock-delay: nobody, the
evicted owner included, may take the lock until free_at, so a holder that
is slow rather than dead cannot overlap the next one. --immediate frees the
lock at once: for a holder you know is dead. --token N ends only the lease
with fencing token N (the one you saw in 'lockctl ls'); when another lease
holds the lock by then, lockctl shows it, suggests its --token, and exits 4.

An admin command: against the IAM-authorized API it needs an identity
allowed to call the /admin routes (see the README's Admin API).`,
			run: forceReleaseCmd,
		},
		{
			name: "version", synopsis: "",
			summary: "print lockctl's version",
			help: `Prints the version of lockctl's module: a release tag, the pseudo-version
of the commit it was built from, or "(devel)" when the build recorded none.`,
			run: versionCmd,
		},
	}
}

// runHelp is the help of `lockctl run`.
const runHelp = `Takes the lock on RESOURCE (trying once, or waiting up to --wait), runs CMD
with LOCK_RESOURCE, LOCK_OWNER and LOCK_FENCING_TOKEN in its environment,
renews the lease every ttl/3, and releases it when CMD is done, exiting with
CMD's status.

CMD runs in its own process group. SIGINT, SIGTERM and SIGHUP are forwarded
to that group. The lease covers every process of the group: when CMD's main
process exits while processes it started in the background still run,
lockctl keeps renewing and waits until the last of them has exited before it
releases the lock (as flock(1) holds its lock while a background child keeps
the descriptor open). Background steps are part of the job, and stopping
them could leave their work half done; a job whose children must not outlive
it waits for them or kills them itself. Processes that leave the group
(setsid, daemons) are not covered.

If the lease is lost, CMD's process group gets SIGTERM, then SIGKILL after
--grace, and lockctl exits 76. Ctrl-Z (SIGTSTP) stops CMD's group together
with lockctl, and continuing lockctl (fg, bg, SIGCONT) continues the group;
a stop longer than the lease's local deadline loses the lease.

When the lock is held by another owner, lockctl exits 75 and says so on
stderr; for cron, --held-exit 0 --quiet (-E 0 -q) makes that a silent
success, like flock -n -E 0.`

// overview is `lockctl help`.
func overview() string {
	var b strings.Builder
	b.WriteString("Usage: lockctl COMMAND RESOURCE [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %s\n        %s\n", c.usageLine(), c.summary)
	}
	b.WriteString(`
Flags of every command:
  --endpoint URL   the lock service (env LOCKS_ENDPOINT, default ` + DefaultEndpoint + `)
  --sigv4          sign requests with AWS SigV4 (IAM auth), credentials from
                   the AWS default chain (env, profile, SSO, role)
  --region R       the API's AWS region for --sigv4 (default: env AWS_REGION
                   or the profile's region)

--owner defaults to HOST:PID:RANDOM, unique per process. --ttl, --wait,
--grace and --lock-delay take seconds (90) or a duration (90s, 1m30s); --ttl
and --lock-delay are whole seconds. --wait 0 tries once; a longer --wait
waits at the service (one request per round of up to 20 s, and at most two
thirds of the lease's local validity, so a grant at the end of a round
leaves room for the first renewal) and gets the lock right after its
release, or polls a service that does not wait (and when a round would be
under a second). 'lockctl COMMAND --help' tells more about a command.

Exit codes:
  0   success (run: the command's own status)
  1   error: service unreachable, unexpected answer, command not started
  2   usage error
  3   no live lease (status, renew, release, force-release)
  4   the lease belongs to another owner or to a newer lease (renew, release;
      force-release --token)
  75  the lock is held by another owner and --wait ran out (acquire, run;
      --held-exit changes it)
  76  run: the lease was lost while the command ran; the command was stopped
  126, 127  run: the command could not be executed or was not found
`)
	return b.String()
}

// usageLine is the command's name and synopsis.
func (c *command) usageLine() string {
	return strings.TrimSpace(c.name + " " + c.synopsis)
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Main runs lockctl with args (without the program name) and returns the
// exit code.
func Main(args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, overview())
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			c := lookup(args[1])
			if c == nil {
				fmt.Fprintf(env.Stderr, "lockctl: unknown command %q\nRun 'lockctl help' for usage.\n", args[1])
				return ExitUsage
			}
			return c.run([]string{"--help"}, env)
		}
		fmt.Fprint(env.Stdout, overview())
		return ExitOK
	case "-version", "--version":
		return versionCmd(nil, env)
	}
	if c := lookup(args[0]); c != nil {
		return c.run(args[1:], env)
	}
	fmt.Fprintf(env.Stderr, "lockctl: unknown command %q\n\n%s", args[0], overview())
	return ExitUsage
}

// Version returns lockctl's module version from the build information:
// a release tag, a pseudo-version of the commit it was built from, or
// "(devel)".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func versionCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("version"), env)
	if err := fs.Parse(args); err != nil {
		return parseFailed(fs, env, err)
	}
	if fs.NArg() > 0 {
		return parseFailed(fs, env, &usageError{fmt.Sprintf("unexpected arguments: %q", fs.Args())})
	}
	fmt.Fprintf(env.Stdout, "lockctl %s (%s %s/%s)\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return ExitOK
}

// flagSet is a subcommand's flags: the command's own and, unless it is
// `version`, those of every command.
type flagSet struct {
	*flag.FlagSet
	cmd    *command
	common *common
	short  map[string]string // long name → its one-letter alias
}

// common holds the flags every command has.
type common struct {
	endpoint string
	sigv4    bool
	region   string
}

// commonFlags are the names of the flags in common.
var commonFlags = map[string]bool{"endpoint": true, "sigv4": true, "region": true}

func newFlagSet(cmd *command, env Env) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("lockctl "+cmd.name, flag.ContinueOnError), cmd: cmd, short: map[string]string{}}
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {} // parseFailed says what to do
	if cmd.name == "version" {
		return fs
	}
	fs.common = &common{}
	endpoint := env.Getenv("LOCKS_ENDPOINT")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	fs.StringVar(&fs.common.endpoint, "endpoint", endpoint, "the lock service's base `URL` (env LOCKS_ENDPOINT)")
	fs.BoolVar(&fs.common.sigv4, "sigv4", false, "sign requests with AWS SigV4 (IAM auth), credentials from the AWS default chain")
	fs.StringVar(&fs.common.region, "region", env.Getenv("AWS_REGION"), "the API's AWS `region` for --sigv4 (env AWS_REGION, else the profile's)")
	return fs
}

// duration defines a flag of seconds (90) or a Go duration (90s, 1m30s).
func (fs *flagSet) duration(name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Var((*seconds)(&d), name, usage)
	return &d
}

// heldFlags defines --held-exit/-E and --quiet/-q.
func (fs *flagSet) heldFlags() *heldOptions {
	h := &heldOptions{code: ExitHeld}
	fs.IntVar(&h.code, "held-exit", ExitHeld, "exit `code` when the lock is held by another owner (0 for cron: nothing to do)")
	fs.IntVar(&h.code, "E", ExitHeld, "")
	fs.BoolVar(&h.quiet, "quiet", false, "say nothing when the lock is held by another owner (errors are still reported)")
	fs.BoolVar(&h.quiet, "q", false, "")
	fs.short["held-exit"], fs.short["quiet"] = "E", "q"
	return h
}

// heldOptions say how to exit when the lock is held by another owner.
type heldOptions struct {
	code  int
	quiet bool
}

func (h *heldOptions) check() error {
	if h.code < 0 || h.code > 255 {
		return &usageError{fmt.Sprintf("--held-exit %d: want a code from 0 to 255", h.code)}
	}
	return nil
}

// help is `lockctl NAME --help`.
func (fs *flagSet) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: lockctl %s\n\n%s\n", fs.cmd.usageLine(), fs.cmd.help)
	alias := map[string]bool{}
	for _, s := range fs.short {
		alias[s] = true
	}
	own, every := &strings.Builder{}, &strings.Builder{}
	fs.VisitAll(func(f *flag.Flag) {
		if alias[f.Name] {
			return
		}
		w := own
		if commonFlags[f.Name] {
			w = every
		}
		kind, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if s := fs.short[f.Name]; s != "" {
			name = "-" + s + ", " + name
		}
		if kind == "value" {
			kind = "SECONDS"
		}
		if kind != "" {
			name += " " + strings.ToUpper(kind)
		}
		fmt.Fprintf(w, "  %s\n        %s", name, usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		w.WriteString("\n")
	})
	if own.Len() > 0 {
		b.WriteString("\nFlags:\n" + own.String())
	}
	if every.Len() > 0 {
		b.WriteString("\nFlags of every command:\n" + every.String())
	}
	return b.String()
}

// seconds is a flag.Value of a duration written as whole seconds ("90") or
// as a Go duration ("90s", "1m30s"): etcdctl and consul users type
// integers.
type seconds time.Duration

func (s *seconds) String() string { return time.Duration(*s).String() }

func (s *seconds) Set(v string) error {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > int64(time.Duration(1<<63-1)/time.Second) {
			return errors.New("out of range")
		}
		*s = seconds(time.Duration(n) * time.Second)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want seconds (90) or a duration (90s, 1m30s)")
	}
	*s = seconds(d)
	return nil
}

func (c *common) client(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	if c.sigv4 {
		opt, err := awsauth.SigV4FromDefaultChain(ctx, c.region)
		if err != nil {
			return nil, fmt.Errorf("--sigv4: %w", err)
		}
		opts = append(opts, opt)
	}
	return client.New(c.endpoint, append(opts, client.WithUserAgent("lockctl/1"))...)
}

// call runs one request of a subcommand: it builds the client, bounds the
// context by timeout (0: do's own bound) and by SIGINT/SIGTERM, prints do's
// result as JSON and returns the exit code. Before it returns it waits (up
// to drainTimeout, or until a second signal) for the release of any lease
// the service granted after do stopped waiting: a request that waits at
// the service is answered at the end of its round.
func (c *common) call(env Env, timeout time.Duration, do func(context.Context, *client.Client) (any, error)) int {
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The lease of `acquire` outlives lockctl: nothing renews it.
	cl, err := c.client(ctx, client.WithoutKeepAlive())
	if err != nil {
		return failed(env, err)
	}
	if timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, timeout)
		defer cancelTimeout()
	}
	type result struct {
		out any
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := do(ctx, cl)
		done <- result{out, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-sigc:
		cancel()
		r = <-done
	}
	code := ExitOK
	if r.err != nil {
		code = failed(env, r.err)
	} else if r.out != nil { // nil: do wrote its own output
		printJSON(env.Stdout, r.out)
	}
	drain(cl, sigc)
	return code
}

// drain waits up to drainTimeout for c's clean-up releases, or until a
// signal arrives on abort (a second Ctrl-C).
func drain(c *client.Client, abort <-chan os.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if abort != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-abort:
				cancel()
			case <-done:
			}
		}()
	}
	_ = c.Drain(ctx)
}

// usageError is a problem with the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// parse parses args, which hold one RESOURCE with flags before or after it.
// It returns the resource and what follows the flags after it (after a
// "--", if any).
func parse(fs *flagSet, args []string) (string, []string, error) {
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	if fs.NArg() == 0 {
		return "", nil, &usageError{"missing RESOURCE"}
	}
	resource := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", nil, err
	}
	return resource, fs.Args(), nil
}

// parseOnly is parse for commands that take nothing after the flags.
func parseOnly(fs *flagSet, args []string) (string, error) {
	resource, rest, err := parse(fs, args)
	if err == nil && len(rest) > 0 {
		err = &usageError{fmt.Sprintf("unexpected arguments: %q", rest)}
	}
	return resource, err
}

// parseFailed reports a parse error and returns the exit code for it; for
// --help it prints the command's help.
func parseFailed(fs *flagSet, env Env, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(env.Stdout, fs.help())
		return ExitOK
	}
	var u *usageError
	if errors.As(err, &u) {
		fmt.Fprintf(env.Stderr, "lockctl %s: %v\n", fs.cmd.name, err)
	} // else the flag package has said what is wrong
	fmt.Fprintf(env.Stderr, "Run 'lockctl %s --help' for usage.\n", fs.cmd.name)
	return ExitUsage
}

func checkTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl%time.Second != 0 {
		return &usageError{fmt.Sprintf("--ttl %s: must be whole seconds, at least 1", ttl)}
	}
	return nil
}

// lockDelayFlag defines --lock-delay.
func (fs *flagSet) lockDelayFlag() *time.Duration {
	return fs.duration("lock-delay", 0, "after an unreleased expiry, keep others out this many more whole `seconds` (0–300 by default)")
}

// checkLockDelay checks --lock-delay (the service checks its maximum) and
// returns the acquire options for it.
func checkLockDelay(d time.Duration) ([]client.AcquireOption, error) {
	if d < 0 || d%time.Second != 0 {
		return nil, &usageError{fmt.Sprintf("--lock-delay %s: must be whole seconds, 0 or more", d)}
	}
	if d == 0 {
		return nil, nil
	}
	return []client.AcquireOption{client.WithLockDelay(d)}, nil
}

// failed reports err and returns its exit code.
func failed(env Env, err error) int {
	var held *heldError
	if errors.As(err, &held) {
		if !held.opt.quiet {
			fmt.Fprintln(env.Stderr, "lockctl:", err)
		}
		return held.opt.code
	}
	fmt.Fprintln(env.Stderr, "lockctl:", err)
	return exitCode(err)
}

func exitCode(err error) int {
	switch {
	case errors.Is(err, client.ErrHeld):
		return ExitHeld
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, client.ErrForbidden), errors.Is(err, client.ErrStaleToken):
		return ExitConflict
	case errors.Is(err, client.ErrInvalid):
		return ExitUsage
	}
	return ExitError
}

// heldError is an error for the lock being held by another owner, reported
// and coded as heldOptions say.
type heldError struct {
	err error
	opt *heldOptions
}

func (e *heldError) Error() string { return e.err.Error() }
func (e *heldError) Unwrap() error { return e.err }

func printJSON(w io.Writer, v any) {
	_ = json.NewEncoder(w).Encode(v)
}

// take acquires resource: once when wait is 0, else waiting up to wait.
// An empty owner has the client make up a unique one.
func take(ctx context.Context, c *client.Client, resource, owner string, ttl, wait time.Duration, opts []client.AcquireOption) (*client.Lease, error) {
	if wait <= 0 {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return c.TryAcquire(ctx, resource, owner, ttl, opts...)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return c.Acquire(ctx, resource, owner, ttl, opts...)
}

func acquireCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("acquire"), env)
	ttl := fs.duration("ttl", 30*time.Second, "lease length in whole `seconds`: 90 or 90s")
	wait := fs.duration("wait", 0, "how long to wait for the lock, in `seconds` or as a duration; 0 tries once")
	owner := fs.String("owner", "", "the lease's `owner` (default HOST:PID:RANDOM, unique)")
	lockDelay := fs.lockDelayFlag()
	held := fs.heldFlags()
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkTTL(*ttl)
	}
	var opts []client.AcquireOption
	if err == nil {
		opts, err = checkLockDelay(*lockDelay)
	}
	if err == nil {
		err = held.check()
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		lease, err := take(ctx, c, resource, *owner, *ttl, *wait, opts)
		if errors.Is(err, client.ErrHeld) {
			return nil, &heldError{err, held}
		}
		if err != nil {
			return nil, err
		}
		return lease.Lock(), nil
	})
}

func statusCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("status"), env)
	resource, err := parseOnly(fs, args)
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		return c.Status(ctx, resource)
	})
}

func renewCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("renew"), env)
	ttl := fs.duration("ttl", 30*time.Second, "new lease length from now, in whole `seconds`: 90 or 90s")
	owner := fs.String("owner", "", "the lease's `owner` (required)")
	token := fs.Int64("token", 0, "the lease's fencing `token` (optional)")
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkTTL(*ttl)
	}
	if err == nil && strings.TrimSpace(*owner) == "" {
		err = &usageError{"--owner is required"}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		return c.Renew(ctx, resource, *owner, *ttl, *token)
	})
}

func releaseCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("release"), env)
	owner := fs.String("owner", "", "the lease's `owner` (required)")
	token := fs.Int64("token", 0, "the lease's fencing `token` (optional)")
	resource, err := parseOnly(fs, args)
	if err == nil && strings.TrimSpace(*owner) == "" {
		err = &usageError{"--owner is required"}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		if err := c.Release(ctx, resource, *owner, *token); err != nil {
			return nil, err
		}
		return map[string]any{"resource": resource, "released": true}, nil
	})
}

// lsCmd is `lockctl ls`.
func lsCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("ls"), env)
	asJSON := fs.Bool("json", false, "print the leases as one JSON array")
	limit := fs.Int("limit", 0, "list at most `N` leases (0: all)")
	err := fs.Parse(args)
	prefix := ""
	if err == nil && fs.NArg() > 0 {
		prefix = fs.Arg(0)
		err = fs.Parse(fs.Args()[1:])
	}
	if err == nil && fs.NArg() > 0 {
		err = &usageError{fmt.Sprintf("unexpected arguments: %q", fs.Args())}
	}
	if err == nil && *limit < 0 {
		err = &usageError{fmt.Sprintf("--limit %d: want 0 (all) or more", *limit)}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		locks := []client.AdminLock{}
		opt := client.ListOptions{Limit: 1000}
		for {
			if *limit > 0 {
				opt.Limit = min(1000, *limit-len(locks))
			}
			pctx, cancel := context.WithTimeout(ctx, requestTimeout)
			page, err := c.List(pctx, prefix, opt)
			cancel()
			if err != nil {
				return nil, err
			}
			locks = append(locks, page.Locks...)
			if page.Cursor == "" || (*limit > 0 && len(locks) >= *limit) {
				break
			}
			opt.Cursor = page.Cursor
		}
		if *asJSON {
			return locks, nil
		}
		writeTable(env.Stdout, locks)
		return nil, nil
	})
}

// writeTable prints locks as an aligned table with a header.
func writeTable(w io.Writer, locks []client.AdminLock) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tOWNER\tTOKEN\tEXPIRES\tDELAY\tPRINCIPAL")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, l := range locks {
		delay := ""
		if l.LockDelaySeconds > 0 {
			delay = (time.Duration(l.LockDelaySeconds) * time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", tableCell(l.Resource), tableCell(l.Owner), l.FencingToken,
			l.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z"), dash(delay), dash(tableCell(l.Principal)))
	}
	_ = tw.Flush()
}

// tableCell makes s safe for one table cell: names may hold spaces and
// tabs are impossible (the service refuses control characters), but quote
// anything with white space so columns stay readable.
func tableCell(s string) string {
	if strings.ContainsAny(s, " \u00a0") {
		return strconv.Quote(s)
	}
	return s
}

// forceReleaseCmd is `lockctl force-release`.
func forceReleaseCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("force-release"), env)
	reason := fs.String("reason", "", "why, for the audit log: `TEXT` of 1 to 500 bytes (required)")
	immediate := fs.Bool("immediate", false, "free the lock at once, ignoring the lease's lock-delay (the holder is dead)")
	token := fs.Int64("token", 0, "end only the lease with this fencing `token` (as 'lockctl ls' showed it)")
	resource, err := parseOnly(fs, args)
	if err == nil && strings.TrimSpace(*reason) == "" {
		err = &usageError{"--reason is required"}
	}
	if err == nil && *token < 0 {
		err = &usageError{fmt.Sprintf("--token %d: want a positive fencing token", *token)}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		ended, err := c.ForceRelease(ctx, resource, *reason, client.ForceReleaseOptions{Immediate: *immediate, FencingToken: *token})
		var p *client.ProblemError
		if errors.Is(err, client.ErrStaleToken) && errors.As(err, &p) && p.Current != nil {
			return nil, &staleForceRelease{err: err, current: *p.Current, flags: args}
		}
		return ended, err
	})
}

// staleForceRelease is a force release refused because another lease than
// the one asked for holds the lock; it shows that lease and how to end it.
type staleForceRelease struct {
	err     error
	current client.AdminLock
	flags   []string // the command line, for the suggestion
}

func (e *staleForceRelease) Error() string {
	cur, _ := json.Marshal(e.current)
	args := []string{"lockctl", "force-release"}
	skip := false
	for _, a := range e.flags {
		switch {
		case skip:
			skip = false
			continue
		case a == "--token" || a == "-token":
			skip = true
			continue
		case strings.HasPrefix(a, "--token=") || strings.HasPrefix(a, "-token="):
			continue
		}
		args = append(args, shellQuote(a))
	}
	args = append(args, "--token", strconv.FormatInt(e.current.FencingToken, 10))
	return fmt.Sprintf("%v\nthe lock is held by another lease now: %s\nto end that one, check it and run: %s", e.err, cur, strings.Join(args, " "))
}

func (e *staleForceRelease) Unwrap() error { return e.err }

// shellQuote quotes s for a POSIX shell unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
