//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// TestPause runs lockctl with a command that works until it is killed
// (testdata/worker: a step every 20 ms, SIGTERM trapped) through pauses: Ctrl-Z
// past the lease, lockctl stopped alone, and a service that stops
// answering. It is a test of its own, not part of TestProcess, so that its
// 1 s leases do not share the machine with TestProcess's subtests; its
// rounds run as goroutines, five at a time, whatever -parallel says.
func TestPause(t *testing.T) {
	bin := buildLockctl(t)
	// The worker is built without -race: five start at once on 1 s leases.
	self := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", self, "./testdata/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/worker: %v\n%s", err, out)
	}
	t.Run("CtrlZPastLease", func(t *testing.T) { t.Parallel(); testCtrlZPastLease(t, bin, self) })
	t.Run("KilledBeforeServiceExpiry", func(t *testing.T) { t.Parallel(); testKilledBeforeExpiry(t, bin, self, false) })
	t.Run("ExitsWhenServiceHolds", func(t *testing.T) { t.Parallel(); testExitsWhenServiceHolds(t, bin, self, false) })
	// A lock set under the same rules: its deadline is its names' earliest.
	t.Run("SetKilledBeforeServiceExpiry", func(t *testing.T) { t.Parallel(); testKilledBeforeExpiry(t, bin, self, true) })
	t.Run("SetExitsWhenServiceHolds", func(t *testing.T) { t.Parallel(); testExitsWhenServiceHolds(t, bin, self, true) })
}

// rounds runs round(0) … round(n-1), batch at a time, each in a goroutine
// (t.Errorf and t.Cleanup are safe there; the Fatal family is not, so a
// round returns its error, which fails the test).
func rounds(t *testing.T, n, batch int, round func(i int) error) {
	for b := 0; b < n; b += batch {
		var wg sync.WaitGroup
		for i := b; i < min(b+batch, n); i++ {
			wg.Go(func() {
				if err := round(i); err != nil {
					t.Errorf("round %d: %v", i, err)
				}
			})
		}
		wg.Wait()
	}
}

// workerLine is a line the worker wrote: its kind ("working", "term") and
// time.
type workerLine struct {
	kind string
	at   time.Time
}

// workerLines parses the worker's lines in out, "ready" lines left out.
func workerLines(out string) ([]workerLine, error) {
	var lines []workerLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var ns int64
		var err error
		var kind string
		switch {
		case strings.HasPrefix(l, "ready "):
			continue
		case strings.HasPrefix(l, "working with token "):
			kind = "working"
			_, rest, _ := strings.Cut(l, " at ")
			_, err = fmt.Sscanf(rest, "%d", &ns)
		case strings.HasPrefix(l, "term at "):
			kind = "term"
			_, err = fmt.Sscanf(l, "term at %d", &ns)
		default:
			err = errors.New("unknown")
		}
		if err != nil {
			return nil, fmt.Errorf("worker line %q: %v", l, err)
		}
		lines = append(lines, workerLine{kind, time.Unix(0, ns)})
	}
	return lines, nil
}

// startWorker starts lockctl args -- worker against url (env: more
// variables for the worker) and returns it and the worker's pid, killed
// when the test ends. A lockctl built with -race would sleep a second
// before it exits 0 (GORACE's atexit_sleep_ms): not here.
func startWorker(t *testing.T, bin, worker, url string, env []string, args ...string) (*proc, int, error) {
	p, err := startProc(t, bin, url, append([]string{"GORACE=atexit_sleep_ms=0"}, env...), append(args, "--", worker)...)
	if err != nil {
		return nil, 0, err
	}
	ready, err := p.line("ready ")
	if err != nil {
		return p, 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ready))
	if err != nil {
		return p, 0, err
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return p, pid, nil
}

