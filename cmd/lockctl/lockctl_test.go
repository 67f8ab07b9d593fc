//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// raceEnabled is set when the tests run with -race; the lockctl binary is
// then built with -race too (which also reuses the test's build cache).
var raceEnabled bool

func TestMain(m *testing.M) { testenv.Main(m) }

// TestProcess runs the real lockctl binary, built once into a temporary
// directory, as separate processes.
func TestProcess(t *testing.T) {
	bin := buildLockctl(t)
	t.Run("NoOverlap", func(t *testing.T) { t.Parallel(); testNoOverlap(t, bin) })
	t.Run("SemaphoreAtMostN", func(t *testing.T) { t.Parallel(); testSemaphoreAtMostN(t, bin) })
	t.Run("LeaseLost", func(t *testing.T) { t.Parallel(); testLeaseLost(t, bin) })
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run("Forwards"+strings.ToUpper(unix(sig)), func(t *testing.T) { t.Parallel(); testForwardsSignal(t, bin, sig) })
	}
	t.Run("TakenOverUnnoticed", func(t *testing.T) { t.Parallel(); testTakenOverUnnoticed(t, bin) })
	t.Run("KilledLockctlTakesCommandAlong", func(t *testing.T) { t.Parallel(); testKilledLockctl(t, bin) })
	t.Run("LeaseCoversBackgroundChildren", func(t *testing.T) { t.Parallel(); testBackgroundChildren(t, bin) })
	t.Run("CtrlZStopsCommand", func(t *testing.T) { t.Parallel(); testCtrlZ(t, bin) })
	t.Run("GraceEndsBeforeLease", func(t *testing.T) { t.Parallel(); testGraceEndsBeforeLease(t, bin) })
	t.Run("AcquireWaitSignals", func(t *testing.T) { t.Parallel(); testAcquireWaitSignals(t, bin) })
	t.Run("CtrlCEscalates", func(t *testing.T) { t.Parallel(); testCtrlCEscalates(t, bin) })
	t.Run("OnLost", func(t *testing.T) { t.Parallel(); testOnLost(t, bin) })
	t.Run("Watch", func(t *testing.T) { t.Parallel(); testWatch(t, bin) })
	t.Run("WatchRW", func(t *testing.T) { t.Parallel(); testWatchRW(t, bin) })
	t.Run("ElectOneAtATime", func(t *testing.T) { t.Parallel(); testElectOneAtATime(t, bin) })
	t.Run("ElectLoss", func(t *testing.T) { t.Parallel(); testElectLoss(t, bin) })
	t.Run("ElectSignalWhileCampaigning", func(t *testing.T) { t.Parallel(); testElectSignalWhileCampaigning(t, bin) })
	t.Run("DocExamples", func(t *testing.T) { t.Parallel(); testDocExamples(t, bin) })
	t.Run("WaitRoute", func(t *testing.T) { t.Parallel(); testWaitRoute(t, bin) })
}

func buildLockctl(tb testing.TB) string {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Fatalf("go tool not found: %v", err)
	}
	bin := filepath.Join(tb.TempDir(), "lockctl")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command(goBin, append(args, ".")...).CombinedOutput()
	if err != nil {
		tb.Fatalf("go build lockctl: %v\n%s", err, out)
	}
	return bin
}

// proc is a lockctl process under test.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr output
	done           chan struct{}
	code           int
}

// output collects what a process writes to one of its streams, for reading
// while it runs.
type output struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed by the next write
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
	return o.b.Write(p)
}

// String returns what was written so far.
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// next returns what was written so far and a channel closed by the next
// write.
func (o *output) next() (string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	return o.b.String(), o.changed
}

