package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ft288/locks/client"
)

// releaseTimeout bounds the release after the command ended.
const releaseTimeout = 10 * time.Second

// defaultGrace is --grace unless the lease is too short for it.
const defaultGrace = 10 * time.Second

// isSet reports whether flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func runCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("run"), env)
	ttl := fs.duration("ttl", 30*time.Second, "lease length in whole `seconds` (90 or 90s); renewed every ttl/3")
	wait := fs.duration("wait", 0, "how long to wait for the lock, in `seconds` or as a duration; 0 tries once")
	owner := fs.String("owner", "", "the lease's `owner` (default HOST:PID:RANDOM, unique)")
	grace := fs.duration("grace", defaultGrace, "after a lost lease, `seconds` from SIGTERM to SIGKILL (at most ttl/2 − min(ttl/10, 1s); default 10 or that)")
	lockDelay := fs.lockDelayFlag()
	held := fs.heldFlags()
	resource, argv, err := parse(fs, args)
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
	if err == nil && len(argv) == 0 {
		err = &usageError{"missing the command to run: lockctl run RESOURCE [flags] -- CMD [ARGS...]"}
	}
	if err == nil && (*grace < 0 || *wait < 0) {
		err = &usageError{"--grace and --wait must not be negative"}
	}
	// The command must be gone before the service can hand the lock to
	// anyone else: SIGTERM goes out grace before the lease's local
	// deadline, so SIGKILL lands before the service's expiry. That needs
	// room in the lease for the keep-alive (every ttl/3) to work first.
	margin := min(*ttl/10, time.Second)
	limit := *ttl/2 - margin
	if err == nil {
		if !isSet(fs.FlagSet, "grace") {
			*grace = min(*grace, limit)
		} else if *grace > limit {
			err = &usageError{fmt.Sprintf("--grace %s does not fit in a %s lease: the command is stopped grace before the lease can end, so grace must be at most ttl/2 − min(ttl/10, 1s) = %s; raise --ttl or lower --grace", *grace, *ttl, limit)}
		}
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

	lease, code := waitForLock(fs.common, resource, *owner, *ttl, *wait, *grace+margin, opts, held, sigc, env)
	if lease == nil {
		return code
	}
	if err := lease.Err(); err != nil { // lost between the grant and now
		release(lease, env) // the service may still hold it (a slow answer)
		fmt.Fprintf(env.Stderr, "lockctl: %v; not running the command; exiting %d\n", err, ExitLeaseLost)
		return ExitLeaseLost
	}
	return runLocked(argv, lease, *grace, sigc, env)
}

// waitForLock takes the lock, giving up on a signal. It returns the lease
// (renewing itself), or nil and the exit code. When it ends without a
// lease it waits for the client to release whatever an attempt may have
// been granted unheard: an acquire still in flight when --wait ran out or
// a signal came is released with its token if the service grants it after
// all, and one whose outcome is unknown (a network failure, a 5xx) by
// owner when the owner is lockctl's own unique one. A grant nobody heard
// of would block the next run for a whole TTL. A clean "held" answer needs
// no clean-up.
func waitForLock(com *common, resource, owner string, ttl, wait, margin time.Duration, opts []client.AcquireOption, held *heldOptions, sigc <-chan os.Signal, env Env) (*client.Lease, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := com.client(ctx, client.WithLeaseMargin(margin))
	if err != nil {
		return nil, failed(env, err)
	}
	type result struct {
		lease *client.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := take(ctx, c, resource, owner, ttl, wait, opts)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return r.lease, ExitOK
		}
		drain(c, sigc)
		if errors.Is(r.err, client.ErrHeld) {
			if !held.quiet {
				fmt.Fprintf(env.Stderr, "lockctl: lock %q is held by another owner; not running the command (--wait %s)\n", resource, wait)
			}
			return nil, held.code
		}
		return nil, failed(env, r.err)
	case sig := <-sigc:
		cancel()
		if r := <-done; r.lease != nil {
			release(r.lease, env)
		}
		drain(c, sigc)
		fmt.Fprintf(env.Stderr, "lockctl: %v while waiting for lock %q\n", sig, resource)
		return nil, 128 + int(sig.(syscall.Signal))
	}
}

// release ends the lease and returns the service's answer; the client
// retries temporary failures for up to releaseTimeout. A failure is
// reported; the lease runs out by itself.
func release(lease *client.Lease, env Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	err := lease.Release(ctx)
	if err != nil && !errors.Is(lease.Err(), client.ErrLeaseLost) {
		fmt.Fprintf(env.Stderr, "lockctl: warning: %v (the lease expires by itself)\n", err)
	}
	return err
}
