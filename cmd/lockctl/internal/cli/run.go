package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/ft288/locks/client"
)

// runHelp is the help of `lockctl run`.
const runHelp = `Takes the lock on RESOURCE (trying once, or waiting up to --wait), runs CMD
with LOCK_RESOURCE, LOCK_OWNER and LOCK_FENCING_TOKEN in its environment,
renews the lease every ttl/3, and releases it when CMD is done, exiting with
CMD's status.

With -n N (--permits N) RESOURCE is a semaphore of N permits: CMD runs under
one of them, so that at most N commands run at once, with LOCK_SLOT (the
permit's slot, 0 to N-1) and LOCK_PERMITS in its environment too; fence per
slot with LOCK_FENCING_TOKEN. Every run of the semaphore must give the same
N (another is refused, exit 4). A full semaphore is "held" below.

CMD runs in its own process group. SIGINT, SIGTERM and SIGHUP are forwarded
to that group. Ctrl-C escalates: the first SIGINT is forwarded as SIGINT and,
if processes of the group remain a second later, lockctl names them (pid and
command) and says that the lease is kept until they exit; a second SIGINT
sends the group SIGTERM, a third SIGKILL. The lease covers every process of
the group: when CMD's main
process exits while processes it started in the background still run,
lockctl keeps renewing and waits until the last of them has exited before it
releases the lock (as flock(1) holds its lock while a background child keeps
the descriptor open). Background steps are part of the job, and stopping
them could leave their work half done; a job whose children must not outlive
it waits for them or kills them itself. Processes that leave the group
(setsid, daemons) are not covered.

If the lease is lost, CMD's process group gets SIGTERM, then SIGKILL after
--grace, and lockctl exits 76. --grace is a grace inside the lease: the
local deadline is --grace + min(ttl/10, 1s) before the lease's end, and
SIGKILL comes no later than min(ttl/10, 1s) before that end (by lockctl's
clock), however late the loss is noticed. --on-lost HOOK runs first: sh -c
HOOK, with LOCK_RESOURCE, LOCK_OWNER, LOCK_FENCING_TOKEN and
LOCK_LOST_REASON in its environment and its output on lockctl's stderr;
the SIGTERM follows when the hook exits, or half-way to the SIGKILL, and a
hook still running --grace after the loss is killed. Ctrl-Z (SIGTSTP, or
kill -TSTP on lockctl) stops CMD's group together with lockctl, and
continuing lockctl (fg, bg, SIGCONT) continues the group; continued past
the lease's local deadline, the group stays stopped: --on-lost runs, then
the group is killed (SIGKILL). A SIGSTOP sent to lockctl alone does not
stop CMD, which runs on unrenewed: stop lockctl with SIGTSTP, and fence
the writes with LOCK_FENCING_TOKEN.

With --lock NAME, once per name and no RESOURCE, lockctl takes a lock set:
every name or none, each with its own lease and token, taken in byte
order (with --wait, waiting at a held name holding the names before it:
one order for every caller, so no deadlock). The command follows "--" (required: no word can be taken for a
name), and gets LOCK_OWNER, LOCK_SET_ID, LOCK_COUNT, LOCK_NAME_1,
LOCK_FENCING_TOKEN_1, LOCK_NAME_2, ... in the set's name order (byte order),
and LOCKS_JSON ([{"resource", "fencing_token"}, ...]); names may contain
"," and "=". A set of one name also gets LOCK_RESOURCE and
LOCK_FENCING_TOKEN. Everything above holds for the set as for one lease:
the loss of any name is the loss of the set, and its local deadline is the
earliest of its names'.

With --read or --write RESOURCE is a read/write lock: CMD runs under a
reader's lease (shared with the other readers, up to 64) or the writer's
(alone), with LOCK_MODE (read or write) in its environment and, for a
reader, LOCK_SLOT (its slot, 0 to 63). Every grant's LOCK_FENCING_TOKEN is
larger than every earlier one of the name, read or write. Waiting is fair:
a waiting writer keeps out the readers that come after it. A lock and a
read/write lock may share a name. Everything above holds for the lease.

When the lock is held by another owner, lockctl exits 75 and says so on
stderr; for cron, --held-exit 0 --quiet (-E 0 -q) makes that a silent
success, like flock -n -E 0.`

