package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// OldStack is a proxy in front of a runner that answers as a stack from
// before the waiting routes (issue 21) did, for version-skew tests of new
// clients: API Gateway's 404 {"message":"Not Found"} on POST …/wait, and a
// try-acquire that carries wait_seconds > 0 served by the runner's waiting
// route (the try route waited then). Everything else passes through.
type OldStack struct {
	// URL is the proxy's base URL.
	URL string

	mu   sync.Mutex
	seen []string // "METHOD PATH" of each acquire, as the client sent it
}

// StartOldStack starts an OldStack in front of target, closed when tb ends.
func StartOldStack(tb testing.TB, target string) *OldStack {
	tb.Helper()
	o := &OldStack{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { o.serve(tb, target, w, r) }))
	tb.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

// Acquires returns the acquires the proxy received so far, as "POST PATH"
// (the escaped path), each marked " wait_seconds" when it carried one.
func (o *OldStack) Acquires() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// acquireRoute sorts an escaped path: "try" for /locks/{r} and
// /semaphores/{n}, "wait" for their …/wait, "" for any other.
func acquireRoute(path string) string {
	parts := strings.Split(path, "/")
	if len(parts) < 3 || parts[0] != "" || (parts[1] != "locks" && parts[1] != "semaphores") || parts[2] == "" {
		return ""
	}
	switch {
	case len(parts) == 3:
		return "try"
	case len(parts) == 4 && parts[3] == "wait":
		return "wait"
	}
	return ""
}

func (o *OldStack) serve(tb testing.TB, target string, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	path := r.URL.EscapedPath()
	route := ""
	if r.Method == http.MethodPost {
		route = acquireRoute(path)
	}
	var fields struct {
		Wait json.Number `json:"wait_seconds"`
	}
	_ = json.Unmarshal(body, &fields)
	waits := fields.Wait != "" && fields.Wait != "0"
	if route != "" {
		rec := "POST " + path
		if waits {
			rec += " wait_seconds"
		}
		o.mu.Lock()
		o.seen = append(o.seen, rec)
		o.mu.Unlock()
	}
	switch {
	case route == "wait":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"Not Found"}`)
		return
	case route == "try" && waits:
		path += "/wait"
	}
	u := target + path
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	// A client that gives up must not cancel the runner's request: the
	// old stack's Lambda did not notice either, and dynalite dies on a
	// request aborted mid-flight.
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, u, bytes.NewReader(body))
	if err != nil {
		tb.Errorf("old stack: %v", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
