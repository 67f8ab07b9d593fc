//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenBrowserKeepsTokenOffCommandLines: on a shared host every user
// can read every process's command line (/proc/PID/cmdline, ps). `lockctl
// ui --open` must not hand the URL with its one-time token to xdg-open (and
// through it to the browser) as an argument, or another user can read it and
// exchange it for the session cookie before the browser does.
func TestOpenBrowserKeepsTokenOffCommandLines(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + record + ".tmp && mv " + record + ".tmp " + record + "\n"
	if err := os.WriteFile(filepath.Join(dir, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	const token = "S3CRET-token-0123456789"
	t.Cleanup(removeLaunchers)
	if err := openBrowser("http://127.0.0.1:40713/?token=" + token); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var args []byte
	for {
		var err error
		if args, err = os.ReadFile(record); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("xdg-open was not run")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not ordering events
	}
	if strings.Contains(string(args), token) {
		t.Errorf("xdg-open's command line (readable by every user): got %q, want it without the token", strings.TrimSpace(string(args)))
	}
}