// runOptions say how to stop the command when the lease is lost.
type runOptions struct {
	// grace is the time from the loss to SIGKILL, within the lease.
	grace time.Duration
	// margin is the lease's local safety margin (leaseFlags.margin): its
	// local deadline is margin before its end.
	margin time.Duration
	// onLost is the hook run (sh -c) on the loss before SIGTERM; "" none.
	onLost string
	// again: lockctl campaigns again after a loss (elect), rather than
	// exiting ExitLeaseLost; only what it says changes.
	again bool
	// env are more variables for the command and the hook, beyond the
	// lease's LOCK_RESOURCE, LOCK_OWNER and LOCK_FENCING_TOKEN: a permit's
	// LOCK_SLOT and LOCK_PERMITS.
	env []string
}

// releaseTimeout bounds the release after the command ended.
const releaseTimeout = 10 * time.Second

// defaultGrace is --grace unless the lease is too short for it.
const defaultGrace = 10 * time.Second

// leaseFlags are the flags of a command run under a lease (run, elect).
type leaseFlags struct {
	ttl, grace, lockDelay *time.Duration
	owner, onLost         *string
}

// leaseFlags defines the flags of a command run under a lease.
func (fs *flagSet) leaseFlags() *leaseFlags {
	fs.shownDefault["grace"] = fmt.Sprintf("%s, or that limit when it is less", defaultGrace)
	return &leaseFlags{
		ttl:       fs.duration("ttl", 30*time.Second, "lease length in whole `seconds` (90 or 90s); renewed every ttl/3"),
		owner:     fs.ownerFlag(),
		grace:     fs.duration("grace", defaultGrace, "after a lost lease, `seconds` from SIGTERM to SIGKILL, inside the lease, at most ttl/2 − min(ttl/10, 1s)"),
		onLost:    fs.String("on-lost", "", "when the lease is lost, run sh -c `HOOK` before stopping the command (LOCK_* in its environment; within --grace)"),
		lockDelay: fs.lockDelayFlag(),
	}
}

// check checks the flags and the command after them (synopsis says how to
// give one) and returns the acquire options of --lock-delay.
func (lf *leaseFlags) check(fs *flagSet, argv []string, synopsis string) ([]client.AcquireOption, error) {
	if err := checkTTL(*lf.ttl); err != nil {
		return nil, err
	}
	opts, err := checkLockDelay(*lf.lockDelay)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, &usageError{"missing the command to run: " + synopsis}
	}
	if *lf.grace < 0 {
		return nil, &usageError{"--grace must not be negative"}
	}
	// The command must be gone before the service can hand the lock to
	// anyone else: SIGTERM goes out grace before the lease's local
	// deadline, so SIGKILL lands before the service's expiry. That needs
	// room in the lease for the keep-alive (every ttl/3) to work first.
	limit := *lf.ttl/2 - min(*lf.ttl/10, time.Second)
	if !isSet(fs.FlagSet, "grace") {
		*lf.grace = min(*lf.grace, limit)
	} else if *lf.grace > limit {
		return nil, &usageError{fmt.Sprintf("--grace %s does not fit in a %s lease: the command is stopped grace before the lease can end, so grace must be at most ttl/2 − min(ttl/10, 1s) = %s; raise --ttl or lower --grace", *lf.grace, *lf.ttl, limit)}
	}
	return opts, nil
}

// margin is the lease's local safety margin: --grace and min(ttl/10, 1s).
func (lf *leaseFlags) margin() time.Duration {
	return *lf.grace + min(*lf.ttl/10, time.Second)
}

// runOptions returns how to stop the command on a loss.
func (lf *leaseFlags) runOptions() runOptions {
	return runOptions{grace: *lf.grace, margin: lf.margin(), onLost: *lf.onLost}
}

