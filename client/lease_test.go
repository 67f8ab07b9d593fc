package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// The lease tests run in synctest bubbles against fakeAPI: the clock is
// fake, requests take no time, so every renewal and every loss happens at
// an exact instant. With a TTL of 3 s the renewals are due every 1 s and
// the local deadline is 2.7 s (margin min(ttl/10, 1s)) after the request
// that granted or renewed the lease.
const (
	ttl3s     = 3 * time.Second
	interval  = time.Second
	deadline3 = 2700 * time.Millisecond
)

// at returns how long after the bubble's start t is.
func at(t time.Time) time.Duration { return t.Sub(bubbleStart) }

// fakeLease takes resource for owner from c or fails the test.
func fakeLease(tb testing.TB, c *client.Client, resource, owner string) *client.Lease {
	tb.Helper()
	l, err := c.TryAcquire(context.Background(), resource, owner, ttl3s)
	if err != nil {
		tb.Fatalf("TryAcquire(%q, %q): %v", resource, owner, err)
	}
	return l
}

// callTimes returns when each call was received, from the bubble's start.
func callTimes(calls []call) []time.Duration {
	out := make([]time.Duration, len(calls))
	for i, c := range calls {
		out[i] = at(c.At)
	}
	return out
}

// seconds returns the durations of the whole seconds from first to last.
func seconds(first, last int) []time.Duration {
	var out []time.Duration
	for s := first; s <= last; s++ {
		out = append(out, time.Duration(s)*time.Second)
	}
	return out
}

func TestKeepAliveSchedule(t *testing.T) {
	t.Parallel()
	type step struct {
		at time.Duration
		do func(t *testing.T, l *client.Lease)
	}
	keepAlive := func(t *testing.T, l *client.Lease) { l.KeepAlive(context.Background()) }
	renew := func(t *testing.T, l *client.Lease) {
		if err := l.Renew(context.Background()); err != nil {
			t.Errorf("Renew: %v", err)
		}
	}
	tests := []struct {
		name  string
		opts  []client.Option
		steps []step
		// wantRenewals are the times of the renewals sent in the first 10 s.
		wantRenewals []time.Duration
		wantLostAt   time.Duration // 0: held after 10 s
	}{
		{
			name:         "DefaultFromGrant",
			wantRenewals: seconds(1, 10),
		},
		{
			// The reproduction: KeepAlive at 2 s must not wait
			// until 3 s, past the 2.7 s deadline: the renewal is overdue and
			// goes out at once.
			name:         "KeepAliveCalledLate",
			opts:         []client.Option{client.WithoutKeepAlive()},
			steps:        []step{{2 * time.Second, keepAlive}},
			wantRenewals: seconds(2, 10),
		},
		{
			name:         "KeepAliveCalledEarly",
			opts:         []client.Option{client.WithoutKeepAlive()},
			steps:        []step{{500 * time.Millisecond, keepAlive}},
			wantRenewals: seconds(1, 10),
		},
		{
			name:         "KeepAliveCalledAgain",
			steps:        []step{{500 * time.Millisecond, keepAlive}, {1500 * time.Millisecond, keepAlive}},
			wantRenewals: seconds(1, 10),
		},
		{
			// The timer ends the lease DeliveryAllowance before its
			// local deadline.
			name:       "WithoutKeepAlive",
			opts:       []client.Option{client.WithoutKeepAlive()},
			wantLostAt: deadline3 - client.DeliveryAllowance,
		},
		{
			// A renewal by hand moves the schedule: the next is due an
			// interval after it.
			name:  "RenewByHand",
			steps: []step{{1500 * time.Millisecond, renew}},
			wantRenewals: []time.Duration{
				1 * time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond, 3500 * time.Millisecond,
				4500 * time.Millisecond, 5500 * time.Millisecond, 6500 * time.Millisecond,
				7500 * time.Millisecond, 8500 * time.Millisecond, 9500 * time.Millisecond,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				l := fakeLease(t, newFakeClient(t, f, tt.opts...), "r", "w1")
				firstExpiry := l.ExpiresAt()
				for _, s := range tt.steps {
					time.Sleep(s.at - at(time.Now()))
					s.do(t, l)
				}
				var lostAt time.Duration
				select {
				case <-l.Done():
					lostAt = at(time.Now())
				case <-time.After(10*time.Second - at(time.Now()) + time.Millisecond):
				}
				if got := callTimes(f.log("renew")); !slices.Equal(got, tt.wantRenewals) {
					t.Errorf("renewals sent at %v, want %v", got, tt.wantRenewals)
				}
				if lostAt != tt.wantLostAt {
					t.Errorf("lease lost at %s (cause %v), want %s (0: held)", lostAt, l.Err(), tt.wantLostAt)
				}
				if tt.wantLostAt != 0 {
					if !errors.Is(l.Err(), client.ErrLeaseExpired) {
						t.Errorf("cause: got %v, want ErrLeaseExpired", l.Err())
					}
				} else if n := len(tt.wantRenewals); n > 0 {
					last := tt.wantRenewals[n-1]
					if got, want := at(l.Deadline()), last+deadline3; got != want {
						t.Errorf("Deadline: got %s, want %s (the last renewal + ttl - margin)", got, want)
					}
					if !l.ExpiresAt().After(firstExpiry) {
						t.Errorf("ExpiresAt: got %s, want later than the grant's %s", l.ExpiresAt(), firstExpiry)
					}
				}
				if err := l.Release(context.Background()); tt.wantLostAt == 0 && err != nil {
					t.Errorf("Release: %v", err)
				}
			})
		})
	}
}

