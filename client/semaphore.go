package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxPermits is the largest number of permits a semaphore may have (the
// service's bound).
const MaxPermits = 100

// PermitInfo is a live permit of a semaphore as the service reports it.
// Its times are the service's clock: informational only.
type PermitInfo struct {
	// Name is the semaphore's name.
	Name string `json:"name"`
	// Slot is the permit's slot, 0 to N−1: fence per slot (see Permit).
	Slot int `json:"slot"`
	// Owner is who holds the permit.
	Owner string `json:"owner"`
	// FencingToken is strictly greater than every token issued before for
	// any permit of the semaphore.
	FencingToken int64 `json:"fencing_token"`
	// AcquiredAt is when this permit was taken.
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is when the permit ends unless renewed.
	ExpiresAt time.Time `json:"expires_at"`
	// LockDelaySeconds is the permit's lock-delay, 0 when it has none.
	LockDelaySeconds int64 `json:"lock_delay_seconds,omitempty"`
}

func (p PermitInfo) check(name string) error {
	if p.Name != name || p.Slot < 0 || p.FencingToken <= 0 || p.Owner == "" || p.ExpiresAt.IsZero() {
		return fmt.Errorf("malformed permit in response for semaphore %q", name)
	}
	return nil
}

// lock is the permit as a Lock (Lease.Lock of a permit).
func (p PermitInfo) lock() Lock {
	return Lock{Resource: p.Name, Owner: p.Owner, FencingToken: p.FencingToken, AcquiredAt: p.AcquiredAt,
		ExpiresAt: p.ExpiresAt, LockDelaySeconds: p.LockDelaySeconds}
}

// Permit is a permit of a semaphore held by this client: a Lease (it
// renews itself, its Context ends the moment it is lost or released,
// Release ends it) in a slot of its own. Its fencing token is larger than
// every token issued before for any permit of the semaphore, so a
// protected resource fences per slot: it keeps the largest token seen for
// each slot (an attribute or column fence_<slot>) and refuses a smaller
// one, which a permit that lost its slot has. A single "largest token"
// would refuse the live permits with lower tokens.
type Permit struct {
	*Lease
}

// Name returns the semaphore's name (the same as Resource).
func (p *Permit) Name() string { return p.resource }

// Slot returns the permit's slot, 0 to Permits()−1.
func (p *Permit) Slot() int { return p.permit.slot }

// Permits returns the semaphore's number of permits, as acquired.
func (p *Permit) Permits() int { return p.permit.permits }

// Info returns the permit as the service last reported it (at the grant or
// the latest renewal).
func (p *Permit) Info() PermitInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.permit.info
}

