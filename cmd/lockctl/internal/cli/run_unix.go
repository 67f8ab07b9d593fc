//go:build unix

package cli

import (
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

// groupPollInterval is how often lockctl looks whether the command's
// process group has emptied after its main process exited.
const groupPollInterval = 50 * time.Millisecond

// runSupported reports nil: Unix has the process groups and signals run
// needs.
func runSupported() error { return nil }

// runLocked runs argv while lease is held (see runHelp) and returns
// lockctl's exit code.
func runLocked(argv []string, lease *client.Lease, grace time.Duration, sigc <-chan os.Signal, env Env) int {
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
	// Orphans of the command become lockctl's to reap, so that its group
	// empties when they exit.
	becomeSubreaper()
	// Job control: Ctrl-Z must stop the command with lockctl.
	jobc := make(chan os.Signal, 4)
	signal.Notify(jobc, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(jobc)
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
	return supervise(cmd, lease, grace, sigc, jobc, env)
}

// supervise runs the command's process group to its end under the lease
// (see "run" in doc.go), releases the lease and returns the exit code.
func supervise(cmd *exec.Cmd, lease *client.Lease, grace time.Duration, sigc, jobc <-chan os.Signal, env Env) int {
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var (
		werr      error
		exited    bool             // the main process was waited for
		poll      <-chan time.Time // ticks once it was, until the group is empty
		kill      <-chan time.Time // the end of the grace period
		stopped   bool             // lockctl stopped the group on SIGTSTP
		leaseDone = lease.Done()
	)
	var ticker *time.Ticker
	mainExited := func(err error) {
		werr, exited = err, true
		ticker = time.NewTicker(groupPollInterval)
		poll = ticker.C
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	// The group outlives its main process while anything it left behind
	// runs: the lease must cover that too.
	for !exited || !groupGone(pgid) {
		select {
		case sig := <-sigc:
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		case sig := <-jobc:
			switch {
			case sig == syscall.SIGTSTP:
				// Ctrl-Z reaches lockctl's process group, not the
				// command's: stop the command, then lockctl (and with it
				// the renewals) the way SIGTSTP would have.
				_ = syscall.Kill(-pgid, syscall.SIGSTOP)
				stopped = true
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			case stopped: // SIGCONT after our stop
				stopped = false
				// If the local deadline passed while stopped, the lease
				// is lost: the group stays stopped until the loss below
				// has sent it SIGTERM.
				if leaseDone == nil || time.Now().Before(lease.Deadline()) {
					_ = syscall.Kill(-pgid, syscall.SIGCONT)
				}
			}
		case <-leaseDone:
			leaseDone = nil
			fmt.Fprintf(env.Stderr, "lockctl: %v; stopping the command (SIGTERM, then SIGKILL after %s)\n", lease.Err(), grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			// A stopped process acts on SIGTERM only once continued.
			_ = syscall.Kill(-pgid, syscall.SIGCONT)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			select {
			case err := <-waited: // reaped meanwhile: the group may be gone
				mainExited(err)
			default:
			}
			// While the leader is not reaped, or the group has members, the
			// group id cannot have been reused.
			if !exited || !groupGone(pgid) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		case err := <-waited:
			mainExited(err)
		case <-poll:
		}
	}

	if err := lease.Err(); errors.Is(err, client.ErrLeaseLost) {
		if errors.Is(err, client.ErrLeaseExpired) {
			release(lease, env) // the service may still hold it
		}
		var lost *client.LeaseLostError
		if errors.As(err, &lost) && lost.ForceReleased {
			fmt.Fprintf(env.Stderr, "lockctl: lease on %q was force released by an operator while the command ran; exiting %d\n", lease.Resource(), ExitLeaseLost)
			return ExitLeaseLost
		}
		fmt.Fprintf(env.Stderr, "lockctl: lease on %q lost while the command ran; exiting %d\n", lease.Resource(), ExitLeaseLost)
		return ExitLeaseLost
	}
	err := release(lease, env)
	var p *client.ProblemError
	if errors.Is(err, client.ErrNotFound) && errors.As(err, &p) && p.ForceReleased {
		fmt.Fprintf(env.Stderr, "lockctl: lease on %q was force released by an operator while the command ran (%v); exiting %d\n", lease.Resource(), err, ExitLeaseLost)
		return ExitLeaseLost
	}
	if errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrNotFound) {
		// Another owner or a newer lease holds the lock, or the lease was
		// already over (ended by the service's clock before ours, or released
		// elsewhere): the command ran at least partly without it, unnoticed
		// between two renewals.
		fmt.Fprintf(env.Stderr, "lockctl: lease on %q was taken over or ended while the command ran (%v); exiting %d\n", lease.Resource(), err, ExitLeaseLost)
		return ExitLeaseLost
	}
	return commandStatus(werr, env)
}

// groupGone reports whether the process group pgid is empty, after reaping
// the orphans that lockctl, their subreaper, has to (a zombie still counts
// as a member). Call it only after the group's leader was waited for.
func groupGone(pgid int) bool {
	reapOrphans(pgid)
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
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
