package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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