// startLockctl starts bin with args against endpoint; env adds variables.
// The process is killed if it is still running after 20s.
func startLockctl(tb testing.TB, bin, endpoint string, env []string, args ...string) *proc {
	tb.Helper()
	p, err := startProc(tb, bin, endpoint, env, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// startProc is startLockctl returning its error, for a test's goroutines;
// tb only gets the clean-up.
func startProc(tb testing.TB, bin, endpoint string, env []string, args ...string) (*proc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	p := &proc{cmd: exec.CommandContext(ctx, bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), "LOCKS_ENDPOINT="+endpoint), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start lockctl: %v", err)
	}
	go func() {
		defer cancel()
		defer close(p.done)
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
	}()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p, nil
}

// wait waits up to limit for the process to exit and returns its code.
func (p *proc) wait(tb testing.TB, limit time.Duration) int {
	tb.Helper()
	code, err := p.exit(limit)
	if err != nil {
		tb.Fatal(err)
	}
	return code
}

// exit is wait returning its error.
func (p *proc) exit(limit time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.code, nil
	case <-time.After(limit):
		return -1, fmt.Errorf("lockctl still running after %s; stderr: %s", limit, p.stderr.String())
	}
}

// waitLine waits up to 10s for a complete line of lockctl's stdout (its
// command's) that starts with prefix, and returns the rest of that line.
func (p *proc) waitLine(tb testing.TB, prefix string) string {
	tb.Helper()
	v, err := p.line(prefix)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// line is waitLine returning its error.
func (p *proc) line(prefix string) (string, error) {
	return p.awaitOutput(&p.stdout, "a line "+strconv.Quote(prefix), func(out string) (string, bool) {
		return findLine(out, prefix)
	})
}

// waitOutput waits up to 10s until found finds what it looks for (what)
// in o, looking again at every write, and returns what found returns.
func (p *proc) waitOutput(tb testing.TB, o *output, what string, found func(string) (string, bool)) string {
	tb.Helper()
	v, err := p.awaitOutput(o, what, found)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// awaitOutput is waitOutput returning its error.
func (p *proc) awaitOutput(o *output, what string, found func(string) (string, bool)) (string, error) {
	timeout := time.After(10 * time.Second)
	for {
		out, changed := o.next()
		if v, ok := found(out); ok {
			return v, nil
		}
		select {
		case <-changed:
		case <-p.done:
			if v, ok := found(o.String()); ok {
				return v, nil // written just before lockctl exited
			}
			return "", fmt.Errorf("lockctl exited %d before %s; stdout %q, stderr: %s", p.code, what, p.stdout.String(), p.stderr.String())
		case <-timeout:
			return "", fmt.Errorf("no %s within 10s; stdout %q, stderr: %s", what, p.stdout.String(), p.stderr.String())
		}
	}
}

// findLine finds the first complete line of out that starts with prefix
// and returns the rest of it.
func findLine(out, prefix string) (string, bool) {
	for {
		line, rest, ok := strings.Cut(out, "\n")
		if !ok {
			return "", false
		}
		if after, ok := strings.CutPrefix(line, prefix); ok {
			return after, true
		}
		out = rest
	}
}

// countLines is how many complete lines of out are line.
func countLines(out, line string) int {
	n := 0
	for _, l := range strings.SplitAfter(out, "\n") {
		if l == line+"\n" {
			n++
		}
	}
	return n
}

// uniqueName returns a lock name for the test, new with every call, so that
// -count=N runs against one dynalite do not meet each other's leases.
func uniqueName(tb testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(tb.Name(), "/", "_"), time.Now().UnixNano())
}

// alive reports whether a process with pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func testNoOverlap(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	log, res := filepath.Join(t.TempDir(), "log"), uniqueName(t)
	const script = `echo "start $LOCK_FENCING_TOKEN $(date +%s%N)" >> "$LOG"; sleep 0.2; echo "end $LOCK_FENCING_TOKEN $(date +%s%N)" >> "$LOG"`
	const n = 3
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = startLockctl(t, bin, srv.URL, []string{"LOG=" + log},
			"run", res, "--ttl", "3s", "--wait", "15s", "--", "sh", "-c", script)
	}
	for i, p := range procs {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("lockctl %d: exit %d, want 0; stderr: %s", i, code, p.stderr.String())
		}
	}

	type interval struct {
		token      int64
		start, end int64
	}
	byToken := map[int64]*interval{}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kind string
		var token, at int64
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %d", &kind, &token, &at); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		iv := byToken[token]
		if iv == nil {
			iv = &interval{token: token}
			byToken[token] = iv
		}
		switch kind {
		case "start":
			iv.start = at
		case "end":
			iv.end = at
		}
	}
	var ivs []interval
	for _, iv := range byToken {
		if iv.start == 0 || iv.end == 0 || iv.end < iv.start {
			t.Errorf("token %d: got start %d end %d, want both, in order", iv.token, iv.start, iv.end)
		}
		ivs = append(ivs, *iv)
	}
	if len(ivs) != n {
		t.Fatalf("intervals: got %d (%v), want %d with distinct tokens", len(ivs), ivs, n)
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	for i := 1; i < len(ivs); i++ {
		prev, cur := ivs[i-1], ivs[i]
		if cur.start < prev.end {
			t.Errorf("token %d started at %d, before token %d ended at %d: the commands overlapped", cur.token, cur.start, prev.token, prev.end)
		}
		if cur.token <= prev.token {
			t.Errorf("token %d started after token %d: want tokens increasing in start order", cur.token, prev.token)
		}
	}
}

