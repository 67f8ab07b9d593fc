// Package local runs the lock service on a laptop: an in-memory dynalite
// (a DynamoDB-compatible server from npm) and an HTTP server that turns each
// request into the API Gateway HTTP API event the Lambda functions receive
// and calls the very same handlers.
package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// dynaliteJS starts dynalite in memory on a free loopback port, prints the
// port, and exits when its stdin closes, so it cannot outlive the Go process
// that started it (even one killed with SIGKILL).
//
// dynalite throws from a request's 'error' event (a client that aborts
// mid-request), which would kill the process and every lock with it; the
// guard answers such a request by dropping it instead.
const dynaliteJS = `
const dynalite = require('dynalite');
const server = dynalite({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0});
server.prependListener('request', (req, res) => {
  const on = req.on;
  req.on = function (event, fn) {
    if (event !== 'error') return on.call(this, event, fn);
    return on.call(this, 'error', (err) => {
      console.error('dynalite: request aborted by its client: ' + err.message);
      res.destroy();
    });
  };
});
server.listen(0, '127.0.0.1', () => { console.log('PORT ' + server.address().port); });
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
`

// Dynalite is a running in-memory dynalite server.
type Dynalite struct {
	// Endpoint is the server's base URL, e.g. http://127.0.0.1:41234.
	Endpoint string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	exited   chan struct{}
	err      error
}

// StartDynalite starts dynalite from the repository's node_modules (run
// `npm ci` first; `make run` and `make test` do) and waits until it listens.
func StartDynalite(ctx context.Context) (*Dynalite, error) {
	root, err := FindRepoRoot()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "node_modules", "dynalite", "package.json")); err != nil {
		return nil, fmt.Errorf("dynalite is not installed in %s/node_modules: run `npm ci` (make does)", root)
	}
	cmd := exec.Command("node", "-e", dynaliteJS)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	// Its own process group: a Ctrl-C in the terminal reaches the Go
	// process, which then stops dynalite itself (and closing stdin stops it
	// if the Go process dies first).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start dynalite (is node installed?): %w", err)
	}
	d := &Dynalite{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	portc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "PORT "); ok {
				portc <- p
			}
		}
		d.err = cmd.Wait()
		close(d.exited)
	}()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	select {
	case p := <-portc:
		d.Endpoint = "http://127.0.0.1:" + p
		return d, nil
	case <-d.exited:
		return nil, fmt.Errorf("dynalite exited before listening: %v", d.err)
	case <-timeout.C:
		d.Close()
		return nil, errors.New("dynalite did not start within 20s")
	case <-ctx.Done():
		d.Close()
		return nil, ctx.Err()
	}
}

// Exited is closed when the dynalite process has exited, whether Close
// stopped it or it died; Err then says how.
func (d *Dynalite) Exited() <-chan struct{} { return d.exited }

// Err returns how the process ended, once Exited is closed.
func (d *Dynalite) Err() error {
	<-d.exited
	return d.err
}

// Close stops dynalite and waits for it to exit.
func (d *Dynalite) Close() error {
	d.stdin.Close()
	select {
	case <-d.exited:
	case <-time.After(3 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	return nil
}

// FindRepoRoot returns the nearest folder at or above the working directory
// that holds go.mod and package.json.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, "package.json")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod + package.json) not found above the working directory")
		}
		dir = parent
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
