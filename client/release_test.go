package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// gatewayResponse is API Gateway's own answer: {"message"}, not a problem.
func gatewayResponse(status int, message string) *http.Response {
	return jsonResponse(status, nil, map[string]string{"message": message})
}

// Scripted answers of the fake API, for a release or a renewal.
var (
	// unavailable: the service's 503; it is not applied.
	unavailable = func(f *fakeAPI, c call) (*http.Response, error) {
		return problemResponse(503, "service-unavailable"), nil
	}
	// appliedUnheard: the request is applied, but the answer is a 503 (the
	// store's answer was lost), so its outcome is unknown to the client.
	appliedUnheard = func(f *fakeAPI, c call) (*http.Response, error) {
		f.serve(c)
		return problemResponse(503, "service-unavailable"), nil
	}
	// droppedUnheard: applied, then the connection drops.
	droppedUnheard = func(f *fakeAPI, c call) (*http.Response, error) {
		f.serve(c)
		return nil, errors.New("connection reset by peer")
	}
	routeThrottle  = func(*fakeAPI, call) (*http.Response, error) { return gatewayResponse(429, "Too Many Requests"), nil }
	lambdaThrottle = func(*fakeAPI, call) (*http.Response, error) {
		return gatewayResponse(500, "Internal Server Error"), nil
	}
	internal = func(*fakeAPI, call) (*http.Response, error) { return problemResponse(500, "internal"), nil }
	expired  = func(f *fakeAPI, c call) (*http.Response, error) { f.expireAll(); return nil, nil }
	forced   = func(f *fakeAPI, c call) (*http.Response, error) { f.forceRelease(c.Resource); return nil, nil }
)

// scripted answers the n-th request of op (0-based) with script[n], and
// the rest normally.
func scripted(f *fakeAPI, op string, script ...func(*fakeAPI, call) (*http.Response, error)) {
	n := 0
	f.intercept = func(c call) (*http.Response, error) {
		if c.Op != op || n >= len(script) {
			return nil, nil
		}
		n++
		return script[n-1](f, c)
	}
}

// TestLeaseReleaseRetries: Lease.Release retries temporary failures with
// backoff, as the clean-up release does, and a 404 after an attempt whose
// outcome is unknown counts as released.
func TestLeaseReleaseRetries(t *testing.T) {
	t.Parallel()
	type answerFunc = func(*fakeAPI, call) (*http.Response, error)
	tests := []struct {
		name         string
		script       []answerFunc // the first release attempts' answers
		ctx          time.Duration
		wantErr      error // nil: released
		wantReleases int
	}{
		{name: "503Then204", script: []answerFunc{unavailable}, wantReleases: 2},
		{name: "503Then404", script: []answerFunc{appliedUnheard}, wantReleases: 2},
		{name: "DroppedThen404", script: []answerFunc{droppedUnheard}, wantReleases: 2},
		{name: "RouteThrottleThen204", script: []answerFunc{routeThrottle, routeThrottle}, wantReleases: 3},
		{name: "LambdaThrottleThen204", script: []answerFunc{lambdaThrottle}, wantReleases: 2},
		// A throttled request never reached the service: the lease really
		// had ended.
		{name: "RouteThrottleThen404", script: []answerFunc{routeThrottle, expired}, wantErr: client.ErrNotFound, wantReleases: 2},
		{name: "NotFound", script: []answerFunc{expired}, wantErr: client.ErrNotFound, wantReleases: 1},
		{name: "Internal", script: []answerFunc{internal}, wantErr: &client.ProblemError{}, wantReleases: 1},
		{name: "ForceReleasedAfter503", script: []answerFunc{unavailable, forced}, wantErr: client.ErrNotFound, wantReleases: 2},
		{
			// Retry-After: 1, capped at the backoff maximum (200 ms): a
			// retry every 200 ms until the context ends.
			name: "UnavailableUntilContextEnds", ctx: 3 * time.Second, wantErr: client.ErrUnavailable,
			script: slices.Repeat([]answerFunc{unavailable}, 100), wantReleases: 16,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				c := newFakeClient(t, f)
				l := fakeLease(t, c, "r", "")
				scripted(f, "release", tt.script...)
				ctx := context.Background()
				if tt.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.ctx)
					defer cancel()
				}
				err := l.Release(ctx)
				var p *client.ProblemError
				switch {
				case tt.wantErr == nil && err != nil:
					t.Errorf("Release: got %v, want nil", err)
				case errors.As(tt.wantErr, &p):
					if !errors.As(err, &p) || p.Slug() != "internal" {
						t.Errorf("Release: got %v, want the internal problem", err)
					}
				case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
					t.Errorf("Release: got %v, want %v", err, tt.wantErr)
				}
				if got := f.log("release"); len(got) != tt.wantReleases {
					t.Errorf("releases: got %v, want %d", callTimes(got), tt.wantReleases)
				}
				if tt.ctx > 0 && at(time.Now()) != tt.ctx {
					t.Errorf("Release returned at %s, want when its context ended (%s)", at(time.Now()), tt.ctx)
				}
				if tt.name == "ForceReleasedAfter503" && (!errors.As(err, &p) || !p.ForceReleased) {
					t.Errorf("Release: got %v, want the force_released not-found problem", err)
				}
				if _, _, ok := f.holder("r"); ok && tt.wantErr == nil {
					t.Errorf("the lease is still live after Release returned nil")
				}
			})
		})
	}
}

