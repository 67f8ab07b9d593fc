package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

func TestAcquireStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		opts      []client.Option
		wantCalls int
	}{
		// The holder's lease has 30 s left: Retry-After 30, capped at the
		// backoff maximum (200 ms), so attempts at 0 and 200 ms.
		{name: "HeldLonger", wantCalls: 2},
		// Retry-After is a lower bound on the wait (here capped at 5 s,
		// beyond the context's end), so only one request goes out.
		{name: "RetryAfterBeyondContext", opts: []client.Option{client.WithBackoff(time.Millisecond, 5*time.Second)}, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 30 * time.Second})
				c := newFakeClient(t, f, tt.opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				l, err := c.Acquire(ctx, "r", "", 30*time.Second)
				if l != nil {
					t.Fatalf("Acquire: got a lease with token %d, want none", l.FencingToken())
				}
				if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrHeld) {
					t.Errorf("Acquire: got %v, want an error matching context.DeadlineExceeded and ErrHeld", err)
				}
				if got := at(time.Now()); got != 300*time.Millisecond {
					t.Errorf("Acquire returned at %s, want when the context ended (300ms)", got)
				}
				if err := c.Drain(context.Background()); err != nil {
					t.Errorf("Drain: %v", err)
				}
				if got := f.log("acquire"); len(got) != tt.wantCalls {
					t.Errorf("acquires: got %v, want %d", got, tt.wantCalls)
				}
				// Every answer was a clean "held": nothing to clean up.
				if got := f.log("release"); len(got) != 0 {
					t.Errorf("releases: got %v, want none", got)
				}
			})
		})
	}
}

// TestAcquireReleasesLateGrant: the caller stops waiting while the
// acquire is in flight, and the service grants it after all. The client
// must release that lease, with its owner and fencing token, or it would
// block the resource for a whole TTL with nobody renewing it.
func TestAcquireReleasesLateGrant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		owner string
		try   bool // TryAcquire, else Acquire
		// held: another owner holds the lock until the late grant, so
		// Acquire's try is answered held and the grant is its waiting
		// round's; else the grant is the first request's (the try's).
		held bool
	}{
		{name: "Acquire", owner: "worker-1"},
		{name: "AcquireGeneratedOwner", owner: ""},
		{name: "AcquireWaitingRound", owner: "worker-1", held: true},
		{name: "AcquireWaitingRoundGeneratedOwner", owner: "", held: true},
		{name: "TryAcquire", owner: "worker-1", try: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				f := newFakeAPI()
				if tt.held {
					f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: time.Minute})
				}
				f.intercept = func(c call) (*http.Response, error) {
					if c.Op == "acquire" && (!tt.held || c.Route == "wait") {
						<-ctx.Done() // the caller gives up first...
						time.Sleep(100 * time.Millisecond)
						if tt.held {
							f.serve(call{Op: "release", Resource: "r", Owner: "holder"})
						}
						return f.serve(c), nil // ...then the grant arrives
					}
					return nil, nil
				}
				c := newFakeClient(t, f)
				var l *client.Lease
				var err error
				if tt.try {
					l, err = c.TryAcquire(ctx, "r", tt.owner, 30*time.Second)
				} else {
					l, err = c.Acquire(ctx, "r", tt.owner, 30*time.Second)
				}
				if l != nil || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("acquire: got lease %v, error %v; want no lease and context.DeadlineExceeded", l, err)
				}
				if got := at(time.Now()); got != time.Second {
					t.Errorf("acquire returned at %s, want when the context ended (1s)", got)
				}
				if err := c.Drain(context.Background()); err != nil {
					t.Fatalf("Drain: %v", err)
				}
				granted := f.record("r")
				if granted.token == 0 {
					t.Fatal("the service granted nothing")
				}
				if tt.owner != "" && granted.owner != tt.owner {
					t.Errorf("granted owner: got %q, want %q", granted.owner, tt.owner)
				}
				releases := f.log("release")
				if len(releases) != 1 || releases[0].Owner != granted.owner || releases[0].Token != granted.token {
					t.Fatalf("releases: got %v, want one for owner %q with token %d", releases, granted.owner, granted.token)
				}
				if got := at(releases[0].At); got != 1100*time.Millisecond {
					t.Errorf("release sent at %s, want as soon as the grant arrived (1.1s)", got)
				}
				if owner, token, ok := f.holder("r"); ok {
					t.Errorf("lock still held by %q (token %d), want it free", owner, token)
				}
				if rounds := len(f.log("acquire")); tt.held && rounds != 2 {
					t.Errorf("acquires: got %d, want 2 (the try answered held, the round granted late)", rounds)
				}
			})
		})
	}
}

