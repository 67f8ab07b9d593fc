package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// recorder is a proxy in front of the lock service that logs the requests
// lockctl sends, with the lease each acquire was granted, and holds back
// the answers to acquires by delay (the service has acted at once).
type recorder struct {
	URL   string
	delay time.Duration

	mu   sync.Mutex
	reqs []recorded
}

// recorded is one request that passed the recorder.
type recorded struct {
	Method    string
	Owner     string
	Token     int64
	LockDelay int64        // lock_delay_seconds sent
	Granted   *client.Lock // an acquire's grant
}

func startRecorder(tb testing.TB, target string, delay time.Duration) *recorder {
	tb.Helper()
	rec := &recorder{delay: delay}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in struct {
			Owner     string `json:"owner"`
			Token     int64  `json:"fencing_token"`
			LockDelay int64  `json:"lock_delay_seconds"`
		}
		_ = json.Unmarshal(body, &in)
		req, _ := http.NewRequestWithContext(context.Background(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		entry := recorded{Method: r.Method, Owner: in.Owner, Token: in.Token, LockDelay: in.LockDelay}
		acquire := r.Method == http.MethodPost && !strings.HasSuffix(r.URL.Path, "/renew")
		if acquire {
			var a struct {
				Lock *client.Lock `json:"lock"`
			}
			_ = json.Unmarshal(out, &a)
			entry.Granted = a.Lock
		}
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, entry)
		rec.mu.Unlock()
		if acquire {
			time.Sleep(rec.delay)
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	}))
	tb.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

func (r *recorder) log() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

// TestCleanUpAfterFailedAcquire: lockctl releases a lease it was granted
// after it stopped waiting (with the grant's owner and token), and sends
// no release at all after a clean "held" answer.
func TestCleanUpAfterFailedAcquire(t *testing.T) {
	t.Parallel()
	const late = 600 * time.Millisecond // answers come after --wait 200ms ran out
	tests := []struct {
		name     string
		cmd      string // acquire or run
		holder   bool
		delay    time.Duration
		args     []string // after the command and RESOURCE
		wantCode int
		// wantRelease: one release of the late grant, by its owner and
		// token; else no release at all.
		wantRelease bool
	}{
		{name: "RunHeld", cmd: "run", holder: true, args: []string{"--", "sh", "-c", "echo ran"}, wantCode: cli.ExitHeld},
		{name: "RunWaitRunsOut", cmd: "run", holder: true, args: []string{"--wait", "2s", "--", "sh", "-c", "echo ran"}, wantCode: cli.ExitHeld},
		{name: "AcquireHeld", cmd: "acquire", holder: true, wantCode: cli.ExitHeld},
		{name: "AcquireWaitLateGrant", cmd: "acquire", delay: late, args: []string{"--wait", "200ms"}, wantCode: cli.ExitError, wantRelease: true},
		{name: "AcquireWaitLateGrantChosenOwner", cmd: "acquire", delay: late, args: []string{"--wait", "200ms", "--owner", "w1"}, wantCode: cli.ExitError, wantRelease: true},
		{name: "RunWaitLateGrant", cmd: "run", delay: late, args: []string{"--wait", "200ms", "--", "sh", "-c", "echo ran"}, wantCode: cli.ExitError, wantRelease: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			rec := startRecorder(t, srv.URL, tt.delay)
			res := uniqueName(t)
			if tt.holder {
				hold(t, srv.URL, res, "holder")
			}
			code, stdout, stderr := lockctl(t, rec.URL, append([]string{tt.cmd, res}, tt.args...)...)
			if code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			if strings.Contains(stdout, "ran") {
				t.Errorf("stdout: got %q, want the command not run", stdout)
			}
			var grant *client.Lock
			var releases []recorded
			for _, r := range rec.log() {
				if r.Granted != nil {
					grant = r.Granted
				}
				if r.Method == http.MethodDelete {
					releases = append(releases, r)
				}
			}
			if !tt.wantRelease {
				if len(releases) != 0 {
					t.Errorf("releases: got %+v, want none after a clean answer", releases)
				}
				return
			}
			if grant == nil {
				t.Fatal("the service granted nothing")
			}
			if len(releases) != 1 || releases[0].Owner != grant.Owner || releases[0].Token != grant.FencingToken {
				t.Errorf("releases: got %+v, want one by owner %q with token %d", releases, grant.Owner, grant.FencingToken)
			}
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.Status(context.Background(), res); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("status after lockctl exited: got %+v, %v, want no lease left behind", st, err)
			}
		})
	}
}

// TestRunSendsLockDelay: run --lock-delay asks for the lease's lock-delay,
// and the service grants it.
func TestRunSendsLockDelay(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	rec := startRecorder(t, srv.URL, 0)
	code, _, stderr := lockctl(t, rec.URL, "run", uniqueName(t), "--lock-delay", "45s", "--", "true")
	if code != cli.ExitOK {
		t.Fatalf("exit code: got %d, want 0 (stderr %q)", code, stderr)
	}
	var grants []recorded
	for _, r := range rec.log() {
		if r.Granted != nil {
			grants = append(grants, r)
		}
	}
	if len(grants) != 1 || grants[0].LockDelay != 45 || grants[0].Granted.LockDelaySeconds != 45 {
		t.Errorf("grants: got %+v, want one asked for and granted with lock_delay_seconds 45", grants)
	}
}