// testCtrlZPastLease: Ctrl-Z (SIGTSTP to lockctl) stops lockctl and its
// command past the 1 s lease; another owner takes the lock; lockctl is
// continued. The command must stay stopped (it traps SIGTERM, so SIGTERM
// and SIGCONT would let it work on), --on-lost must run, and then the
// command be killed: no step after the resume. 20 rounds, five at a time.
func testCtrlZPastLease(t *testing.T, bin, self string) {
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL, client.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var steps, terms, lateHooks, retries int
	var mu sync.Mutex
	rounds(t, 20, 5, func(i int) error {
		var (
			name   string
			p      *proc
			pid    int
			err    error
			exited <-chan struct{}
		)
		for attempt := 1; ; attempt++ {
			var stopped time.Time // when lockctl was sent SIGTSTP (zero: not yet)
			name = fmt.Sprintf("%s-%d-%d", uniqueName(t), i, attempt)
			// --grace 100ms: a local deadline 0.8 s after each renewal's
			// request.
			p, pid, err = startWorker(t, bin, self, srv.URL, nil, "run", name, "--ttl", "1", "--grace", "100ms",
				"--on-lost", `echo "on-lost at $(date +%s%N)" >&2`)
			if err == nil {
				_, err = p.line("working with token ")
			}
			if err == nil {
				exited = testenv.Exited(pid)
				stopped, err = stopBoth(p, pid)
			}
			if err == nil {
				break
			}
			// A lease lost before the pause (no renewal in time on a
			// loaded machine: the command was killed before it could be
			// stopped, or never started work) tests nothing: try again,
			// twice at most (the log counts these). lostBeforePause lets
			// lockctl go on if it was stopped, and reads its exit.
			if p == nil || !lostBeforePause(p, stopped) || attempt == 3 {
				return err
			}
			mu.Lock()
			retries++
			mu.Unlock()
		}
		// The deliberate pause: until another owner holds the lock.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		other, err := c.Acquire(ctx, name, "other", 10*time.Second)
		if err != nil {
			return fmt.Errorf("the other owner: %w", err)
		}
		defer other.Release(context.Background())
		resumed := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return err
		}
		code, err := p.exit(10 * time.Second)
		if err != nil {
			return err
		}
		<-exited
		died := time.Now()
		if code != cli.ExitLeaseLost {
			t.Errorf("round %d: exit code: got %d, want %d; stderr: %s", i, code, cli.ExitLeaseLost, p.stderr.String())
		}
		lines, err := workerLines(p.stdout.String())
		if err != nil {
			return err
		}
		var stepsAfter, termsAfter int
		for _, l := range lines {
			switch {
			case !l.at.After(resumed):
			case l.kind == "working":
				stepsAfter++
			case l.kind == "term":
				termsAfter++
			}
		}
		if stepsAfter+termsAfter > 0 {
			t.Errorf("round %d: after the resume the command ran %d work steps and %d SIGTERM handlers under another owner's lease (token %d): want none; stderr: %s",
				i, stepsAfter, termsAfter, other.FencingToken(), p.stderr.String())
		}
		var hookNs int64
		if hook, ok := findLine(p.stderr.String(), "on-lost at "); !ok {
			return fmt.Errorf("--on-lost did not run; stderr: %s", p.stderr.String())
		} else if _, err := fmt.Sscanf(hook, "%d", &hookNs); err != nil {
			return err
		}
		late := !time.Unix(0, hookNs).Before(died)
		if late {
			t.Errorf("round %d: --on-lost ran at %s, once the command was dead (%s): want the hook first", i,
				time.Unix(0, hookNs).Format(time.StampMicro), died.Format(time.StampMicro))
		}
		mu.Lock()
		defer mu.Unlock()
		steps, terms = steps+stepsAfter, terms+termsAfter
		if late {
			lateHooks++
		}
		return nil
	})
	t.Logf("20 rounds: %d work steps and %d SIGTERM handlers ran after the resume; --on-lost after the kill in %d; %d rounds started again (the lease lost before the pause)",
		steps, terms, lateHooks, retries)
}

