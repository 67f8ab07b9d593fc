//go:build linux

package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenBrowserLauncher: --open hands the opener the path of a file only
// the user can read (0600 in a 0700 directory) that leads to the URL with
// the token; removeLaunchers removes file and directory.
func TestOpenBrowserLauncher(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s' \"$1\" > " + record + ".tmp && mv " + record + ".tmp " + record + "\n"
	if err := os.WriteFile(filepath.Join(dir, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Cleanup(removeLaunchers)
	const url = "http://127.0.0.1:40713/?token=S3CRET-token-0123456789"
	if err := openBrowser(url); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var arg []byte
	for {
		var err error
		if arg, err = os.ReadFile(record); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("xdg-open was not run")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not ordering events
	}
	path := string(arg)
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the opener's argument %q: %v, want the launcher file", path, err)
	}
	if !strings.Contains(string(page), `content="0;url=`+url+`"`) {
		t.Errorf("launcher page: got %q, want a refresh to %s", page, url)
	}
	for _, c := range []struct {
		path string
		want fs.FileMode
	}{{path, 0o600}, {filepath.Dir(path), 0o700 | fs.ModeDir}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.want {
			t.Errorf("%s: got mode %v, want %v", c.path, fi.Mode(), c.want)
		}
	}
	removeLaunchers()
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after removeLaunchers: stat %s: got %v, want not exist", filepath.Dir(path), err)
	}
}
