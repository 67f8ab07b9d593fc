package cli_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// TestSemaphoreCommands runs the semaphore forms of the commands against
// the local runner, in order on one semaphore of 2 permits: acquire -n
// (two permits, then full, then another N), status -s, ls -s, renew and
// release --slot, run -n with LOCK_SLOT, force-release --slot, and the
// usage errors.
func TestSemaphoreCommands(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := uniqueName(t)
	run := func(wantCode int, args ...string) (stdout, stderr string) {
		t.Helper()
		code, stdout, stderr := lockctl(t, srv.URL, args...)
		if code != wantCode {
			t.Fatalf("lockctl %s: exit %d, want %d; stderr: %s", strings.Join(args, " "), code, wantCode, stderr)
		}
		return stdout, stderr
	}
	var a, b client.PermitInfo
	out, _ := run(cli.ExitOK, "acquire", name, "-n", "2", "--owner", "a")
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Owner != "a" || a.Name != name {
		t.Fatalf("acquire -n: %q (%v)", out, err)
	}
	out, _ = run(cli.ExitOK, "acquire", name, "--permits", "2", "--owner", "b", "--ttl", "60")
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Slot == a.Slot || b.FencingToken <= a.FencingToken {
		t.Fatalf("second acquire -n: %q (%v), want another slot than %d and a larger token", out, err, a.Slot)
	}
	if _, stderr := run(cli.ExitHeld, "acquire", name, "-n", "2", "--wait", "1"); !strings.Contains(stderr, "is full") {
		t.Errorf("full: stderr %q", stderr)
	}
	run(0, "acquire", name, "-n", "2", "-E", "0", "-q")
	if _, stderr := run(cli.ExitConflict, "acquire", name, "-n", "3"); !strings.Contains(stderr, "permits mismatch") {
		t.Errorf("another N: stderr %q", stderr)
	}

	out, _ = run(cli.ExitOK, "status", name, "-s")
	var st client.SemaphoreStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Permits != 2 || len(st.Holders) != 2 {
		t.Errorf("status -s: %q (%v)", out, err)
	}
	out, _ = run(cli.ExitOK, "ls", name, "-s")
	if !regexp.MustCompile(`(?m)^SEMAPHORE +SLOT +PERMITS +OWNER`).MatchString(out) || !strings.Contains(out, " b ") {
		t.Errorf("ls -s:\n%s", out)
	}
	out, _ = run(cli.ExitOK, "ls", name, "--semaphores", "--json")
	var rows []client.AdminPermit
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 || rows[0].Permits != 2 {
		t.Errorf("ls --semaphores --json: %q (%v)", out, err)
	}
	if out, _ := run(cli.ExitOK, "ls", name); strings.Contains(out, name) {
		t.Errorf("ls without -s lists the semaphore:\n%s", out)
	}

	slotA := strconv.Itoa(a.Slot)
	out, _ = run(cli.ExitOK, "renew", name, "--owner", "a", "--slot", slotA, "--ttl", "90", "--token", strconv.FormatInt(a.FencingToken, 10))
	var renewed client.PermitInfo
	if err := json.Unmarshal([]byte(out), &renewed); err != nil || renewed.Slot != a.Slot || time.Until(renewed.ExpiresAt) < 80*time.Second {
		t.Errorf("renew --slot: %q (%v)", out, err)
	}
	run(cli.ExitConflict, "release", name, "--owner", "a", "--slot", strconv.Itoa(b.Slot))
	if out, _ := run(cli.ExitOK, "release", name, "--owner", "a", "--slot", slotA); !strings.Contains(out, `"released":true`) {
		t.Errorf("release --slot: %q", out)
	}
	run(cli.ExitNotFound, "renew", name, "--owner", "a", "--slot", slotA)

	// run -n takes the free slot and gives the command its variables.
	out, _ = run(cli.ExitOK, "run", name, "-n", "2", "--", "sh", "-c", `echo "$LOCK_RESOURCE $LOCK_SLOT $LOCK_PERMITS $LOCK_FENCING_TOKEN"`)
	if f := strings.Fields(out); len(f) != 4 || f[0] != name || f[1] != slotA || f[2] != "2" {
		t.Errorf("run -n: the command printed %q, want %q, slot %s, 2 and a token", out, name, slotA)
	}
	// run released its permit: the slot is free for c.
	run(cli.ExitOK, "acquire", name, "-n", "2", "--owner", "c")

	out, stderr := run(cli.ExitConflict, "force-release", name, "--slot", strconv.Itoa(b.Slot), "--reason", "test", "--token", "1")
	if !strings.Contains(stderr, "--token "+strconv.FormatInt(b.FencingToken, 10)) {
		t.Errorf("force-release --slot --token 1: stdout %q stderr %q, want a suggestion with b's token", out, stderr)
	}
	out, _ = run(cli.ExitOK, "force-release", name, "--slot", strconv.Itoa(b.Slot), "--reason", "test", "--immediate")
	if !strings.Contains(out, `"owner":"b"`) {
		t.Errorf("force-release --slot: %q", out)
	}
	out, _ = run(cli.ExitOK, "status", name, "--semaphore")
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Holders) != 1 {
		t.Errorf("status after force release: %q (%v), want c's permit alone", out, err)
	}

	for _, args := range [][]string{
		{"acquire", name, "-n", "101"},
		{"run", name, "-n", "-1", "--", "true"},
		{"release", name, "--owner", "a", "--slot", "-1"},
		{"renew", name, "--owner", "a", "--slot", "100"},
	} {
		run(cli.ExitUsage, args...)
	}
}
