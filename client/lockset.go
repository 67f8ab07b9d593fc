package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Lock sets: several locks taken all or none (docs/design.md#lock-sets).
// Each name of a Set is a Lease of its own (its token, its local
// deadline), renewed together with one call per renewal.

// WithSetPrefix sets the path prefix of a lock set's requests (every name
// must begin with it; an IAM policy scoped by path prefix then covers the
// set's names): by default the names' longest common prefix.
func WithSetPrefix(prefix string) AcquireOption {
	return func(o *acquireOptions) error {
		if prefix == "" {
			return fmt.Errorf("%w: empty set prefix", ErrValidation)
		}
		o.setPrefix = prefix
		return nil
	}
}

// SetHeldError is a lock set refused because one of its names is held by
// another owner, or by the same owner outside the set (a set never takes
// over a lease of its owner), or queued for, or in its lock-delay: nothing
// is held,
// but for Unreleased, which lapse at their TTL. It matches ErrHeld.
type SetHeldError struct {
	// BlockedBy is the name that refused the set.
	BlockedBy string
	// FreeAt is when BlockedBy comes free by the service's clock; zero
	// when the service did not say.
	FreeAt time.Time
	// Unreleased are names the set took and the service could not
	// release.
	Unreleased []string
}

// Error names the lock that refused the set.
func (e *SetHeldError) Error() string {
	msg := fmt.Sprintf("lock set refused: %q is held", e.BlockedBy)
	if !e.FreeAt.IsZero() {
		msg += " until " + e.FreeAt.UTC().Format(time.RFC3339Nano)
	}
	if len(e.Unreleased) > 0 {
		msg += fmt.Sprintf(" (held until their TTL: %q)", e.Unreleased)
	}
	return msg
}

// Is reports whether target is ErrHeld.
func (e *SetHeldError) Is(target error) bool { return target == ErrHeld }

// SetError is a lock set's renewal or release that failed for some names:
// each name's error (a *ProblemError) in Failed.
type SetError struct {
	Op     string
	Failed map[string]error
}

// Error lists the names that failed.
func (e *SetError) Error() string {
	parts := make([]string, 0, len(e.Failed))
	for n, err := range e.Failed {
		parts = append(parts, fmt.Sprintf("%q: %v", n, err))
	}
	return e.Op + " lock set: " + strings.Join(parts, "; ")
}

// Unwrap returns the names' errors.
func (e *SetError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed))
	for _, err := range e.Failed {
		out = append(out, err)
	}
	return out
}

// Set is a lock set held by this client: one Lease per name, in name order
// (byte order), each with its own fencing token. It renews all of them in
// the background with one call per renewal until released or lost; it is
// lost as soon as any of its leases is.
type Set struct {
	c      *Client
	prefix string
	owner  string
	id     string
	ttl    time.Duration
	leases []*Lease

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	kaCancel context.CancelFunc
	kaDone   chan struct{}

	releaseUnsure atomic.Bool
}

// lockSetAnswer is the 200 body of a set's acquire.
type lockSetAnswer struct {
	Acquired   bool      `json:"acquired"`
	SetID      string    `json:"set_id"`
	Locks      []Lock    `json:"locks"`
	BlockedBy  string    `json:"blocked_by"`
	FreeAt     time.Time `json:"free_at"`
	Unreleased []string  `json:"unreleased"`
	// QueueTicket is a waiting round's place in blocked_by's queue: the
	// next round sends it back.
	QueueTicket string `json:"queue_ticket"`
}

// setItem is one name's outcome of a set's renewal or release.
type setItem struct {
	Resource string           `json:"resource"`
	OK       bool             `json:"ok"`
	Lock     *Lock            `json:"lock"`
	Problem  *json.RawMessage `json:"problem"`
}

type setLockBody struct {
	Resource     string `json:"resource"`
	FencingToken int64  `json:"fencing_token"`
}

