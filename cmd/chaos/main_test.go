package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runProxy(ctx, &out, addr, store.URL, faultproxy.Schedule{Seed: 1, Rates: faultproxy.Rates{faultproxy.Throttle: 1}})
	}()
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err = http.Post("http://"+addr+"/", "application/x-amz-json-1.0", strings.NewReader(`{}`))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
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
