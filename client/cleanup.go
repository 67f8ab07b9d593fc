package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Drain waits until the client has released the leases granted after their
// caller stopped waiting, or until ctx ends. Call it before the process
// exits, or such a lease blocks its resource until its TTL runs out.
func (c *Client) Drain(ctx context.Context) error {
	return c.cleanups.wait(ctx)
}

// releaseLater runs the clean-up release do (see release) in the
// background. Drain waits for it.
func (c *Client) releaseLater(ctx context.Context, do func(context.Context) error) {
	c.cleanups.add()
	go func() {
		defer c.cleanups.done()
		c.release(ctx, do)
	}()
}

// release is the clean-up release: do is one release request; ctx only
// lends its values; temporary failures are retried for up to
// ReleaseRetryTimeout; the rest are ignored (the lease runs out by itself).
func (c *Client) release(ctx context.Context, do func(context.Context) error) {
	_ = c.releaseRetrying(context.WithoutCancel(ctx), do, time.Time{}, new(atomic.Bool))
}

// lockRelease is the release request of owner's lease on resource (token
// 0: whichever is live), for release and releaseRetrying.
func (c *Client) lockRelease(resource, owner string, token int64) func(context.Context) error {
	return func(ctx context.Context) error { return c.Release(ctx, resource, owner, token) }
}

// releaseRetrying sends the release request do, retrying temporary
// failures (503, throttling, network) with backoff until ctx ends,
// ReleaseRetryTimeout has passed, or (when it is not zero) until, when the
// lease has run out anyway; it returns the last attempt's error. unsure
// records that an attempt's outcome is unknown (it may have
// released the lease unheard): a later 404 then counts as released, unless
// the service says an operator force released the lease. It lives as long
// as the lease, so that a Release called again keeps it.
func (c *Client) releaseRetrying(ctx context.Context, do func(context.Context) error, until time.Time, unsure *atomic.Bool) error {
	ctx, cancel := context.WithTimeout(ctx, ReleaseRetryTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := do(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrNotFound) && unsure.Load() && !forceReleased(err):
			return nil
		case !retryable(err):
			return err
		}
		if outcomeOf(err) == unknown {
			unsure.Store(true)
		}
		delay := c.backoff.delay(attempt, hint(err))
		if !until.IsZero() && time.Now().Add(delay).After(until) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// cleanups counts the clean-up releases under way, for Drain.
type cleanups struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (p *cleanups) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		p.idle = make(chan struct{})
	}
	p.n++
}

func (p *cleanups) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n--; p.n == 0 {
		close(p.idle)
	}
}

func (p *cleanups) wait(ctx context.Context) error {
	p.mu.Lock()
	idle := p.idle
	n := p.n
	p.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain: %w", context.Cause(ctx))
	}
}
