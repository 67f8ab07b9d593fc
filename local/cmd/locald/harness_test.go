package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bin is the locald binary every test runs, built once by TestMain exactly
// as `make run` builds it.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "locald-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "locald")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build locald: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// plainEnv is the environment of a newcomer's shell: none of the variables
// that would change what `make run` does.
func plainEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "DYNAMODB_ENDPOINT", "DYNAMODB_RETURNS_OLD_ITEM", "TABLE_NAME", "MAX_TTL_SECONDS",
			"TOMBSTONE_RETENTION_SECONDS", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "ADDR", "LOG_LEVEL":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// proc is a running locald.
type proc struct {
	cmd *exec.Cmd
	// URL is where it serves, read from its "serving the lock API" line.
	URL string
	// Dynalite is the embedded store's address (host:port).
	Dynalite string
	done     chan struct{}
	mu       sync.Mutex
	stdout   bytes.Buffer
	stderr   bytes.Buffer
	logged   chan struct{} // closed by the next line on stdout
}

// logLine is the part of locald's JSON log lines the tests read.
type logLine struct {
	Msg, URL, Endpoint string
}

// startLocald starts the binary as `make run` does (plain environment plus
// extra, in its own process group) on a free port, waits until it serves,
// and stops it when t ends.
func startLocald(t *testing.T, extra ...string) *proc {
	t.Helper()
	return startLocaldArgs(t, nil, extra...)
}

// startLocaldArgs is startLocald with command-line flags args.
func startLocaldArgs(t *testing.T, args []string, extra ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...), done: make(chan struct{})}
	p.cmd.Env = append(plainEnv(), extra...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.Write(append(sc.Bytes(), '\n'))
			if p.logged != nil {
				close(p.logged)
				p.logged = nil
			}
			var l logLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				switch l.Msg {
				case "started in-memory dynalite":
					p.Dynalite = strings.TrimPrefix(l.Endpoint, "http://")
				case "serving the lock API":
					p.URL = l.URL
					close(ready)
				}
			}
			p.mu.Unlock()
		}
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("locald exited before serving: %s\nstderr: %s", p.cmd.ProcessState, p.Stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("locald did not serve within 30s; stdout: %s", p.Stdout())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p
}

// Stdout returns what locald has logged so far.
func (p *proc) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

// waitStdout waits up to limit until ok holds for what locald has logged
// (looking again at every line it logs) and returns that log.
func (p *proc) waitStdout(t *testing.T, limit time.Duration, ok func(stdout string) bool) string {
	t.Helper()
	timeout := time.After(limit)
	for {
		p.mu.Lock()
		out := p.stdout.String()
		if p.logged == nil {
			p.logged = make(chan struct{})
		}
		logged := p.logged
		p.mu.Unlock()
		if ok(out) {
			return out
		}
		select {
		case <-logged:
		case <-p.done:
			t.Fatalf("locald exited: %s\nstderr: %s", p.cmd.ProcessState, p.Stderr())
		case <-timeout:
			t.Fatalf("locald's log did not get there within %s:\n%s", limit, out)
		}
	}
}

// Stderr returns what locald has written to stderr so far.
func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
