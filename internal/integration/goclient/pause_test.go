//go:build linux

package goclient_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// TestPausedHolder stops a holder process (testdata/holder: a Go program
// using the client, its steps a tick, then lease.Check(), then a line
// "working with token N") with SIGSTOP past its 1 s lease, lets another
// owner take the lock through the local runner, resumes it, and asserts
// that no step ran after the resume: for a lock under WithLock, and for an
// election's leader, whose first "am I leader" after the resume must say
// no. 20 rounds each, five at a time on different lock names. A step
// checked before the stop and written after the resume is the window only
// fencing closes (docs/clients.md, "What a pause does"): logged, not failed.
func TestPausedHolder(t *testing.T) {
	// Not parallel with the package's other tests: its 1 s leases and
	// theirs would share the machine.
	bin := buildHolder(t)
	srv := testenv.Start(t, testenv.Options{})
	for _, mode := range []struct {
		name  string
		elect bool
	}{{"Lock", false}, {"Election", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			const rounds, batch = 20, 5
			res := make([]pauseRound, rounds)
			var retries atomic.Int64
			for b := 0; b < rounds; b += batch {
				var wg sync.WaitGroup
				for i := b; i < min(b+batch, rounds); i++ {
					wg.Go(func() {
						// A lease lost before the first step (its grant or
						// renewals late on a loaded machine) tests nothing:
						// the round starts again, twice at most.
						for attempt := 1; ; attempt++ {
							var err error
							res[i], err = pauseHolder(bin, srv.URL, resourceName(t), mode.elect)
							if errors.Is(err, errLostEarly) && attempt < 3 {
								t.Logf("round %d starts again: %v", i, err)
								retries.Add(1)
								continue
							}
							if err != nil {
								t.Errorf("round %d: %v", i, err)
							}
							return
						}
					})
				}
				wg.Wait()
			}
			if t.Failed() {
				return
			}
			var after, window int
			var signalled []time.Duration
			for i, r := range res {
				after += r.stepsAfter
				window += r.inWindow
				if r.stepsAfter > 0 {
					t.Errorf("round %d: %d work steps ran after the resume, under a lease another owner held (token %d): want none", i, r.stepsAfter, r.otherToken)
				}
				signalled = append(signalled, r.lostAfter)
			}
			slices.Sort(signalled)
			t.Logf("%s: %d rounds; steps after resume %d (and %d checked before the stop, written after: fencing's case); loss signalled after resume: min %s, median %s, max %s; %d rounds started again (lease lost before the first step)",
				mode.name, rounds, after, window, signalled[0], signalled[rounds/2], signalled[rounds-1], retries.Load())
		})
	}
}

// pauseRound is what one round of TestPausedHolder saw.
type pauseRound struct {
	stepsAfter int           // work steps checked after the resume
	inWindow   int           // work steps checked before the stop, written after the resume
	lostAfter  time.Duration // from the resume to the holder's "lost" line
	otherToken int64         // the other owner's fencing token
}

// errLostEarly: the holder lost its lease before it was stopped (before
// its first work step, or right after it).
var errLostEarly = errors.New("the lease was lost before the first work step")