// TestLeaseReleaseGivesUp: without a deadline of its own, Release stops
// retrying after ReleaseRetryTimeout, or sooner when the lease has run out
// by then (its TTL from the request that granted it).
func TestLeaseReleaseGivesUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ttl      time.Duration
		wantDone time.Duration
	}{
		{name: "ReleaseRetryTimeout", ttl: time.Minute, wantDone: client.ReleaseRetryTimeout},
		{name: "LeaseEnd", ttl: 3 * time.Second, wantDone: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				c := newFakeClient(t, f, client.WithoutKeepAlive())
				l, err := c.TryAcquire(context.Background(), "r", "", tt.ttl)
				if err != nil {
					t.Fatal(err)
				}
				f.intercept = func(c call) (*http.Response, error) {
					if c.Op == "release" {
						return problemResponse(503, "service-unavailable"), nil
					}
					return nil, nil
				}
				if err := l.Release(context.Background()); !errors.Is(err, client.ErrUnavailable) {
					t.Errorf("Release: got %v, want ErrUnavailable", err)
				}
				if got := at(time.Now()); got != tt.wantDone {
					t.Errorf("Release returned at %s, want at %s", got, tt.wantDone)
				}
			})
		})
	}
}

// TestThrottleAnswersRetried: API Gateway's throttle answers (429 for a
// route, 500 {"message"} for a function) are retried like a 503 by the
// keep-alive and by the clean-up release; the service's internal problem
// is not: it ends the lease.
func TestThrottleAnswersRetried(t *testing.T) {
	t.Parallel()
	type answerFunc = func(*fakeAPI, call) (*http.Response, error)
	t.Run("KeepAlive", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name     string
			script   []answerFunc
			wantLost bool
		}{
			{name: "RouteThrottle", script: []answerFunc{routeThrottle, routeThrottle}},
			{name: "LambdaThrottle", script: []answerFunc{lambdaThrottle, lambdaThrottle}},
			{name: "Unavailable", script: []answerFunc{unavailable}},
			{name: "Internal", script: []answerFunc{internal}, wantLost: true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					f := newFakeAPI()
					scripted(f, "renew", tt.script...)
					c := newFakeClient(t, f)
					l := fakeLease(t, c, "r", "")
					defer l.Release(context.Background())
					time.Sleep(5 * time.Second) // renewals due at 1 s, 2 s, …
					err := l.Err()
					if !tt.wantLost {
						if err != nil {
							t.Errorf("lease lost: %v; want it kept by retried renewals", err)
						}
						return
					}
					var p *client.ProblemError
					if !errors.Is(err, client.ErrLeaseLost) || !errors.As(err, &p) || p.Slug() != "internal" {
						t.Errorf("lease: got %v, want lost with the internal problem", err)
					}
					if got := f.log("renew"); len(got) != 1 {
						t.Errorf("renewals: got %v, want one, not retried", got)
					}
				})
			})
		}
	})
	t.Run("CleanUpRelease", func(t *testing.T) {
		t.Parallel()
		for _, th := range []struct {
			name   string
			answer answerFunc
		}{{"RouteThrottle", routeThrottle}, {"LambdaThrottle", lambdaThrottle}} {
			t.Run(th.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					f := newFakeAPI()
					// The acquire is applied but its answer is lost; the
					// clean-up release of the generated owner is throttled
					// twice.
					acquires := 0
					releases := 0
					f.intercept = func(c call) (*http.Response, error) {
						switch c.Op {
						case "acquire":
							if acquires++; acquires == 1 {
								return appliedUnheard(f, c)
							}
						case "release":
							if releases++; releases <= 2 {
								return th.answer(f, c)
							}
						}
						return nil, nil
					}
					c := newFakeClient(t, f)
					if _, err := c.TryAcquire(context.Background(), "r", "", ttl3s); !errors.Is(err, client.ErrUnavailable) {
						t.Fatalf("TryAcquire: got %v, want ErrUnavailable", err)
					}
					if err := c.Drain(context.Background()); err != nil {
						t.Fatal(err)
					}
					if got := f.log("release"); len(got) != 3 {
						t.Errorf("releases: got %v, want 3 (two throttled)", got)
					}
					if _, _, ok := f.holder("r"); ok {
						t.Error("the unheard grant is still live")
					}
				})
			})
		}
	})
}