// stopBoth stops lockctl (p) with SIGTSTP, as Ctrl-Z does, and waits
// until both it and its command (pid) are stopped. It returns the time
// taken just before the signal was sent.
func stopBoth(p *proc, pid int) (time.Time, error) {
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		return sent, err
	}
	if err := awaitState(p.cmd.Process.Pid, "lockctl", true); err != nil {
		return sent, err
	}
	return sent, awaitState(pid, "the command", true)
}

// lostBeforePause reports whether lockctl's lease was lost before the
// pause: it exited ExitLeaseLost, and, when it was sent SIGTSTP (stopped
// not zero), it handled the loss while running, not stopped (its stderr
// says it ran --on-lost and then stopped the command, and not that it was
// stopped past the lease's local deadline). lockctl's own words, not the
// hook's clock: lockctl may decide, and kill the command, before the
// hook's shell reads the time. It continues lockctl first (SIGCONT: it
// may be stopped) and waits for its exit. A bug that always looks so
// still fails the round at its third attempt.
func lostBeforePause(p *proc, stopped time.Time) bool {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	if code, err := p.exit(10 * time.Second); err != nil || code != cli.ExitLeaseLost {
		return false
	}
	if stopped.IsZero() {
		return true
	}
	e := p.stderr.String()
	return strings.Contains(e, "running --on-lost, then stopping the command") &&
		!strings.Contains(e, "stopped past the lease's local deadline")
}

