package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ft288/locks/client"
)

// Exit codes of lockctl. `run` and `elect` otherwise exit with their
// command's status (128+n when the command was killed by signal n, or when
// signal n stopped lockctl before the command ran).
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
	// lease of the same owner (renew, release), or that a semaphore has
	// another number of permits (acquire -n, run -n).
	ExitConflict = 4
	// ExitHeld means the lock was held by another owner and could not be
	// had within --wait (acquire, run); EX_TEMPFAIL: try again later.
	// --held-exit replaces it.
	ExitHeld = 75
	// ExitLeaseLost means `run` (or `elect --once`) lost its lease while
	// the command ran, and stopped the command.
	ExitLeaseLost = 76
)

// DefaultEndpoint is the service lockctl talks to without --endpoint or
// LOCKS_ENDPOINT: the local runner of `make run`, as for the clients.
const DefaultEndpoint = client.DefaultEndpoint

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
		{name: "acquire", synopsis: "RESOURCE [-n N] [--ttl 30] [--wait 0] [--owner X] [--lock-delay 0] [-E CODE] [-q], or --lock NAME [--lock NAME...] [--set-prefix P] [flags]",
			summary: "take the lock (-n: one of N permits; --lock: a lock set) and print the lease as JSON", help: acquireHelp, run: acquireCmd},
		{name: "status", synopsis: "RESOURCE [-s | --rw]",
			summary: "print the live lease (-s: the semaphore's permits; --rw: the read/write lock's leases) as JSON", help: statusHelp, run: statusCmd},
		{name: "renew", synopsis: "RESOURCE --owner X [--slot K] [--ttl 30] [--token N]",
			summary: "extend the live lease (--slot: the permit) and print it as JSON", help: renewHelp, run: renewCmd},
		{name: "release", synopsis: "RESOURCE --owner X [--slot K] [--token N]",
			summary: "end the live lease (--slot: the permit)", help: releaseHelp, run: releaseCmd},
		{name: "run", synopsis: "RESOURCE [-n N] [--ttl 30] [--wait 0] [--owner X] [--grace 10] [--on-lost HOOK] [--lock-delay 0] [-E CODE] [-q] -- CMD [ARGS...], or --lock NAME [--lock NAME...] [--set-prefix P] [flags] -- CMD [ARGS...]",
			summary: "run CMD while holding the lock (-n: one of N permits; --lock: a lock set)", help: runHelp, run: runCmd},
		{name: "elect", synopsis: "NAME [--once] [--ttl 30] [--owner X] [--grace 10] [--on-lost HOOK] [--lock-delay 0] -- CMD [ARGS...]",
			summary: "run CMD only while leading the election NAME; campaign again after a loss", help: electHelp, run: electCmd},
		{name: "watch", synopsis: "NAME [--rw]",
			summary: "print the lock's (--rw: the read/write lock's) state, then each change, as JSON lines until Ctrl-C", help: watchHelp, run: watchCmd},
		{name: "ls", synopsis: "[PREFIX] [-s | --rw] [--json] [--limit N]",
			summary: "list the held locks (-s: the semaphores' permits; --rw: the read/write locks) (admin)", help: lsHelp, run: lsCmd},
		{name: "force-release", synopsis: "RESOURCE --reason TEXT [--slot K] [--read --slot K | --write] [--immediate] [--token N]",
			summary: "end the lease whoever holds it (admin, audited)", help: forceReleaseHelp, run: forceReleaseCmd},
		{name: "ui", synopsis: "[PREFIX] [--addr 127.0.0.1:0] [--open]",
			summary: "serve a live console of the locks on 127.0.0.1 and print its URL (admin)", help: uiHelp, run: uiCmd},
		{name: "version", synopsis: "",
			summary: "print lockctl's version", help: versionHelp, run: versionCmd},
	}
}

// usageLine is the command's name and synopsis.
func (c *command) usageLine() string {
	return strings.TrimSpace(c.name + " " + c.synopsis)
}

// lookup returns the command called name, or nil.
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
		return helpCmd(args[1:], env)
	case "-version", "--version":
		return versionCmd(nil, env)
	}
	if c := lookup(args[0]); c != nil {
		return c.run(args[1:], env)
	}
	fmt.Fprintf(env.Stderr, "lockctl: unknown command %q\n\n%s", args[0], overview())
	return ExitUsage
}

// flagSet is a subcommand's flags: the command's own and, unless it is
// `version`, those of every command.
type flagSet struct {
	*flag.FlagSet
	cmd    *command
	common *common
	short  map[string]string // long name → its one-letter alias
	// shownDefault is the default help shows for a flag whose default is
	// not one value (computed, or capped by another flag), in place of
	// the flag's own; a usage text never states its default itself.
	shownDefault map[string]string
}