// TryAcquireSemaphore asks once for one of the permits of the semaphore
// name, a lease of ttl (0: WithTTL's, else DefaultTTL) for owner ("":
// WithOwner's, else a new unique owner). Every acquirer must give the same
// permits (1 to MaxPermits). It returns the permit, a *FullError (matching
// ErrFull and ErrHeld) when every permit is held by others, or an error
// matching ErrPermitsMismatch when the semaphore has another number of
// permits. An owner that holds a permit gets its slot again, with a new
// token: one permit per owner.
func (c *Client) TryAcquireSemaphore(ctx context.Context, name string, permits int, owner string, ttl time.Duration, opts ...AcquireOption) (*Permit, error) {
	a, err := c.newPermitAcquisition(name, permits, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	l, err := a.try(ctx)
	if err != nil {
		return nil, err
	}
	return &Permit{l}, nil
}

// AcquireSemaphore waits for one of the permits of the semaphore name as
// Acquire waits for a lock: until ctx ends, and for at most
// DefaultAcquireWait when ctx has no deadline (WithWait, WithoutWaitLimit),
// in rounds at the service that send back their place in the queue, or
// polling a service that does not wait for permits. When the wait runs out
// while the semaphore is full the error is a *FullError; the arguments
// and the other errors are TryAcquireSemaphore's.
func (c *Client) AcquireSemaphore(ctx context.Context, name string, permits int, owner string, ttl time.Duration, opts ...AcquireOption) (*Permit, error) {
	a, err := c.newPermitAcquisition(name, permits, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	l, err := a.wait(ctx)
	if err != nil {
		return nil, err
	}
	return &Permit{l}, nil
}

// WithSemaphore takes one of the permits of the semaphore name as
// AcquireSemaphore does (the TTL and owner from WithTTL and WithOwner),
// runs fn under the permit, and releases it, also when fn panics, with
// WithLock's rules: fn's ctx ends the moment the permit may be lost, and
// the error reports a loss (ErrLeaseLost) along with fn's.
func (c *Client) WithSemaphore(ctx context.Context, name string, permits int, fn func(ctx context.Context, p *Permit) error, opts ...AcquireOption) error {
	p, err := c.AcquireSemaphore(ctx, name, permits, "", 0, opts...)
	if err != nil {
		return err
	}
	return runUnder(ctx, p.Lease, fmt.Sprintf("with semaphore %q", name), func(ctx context.Context) error { return fn(ctx, p) })
}

// newPermitAcquisition checks a semaphore acquire's arguments.
func (c *Client) newPermitAcquisition(name string, permits int, owner string, ttl time.Duration, opts []AcquireOption) (*acquisition, error) {
	if permits < 1 || permits > MaxPermits {
		return nil, fmt.Errorf("acquire semaphore %q: %w: permits %d: want 1 to %d", name, ErrValidation, permits, MaxPermits)
	}
	return c.newAcquisitionOf(name, permits, owner, ttl, opts)
}

// permitAnswer sorts the 200 answer to a semaphore acquire sent at t0.
func (a *acquisition) permitAnswer(resp *response, t0 time.Time, fail func(outcome, error) attemptResult) attemptResult {
	refused := func(body acquireAnswer, retry time.Duration) error {
		return &FullError{Name: a.resource, FreeAt: answerTime(body.FreeAt), RetryAfter: retry}
	}
	return sortAnswer(resp, fail, "permit", refused, func(p *PermitInfo) (grant, error) {
		return grant{lock: p.lock(), t0: t0, permit: p, permits: a.permits}, p.check(a.resource)
	})
}

// RenewPermit extends owner's live permit in slot of the semaphore name to
// ttl (0: DefaultTTL) from now; with token non-zero the permit must carry
// that fencing token. Errors as for Renew. Permits renew themselves;
// Permit.Renew renews one by hand.
func (c *Client) RenewPermit(ctx context.Context, name, owner string, slot int, ttl time.Duration, token int64) (PermitInfo, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	type answer struct {
		Renewed bool       `json:"renewed"`
		Permit  PermitInfo `json:"permit"`
	}
	body, err := call(ctx, c, request{op: fmt.Sprintf("renew semaphore %q", name), bad: cmp.Or(checkArgs(name, owner, ttl), checkSlot(slot)),
		method: http.MethodPost, path: semaphorePath(name) + "/renew",
		payload: withToken(map[string]any{"owner": owner, "slot": slot, "ttl_seconds": int64(ttl / time.Second)}, token),
	}, func(b *answer) error {
		if err := b.Permit.check(name); err != nil || b.Permit.Slot != slot {
			return checkRenewed(b.Renewed, errors.New("malformed permit in response"))
		}
		return checkRenewed(b.Renewed, nil)
	})
	return body.Permit, err
}

// ReleasePermit ends owner's live permit in slot of the semaphore name;
// with token non-zero the permit must carry that fencing token. The slot is
// free at once. Errors as for Release.
func (c *Client) ReleasePermit(ctx context.Context, name, owner string, slot int, token int64) error {
	bad := checkSlot(slot)
	if name == "" || strings.Contains(name, "/") || strings.TrimSpace(owner) == "" {
		bad = fmt.Errorf("%w: name and owner must not be empty, and name has no \"/\"", ErrValidation)
	}
	_, err := call[noAnswer](ctx, c, request{op: fmt.Sprintf("release semaphore %q", name), bad: bad, method: http.MethodDelete,
		path: semaphorePath(name), payload: withToken(map[string]any{"owner": owner, "slot": slot}, token)}, nil)
	return err
}

// permitRelease is the release request of owner's permit in slot, for
// releaseRetrying.
func (c *Client) permitRelease(name, owner string, slot int, token int64) func(context.Context) error {
	return func(ctx context.Context) error { return c.ReleasePermit(ctx, name, owner, slot, token) }
}

// ownerPermitRelease is the clean-up release of whatever permit owner
// holds of the semaphore name (an acquire whose outcome stayed unknown):
// the status read finds its slot and token; none is nothing to do.
func (c *Client) ownerPermitRelease(name, owner string) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := c.SemaphoreStatus(ctx, name)
		if err != nil {
			return err
		}
		for _, h := range st.Holders {
			if h.Owner == owner {
				return c.ReleasePermit(ctx, name, owner, h.Slot, h.FencingToken)
			}
		}
		return nil
	}
}

