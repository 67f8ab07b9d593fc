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

// sec is n seconds (fractions allowed).
func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// waits returns the wait_seconds and the times of the calls that asked the
// service to wait.
func waits(calls []call) (asked, when []time.Duration) {
	for _, c := range calls {
		if c.Wait > 0 {
			asked = append(asked, c.Wait)
			when = append(when, at(c.At))
		}
	}
	return asked, when
}

// TestAcquireServerWait: Acquire waits at the service in rounds of
// min(20 s, the time left, ⅔ × (ttl − margin)) and sends one request per
// round; the
// fake service holds each one as the real one does (until the lock is free,
// or until half a second before wait_seconds).
func TestAcquireServerWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ctx      time.Duration // Acquire's context ends then
		ttl      time.Duration
		release  time.Duration // the holder releases then (0: never)
		timeout  time.Duration // the HTTP client's timeout (0: none)
		wantAt   time.Duration // granted then (0: never)
		wantWait []time.Duration
		wantWhen []time.Duration
	}{
		{
			name: "ReleasedInSecondRound", ctx: sec(50), ttl: sec(60), release: sec(30),
			wantAt: sec(30), wantWait: []time.Duration{sec(20), sec(20)}, wantWhen: []time.Duration{0, sec(19.5)},
		},
		{
			// Rounds end half a second early; under a second left, it polls.
			name: "RunsOut", ctx: sec(45), ttl: sec(60),
			wantWait: []time.Duration{sec(20), sec(20), sec(6)},
			wantWhen: []time.Duration{0, sec(19.5), sec(39)},
		},
		{
			// Rounds of ⅔ × (ttl − margin) = ⅔ × 4.5 s: 3 s.
			name: "ShortTTL", ctx: sec(10), ttl: sec(5), release: sec(4),
			wantAt: sec(4), wantWait: []time.Duration{sec(3), sec(3)}, wantWhen: []time.Duration{0, sec(2.5)},
		},
		{
			name: "HTTPClientTimeout", ctx: sec(60), ttl: sec(60), timeout: sec(12), release: sec(9),
			wantAt: sec(9), wantWait: []time.Duration{sec(7), sec(7)}, wantWhen: []time.Duration{0, sec(6.5)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
				if tt.release > 0 {
					time.AfterFunc(tt.release, func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
				}
				c := newFakeClient(t, f, client.WithHTTPClient(&http.Client{Transport: f, Timeout: tt.timeout}), client.WithoutKeepAlive())
				ctx, cancel := context.WithTimeout(context.Background(), tt.ctx)
				defer cancel()
				l, err := c.Acquire(ctx, "r", "waiter", tt.ttl)
				if tt.wantAt > 0 {
					if err != nil {
						t.Fatalf("Acquire: %v", err)
					}
					if got := at(time.Now()); got < tt.wantAt || got > tt.wantAt+20*time.Millisecond {
						t.Errorf("granted at %s, want right after the release at %s", got, tt.wantAt)
					}
					// Counted from before the request that was granted,
					// however long the service held it.
					calls := f.log("acquire")
					margin := min(tt.ttl/10, time.Second)
					if want := calls[len(calls)-1].At.Add(tt.ttl - margin); !l.Deadline().Equal(want) {
						t.Errorf("local deadline %s, want %s", at(l.Deadline()), at(want))
					}
				} else if !errors.Is(err, client.ErrHeld) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Acquire: got %v, want ErrHeld and DeadlineExceeded", err)
				}
				asked, when := waits(f.log("acquire"))
				if !slices.Equal(asked, tt.wantWait) || !slices.Equal(when, tt.wantWhen) {
					t.Errorf("rounds: got wait_seconds %v at %v, want %v at %v", asked, when, tt.wantWait, tt.wantWhen)
				}
				if err := c.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
				if rel := f.log("release"); len(rel) > 0 {
					t.Errorf("releases: got %v, want none", rel)
				}
			})
		})
	}
}

