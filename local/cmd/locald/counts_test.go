package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/local"
)

// TestCountsFile: with -counts FILE, SIGUSR1 writes the runner's counts to
// FILE (a reader that removes FILE, signals, and waits for FILE to appear
// reads a whole file), and so does stopping: requests by route key and
// the try-acquires that carried wait_seconds, the numbers a test of a
// client in another language checks.
func TestCountsFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "counts.json")
	p := startLocaldArgs(t, []string{"-counts", file})
	post := func(path, body string, want int) {
		t.Helper()
		resp, err := http.Post(p.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s %s: got %d, want %d", path, body, resp.StatusCode, want)
		}
	}
	read := func() local.Counts {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var c local.Counts
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v\n%s", file, err, b)
		}
		return c
	}
	post("/locks/counted", `{"owner":"w1","ttl_seconds":30}`, 200)
	post("/locks/counted", `{"owner":"w2","ttl_seconds":30,"wait_seconds":1}`, 422)
	post("/locks/counted/wait", `{"owner":"w2","ttl_seconds":30,"wait_seconds":1}`, 200)

	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	p.waitStdout(t, 10*time.Second, func(out string) bool { return strings.Contains(out, `"msg":"counts written"`) })
	c := read()
	if c.Requests["POST /locks/{resource}"] != 2 || c.Requests["POST /locks/{resource}/wait"] != 1 || c.TryWaitSeconds != 1 {
		t.Errorf("after SIGUSR1: got %+v, want 2 tries (one carrying wait_seconds) and 1 wait", c)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".locald-counts-*")); len(left) != 0 {
		t.Errorf("temporary files left beside the counts: %v", left)
	}

	// Stopping writes them again, with what came since.
	post("/semaphores/counted/wait", `{"owner":"w1","ttl_seconds":30,"permits":2,"wait_seconds":1}`, 200)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("locald still running 10s after SIGTERM")
	}
	if c := read(); c.Requests["POST /semaphores/{name}/wait"] != 1 || c.Requests["POST /locks/{resource}"] != 2 {
		t.Errorf("on exit: got %+v, want the semaphore's wait counted too", c)
	}
}
