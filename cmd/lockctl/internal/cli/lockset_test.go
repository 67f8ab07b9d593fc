//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// envLines parses the NAME=VALUE lines the command printed (env -0 style
// is not portable: values here hold no newline).
func envLines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && strings.HasPrefix(k, "LOCK") {
			m[k] = v
		}
	}
	return m
}

// TestRunSet runs `lockctl run --lock A --lock B -- CMD`: names with ","
// and "=" reach the command whole, numbered in the set's name order and in
// LOCKS_JSON, each with the token the service holds for it; both are held
// while it runs and free after.
func TestRunSet(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	base := uniqueName(t)
	a, b := base+":acct=2,eu", base+":acct=1,us" // b sorts first
	script := `env`
	code, stdout, stderr := lockctl(t, srv.URL, "run", "--lock", a, "--lock", b, "--owner", "w-set", "--ttl", "10",
		"--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit code: got %d, want 0; stderr %q", code, stderr)
	}
	env := envLines(stdout)
	want := map[string]string{"LOCK_COUNT": "2", "LOCK_NAME_1": b, "LOCK_NAME_2": a, "LOCK_OWNER": "w-set"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s: got %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["LOCK_FENCING_TOKEN"]; ok {
		t.Errorf("LOCK_FENCING_TOKEN is set for a set of two names (%q): want it left out, it could be either's", env["LOCK_FENCING_TOKEN"])
	}
	if env["LOCK_SET_ID"] == "" {
		t.Errorf("LOCK_SET_ID is empty")
	}
	var js []struct {
		Resource     string `json:"resource"`
		FencingToken int64  `json:"fencing_token"`
	}
	if err := json.Unmarshal([]byte(env["LOCKS_JSON"]), &js); err != nil {
		t.Fatalf("LOCKS_JSON %q: %v", env["LOCKS_JSON"], err)
	}
	if len(js) != 2 || js[0].Resource != b || js[1].Resource != a {
		t.Fatalf("LOCKS_JSON: got %+v, want %q then %q", js, b, a)
	}
	for i, j := range js {
		n := strconv.Itoa(i + 1)
		if tok := env["LOCK_FENCING_TOKEN_"+n]; tok != strconv.FormatInt(j.FencingToken, 10) || j.FencingToken <= 0 {
			t.Errorf("LOCK_FENCING_TOKEN_%s %q, LOCKS_JSON's %d: want the same token, positive", n, tok, j.FencingToken)
		}
	}
	if js[0].FencingToken == js[1].FencingToken {
		t.Errorf("both names got token %d: want a token per name", js[0].FencingToken)
	}
	for _, n := range []string{a, b} {
		if _, err := c.Status(context.Background(), n); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("status of %q after the run: got %v, want not found (released)", n, err)
		}
	}
}

// TestRunSetHeldWhileRunning checks from inside the command that the
// service holds every name for lockctl's owner, with the tokens the
// command got.
func TestRunSetHeldWhileRunning(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	base := uniqueName(t)
	a, b := base+":x", base+":y"
	// The command hands its LOCKS_JSON over one FIFO and waits on
	// another, so that the test asks the service while it runs.
	dir := t.TempDir()
	ready, done := filepath.Join(dir, "ready"), filepath.Join(dir, "done")
	for _, f := range []string{ready, done} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := `echo "$LOCKS_JSON" > "` + ready + `"; read x < "` + done + `"`
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan int, 1)
	go func() {
		code, _, _ := lockctl(t, srv.URL, "run", "--lock", a, "--lock", b, "--owner", "w-held", "--", "sh", "-c", script)
		result <- code
	}()
	read := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(ready) // blocks until the command writes it
		read <- b
	}()
	var got []byte
	select {
	case got = <-read:
	case code := <-result:
		if f, err := os.OpenFile(ready, os.O_WRONLY, 0); err == nil { // ends the read
			f.Close()
		}
		t.Fatalf("lockctl exited %d before the command started", code)
	}
	var js []struct {
		Resource     string `json:"resource"`
		FencingToken int64  `json:"fencing_token"`
	}
	if err := json.Unmarshal(got, &js); err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		l, err := c.Status(context.Background(), j.Resource)
		if err != nil {
			t.Errorf("status of %q while the command runs: %v", j.Resource, err)
			continue
		}
		if l.Owner != "w-held" || l.FencingToken != j.FencingToken {
			t.Errorf("%q is held by %q with token %d, want w-held with %d", j.Resource, l.Owner, l.FencingToken, j.FencingToken)
		}
	}
	if err := os.WriteFile(done, []byte("go\n"), 0o600); err != nil { // blocks until the command reads it
		t.Fatal(err)
	}
	if code := <-result; code != 0 {
		t.Errorf("exit code: got %d, want 0", code)
	}
}