func testLeaseLost(t *testing.T, bin string) {
	tests := []struct {
		name string
		trap string // the command's TERM handler
		// grace is lockctl's --grace; the test fails if it has to wait
		// this long when the command exits on SIGTERM.
		grace    time.Duration
		wantKill bool // the command ignores SIGTERM, so SIGKILL must end it
	}{
		{name: "ExitsOnTERM", trap: `echo term $(date +%s%N); exit 143`, grace: time.Second},
		{name: "IgnoresTERM", trap: `echo term $(date +%s%N)`, grace: 700 * time.Millisecond, wantKill: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock()
			srv := testenv.Start(t, testenv.Options{Now: clock.Now})
			res := uniqueName(t)
			script := `trap '` + tt.trap + `' TERM; echo ready $$; while :; do sleep 0.05; done`
			p := startLockctl(t, bin, srv.URL, nil,
				"run", res, "--ttl", "3s", "--grace", tt.grace.String(), "--", "sh", "-c", script)
			pid := atoi(t, p.waitLine(t, "ready "))
			t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

			// The lease expires by the service's clock and another owner
			// takes the lock: lockctl's next renewal is refused.
			takeOver(t, srv, clock, res)

			// When the command's trap ran (its own clock, not when the
			// test read the line, which a loaded machine delays).
			termSeen := time.Unix(0, int64(atoi(t, p.waitLine(t, "term "))))
			code := p.wait(t, 10*time.Second)
			exited := time.Now()
			if code != cli.ExitLeaseLost {
				t.Errorf("exit code: got %d, want %d", code, cli.ExitLeaseLost)
			}
			stderr := p.stderr.String()
			for _, want := range []string{"lost", "stopping the command", "exiting 76"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr: got %q, want it to contain %q", stderr, want)
				}
			}
			if alive(pid) {
				t.Errorf("the command (pid %d) is still running after lockctl exited", pid)
			}
			if took := exited.Sub(termSeen); tt.wantKill && took < tt.grace-150*time.Millisecond {
				t.Errorf("lockctl exited %s after SIGTERM, want about --grace %s before SIGKILL", took, tt.grace)
			}
		})
	}
}

// unix returns the shell name of sig, e.g. "term" for SIGTERM.
func unix(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "term", syscall.SIGINT: "int", syscall.SIGHUP: "hup"}[sig]
}

func testForwardsSignal(t *testing.T, bin string, sig syscall.Signal) {
	srv := testenv.Start(t, testenv.Options{})
	res, name := uniqueName(t), unix(sig)
	script := `trap 'echo ` + name + `; exit 3' ` + strings.ToUpper(name) + `; echo ready $$; while :; do sleep 0.05; done`
	p := startLockctl(t, bin, srv.URL, nil, "run", res, "--ttl", "5s", "--", "sh", "-c", script)
	pid := atoi(t, p.waitLine(t, "ready "))
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal lockctl: %v", err)
	}
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Errorf("exit code: got %d, want the command's 3; stderr: %s", code, p.stderr.String())
	}
	if got := countLines(p.stdout.String(), name); got != 1 {
		t.Errorf("the command's %s trap ran %d times (stdout %q), want once", strings.ToUpper(name), got, p.stdout.String())
	}
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background(), res); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("status after lockctl exited: got %v, want ErrNotFound (released)", err)
	}
}

