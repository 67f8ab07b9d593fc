package cli_test

import (
	"context"
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

// TestReadWriteAdminCommands runs the read/write lock forms of status, ls
// and force-release against the local runner, in order on one name: status
// --rw of a name never taken (exit 0, no leases), two readers then a queued
// writer in status --rw and ls --rw (table and JSON), force-release --read
// --slot K with a stale --token (exit 4 and the suggestion) and without,
// force-release --write of no writer (exit 3), and the usage errors.
func TestReadWriteAdminCommands(t *testing.T) {
	t.Parallel()
	// A 5 s waiting route ends the queued writer's rounds within 2 s: the
	// local runner does not notice a waiter that leaves, and closing the
	// server waits for it.
	srv := testenv.Start(t, testenv.Options{Timeouts: map[string]time.Duration{"wait": 5 * time.Second}})
	name := uniqueName(t)
	run := func(wantCode int, args ...string) (stdout, stderr string) {
		t.Helper()
		code, stdout, stderr := lockctl(t, srv.URL, args...)
		if code != wantCode {
			t.Fatalf("lockctl %s: exit %d, want %d; stdout %q, stderr: %s", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		return stdout, stderr
	}
	status := func() client.RWStatus {
		t.Helper()
		out, _ := run(cli.ExitOK, "status", name, "--rw")
		var st client.RWStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --rw: %q (%v)", out, err)
		}
		return st
	}
	if st := status(); st.Name != name || st.Writer != nil || len(st.Readers) != 0 || st.FencingToken != 0 {
		t.Errorf("status --rw of a name never taken: %+v, want no leases and no token", st)
	}

	var a, b client.RWLeaseInfo
	out, _ := run(cli.ExitOK, "acquire", name, "--read", "--owner", "a")
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Mode != client.ReadMode {
		t.Fatalf("acquire --read: %q (%v)", out, err)
	}
	out, _ = run(cli.ExitOK, "acquire", name, "--read", "--owner", "b", "--ttl", "60")
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Slot == a.Slot {
		t.Fatalf("second acquire --read: %q (%v), want another slot than %d", out, err, a.Slot)
	}
	// A writer queues behind the readers; its place shows in the status
	// and the listing.
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writer := make(chan error, 1)
	go func() {
		l, err := c.AcquireWrite(ctx, name, "w", 30*time.Second, client.WithWait(30*time.Second))
		if err == nil {
			err = l.Release(context.Background())
		}
		writer <- err
	}()
	for {
		st := status()
		if len(st.Queue) == 1 && st.Queue[0].Mode == client.WriteMode && st.Queue[0].Owner == "w" {
			if len(st.Readers) != 2 || st.Writer != nil || st.FencingToken != b.FencingToken {
				t.Errorf("status --rw: %+v, want the readers a and b, no writer, token %d", st, b.FencingToken)
			}
			break
		}
		select {
		case err := <-writer:
			t.Fatalf("the writer ended before it queued: %v", err)
		case <-time.After(20 * time.Millisecond): // polling the status: the queue has no event to wait on
		}
	}
	out, _ = run(cli.ExitOK, "ls", name, "--rw")
	for _, want := range []string{
		`(?m)^RWLOCK +MODE +SLOT +OWNER +TOKEN +EXPIRES +DELAY +PRINCIPAL +WAITING$`,
		`(?m)^` + regexp.QuoteMeta(name) + ` +read +` + strconv.Itoa(a.Slot) + ` +a +` + strconv.FormatInt(a.FencingToken, 10) + ` .* 1$`,
		`(?m)^` + regexp.QuoteMeta(name) + ` +read +` + strconv.Itoa(b.Slot) + ` +b +` + strconv.FormatInt(b.FencingToken, 10) + ` .* 1$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("ls --rw: got\n%s\nwant a match for %s", out, want)
		}
	}
	out, _ = run(cli.ExitOK, "ls", name, "--rw", "--json")
	var rows []client.AdminRWLock
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || len(rows[0].Readers) != 2 || len(rows[0].Queue) != 1 {
		t.Errorf("ls --rw --json: %q (%v), want one lock with 2 readers and the writer waiting", out, err)
	}
	if out, _ := run(cli.ExitOK, "ls", name); strings.Contains(out, name) {
		t.Errorf("ls without --rw lists the read/write lock:\n%s", out)
	}
	if out, _ := run(cli.ExitOK, "ls", name, "-s"); strings.Contains(out, name) {
		t.Errorf("ls -s lists the read/write lock:\n%s", out)
	}

	slotB := strconv.Itoa(b.Slot)
	_, stderr := run(cli.ExitConflict, "force-release", name, "--read", "--slot", slotB, "--reason", "test", "--token", "1")
	if want := "lockctl force-release " + name + " --read --slot " + slotB + " --reason test --token " + strconv.FormatInt(b.FencingToken, 10); !strings.Contains(stderr, "reader's slot is held by another lease") ||
		!strings.Contains(stderr, `"owner":"b"`) || !strings.Contains(stderr, want) {
		t.Errorf("force-release --read --token 1: stderr %q, want b's lease and the suggestion %q", stderr, want)
	}
	run(cli.ExitNotFound, "force-release", name, "--write", "--reason", "test")
	out, _ = run(cli.ExitOK, "force-release", name, "--read", "--slot", slotB, "--reason", "test", "--immediate")
	var ended client.RWForceReleased
	if err := json.Unmarshal([]byte(out), &ended); err != nil || ended.Owner != "b" || ended.Mode != client.ReadMode || ended.Slot != b.Slot ||
		ended.Reason != "test" || !ended.Immediate {
		t.Errorf("force-release --read --slot %s: %q (%v), want b's reader's lease, immediate", slotB, out, err)
	}
	if st := status(); len(st.Readers) != 1 || st.Readers[0].Owner != "a" {
		t.Errorf("status --rw after the force release: %+v, want a's reader alone", st)
	}

	for _, args := range [][]string{
		{"status", name, "--rw", "-s"},
		{"ls", "--rw", "--semaphores"},
		{"force-release", name, "--read", "--reason", "x"},
		{"force-release", name, "--write", "--slot", "0", "--reason", "x"},
		{"force-release", name, "--read", "--write", "--slot", "0", "--reason", "x"},
		{"force-release", name, "--read", "--slot", strconv.Itoa(client.MaxReaders), "--reason", "x"},
		{"watch", name, "--rw", "extra"},
	} {
		run(cli.ExitUsage, args...)
	}
	cancel()
	<-writer
}