// TestLeaseLostToForceRelease: a holder whose lease an operator force
// released learns it at its next renewal: the lease is lost with a
// *LeaseLostError that says so.
func TestLeaseLostToForceRelease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		c := newFakeClient(t, f)
		l := fakeLease(t, c, "r", "")
		time.AfterFunc(500*time.Millisecond, func() { f.forceRelease("r") })
		<-l.Done()
		if got := at(time.Now()); got != interval {
			t.Errorf("lost at %s, want at the first renewal (%s)", got, interval)
		}
		var lost *client.LeaseLostError
		if err := l.Err(); !errors.As(err, &lost) || !lost.ForceReleased || !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("lease: got %v, want a *LeaseLostError with ForceReleased, matching ErrNotFound", err)
		}
		if msg := lost.Error(); !strings.Contains(msg, "force released by an operator") {
			t.Errorf("message %q does not say the lease was force released", msg)
		}
		err := l.Release(context.Background())
		var p *client.ProblemError
		if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &p) || !p.ForceReleased {
			t.Errorf("Release: got %v, want the force_released not-found problem", err)
		}
	})
}

// TestLeaseLostErrorMessage: the message names the lease and says when an
// operator force released it.
func TestLeaseLostErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  client.LeaseLostError
		want string
	}{
		{
			name: "Expired",
			err:  client.LeaseLostError{Resource: "r", FencingToken: 7, Reason: client.ErrLeaseExpired},
			want: `lease on "r" (fencing token 7) lost: no successful renewal before the lease's local deadline`,
		},
		{
			name: "ForceReleased",
			err:  client.LeaseLostError{Resource: "r", FencingToken: 7, ForceReleased: true, Reason: &client.ProblemError{Status: 404, Title: "Lock not found"}},
			want: `lease on "r" (fencing token 7) lost: it was force released by an operator (404 Lock not found)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
