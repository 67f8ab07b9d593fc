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

// TestWatch: one Watch against the fake service, on the bubble's clock:
// what it asks, what it answers, and which failures it retries.
func TestWatch(t *testing.T) {
	t.Parallel()
	type answerFunc = func(*fakeAPI, call) (*http.Response, error)
	transportError := func(*fakeAPI, call) (*http.Response, error) { return nil, errors.New("connection refused") }
	tests := []struct {
		name string
		// held: "w1" holds the lock before the watch; release: it releases
		// it then (0: never).
		held    bool
		release time.Duration
		index   func(token int64) int64 // the index asked with
		wait    time.Duration
		script  []answerFunc // the first answers to the watch
		ctx     time.Duration
		// The answer, by the holder's token (0 when nothing is held), and
		// when it comes.
		wantIndex   func(token int64) int64
		wantChanged bool
		wantLock    bool
		wantAt      time.Duration // -1: any time
		wantCalls   int
		wantErr     []error // an error that matches them all; nil: success
	}{
		{name: "NeverTaken", index: zero, wantIndex: zero, wantCalls: 1},
		{name: "Held", held: true, index: zero, wantIndex: twice, wantChanged: true, wantLock: true, wantCalls: 1},
		{name: "WaitsForRelease", held: true, release: sec(3), index: twice, wait: sec(20),
			wantIndex: ended, wantChanged: true, wantAt: sec(3), wantCalls: 1},
		{name: "WaitRunsOut", held: true, index: twice, wait: sec(5),
			wantIndex: twice, wantLock: true, wantAt: sec(5), wantCalls: 1},
		{name: "RetriesUnavailable", held: true, index: zero, script: []answerFunc{unavailable, routeThrottle, lambdaThrottle},
			wantIndex: twice, wantChanged: true, wantLock: true, wantAt: -1, wantCalls: 4},
		{name: "InternalIsFinal", index: zero, script: []answerFunc{internal}, wantErr: []error{}, wantCalls: 1},
		{name: "NetworkFailureIsFinal", index: zero, script: []answerFunc{transportError}, wantErr: []error{}, wantCalls: 1},
		{name: "GivesUpWhenCtxEnds", index: zero, ctx: sec(3),
			script:    []answerFunc{unavailable, unavailable, unavailable, unavailable, unavailable, unavailable, unavailable, unavailable},
			wantErr:   []error{context.DeadlineExceeded, client.ErrUnavailable},
			wantCalls: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				c := newFakeClient(t, f, client.WithBackoff(time.Second, 2*time.Second))
				var token int64
				if tt.held {
					l := fakeLease(t, c, "r", "w1")
					token = l.FencingToken()
					if tt.release > 0 {
						time.AfterFunc(tt.release, func() { _ = l.Release(context.Background()) })
					} else {
						defer l.Release(context.Background())
					}
				}
				if tt.script != nil {
					scripted(f, "watch", tt.script...)
				}
				ctx := context.Background()
				if tt.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.ctx)
					defer cancel()
				}
				got, err := c.Watch(ctx, "r", tt.index(token), tt.wait)
				calls := f.log("watch")
				switch {
				case tt.wantErr != nil:
					if err == nil {
						t.Fatalf("Watch: got %+v, want an error", got)
					}
					for _, want := range tt.wantErr {
						if !errors.Is(err, want) {
							t.Errorf("Watch: got %v, want it to match %v", err, want)
						}
					}
				case err != nil:
					t.Fatalf("Watch: %v", err)
				default:
					if got.Resource != "r" || got.Index != tt.wantIndex(token) || got.Changed != tt.wantChanged ||
						(got.Lock != nil) != tt.wantLock || got.FencingToken != token {
						t.Errorf("Watch: got %+v, want index %d, changed %t, lock %t, token %d",
							got, tt.wantIndex(token), tt.wantChanged, tt.wantLock, token)
					}
					if got.Lock != nil && (got.Lock.Owner != "w1" || got.Lock.FencingToken != token) {
						t.Errorf("Watch: lock %+v, want w1's with token %d", got.Lock, token)
					}
					// The fake service looks every 10 ms.
					if now := at(time.Now()); tt.wantAt >= 0 && (now < tt.wantAt || now > tt.wantAt+10*time.Millisecond) {
						t.Errorf("answered at %s, want %s", now, tt.wantAt)
					}
				}
				if tt.wantCalls >= 0 && len(calls) != tt.wantCalls {
					t.Errorf("watch requests: got %v, want %d", calls, tt.wantCalls)
				}
				for _, cl := range calls {
					if cl.Index != tt.index(token) || cl.Wait != tt.wait {
						t.Errorf("request %v: index %d wait %s, want %d and %s", cl, cl.Index, cl.Wait, tt.index(token), tt.wait)
					}
				}
			})
		})
	}
}

func zero(int64) int64      { return 0 }
func twice(tok int64) int64 { return 2 * tok }
func ended(tok int64) int64 { return 2*tok + 1 }

// TestWatchArgs: arguments the service would refuse are refused before
// sending.
func TestWatchArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		resource string
		index    int64
		wait     time.Duration
	}{
		{name: "EmptyResource", resource: ""},
		{name: "SlashInResource", resource: "a/b"},
		{name: "NegativeIndex", resource: "r", index: -1},
		{name: "NegativeWait", resource: "r", wait: -time.Second},
		{name: "WaitPastMax", resource: "r", wait: client.MaxServerWait + time.Second},
		{name: "WaitNotWholeSeconds", resource: "r", wait: 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI()
			c := newFakeClient(t, f)
			if _, err := c.Watch(context.Background(), tt.resource, tt.index, tt.wait); !errors.Is(err, client.ErrValidation) {
				t.Errorf("Watch: got %v, want ErrValidation", err)
			}
			if calls := f.log(); len(calls) != 0 {
				t.Errorf("requests: got %v, want none", calls)
			}
		})
	}
}

// TestWatchWaitWithinHTTPTimeout: a wait the HTTP client's timeout would
// cut off is shortened, so that the answer arrives.
func TestWatchWaitWithinHTTPTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		c := newFakeClient(t, f, client.WithHTTPClient(&http.Client{Transport: f, Timeout: 10 * time.Second}))
		r, err := c.Watch(context.Background(), "r", 0, client.MaxServerWait)
		if err != nil || r.Changed {
			t.Fatalf("Watch: got %+v, %v; want unchanged", r, err)
		}
		if calls := f.log("watch"); len(calls) != 1 || calls[0].Wait != 5*time.Second {
			t.Errorf("requests: got %v, want one with wait_seconds 5 (the 10 s timeout less 5 s for the answer)", calls)
		}
	})
}