// common holds the flags every command has.
type common struct {
	endpoint string
	sigv4    bool
	region   string
}

// commonFlags are the names of the flags in common.
var commonFlags = map[string]bool{"endpoint": true, "sigv4": true, "region": true}

// newFlagSet returns cmd's flag set with the flags of every command.
func newFlagSet(cmd *command, env Env) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("lockctl "+cmd.name, flag.ContinueOnError), cmd: cmd, short: map[string]string{}, shownDefault: map[string]string{}}
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
	fs.BoolVar(&fs.common.sigv4, "sigv4", truthy(env.Getenv("LOCKS_SIGV4")), "sign requests with AWS SigV4 (IAM auth), credentials from the AWS default chain (env LOCKS_SIGV4=1)")
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

// check checks --held-exit.
func (h *heldOptions) check() error {
	if h.code < 0 || h.code > 255 {
		return &usageError{fmt.Sprintf("--held-exit %d: want a code from 0 to 255", h.code)}
	}
	return nil
}

// permitsFlag defines -n/--permits: the number of permits of the
// semaphore RESOURCE names (0: RESOURCE is a lock).
func (fs *flagSet) permitsFlag() *int {
	n := new(int)
	fs.IntVar(n, "permits", 0, "RESOURCE is a semaphore of `N` permits: take one of them (every caller gives the same N)")
	fs.IntVar(n, "n", 0, "")
	fs.short["permits"] = "n"
	return n
}

// checkPermits checks -n.
func checkPermits(n int) error {
	if n < 0 || n > client.MaxPermits {
		return &usageError{fmt.Sprintf("-n %d: want 1 to %d permits", n, client.MaxPermits)}
	}
	return nil
}

// slotFlag defines --slot: the slot of a semaphore's permit (-1: RESOURCE
// is a lock).
func (fs *flagSet) slotFlag(usage string) *int {
	return fs.Int("slot", -1, usage)
}

// checkSlot checks --slot.
func checkSlot(fs *flagSet, slot int) error {
	if isSet(fs.FlagSet, "slot") && (slot < 0 || slot >= client.MaxPermits) {
		return &usageError{fmt.Sprintf("--slot %d: want 0 to %d", slot, client.MaxPermits-1)}
	}
	return nil
}

// semaphoreFlag defines -s/--semaphore (ls: --semaphores).
func (fs *flagSet) semaphoreFlag(usage string) *bool {
	name := "semaphore"
	if fs.cmd.name == "ls" {
		name = "semaphores"
	}
	b := new(bool)
	fs.BoolVar(b, name, false, usage)
	fs.BoolVar(b, "s", false, "")
	fs.short[name] = "s"
	return b
}

// rwFlag defines --rw: RESOURCE is a read/write lock (status, watch; ls:
// list the read/write locks).
func (fs *flagSet) rwFlag(usage string) *bool {
	return fs.Bool("rw", false, usage)
}

// checkKind refuses -s with --rw: a name shown or listed is a semaphore's
// or a read/write lock's, not both.
func checkKind(sem, rw bool) error {
	if sem && rw {
		return &usageError{"-s and --rw do not go together: RESOURCE is a semaphore or a read/write lock"}
	}
	return nil
}

// ownerFlag defines --owner of a command that takes a lease; empty means
// a new owner, made up per lease.
func (fs *flagSet) ownerFlag() *string {
	fs.shownDefault["owner"] = "HOST:PID:RANDOM, unique"
	return fs.String("owner", "", "the lease's `owner`")
}

// lockDelayFlag defines --lock-delay.
func (fs *flagSet) lockDelayFlag() *time.Duration {
	return fs.duration("lock-delay", 0, "after an unreleased expiry, keep others out this many more whole `seconds` (0–300 by default)")
}

// seconds is a flag.Value of a duration written as whole seconds ("90") or
// as a Go duration ("90s", "1m30s"): etcdctl and consul users type
// integers.
type seconds time.Duration

func (s *seconds) String() string { return time.Duration(*s).String() }

// Set parses v.
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

// checkTTL checks --ttl.
func checkTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl%time.Second != 0 {
		return &usageError{fmt.Sprintf("--ttl %s: must be whole seconds, at least 1", ttl)}
	}
	return nil
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

// truthy reports whether an environment variable's value switches a
// setting on: 1, true or yes, in any case, as the clients read LOCKS_SIGV4.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// isSet reports whether flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// lockFlag defines --lock, repeated: one name of a lock set each.
func (fs *flagSet) lockFlag() *[]string {
	names := new([]string)
	fs.Var((*stringList)(names), "lock", "a `NAME` of the lock set to take, all names or none; once per name (names may contain , and =)")
	return names
}

// stringList is a flag.Value that each use of the flag appends to, as
// given: no splitting, since names may contain "," and "=".
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }

// Set appends v.
func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