// SemaphoreStatus is a semaphore's state: its number of permits and the
// live permits.
type SemaphoreStatus struct {
	// Name is the semaphore's name.
	Name string `json:"name"`
	// Permits is the semaphore's number of permits; 0 when it has no
	// record (never taken, or garbage collected).
	Permits int `json:"permits,omitempty"`
	// Holders are the live permits, by slot.
	Holders []PermitInfo `json:"holders"`
}

// SemaphoreStatus reads the semaphore name strongly consistently: its
// number of permits and its live permits (none is not an error).
func (c *Client) SemaphoreStatus(ctx context.Context, name string) (SemaphoreStatus, error) {
	return call(ctx, c, request{op: fmt.Sprintf("status of semaphore %q", name), bad: checkName("name", name),
		method: http.MethodGet, path: semaphorePath(name)}, func(st *SemaphoreStatus) error {
		st.Holders, st.Name = nonNil(st.Holders), name
		return checkHolders(name, st.Holders)
	})
}

// SemaphoreWatchResult is one answer of WatchSemaphore.
type SemaphoreWatchResult struct {
	// Name is the semaphore's name.
	Name string `json:"name"`
	// Index identifies the state: 0 for a semaphore never taken, else 2 ×
	// the latest fencing token + 1 − the number of live permits. It grows
	// at every grant and every end of a permit (a renewal is no change).
	// Pass it to the next WatchSemaphore.
	Index int64 `json:"index"`
	// Changed reports whether Index differs from the index asked with.
	Changed bool `json:"changed"`
	// Permits is the semaphore's number of permits; 0 when it has no record.
	Permits int `json:"permits,omitempty"`
	// FencingToken is the latest permit's token, live or not; 0 for a
	// semaphore never taken.
	FencingToken int64 `json:"fencing_token,omitempty"`
	// Holders are the live permits.
	Holders []PermitInfo `json:"holders"`
}

// WatchSemaphore is Watch for the semaphore name: its state as soon as it
// differs from index (0 at first, then the last answer's Index), or when
// wait (whole seconds, 0 to MaxServerWait) has passed. ErrUnavailable
// answers are retried with backoff until ctx ends.
func (c *Client) WatchSemaphore(ctx context.Context, name string, index int64, wait time.Duration) (SemaphoreWatchResult, error) {
	if err := checkWatch(name, index, wait); err != nil {
		return SemaphoreWatchResult{}, fmt.Errorf("watch semaphore %q: %w", name, err)
	}
	path := semaphorePath(name) + "/watch?" + c.watchQuery(index, wait)
	label := fmt.Sprintf("watch semaphore %q", name)
	var r SemaphoreWatchResult
	err := c.watchRetrying(ctx, label, path, func(resp *response) error {
		if err := resp.decode(&r); err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		if r.Index < 0 || r.FencingToken < 0 || checkHolders(name, r.Holders) != nil {
			return fmt.Errorf("%s: malformed response: %s", label, resp.body)
		}
		if r.Holders == nil {
			r.Holders = []PermitInfo{}
		}
		r.Name = name
		return nil
	})
	return r, err
}

// AdminPermit is a permit as the admin routes show it: the permit, the
// semaphore's number of permits and the IAM principal bound to it ("" without
// IAM auth). A permit inside its lock-delay has an ExpiresAt in the past.
type AdminPermit struct {
	PermitInfo
	// Permits is the semaphore's number of permits.
	Permits int `json:"permits"`
	// Principal is the IAM principal that took the permit, if any.
	Principal string `json:"principal,omitempty"`
	// ForceReleased is set for a permit an operator force released that
	// still keeps its slot (inside its lock-delay).
	ForceReleased bool `json:"force_released,omitempty"`
	// Queue is the semaphore's waiters in queue order, on its first
	// permit listed only; nil when none wait (a pointer keeps
	// AdminPermit comparable).
	Queue *Queue `json:"queue,omitempty"`
}

