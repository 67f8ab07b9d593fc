package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Lease is a lock held by this client until its local deadline (see
// Deadline). It renews itself in the background until released or lost;
// its Context ends the moment it is lost or released, and Err says why.
// Release every lease. A Lease is safe for concurrent use.
type Lease struct {
	c        *Client
	resource string
	owner    string
	token    int64
	ttl      time.Duration
	margin   time.Duration

	ctx    context.Context // ends when the lease does; Context wraps it in lctx
	cancel context.CancelCauseFunc
	lctx   *judgedContext

	// base and due let Check read the deadline without the lock: due is
	// the deadline as nanoseconds after base, on the monotonic clock.
	base time.Time
	due  atomic.Int64

	mu       sync.Mutex
	lock     Lock      // the service's latest view
	start    time.Time // when the request of the latest grant or renewal was sent
	deadline time.Time // local, monotonic: start + ttl - margin; due is its copy
	watchdog *time.Timer
	ended    bool // lost or released; ctx is (being) cancelled
	kaCancel context.CancelFunc
	kaDone   chan struct{}

	// releaseUnsure: a release attempt's outcome is unknown, so a later
	// 404 counts as released (see Release).
	releaseUnsure atomic.Bool

	// permit is set when the lease is a semaphore's permit (resource is
	// then the semaphore's name): its slot and the semaphore's number of
	// permits, and (under mu) the service's latest view of it.
	permit *permitState
	// rw is set when the lease is a read/write lock's (resource is then
	// its name): its mode, slot and the service's latest view.
	rw *rwState
}

// permitState is what a permit's lease knows beyond a lock's.
type permitState struct {
	slot, permits int
	info          PermitInfo // under the lease's mu
}

// newLease starts the lease's watchdog and, unless the client says
// otherwise, its keep-alive.
func newLease(c *Client, g grant, ttl time.Duration) *Lease {
	l := startLease(c, g, ttl)
	if !c.noRenew {
		l.KeepAlive(context.Background())
	}
	return l
}

// startLease is newLease without the keep-alive: a lock set's leases are
// renewed together by their Set.
func startLease(c *Client, g grant, ttl time.Duration) *Lease {
	margin := c.leaseMargin(ttl)
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{
		c: c, resource: g.lock.Resource, owner: g.lock.Owner, token: g.lock.FencingToken,
		ttl: ttl, margin: margin, ctx: ctx, cancel: cancel, base: g.t0,
		lock: g.lock, start: g.t0, deadline: g.t0.Add(ttl - margin),
	}
	l.lctx = &judgedContext{Context: ctx, l: l}
	l.due.Store(int64(ttl - margin))
	if g.permit != nil {
		l.permit = &permitState{slot: g.permit.Slot, permits: g.permits, info: *g.permit}
	}
	if g.rw != nil {
		l.rw = &rwState{mode: g.rw.Mode, slot: g.rw.Slot, info: *g.rw}
	}
	l.mu.Lock()
	l.watchdog = time.AfterFunc(time.Until(l.deadline)-DeliveryAllowance, l.expire)
	l.mu.Unlock()
	return l
}

// Resource returns the lock's name.
func (l *Lease) Resource() string { return l.resource }

// Owner returns the owner the lease is held for, as the service stored it:
// the one generated for it when the acquire named none.
func (l *Lease) Owner() string { return l.owner }

// FencingToken returns the lease's fencing token. Send it with every write
// to a system the lock protects; the system rejects tokens smaller than the
// largest it has seen.
func (l *Lease) FencingToken() int64 { return l.token }

// TTL returns the lease's time-to-live, which every renewal restarts.
func (l *Lease) TTL() time.Duration { return l.ttl }

// ExpiresAt returns when the lease ends by the service's clock, as of the
// latest grant or renewal. It is informational: use Deadline or Context to
// decide whether the lease is held.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lock.ExpiresAt
}

