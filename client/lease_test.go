package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/local/localtest"
)

func TestKeepAliveHoldsLease(t *testing.T) {
	t.Parallel()
	srv := localtest.Start(t, localtest.Options{})
	c := newClient(t, srv.URL)
	res := resourceName(t)
	l := acquire(t, c, res, "w1", 2*time.Second)
	firstExpiry, firstDeadline := l.ExpiresAt(), l.Deadline()
	l.KeepAlive(context.Background())

	// Past the TTL: without renewals the lease would be gone.
	select {
	case <-l.Done():
		t.Fatalf("lease lost while kept alive: %v", l.Err())
	case <-time.After(2500 * time.Millisecond):
	}
	got, err := c.Status(context.Background(), res)
	if err != nil || got.FencingToken != l.FencingToken() {
		t.Fatalf("Status: got %+v, %v, want the lease with token %d", got, err, l.FencingToken())
	}
	if !l.ExpiresAt().After(firstExpiry) || !l.Deadline().After(firstDeadline) {
		t.Errorf("after renewals: got expiry %s and deadline %s, want later than %s and %s",
			l.ExpiresAt(), l.Deadline(), firstExpiry, firstDeadline)
	}
}

// TestKeepAliveStops is not parallel: it looks for keep-alive goroutines in
// the whole process, so no other lease may be kept alive meanwhile.
func TestKeepAliveStops(t *testing.T) {
	tests := []struct {
		name    string
		end     func(t *testing.T, clock *localtest.Clock, l *client.Lease)
		wantErr error
	}{
		{
			name: "Released",
			end: func(t *testing.T, clock *localtest.Clock, l *client.Lease) {
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
			},
			wantErr: client.ErrReleased,
		},
		{
			name: "Lost",
			end: func(t *testing.T, clock *localtest.Clock, l *client.Lease) {
				clock.Advance(time.Hour)
				waitDone(t, l, 3*time.Second)
			},
			wantErr: client.ErrNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := localtest.NewClock()
			srv := localtest.Start(t, localtest.Options{Now: clock.Now})
			l := acquire(t, newClient(t, srv.URL), resourceName(t), "w1", 3*time.Second)
			l.KeepAlive(context.Background())
			l.KeepAlive(context.Background()) // a second call does nothing
			if n := keepAlives(); n != 1 {
				t.Fatalf("keep-alive goroutines: got %d, want 1", n)
			}
			tt.end(t, clock, l)
			if !errors.Is(l.Err(), tt.wantErr) {
				t.Errorf("Err: got %v, want %v", l.Err(), tt.wantErr)
			}
			// The goroutine has signalled its end; give it a moment to
			// leave the stack.
			for start := time.Now(); keepAlives() != 0; time.Sleep(10 * time.Millisecond) {
				if time.Since(start) > time.Second {
					t.Fatalf("keep-alive goroutines: got %d a second after the lease ended, want 0", keepAlives())
				}
			}
		})
	}
}

// keepAlives counts the goroutines that Lease.KeepAlive started and that
// have not ended.
func keepAlives() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "created by github.com/ft288/locks/client.(*Lease).KeepAlive ")
}

func TestReleaseSendsFencingToken(t *testing.T) {
	t.Parallel()
	srv := localtest.Start(t, localtest.Options{})
	c := newClient(t, srv.URL)
	res := resourceName(t)
	old := acquire(t, c, res, "w1", 30*time.Second)
	newer := acquire(t, c, res, "w1", 30*time.Second)
	if err := old.Release(context.Background()); !errors.Is(err, client.ErrStaleToken) {
		t.Errorf("Release of the replaced lease: got %v, want ErrStaleToken", err)
	}
	if got, err := c.Status(context.Background(), res); err != nil || got.FencingToken != newer.FencingToken() {
		t.Errorf("Status: got %+v, %v, want the newer lease (token %d) still live", got, err, newer.FencingToken())
	}
}

func TestLeaseLostWhenRenewalRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// change makes the next renewal fail.
		change    func(t *testing.T, c *client.Client, clock *localtest.Clock, l *client.Lease)
		keepAlive bool // false: call Renew once
		wantCause error
	}{
		{
			name: "TakenOverAfterExpiry",
			change: func(t *testing.T, c *client.Client, clock *localtest.Clock, l *client.Lease) {
				clock.Advance(time.Hour)
				acquire(t, c, l.Resource(), "w2", 30*time.Second)
			},
			keepAlive: true, wantCause: client.ErrForbidden,
		},
		{
			name: "Expired",
			change: func(t *testing.T, c *client.Client, clock *localtest.Clock, l *client.Lease) {
				clock.Advance(time.Hour)
			},
			keepAlive: true, wantCause: client.ErrNotFound,
		},
		{
			name: "ReplacedBySameOwner",
			change: func(t *testing.T, c *client.Client, clock *localtest.Clock, l *client.Lease) {
				acquire(t, c, l.Resource(), l.Owner(), 30*time.Second)
			},
			keepAlive: true, wantCause: client.ErrStaleToken,
		},
		{
			name: "ManualRenewTakenOver",
			change: func(t *testing.T, c *client.Client, clock *localtest.Clock, l *client.Lease) {
				clock.Advance(time.Hour)
				acquire(t, c, l.Resource(), "w2", 30*time.Second)
			},
			wantCause: client.ErrForbidden,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := localtest.NewClock()
			srv := localtest.Start(t, localtest.Options{Now: clock.Now})
			c := newClient(t, srv.URL)
			l := acquire(t, c, resourceName(t), "w1", 3*time.Second)
			tt.change(t, c, clock, l)
			if tt.keepAlive {
				l.KeepAlive(context.Background())
				if lost := waitDone(t, l, 5*time.Second); !lost.Before(l.Deadline()) {
					t.Errorf("lease ended at %s, want before its local deadline %s (by the refused renewal)", lost, l.Deadline())
				}
			} else {
				err := l.Renew(context.Background())
				if !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, tt.wantCause) {
					t.Errorf("Renew: got %v, want an error matching ErrLeaseLost and %v", err, tt.wantCause)
				}
				waitDone(t, l, time.Second)
			}
			cause := context.Cause(l.Context())
			var lost *client.LeaseLostError
			if !errors.As(cause, &lost) || !errors.Is(cause, client.ErrLeaseLost) || !errors.Is(cause, tt.wantCause) {
				t.Fatalf("cause: got %v, want a *LeaseLostError matching ErrLeaseLost and %v", cause, tt.wantCause)
			}
			if lost.Resource != l.Resource() || lost.FencingToken != l.FencingToken() {
				t.Errorf("LeaseLostError: got (%q, %d), want (%q, %d)", lost.Resource, lost.FencingToken, l.Resource(), l.FencingToken())
			}
			if l.Err() != cause {
				t.Errorf("Err: got %v, want the context's cause %v", l.Err(), cause)
			}
		})
	}
}

// flakyProxy forwards to the lock service until it has passed okRenewals
// successful renewals, then fails every request the way fail does. stop is
// closed when the test ends, before the proxy is closed.
type flakyProxy struct {
	URL        string
	okRenewals int32

	mu       sync.Mutex
	renewals int32
	lastOK   time.Time // when the last successful renewal arrived
	failures int32
}

func startFlakyProxy(tb testing.TB, target string, okRenewals int32, fail func(w http.ResponseWriter, r *http.Request, stop <-chan struct{})) *flakyProxy {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &flakyProxy{okRenewals: okRenewals}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		isRenew := strings.HasSuffix(r.URL.Path, "/renew")
		if p.renewals >= p.okRenewals {
			p.failures++
			p.mu.Unlock()
			// Read the body first: only then does the server notice the
			// client hanging up, and cancel r's context.
			_, _ = io.Copy(io.Discard, r.Body)
			fail(w, r, stop)
			return
		}
		arrived := time.Now()
		if isRenew {
			p.renewals++
		}
		p.mu.Unlock()
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if isRenew && rec.Code == http.StatusOK {
			p.mu.Lock()
			p.lastOK = arrived
			p.mu.Unlock()
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	tb.Cleanup(srv.Close)
	tb.Cleanup(func() { close(stop) }) // runs first: frees hanging handlers
	p.URL = srv.URL
	return p
}

func (p *flakyProxy) state() (lastOK time.Time, failures int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastOK, p.failures
}

func TestLeaseLostWhenServiceUnreachable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		fail         func(w http.ResponseWriter, r *http.Request, stop <-chan struct{})
		wantFailures int32
	}{
		{
			name: "Unavailable",
			fail: func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"type":"https://ft288.dev/problems/service-unavailable","title":"Lock store unavailable","status":503}`))
			},
			wantFailures: 3,
		},
		{
			name: "Hanging",
			fail: func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
				select {
				case <-r.Context().Done():
				case <-stop:
				}
			},
			wantFailures: 1,
		},
	}
	const ttl, margin = 2 * time.Second, 500 * time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := localtest.Start(t, localtest.Options{})
			proxy := startFlakyProxy(t, srv.URL, 1, tt.fail)
			c := newClient(t, proxy.URL, client.WithLeaseMargin(margin))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			l, err := c.TryAcquire(ctx, resourceName(t), "w1", ttl)
			if err != nil {
				t.Fatalf("TryAcquire: %v", err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = l.Release(ctx)
			}()
			l.KeepAlive(ctx)

			lostAt := waitDone(t, l, 5*time.Second)
			lastOK, failures := proxy.state()
			if lastOK.IsZero() {
				t.Fatal("no renewal succeeded before the proxy started failing")
			}
			if !errors.Is(l.Err(), client.ErrLeaseLost) || !errors.Is(l.Err(), client.ErrLeaseExpired) {
				t.Errorf("cause: got %v, want ErrLeaseLost with ErrLeaseExpired", l.Err())
			}
			// The service's lease lasts at least until lastOK + ttl; the
			// client must have let go before then.
			if limit := lastOK.Add(ttl); !lostAt.Before(limit) {
				t.Errorf("lease ended at %s, want before %s (last successful renewal + ttl)", lostAt.Format(time.StampMilli), limit.Format(time.StampMilli))
			}
			// ...but not much before its local deadline: failures are retried.
			if early := lastOK.Add(ttl - margin - 300*time.Millisecond); lostAt.Before(early) {
				t.Errorf("lease ended at %s, want not before %s: renewals should be retried until the deadline", lostAt.Format(time.StampMilli), early.Format(time.StampMilli))
			}
			if failures < tt.wantFailures {
				t.Errorf("failed renewal attempts: got %d, want at least %d", failures, tt.wantFailures)
			}
		})
	}
}
