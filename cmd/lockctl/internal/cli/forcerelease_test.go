package cli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/ft288/locks/cmd/lockctl/internal/cli"
)

// TestForceReleaseFlags: force-release sends --immediate and --token in
// the service's wire format, prints what it ended and when the lock is
// free, and on a stale token shows the lease that holds the lock and the
// command that would end it. The service's answers are canned (its force
// release with lock-delay is built in parallel).
func TestForceReleaseFlags(t *testing.T) {
	t.Parallel()
	const ended = `{"resource":"r","owner":"w1","fencing_token":7,"acquired_at":"2026-12-02T13:20:33.748Z","expires_at":"2026-12-02T13:21:03.748Z","lock_delay_seconds":60}`
	const current = `{"resource":"r","owner":"w2","fencing_token":8,"acquired_at":"2026-12-02T13:22:00.000Z","expires_at":"2026-12-02T13:22:30.000Z","principal":"arn:aws:iam::1:role/w2"}`
	tests := []struct {
		name       string
		args       []string // after "force-release r"
		status     int
		answer     string
		wantBody   map[string]any
		wantCode   int
		wantStdout string // regexp
		wantStderr []string
	}{
		{
			name: "KeepsLockDelay", args: []string{"--reason", "gone"}, status: 200,
			answer:     `{"ended":` + ended + `,"reason":"gone","immediate":false,"free_at":"2026-12-02T13:22:03Z"}`,
			wantBody:   map[string]any{"reason": "gone"},
			wantStdout: `^\{"resource":"r","owner":"w1","fencing_token":7,.*"lock_delay_seconds":60,"reason":"gone","immediate":false,"free_at":"2026-12-02T13:22:03Z"\}\n$`,
		},
		{
			name: "ImmediateWithToken", args: []string{"--reason", "host is dead", "--immediate", "--token", "7"}, status: 200,
			answer:     `{"ended":` + ended + `,"reason":"host is dead","immediate":true,"free_at":"2026-12-02T13:21:00Z"}`,
			wantBody:   map[string]any{"reason": "host is dead", "immediate": true, "fencing_token": float64(7)},
			wantStdout: `"immediate":true,"free_at":"2026-12-02T13:21:00Z"\}\n$`,
		},
		{
			name: "StaleToken", args: []string{"--reason", "host is dead", "--token", "7"}, status: 409,
			answer:   `{"type":"https://ft288.dev/problems/stale-token","title":"Stale fencing token","status":409,"detail":"Another lease holds the lock.","current":` + current + `}`,
			wantBody: map[string]any{"reason": "host is dead", "fencing_token": float64(7)},
			wantCode: cli.ExitConflict, wantStdout: `^$`,
			wantStderr: []string{`"owner":"w2","fencing_token":8`, `arn:aws:iam::1:role/w2`, `lockctl force-release r --reason 'host is dead' --token 8`},
		},
		{
			name: "NotFound", args: []string{"--reason", "gone", "--immediate"}, status: 404,
			answer:   `{"type":"https://ft288.dev/problems/not-found","title":"Lock not found","status":404}`,
			wantBody: map[string]any{"reason": "gone", "immediate": true},
			wantCode: cli.ExitNotFound, wantStderr: []string{"Lock not found"},
		},
		{name: "ErrNegativeToken", args: []string{"--reason", "gone", "--token", "-1"}, wantCode: cli.ExitUsage, wantStderr: []string{"--token -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got map[string]any
			var path string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				path = r.Method + " " + r.URL.Path
				_ = json.NewDecoder(r.Body).Decode(&got)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.answer))
			}))
			t.Cleanup(srv.Close)
			code, stdout, stderr := lockctl(t, srv.URL, append([]string{"force-release", "r"}, tt.args...)...)
			if code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			mu.Lock()
			defer mu.Unlock()
			if tt.wantBody != nil && (path != "DELETE /admin/locks/r" || !reflect.DeepEqual(got, tt.wantBody)) {
				t.Errorf("request: got %s %v, want DELETE /admin/locks/r %v", path, got, tt.wantBody)
			}
			if tt.wantStdout != "" && !regexp.MustCompile(tt.wantStdout).MatchString(stdout) {
				t.Errorf("stdout: got %q, want a match for %q", stdout, tt.wantStdout)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr: got %q, want it to contain %q", stderr, want)
				}
			}
		})
	}
}