// runCmd is `lockctl run`.
func runCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("run"), env)
	lf := fs.leaseFlags()
	wait := fs.duration("wait", 0, "how long to wait for the lock, in `seconds` or as a duration; 0 tries once")
	permits := fs.permitsFlag()
	rw := fs.rwFlags()
	held := fs.heldFlags()
	locks := fs.lockFlag()
	setPrefix := fs.String("set-prefix", "", "with --lock: the lock set's path `prefix`, which every name must begin with (default: the names' longest common prefix)")
	names, argv, err := parseRun(fs, args, locks)
	set := len(*locks) > 0
	var opts []client.AcquireOption
	if err == nil {
		synopsis := "lockctl run RESOURCE [flags] -- CMD [ARGS...]"
		if set {
			synopsis = "lockctl run --lock NAME [--lock NAME...] [flags] -- CMD [ARGS...]"
		}
		opts, err = lf.check(fs, argv, synopsis)
	}
	if err == nil {
		err = held.check()
	}
	if err == nil && *wait < 0 {
		err = &usageError{"--wait must not be negative"}
	}
	if err == nil {
		err = checkPermits(*permits)
	}
	if err == nil && set && *permits > 0 {
		err = &usageError{"-n and --lock do not go together: a lock set's names are locks"}
	}
	if err == nil {
		err = rw.check(*permits, set)
	}
	if err == nil && !set && isSet(fs.FlagSet, "set-prefix") {
		err = &usageError{"--set-prefix needs --lock"}
	}
	if err == nil && *setPrefix != "" {
		opts = append(opts, client.WithSetPrefix(*setPrefix))
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	if err := runSupported(); err != nil {
		fmt.Fprintln(env.Stderr, "lockctl:", err)
		return ExitError
	}

	// From here on SIGINT, SIGTERM and SIGHUP are ours to handle: they stop
	// the wait for the lock, and are forwarded to the command.
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	resource := names[0]
	doing := fmt.Sprintf("waiting for lock %q", resource)
	ropt := lf.runOptions()
	var permit *client.Permit
	switch {
	case set:
		doing = fmt.Sprintf("waiting for lock set %q", names)
	case *permits > 0:
		doing = fmt.Sprintf("waiting for a permit of semaphore %q", resource)
	case rw.mode() != "":
		doing = fmt.Sprintf("waiting for a %s lease of read/write lock %q", rw.mode(), resource)
	}
	lease, code, err := waitForLock(fs.common, lf.margin(), doing, func(ctx context.Context, c *client.Client) (hold, error) {
		switch {
		case set:
			s, err := takeSet(ctx, c, names, *lf.owner, *lf.ttl, *wait, opts)
			if err != nil {
				return nil, err
			}
			return setHold{s}, nil
		case *permits > 0:
			p, err := takePermit(ctx, c, resource, *permits, *lf.owner, *lf.ttl, *wait, opts)
			if err != nil {
				return nil, err
			}
			permit = p
			return leaseHold{p.Lease}, nil
		case rw.mode() != "":
			l, err := takeRW(ctx, c, resource, rw.mode(), *lf.owner, *lf.ttl, *wait, opts)
			if err != nil {
				return nil, err
			}
			return rwHold{l}, nil
		}
		l, err := take(ctx, c, resource, *lf.owner, *lf.ttl, *wait, opts)
		if err != nil {
			return nil, err
		}
		return leaseHold{l}, nil
	}, sigc, env)
	if errors.Is(err, client.ErrHeld) {
		if !held.quiet {
			switch {
			case set:
				fmt.Fprintf(env.Stderr, "lockctl: %v; not running the command (--wait %s)\n", heldCause(err), *wait)
			case *permits > 0:
				fmt.Fprintf(env.Stderr, "lockctl: semaphore %q is full: its %d permits are held by other owners; not running the command (--wait %s)\n", resource, *permits, *wait)
			case rw.mode() != "":
				fmt.Fprintf(env.Stderr, "lockctl: %s; not running the command (--wait %s)\n", rwHeld(resource, rw.mode()), *wait)
			default:
				fmt.Fprintf(env.Stderr, "lockctl: lock %q is held by another owner; not running the command (--wait %s)\n", resource, *wait)
			}
		}
		return held.code
	}
	if err != nil {
		return failed(env, err)
	}
	if lease == nil {
		return code
	}
	if err := lease.Check(); err != nil { // lost between the grant and now, by the clock
		release(lease, lf.margin(), env) // the service may still hold it (a slow answer)
		fmt.Fprintf(env.Stderr, "lockctl: %v; not running the command; exiting %d\n", err, ExitLeaseLost)
		return ExitLeaseLost
	}
	if permit != nil {
		ropt.env = permitEnv(permit)
	}
	code, _ = runLocked(argv, lease, ropt, sigc, env)
	return code
}