// pauseHolder runs one round against the service at url on lock res.
func pauseHolder(bin, url, res string, elect bool) (pauseRound, error) {
	var r pauseRound
	args := []string{"-resource", res}
	if elect {
		args = append(args, "-elect")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LOCKS_ENDPOINT="+url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := cmd.Start(); err != nil {
		return r, err
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(what string) (string, error) {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", fmt.Errorf("the holder's output ended before %s; stderr: %s", what, stderr.String())
			}
			return l, nil
		case <-time.After(15 * time.Second):
			return "", fmt.Errorf("no %s within 15 s; stderr: %s", what, stderr.String())
		}
	}
	if l, err := next("a first work step"); err != nil {
		return r, err
	} else if !strings.HasPrefix(l, "working with token ") {
		if lostLine(l) {
			return r, fmt.Errorf("%w: %s; stderr %s", errLostEarly, l, stderr.String())
		}
		return r, fmt.Errorf("first line %q, want a work step", l)
	}

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return r, err
	}
	if err := waitStopped(pid); errors.Is(err, errExited) {
		// It exited before the stop: after its step, its next check
		// found the lease lost (a loaded machine).
		var rest []string
		for l := range lines {
			rest = append(rest, l)
		}
		if slices.ContainsFunc(rest, lostLine) {
			return r, fmt.Errorf("%w: %q; stderr %s", errLostEarly, rest, stderr.String())
		}
		return r, fmt.Errorf("the holder exited before the stop: %q; stderr %s", rest, stderr.String())
	} else if err != nil {
		return r, err
	}
	// The deliberate pause: until another owner holds the lock, which the
	// service grants once the holder's lease has expired.
	c, err := client.New(url, client.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if elect {
		e := client.NewElection(c, res)
		l, err := e.Campaign(ctx, client.WithTTL(10*time.Second), client.WithOwner("other"))
		if err != nil {
			return r, fmt.Errorf("the other candidate: %w", err)
		}
		r.otherToken = l.FencingToken()
		defer e.Resign(context.Background())
	} else {
		l, err := c.Acquire(ctx, res, "other", 10*time.Second)
		if err != nil {
			return r, fmt.Errorf("the other owner: %w", err)
		}
		r.otherToken = l.FencingToken()
		defer l.Release(context.Background())
	}
	resumed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return r, err
	}

	first := true // the first line written after the resume
	for {
		l, err := next(`the holder's "lost" line`)
		if err != nil {
			return r, err
		}
		kind, at, checked, ok := parseHolderLine(l)
		if !ok {
			return r, fmt.Errorf("holder line %q", l)
		}
		if !at.After(resumed) {
			continue // written before the stop
		}
		switch kind {
		case "working":
			if checked.After(resumed) {
				r.stepsAfter++
			} else {
				r.inWindow++ // checked before the stop: fencing's case
			}
		case "lost", "not leader":
			if elect && first && kind != "not leader" {
				return r, fmt.Errorf("the old leader's first check after the resume wrote %q, want \"not leader\"", l)
			}
			r.lostAfter = at.Sub(resumed)
			if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != 3 {
				return r, fmt.Errorf("holder exit: %v, want 3 (the loss); stderr: %s", err, stderr.String())
			}
			return r, nil
		}
		first = false
	}
}

// lostLine reports whether l is a holder's line saying its check refused:
// "lost at …" (a lock) or "not leader at …" (an election).
func lostLine(l string) bool {
	return strings.HasPrefix(l, "lost at ") || strings.HasPrefix(l, "not leader at ")
}

// parseHolderLine splits a holder's line into its kind ("working", "lost",
// "not leader") and its time, and for a work step when its check was made.
func parseHolderLine(l string) (kind string, at, checked time.Time, ok bool) {
	var token, ns, cns int64
	switch {
	case strings.HasPrefix(l, "working with token "):
		if _, err := fmt.Sscanf(l, "working with token %d at %d (checked at %d,", &token, &ns, &cns); err != nil {
			return "", at, checked, false
		}
		return "working", time.Unix(0, ns), time.Unix(0, cns), true
	case lostLine(l):
		kind, rest, _ := strings.Cut(l, " at ")
		if _, err := fmt.Sscanf(rest, "%d", &ns); err != nil {
			return "", at, checked, false
		}
		return kind, time.Unix(0, ns), time.Unix(0, ns), true
	}
	return "", at, checked, false
}

// errExited: the process exited (a zombie) instead of stopping.
var errExited = errors.New("the process exited")

// waitStopped waits up to 5 s for process pid to be stopped: state T in
// /proc/PID/stat; errExited if it is a zombie instead.
func waitStopped(pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// pid (comm) STATE ...; comm may hold spaces and parentheses.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 0 && f[0] == "T" {
			return nil
		}
		if len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return errExited
		}
		if time.Now().After(deadline) {
			return errors.New("the holder is not stopped 5 s after SIGSTOP")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// buildHolder builds testdata/holder into a temporary directory.
func buildHolder(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "holder")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/holder").CombinedOutput()
	if err != nil {
		tb.Fatalf("go build testdata/holder: %v\n%s", err, out)
	}
	return bin
}