// testTakenOverUnnoticed: the lease is taken over between two renewals and
// the command finishes before the next one. The command's success must not
// hide that the lock was lost: the release is refused and lockctl exits 76.
func testTakenOverUnnoticed(t *testing.T, bin string) {
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	res, goOn := uniqueName(t), filepath.Join(t.TempDir(), "go")
	// --ttl 30s: the next renewal is 10 s away, far beyond this test.
	script := `echo ready $$; while [ ! -e "$GO" ]; do sleep 0.02; done; exit 0`
	p := startLockctl(t, bin, srv.URL, []string{"GO=" + goOn},
		"run", res, "--ttl", "30s", "--", "sh", "-c", script)
	p.waitLine(t, "ready ")

	c := takeOver(t, srv, clock, res)
	if err := os.WriteFile(goOn, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != cli.ExitLeaseLost {
		t.Errorf("exit code: got %d, want %d; stderr: %s", code, cli.ExitLeaseLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "taken over") {
		t.Errorf("stderr: got %q, want it to say the lease was taken over", p.stderr.String())
	}
	if st, err := c.Status(context.Background(), res); err != nil || st.Owner != "other" {
		t.Errorf("status: got %+v, %v; want the other owner's lease untouched", st, err)
	}
}

// testKilledLockctl: a lockctl killed with SIGKILL (OOM killer, kill -9)
// cannot stop its command itself; the kernel's parent-death signal must, or
// the command would run on with nobody renewing its lease.
func testKilledLockctl(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	p := startLockctl(t, bin, srv.URL, nil,
		"run", uniqueName(t), "--ttl", "30s", "--", "sh", "-c", `echo ready $$; exec sleep 30`)
	pid := atoi(t, p.waitLine(t, "ready "))
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	gone := testenv.Exited(pid)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 5*time.Second)
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatalf("the command (pid %d) still runs 5s after its lockctl was killed", pid)
	}
}