// heldCause is the *client.SetHeldError in err, which says which name
// refused the set, or err.
func heldCause(err error) error {
	var h *client.SetHeldError
	if errors.As(err, &h) {
		return h
	}
	return err
}

// parseRun parses run's arguments: RESOURCE with flags before or after it
// and then the command (after a "--", if any), as parse does; or, with
// --lock, flags only, then "--" and the command. The "--" is required
// there, so that no word of the command line can be taken for a name or
// the other way round: every name comes with its own --lock. It returns
// the names (RESOURCE alone, or the --lock ones) and the command.
func parseRun(fs *flagSet, args []string, locks *[]string) ([]string, []string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if len(*locks) == 0 {
		if fs.NArg() == 0 {
			return nil, nil, &usageError{"missing RESOURCE (or --lock NAME, once per name of a lock set)"}
		}
		resource := fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return nil, nil, err
		}
		if len(*locks) > 0 {
			return nil, nil, &usageError{fmt.Sprintf("RESOURCE %q and --lock: give every name of a lock set with --lock, or one RESOURCE", resource)}
		}
		return []string{resource}, fs.Args(), nil
	}
	rest := fs.Args()
	if len(rest) > 0 && (len(rest) == len(args) || args[len(args)-len(rest)-1] != "--") {
		return nil, nil, &usageError{fmt.Sprintf("with --lock, every name takes its own --lock and a command follows \"--\": got %q", rest[0])}
	}
	return *locks, rest, nil
}

// permitEnv is a permit's variables beyond a lease's: LOCK_SLOT and
// LOCK_PERMITS.
func permitEnv(p *client.Permit) []string {
	return []string{"LOCK_SLOT=" + strconv.Itoa(p.Slot()), "LOCK_PERMITS=" + strconv.Itoa(p.Permits())}
}

// waitForLock takes the lock with take, giving up on a signal; doing says
// what it does ("waiting for lock ..."). It returns the lease or set
// (renewing itself); or nil and take's error, or the exit code for a
// signal, after draining the clean-up releases (see "Leases nobody heard
// of" in doc.go).
func waitForLock(com *common, margin time.Duration, doing string, take func(context.Context, *client.Client) (hold, error), sigc <-chan os.Signal, env Env) (hold, int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := com.client(ctx, client.WithLeaseMargin(margin))
	if err != nil {
		return nil, 0, err
	}
	type result struct {
		lease hold
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := take(ctx, c)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return r.lease, ExitOK, nil
		}
		drain(c, sigc)
		return nil, 0, r.err
	case sig := <-sigc:
		cancel()
		if r := <-done; r.lease != nil {
			release(r.lease, margin, env)
		}
		drain(c, sigc)
		fmt.Fprintf(env.Stderr, "lockctl: %v while %s\n", sig, doing)
		return nil, 128 + int(sig.(syscall.Signal)), nil
	}
}

// release ends the lease (or set) and returns the service's answer; the
// client retries temporary failures for up to releaseTimeout, and not past
// the lease's end by lockctl's clock (its local deadline + margin; a set's
// earliest), so that lockctl exits by then when the service does not
// answer. A failure is reported; the lease runs out by itself.
func release(lease hold, margin time.Duration, env Env) error {
	end := lease.Deadline().Add(margin)
	if limit := time.Now().Add(releaseTimeout); limit.Before(end) {
		end = limit
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	err := lease.Release(ctx)
	if err != nil && !errors.Is(lease.Check(), client.ErrLeaseLost) {
		fmt.Fprintf(env.Stderr, "lockctl: warning: %v (the lease expires by itself)\n", err)
	}
	return err
}
