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
// context.Cause then gives the *LeaseLostError. WithLock returns fn's
// error, joined with the lease's loss (matching ErrLeaseLost) when the lease
// was lost, or found ended at the release, before WithLock returned: the
// work may then have run partly without the lock. A failed release is
// reported too. When the lock cannot be had it returns Acquire's error
// without calling fn.
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
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lease.Context(), func() { cancel(lease.Err()) })
	released := false
	finish := func(ferr error) error {
		stop()
		cancel(nil)
		released = true
		// The release outlives ctx: a lock left held blocks others for a
		// TTL. It retries for at most ReleaseRetryTimeout.
		rerr := lease.Release(context.WithoutCancel(ctx))
		if lost := lease.Err(); errors.Is(lost, ErrLeaseLost) {
			if errors.Is(ferr, ErrLeaseLost) {
				return ferr // fn said so already
			}
			return errors.Join(ferr, lost)
		}
		switch {
		case rerr == nil:
			return ferr
		case definitive(rerr):
			// Taken over or ended by the service's clock between two
			// renewals: the lease was gone before fn was done.
			return errors.Join(ferr, lease.lostError(rerr))
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
