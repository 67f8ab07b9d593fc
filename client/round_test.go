package client_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// TestAcquireRoundLeavesRoomForRenewal is issue 14's reproduction: a grant
// near the end of a round at the service, then a first renewal that takes
// 700 ms. A round of min(20 s, ttl/2) ignored the lease margin: with
// lockctl run's margin (--grace + min(ttl/10, 1 s), up to ttl/2) a grant
// 4.4 s into a 5 s round left 0.6 s before the local deadline, and the
// slow renewal lost a lease the service still held. Rounds of at most
// ⅔ × (ttl − margin) leave a third of the local validity after any grant,
// and the keep-alive times its first renewal from the request that was
// granted.
func TestAcquireRoundLeavesRoomForRenewal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ttl      time.Duration
		margin   time.Duration // WithLeaseMargin; 0: the default
		wantWait []time.Duration
	}{
		// lockctl run --ttl 10: grace min(10 s, ttl/2 − 1 s) = 4 s, margin
		// 5 s: rounds of ⅔ × 5 s = 3 s (min(20 s, ttl/2) asked for 5 s).
		{name: "LockctlRunMargin", ttl: sec(10), margin: sec(5), wantWait: []time.Duration{sec(3)}},
		{name: "DefaultMargin", ttl: sec(10), wantWait: []time.Duration{sec(6)}},
		{name: "LongLease", ttl: sec(120), wantWait: []time.Duration{sec(20)}},
		// ⅔ × (2 s − 0.2 s) = 1.2 s: one-second rounds.
		{name: "ShortLease", ttl: sec(2), wantWait: []time.Duration{sec(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: 5 * time.Minute})
				renewals := 0
				f.intercept = func(c call) (*http.Response, error) {
					switch {
					case c.Op == "acquire" && c.Route == "wait":
						// The lock comes free 0.6 s before the round's
						// end, the service's last moment to grant it.
						time.Sleep(c.Wait - 600*time.Millisecond)
						f.serve(call{Op: "release", Resource: "r", Owner: "holder"})
					case c.Op == "renew":
						if renewals++; renewals == 1 {
							time.Sleep(700 * time.Millisecond)
						}
					}
					return nil, nil
				}
				var opts []client.Option
				if tt.margin > 0 {
					opts = append(opts, client.WithLeaseMargin(tt.margin))
				}
				c := newFakeClient(t, f, opts...)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				l, err := c.Acquire(ctx, "r", "", tt.ttl)
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				defer l.Release(context.Background())
				granted := at(time.Now())
				// Long enough for the first renewal and its answer, and
				// past the deadline the grant alone gave.
				time.Sleep(tt.ttl)
				if err := l.Err(); err != nil {
					t.Fatalf("lease granted at %s lost: %v (renewals %v)", granted, err, callTimes(f.log("renew")))
				}
				if asked, _ := waits(f.log("acquire")); !slices.Equal(asked, tt.wantWait) {
					t.Errorf("rounds: got wait_seconds %v, want %v", asked, tt.wantWait)
				}
			})
		})
	}
}

// TestAcquireShortLeasePolls: when two thirds of a lease's local validity
// is under a second, Acquire does not ask the service to wait (a grant at
// the end of a one-second round could outlive the lease) and polls
// instead.
func TestAcquireShortLeasePolls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: time.Minute})
		time.AfterFunc(time.Second, func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
		c := newFakeClient(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "r", "", time.Second) // ⅔ × 0.9 s
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		defer l.Release(context.Background())
		calls := f.log("acquire")
		if asked, _ := waits(calls); len(asked) != 0 {
			t.Errorf("wait_seconds sent: %v, want none", asked)
		}
		if len(calls) < 3 {
			t.Errorf("acquires: got %v, want polls until the release at 1s", calls)
		}
	})
}
