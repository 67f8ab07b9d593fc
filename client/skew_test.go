package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// wire is what one acquire request was on the wire, for comparing rounds.
type wire struct {
	Route  string // "try" or "wait"
	Wait   time.Duration
	Ticket string
	At     time.Duration // since the bubble started
}

func (w wire) String() string {
	return fmt.Sprintf("%s(wait %s, ticket %q) at %s", w.Route, w.Wait, w.Ticket, w.At)
}

// skewKind is a lock or a semaphore of one permit behind a fake stack, for
// the version-skew tests that must hold for both.
type skewKind struct {
	name string
	// setup returns a client of a fake stack (old: without the waiting
	// routes; refuse: refusing wait_seconds everywhere) where holder holds
	// "r" until release, and the acquires the stack received.
	setup func(t *testing.T, old, refuse bool, release time.Duration) (c *client.Client, log func() []wire)
	// acquire waits for "r" (or name) for owner.
	acquire func(ctx context.Context, c *client.Client, name, owner string) error
}

var skewKinds = []skewKind{
	{
		name: "Lock",
		setup: func(t *testing.T, old, refuse bool, release time.Duration) (*client.Client, func() []wire) {
			f := newFakeAPI()
			f.oldStack, f.refuseWait = old, refuse
			f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
			time.AfterFunc(release, func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
			return newFakeClient(t, f, client.WithoutKeepAlive()), func() []wire {
				var out []wire
				for _, c := range f.log("acquire") {
					if c.Owner != "holder" {
						out = append(out, wire{c.Route, c.Wait, c.Ticket, at(c.At)})
					}
				}
				return out
			}
		},
		acquire: func(ctx context.Context, c *client.Client, name, owner string) error {
			_, err := c.Acquire(ctx, name, owner, time.Minute)
			return err
		},
	},
	{
		name: "Semaphore",
		setup: func(t *testing.T, old, refuse bool, release time.Duration) (*client.Client, func() []wire) {
			f := newFakeSem()
			f.oldStack, f.refuseWait = old, refuse
			f.serve(semCall{Op: "acquire", Name: "r", Owner: "holder", Permits: 1, TTL: 5 * time.Minute})
			time.AfterFunc(release, func() { f.serve(semCall{Op: "release", Name: "r", Owner: "holder", Slot: 0}) })
			return newSemClient(t, f, nil, client.WithoutKeepAlive()), func() []wire {
				var out []wire
				for _, c := range f.log("acquire") {
					if c.Owner != "holder" {
						out = append(out, wire{c.Route, c.Wait, c.Ticket, at(c.At)})
					}
				}
				return out
			}
		},
		acquire: func(ctx context.Context, c *client.Client, name, owner string) error {
			_, err := c.AcquireSemaphore(ctx, name, 1, owner, time.Minute)
			return err
		},
	},
}

// TestAcquireWaitingRounds: where a waiting acquire's rounds go, by the
// stack's version, once its try found the lock held. Today's stack: every
// waiting round goes to …/wait with
// wait_seconds and the queue ticket; the try route never sees either (the
// fake answers them 422, as the service does). A stack from before the
// waiting routes answers …/wait with API Gateway's 404 {"message":"Not
// Found"}: the client sends that round again at once as the released
// clients did (the try route with wait_seconds, the queue ticket carried
// between rounds), waits at the service, and never asks …/wait again for
// the client's life. Either way the waiter is granted right after the
// release, and the next acquire of a held lock, after its try, waits on the
// remembered route at once.
func TestAcquireWaitingRounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		old  bool
		// rounds are the waiter's acquires, the last carrying tk, the
		// ticket of a round before it.
		rounds func(tk string) []wire
		next   string // the route of the next acquire
	}{
		{"WaitRoute", false, func(tk string) []wire {
			return []wire{{"try", 0, "", 0}, {"wait", sec(20), "", 0}, {"wait", sec(20), tk, sec(19.5)}}
		}, "wait"},
		{"OldStack", true, func(tk string) []wire {
			return []wire{{"try", 0, "", 0}, {"wait", sec(20), "", 0}, {"try", sec(20), "", 0}, {"try", sec(20), tk, sec(19.5)}}
		}, "try"},
	} {
		for _, k := range skewKinds {
			t.Run(tc.name+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					c, log := k.setup(t, tc.old, false, sec(30))
					ctx, cancel := context.WithTimeout(context.Background(), sec(50))
					defer cancel()
					if err := k.acquire(ctx, c, "r", "waiter"); err != nil {
						t.Fatalf("acquire: %v", err)
					}
					if got := at(time.Now()); got < sec(30) || got > sec(30.02) {
						t.Errorf("granted at %s, want right after the release (30s): waiting at the service", got)
					}
					got := log()
					tk := ""
					if len(got) > 0 {
						tk = got[len(got)-1].Ticket
					}
					want := tc.rounds(tk)
					if !slices.Equal(got, want) || tk == "" {
						t.Errorf("acquires: got %v, want %v with an earlier round's ticket", got, want)
					}
					// Remembered: the next acquire of a held lock (waiter
					// holds r now) tries, then waits on that route at once.
					ctx, cancel = context.WithTimeout(context.Background(), sec(3))
					defer cancel()
					if err := k.acquire(ctx, c, "r", "other"); !errors.Is(err, client.ErrHeld) {
						t.Fatalf("second acquire: got %v, want ErrHeld", err)
					}
					got = log()[len(want):]
					if len(got) < 2 || got[0].Route != "try" || got[0].Wait != 0 || got[1].Route != tc.next || got[1].Wait != sec(3) {
						t.Errorf("second acquire: got %v, want a try, then a round on %s with wait_seconds 3", got, tc.next)
					}
					for _, w := range got[1:] {
						// Once under a second is left, the last attempts
						// are plain tries.
						if w.Wait > 0 && w.Route != tc.next || w.Route == "wait" && tc.next != "wait" {
							t.Errorf("second acquire sent %v, want its rounds on %s only", w, tc.next)
						}
					}
				})
			})
		}
	}
}