// testBackgroundChildren: the command's main process exits while a child
// it started in the background still runs. The lease must cover that
// child: lockctl keeps it (renewing) until the child exits, and a lost
// lease stops the child.
func testBackgroundChildren(t *testing.T, bin string) {
	tests := []struct {
		name string
		// lost: the lease is taken over while the child runs; else the
		// child is told to finish.
		lost     bool
		wantCode int
	}{
		{name: "ReleasedWhenLastExits", wantCode: 0},
		{name: "LostStopsLeftovers", lost: true, wantCode: cli.ExitLeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock()
			srv := testenv.Start(t, testenv.Options{Now: clock.Now})
			// In front of the service: which renewals come once lockctl
			// has reaped the command's main process, and any release.
			var mainPid atomic.Int64
			var releases atomic.Int32
			renewedAfterMain := make(chan struct{}, 1)
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodDelete:
					releases.Add(1)
				case strings.HasSuffix(r.URL.Path, "/renew"):
					if pid := int(mainPid.Load()); pid != 0 && !alive(pid) {
						select {
						case renewedAfterMain <- struct{}{}:
						default:
						}
					}
				}
				proxyTo(t, srv.URL, w, r)
			}))
			t.Cleanup(front.Close)
			dir, res := t.TempDir(), uniqueName(t)
			f := func(name string) string { return filepath.Join(dir, name) }
			child := `trap 'echo term; exit 143' TERM; echo child $$; ` +
				`while [ ! -e "$GO" ]; do sleep 0.02; done; echo done`
			if err := os.WriteFile(f("child.sh"), []byte(child), 0o644); err != nil {
				t.Fatal(err)
			}
			p := startLockctl(t, bin, front.URL, []string{"GO=" + f("go"), "SCRIPT=" + f("child.sh")},
				"run", res, "--ttl", "3s", "--", "sh", "-c", `echo main $$; sh "$SCRIPT" & exit 0`)
			mainPid.Store(int64(atoi(t, p.waitLine(t, "main "))))
			childPid := atoi(t, p.waitLine(t, "child "))
			t.Cleanup(func() { _ = syscall.Kill(childPid, syscall.SIGKILL) })
			// The main process exits at once. A renewal sent after lockctl
			// reaped it (every ttl/3 = 1 s) shows lockctl holding on.
			select {
			case <-renewedAfterMain:
			case <-time.After(10 * time.Second):
				t.Fatalf("no renewal after the command's main process (pid %d) ended; stderr: %s", mainPid.Load(), p.stderr.String())
			}
			if n := releases.Load(); n != 0 {
				t.Fatalf("lockctl sent %d releases when the command's main process ended, while its child (pid %d) still ran", n, childPid)
			}
			// (Its output pipe stays open in the child, so look at the
			// process, not at p.done.)
			if !alive(p.cmd.Process.Pid) {
				t.Fatalf("lockctl exited when the command's main process did, while its child (pid %d) still ran; stderr: %s", childPid, p.stderr.String())
			}
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Status(context.Background(), res); err != nil {
				t.Fatalf("status while the child runs: got %v, want the lock held", err)
			}

			if tt.lost {
				takeOver(t, srv, clock, res)
			} else if err := os.WriteFile(f("go"), []byte("1"), 0o644); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 10*time.Second); code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d; stderr: %s", code, tt.wantCode, p.stderr.String())
			}
			if alive(childPid) {
				t.Errorf("the child (pid %d) still runs after lockctl exited", childPid)
			}
			want := "done"
			if tt.lost {
				want = "term"
			}
			if out := p.stdout.String(); countLines(out, want) != 1 {
				t.Errorf("the child's output: got %q, want one line %q", out, want)
			}
			if !tt.lost {
				if _, err := c.Status(context.Background(), res); !errors.Is(err, client.ErrNotFound) {
					t.Errorf("status after lockctl exited: got %v, want ErrNotFound (released)", err)
				}
			}
		})
	}
}

// testCtrlZ: SIGTSTP (Ctrl-Z) reaches lockctl's process group, not the
// command's. lockctl must stop the command with itself, or the command
// would run on while nothing renews its lease, and continue it with
// itself; a stop past the lease's local deadline loses the lease.
func testCtrlZ(t *testing.T, bin string) {
	if runtime.GOOS != "linux" {
		t.Skip("reads process states from /proc")
	}
	tests := []struct {
		name string
		ttl  string
		// stoppedFor is how long the test leaves lockctl stopped.
		stoppedFor time.Duration
		wantCode   int
	}{
		{name: "StopAndContinue", ttl: "30s", wantCode: 128 + int(syscall.SIGTERM)},
		// Local deadline 1.8 s after the latest renewal.
		{name: "StoppedPastDeadline", ttl: "2s", stoppedFor: 2 * time.Second, wantCode: cli.ExitLeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			res := uniqueName(t)
			// One process that forks nothing: a shell stopped while it
			// waits for a vfork child to exec shows state D, not T.
			p := startLockctl(t, bin, srv.URL, nil,
				"run", res, "--ttl", tt.ttl, "--", "sh", "-c", `echo ready $$; exec sleep 30`)
			pid := atoi(t, p.waitLine(t, "ready "))
			t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
			lockctlPid := p.cmd.Process.Pid

			if err := p.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
				t.Fatal(err)
			}
			waitState(t, lockctlPid, "lockctl", true)
			waitState(t, pid, "the command", true)
			time.Sleep(tt.stoppedFor)
			if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatalf("continue lockctl: %v; exit code %d, stderr: %s", err, p.code, p.stderr.String())
			}
			waitState(t, lockctlPid, "lockctl", false)
			if tt.wantCode != cli.ExitLeaseLost {
				waitState(t, pid, "the command", false)
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			} // else the lease ran out while stopped: lockctl stops the command
			if code := p.wait(t, 10*time.Second); code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d; stderr: %s", code, tt.wantCode, p.stderr.String())
			}
			if alive(pid) {
				t.Errorf("the command (pid %d) still runs after lockctl exited", pid)
			}
		})
	}
}

