package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the clean-up after an acquire its caller stopped waiting for.
const (
	// lateAnswerTimeout is how long an acquire's answer is still awaited
	// after its caller stopped waiting for it, beyond the wait_seconds it
	// asked the service for: longer than the service takes to decide (its
	// store budget is 3 s).
	lateAnswerTimeout = 10 * time.Second
	// answerMargin is kept between a round's wait_seconds and the HTTP
	// client's timeout: the service answers within wait_seconds plus its
	// store budget (3 s).
	answerMargin = 5 * time.Second
)

// TryAcquire asks once for a lease of ttl (whole seconds, at least one; 0
// for WithTTL's, else DefaultTTL) on resource for owner ("" for WithOwner's,
// else a new unique owner). It returns the lease, or a *HeldError matching
// ErrHeld when another owner holds the lock.
func (c *Client) TryAcquire(ctx context.Context, resource, owner string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	a, err := c.newAcquisition(resource, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	return a.try(ctx)
}

// try is TryAcquire's one attempt.
func (a *acquisition) try(ctx context.Context) (*Lease, error) {
	r, abandoned := a.attempt(ctx, 0)
	if abandoned {
		return nil, fmt.Errorf("%s: %w", a.label(), context.Cause(ctx))
	}
	a.note(r)
	if r.out == granted {
		return newLease(a.c, r.grant, a.ttl), nil
	}
	a.abandon(ctx)
	return nil, r.err
}

// Acquire waits for a lease of ttl on resource for owner (the defaults as
// for TryAcquire): it tries first, and while the lock is held waits at the
// service (or polls), retrying temporary failures, until ctx ends and for
// at most DefaultAcquireWait when ctx has no deadline (WithWait sets
// another bound, WithoutWaitLimit none). When the wait runs out while the lock is held, the error is a
// *HeldError matching ErrHeld; when ctx ended it, the error matches ctx's
// error too.
func (c *Client) Acquire(ctx context.Context, resource, owner string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	a, err := c.newAcquisition(resource, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	return a.wait(ctx)
}

// waitBound is how long Acquire waits beyond ctx's own end: WithWait's
// bound, else DefaultAcquireWait when ctx has no deadline; ok is false when
// nothing but ctx bounds the wait.
func (a *acquisition) waitBound(ctx context.Context) (d time.Duration, ok bool) {
	switch {
	case a.opt.noWaitLimit:
		return 0, false
	case a.opt.waitSet:
		return a.opt.wait, true
	}
	if _, has := ctx.Deadline(); has {
		return 0, false
	}
	return DefaultAcquireWait, true
}

// wait is Acquire's loop.
func (a *acquisition) wait(caller context.Context) (*Lease, error) {
	c, ttl := a.c, a.ttl
	ctx := caller
	bound, bounded := a.waitBound(caller)
	if bounded {
		if bound == 0 {
			return a.try(ctx)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(caller, bound)
		defer cancel()
	}
	// gaveUp is the error for the wait's end: the caller's ctx's, or the
	// bound's.
	gaveUp := func(last error) error {
		if caller.Err() != nil || !bounded {
			return waitErr(caller, a.label(), last)
		}
		if last == nil {
			return fmt.Errorf("%s: no answer within the wait of %s: %w", a.label(), bound, context.DeadlineExceeded)
		}
		return fmt.Errorf("%s: gave up after waiting %s: %w", a.label(), bound, last)
	}
	var last error
	// held: a try has answered that another owner holds the lock (the
	// semaphore is full). Until then every attempt is a try on the quick
	// route, so an uncontended acquire never spends the waiting route's
	// small throttle; from then on the attempts are waiting rounds.
	held := false
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			a.abandon(ctx)
			return nil, gaveUp(last)
		}
		var wait time.Duration
		if held {
			wait = c.serverWait(ctx, ttl, a.pollOnly())
		}
		sent := time.Now()
		r, abandoned := a.attempt(ctx, wait)
		if abandoned {
			return nil, gaveUp(last)
		}
		if r.waitRoute && noWaitRoute(r.err) {
			// A stack that predates the waiting routes (API Gateway has no
			// /wait route): waiting rounds go to the try route with
			// wait_seconds from now on, as before the split. Read/write
			// locks came with their waiting routes: a stack without them
			// is polled.
			if a.rwMode != "" {
				a.pollOnly().Store(true)
			} else {
				c.tryRouteWaits.Store(true)
			}
			attempt--
			continue
		}
		if wait > 0 && refusesWait(r.err) {
			// A service without server-side waiting (or with a lower
			// maximum; for semaphores, one that does not wait for
			// permits yet): poll from now on.
			a.pollOnly().Store(true)
			attempt--
			continue
		}
		a.note(r)
		if r.out == granted {
			return newLease(c, r.grant, ttl), nil
		}
		if errors.Is(r.err, ErrHeld) || r.ticket != "" {
			// The next round keeps the place in the lock's queue this
			// one answered, if any (fair waiting at the service): a held
			// round's, or a 503's whose queue write may have landed.
			a.ticket = r.ticket
		}
		if !errors.Is(r.err, ErrHeld) && !retryable(r.err) {
			a.abandon(ctx)
			return nil, r.err
		}
		last = r.err
		if !held && errors.Is(r.err, ErrHeld) {
			// The try found the lock held: wait at the service from now
			// on, at once (it wakes the round at the holder's expiry or
			// release, whichever comes first), or poll.
			held = true
			if c.serverWait(ctx, ttl, a.pollOnly()) > 0 {
				attempt = -1
				continue
			}
		}
		if wait > 0 && errors.Is(r.err, ErrHeld) && (time.Since(sent) >= wait-time.Second || a.ticket != "") {
			// The service waited the whole round, or holds a place in the
			// queue for the next one (it lapses 2 s after this round's
			// end): the next one starts at once, and a backoff after it
			// starts small again.
			attempt = -1
			continue
		}
		t := time.NewTimer(c.backoff.delay(attempt, hint(r.err)))
		select {
		case <-ctx.Done():
			t.Stop()
			a.abandon(ctx)
			return nil, gaveUp(last)
		case <-t.C:
		}
	}
}

// serverWait is the wait_seconds of Acquire's next request: at most
// MaxServerWait, no later than ctx's deadline, within the HTTP client's
// timeout, and at most roundLimit, in whole seconds; 0 (one plain attempt)
// when that is under a second or the client polls (pollOnly).
func (c *Client) serverWait(ctx context.Context, ttl time.Duration, pollOnly *atomic.Bool) time.Duration {
	if pollOnly.Load() {
		return 0
	}
	w := min(MaxServerWait, roundLimit(ttl, c.leaseMargin(ttl)))
	if d, ok := ctx.Deadline(); ok {
		w = min(w, time.Until(d))
	}
	if c.hc.Timeout > 0 {
		w = min(w, c.hc.Timeout-answerMargin)
	}
	if w < time.Second {
		return 0
	}
	return w.Truncate(time.Second)
}

// roundLimit is the longest round at the service that a lease of ttl and
// margin allows: two thirds of its local validity (ttl − margin). The local
// deadline counts from before the request was sent and the grant may come
// at the end of the round, so this leaves at least a third of the validity
// for the first renewal (which is then due at once, see Lease.KeepAlive) —
// with lockctl run's largest margin (ttl/2), ttl/6.
func roundLimit(ttl, margin time.Duration) time.Duration {
	return (ttl - margin) * 2 / 3
}

// noWaitRoute reports whether err is API Gateway's own 404 {"message"} (not
// the service's problem+json not-found): a stack without the waiting routes.
func noWaitRoute(err error) bool {
	var p *ProblemError
	return errors.As(err, &p) && p.Status == http.StatusNotFound && p.gateway
}

// refusesWait reports whether err is the service's refusal of
// wait_seconds: a 422 naming it (an older service without server-side
// waiting, one with waiting turned off, or one configured with a lower
// maximum).
func refusesWait(err error) bool {
	var p *ProblemError
	if !errors.As(err, &p) || p.Status != 422 {
		return false
	}
	for _, f := range p.Errors {
		if f.Field == "wait_seconds" {
			return true
		}
	}
	return false
}

// outcome is what one acquire attempt is known to have done at the service.
type outcome int

const (
	// notGranted: a clean answer that the lease was not given (held by
	// another owner, or refused), or a request that was never sent.
	notGranted outcome = iota
	// granted: the answer carried the new lease.
	granted
	// unknown: the request may have been applied but no usable answer came
	// (a network failure, a 5xx, a malformed answer).
	unknown
)

// grant is a granted acquire: the service's lease and when the request was
// sent; for a semaphore's permit also the permit and the semaphore's
// number of permits; for a read/write lock's lease, that lease.
type grant struct {
	lock    Lock
	t0      time.Time
	permit  *PermitInfo
	permits int
	rw      *RWLeaseInfo
}

// attemptResult is the answer to one acquire request.
type attemptResult struct {
	out   outcome
	grant grant // when out is granted
	err   error // otherwise
	// ticket is the place in the lock's queue a waiting round that ended
	// held, or answered 503, answered (queue_ticket), "" when none.
	ticket string
	// waitRoute: the request went to the waiting route (…/wait).
	waitRoute bool
}

// acquisition is one call of TryAcquire or Acquire: its arguments, and
// whether an attempt may have created a lease nobody heard of.
type acquisition struct {
	c         *Client
	resource  string
	owner     string
	ttl       time.Duration
	opt       acquireOptions
	generated bool   // owner is new, unique to this call
	gen       uint64 // this acquisition's number for (resource, owner) in c.latest
	// unsure: an attempt's outcome is unknown and no later answer settled
	// it (a grant replaces it, "held" shows it is not live).
	unsure bool
	// ticket is the place in the lock's queue that the last round
	// answered: the next waiting round sends it back to keep it.
	ticket string
	// permits is the semaphore's number of permits when the acquisition
	// is of a semaphore's permit (resource is then its name); 0 for a lock.
	permits int
	// rwMode is the lease's mode when the acquisition is of a read/write
	// lock's lease (resource is then its name); "" otherwise.
	rwMode RWMode
}

// label names the acquisition in errors: acquire "name", or acquire
// semaphore "name".
func (a *acquisition) label() string {
	if a.rwMode != "" {
		return fmt.Sprintf("acquire %s lock %q", a.rwMode, a.resource)
	}
	if a.permits > 0 {
		return fmt.Sprintf("acquire semaphore %q", a.resource)
	}
	return fmt.Sprintf("acquire %q", a.resource)
}

// key is the acquisition's key in latestAcquisitions: a semaphore's is
// "sem/NAME" and a read/write lock's "rw/NAME", which no lock name can be
// (locks have no "/").
func (a *acquisition) key() string {
	if a.rwMode != "" {
		return "rw/" + a.resource
	}
	if a.permits > 0 {
		return "sem/" + a.resource
	}
	return a.resource
}

// pollOnly is the client's "poll instead of waiting at the service" flag
// for this kind of acquire: a service may wait for locks and not yet for
// permits.
func (a *acquisition) pollOnly() *atomic.Bool {
	if a.rwMode != "" {
		return &a.c.rwPollOnly
	}
	if a.permits > 0 {
		return &a.c.semPollOnly
	}
	return &a.c.pollOnly
}

// newAcquisition checks an acquire's arguments and options; a ttl of 0 and
// an owner of "" take WithTTL's and WithOwner's, else DefaultTTL and a new
// unique owner.
func (c *Client) newAcquisition(resource, owner string, ttl time.Duration, opts []AcquireOption) (*acquisition, error) {
	return c.newAcquisitionOf(resource, 0, owner, ttl, opts)
}

// newAcquisitionOf is newAcquisition of a lock (permits 0) or of a permit
// of the semaphore resource of permits.
func (c *Client) newAcquisitionOf(resource string, permits int, owner string, ttl time.Duration, opts []AcquireOption) (*acquisition, error) {
	return c.setUpAcquisition(&acquisition{c: c, resource: resource, owner: owner, ttl: ttl, permits: permits}, opts)
}

// setUpAcquisition applies opts and the defaults to a and checks its
// arguments.
func (c *Client) setUpAcquisition(a *acquisition, opts []AcquireOption) (*acquisition, error) {
	for _, o := range opts {
		if err := o(&a.opt); err != nil {
			return nil, fmt.Errorf("%s: %w", a.label(), err)
		}
	}
	if a.ttl == 0 {
		a.ttl = cmp.Or(a.opt.ttl, DefaultTTL)
	}
	if a.owner == "" {
		a.owner = a.opt.owner
	}
	if a.owner == "" {
		a.owner, a.generated = newOwner(), true
	}
	if err := checkArgs(a.resource, a.owner, a.ttl); err != nil {
		return nil, fmt.Errorf("%s: %w", a.label(), err)
	}
	if !a.generated {
		a.gen = c.latest.next(a.key(), a.owner)
	}
	return a, nil
}

// latestAcquisitions numbers the acquisitions of each (resource, chosen
// owner), so a late grant is released only while no newer acquisition of
// the same owner has started: a newer one may hold a lease that the late
// grant replaced (same-owner re-acquire), and releasing the late grant
// would then end the lease the caller holds.
type latestAcquisitions struct {
	mu   sync.Mutex
	last map[[2]string]uint64
}

func (l *latestAcquisitions) next(resource, owner string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[[2]string]uint64{}
	}
	k := [2]string{resource, owner}
	l.last[k]++
	return l.last[k]
}

