package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// rwStub is a scripted read/write lock service: acquires are held until
// grantAt, the waiting route answers refuseWait, and every request's path
// and body are recorded.
type rwStub struct {
	mu         sync.Mutex
	grantAt    time.Time
	refuseWait func() *http.Response // nil: the waiting route answers held at once
	calls      []rwCall
}

type rwCall struct {
	method, path string
	body         map[string]any
}

func (s *rwStub) RoundTrip(r *http.Request) (*http.Response, error) {
	var body map[string]any
	if r.Body != nil {
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, rwCall{r.Method, r.URL.Path, body})
	mode := "read"
	if strings.Contains(r.URL.Path, "/write") {
		mode = "write"
	}
	lease := map[string]any{"name": "cache", "mode": mode, "owner": body["owner"], "fencing_token": 7,
		"acquired_at": time.Now().Format(time.RFC3339Nano), "expires_at": time.Now().Add(time.Minute).Format(time.RFC3339Nano)}
	if mode == "read" {
		lease["slot"] = 3
	}
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/wait") && s.refuseWait != nil:
		return s.refuseWait(), nil
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/renew"):
		if m := body["mode"].(string); m == "read" {
			lease["mode"] = m
			lease["slot"] = 3
		} else {
			lease["mode"] = m
			delete(lease, "slot")
		}
		return jsonResponse(200, nil, map[string]any{"renewed": true, "lease": lease}), nil
	case r.Method == http.MethodPost && time.Now().Before(s.grantAt):
		return jsonResponse(200, nil, map[string]any{"acquired": false, "name": "cache"}), nil
	case r.Method == http.MethodPost:
		return jsonResponse(200, nil, map[string]any{"acquired": true, "lease": lease}), nil
	case r.Method == http.MethodDelete:
		return &http.Response{StatusCode: 204, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
	}
	return problemResponse(404, "not-found"), nil
}

func (s *rwStub) paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.calls {
		out = append(out, c.method+" "+c.path)
	}
	return out
}

// TestRWAcquireFallsBackToPolling: a read/write acquire tries first, then
// waits on …/read/wait; a service that refuses wait_seconds (422) or a
// stack without the waiting route (API Gateway's 404) is polled on the try
// route from then on, and the client remembers it. Read/write locks never
// send wait_seconds to the try route.
func TestRWAcquireFallsBackToPolling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		refuse func() *http.Response
	}{
		{"Refuses422", func() *http.Response {
			resp := jsonResponse(422, nil, map[string]any{"type": client.ProblemTypeBase + "validation-failed", "status": 422,
				"errors": []map[string]string{{"field": "wait_seconds", "detail": "not supported"}}})
			resp.Header.Set("Content-Type", "application/problem+json")
			return resp
		}},
		{"NoWaitRoute404", func() *http.Response { return gatewayResponse(404, "Not Found") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := &rwStub{grantAt: time.Now().Add(time.Second), refuseWait: tt.refuse}
				c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: s}),
					client.WithBackoff(10*time.Millisecond, 200*time.Millisecond), client.WithoutKeepAlive())
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, err := c.AcquireRead(ctx, "cache", "r1", 30*time.Second)
				if err != nil {
					t.Fatalf("AcquireRead: %v", err)
				}
				if l.Slot() != 3 || l.Mode() != client.ReadMode || l.FencingToken() != 7 {
					t.Errorf("lease: slot %d, mode %q, token %d; want 3, read, 7", l.Slot(), l.Mode(), l.FencingToken())
				}
				p := s.paths()
				if len(p) < 4 || p[0] != "POST /rwlocks/cache/read" || p[1] != "POST /rwlocks/cache/read/wait" ||
					slices.Contains(p[2:], "POST /rwlocks/cache/read/wait") {
					t.Errorf("requests: got %v, want a try, one refused wait, then polls on the try route", p)
				}
				for _, call := range s.calls {
					if _, ok := call.body["wait_seconds"]; ok && !strings.HasSuffix(call.path, "/wait") {
						t.Errorf("wait_seconds sent to %s", call.path)
					}
				}
				n := len(s.paths())
				if _, err := c.AcquireWrite(ctx, "cache", "w1", 30*time.Second); err != nil {
					t.Fatalf("AcquireWrite: %v", err)
				}
				if got := s.paths()[n:]; !slices.Equal(got, []string{"POST /rwlocks/cache/write"}) {
					t.Errorf("second acquire: got %v, want one try", got)
				}
			})
		})
	}
}

// TestRWRenewReleaseBodies: an RWLease renews and releases by mode, slot
// (a reader's only) and token.
func TestRWRenewReleaseBodies(t *testing.T) {
	t.Parallel()
	for _, mode := range []client.RWMode{client.ReadMode, client.WriteMode} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			s := &rwStub{}
			c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: s}), client.WithoutKeepAlive())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			try := c.TryAcquireRead
			if mode == client.WriteMode {
				try = c.TryAcquireWrite
			}
			l, err := try(ctx, "cache", "o1", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Renew(ctx); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			want := map[string]any{"owner": "o1", "mode": string(mode), "fencing_token": 7.0}
			if mode == client.ReadMode {
				want["slot"] = 3.0
			}
			renew, release := s.calls[1], s.calls[2]
			if renew.path != "/rwlocks/cache/renew" || renew.body["ttl_seconds"] != 30.0 {
				t.Errorf("renew: got %s %v", renew.path, renew.body)
			}
			delete(renew.body, "ttl_seconds")
			for _, got := range []rwCall{renew, release} {
				if len(got.body) != len(want) {
					t.Errorf("%s %s: got %v, want %v", got.method, got.path, got.body, want)
				}
				for k, v := range want {
					if got.body[k] != v {
						t.Errorf("%s %s: %s = %v, want %v", got.method, got.path, k, got.body[k], v)
					}
				}
			}
			if release.method != http.MethodDelete || release.path != "/rwlocks/cache" {
				t.Errorf("release: got %s %s", release.method, release.path)
			}
			if !errors.Is(l.Check(), client.ErrReleased) {
				t.Errorf("Check after Release: %v", l.Check())
			}
		})
	}
}

// TestRWValidation: a bad mode or slot is refused before it is sent.
func TestRWValidation(t *testing.T) {
	t.Parallel()
	s := &rwStub{}
	c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: s}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, err := range map[string]error{
		"BadMode":     c.ReleaseRW(ctx, "cache", "o", "upgrade", 0, 0),
		"SlotTooHigh": c.ReleaseRW(ctx, "cache", "o", client.ReadMode, client.MaxReaders, 0),
		"NegSlot":     func() error { _, err := c.RenewRW(ctx, "cache", "o", client.ReadMode, -1, 0, 0); return err }(),
		"NameSlash":   func() error { _, err := c.TryAcquireRead(ctx, "a/b", "o", 0); return err }(),
	} {
		if !errors.Is(err, client.ErrValidation) {
			t.Errorf("%s: got %v, want ErrValidation", name, err)
		}
	}
	if len(s.calls) != 0 {
		t.Errorf("sent %v, want nothing", s.paths())
	}
}
