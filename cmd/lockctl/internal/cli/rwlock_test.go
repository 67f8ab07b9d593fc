//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// TestRunReadWrite runs `lockctl run --read` and `run --write` against the
// local runner: a reader runs while another reader holds the name, in a
// slot of its own, with LOCK_MODE and LOCK_SLOT; a writer is refused while
// a reader holds it, and with --wait it queues, keeps out the readers that
// come after it, and runs once the reader is released, with a larger token.
func TestRunReadWrite(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := uniqueName(t)
	r0, err := c.TryAcquireRead(ctx, name, "reader-0", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Readers run together: this one runs while r0 holds its lease.
	code, stdout, stderr := lockctl(t, srv.URL, "run", "--read", name, "--", "sh", "-c", "env")
	if code != cli.ExitOK {
		t.Fatalf("run --read beside a reader: exit %d, stderr %q", code, stderr)
	}
	env := envLines(stdout)
	if env["LOCK_RESOURCE"] != name || env["LOCK_MODE"] != "read" || env["LOCK_SLOT"] == "" || env["LOCK_SLOT"] == strconv.Itoa(r0.Slot()) {
		t.Errorf("run --read: LOCK_RESOURCE %q, LOCK_MODE %q, LOCK_SLOT %q; want %q, read and a slot other than reader-0's %d",
			env["LOCK_RESOURCE"], env["LOCK_MODE"], env["LOCK_SLOT"], name, r0.Slot())
	}
	readTok, _ := strconv.ParseInt(env["LOCK_FENCING_TOKEN"], 10, 64)
	if readTok <= r0.FencingToken() {
		t.Errorf("run --read: LOCK_FENCING_TOKEN %q, want more than reader-0's %d", env["LOCK_FENCING_TOKEN"], r0.FencingToken())
	}

	// A writer is refused while a reader holds the name.
	code, _, stderr = lockctl(t, srv.URL, "run", "--write", name, "--", "true")
	if code != cli.ExitHeld || !strings.Contains(stderr, "held by readers or a writer") {
		t.Fatalf("run --write beside a reader: exit %d, stderr %q; want %d and why", code, stderr, cli.ExitHeld)
	}

	// A waiting writer queues; once it is queued a new reader is refused
	// (no writer starves), and the writer runs when reader-0 leaves.
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := lockctl(t, srv.URL, "run", name, "--write", "--wait", "30", "--", "sh", "-c", "env")
		done <- result{code, stdout, stderr}
	}()
	for queued := false; !queued; {
		st, err := c.RWStatus(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range st.Queue {
			queued = queued || q.Mode == client.WriteMode
		}
		select {
		case r := <-done:
			t.Fatalf("run --write --wait ended before reader-0 left: exit %d, stderr %q", r.code, r.stderr)
		case <-time.After(20 * time.Millisecond): // polling the status: the queue has no event to wait on
		}
	}
	if _, err := c.TryAcquireRead(ctx, name, "late-reader", 30*time.Second); err == nil {
		t.Errorf("a reader was granted behind a queued writer")
	}
	if err := r0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != cli.ExitOK {
		t.Fatalf("run --write --wait: exit %d, stderr %q", r.code, r.stderr)
	}
	env = envLines(r.stdout)
	writeTok, _ := strconv.ParseInt(env["LOCK_FENCING_TOKEN"], 10, 64)
	if env["LOCK_MODE"] != "write" || writeTok <= readTok {
		t.Errorf("run --write: LOCK_MODE %q, LOCK_FENCING_TOKEN %q; want write and more than the reader's %d", env["LOCK_MODE"], env["LOCK_FENCING_TOKEN"], readTok)
	}
	if _, ok := env["LOCK_SLOT"]; ok {
		t.Errorf("run --write: LOCK_SLOT %q is set; want it only for a reader", env["LOCK_SLOT"])
	}
	st, err := c.RWStatus(ctx, name)
	if err != nil || st.Writer != nil || len(st.Readers) != 0 {
		t.Errorf("after the runs: %+v (%v), want no lease (run released its own)", st, err)
	}

	for _, args := range [][]string{
		{"run", name, "--read", "--write", "--", "true"},
		{"run", name, "--read", "-n", "2", "--", "true"},
		{"run", "--write", "--lock", name, "--", "true"},
	} {
		if code, _, stderr := lockctl(t, srv.URL, args...); code != cli.ExitUsage {
			t.Errorf("lockctl %q: exit %d, want %d; stderr %q", args, code, cli.ExitUsage, stderr)
		}
	}
}

// TestReadWriteByHand takes, renews and releases a read/write lock's
// leases with acquire, renew and release --read/--write.
func TestReadWriteByHand(t *testing.T) {
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
	out, _ := run(cli.ExitOK, "acquire", name, "--read", "--owner", "a")
	var a struct {
		Mode  client.RWMode `json:"mode"`
		Owner string        `json:"owner"`
		Slot  *int          `json:"slot"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Mode != client.ReadMode || a.Owner != "a" || a.Slot == nil {
		t.Fatalf("acquire --read: %q (%v), want a's reader's lease with its slot", out, err)
	}
	slot := strconv.Itoa(*a.Slot)
	if _, stderr := run(cli.ExitHeld, "acquire", name, "--write", "--wait", "1"); !strings.Contains(stderr, "held by readers or a writer, or another waiter is ahead; gave up after waiting 1s") {
		t.Errorf("acquire --write beside a reader: stderr %q", stderr)
	}
	out, _ = run(cli.ExitOK, "renew", name, "--read", "--slot", slot, "--owner", "a", "--ttl", "90")
	if !strings.Contains(out, `"mode":"read"`) {
		t.Errorf("renew --read: %q", out)
	}
	run(cli.ExitNotFound, "release", name, "--write", "--owner", "a")
	if out, _ := run(cli.ExitOK, "release", name, "--read", "--slot", slot, "--owner", "a"); !strings.Contains(out, `"released":true`) || !strings.Contains(out, `"slot":`+slot) {
		t.Errorf("release --read: %q", out)
	}
	out, _ = run(cli.ExitOK, "acquire", name, "--write", "--owner", "w")
	if !strings.Contains(out, `"mode":"write"`) || strings.Contains(out, `"slot"`) {
		t.Errorf("acquire --write: %q, want the writer's lease, no slot", out)
	}
	if _, stderr := run(cli.ExitHeld, "acquire", name, "--read"); !strings.Contains(stderr, "no room for a reader") {
		t.Errorf("acquire --read beside the writer: stderr %q", stderr)
	}
	run(cli.ExitOK, "renew", name, "--write", "--owner", "w")
	run(cli.ExitOK, "release", name, "--write", "--owner", "w")
	for _, args := range [][]string{
		{"acquire", name, "--read", "--write"},
		{"release", name, "--read", "--owner", "a"},
		{"renew", name, "--write", "--slot", "0", "--owner", "w"},
		{"release", name, "--read", "--slot", "64", "--owner", "a"},
	} {
		run(cli.ExitUsage, args...)
	}
}

// TestRunWriteLost: the writer's lease is a hold like a lock's: when it is
// lost (released behind lockctl's back, so the next renewal is refused),
// the command is stopped and lockctl exits ExitLeaseLost, naming the
// lease.
func TestRunWriteLost(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := uniqueName(t)
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := lockctl(t, srv.URL, "run", name, "--write", "--owner", "w", "--ttl", "3", "--grace", "0",
			"--", "sleep", "30")
		done <- result{code, stderr}
	}()
	var token int64
	for token == 0 {
		st, err := c.RWStatus(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Writer != nil {
			token = st.Writer.FencingToken
		}
		select {
		case r := <-done:
			t.Fatalf("run --write ended before its lease was seen: exit %d, stderr %q", r.code, r.stderr)
		case <-time.After(20 * time.Millisecond): // polling the status: the grant has no event to wait on
		}
	}
	if err := c.ReleaseRW(ctx, name, "w", client.WriteMode, 0, token); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != cli.ExitLeaseLost || !strings.Contains(r.stderr, "write lease on "+strconv.Quote(name)) {
		t.Errorf("run --write after its lease was released elsewhere: exit %d, stderr %q; want %d naming the write lease", r.code, r.stderr, cli.ExitLeaseLost)
	}
}