func (l *latestAcquisitions) isLatest(resource, owner string, gen uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[[2]string{resource, owner}] == gen
}

// newOwner returns an owner no other lease has: HOST:PID:RANDOM.
func newOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	if len(host) > 200 { // owners are at most 255 bytes
		host = host[:200]
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// note records what r says about leases earlier attempts may have left.
func (a *acquisition) note(r attemptResult) {
	switch {
	case r.out == granted, errors.Is(r.err, ErrHeld):
		a.unsure = false
	case r.out == unknown:
		a.unsure = true
	}
}

// abandon is called when the acquisition ends without handing out a lease:
// if an attempt may have created one for a generated owner, it releases
// that owner's lease in the background. Nobody else knows the owner, so
// this can only end a lease of this acquisition. A chosen owner's lease is
// left alone: releasing it without a token could end a lease the caller
// took meanwhile, and the caller can repeat the acquire or release it.
func (a *acquisition) abandon(ctx context.Context) {
	if !a.unsure || !a.generated {
		return
	}
	if a.rwMode != "" {
		a.c.releaseLater(ctx, a.c.ownerRWRelease(a.resource, a.owner, a.rwMode))
		return
	}
	if a.permits > 0 {
		// A permit is released by slot: find the owner's, if any.
		a.c.releaseLater(ctx, a.c.ownerPermitRelease(a.resource, a.owner))
		return
	}
	a.c.releaseLater(ctx, a.c.lockRelease(a.resource, a.owner, 0))
}

// releaseGrant releases g, a grant nobody will use, with its fencing token.
func (a *acquisition) releaseGrant(ctx context.Context, g grant) {
	if g.rw != nil {
		a.c.release(ctx, a.c.rwRelease(a.resource, g.rw.Owner, g.rw.Mode, g.rw.Slot, g.rw.FencingToken))
		return
	}
	if g.permit != nil {
		a.c.release(ctx, a.c.permitRelease(a.resource, g.permit.Owner, g.permit.Slot, g.permit.FencingToken))
		return
	}
	a.c.release(ctx, a.c.lockRelease(a.resource, g.lock.Owner, g.lock.FencingToken))
}

// attempt sends one acquire request, asking the service to wait up to
// wait for a held lock. The request does not end with ctx: when ctx ends
// first, attempt returns abandoned and a background goroutine waits for the
// answer (up to wait and lateAnswerTimeout more), then releases what it
// granted (with its fencing token) or abandons the acquisition.
func (a *acquisition) attempt(ctx context.Context, wait time.Duration) (r attemptResult, abandoned bool) {
	if ctx.Err() != nil {
		return attemptResult{}, true // never send a request nobody waits for
	}
	if ctx.Done() == nil {
		return a.c.acquireOnce(ctx, a, wait), false
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	answer := make(chan attemptResult, 1)
	go func() { answer <- a.c.acquireOnce(rctx, a, wait) }()
	select {
	case r := <-answer:
		cancel()
		return r, false
	case <-ctx.Done():
	}
	a.c.cleanups.add()
	giveUp := time.AfterFunc(wait+lateAnswerTimeout, cancel)
	go func() {
		defer a.c.cleanups.done()
		r := <-answer
		giveUp.Stop()
		cancel()
		a.note(r)
		if r.out == granted {
			// A generated owner is this acquisition's alone. A chosen owner
			// may have been acquired again meanwhile; then this grant may
			// have replaced that lease, so it is left to lapse at its TTL
			// (a repeated acquire of the owner takes it over anyway). A
			// read/write lock's grant never takes over another lease:
			// releasing it by its token ends only itself.
			if a.generated || a.rwMode != "" || a.c.latest.isLatest(a.key(), a.owner, a.gen) {
				a.releaseGrant(ctx, r.grant)
			}
			return
		}
		a.abandon(ctx)
	}()
	return attemptResult{}, true
}

// acquireOnce sends one acquire request of a and sorts its answer: a
// try-acquire to POST /locks/{resource} (/semaphores/{name}) when wait is
// under a second, else a waiting round with wait_seconds and the queue
// ticket to the waiting route …/wait (to the try route on a stack that
// predates it, see tryRouteWaits).
func (c *Client) acquireOnce(ctx context.Context, a *acquisition, wait time.Duration) attemptResult {
	resource := a.resource
	// Read/write locks came with their waiting routes: never the try route
	// with wait_seconds.
	waitRoute := wait >= time.Second && (!c.tryRouteWaits.Load() || a.rwMode != "")
	fail := func(out outcome, err error) attemptResult {
		return attemptResult{out: out, err: fmt.Errorf("%s: %w", a.label(), err), waitRoute: waitRoute}
	}
	req := map[string]any{"owner": a.owner, "ttl_seconds": int64(a.ttl / time.Second)}
	path := lockPath(resource)
	switch {
	case a.rwMode != "":
		path = rwPath(resource) + "/" + string(a.rwMode)
	case a.permits > 0:
		req["permits"] = a.permits
		path = semaphorePath(resource)
	}
	if wait >= time.Second {
		req["wait_seconds"] = int64(wait / time.Second)
		if a.ticket != "" {
			req["queue_ticket"] = a.ticket
		}
	}
	if waitRoute {
		path += "/wait"
	}
	if a.opt.lockDelay > 0 {
		req["lock_delay_seconds"] = int64(a.opt.lockDelay / time.Second)
	}
	// t0 is taken before sending: the lease cannot have started earlier.
	// After a wait at the service it is older than it need be, which only
	// makes the lease's local deadline earlier (safe, see serverWait).
	t0 := time.Now()
	resp, err := c.send(ctx, http.MethodPost, path, req)
	if err != nil {
		r := fail(outcomeOf(err), err)
		if p := (*ProblemError)(nil); errors.As(err, &p) {
			r.ticket = p.queueTicket // a 503's place in the queue, if any
		}
		return r
	}
	if a.rwMode != "" {
		return a.rwAnswer(resp, t0, fail)
	}
	if a.permits > 0 {
		return a.permitAnswer(resp, t0, fail)
	}
	refused := func(body acquireAnswer, retry time.Duration) error {
		return &HeldError{Resource: resource, ExpiresAt: answerTime(body.ExpiresAt), RetryAfter: retry}
	}
	return sortAnswer(resp, fail, "lock", refused, func(l *Lock) (grant, error) {
		return grant{lock: *l, t0: t0}, l.check(resource)
	})
}

// outcomeOf sorts a failed request: never sent or cleanly refused
// (notGranted), or possibly applied (unknown).
func outcomeOf(err error) outcome {
	var unsent *unsentError
	if errors.As(err, &unsent) {
		return notGranted
	}
	var p *ProblemError
	if errors.As(err, &p) && p.Status < 500 {
		return notGranted
	}
	return unknown
}

func waitErr(ctx context.Context, label string, last error) error {
	cause := context.Cause(ctx)
	if last == nil {
		return fmt.Errorf("%s: %w", label, cause)
	}
	return fmt.Errorf("%s: gave up waiting: %w (last attempt: %w)", label, cause, last)
}

// hint is the earliest the service suggested trying again after err.
func hint(err error) time.Duration {
	var held *HeldError
	if errors.As(err, &held) {
		if held.RetryAfter > 0 {
			return held.RetryAfter
		}
		if !held.ExpiresAt.IsZero() {
			return time.Until(held.ExpiresAt)
		}
	}
	var full *FullError
	if errors.As(err, &full) {
		if full.RetryAfter > 0 {
			return full.RetryAfter
		}
		if !full.FreeAt.IsZero() {
			return time.Until(full.FreeAt)
		}
	}
	var p *ProblemError
	if errors.As(err, &p) {
		return p.RetryAfter
	}
	return 0
}
