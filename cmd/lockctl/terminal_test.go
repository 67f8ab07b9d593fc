//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// testCtrlCEscalates: the command left a background child, which a
// non-interactive shell starts with SIGINT ignored. The first Ctrl-C is
// forwarded as SIGINT; lockctl then names the child and says the lease is
// kept until it exits. The second Ctrl-C sends SIGTERM, the third SIGKILL.
func testCtrlCEscalates(t *testing.T, bin string) {
	tests := []struct {
		name       string
		ignoreTERM bool // the child ignores SIGTERM too: the third Ctrl-C is needed
	}{
		{name: "SecondSendsTERM"},
		{name: "ThirdSendsKILL", ignoreTERM: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			dir, res := t.TempDir(), uniqueName(t)
			child := `echo child $$; while :; do sleep 0.05; done`
			if tt.ignoreTERM {
				child = `trap '' TERM; ` + child
			}
			script := filepath.Join(dir, "child.sh")
			if err := os.WriteFile(script, []byte(child), 0o644); err != nil {
				t.Fatal(err)
			}
			p := startLockctl(t, bin, srv.URL, []string{"SCRIPT=" + script},
				"run", res, "--ttl", "5", "--", "sh", "-c", `echo main $$; sh "$SCRIPT" & exit 0`)
			mainExited := testenv.Exited(atoi(t, p.waitLine(t, "main ")))
			childPid := atoi(t, p.waitLine(t, "child "))
			t.Cleanup(func() { _ = syscall.Kill(childPid, syscall.SIGKILL) })
			// The Ctrl-Cs must find only the child: the main process has
			// exited 0.
			select {
			case <-mainExited:
			case <-time.After(10 * time.Second):
				t.Fatal("the command's main process still runs 10s after it started its child")
			}

			interrupt := func() {
				t.Helper()
				if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
					t.Fatalf("Ctrl-C: %v; stderr: %s", err, p.stderr.String())
				}
			}
			// waitReport waits for the report after the n-th Ctrl-C.
			waitReport := func(sent, next string) {
				t.Helper()
				p.waitOutput(t, &p.stderr, "a report after "+sent, func(out string) (string, bool) {
					_, report, ok := strings.Cut(out, "after "+sent+", ")
					return "", ok && strings.Contains(report, fmt.Sprintf("pid %d: sh ", childPid)) &&
						strings.Contains(report, "the lease on \""+res+"\" is kept") &&
						strings.Contains(report, next+"\n")
				})
			}

			interrupt()
			waitReport("SIGINT", "Ctrl-C again sends them SIGTERM, a third time SIGKILL")
			if !alive(childPid) || !alive(p.cmd.Process.Pid) {
				t.Fatalf("after one Ctrl-C: child alive %t, lockctl alive %t; want both running", alive(childPid), alive(p.cmd.Process.Pid))
			}
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Status(context.Background(), res); err != nil {
				t.Fatalf("status while the child runs: got %v, want the lock held", err)
			}

			gone := testenv.Exited(childPid)
			interrupt()
			if tt.ignoreTERM {
				waitReport("SIGTERM", "Ctrl-C again sends them SIGKILL")
				interrupt()
			}
			if code := p.wait(t, 10*time.Second); code != 0 {
				t.Errorf("exit code: got %d, want the command's 0; stderr: %s", code, p.stderr.String())
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatalf("the child (pid %d) still runs after lockctl exited", childPid)
			}
			want := "sending SIGTERM"
			if tt.ignoreTERM {
				want = "sending SIGKILL"
			}
			if !strings.Contains(p.stderr.String(), want) {
				t.Errorf("stderr: got %q, want it to say %q", p.stderr.String(), want)
			}
			if _, err := c.Status(context.Background(), res); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("status after lockctl exited: got %v, want ErrNotFound (released)", err)
			}
		})
	}
}

// testOnLost: when the lease is lost, --on-lost runs before the command is
// stopped, with the lease in its environment; a hook that hangs is given
// half of --grace before SIGTERM and is killed at --grace.
func testOnLost(t *testing.T, bin string) {
	tests := []struct {
		name     string
		hook     string
		wantTerm string // the line the command's TERM trap prints
	}{
		{
			name:     "RunsBeforeTERM",
			hook:     `echo "$LOCK_RESOURCE $LOCK_FENCING_TOKEN $LOCK_LOST_REASON" > "$HOOKED"`,
			wantTerm: "term hook-done",
		},
		{
			name:     "HangingHookBoundedByGrace",
			hook:     `echo $$ > "$HOOKPID"; exec sleep 30`,
			wantTerm: "term hook-running",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock()
			srv := testenv.Start(t, testenv.Options{Now: clock.Now})
			dir, res := t.TempDir(), uniqueName(t)
			hooked, hookPid := filepath.Join(dir, "hooked"), filepath.Join(dir, "hookpid")
			script := `trap 'if [ -s "$HOOKED" ]; then echo term hook-done; else echo term hook-running; fi; exit 143' TERM; ` +
				`echo ready $$ $LOCK_FENCING_TOKEN; while :; do sleep 0.05; done`
			p := startLockctl(t, bin, srv.URL, []string{"HOOKED=" + hooked, "HOOKPID=" + hookPid},
				"run", res, "--ttl", "3", "--grace", "1", "--on-lost", tt.hook, "--", "sh", "-c", script)
			ready := strings.Fields(p.waitLine(t, "ready "))
			pid := atoi(t, ready[0])
			t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

			takeOver(t, srv, clock, res)
			p.waitLine(t, tt.wantTerm)
			if code := p.wait(t, 10*time.Second); code != cli.ExitLeaseLost {
				t.Errorf("exit code: got %d, want %d; stderr: %s", code, cli.ExitLeaseLost, p.stderr.String())
			}
			if alive(pid) {
				t.Errorf("the command (pid %d) still runs after lockctl exited", pid)
			}
			if tt.wantTerm == "term hook-done" {
				got, err := os.ReadFile(hooked)
				if want := res + " " + ready[1] + " lease on "; err != nil || !strings.HasPrefix(string(got), want) || !strings.Contains(string(got), "lost") {
					t.Errorf("the hook wrote %q (%v), want %q… with the reason the lease was lost", got, err, want)
				}
				return
			}
			data, err := os.ReadFile(hookPid)
			if err != nil {
				t.Fatalf("the hook did not run: %v; stderr: %s", err, p.stderr.String())
			}
			if hp := atoi(t, string(data)); alive(hp) {
				_ = syscall.Kill(hp, syscall.SIGKILL)
				t.Errorf("the hook (pid %d) still runs after lockctl exited", hp)
			}
			if !strings.Contains(p.stderr.String(), "--on-lost still runs") {
				t.Errorf("stderr: got %q, want it to say the hook overran", p.stderr.String())
			}
		})
	}
}