// TestAcquireUnknownOutcome: when an acquire may have been applied but no
// answer said so, the client releases the lease a generated owner may hold
// (nobody else could), and leaves a chosen owner's alone.
func TestAcquireUnknownOutcome(t *testing.T) {
	t.Parallel()
	lost := errors.New("connection reset by peer")
	tests := []struct {
		name    string
		owner   string
		try     bool // TryAcquire, else Acquire for 1 s
		holder  bool // "holder" holds the lock at the start, for 30 s
		answer  func(f *fakeAPI, n int, c call) (*http.Response, error)
		wantErr error
		// wantRelease: the acquire's owner is released (token 0).
		wantRelease bool
		wantHeldBy  string // "": free
	}{
		{
			name: "GeneratedOwnerAnswerLost", try: true,
			answer:  func(f *fakeAPI, _ int, c call) (*http.Response, error) { f.serve(c); return nil, lost },
			wantErr: lost, wantRelease: true,
		},
		{
			name: "ChosenOwnerAnswerLost", owner: "worker-1", try: true,
			answer:  func(f *fakeAPI, _ int, c call) (*http.Response, error) { f.serve(c); return nil, lost },
			wantErr: lost, wantHeldBy: "worker-1",
		},
		{
			name: "GeneratedOwnerUnavailable", try: true,
			answer: func(f *fakeAPI, _ int, c call) (*http.Response, error) {
				f.serve(c)
				return problemResponse(503, "service-unavailable"), nil
			},
			wantErr: client.ErrUnavailable, wantRelease: true,
		},
		{
			name: "GeneratedOwnerUnavailableUntilContextEnds",
			answer: func(f *fakeAPI, n int, c call) (*http.Response, error) {
				if n == 1 {
					f.serve(c)
				}
				return problemResponse(503, "service-unavailable"), nil
			},
			wantErr: context.DeadlineExceeded, wantRelease: true,
		},
		{
			// A clean "held" after an unknown outcome shows that the
			// earlier attempt holds nothing.
			name: "UnknownThenHeld", holder: true,
			answer: func(f *fakeAPI, n int, c call) (*http.Response, error) {
				if n == 1 {
					return nil, lost
				}
				return nil, nil
			},
			wantErr: client.ErrHeld, wantHeldBy: "holder",
		},
		{
			name: "CleanHeld", try: true, holder: true,
			answer:  func(*fakeAPI, int, call) (*http.Response, error) { return nil, nil },
			wantErr: client.ErrHeld, wantHeldBy: "holder",
		},
		{
			// A refusal after an unknown outcome settles nothing.
			name: "UnknownThenRefused",
			answer: func(f *fakeAPI, n int, c call) (*http.Response, error) {
				if n == 1 {
					f.serve(c)
					return nil, lost
				}
				return jsonResponse(403, nil, map[string]string{"message": "Forbidden"}), nil
			},
			wantErr: &client.ProblemError{}, wantRelease: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				if tt.holder {
					f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 30 * time.Second})
				}
				n := 0
				f.intercept = func(c call) (*http.Response, error) {
					if c.Op != "acquire" {
						return nil, nil
					}
					n++
					return tt.answer(f, n, c)
				}
				c := newFakeClient(t, f, client.WithoutKeepAlive())
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				var err error
				if tt.try {
					_, err = c.TryAcquire(ctx, "r", tt.owner, 30*time.Second)
				} else {
					_, err = c.Acquire(ctx, "r", tt.owner, 30*time.Second)
				}
				var p *client.ProblemError
				if errors.As(tt.wantErr, &p) {
					if !errors.As(err, &p) {
						t.Errorf("acquire: got %v, want a *client.ProblemError", err)
					}
				} else if !errors.Is(err, tt.wantErr) {
					t.Errorf("acquire: got %v, want %v", err, tt.wantErr)
				}
				if err := c.Drain(context.Background()); err != nil {
					t.Fatalf("Drain: %v", err)
				}
				acquires := f.log("acquire")
				if len(acquires) == 0 {
					t.Fatal("no acquire was sent")
				}
				owner := acquires[0].Owner
				releases := f.log("release")
				if tt.wantRelease {
					if len(releases) != 1 || releases[0].Owner != owner || releases[0].Token != 0 {
						t.Errorf("releases: got %v, want one by the acquire's owner %q", releases, owner)
					}
				} else if len(releases) != 0 {
					t.Errorf("releases: got %v, want none", releases)
				}
				if got, _, _ := f.holder("r"); got != tt.wantHeldBy {
					t.Errorf("holder afterwards: got %q, want %q", got, tt.wantHeldBy)
				}
			})
		})
	}
}