// TestAcquireFallsBackToPolling: a service that refuses wait_seconds (422
// naming it) is polled at once, and the client remembers it.
func TestAcquireFallsBackToPolling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.refuseWait = true
		f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
		time.AfterFunc(time.Second, func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
		c := newFakeClient(t, f, client.WithoutKeepAlive())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Acquire(ctx, "r", "waiter", 30*time.Second); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if got := at(time.Now()); got > 1200*time.Millisecond {
			t.Errorf("granted at %s, want soon after the release at 1s (polling every 200ms at most)", got)
		}
		if _, err := c.Acquire(ctx, "other", "waiter", 30*time.Second); err != nil {
			t.Fatalf("second Acquire: %v", err)
		}
		calls := f.log("acquire")
		if asked, _ := waits(calls); !slices.Equal(asked, []time.Duration{10 * time.Second}) {
			t.Errorf("wait_seconds sent: got %v, want one refused request of 10s, then none", asked)
		}
		if len(calls) < 3 || at(calls[1].At) != 0 {
			t.Errorf("calls: got %v, want a plain attempt at once after the refusal, then polls", calls)
		}
	})
}

// TestAcquireServerWaitLateGrant: the caller stops waiting mid-round; the
// service, which cannot tell, grants the lock later in that round. The
// client awaits the round's answer and releases that grant with its token.
func TestAcquireServerWaitLateGrant(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
		time.AfterFunc(12*time.Second, func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
		c := newFakeClient(t, f, client.WithoutKeepAlive())
		ctx, cancel := context.WithCancel(context.Background()) // no deadline: rounds of 20 s
		time.AfterFunc(5*time.Second, cancel)
		if l, err := c.Acquire(ctx, "r", "waiter", 60*time.Second); l != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire: got %v, %v; want no lease and context.Canceled", l, err)
		}
		if got := at(time.Now()); got != 5*time.Second {
			t.Errorf("Acquire returned at %s, want when it was cancelled (5s)", got)
		}
		if err := c.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		granted := f.record("r")
		rel := f.log("release")
		if granted.owner != "waiter" || len(rel) != 1 || rel[0].Owner != "waiter" || rel[0].Token != granted.token {
			t.Fatalf("releases: got %v, want the waiter's late grant (token %d) released", rel, granted.token)
		}
		if got := at(rel[0].At); got < 12*time.Second || got > 12100*time.Millisecond {
			t.Errorf("late grant released at %s, want as soon as it was granted (12s)", got)
		}
	})
}

// TestTryAcquireAsksOnce: TryAcquire never asks the service to wait.
func TestTryAcquireAsksOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: time.Minute})
		c := newFakeClient(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := c.TryAcquire(ctx, "r", "waiter", 30*time.Second); !errors.Is(err, client.ErrHeld) {
			t.Fatalf("TryAcquire: got %v, want ErrHeld", err)
		}
		if calls := f.log("acquire"); len(calls) != 1 || calls[0].Wait != 0 || at(time.Now()) != 0 {
			t.Errorf("got %v, returning at %s; want one attempt without wait_seconds, answered at once", calls, at(time.Now()))
		}
	})
}

// TestAcquireSendsQueueTicket: a waiting round that ends held answers its
// place in the lock's queue (queue_ticket); the next round sends it back,
// so the waiter keeps its place, and a plain attempt never sends one.
func TestAcquireSendsQueueTicket(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
		time.AfterFunc(sec(45), func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
		c := newFakeClient(t, f, client.WithoutKeepAlive())
		ctx, cancel := context.WithTimeout(context.Background(), sec(50))
		defer cancel()
		l, err := c.Acquire(ctx, "r", "waiter", sec(60))
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		defer l.Release(context.Background())
		calls := f.log("acquire")
		var tickets []string
		for _, c := range calls {
			tickets = append(tickets, c.Ticket)
		}
		// The try at 0 s, then rounds at 0, 19.5 and 39 s: the try and
		// the first round have no place yet, the others send back the one
		// the first round was given.
		if want := []string{"", "", "tk1", "tk1"}; !slices.Equal(tickets, want) {
			t.Errorf("queue_ticket of each round: got %q, want %q", tickets, want)
		}
		if _, err := c.TryAcquire(context.Background(), "r", "other", sec(60)); !errors.Is(err, client.ErrHeld) {
			t.Fatalf("TryAcquire: got %v, want ErrHeld", err)
		}
		if last := f.log("acquire"); last[len(last)-1].Ticket != "" {
			t.Errorf("a plain attempt sent queue_ticket %q, want none", last[len(last)-1].Ticket)
		}
	})
}