// TestAcquirePollsWhenNotWaited: a stack that does not wait, because it
// is from before server-side waiting (without the waiting routes and
// refusing wait_seconds: 404 on …/wait, then 422 naming wait_seconds on
// the try route) or has waiting turned off (…/wait answers 422 naming
// wait_seconds): after its try found the lock held, the client polls the
// try route, and remembers it.
func TestAcquirePollsWhenNotWaited(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		old     bool
		refused []wire // the rounds refused before the polls
	}{
		{"OldestStack", true, []wire{{"try", 0, "", 0}, {"wait", sec(10), "", 0}, {"try", sec(10), "", 0}}},
		{"WaitingOff", false, []wire{{"try", 0, "", 0}, {"wait", sec(10), "", 0}}},
	} {
		for _, k := range skewKinds {
			t.Run(tc.name+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					c, log := k.setup(t, tc.old, true, sec(1))
					ctx, cancel := context.WithTimeout(context.Background(), sec(10))
					defer cancel()
					if err := k.acquire(ctx, c, "r", "waiter"); err != nil {
						t.Fatalf("acquire: %v", err)
					}
					if got := at(time.Now()); got > sec(1.2) {
						t.Errorf("granted at %s, want soon after the release at 1s (polling every 200ms at most)", got)
					}
					got := log()
					n := len(tc.refused)
					if len(got) < n+2 || !slices.Equal(got[:n], tc.refused) {
						t.Fatalf("acquires: got %v, want %v refused, then polls", got, tc.refused)
					}
					for _, w := range got[n:] {
						if w.Route != "try" || w.Wait != 0 || w.Ticket != "" {
							t.Errorf("poll %v: want the try route without wait_seconds or ticket", w)
						}
					}
					// Remembered: the next acquire of a held lock (waiter
					// holds r now) polls at once.
					n = len(got)
					ctx, cancel = context.WithTimeout(context.Background(), sec(1))
					defer cancel()
					if err := k.acquire(ctx, c, "r", "other"); !errors.Is(err, client.ErrHeld) {
						t.Fatalf("second acquire: got %v, want ErrHeld", err)
					}
					got = log()[n:]
					if len(got) < 2 {
						t.Errorf("second acquire: got %v, want polls", got)
					}
					for _, w := range got {
						if w.Route != "try" || w.Wait != 0 {
							t.Errorf("second acquire sent %v, want only plain tries", w)
						}
					}
				})
			})
		}
	}
}