// TestKeepAliveStops: the renewals end with the lease, whatever ends it,
// and a KeepAlive after the end starts nothing. synctest.Test also fails
// if a keep-alive goroutine is left behind.
func TestKeepAliveStops(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    []client.Option
		end     func(t *testing.T, f *fakeAPI, l *client.Lease)
		wantErr error
	}{
		{
			name: "Released",
			end: func(t *testing.T, f *fakeAPI, l *client.Lease) {
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
			},
			wantErr: client.ErrReleased,
		},
		{
			name: "Lost",
			end: func(t *testing.T, f *fakeAPI, l *client.Lease) {
				f.expireAll()
				<-l.Done()
			},
			wantErr: client.ErrNotFound,
		},
		{
			name: "KeepAliveContextEnded",
			opts: []client.Option{client.WithoutKeepAlive()},
			end: func(t *testing.T, f *fakeAPI, l *client.Lease) {
				ctx, cancel := context.WithCancel(context.Background())
				l.KeepAlive(ctx)
				cancel()
				<-l.Done() // at the deadline: nothing renews it any more
			},
			wantErr: client.ErrLeaseExpired,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				l := fakeLease(t, newFakeClient(t, f, tt.opts...), "r", "w1")
				time.Sleep(1500 * time.Millisecond)
				tt.end(t, f, l)
				if !errors.Is(l.Err(), tt.wantErr) {
					t.Errorf("Err: got %v, want %v", l.Err(), tt.wantErr)
				}
				l.KeepAlive(context.Background()) // too late: does nothing
				sent := len(f.log("renew"))
				time.Sleep(time.Minute)
				if got := f.log("renew"); len(got) != sent {
					t.Errorf("renewals after the lease ended: got %v, want none", got[sent:])
				}
				_ = l.Release(context.Background())
			})
		})
	}
}

func TestLeaseLostWhenRenewalRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// change, at 0.5 s, makes the next renewal (due at 1 s) fail.
		change    func(f *fakeAPI, c *client.Client, l *client.Lease)
		byHand    bool // renew with Renew at 1 s, not the keep-alive
		wantCause error
	}{
		{
			name: "TakenOverAfterExpiry",
			change: func(f *fakeAPI, c *client.Client, l *client.Lease) {
				f.expireAll()
				f.serve(call{Op: "acquire", Resource: l.Resource(), Owner: "w2", TTL: 30 * time.Second})
			},
			wantCause: client.ErrForbidden,
		},
		{
			name:      "Expired",
			change:    func(f *fakeAPI, c *client.Client, l *client.Lease) { f.expireAll() },
			wantCause: client.ErrNotFound,
		},
		{
			name: "ReplacedBySameOwner",
			change: func(f *fakeAPI, c *client.Client, l *client.Lease) {
				f.serve(call{Op: "acquire", Resource: l.Resource(), Owner: l.Owner(), TTL: 30 * time.Second})
			},
			wantCause: client.ErrStaleToken,
		},
		{
			name: "RenewByHandTakenOver",
			change: func(f *fakeAPI, c *client.Client, l *client.Lease) {
				f.expireAll()
				f.serve(call{Op: "acquire", Resource: l.Resource(), Owner: "w2", TTL: 30 * time.Second})
			},
			byHand:    true,
			wantCause: client.ErrForbidden,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				var opts []client.Option
				if tt.byHand {
					opts = append(opts, client.WithoutKeepAlive())
				}
				c := newFakeClient(t, f, opts...)
				l := fakeLease(t, c, "r", "w1")
				time.Sleep(500 * time.Millisecond)
				tt.change(f, c, l)
				time.Sleep(500 * time.Millisecond)
				if tt.byHand {
					err := l.Renew(context.Background())
					if !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, tt.wantCause) {
						t.Errorf("Renew: got %v, want an error matching ErrLeaseLost and %v", err, tt.wantCause)
					}
				}
				<-l.Done()
				if lostAt := at(time.Now()); lostAt != time.Second {
					t.Errorf("lease lost at %s, want at the refused renewal (1s)", lostAt)
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
				_ = l.Release(context.Background())
			})
		})
	}
}

// TestLeaseLostWhenServiceUnreachable: after one good renewal (at 1 s)
// every request fails. The renewals are retried until the local deadline
// of that renewal, 1 s + 2.7 s, and the lease is given up DeliveryAllowance
// before then: before the service's lease (1 s + 3 s) can have ended.
func TestLeaseLostWhenServiceUnreachable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		fail         func(c call) (*http.Response, error)
		wantAttempts int // failed renewals, at least
	}{
		{
			name:         "Unavailable",
			fail:         func(call) (*http.Response, error) { return problemResponse(503, "service-unavailable"), nil },
			wantAttempts: 5,
		},
		{
			name:         "NetworkDown",
			fail:         func(call) (*http.Response, error) { return nil, errors.New("connection refused") },
			wantAttempts: 5,
		},
		{
			// Each attempt hangs until its own deadline: the next interval
			// or the local deadline.
			name: "Hanging",
			fail: func(c call) (*http.Response, error) {
				<-c.Ctx.Done()
				return nil, c.Ctx.Err()
			},
			wantAttempts: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				f.intercept = func(c call) (*http.Response, error) {
					if c.Op == "renew" && at(c.At) > time.Second {
						return tt.fail(c)
					}
					return nil, nil
				}
				l := fakeLease(t, newFakeClient(t, f), "r", "w1")
				<-l.Done()
				if got, want := at(time.Now()), time.Second+deadline3-client.DeliveryAllowance; got != want {
					t.Errorf("lease lost at %s, want %s (last good renewal + ttl - margin - DeliveryAllowance)", got, want)
				}
				if !errors.Is(l.Err(), client.ErrLeaseLost) || !errors.Is(l.Err(), client.ErrLeaseExpired) {
					t.Errorf("cause: got %v, want ErrLeaseLost with ErrLeaseExpired", l.Err())
				}
				renewals := f.log("renew")
				if len(renewals) == 0 {
					t.Fatal("no renewal was sent")
				}
				if failed := len(renewals) - 1; failed < tt.wantAttempts {
					t.Errorf("failed renewals: got %d (%v), want at least %d", failed, renewals, tt.wantAttempts)
				}
				if last := renewals[len(renewals)-1]; at(last.At) >= time.Second+deadline3 {
					t.Errorf("renewal sent at %s, at or after the local deadline", at(last.At))
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = l.Release(ctx)
			})
		})
	}
}
