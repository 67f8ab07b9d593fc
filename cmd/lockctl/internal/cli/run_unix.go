//go:build unix

package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/ft288/locks/client"
)

// groupPollInterval is how often lockctl looks whether the command's
// process group has emptied after its main process exited.
const groupPollInterval = 50 * time.Millisecond

// interruptReportDelay is how long after a Ctrl-C lockctl looks which
// processes of the command's group still run, and names them.
const interruptReportDelay = time.Second

// escalation is what the n-th Ctrl-C (SIGINT) sends the command's group:
// the interrupt itself, then SIGTERM, then SIGKILL.
var escalation = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL}

// signalNames are the names lockctl says signals by.
var signalNames = map[syscall.Signal]string{
	syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", syscall.SIGHUP: "SIGHUP",
}

// member is a process of the command's group.
type member struct {
	pid     int
	command string
}

// runSupported reports nil: Unix has the process groups and signals run
// needs.
func runSupported() error { return nil }

// runLocked runs argv while lease is held (see runHelp) and returns
// lockctl's exit code, and whether the lease was lost while the command
// ran (the command was stopped) with no signal asking lockctl to stop.
func runLocked(argv []string, lease hold, opt runOptions, sigc <-chan os.Signal, env Env) (code int, lost bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = env.Stdin, env.Stdout, env.Stderr
	cmd.Env = append(append(append([]string(nil), env.Environ...), lease.env()...), opt.env...)
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
		release(lease, opt.margin, env)
		fmt.Fprintf(env.Stderr, "lockctl: start %s: %v\n", argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127, false
		}
		return 126, false
	}
	return supervise(cmd, lease, opt, sigc, jobc, env)
}

// startHook starts the --on-lost hook in its own process group and returns
// a channel that receives its end.
func startHook(hook string, lease hold, extra []string, env Env) (*exec.Cmd, <-chan error, error) {
	cmd := exec.Command("/bin/sh", "-c", hook)
	cmd.Stdout, cmd.Stderr = env.Stderr, env.Stderr
	cmd.Env = append(append(append(append([]string(nil), env.Environ...), lease.env()...), extra...),
		"LOCK_LOST_REASON="+lease.Check().Error())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, done, nil
}

