package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/ft288/locks/client"
)

// releaseTimeout bounds the release after the command ended.
const releaseTimeout = 10 * time.Second

func runCmd(args []string, env Env) int {
	fs, com := newFlagSet("run", env)
	ttl := fs.Duration("ttl", 30*time.Second, "lease length, whole seconds; renewed every ttl/3")
	wait := fs.Duration("wait", 0, "how long to wait for the lock; 0 tries once")
	owner := fs.String("owner", "", "owner (default HOST:PID:RANDOM)")
	grace := fs.Duration("grace", 10*time.Second, "after a lost lease, time between SIGTERM and SIGKILL")
	resource, argv, err := parse(fs, args)
	if err == nil {
		err = checkTTL(*ttl)
	}
	if err == nil && len(argv) == 0 {
		err = &usageError{"missing the command to run: lockctl run RESOURCE [flags] -- CMD [ARGS...]"}
	}
	if err == nil && (*grace < 0 || *wait < 0) {
		err = &usageError{"--grace and --wait must not be negative"}
	}
	if err != nil {
		return parseFailed(env, err)
	}
	ownOwner := *owner == "" // unique to this process: safe to clean up after
	if *owner == "" {
		*owner = defaultOwner()
	}

	// From here on SIGINT, SIGTERM and SIGHUP are ours to handle: they stop
	// the wait for the lock, and are forwarded to the command.
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	lease, code := waitForLock(com, resource, *owner, *ttl, *wait, ownOwner, sigc, env)
	if lease == nil {
		return code
	}
	lease.KeepAlive(context.Background())
	if err := lease.Err(); err != nil { // lost between the grant and now
		release(lease, env) // the service may still hold it (a slow answer)
		fmt.Fprintf(env.Stderr, "lockctl: %v; not running the command; exiting %d\n", err, ExitLeaseLost)
		return ExitLeaseLost
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = env.Stdin, env.Stdout, env.Stderr
	cmd.Env = append(append([]string(nil), env.Environ...),
		"LOCK_RESOURCE="+lease.Resource(),
		"LOCK_OWNER="+lease.Owner(),
		"LOCK_FENCING_TOKEN="+strconv.FormatInt(lease.FencingToken(), 10),
	)
	// Its own process group, so that signals reach everything it starts;
	// and SIGKILL if lockctl dies without stopping it (OOM killer, kill -9),
	// so no command runs on without a lease renewer.
	cmd.SysProcAttr = procAttr()
	// The parent-death signal fires when the thread that forked the child
	// exits: pin this goroutine (main) to its thread for good.
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		release(lease, env)
		fmt.Fprintf(env.Stderr, "lockctl: start %s: %v\n", argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	return supervise(cmd, lease, *grace, sigc, env)
}

// waitForLock takes the lock, giving up on a signal. It returns the lease,
// or nil and the exit code. Whenever it ends without a lease and owner is
// this process's own, it releases owner's lease, if any: an attempt still in
// flight when --wait ran out or a signal came, or one whose answer was lost,
// may have been granted, and a grant nobody heard of would block the next
// run for a whole TTL. The owner is unique to this process, so this can
// only ever end a lease of its own.
func waitForLock(com *common, resource, owner string, ttl, wait time.Duration, ownOwner bool, sigc <-chan os.Signal, env Env) (*client.Lease, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := com.client(ctx)
	if err != nil {
		return nil, failed(env, err)
	}
	type result struct {
		lease *client.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := take(ctx, c, resource, owner, ttl, wait)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			if ownOwner && !errors.Is(r.err, client.ErrInvalid) {
				releaseUnheard(c, resource, owner)
			}
			if errors.Is(r.err, client.ErrHeld) {
				fmt.Fprintf(env.Stderr, "lockctl: lock %q is held by another owner; not running the command (--wait %s)\n", resource, wait)
				return nil, ExitHeld
			}
			return nil, failed(env, r.err)
		}
		return r.lease, ExitOK
	case sig := <-sigc:
		cancel()
		if r := <-done; r.lease != nil {
			release(r.lease, env)
		} else if ownOwner {
			releaseUnheard(c, resource, owner)
		}
		fmt.Fprintf(env.Stderr, "lockctl: %v while waiting for lock %q\n", sig, resource)
		return nil, 128 + int(sig.(syscall.Signal))
	}
}

// releaseUnheard releases owner's lease on resource, if an acquire whose
// answer was lost created one; every failure is ignored (the lease would
// run out by itself).
func releaseUnheard(c *client.Client, resource, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = c.Release(ctx, resource, owner, 0)
}

// supervise waits for the command, forwarding signals to its process group
// and stopping it when the lease is lost, then releases the lease.
func supervise(cmd *exec.Cmd, lease *client.Lease, grace time.Duration, sigc <-chan os.Signal, env Env) int {
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	leaseDone := lease.Done()
	var kill <-chan time.Time
	var werr error
	termSent := false
wait:
	for {
		select {
		case sig := <-sigc:
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		case <-leaseDone:
			leaseDone = nil
			fmt.Fprintf(env.Stderr, "lockctl: %v; stopping the command (SIGTERM, then SIGKILL after %s)\n", lease.Err(), grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			termSent = true
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			select {
			case werr = <-waited: // reaped meanwhile: the group may be gone
				break wait
			default:
			}
			// The leader is not reaped, so its pid, and with it the
			// group id, cannot have been reused.
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		case werr = <-waited:
			break wait
		}
	}

	if err := lease.Err(); errors.Is(err, client.ErrLeaseLost) {
		// The leader is gone; whatever else of the command's group still
		// runs gets the rest of the grace period, then SIGKILL. If the
		// leader exited just as the loss was noticed, the rest of the group
		// has not had its SIGTERM yet.
		if !termSent {
			fmt.Fprintf(env.Stderr, "lockctl: %v; stopping what is left of the command (SIGTERM, then SIGKILL after %s)\n", err, grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		}
		killStragglers(pgid, kill)
		if errors.Is(err, client.ErrLeaseExpired) {
			release(lease, env) // the service may still hold it
		}
		fmt.Fprintf(env.Stderr, "lockctl: lease on %q lost while the command ran; exiting %d\n", lease.Resource(), ExitLeaseLost)
		return ExitLeaseLost
	}
	if err := release(lease, env); errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrNotFound) {
		// Another owner or a newer lease holds the lock, or the lease was
		// already over (ended by the service's clock before ours, or released
		// elsewhere): the command ran at least partly without it, unnoticed
		// between two renewals.
		fmt.Fprintf(env.Stderr, "lockctl: lease on %q was taken over or ended while the command ran (%v); exiting %d\n", lease.Resource(), err, ExitLeaseLost)
		return ExitLeaseLost
	}
	return commandStatus(werr, env)
}

// killStragglers waits until the process group pgid is empty or kill fires
// (nil: the grace period is over), then SIGKILLs what is left of it.
func killStragglers(pgid int, kill <-chan time.Time) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for kill != nil {
		if syscall.Kill(-pgid, 0) != nil { // ESRCH: no member left
			return
		}
		select {
		case <-kill:
			kill = nil
		case <-tick.C:
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// release ends the lease and returns the service's answer. A failure is
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

// commandStatus is the exit code for the command's end: its own, or 128+n
// when signal n killed it.
func commandStatus(err error, env Env) int {
	if err == nil {
		return ExitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintln(env.Stderr, "lockctl: wait for the command:", err)
	return ExitError
}
