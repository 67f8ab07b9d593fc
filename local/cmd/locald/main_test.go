package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
)

// TestSignalsStopEverything builds locald, serves on a free port, and checks
// that SIGTERM to its process group (what `make run` gets on Ctrl-C or
// SIGTERM) stops it and dynalite and frees both ports — and that even a
// SIGKILLed locald leaves no dynalite behind.
func TestSignalsStopEverything(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startLocald(t) // returns once it serves
			dynalite := testenv.Exited(childPID(t, p.cmd.Process.Pid))
			resp, err := http.Get(p.URL + "/locks/x")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("GET /locks/x: got %d, want 404 for an absent lock", resp.StatusCode)
			}

			if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.done:
				if code := p.cmd.ProcessState.ExitCode(); sig != syscall.SIGKILL && code != 0 {
					t.Errorf("locald exited %d after %v, want a clean exit; stderr: %s", code, sig, p.Stderr())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("locald still running 10s after %v", sig)
			}
			select {
			case <-dynalite:
			case <-time.After(10 * time.Second):
				t.Fatalf("dynalite still running 10s after locald ended (%v): orphaned process", sig)
			}
			// Both processes are gone, and with them their listening sockets.
			for what, addr := range map[string]string{"locald": strings.TrimPrefix(p.URL, "http://"), "dynalite": p.Dynalite} {
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					t.Errorf("%s's address %s still accepts connections after it ended", what, addr)
				}
			}
		})
	}
}

// TestBusyAddressSaysHowToChooseAnother starts locald, as a second
// `make run` would, on an address another server holds: it must exit at
// once, before starting dynalite, and name ADDR= (and -addr) with the next
// port, not only "address already in use".
func TestBusyAddressSaysHowToChooseAnother(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().(*net.TCPAddr)
	next := fmt.Sprintf("127.0.0.1:%d", addr.Port+1)
	for _, tt := range []struct {
		name string
		args []string
		env  []string
	}{
		{name: "Flag", args: []string{"-addr", addr.String()}},
		{name: "Env", env: []string{"ADDR=" + addr.String()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tt.args...)
			cmd.Env = append(plainEnv(), tt.env...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Fatalf("exit code: got %d (%v), want 1; stderr %q", code, err, stderr.String())
			}
			for _, want := range []string{"address already in use", addr.String() + " is in use", "make run ADDR=" + next, "-addr " + next, "LOCKS_ENDPOINT=http://" + next} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr: got %q, want it to contain %q", stderr.String(), want)
				}
			}
			if strings.Contains(stdout.String(), "dynalite") {
				t.Errorf("stdout: got %q, want nothing started before the bind", stdout.String())
			}
		})
	}
}
