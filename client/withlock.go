package client

import (
	"context"
	"errors"
	"fmt"
)

// WithLock acquires resource as Acquire does (waiting up to
// DefaultAcquireWait unless ctx has a deadline or opts say otherwise; the
// TTL and owner from WithTTL and WithOwner, else DefaultTTL and a new
// unique owner), runs fn under the lease, and releases it, also when fn
// panics. fn's ctx ends when ctx does or the moment the lease may be lost;
// its Err reads the clock as lease.Check does, and context.Cause then gives
// the *LeaseLostError. Call lease.Check before each step that touches the
// protected resource. WithLock returns the lease's loss (matching
// ErrLeaseLost) joined with fn's error when the lease was lost, or found
// ended at the release, before WithLock returned: the work may then have
// run partly without the lock. A failed release is reported too. When the
// lock cannot be had it returns Acquire's error without calling fn.
func (c *Client) WithLock(ctx context.Context, resource string, fn func(ctx context.Context, lease *Lease) error, opts ...AcquireOption) error {
	lease, err := c.Acquire(ctx, resource, "", 0, opts...)
	if err != nil {
		return err
	}
	return runUnder(ctx, lease, fmt.Sprintf("with lock %q", resource), func(ctx context.Context) error { return fn(ctx, lease) })
}

// runUnder runs fn under lease and releases it, also when fn panics: the
// body of WithLock and WithSemaphore (label names the call in errors).
func runUnder(ctx context.Context, lease *Lease, label string, fn func(ctx context.Context) error) error {
	inner, cancel := context.WithCancelCause(ctx)
	fctx := &judgedContext{Context: inner, l: lease, cancel: cancel}
	stop := context.AfterFunc(lease.ctx, func() { cancel(lease.Err()) })
	released := false
	finish := func(ferr error) error {
		stop()
		// The loss first: a loss seen now (the clock) is fn's ctx's cause.
		lost := lease.Err()
		cancel(lost)
		released = true
		// The release outlives ctx: a lock left held blocks others for a
		// TTL. It retries for at most ReleaseRetryTimeout.
		rerr := lease.Release(context.WithoutCancel(ctx))
		if lost == nil {
			lost = lease.Err() // lost since, or ErrReleased
		}
		if errors.Is(lost, ErrLeaseLost) {
			return withLoss(ferr, lost, inner)
		}
		switch {
		case rerr == nil:
			return ferr
		case definitive(rerr):
			// Taken over or ended by the service's clock between two
			// renewals: the lease was gone before fn was done.
			return withLoss(ferr, lease.lostError(rerr), inner)
		default:
			return errors.Join(ferr, fmt.Errorf("%s: %w", label, rerr))
		}
	}
	defer func() {
		if !released { // fn panicked
			_ = finish(nil)
		}
	}()
	return finish(fn(fctx))
}

// withLoss is fn's error ferr with the lease's loss lost, which comes first:
// ferr alone when it reports the loss already, the loss alone when ferr is
// only fn's ctx.Err() after the loss cancelled it (fctx).
func withLoss(ferr, lost error, fctx context.Context) error {
	switch {
	case errors.Is(ferr, ErrLeaseLost):
		return ferr // fn said so already
	case ferr == nil, ferr == context.Canceled && errors.Is(context.Cause(fctx), ErrLeaseLost):
		return lost
	}
	return errors.Join(lost, ferr)
}