// TestAcquireServiceNotFoundIsNotOldStack: the service's own problem+json
// 404 on …/wait is an answer of a stack that has the route, not API
// Gateway's: the client does not fall back to the try route.
func TestAcquireServiceNotFoundIsNotOldStack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
		f.intercept = func(c call) (*http.Response, error) {
			if c.Route == "wait" {
				return problemResponse(404, "not-found"), nil
			}
			return nil, nil
		}
		c := newFakeClient(t, f, client.WithoutKeepAlive())
		ctx, cancel := context.WithTimeout(context.Background(), sec(10))
		defer cancel()
		_, err := c.Acquire(ctx, "r", "waiter", time.Minute)
		var p *client.ProblemError
		if !errors.As(err, &p) || p.Slug() != "not-found" {
			t.Fatalf("Acquire: got %v, want the service's not-found problem", err)
		}
		if calls := f.log("acquire"); len(calls) != 2 || calls[0].Route != "try" || calls[1].Route != "wait" {
			t.Errorf("acquires: got %v, want a try, then one …/wait, no fallback", calls)
		}
	})
}

// TestAcquireTriesFirst: a waiting acquire's first request is a try on the
// quick route, so an uncontended one is that one request and never reaches
// the waiting route (whose throttle is small); only a try answered held
// (full) goes on, at once, to rounds on …/wait.
func TestAcquireTriesFirst(t *testing.T) {
	t.Parallel()
	for _, k := range skewKinds {
		for _, tt := range []struct {
			name    string
			res     string // "r" is held until 5 s
			wantAt  time.Duration
			wantLog []wire
		}{
			{name: "Free", res: "free", wantLog: []wire{{"try", 0, "", 0}}},
			{name: "Held", res: "r", wantAt: sec(5), wantLog: []wire{{"try", 0, "", 0}, {"wait", sec(20), "", 0}}},
		} {
			t.Run(k.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					c, log := k.setup(t, false, false, sec(5))
					ctx, cancel := context.WithTimeout(context.Background(), sec(30))
					defer cancel()
					if err := k.acquire(ctx, c, tt.res, "waiter"); err != nil {
						t.Fatalf("acquire: %v", err)
					}
					if got := at(time.Now()); got < tt.wantAt || got > tt.wantAt+sec(0.02) {
						t.Errorf("granted at %s, want %s", got, tt.wantAt)
					}
					if got := log(); !slices.Equal(got, tt.wantLog) {
						t.Errorf("acquires: got %v, want %v", got, tt.wantLog)
					}
				})
			})
		}
	}
}

// TestAcquireRetriesTheTry: a try that fails (503) is retried as a try:
// only a clean "held" sends an acquire to the waiting route.
func TestAcquireRetriesTheTry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		failures := 2
		f.intercept = func(c call) (*http.Response, error) {
			if c.Op == "acquire" && failures > 0 {
				failures--
				return problemResponse(503, "service-unavailable"), nil
			}
			return nil, nil
		}
		c := newFakeClient(t, f, client.WithoutKeepAlive())
		if _, err := c.Acquire(context.Background(), "r", "waiter", time.Minute); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		calls := f.log("acquire")
		if len(calls) != 3 {
			t.Fatalf("acquires: got %v, want two refused tries and a granted one", calls)
		}
		for _, c := range calls {
			if c.Route != "try" || c.Wait != 0 {
				t.Errorf("acquire %v to %q with wait %s: want a try without wait_seconds", c, c.Route, c.Wait)
			}
		}
	})
}
