package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// TestAdminArgsBeforeSending: invalid arguments are ErrValidation without a
// request.
func TestAdminArgsBeforeSending(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	for name, err := range map[string]error{
		"PrefixSlash": func() error { _, err := c.List(ctx, "a/b", client.ListOptions{}); return err }(),
		"LimitHigh":   func() error { _, err := c.List(ctx, "", client.ListOptions{Limit: 1001}); return err }(),
		"NoReason":    func() error { _, err := c.ForceRelease(ctx, "r", " "); return err }(),
		"NegToken": func() error {
			_, err := c.ForceRelease(ctx, "r", "why", client.ForceReleaseOptions{FencingToken: -1})
			return err
		}(),
		"TwoOptions": func() error {
			_, err := c.ForceRelease(ctx, "r", "why", client.ForceReleaseOptions{}, client.ForceReleaseOptions{})
			return err
		}(),
		"NoResource":  func() error { _, err := c.ForceRelease(ctx, "", "why"); return err }(),
		"SlashInName": func() error { _, err := c.ForceRelease(ctx, "a/b", "why"); return err }(),
	} {
		if !errors.Is(err, client.ErrValidation) {
			t.Errorf("%s: got %v, want ErrValidation", name, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("got %d requests, want none", n)
	}
}

// TestForceReleaseWire: ForceRelease sends its options as the service's
// wire format has them and reads the answer, the 409 that shows the lease
// blocking the lock, and a service's answer from before free_at.
func TestForceReleaseWire(t *testing.T) {
	t.Parallel()
	const ended = `{"resource":"r","owner":"w1","fencing_token":7,"acquired_at":"2026-12-02T13:20:33.748Z","expires_at":"2026-12-02T13:21:03.748Z","lock_delay_seconds":60,"principal":"arn:aws:iam::1:role/w"}`
	freeAt := time.Date(2026, 12, 2, 13, 21, 20, 0, time.UTC)
	tests := []struct {
		name          string
		opts          []client.ForceReleaseOptions
		status        int
		answer        string
		wantBody      map[string]any
		wantErr       error
		wantImmediate bool
		wantFreeAt    time.Time
		wantCurrent   int64 // the token of the lease the 409 shows
	}{
		{
			name: "KeepsLockDelay", status: 200,
			answer:   `{"ended":` + ended + `,"reason":"gone","immediate":false,"free_at":"2026-12-02T13:21:20Z"}`,
			wantBody: map[string]any{"reason": "gone"}, wantFreeAt: freeAt,
		},
		{
			name: "ImmediateWithToken", opts: []client.ForceReleaseOptions{{Immediate: true, FencingToken: 7}}, status: 200,
			answer:   `{"ended":` + ended + `,"reason":"gone","immediate":true,"free_at":"2026-12-02T13:21:20Z"}`,
			wantBody: map[string]any{"reason": "gone", "immediate": true, "fencing_token": float64(7)}, wantImmediate: true, wantFreeAt: freeAt,
		},
		{
			name: "OlderService", status: 200,
			answer:   `{"ended":` + ended + `,"reason":"gone"}`,
			wantBody: map[string]any{"reason": "gone"},
		},
		{
			name: "StaleToken", opts: []client.ForceReleaseOptions{{FencingToken: 6}}, status: 409,
			answer:   `{"type":"https://ft288.dev/problems/stale-token","title":"Stale fencing token","status":409,"detail":"d","current":` + ended + `}`,
			wantBody: map[string]any{"reason": "gone", "fencing_token": float64(6)}, wantErr: client.ErrStaleToken, wantCurrent: 7,
		},
		{
			name: "NotFound", status: 404,
			answer:   `{"type":"https://ft288.dev/problems/not-found","title":"Lock not found","status":404}`,
			wantBody: map[string]any{"reason": "gone"}, wantErr: client.ErrNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got map[string]any
			var method, path string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				method, path = r.Method, r.URL.Path
				_ = json.NewDecoder(r.Body).Decode(&got)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.answer))
			}))
			t.Cleanup(srv.Close)
			res, err := newClient(t, srv.URL).ForceRelease(context.Background(), "r", "gone", tt.opts...)
			if method != http.MethodDelete || path != "/admin/locks/r" || !reflect.DeepEqual(got, tt.wantBody) {
				t.Errorf("request: got %s %s %v, want DELETE /admin/locks/r %v", method, path, got, tt.wantBody)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				var p *client.ProblemError
				switch {
				case tt.wantCurrent == 0:
				case !errors.As(err, &p) || p.Current == nil:
					t.Errorf("got %v, want a *ProblemError with the current lease", err)
				case p.Current.FencingToken != tt.wantCurrent || p.Current.Principal == "":
					t.Errorf("current lease: got %+v, want token %d with its principal", *p.Current, tt.wantCurrent)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Owner != "w1" || res.FencingToken != 7 || res.LockDelaySeconds != 60 || res.Principal == "" || res.Reason != "gone" ||
				res.Immediate != tt.wantImmediate || !res.FreeAt.Equal(tt.wantFreeAt) {
				t.Errorf("got %+v, want the ended lease (w1, token 7), immediate %t, free at %s", res, tt.wantImmediate, tt.wantFreeAt)
			}
		})
	}
}

// TestListingQueue: a listing's queue decodes in order, a lease without
// one has a nil Queue, and the admin types stay comparable, as they were
// before listings showed queues (issue 23: nothing users hold breaks).
func TestListingQueue(t *testing.T) {
	var page struct {
		Locks   []client.AdminLock   `json:"locks"`
		Permits []client.AdminPermit `json:"permits"`
	}
	body := `{"locks":[{"resource":"a","owner":"h","fencing_token":1,"acquired_at":"2026-12-06T00:00:00Z","expires_at":"2026-12-06T00:00:30Z",
		"queue":[{"owner":"w1","joined_at":"2026-12-06T00:00:01Z","until":"2026-12-06T00:00:21Z"},{"owner":"w2","principal":"p","until":"2026-12-06T00:00:22Z"}]},
		{"resource":"b","owner":"h","fencing_token":2,"acquired_at":"2026-12-06T00:00:00Z","expires_at":"2026-12-06T00:00:30Z"}],
		"permits":[{"name":"s","slot":0,"owner":"h","fencing_token":3,"acquired_at":"2026-12-06T00:00:00Z","expires_at":"2026-12-06T00:00:30Z","permits":2,
		"queue":[{"owner":"w3","until":"2026-12-06T00:00:23Z"}]}]}`
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	q := page.Locks[0].Queue
	if q == nil || len(*q) != 2 || (*q)[0].Owner != "w1" || (*q)[1].Owner != "w2" || (*q)[1].Principal != "p" ||
		!(*q)[1].JoinedAt.IsZero() || (*q)[0].JoinedAt.IsZero() {
		t.Errorf("lock a's queue: got %+v, want w1 (joined) then w2 (principal p, no joined_at)", q)
	}
	if page.Locks[1].Queue != nil {
		t.Errorf("lock b: got queue %+v, want nil", *page.Locks[1].Queue)
	}
	if q := page.Permits[0].Queue; q == nil || len(*q) != 1 || (*q)[0].Owner != "w3" {
		t.Errorf("semaphore s's queue: got %+v, want w3", q)
	}
	// Comparable, as before: these compile only if they are.
	_ = page.Locks[1] == client.AdminLock{}
	_ = page.Permits[0] == client.AdminPermit{}
	_ = client.ForceReleased{} == client.ForceReleased{}
	_ = client.PermitForceReleased{} == client.PermitForceReleased{}
}