// waitState waits up to 5s for the process pid (what names it) to be
// stopped (state T in /proc/PID/stat) or not, as want says.
func waitState(tb testing.TB, pid int, what string, want bool) {
	tb.Helper()
	if err := awaitState(pid, what, want); err != nil {
		tb.Fatal(err)
	}
}

// awaitState is waitState returning its error.
func awaitState(pid int, what string, want bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if (errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH)) && !want {
			// Gone: not stopped either. A process that exits while its
			// stat is read fails the read with ESRCH, not ENOENT.
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s (pid %d): %v", what, pid, err)
		}
		// pid (comm) STATE ...; comm may hold spaces and parentheses.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		state := strings.Fields(rest)[0]
		if (state == "T") == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d): state %s after 5s, want stopped %t", what, pid, state, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func atoi(tb testing.TB, s string) int {
	tb.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		tb.Fatalf("pid: %v", err)
	}
	return n
}

// takeOver expires every lease by the server's clock and has owner "other"
// take res, released when the test ends. It returns a client of srv.
func takeOver(tb testing.TB, srv *testenv.Server, clock *testenv.Clock, res string) *client.Client {
	tb.Helper()
	clock.Advance(time.Hour)
	c, err := client.New(srv.URL)
	if err != nil {
		tb.Fatal(err)
	}
	other, err := c.TryAcquire(context.Background(), res, "other", 30*time.Second)
	if err != nil {
		tb.Fatalf("TryAcquire by another owner: %v", err)
	}
	tb.Cleanup(func() { _ = other.Release(context.Background()) })
	return c
}

// testGraceEndsBeforeLease: when the service stops answering, the command
// — even one that ignores SIGTERM — must be gone before the lease can end
// at the service, or the next holder would run beside it for up to
// --grace. lockctl stops it grace before the lease's local deadline.
func testGraceEndsBeforeLease(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	var down atomic.Bool
	// granted is when the latest acquire or renewal that the service
	// granted reached the front (unix ns): the lease it wrote starts no
	// earlier, so it ends no earlier than 3 s after.
	var granted atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, `{"message":"Service Unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		entered := time.Now()
		if code := proxyTo(t, srv.URL, w, r); r.Method == http.MethodPost && code == http.StatusOK {
			granted.Store(entered.UnixNano())
		}
	}))
	t.Cleanup(front.Close)
	res := uniqueName(t)
	script := `trap '' TERM; echo ready $$; while :; do sleep 0.05; done`
	p := startLockctl(t, bin, front.URL, nil, "run", res, "--ttl", "3", "--", "sh", "-c", script)
	pid := atoi(t, p.waitLine(t, "ready "))
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	down.Store(true) // no renewal gets through from now on
	// When the command is gone: lockctl itself may exit a little later,
	// still trying to release the lease.
	gone := make(chan time.Time, 1)
	exited := testenv.Exited(pid)
	go func() {
		<-exited
		gone <- time.Now()
	}()
	if code := p.wait(t, 10*time.Second); code != cli.ExitLeaseLost {
		t.Errorf("exit code: got %d, want %d", code, cli.ExitLeaseLost)
	}
	if alive(pid) {
		t.Fatalf("the command (pid %d) still runs after lockctl exited", pid)
	}
	// The service's lease ends no earlier than 3 s after the latest
	// acquire or renewal it granted reached the front (lockctl's own start
	// does not count against the command's time).
	took := (<-gone).Sub(time.Unix(0, granted.Load()))
	t.Logf("the command was gone %v after the latest grant reached the service", took)
	if granted.Load() == 0 || took >= 3*time.Second {
		t.Errorf("the command ran until %v after the latest grant reached the service, past the 3 s lease: another holder could have run beside it", took)
	}
}

// proxyTo forwards r to base, copies the answer back and returns its
// status (0 when the request could not be built, 502 when base did not
// answer).
func proxyTo(tb testing.TB, base string, w http.ResponseWriter, r *http.Request) int {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), r.Body)
	if err != nil {
		tb.Error(err)
		return 0
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return http.StatusBadGateway
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return resp.StatusCode
}