// TryAcquireSet asks once for a lease of ttl on every one of names, all or
// none, for owner (the defaults as for TryAcquire). It returns the Set, or
// a *SetHeldError matching ErrHeld.
func (c *Client) TryAcquireSet(ctx context.Context, names []string, owner string, ttl time.Duration, opts ...AcquireOption) (*Set, error) {
	a, err := c.newSetAcquisition(names, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	s, err := a.attempt(ctx, 0)
	return s, err
}

// AcquireSet takes every one of names, all or none, as Acquire takes one
// lock: a try first, then waiting rounds at the service (each waits in the
// queue of a held name holding the names before it, and gives them back
// when it ends; the next round brings back its place), retrying temporary
// failures, until ctx ends and for at
// most DefaultAcquireWait when ctx has no deadline (WithWait sets another
// bound). A service that refuses wait_seconds, or a stack without the
// sets' waiting route, is polled instead (WithoutServerWait: always). When
// the wait runs out the error is a *SetHeldError. A request in flight when
// the wait ends is not cancelled: its answer is awaited in the background,
// and a grant it brings is released (by its tokens), as Acquire's.
func (c *Client) AcquireSet(ctx context.Context, names []string, owner string, ttl time.Duration, opts ...AcquireOption) (*Set, error) {
	a, err := c.newSetAcquisition(names, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	bound := DefaultAcquireWait
	if a.opt.waitSet {
		bound = a.opt.wait
	}
	if _, has := ctx.Deadline(); (has && !a.opt.waitSet) || a.opt.noWaitLimit {
		bound = 0
	}
	if bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	var last error
	held := false
	for attempt := 0; ; attempt++ {
		var wait time.Duration
		if held {
			wait = c.serverWait(ctx, a.ttl, &c.setPollOnly)
		}
		s, err := a.attempt(ctx, wait)
		if wait > 0 && (refusesWait(err) || noWaitRoute(err)) {
			// A service that does not wait for sets (a 422 naming
			// wait_seconds: waiting turned off, or a lower maximum), or
			// a stack without the sets' waiting route (API Gateway's 404):
			// poll the try route from now on, as Acquire does.
			c.setPollOnly.Store(true)
			attempt--
			continue
		}
		switch {
		case err == nil:
			return s, nil
		case errors.Is(err, ErrHeld):
			held, last = true, err
		case ctx.Err() != nil && last != nil:
			// The wait ran out with this attempt in flight: the last
			// answer (held) stands, as Acquire's does.
		case !retryable(err):
			return nil, err
		default:
			last = err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", a.label(), errors.Join(last, context.Cause(ctx)))
		}
		if wait == 0 || !errors.Is(err, ErrHeld) {
			t := time.NewTimer(c.backoff.delay(attempt, hint(err)))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// setAcquisition is one call of TryAcquireSet or AcquireSet.
type setAcquisition struct {
	c      *Client
	names  []string
	owner  string
	ttl    time.Duration
	prefix string
	opt    acquireOptions
	// ticket is the latest waiting round's place in the queue of the
	// name it waited on, sent back with the next round ("": none).
	ticket string
}

func (a *setAcquisition) label() string { return fmt.Sprintf("acquire lock set %q", a.names) }

func (c *Client) newSetAcquisition(names []string, owner string, ttl time.Duration, opts []AcquireOption) (*setAcquisition, error) {
	a := &setAcquisition{c: c, names: names, owner: owner, ttl: ttl}
	for _, o := range opts {
		if err := o(&a.opt); err != nil {
			return nil, fmt.Errorf("%s: %w", a.label(), err)
		}
	}
	if a.ttl == 0 {
		a.ttl = DefaultTTL
		if a.opt.ttl > 0 {
			a.ttl = a.opt.ttl
		}
	}
	if a.owner == "" {
		a.owner = a.opt.owner
	}
	if a.owner == "" {
		a.owner = newOwner()
	}
	a.prefix = a.opt.setPrefix
	if a.prefix == "" {
		a.prefix = commonPrefix(names)
	}
	if len(names) == 0 || a.prefix == "" {
		return nil, fmt.Errorf("%s: %w: the names share no prefix (WithSetPrefix)", a.label(), ErrValidation)
	}
	if err := checkArgs(names[0], a.owner, a.ttl); err != nil {
		return nil, fmt.Errorf("%s: %w", a.label(), err)
	}
	return a, nil
}

// commonPrefix returns the names' longest common prefix, cut to whole
// UTF-8 characters.
func commonPrefix(names []string) string {
	if len(names) == 0 {
		return ""
	}
	p := names[0]
	for _, n := range names[1:] {
		i := 0
		for i < len(p) && i < len(n) && p[i] == n[i] {
			i++
		}
		p = p[:i]
	}
	for len(p) > 0 && !utf8.ValidString(p) {
		p = p[:len(p)-1]
	}
	return p
}

// attempt makes one request: a try (wait 0) or a waiting round. The
// request does not end with ctx: when ctx ends first, attempt returns
// ctx's cause, and a background goroutine awaits the answer (up to wait
// and lateAnswerTimeout more) and releases the set it granted, by its
// tokens, so that it never lingers until its TTL. A set's grant never
// takes over another lease, its owner's own included (the service's
// rule), so that release ends nothing but this grant.
func (a *setAcquisition) attempt(ctx context.Context, wait time.Duration) (*Set, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", a.label(), context.Cause(ctx)) // never send a request nobody waits for
	}
	if ctx.Done() == nil {
		return a.send(ctx, wait, true)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type result struct {
		s   *Set
		err error
	}
	answer := make(chan result, 1)
	go func() {
		s, err := a.send(rctx, wait, false)
		answer <- result{s, err}
	}()
	select {
	case r := <-answer:
		cancel()
		if r.s != nil && !a.c.noRenew {
			r.s.KeepAlive(context.Background())
		}
		return r.s, r.err
	case <-ctx.Done():
	}
	a.c.cleanups.add()
	giveUp := time.AfterFunc(wait+lateAnswerTimeout, cancel)
	go func() {
		defer a.c.cleanups.done()
		r := <-answer
		giveUp.Stop()
		cancel()
		if r.s != nil {
			_ = r.s.Release(context.WithoutCancel(ctx))
		}
	}()
	return nil, fmt.Errorf("%s: %w", a.label(), context.Cause(ctx))
}

// send sends one request of attempt; the set granted renews itself when
// keepAlive says so (and the client does).
func (a *setAcquisition) send(ctx context.Context, wait time.Duration, keepAlive bool) (*Set, error) {
	body := map[string]any{"owner": a.owner, "ttl_seconds": int64(a.ttl / time.Second), "names": a.names}
	if a.opt.lockDelay > 0 {
		body["lock_delay_seconds"] = int64(a.opt.lockDelay / time.Second)
	}
	path := "/locksets/" + url.PathEscape(a.prefix)
	if wait > 0 {
		body["wait_seconds"] = int64(wait / time.Second)
		path += "/wait"
		if a.ticket != "" {
			body["queue_ticket"] = a.ticket
		}
	}
	t0 := time.Now()
	ans, err := call(ctx, a.c, request{op: a.label(), method: http.MethodPost, path: path, payload: body},
		func(r *lockSetAnswer) error {
			for _, l := range r.Locks {
				if err := l.check(l.Resource); err != nil {
					return err
				}
			}
			if r.Acquired && len(r.Locks) != len(a.names) {
				return fmt.Errorf("malformed lock set answer: %d locks for %d names", len(r.Locks), len(a.names))
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	if wait > 0 {
		a.ticket = ans.QueueTicket
	}
	if !ans.Acquired {
		return nil, fmt.Errorf("%s: %w", a.label(), &SetHeldError{BlockedBy: ans.BlockedBy, FreeAt: ans.FreeAt, Unreleased: ans.Unreleased})
	}
	return newSet(a.c, a.prefix, a.owner, ans.SetID, a.ttl, t0, ans.Locks, keepAlive), nil
}

// newSet starts the set's leases (watchdogs, no keep-alive of their own)
// and, with keepAlive unless the client says otherwise, the set's
// keep-alive.
func newSet(c *Client, prefix, owner, id string, ttl time.Duration, t0 time.Time, locks []Lock, keepAlive bool) *Set {
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Set{c: c, prefix: prefix, owner: owner, id: id, ttl: ttl, ctx: ctx, cancel: cancel}
	for _, l := range locks {
		lease := startLease(c, grant{lock: l, t0: t0}, ttl)
		s.leases = append(s.leases, lease)
		context.AfterFunc(lease.ctx, func() { cancel(context.Cause(lease.ctx)) })
	}
	if keepAlive && !c.noRenew {
		s.KeepAlive(context.Background())
	}
	return s
}

// ID returns the set's id, which the admin listing shows on its leases.
func (s *Set) ID() string { return s.id }

// Owner returns the owner the set is held for.
func (s *Set) Owner() string { return s.owner }

// Leases returns the set's leases in name order: each with its own
// FencingToken, to send with every write to what that name protects.
func (s *Set) Leases() []*Lease { return s.leases }

// Lease returns the set's lease on name, nil when name is not in the set.
func (s *Set) Lease(name string) *Lease {
	for _, l := range s.leases {
		if l.resource == name {
			return l
		}
	}
	return nil
}

// Context returns a context cancelled when any lease of the set is lost,
// or the set released; context.Cause says why. Call Check before each step.
func (s *Set) Context() context.Context { return s.ctx }

// Check returns nil while every lease of the set is held by the clock now
// (Lease.Check), else the first lease's error.
func (s *Set) Check() error {
	for _, l := range s.leases {
		if err := l.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Renew extends every lease of the set by its TTL with one call. A name
// the service refused for good (not found, another owner, another token)
// loses its lease, and so the set; a temporary failure leaves the leases
// held until their local deadlines. The error is a *SetError for names
// that failed.
func (s *Set) Renew(ctx context.Context) error {
	if err := s.Check(); err != nil {
		return fmt.Errorf("renew lock set: %w", err)
	}
	t0 := time.Now()
	body := map[string]any{"owner": s.owner, "ttl_seconds": int64(s.ttl / time.Second), "locks": s.bodyLocks(s.leases)}
	ans, err := call[struct {
		Renewed bool      `json:"renewed"`
		Locks   []setItem `json:"locks"`
	}](ctx, s.c, request{op: "renew lock set", method: http.MethodPost, path: "/locksets/" + url.PathEscape(s.prefix) + "/renew", payload: body}, nil)
	if err != nil {
		if definitive(err) || !retryable(err) {
			for _, l := range s.leases {
				l.lose(err)
			}
		}
		return err
	}
	failed := map[string]error{}
	for _, it := range ans.Locks {
		l := s.Lease(it.Resource)
		if l == nil {
			continue
		}
		if it.OK && it.Lock != nil {
			l.extend(t0, *it.Lock, nil, nil)
			continue
		}
		perr := itemProblem(it)
		failed[it.Resource] = perr
		if definitive(perr) {
			l.lose(perr)
		}
	}
	if len(failed) > 0 {
		return &SetError{Op: "renew", Failed: failed}
	}
	return nil
}

// itemProblem is a name's problem as an error (a *ProblemError).
func itemProblem(it setItem) error {
	p := &ProblemError{}
	if it.Problem == nil || json.Unmarshal(*it.Problem, p) != nil {
		return fmt.Errorf("%q: malformed lock set answer", it.Resource)
	}
	return p
}

func (s *Set) bodyLocks(leases []*Lease) []setLockBody {
	out := make([]setLockBody, len(leases))
	for i, l := range leases {
		out[i] = setLockBody{Resource: l.resource, FencingToken: l.token}
	}
	return out
}

// KeepAlive starts renewing the set in the background unless that is under
// way, until the set ends or ctx does: every TTL/3, each renewal retried
// until the earliest local deadline, as a Lease's.
func (s *Set) KeepAlive(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil || s.kaDone != nil {
		return
	}
	kctx, cancel := context.WithCancel(ctx)
	s.kaCancel, s.kaDone = cancel, make(chan struct{})
	go s.keepAlive(kctx, s.kaDone)
}

func (s *Set) keepAlive(ctx context.Context, done chan struct{}) {
	defer close(done)
	first := s.leases[0]
	interval := min(s.ttl/3, roundLimit(s.ttl, first.margin))
	b := backoff{base: s.c.backoff.base, max: max(s.c.backoff.base, min(s.c.backoff.max, s.ttl/8))}
	for attempt := 0; ; {
		if ctx.Err() != nil || s.ctx.Err() != nil {
			return
		}
		wait := time.Until(first.renewedAt().Add(interval))
		if attempt > 0 {
			wait = b.delay(attempt-1, 0)
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil || s.ctx.Err() != nil {
			return
		}
		deadline := s.deadline()
		actx, cancel := context.WithDeadline(ctx, earlier(deadline, time.Now().Add(interval)))
		err := s.Renew(actx)
		cancel()
		if err == nil {
			attempt = 0
		} else {
			attempt++
		}
	}
}

// deadline is the earliest local deadline of the set's leases.
func (s *Set) deadline() time.Time {
	d := s.leases[0].Deadline()
	for _, l := range s.leases[1:] {
		if ld := l.Deadline(); ld.Before(d) {
			d = ld
		}
	}
	return d
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Release stops the keep-alive, ends the set's leases (ErrReleased) and
// releases every name at the service with one call, retrying temporary
// failures of the names not yet released for at most ReleaseRetryTimeout.
// Names the service refused are in a *SetError; they lapse at their TTL.
func (s *Set) Release(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.kaCancel, s.kaDone
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	end := time.Time{}
	for _, l := range s.leases {
		l.mu.Lock()
		l.endLocked(ErrReleased)
		if e := l.start.Add(l.ttl); e.After(end) {
			end = e
		}
		l.mu.Unlock()
	}
	s.cancel(ErrReleased)
	remaining := s.leases
	failed := map[string]error{}
	do := func(ctx context.Context) error {
		body := map[string]any{"owner": s.owner, "locks": s.bodyLocks(remaining)}
		ans, err := call[struct {
			Locks []setItem `json:"locks"`
		}](ctx, s.c, request{op: "release lock set", method: http.MethodDelete, path: "/locksets/" + url.PathEscape(s.prefix), payload: body}, nil)
		if err != nil {
			return err
		}
		var again []*Lease
		var temp error
		for _, it := range ans.Locks { // empty on 204: every name released
			if it.OK {
				continue
			}
			perr := itemProblem(it)
			switch {
			case errors.Is(perr, ErrNotFound) && s.releaseUnsure.Load() && !forceReleased(perr):
				// An earlier attempt may have released it.
			case retryable(perr) && !definitive(perr):
				again, temp = append(again, s.Lease(it.Resource)), perr
			default:
				failed[it.Resource] = perr
			}
		}
		remaining = again
		if temp != nil {
			return temp
		}
		return nil
	}
	err := s.c.releaseRetrying(ctx, do, end, &s.releaseUnsure)
	for _, l := range remaining {
		if err != nil {
			failed[l.resource] = err
		}
	}
	if len(failed) > 0 {
		return &SetError{Op: "release", Failed: failed}
	}
	return nil
}

// WithLockSet takes every one of names as AcquireSet does (the TTL, owner
// and prefix from opts), runs fn under the set, and releases it, also when
// fn panics. fn's ctx ends when ctx does or any lease of the set is lost;
// call set.Check before each step. It returns the set's loss (matching
// ErrLeaseLost) joined with fn's error when a lease was lost before it
// returned, and a failed release too.
func (c *Client) WithLockSet(ctx context.Context, names []string, fn func(ctx context.Context, set *Set) error, opts ...AcquireOption) (err error) {
	set, err := c.AcquireSet(ctx, names, "", 0, opts...)
	if err != nil {
		return err
	}
	inner, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(set.ctx, func() { cancel(set.Check()) })
	finish := func(ferr error) error {
		stop()
		lost := set.Check()
		cancel(lost)
		rerr := set.Release(context.WithoutCancel(ctx))
		if errors.Is(lost, ErrLeaseLost) {
			return errors.Join(lost, ferr)
		}
		if rerr != nil {
			return errors.Join(ferr, fmt.Errorf("with lock set %q: %w", names, rerr))
		}
		return ferr
	}
	done := false
	defer func() {
		if !done {
			_ = finish(nil)
		}
	}()
	ferr := fn(inner, set)
	done = true
	return finish(ferr)
}