// supervise runs the command's process group to its end under the lease
// (see "run" in doc.go), releases the lease and returns the exit code, and
// whether the lease was lost while the command ran with no signal asking
// lockctl to stop.
func supervise(cmd *exec.Cmd, lease hold, opt runOptions, sigc, jobc <-chan os.Signal, env Env) (code int, lost bool) {
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var (
		werr       error
		exited     bool             // the main process was waited for
		poll       <-chan time.Time // ticks once it was, until the group is empty
		term       <-chan time.Time // after a lost lease, when SIGTERM is due at the latest
		termSent   bool             // after a lost lease, the group got SIGTERM
		kill       <-chan time.Time // after a lost lease, when SIGKILL is due
		killAt     time.Time        // when kill fires
		stopped    bool             // lockctl stopped the group on SIGTSTP
		frozen     bool             // the group stays stopped: continued past the local deadline
		leaseDone  = lease.Done()
		interrupts int              // Ctrl-Cs so far
		signalled  bool             // a signal asked lockctl to stop
		report     <-chan time.Time // when to name what still runs after one
		hook       *exec.Cmd        // the --on-lost hook, while it runs
		hookDone   <-chan error
		hookKill   <-chan time.Time // --grace after the loss: the hook's end
	)
	var ticker *time.Ticker
	mainExited := func(err error) {
		werr, exited = err, true
		ticker = time.NewTicker(groupPollInterval)
		poll = ticker.C
	}
	var timers []*time.Timer
	after := func(d time.Duration) <-chan time.Time {
		t := time.NewTimer(d)
		timers = append(timers, t)
		return t.C
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
		for _, t := range timers {
			t.Stop()
		}
	}()
	killGroup := func() {
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
	}
	sendTerm := func() {
		termSent, term = true, nil
		if frozen {
			// Continued, it would run on under a lease that may be
			// another's by now; SIGKILL ends a stopped process as it is.
			killGroup()
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		// A stopped process acts on SIGTERM only once continued.
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
	}
	hookEnded := func(err error) {
		hook, hookDone = nil, nil
		if err != nil {
			fmt.Fprintf(env.Stderr, "lockctl: --on-lost: %v\n", err)
		}
	}
	startLostHook := func() bool {
		var err error
		if hook, hookDone, err = startHook(opt.onLost, lease, opt.env, env); err != nil {
			fmt.Fprintf(env.Stderr, "lockctl: --on-lost: %v\n", err)
			return false
		}
		hookKill = after(opt.grace)
		return true
	}
	// onLoss stops the command after the lease was lost (see runHelp):
	// SIGKILL comes grace after the loss, and no later than the lease's
	// end at the service less min(ttl/10, 1s), by lockctl's clock: grace
	// after the local deadline, whatever the loss's lateness (a pause of
	// lockctl's). A frozen group is never continued: --on-lost, then
	// SIGKILL.
	onLoss := func() {
		leaseDone = nil
		now := time.Now()
		if frozen {
			if opt.onLost == "" {
				fmt.Fprintf(env.Stderr, "lockctl: %v; lockctl was stopped past the lease's local deadline: the command stays stopped and is killed (SIGKILL)\n", lease.Check())
				killGroup()
				return
			}
			fmt.Fprintf(env.Stderr, "lockctl: %v; lockctl was stopped past the lease's local deadline: the command stays stopped while --on-lost runs, then is killed (SIGKILL within %s)\n", lease.Check(), opt.grace/2)
			if !startLostHook() {
				killGroup()
				return
			}
			term = after(opt.grace / 2)
			return
		}
		left := max(0, min(opt.grace, lease.Deadline().Add(opt.grace).Sub(now)))
		killAt, kill = now.Add(left), after(left)
		if opt.onLost == "" {
			fmt.Fprintf(env.Stderr, "lockctl: %v; stopping the command (SIGTERM, then SIGKILL after %s)\n", lease.Check(), left.Round(time.Millisecond))
			sendTerm()
			return
		}
		// The hook comes first, in the first half of what is left of the
		// grace period: SIGKILL stays due at its end.
		fmt.Fprintf(env.Stderr, "lockctl: %v; running --on-lost, then stopping the command (SIGTERM within %s, SIGKILL after %s)\n", lease.Check(), (left / 2).Round(time.Millisecond), left.Round(time.Millisecond))
		if !startLostHook() {
			sendTerm()
			return
		}
		term = after(left / 2)
	}
	// The group outlives its main process while anything it left behind
	// runs: the lease must cover that too.
	for !exited || !groupGone(pgid) {
		select {
		case sig := <-sigc:
			signalled = true
			if frozen { // never continued: it goes now
				killGroup()
				break
			}
			s := sig.(syscall.Signal)
			if s == syscall.SIGINT {
				// Ctrl-C escalates: a command's background children
				// ignore SIGINT (a non-interactive shell starts them so).
				s = escalation[min(interrupts, len(escalation)-1)]
				interrupts++
				if interrupts > 1 {
					fmt.Fprintf(env.Stderr, "lockctl: interrupted again: sending %s to the command's process group\n", signalNames[s])
				}
				report = after(interruptReportDelay)
			}
			_ = syscall.Kill(-pgid, s)
			if s == syscall.SIGTERM || s == syscall.SIGKILL {
				_ = syscall.Kill(-pgid, syscall.SIGCONT)
			}
		case <-report:
			report = nil
			reportRemaining(env, lease, groupMembers(pgid), interrupts)
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
				// The clock first: past the local deadline the lease is
				// lost (Check ends it now), and the group stays stopped.
				switch {
				case leaseDone != nil && lease.Check() != nil:
					frozen = true
					onLoss()
				case frozen:
				case !killAt.IsZero() && !time.Now().Before(killAt):
					killGroup() // stopped through the end of the grace period
				default:
					_ = syscall.Kill(-pgid, syscall.SIGCONT)
				}
			}
		case <-leaseDone:
			// Running while the group is stopped by us means lockctl was
			// continued, and its SIGCONT is still on its way: the lease's
			// timer came first. The group stays stopped.
			if stopped {
				stopped, frozen = false, true
			}
			onLoss()
		case err := <-hookDone:
			hookEnded(err)
			if !termSent {
				sendTerm()
			}
		case <-term:
			fmt.Fprintln(env.Stderr, "lockctl: --on-lost still runs; stopping the command")
			sendTerm()
		case <-kill:
			kill = nil
			killGroup()
		case <-hookKill:
			hookKill = nil
			if hook != nil {
				_ = syscall.Kill(-hook.Process.Pid, syscall.SIGKILL)
			}
		case err := <-waited:
			mainExited(err)
		case <-poll:
		}
	}
	if hook != nil { // the command's group is gone; the hook gets its time
		select {
		case err := <-hookDone:
			hookEnded(err)
		case <-hookKill:
			_ = syscall.Kill(-hook.Process.Pid, syscall.SIGKILL)
			hookEnded(<-hookDone)
		}
	}

	if err := lease.Check(); errors.Is(err, client.ErrLeaseLost) {
		if errors.Is(err, client.ErrLeaseExpired) {
			release(lease, opt.margin, env) // the service may still hold it
		}
		again := opt.again && !signalled
		then := fmt.Sprintf("exiting %d", ExitLeaseLost)
		if again {
			then = "campaigning again"
		}
		var lost *client.LeaseLostError
		if errors.As(err, &lost) && lost.ForceReleased {
			fmt.Fprintf(env.Stderr, "lockctl: %s was force released by an operator while the command ran; %s\n", lease.what(), then)
			return ExitLeaseLost, !signalled
		}
		fmt.Fprintf(env.Stderr, "lockctl: %s lost while the command ran; %s\n", lease.what(), then)
		return ExitLeaseLost, !signalled
	}
	err := release(lease, opt.margin, env)
	var p *client.ProblemError
	if errors.Is(err, client.ErrNotFound) && errors.As(err, &p) && p.ForceReleased {
		fmt.Fprintf(env.Stderr, "lockctl: %s was force released by an operator while the command ran (%v); exiting %d\n", lease.what(), err, ExitLeaseLost)
		return ExitLeaseLost, false
	}
	if errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrNotFound) {
		// Another owner or a newer lease holds the lock, or the lease was
		// already over (ended by the service's clock before ours, or released
		// elsewhere): the command ran at least partly without it, unnoticed
		// between two renewals.
		fmt.Fprintf(env.Stderr, "lockctl: %s was taken over or ended while the command ran (%v); exiting %d\n", lease.what(), err, ExitLeaseLost)
		return ExitLeaseLost, false
	}
	return commandStatus(werr, env), false
}

