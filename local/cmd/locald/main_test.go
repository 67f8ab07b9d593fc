package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalsStopEverything builds locald, serves on a free port, and checks
// that SIGTERM to its process group (what `make run` gets on Ctrl-C or
// SIGTERM) stops it and dynalite and frees both ports — and that even a
// SIGKILLed locald leaves no dynalite behind.
func TestSignalsStopEverything(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			addr := freeAddr(t)
			cmd := exec.Command(bin, "-addr", addr)
			cmd.Env = append(os.Environ(), "DYNAMODB_ENDPOINT=", "TABLE_NAME=locks")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			dyn := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					var line struct{ Msg, Endpoint string }
					if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "started in-memory dynalite" {
						dyn <- strings.TrimPrefix(line.Endpoint, "http://")
					}
				}
				io.Copy(io.Discard, stdout)
			}()
			var dynAddr string
			select {
			case dynAddr = <-dyn:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatal("locald did not start dynalite")
			}
			waitServing(t, "http://"+addr+"/locks/x")

			if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if sig != syscall.SIGKILL && err != nil {
					t.Errorf("locald exited with %v after %v, want a clean exit", err, sig)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("locald still running 10s after %v", sig)
			}
			waitClosed(t, addr, "locald")
			waitClosed(t, dynAddr, "dynalite")
		})
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitServing(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("GET %s: got %d, want 404 for an absent lock", url, resp.StatusCode)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never answered", url)
}

// waitClosed waits until nothing accepts connections on addr.
func waitClosed(t *testing.T, addr, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s still listens on %s: orphaned process", what, addr)
}