// Lock returns the lease as the service last reported it (at the grant or
// the latest renewal).
func (l *Lease) Lock() Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lock
}

// Deadline returns the local deadline: when the client gives the lease up
// unless a renewal succeeds first. The lease's timer ends it
// DeliveryAllowance earlier, so that Done is normally closed by then.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Context returns a context that is cancelled when the lease is lost or
// released. Its Err, Done and Value read the clock first, as Check does;
// context.Cause gives the same error as Err. Contexts derived from it learn
// of the loss from the lease's timer only: call Check before each step.
func (l *Lease) Context() context.Context { return l.lctx }

// Done returns a channel that is closed when the lease is lost or released;
// past the local deadline it is closed before Done returns.
func (l *Lease) Done() <-chan struct{} {
	l.judge()
	return l.ctx.Done()
}

// Check returns nil while the lease is held by the clock now: not released,
// not lost, and the local deadline not passed. Otherwise it ends the lease
// (if the deadline passed) and returns a *LeaseLostError matching
// ErrLeaseLost, or ErrReleased after Release. Call it before each step that
// touches the protected resource, and send FencingToken with the step.
func (l *Lease) Check() error {
	l.judge()
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Err returns what Check returns: nil while the lease is held by the clock
// now; then a *LeaseLostError matching ErrLeaseLost when it was lost, or
// ErrReleased after Release.
func (l *Lease) Err() error { return l.Check() }

// judge ends the lease when its local deadline has passed by the clock now:
// the watchdog's transition, made by whoever asks first (after a pause the
// work's own timer may run before the watchdog's).
func (l *Lease) judge() {
	if time.Since(l.base) < time.Duration(l.due.Load()) || l.ctx.Err() != nil {
		return
	}
	l.mu.Lock()
	if l.ended || time.Now().Before(l.deadline) { // a renewal moved it meanwhile
		l.mu.Unlock()
		return
	}
	l.endLocked(l.lostError(ErrLeaseExpired))
	l.mu.Unlock()
}

// expire runs when the watchdog fires, DeliveryAllowance before the local
// deadline.
func (l *Lease) expire() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if d := time.Until(l.deadline) - DeliveryAllowance; d > 0 { // a renewal moved the deadline meanwhile
		l.watchdog.Reset(d)
		l.mu.Unlock()
		return
	}
	l.endLocked(l.lostError(ErrLeaseExpired))
	l.mu.Unlock()
}

// endLocked ends the lease with cause, under l.mu: ctx is cancelled before
// anyone can see ended, so that Check never finds the lease ended but its
// ctx still live. (Cancelling only closes channels and starts AfterFunc
// goroutines: nothing of it calls back into the lease.)
func (l *Lease) endLocked(cause error) {
	l.ended = true
	l.watchdog.Stop()
	l.cancel(cause)
}

// lose ends the lease for reason unless it has ended already.
func (l *Lease) lose(reason error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.endLocked(l.lostError(reason))
	l.mu.Unlock()
}

// lostError is the *LeaseLostError of this lease lost for reason.
func (l *Lease) lostError(reason error) *LeaseLostError {
	e := &LeaseLostError{Resource: l.resource, FencingToken: l.token, ForceReleased: forceReleased(reason), Reason: reason}
	if l.permit != nil {
		e.Permit, e.Slot = true, l.permit.slot
	}
	if l.rw != nil {
		e.Mode, e.Slot = l.rw.mode, l.rw.slot
	}
	return e
}

