//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// TestElectForceReleaseOneCommandAtATime (found by review): a force release
// ends the leader's lease at the service at once, while the deposed leader
// learns of it only at its next renewal (up to ttl/3 later) and then gives
// CMD up to --grace. elect's default lock-delay (ttl/3 + grace), which a
// force release keeps, holds the next candidate back until then: the log
// must show A's command end before B's starts.
func TestElectForceReleaseOneCommandAtATime(t *testing.T) {
	bin := buildLockctl(t)
	srv := testenv.Start(t, testenv.Options{})
	dir, res := t.TempDir(), uniqueName(t)
	log := filepath.Join(dir, "log")
	// The command logs its start, and its end on SIGTERM after a short
	// clean-up (well within --grace).
	const script = `trap 'sleep 0.5; echo "end $LOCK_FENCING_TOKEN" >> "$LOG"; exit 0' TERM; ` +
		`echo "start $LOCK_FENCING_TOKEN" >> "$LOG"; echo ready $LOCK_FENCING_TOKEN; while :; do sleep 0.05; done`
	start := func() *proc {
		return startLockctl(t, bin, srv.URL, []string{"LOG=" + log}, "elect", res, "--ttl", "6", "--once", "--", "sh", "-c", script)
	}
	a := start()
	tokA := a.waitLine(t, "ready ")
	b := start()
	time.Sleep(300 * time.Millisecond) // b campaigns (its first request reaches the service; no event to wait on)

	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(context.Background(), res, "operator thinks host-a is gone"); err != nil {
		t.Fatal(err)
	}
	tokB := b.waitLine(t, "ready ")
	data, _ := os.ReadFile(log)
	if !strings.Contains(string(data), "end "+tokA) {
		t.Errorf("B's command started (token %s) while A's (token %s) still ran: log %q — two commands of one election at once",
			tokB, tokA, data)
	}
	a.wait(t, 15*time.Second)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(t, 15*time.Second)
	data, _ = os.ReadFile(log)
	t.Logf("log: %q", data)
}
