package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/internal/verify/chaos"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// TestProxyMode runs the proxy standalone in front of a stand-in store:
// requests go through it with the schedule's faults, and the counts are
// printed when it stops.
func TestProxyMode(t *testing.T) {
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{}`)
	}))
	defer store.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := &firstLine{line: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- runProxy(ctx, out, "127.0.0.1:0", store.URL, faultproxy.Schedule{Seed: 1, Rates: faultproxy.Rates{faultproxy.Throttle: 1}})
	}()
	// The first line says where the proxy listens, once it does.
	var url string
	select {
	case line := <-out.line:
		url, _, _ = strings.Cut(strings.TrimPrefix(line, "faultproxy "), " ")
	case err := <-done:
		t.Fatalf("runProxy ended before it listened: %v", err)
	}
	resp, err := http.Post(url+"/", "application/x-amz-json-1.0", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "ThrottlingException") {
		t.Errorf("got %d %s, want 400 ThrottlingException", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "faultproxy: 1 requests, faults: throttle=1") {
		t.Errorf("got output %q, want the fault counts", out.String())
	}
}

// firstLine is runProxy's output: it keeps everything and sends the first
// complete line on line.
type firstLine struct {
	mu   sync.Mutex
	b    bytes.Buffer
	sent bool
	line chan string
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, _ := f.b.Write(p)
	if first, _, ok := strings.Cut(f.b.String(), "\n"); ok && !f.sent {
		f.sent = true
		f.line <- first
	}
	return n, nil
}

func (f *firstLine) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.b.String()
}

// TestCheckSaved checks saved histories again (-save, then -check): one
// whose only call got no answer (a violation), and one without calls.
func TestCheckSaved(t *testing.T) {
	start := time.Now()
	for _, tc := range []struct {
		name string
		ops  []chaos.Op
		code int
		out  string
	}{
		{"Dropped", []chaos.Op{{ID: 1, Client: 0, Owner: "c0", Kind: chaos.Acquire, Resource: "r", TTL: 1,
			Invoke: start, Return: start.Add(10 * time.Millisecond), Err: "EOF"}}, 1, "violations=1"},
		{"Empty", nil, 0, "violations=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "run.json")
			if err := saveHistory(file, &chaos.History{Start: start, Ops: tc.ops, Offsets: []time.Duration{0}}); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code, err := checkSaved(file, chaos.Options{}, &stdout, &stderr)
			if err != nil || code != tc.code || !strings.Contains(stdout.String(), tc.out) {
				t.Errorf("got %d, %v, %q; want %d and %q", code, err, stdout.String(), tc.code, tc.out)
			}
			if tc.code == 1 && !strings.Contains(stderr.String(), "VIOLATION") {
				t.Errorf("stderr %q lists no violation", stderr.String())
			}
		})
	}
	if _, err := checkSaved(filepath.Join(t.TempDir(), "none.json"), chaos.Options{}, io.Discard, io.Discard); err == nil {
		t.Error("a missing file checked")
	}
}
