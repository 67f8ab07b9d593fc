package goclient_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/local"
)

// TestDefaultClientUnderStackCapacity: a default Client's waiting acquires
// (Acquire, AcquireSemaphore with the default wait) of free names, about
// 100 a second for 3 s against the runner with the stack's capacity model,
// are all granted without one answer 429. Each is one try on the quick
// route (1,000/s); none spends the waiting route's throttle (lock 15/s,
// burst 75; semaphore 4/s, burst 20), which the same load sent to …/wait
// would overrun within a second.
func TestDefaultClientUnderStackCapacity(t *testing.T) {
	t.Parallel()
	const (
		perSecond = 100
		seconds   = 3
	)
	tests := []struct {
		name      string
		try, wait string // the route keys
		acquire   func(ctx context.Context, c *client.Client, name string) error
	}{
		{name: "Lock", try: lockTry, wait: lockWait, acquire: func(ctx context.Context, c *client.Client, name string) error {
			l, err := c.Acquire(ctx, name, "", 0)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{name: "Semaphore", try: semTry, wait: semWait, acquire: func(ctx context.Context, c *client.Client, name string) error {
			p, err := c.AcquireSemaphore(ctx, name, 2, "", 0)
			if err != nil {
				return err
			}
			return p.Release(ctx)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{Capacity: local.StackCapacity()})
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			var (
				wg      sync.WaitGroup
				granted atomic.Int64
				mu      sync.Mutex
				errs    []error
			)
			tick := time.NewTicker(time.Second / perSecond)
			for i := range perSecond * seconds {
				<-tick.C
				wg.Add(1)
				go func() {
					defer wg.Done()
					// context.Background: Acquire's default wait bound (30 s).
					if err := tt.acquire(context.Background(), c, fmt.Sprintf("%s-%d", resourceName(t), i)); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					granted.Add(1)
				}()
			}
			tick.Stop()
			wg.Wait()
			counts := srv.Counts()
			t.Logf("%d acquires of free names at %d/s: %d granted; runner counts %v, throttled %v, refused %v",
				perSecond*seconds, perSecond, granted.Load(), counts.Requests, counts.Throttled, counts.Refused)
			if got, want := granted.Load(), int64(perSecond*seconds); got != want {
				t.Errorf("granted and released: got %d, want %d; the first errors: %v", got, want, errs[:min(3, len(errs))])
			}
			if len(counts.Throttled) != 0 || len(counts.Refused) != 0 {
				t.Errorf("answered 429 by route: got %v, want none; 500 (concurrency) by route: got %v, want none",
					counts.Throttled, counts.Refused)
			}
			if got := counts.Requests[tt.wait]; got != 0 {
				t.Errorf("requests to %s: got %d, want 0 (every name was free)", tt.wait, got)
			}
			// One try per acquire; a try whose answer came later than the
			// client waits for (a loaded machine) is sent again, so allow
			// 5 % of them as retries.
			if got, want := counts.Requests[tt.try], int64(perSecond*seconds); got < want || got > want+want/20 {
				t.Errorf("requests to %s: got %d, want %d (one try per acquire) up to %d (5 %% of them retried)", tt.try, got, want, want+want/20)
			}
		})
	}
}

// TestHotLockUnderStackCapacity: eight default Clients contend for one
// lock (half with WithLock, half with Acquire and Release), each taking it
// rounds times, against the runner with the stack's capacity model. Never
// are two holders at once, the fencing tokens strictly increase in the
// order the lock was held, every call finishes with the lock, and no
// request is answered 429. Every acquire tries first on the quick route;
// one whose try is answered held spends one round on the waiting route
// (15/s, burst 75), and the test logs how many /wait requests a handoff
// cost.
func TestHotLockUnderStackCapacity(t *testing.T) {
	t.Parallel()
	const (
		clients = 8
		rounds  = 6
	)
	srv := testenv.Start(t, testenv.Options{Capacity: local.StackCapacity()})
	res := resourceName(t)
	ctx := testContext(t, 2*time.Minute)
	var (
		holders atomic.Int32
		mu      sync.Mutex
		tokens  []int64 // in the order the lock was held
		overlap []string
		errs    []error
	)
	// hold is the critical section: it checks that nobody else holds the
	// lock and records the lease's fencing token.
	hold := func(who string, l *client.Lease) error {
		if n := holders.Add(1); n != 1 {
			mu.Lock()
			overlap = append(overlap, fmt.Sprintf("%s took token %d with %d holders", who, l.FencingToken(), n))
			mu.Unlock()
		}
		mu.Lock()
		tokens = append(tokens, l.FencingToken())
		mu.Unlock()
		holders.Add(-1)
		return nil
	}
	start := make(chan struct{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range clients {
		c, err := client.New(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		who := fmt.Sprintf("client %d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range rounds {
				var err error
				if w%2 == 0 {
					err = c.WithLock(ctx, res, func(_ context.Context, l *client.Lease) error { return hold(who, l) })
				} else {
					var l *client.Lease
					if l, err = c.Acquire(ctx, res, "", 0); err == nil {
						err = errors.Join(hold(who, l), l.Release(ctx))
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", who, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	close(start)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("the clients did not finish within 2 minutes: %d of %d holds", len(tokens), clients*rounds)
	}
	counts := srv.Counts()
	handoffs := int64(len(tokens) - 1)
	t.Logf("%d holds of one lock by %d clients; runner counts %v (%.2f /wait requests a handoff), throttled %v",
		len(tokens), clients, counts.Requests, float64(counts.Requests[lockWait])/float64(max(handoffs, 1)), counts.Throttled)
	for _, e := range errs {
		t.Error(e)
	}
	for _, o := range overlap {
		t.Errorf("two holders at once: %s", o)
	}
	if got, want := len(tokens), clients*rounds; got != want {
		t.Errorf("holds: got %d, want %d", got, want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("fencing tokens in hold order: got %d after %d, want strictly increasing", tokens[i], tokens[i-1])
		}
	}
	if len(counts.Throttled) != 0 || len(counts.Refused) != 0 {
		t.Errorf("answered 429 by route: got %v, want none; 500 (concurrency) by route: got %v, want none",
			counts.Throttled, counts.Refused)
	}
	// Every acquire tried first: one try each, and more for a try that
	// was answered 503 and tried again.
	if got := counts.Requests[lockTry]; got < int64(clients*rounds) {
		t.Errorf("requests to %s: got %d, want at least %d (each acquire tries first); all counts %v",
			lockTry, got, clients*rounds, maps.Clone(counts.Requests))
	}
}