// extend records a successful renewal sent at t0 (info: the permit's view,
// for a permit; rw: the lease's, for a read/write lock's). It returns false
// when the lease ended before the answer came.
func (l *Lease) extend(t0 time.Time, lock Lock, info *PermitInfo, rw *RWLeaseInfo) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	if !time.Now().Before(l.deadline) {
		// Too late: the lease may have lapsed before the renewal reached
		// the service (the watchdog is about to fire anyway).
		l.mu.Unlock()
		l.lose(ErrLeaseExpired)
		return false
	}
	l.lock = lock
	if info != nil && l.permit != nil {
		l.permit.info = *info
	}
	if rw != nil && l.rw != nil {
		l.rw.info = *rw
	}
	if t0.After(l.start) {
		l.start = t0
	}
	if d := t0.Add(l.ttl - l.margin); d.After(l.deadline) {
		l.deadline = d
		l.due.Store(int64(d.Sub(l.base)))
		l.watchdog.Reset(time.Until(d) - DeliveryAllowance)
	}
	l.mu.Unlock()
	return true
}

// Renew extends the lease by its TTL once. A refusal that means the lease
// is gone ends it (the error matches ErrLeaseLost too); a temporary failure
// leaves it held until its local deadline.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("renew %q: %w", l.resource, err)
	}
	t0 := time.Now()
	var (
		lock Lock
		info *PermitInfo
		rw   *RWLeaseInfo
		err  error
	)
	switch {
	case l.rw != nil:
		var i RWLeaseInfo
		i, err = l.c.RenewRW(ctx, l.resource, l.owner, l.rw.mode, l.rw.slot, l.ttl, l.token)
		lock, rw = i.lock(), &i
	case l.permit != nil:
		var p PermitInfo
		p, err = l.c.RenewPermit(ctx, l.resource, l.owner, l.permit.slot, l.ttl, l.token)
		lock, info = p.lock(), &p
	default:
		lock, err = l.c.Renew(ctx, l.resource, l.owner, l.ttl, l.token)
	}
	if err != nil {
		if definitive(err) || !retryable(err) {
			l.lose(err)
			return fmt.Errorf("renew %q: %w", l.resource, l.Err())
		}
		return err
	}
	if !l.extend(t0, lock, info, rw) {
		return fmt.Errorf("renew %q: %w", l.resource, l.Err())
	}
	return nil
}

// Release stops the keep-alive, cancels the lease's Context with
// ErrReleased and ends the lease at the service, retrying temporary failures
// (see the package documentation). It returns ErrNotFound when the lease had
// ended, ErrForbidden or ErrStaleToken when another lease replaced it, or
// the last temporary failure; Release may be called again after one.
func (l *Lease) Release(ctx context.Context) error {
	l.stopKeepAlive()
	l.mu.Lock()
	l.endLocked(ErrReleased)  // no-op for ctx when lost already: the loss stays the cause
	end := l.start.Add(l.ttl) // retrying past it is pointless
	l.mu.Unlock()
	do := l.c.lockRelease(l.resource, l.owner, l.token)
	if l.permit != nil {
		do = l.c.permitRelease(l.resource, l.owner, l.permit.slot, l.token)
	}
	if l.rw != nil {
		do = l.c.rwRelease(l.resource, l.owner, l.rw.mode, l.rw.slot, l.token)
	}
	return l.c.releaseRetrying(ctx, do, end, &l.releaseUnsure)
}

// judgedContext is a context that judges lease l by the clock before it
// answers: the lease's own Context (cancel nil: judging ends the lease), or
// the context of a function run under the lease (cancel ends it with the
// lease's error).
type judgedContext struct {
	context.Context
	l      *Lease
	cancel context.CancelCauseFunc
}

func (c *judgedContext) judge() {
	if err := c.l.Check(); err != nil && c.cancel != nil {
		c.cancel(err)
	}
}

// Done judges the lease, then returns the context's channel.
func (c *judgedContext) Done() <-chan struct{} {
	c.judge()
	return c.Context.Done()
}

// Err judges the lease, then returns the context's error.
func (c *judgedContext) Err() error {
	c.judge()
	return c.Context.Err()
}

// Value judges the lease, so that context.Cause reads the clock too.
func (c *judgedContext) Value(key any) any {
	c.judge()
	return c.Context.Value(key)
}

// String names the context for fmt.
func (c *judgedContext) String() string { return "client.Lease(" + c.l.resource + ").Context" }