// front is a proxy in front of the lock service at target that passes
// acquires and reads, and treats renewals (and with hold, releases) as
// mode says: "503" answers 503, "hold" never answers until the caller
// gives up.
func front(tb testing.TB, target, mode string) string {
	tb.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renew := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/renew")
		switch {
		case renew && mode == "503":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"https://locks.dev/problems/service-unavailable","title":"Service Unavailable","status":503}`))
		case (renew || r.Method == http.MethodDelete) && mode == "hold":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		default:
			proxyTo(tb, target, w, r)
		}
	}))
	tb.Cleanup(srv.Close)
	tb.Cleanup(func() { close(release) }) // before srv.Close, which waits for held requests
	return srv.URL
}

// expiresAt returns when the service's lease on name ends, by its clock
// (the real one here); with set, the earliest end of the set's names
// (setNames).
func expiresAt(c *client.Client, name string, set bool) (time.Time, error) {
	names := []string{name}
	if set {
		names = setNames(name)
	}
	var end time.Time
	for _, n := range names {
		l, err := c.Status(context.Background(), n)
		if err != nil {
			return time.Time{}, fmt.Errorf("status of %q: %w", n, err)
		}
		if end.IsZero() || l.ExpiresAt.Before(end) {
			end = l.ExpiresAt
		}
	}
	return end, nil
}

// setNames are the names of the lock set the pause tests take for name.
func setNames(name string) []string { return []string{name + ":a", name + ":b", name + ":c"} }

// runArgs are lockctl's arguments to run under name (with set, the lock
// set setNames(name)), then more.
func runArgs(name string, set bool, more ...string) []string {
	if !set {
		return append([]string{"run", name}, more...)
	}
	args := []string{"run"}
	for _, n := range setNames(name) {
		args = append(args, "--lock", n)
	}
	return append(args, more...)
}

// testKilledBeforeExpiry: when no renewal gets through, a command that
// traps SIGTERM is dead before the service's lease ends: when lockctl
// runs all along, and when lockctl itself was stopped (SIGSTOP, alone)
// past its local deadline and continued before the lease's end, when
// SIGKILL must not wait a whole --grace after the late loss. With set, a
// lock set of three names whose renewals fail, killed before the earliest
// of their ends. 5 rounds each
// at once; the figures are the command's death relative to expires_at.
func testKilledBeforeExpiry(t *testing.T, bin, self string, set bool) {
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	url := front(t, srv.URL, "503")
	for _, tc := range []struct {
		name string
		// resumeBefore: lockctl is stopped (SIGSTOP) at once and continued
		// this long before the service's expiry; 0: not stopped.
		resumeBefore time.Duration
	}{{name: "Running"}, {name: "LockctlStoppedPastDeadline", resumeBefore: 800 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var died []time.Duration // death − expires_at
			rounds(t, 5, 5, func(i int) error {
				name := fmt.Sprintf("%s-%d", uniqueName(t), i)
				// Local deadline 4.4 s after the grant's request; SIGKILL
				// due 5.4 s after it; the service's lease ends 6 s after
				// (a 6 s lease: its 0.6 s of slack, min(ttl/10, 1s), hold
				// on a loaded machine where a 3 s lease's 0.3 s did not).
				p, pid, err := startWorker(t, bin, self, url, nil, runArgs(name, set, "--ttl", "6", "--grace", "1")...)
				if err != nil {
					return err
				}
				exited := testenv.Exited(pid)
				expiry, err := expiresAt(c, name, set)
				if err != nil {
					return err
				}
				if tc.resumeBefore > 0 {
					if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
						return err
					}
					if err := awaitState(p.cmd.Process.Pid, "lockctl", true); err != nil {
						return err
					}
					time.Sleep(time.Until(expiry.Add(-tc.resumeBefore))) // the deliberate pause
					if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
						return err
					}
				}
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					return fmt.Errorf("the command still runs 10 s on; stderr: %s", p.stderr.String())
				}
				d := time.Since(expiry)
				mu.Lock()
				died = append(died, d)
				mu.Unlock()
				if d >= 0 {
					t.Errorf("round %d: the command died %s after the service's lease ended: another holder could have run beside it; stderr: %s", i, d, p.stderr.String())
				}
				code, err := p.exit(10 * time.Second)
				if err != nil {
					return err
				}
				if code != cli.ExitLeaseLost {
					t.Errorf("round %d: exit code: got %d, want %d; stderr: %s", i, code, cli.ExitLeaseLost, p.stderr.String())
				}
				return nil
			})
			slices.Sort(died)
			t.Logf("%s: the SIGTERM-trapping command died %v relative to the service's expires_at", tc.name, died)
		})
	}
}

// testExitsWhenServiceHolds: the service takes every renewal and release
// and never answers. lockctl must exit within min(ttl/10, 1s) (0.6 s) of
// the lease's end at the service, whether the lease was lost (the command
// traps SIGTERM and is killed) or the command ended by itself. 5 rounds
// each at once.
func testExitsWhenServiceHolds(t *testing.T, bin, self string, set bool) {
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	url := front(t, srv.URL, "hold")
	const margin = 600 * time.Millisecond // a 6 s lease's min(ttl/10, 1s)
	for _, tc := range []struct {
		name     string
		steps    string // WORKER_STEPS: "" works until killed
		wantCode int
	}{{name: "LeaseLost", wantCode: cli.ExitLeaseLost}, {name: "CommandDone", steps: "3", wantCode: 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var exits []time.Duration // exit − expires_at
			rounds(t, 5, 5, func(i int) error {
				name := fmt.Sprintf("%s-%d", uniqueName(t), i)
				p, _, err := startWorker(t, bin, self, url, []string{"WORKER_STEPS=" + tc.steps}, runArgs(name, set, "--ttl", "6", "--grace", "1")...)
				if err != nil {
					return err
				}
				expiry, err := expiresAt(c, name, set)
				if err != nil {
					return err
				}
				code, err := p.exit(15 * time.Second)
				if err != nil {
					return err
				}
				d := time.Since(expiry)
				mu.Lock()
				exits = append(exits, d)
				mu.Unlock()
				if code != tc.wantCode {
					t.Errorf("round %d: exit code: got %d, want %d; stderr: %s", i, code, tc.wantCode, p.stderr.String())
				}
				if d > margin {
					t.Errorf("round %d: lockctl exited %s after the service's lease ended, want at most %s; stderr: %s", i, d, margin, p.stderr.String())
				}
				return nil
			})
			slices.Sort(exits)
			t.Logf("%s: lockctl exited %v relative to the service's expires_at", tc.name, exits)
		})
	}
}