// TestRunSetAllOrNothing: with one name held by another owner, a set run
// exits 75 without running the command, and holds none of its names.
func TestRunSetAllOrNothing(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	base := uniqueName(t)
	a, b := base+":a", base+":b"
	hold(t, srv.URL, b, "other")
	code, stdout, stderr := lockctl(t, srv.URL, "run", "--lock", a, "--lock", b, "--", "sh", "-c", "echo ran")
	if code != cli.ExitHeld {
		t.Errorf("exit code: got %d, want %d; stderr %q", code, cli.ExitHeld, stderr)
	}
	if stdout != "" {
		t.Errorf("the command ran: stdout %q", stdout)
	}
	if !strings.Contains(stderr, strconv.Quote(b)+" is held") {
		t.Errorf("stderr %q: want it to name %q as the holder's", stderr, b)
	}
	wantFree(t, srv.URL, a)
}

// TestRunSetUsage: the shapes that could be misread are refused.
func TestRunSetUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"NameWithoutLockFlag", []string{"run", "--lock", "a", "b", "--", "true"}, `every name takes its own --lock and a command follows "--": got "b"`},
		{"CommandWithoutDashes", []string{"run", "--lock", "a", "true"}, `every name takes its own --lock and a command follows "--": got "true"`},
		{"ResourceAndLock", []string{"run", "a", "--lock", "b", "--", "true"}, `RESOURCE "a" and --lock`},
		{"Permits", []string{"run", "--lock", "a", "-n", "2", "--", "true"}, "-n and --lock do not go together"},
		{"SetPrefixAlone", []string{"run", "a", "--set-prefix", "a", "--", "true"}, "--set-prefix needs --lock"},
		{"AcquireNameWithoutLockFlag", []string{"acquire", "--lock", "a", "b"}, `every name takes its own --lock`},
		{"AcquireResourceAndLock", []string{"acquire", "a", "--lock", "b"}, `RESOURCE "a" and --lock`},
		{"NoCommand", []string{"run", "--lock", "a", "--lock", "b"}, "missing the command to run: lockctl run --lock NAME"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := lockctl(t, "http://127.0.0.1:1", tt.args...)
			if code != cli.ExitUsage || !strings.Contains(stderr, tt.want) || stdout != "" {
				t.Errorf("got exit %d, stdout %q, stderr %q; want %d and %q", code, stdout, stderr, cli.ExitUsage, tt.want)
			}
		})
	}
}

// TestAcquireSet: `acquire --lock A --lock B` holds both names for one
// owner and prints them with the set's id; each is released with
// `release NAME`; a held name refuses the whole set (exit 75, nothing held).
func TestAcquireSet(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	base := uniqueName(t)
	a, b, x := base+":a", base+":b", base+":x"
	code, stdout, stderr := lockctl(t, srv.URL, "acquire", "--lock", b, "--lock", a, "--owner", "w-acq")
	if code != 0 {
		t.Fatalf("exit code: got %d, want 0; stderr %q", code, stderr)
	}
	var got struct {
		SetID string        `json:"set_id"`
		Owner string        `json:"owner"`
		Locks []client.Lock `json:"locks"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	if got.SetID == "" || got.Owner != "w-acq" || len(got.Locks) != 2 || got.Locks[0].Resource != a || got.Locks[1].Resource != b {
		t.Fatalf("got %+v, want a set id, owner w-acq and %q then %q", got, a, b)
	}
	for _, l := range got.Locks {
		s, err := c.Status(context.Background(), l.Resource)
		if err != nil || s.Owner != "w-acq" || s.FencingToken != l.FencingToken {
			t.Errorf("status of %q: got %+v (%v), want w-acq with token %d", l.Resource, s, err, l.FencingToken)
		}
	}
	// b is held: a set of x and b takes nothing.
	code, stdout, stderr = lockctl(t, srv.URL, "acquire", "--lock", x, "--lock", b)
	if code != cli.ExitHeld || stdout != "" || !strings.Contains(stderr, strconv.Quote(b)+" is held") {
		t.Errorf("acquire of a set with a held name: exit %d, stdout %q, stderr %q; want %d naming %q", code, stdout, stderr, cli.ExitHeld, b)
	}
	wantFree(t, srv.URL, x)
	for _, l := range got.Locks {
		if code, _, stderr := lockctl(t, srv.URL, "release", l.Resource, "--owner", "w-acq", "--token", strconv.FormatInt(l.FencingToken, 10)); code != 0 {
			t.Errorf("release %q: exit %d; stderr %q", l.Resource, code, stderr)
		}
		wantFree(t, srv.URL, l.Resource)
	}
}
