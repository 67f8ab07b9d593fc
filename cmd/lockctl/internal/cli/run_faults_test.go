//go:build unix

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// faultProxy is a proxy in front of the lock service. Before forwarding a
// request it asks fault, which may hold the request back (sleeping: the
// fault being injected, not a test's barrier) and may answer in the
// service's place; after is called once an answer has been written.
type faultProxy struct {
	URL string

	fault func(op string, body map[string]any) (answer *http.Response)
	after func(op string, status int)
}

// startFaultProxy starts a faultProxy to target.
func startFaultProxy(tb testing.TB, target string, p *faultProxy) *faultProxy {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(data, &body)
		op := "status"
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/renew"):
			op = "renew"
		case r.Method == http.MethodPost:
			op = "acquire"
		case r.Method == http.MethodDelete:
			op = "release"
		}
		resp := p.fault(op, body)
		if resp == nil {
			req, _ := http.NewRequestWithContext(context.Background(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(data))
			req.Header = r.Header.Clone()
			var err error
			if resp, err = http.DefaultClient.Do(req); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
		if p.after != nil {
			p.after(op, resp.StatusCode)
		}
	}))
	tb.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// result is how a lockctl run in the background ended.
type result struct {
	code           int
	stdout, stderr string
}

// runLockctl runs cli.Main against endpoint in the background, with an
// empty stdin; the result arrives on the returned channel.
func runLockctl(endpoint string, args ...string) <-chan result {
	return runLockctlIn(strings.NewReader(""), endpoint, args...)
}

// runLockctlIn is runLockctl with stdin (an *os.File reaches the command
// as it is).
func runLockctlIn(stdin io.Reader, endpoint string, args ...string) <-chan result {
	done := make(chan result, 1)
	go func() {
		// The command writes to them from exec's copying goroutines
		// while lockctl writes too.
		var out, errOut syncBuffer
		env := cli.Env{
			Stdin: stdin, Stdout: &out, Stderr: &errOut,
			Getenv: func(k string) string {
				if k == "LOCKS_ENDPOINT" {
					return endpoint
				}
				return ""
			},
			Environ: []string{"PATH=" + os.Getenv("PATH")},
		}
		code := cli.Main(args, env)
		done <- result{code, out.String(), errOut.String()}
	}()
	return done
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunGrantLateInRound is issue 14's reproduction of `lockctl run --ttl
// 10 --wait 30` losing a lease the service still held: the grant comes
// 0.6 s before the end of a round at the service, and the first renewal
// takes 700 ms. Rounds of min(20 s, ttl/2) = 5 s left 0.6 s before the
// local deadline (--grace 4 s + 1 s before the TTL), and lockctl stopped
// the command and exited 76; rounds of ⅔ × (ttl − margin) = 3 s leave a
// third of the lease's local validity, and the command runs to its end.
// lockctl tries first, so another owner holds the lock until the round:
// the try is answered held and the grant comes in the waiting round.
func TestRunGrantLateInRound(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	res := uniqueName(t)
	holder := hold(t, srv.URL, res, "holder")
	renewed := make(chan struct{})
	var once sync.Once
	var renewals, rounds atomic.Int32
	p := startFaultProxy(t, srv.URL, &faultProxy{
		fault: func(op string, body map[string]any) *http.Response {
			switch op {
			case "acquire":
				// The lock comes free 0.6 s before the round ends.
				if w, ok := body["wait_seconds"].(float64); ok && rounds.Add(1) == 1 {
					time.Sleep(time.Duration(w*float64(time.Second)) - 600*time.Millisecond)
					if err := holder.Release(context.Background()); err != nil {
						t.Errorf("the holder's release: %v", err)
					}
				}
			case "renew":
				if renewals.Add(1) == 1 {
					time.Sleep(700 * time.Millisecond)
				}
			}
			return nil
		},
		after: func(op string, status int) {
			if op == "renew" && status == http.StatusOK {
				once.Do(func() { close(renewed) })
			}
		},
	})
	// The command reads its stdin, a pipe: it finishes when the test
	// closes the pipe once the first renewal got through.
	stdin, finish, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	defer finish.Close()
	done := runLockctlIn(stdin, p.URL, "run", res, "--ttl", "10", "--wait", "30", "--",
		"sh", "-c", `read line; exit 0`)
	var r result
	select {
	case <-renewed:
		finish.Close()
		r = <-done
	case r = <-done:
		if r.code == cli.ExitOK {
			t.Fatalf("the command ended before the first renewal (stderr %q): the test did not run the case", r.stderr)
		}
	}
	if r.code != cli.ExitOK {
		t.Errorf("exit code: got %d, want 0 (stderr %q)", r.code, r.stderr)
	}
	if got := rounds.Load(); got != 1 {
		t.Errorf("waiting rounds: got %d, want 1 (the grant late in it)", got)
	}
}

// TestRunForceReleased: when an operator force releases the lease, lockctl
// run stops the command and says that an operator force released it.
func TestRunForceReleased(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	p := startFaultProxy(t, srv.URL, &faultProxy{
		fault: func(op string, _ map[string]any) *http.Response {
			if op != "renew" && op != "release" {
				return nil
			}
			// The service's answer to the holder of a force released lease.
			return &http.Response{
				StatusCode: http.StatusNotFound,
				Header:     http.Header{"Content-Type": {"application/problem+json"}},
				Body: io.NopCloser(strings.NewReader(`{"type":"https://ft288.dev/problems/not-found","title":"Lock not found",` +
					`"status":404,"detail":"An operator force released the lease.","force_released":true}`)),
			}
		},
	})
	r := <-runLockctl(p.URL, "run", uniqueName(t), "--ttl", "3", "--", "sleep", "30")
	if r.code != cli.ExitLeaseLost {
		t.Errorf("exit code: got %d, want %d (stderr %q)", r.code, cli.ExitLeaseLost, r.stderr)
	}
	if !strings.Contains(r.stderr, "force released by an operator") {
		t.Errorf("stderr: got %q, want it to say an operator force released the lease", r.stderr)
	}
}
