package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Election chooses one leader among candidates: the holder of the lock
// whose resource is the election's name (see "Electing a leader" in the
// package documentation). An Election is one candidate and observer; it
// is safe for concurrent use.
type Election struct {
	c    *Client
	name string
	// turn admits one Campaign at a time.
	turn chan struct{}
	// lease is the leadership this Election won, until Resign succeeds.
	lease *Lease
}

// Leader is the candidate that leads an election: its live lease, as the
// service reports it. The times are the service's clock.
type Leader struct {
	// Owner is the leader's owner: its identity as a candidate.
	Owner string `json:"owner"`
	// FencingToken is the leadership lease's token; every term has a
	// larger one.
	FencingToken int64 `json:"fencing_token"`
	// AcquiredAt is when the term began.
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is when the lease ends unless renewed.
	ExpiresAt time.Time `json:"expires_at"`
}

// Observation is one change of an election's leadership seen by Observe.
type Observation struct {
	// Leader is who leads; nil when nobody does.
	Leader *Leader
	// Index is the watch index of the state (see WatchResult.Index):
	// Index/2 is the latest term's fencing token.
	Index int64
	// Skipped counts the terms that began and ended unseen since the
	// previous Observation: the fencing-token gap − 1, or the gap when the
	// latest term has ended too; 0 for the first Observation and after a
	// lock never taken (no token to count from).
	Skipped int
}

// NewElection returns the election called name on c: the lock with
// resource name. It does not touch the network.
func NewElection(c *Client, name string) *Election {
	return &Election{c: c, name: name, turn: make(chan struct{}, 1)}
}

// Name returns the election's name, its lock's resource.
func (e *Election) Name() string { return e.name }

// Campaign waits until this candidate leads, or until ctx ends, and
// returns the leadership lease: it renews itself, and its Context ends when
// the leadership is lost or resigned. opts shape the lease as for Acquire
// (WithTTL, WithOwner: the candidate's identity, unique by default,
// WithLockDelay); WithWait bounds the wait. While this Election leads,
// Campaign returns the same lease.
func (e *Election) Campaign(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("campaign %q: %w", e.name, context.Cause(ctx))
	}
	defer func() { <-e.turn }()
	if l := e.lease; l != nil && l.Err() == nil {
		return l, nil
	}
	lease, err := e.c.Acquire(ctx, e.name, "", 0, append([]AcquireOption{WithoutWaitLimit()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	lease.KeepAlive(context.Background()) // also on a Client WithoutKeepAlive
	e.lease = lease
	return lease, nil
}

// Resign ends the leadership this Election holds, releasing its lease as
// Lease.Release does; it is a no-op when the Election does not lead. On a
// temporary failure it may be called again.
func (e *Election) Resign(ctx context.Context) error {
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("resign %q: %w", e.name, context.Cause(ctx))
	}
	defer func() { <-e.turn }()
	l := e.lease
	if l == nil {
		return nil
	}
	err := l.Release(ctx)
	if err == nil || !retryable(err) {
		e.lease = nil
	}
	if definitive(err) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrReleased) {
		// The leadership had already ended (lost, force released, taken
		// over): nothing left to give up, as when it does not lead.
		return nil
	}
	if err != nil {
		return fmt.Errorf("resign: %w", err)
	}
	return nil
}

// Leader returns who leads the election now, from a strongly consistent
// read; ErrNoLeader (matching ErrNotFound too) when nobody does.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	lock, err := e.c.Status(ctx, e.name)
	if errors.Is(err, ErrNotFound) {
		return Leader{}, fmt.Errorf("election %q: %w (%w)", e.name, ErrNoLeader, err)
	}
	if err != nil {
		return Leader{}, fmt.Errorf("election %q: %w", e.name, err)
	}
	return leaderOf(lock), nil
}

func leaderOf(l Lock) Leader {
	return Leader{Owner: l.Owner, FencingToken: l.FencingToken, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}

// Observe returns a channel of the election's leadership: first the state
// when Observe is called, then every change, in order, with the terms
// missed in between counted in Skipped. It long-polls with Watch, retrying
// failures with backoff, and closes the channel when ctx ends (at once for
// a name the client refuses). An Observation waits for its reader: the
// next one reports what happened meanwhile.
func (e *Election) Observe(ctx context.Context) <-chan Observation {
	ch := make(chan Observation)
	go e.observe(ctx, ch)
	return ch
}

// minWatchRound is the shortest an unchanged watch answer may take before
// observe waits between rounds rather than long-polling (a service or HTTP
// client that does not let the watch wait).
const minWatchRound = time.Second

func (e *Election) observe(ctx context.Context, ch chan<- Observation) {
	defer close(ch)
	if checkWatch(e.name, 0, 0) != nil {
		return
	}
	var token int64 // the last Observation's term's fencing token
	follow(ctx, e.c, func(ctx context.Context, index int64, wait time.Duration) (WatchResult, int64, error) {
		r, err := e.c.Watch(ctx, e.name, index, wait)
		return r, r.Index, err
	}, func(r WatchResult) bool {
		select {
		case ch <- observation(token, r):
		case <-ctx.Done():
			return false
		}
		token = r.FencingToken
		if token == 0 {
			token = r.Index / 2
		}
		return true
	})
}

// follow long-polls a watch (watch asks once from index, waiting up to
// wait, and returns the answer and its index): it sends the first answer,
// then each whose index differs from the last sent, until ctx ends or send
// returns false. Failures are retried with backoff; a service that refuses
// the wait (a lower MAX_WAIT_SECONDS) is asked with shorter ones.
func follow[R any](ctx context.Context, c *Client, watch func(ctx context.Context, index int64, wait time.Duration) (R, int64, error), send func(R) bool) {
	var (
		seen     bool  // an answer was sent
		index    int64 // its index
		wait     time.Duration
		maxWait  = MaxServerWait
		failures int
	)
	for {
		sent := time.Now()
		r, rIndex, err := watch(ctx, index, wait)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if refusesWait(err) && wait > time.Second {
				// A service with a lower MAX_WAIT_SECONDS.
				maxWait = (wait / 2).Truncate(time.Second)
				wait = maxWait
				continue
			}
			if !sleepCtx(ctx, c.backoff.delay(failures, hint(err))) {
				return
			}
			failures++
			continue
		}
		failures, wait = 0, maxWait
		if seen && rIndex == index {
			if time.Since(sent) < minWatchRound && !sleepCtx(ctx, c.backoff.max) {
				return
			}
			continue
		}
		if !send(r) {
			return
		}
		seen, index = true, rIndex
	}
}

// observation is the Observation of watch answer r after one whose term
// had fencing token prev (0: none, or none seen).
func observation(prev int64, r WatchResult) Observation {
	o := Observation{Index: r.Index}
	if r.Lock != nil {
		l := leaderOf(*r.Lock)
		o.Leader = &l
	}
	tok := r.FencingToken
	if tok == 0 {
		tok = r.Index / 2
	}
	if prev > 0 && tok > prev {
		gap := tok - prev - 1
		if r.Lock == nil {
			gap++ // the latest term began and ended unseen too
		}
		o.Skipped = int(min(gap, int64(math.MaxInt)))
	}
	return o
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