// PermitPage is one page of ListSemaphores.
type PermitPage struct {
	// Holders are the page's permits; a semaphore's are never split over
	// two pages.
	Holders []AdminPermit `json:"holders"`
	// Cursor is set when the listing goes on: pass it as
	// ListOptions.Cursor for the next page.
	Cursor string `json:"cursor,omitempty"`
}

// ListSemaphores returns one page of the permits that keep their slot
// (live, or expired but in their lock-delay) of the semaphores whose name
// starts with prefix. Limit counts permits, but a page ends after the
// semaphore that reaches it. A page may be short, even empty, and still
// have a Cursor: follow it. An admin call.
func (c *Client) ListSemaphores(ctx context.Context, prefix string, opt ListOptions) (PermitPage, error) {
	path, bad := listPath("/admin/semaphores", prefix, opt)
	return call(ctx, c, request{op: fmt.Sprintf("list semaphores %q", prefix), bad: bad, method: http.MethodGet, path: path},
		func(p *PermitPage) error {
			p.Holders = nonNil(p.Holders)
			return checkRows(p.Holders, "permit", func(p AdminPermit) bool {
				return strings.HasPrefix(p.Name, prefix) && p.Name != "" && p.FencingToken > 0 && p.Slot >= 0 && p.Permits >= 1
			})
		})
}

// ListAllSemaphores returns every permit ListSemaphores finds under
// prefix, following the cursor page by page until the listing ends or ctx
// does.
func (c *Client) ListAllSemaphores(ctx context.Context, prefix string) ([]AdminPermit, error) {
	return listAll(func(opt ListOptions) ([]AdminPermit, string, error) {
		page, err := c.ListSemaphores(ctx, prefix, opt)
		return page.Holders, page.Cursor, err
	})
}

// PermitForceReleased is what ForceReleasePermit did: the permit it ended,
// as it was, and when others may take the slot.
type PermitForceReleased struct {
	// AdminPermit is the permit it ended, as it was.
	AdminPermit
	// Reason is the reason the service recorded.
	Reason string `json:"reason"`
	// Immediate reports whether the slot was freed at once.
	Immediate bool `json:"immediate"`
	// FreeAt is when others may take the slot: now, or the end of the
	// permit's lock-delay.
	FreeAt time.Time `json:"free_at,omitzero"`
}

// ForceReleasePermit ends the permit in slot of the semaphore name whoever
// holds it, with reason (1–500 bytes) for the audit log, as ForceRelease
// does for a lock (opts: Immediate, FencingToken). It returns ErrNotFound
// when no permit keeps the slot, or ErrStaleToken with a *ProblemError
// whose CurrentPermit is the permit that does. An admin call.
func (c *Client) ForceReleasePermit(ctx context.Context, name string, slot int, reason string, opts ...ForceReleaseOptions) (PermitForceReleased, error) {
	req, bad := forceReleaseBody(reason, opts)
	if bad == nil {
		req["slot"] = slot
	}
	bad = cmp.Or(checkSlot(slot), bad)
	if name == "" || strings.Contains(name, "/") || strings.TrimSpace(reason) == "" {
		bad = fmt.Errorf("%w: name and reason must not be empty, and name has no \"/\"", ErrValidation)
	}
	f, err := call(ctx, c, request{op: fmt.Sprintf("force-release semaphore %q slot %d", name, slot), bad: bad, method: http.MethodDelete,
		path: "/admin" + semaphorePath(name), payload: req}, func(f *forced[AdminPermit]) error {
		if f.Ended.check(name) != nil || f.Ended.Slot != slot {
			return errors.New("malformed response: no permit ended")
		}
		return nil
	})
	return PermitForceReleased{AdminPermit: f.Ended, Reason: f.Reason, Immediate: f.Immediate, FreeAt: f.FreeAt}, err
}

// checkSlot checks a slot before it is sent.
func checkSlot(slot int) error {
	if slot < 0 || slot >= MaxPermits {
		return fmt.Errorf("%w: slot %d: want 0 to %d", ErrValidation, slot, MaxPermits-1)
	}
	return nil
}

// checkHolders checks the permits of a status or watch answer of name.
func checkHolders(name string, holders []PermitInfo) error {
	for _, h := range holders {
		if err := h.check(name); err != nil {
			return err
		}
	}
	return nil
}

func semaphorePath(name string) string { return "/semaphores/" + url.PathEscape(name) }