// TestAcquireKeepsUnavailableTicket: a waiting round answered 503 with a
// queue_ticket (the service joined the queue, or may have, but could not
// learn its own entry) is retried with that ticket, as a held round's, so
// the waiter reclaims its place instead of queueing behind it; the rounds
// after keep it. (The waiter's first request is its try, answered held.)
func TestAcquireKeepsUnavailableTicket(t *testing.T) {
	t.Parallel()
	unavailable := func() *http.Response {
		resp := jsonResponse(503, map[string]string{"Retry-After": "1"}, map[string]any{
			"type": client.ProblemTypeBase + "service-unavailable", "title": "Lock store unavailable", "status": 503,
			"queue_ticket": "ghost-1",
		})
		resp.Header.Set("Content-Type", "application/problem+json")
		return resp
	}
	for _, tc := range []struct {
		name string
		// setup returns a client of a fake that holds "r" for another
		// owner until 30 s and answers the first waiting round 503 with
		// a ticket, and the tickets of the waiter's rounds so far.
		setup   func(t *testing.T) (*client.Client, func() []string)
		acquire func(ctx context.Context, c *client.Client) (release func(context.Context) error, err error)
	}{
		{
			name: "Lock",
			setup: func(t *testing.T) (*client.Client, func() []string) {
				f := newFakeAPI()
				f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
				time.AfterFunc(sec(30), func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
				f.intercept = func(c call) (*http.Response, error) {
					if c.Route == "wait" && len(f.log("acquire")) == 2 { // the try, then the first round
						return unavailable(), nil
					}
					return nil, nil
				}
				return newFakeClient(t, f, client.WithoutKeepAlive()), func() (out []string) {
					for _, c := range f.log("acquire") {
						out = append(out, c.Ticket)
					}
					return out
				}
			},
			acquire: func(ctx context.Context, c *client.Client) (func(context.Context) error, error) {
				l, err := c.Acquire(ctx, "r", "waiter", sec(60))
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			},
		},
		{
			name: "Semaphore",
			setup: func(t *testing.T) (*client.Client, func() []string) {
				f := newFakeSem()
				f.serve(semCall{Op: "acquire", Name: "r", Owner: "holder", Permits: 1, TTL: 5 * time.Minute})
				time.AfterFunc(sec(30), func() { f.serve(semCall{Op: "release", Name: "r", Owner: "holder", Slot: 0}) })
				f.intercept = func(c semCall) (*http.Response, error) {
					if c.Route == "wait" && len(f.log("acquire")) == 2 { // the try, then the first round
						return unavailable(), nil
					}
					return nil, nil
				}
				return newSemClient(t, f, nil, client.WithoutKeepAlive()), func() (out []string) {
					for _, c := range f.log("acquire") {
						out = append(out, c.Ticket)
					}
					return out
				}
			},
			acquire: func(ctx context.Context, c *client.Client) (func(context.Context) error, error) {
				p, err := c.AcquireSemaphore(ctx, "r", 1, "waiter", sec(60))
				if err != nil {
					return nil, err
				}
				return p.Release, nil
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				c, tickets := tc.setup(t)
				ctx, cancel := context.WithTimeout(context.Background(), sec(50))
				defer cancel()
				release, err := tc.acquire(ctx, c)
				if err != nil {
					t.Fatalf("acquire: %v", err)
				}
				defer release(context.Background())
				// The try and the round answered 503 at 0 s, then rounds
				// from about 1 s on: each sends back the 503's ticket (the
				// fake keeps a ticket it is sent).
				got := tickets()
				if len(got) < 4 || got[0] != "" || got[1] != "" || slices.ContainsFunc(got[2:], func(tk string) bool { return tk != "ghost-1" }) {
					t.Errorf("queue_ticket of each acquire: got %q, want \"\" (the try), \"\" (the first round) and then \"ghost-1\" in every round", got)
				}
			})
		})
	}
}