// reportRemaining names the processes of the command's group that still
// run after the interrupts-th Ctrl-C, and what the next one does.
func reportRemaining(env Env, lease hold, ms []member, interrupts int) {
	if len(ms) == 0 {
		return
	}
	sent := escalation[min(interrupts, len(escalation))-1]
	var b strings.Builder
	if len(ms) == 1 {
		fmt.Fprintf(&b, "lockctl: after %s, 1 process of the command's group still runs:\n", signalNames[sent])
	} else {
		fmt.Fprintf(&b, "lockctl: after %s, %d processes of the command's group still run:\n", signalNames[sent], len(ms))
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "lockctl:   pid %d: %s\n", m.pid, m.command)
	}
	if lease.Check() == nil {
		fmt.Fprintf(&b, "lockctl: the %s is kept, and renewed, until they exit", lease.what())
	} else { // lost: they are being stopped already
		fmt.Fprintf(&b, "lockctl: the %s is lost", lease.what())
	}
	switch interrupts {
	case 1:
		b.WriteString("; Ctrl-C again sends them SIGTERM, a third time SIGKILL\n")
	case 2:
		b.WriteString("; Ctrl-C again sends them SIGKILL\n")
	default:
		b.WriteString("\n")
	}
	fmt.Fprint(env.Stderr, b.String())
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
