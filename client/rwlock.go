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

// Read/write locks: a name held by up to MaxReaders readers or by one
// writer (docs/design.md#readwrite-locks). Each grant is a Lease of its
// own, renewed and released by mode (and slot, for a reader) and token.

// MaxReaders is the largest number of readers a read/write lock holds at
// once (the service's bound R).
const MaxReaders = 64

// RWMode is the kind of a read/write lock's lease: ReadMode or WriteMode.
type RWMode string

// The two kinds of a read/write lock's lease.
const (
	// ReadMode is a reader's lease: shared with other readers, in a slot
	// of its own.
	ReadMode RWMode = "read"
	// WriteMode is the writer's lease: it excludes readers and writers.
	WriteMode RWMode = "write"
)

// RWLeaseInfo is a live lease of a read/write lock as the service reports
// it. Its times are the service's clock: informational only.
type RWLeaseInfo struct {
	// Name is the read/write lock's name.
	Name string `json:"name"`
	// Mode is ReadMode or WriteMode.
	Mode RWMode `json:"mode"`
	// Slot is a reader's slot, 0 to MaxReaders−1; 0 for the writer.
	Slot int `json:"slot,omitempty"`
	// Owner is who holds the lease.
	Owner string `json:"owner"`
	// FencingToken is strictly greater than every token issued before for
	// the name, read or write.
	FencingToken int64 `json:"fencing_token"`
	// AcquiredAt is when this lease was taken.
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is when the lease ends unless renewed.
	ExpiresAt time.Time `json:"expires_at"`
	// LockDelaySeconds is the lease's lock-delay, 0 when it has none.
	LockDelaySeconds int64 `json:"lock_delay_seconds,omitempty"`
}

func (i RWLeaseInfo) check(name string, mode RWMode) error {
	if i.Name != name || (mode != "" && i.Mode != mode) || (i.Mode != ReadMode && i.Mode != WriteMode) ||
		i.Slot < 0 || i.Slot >= MaxReaders || i.FencingToken <= 0 || i.Owner == "" || i.ExpiresAt.IsZero() {
		return fmt.Errorf("malformed lease in response for read/write lock %q", name)
	}
	return nil
}

// lock is the lease as a Lock (Lease.Lock of a read/write lock's lease).
func (i RWLeaseInfo) lock() Lock {
	return Lock{Resource: i.Name, Owner: i.Owner, FencingToken: i.FencingToken, AcquiredAt: i.AcquiredAt,
		ExpiresAt: i.ExpiresAt, LockDelaySeconds: i.LockDelaySeconds}
}

// RWLease is a reader's or the writer's lease of a read/write lock held by
// this client: a Lease (it renews itself, its Context ends the moment it is
// lost or released, Check judges it by the clock, Release ends it). Its
// fencing token is greater than every earlier token of the name, read or
// write: a resource that keeps the largest writer's token it saw refuses a
// writer with a smaller one, and a reader whose token is below it (a writer
// came after that reader's grant).
type RWLease struct {
	*Lease
}

// Name returns the read/write lock's name (the same as Resource).
func (l *RWLease) Name() string { return l.resource }

// Mode returns ReadMode or WriteMode.
func (l *RWLease) Mode() RWMode { return l.rw.mode }

// Slot returns a reader's slot, 0 to MaxReaders−1, and -1 for the writer.
func (l *RWLease) Slot() int {
	if l.rw.mode == WriteMode {
		return -1
	}
	return l.rw.slot
}

// Info returns the lease as the service last reported it (at the grant or
// the latest renewal).
func (l *RWLease) Info() RWLeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rw.info
}

// rwState is what a read/write lock's lease knows beyond a lock's.
type rwState struct {
	mode RWMode
	slot int
	info RWLeaseInfo // under the lease's mu
}

// TryAcquireRead asks once for a reader's lease of the read/write lock
// name, of ttl (0: WithTTL's, else DefaultTTL) for owner ("": WithOwner's,
// else a new unique owner). It returns the lease, or a *HeldError matching
// ErrHeld when a writer blocks, every slot is taken, or a waiter is queued.
// One owner may hold several readers' leases, each its own.
func (c *Client) TryAcquireRead(ctx context.Context, name, owner string, ttl time.Duration, opts ...AcquireOption) (*RWLease, error) {
	return c.tryRW(ctx, ReadMode, name, owner, ttl, opts)
}

// TryAcquireWrite asks once for the writer's lease of the read/write lock
// name (the arguments as for TryAcquireRead). It returns the lease, or a
// *HeldError matching ErrHeld when any lease blocks (a reader's, the
// caller's own included: there is no upgrade) or a waiter is queued.
func (c *Client) TryAcquireWrite(ctx context.Context, name, owner string, ttl time.Duration, opts ...AcquireOption) (*RWLease, error) {
	return c.tryRW(ctx, WriteMode, name, owner, ttl, opts)
}

// AcquireRead waits for a reader's lease of the read/write lock name as
// Acquire waits for a lock: a try first, then rounds on …/read/wait that
// keep the place in the lock's one queue (readers behind a queued writer
// wait for it), or polling a service that does not wait; until ctx ends
// and for at most DefaultAcquireWait when ctx has no deadline (WithWait,
// WithoutWaitLimit). The wait's end while held is a *HeldError.
func (c *Client) AcquireRead(ctx context.Context, name, owner string, ttl time.Duration, opts ...AcquireOption) (*RWLease, error) {
	return c.waitRW(ctx, ReadMode, name, owner, ttl, opts)
}

// AcquireWrite waits for the writer's lease of the read/write lock name as
// AcquireRead waits for a reader's: once queued, it keeps out every reader
// that arrives after it, and waits only for the leases granted before.
func (c *Client) AcquireWrite(ctx context.Context, name, owner string, ttl time.Duration, opts ...AcquireOption) (*RWLease, error) {
	return c.waitRW(ctx, WriteMode, name, owner, ttl, opts)
}

// WithReadLock takes a reader's lease of name as AcquireRead does (the TTL
// and owner from WithTTL and WithOwner), runs fn under it and releases it,
// also when fn panics, with WithLock's rules: fn's ctx ends the moment the
// lease may be lost, and the error reports a loss (ErrLeaseLost) with fn's.
func (c *Client) WithReadLock(ctx context.Context, name string, fn func(ctx context.Context, l *RWLease) error, opts ...AcquireOption) error {
	return c.withRW(ctx, ReadMode, name, fn, opts)
}

// WithWriteLock is WithReadLock with the writer's lease (AcquireWrite).
func (c *Client) WithWriteLock(ctx context.Context, name string, fn func(ctx context.Context, l *RWLease) error, opts ...AcquireOption) error {
	return c.withRW(ctx, WriteMode, name, fn, opts)
}

func (c *Client) tryRW(ctx context.Context, mode RWMode, name, owner string, ttl time.Duration, opts []AcquireOption) (*RWLease, error) {
	a, err := c.newRWAcquisition(mode, name, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	l, err := a.try(ctx)
	if err != nil {
		return nil, err
	}
	return &RWLease{l}, nil
}

func (c *Client) waitRW(ctx context.Context, mode RWMode, name, owner string, ttl time.Duration, opts []AcquireOption) (*RWLease, error) {
	a, err := c.newRWAcquisition(mode, name, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	l, err := a.wait(ctx)
	if err != nil {
		return nil, err
	}
	return &RWLease{l}, nil
}

func (c *Client) withRW(ctx context.Context, mode RWMode, name string, fn func(ctx context.Context, l *RWLease) error, opts []AcquireOption) error {
	l, err := c.waitRW(ctx, mode, name, "", 0, opts)
	if err != nil {
		return err
	}
	return runUnder(ctx, l.Lease, fmt.Sprintf("with %s lock %q", mode, name), func(ctx context.Context) error { return fn(ctx, l) })
}

// newRWAcquisition checks a read/write lock acquire's arguments.
func (c *Client) newRWAcquisition(mode RWMode, name, owner string, ttl time.Duration, opts []AcquireOption) (*acquisition, error) {
	a := &acquisition{c: c, resource: name, owner: owner, ttl: ttl, rwMode: mode}
	return c.setUpAcquisition(a, opts)
}

// rwAnswer sorts the 200 answer to a read/write lock acquire sent at t0.
func (a *acquisition) rwAnswer(resp *response, t0 time.Time, fail func(outcome, error) attemptResult) attemptResult {
	refused := func(body acquireAnswer, retry time.Duration) error {
		return &HeldError{Resource: a.resource, ExpiresAt: answerTime(body.FreeAt), RetryAfter: retry}
	}
	return sortAnswer(resp, fail, "lease", refused, func(l *RWLeaseInfo) (grant, error) {
		return grant{lock: l.lock(), t0: t0, rw: l}, l.check(a.resource, a.rwMode)
	})
}

// RenewRW extends owner's live lease of mode (a reader's: in slot) of the
// read/write lock name to ttl (0: DefaultTTL) from now; with token non-zero
// the lease must carry that fencing token. Errors as for Renew; a lease
// that the other mode's later grant judged ended is ErrNotFound. Leases
// renew themselves; RWLease.Renew renews one by hand.
func (c *Client) RenewRW(ctx context.Context, name, owner string, mode RWMode, slot int, ttl time.Duration, token int64) (RWLeaseInfo, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	type answer struct {
		Renewed bool        `json:"renewed"`
		Lease   RWLeaseInfo `json:"lease"`
	}
	payload := rwBody(owner, mode, slot, token)
	payload["ttl_seconds"] = int64(ttl / time.Second)
	body, err := call(ctx, c, request{op: fmt.Sprintf("renew %s lock %q", mode, name), bad: cmp.Or(checkArgs(name, owner, ttl), checkMode(mode, slot)),
		method: http.MethodPost, path: rwPath(name) + "/renew", payload: payload,
	}, func(b *answer) error {
		if err := b.Lease.check(name, mode); err != nil || (mode == ReadMode && b.Lease.Slot != slot) {
			return checkRenewed(b.Renewed, errors.New("malformed lease in response"))
		}
		return checkRenewed(b.Renewed, nil)
	})
	return body.Lease, err
}

// ReleaseRW ends owner's live lease of mode (a reader's: in slot) of the
// read/write lock name; with token non-zero the lease must carry that
// fencing token. Errors as for Release.
func (c *Client) ReleaseRW(ctx context.Context, name, owner string, mode RWMode, slot int, token int64) error {
	bad := checkMode(mode, slot)
	if name == "" || strings.Contains(name, "/") || strings.TrimSpace(owner) == "" {
		bad = fmt.Errorf("%w: name and owner must not be empty, and name has no \"/\"", ErrValidation)
	}
	_, err := call[noAnswer](ctx, c, request{op: fmt.Sprintf("release %s lock %q", mode, name), bad: bad, method: http.MethodDelete,
		path: rwPath(name), payload: rwBody(owner, mode, slot, token)}, nil)
	return err
}

// rwBody is the body naming owner's lease of mode (and slot, a reader's).
func rwBody(owner string, mode RWMode, slot int, token int64) map[string]any {
	b := map[string]any{"owner": owner, "mode": mode}
	if mode == ReadMode {
		b["slot"] = slot
	}
	return withToken(b, token)
}

// rwRelease is the release request of owner's lease of mode and slot, for
// releaseRetrying.
func (c *Client) rwRelease(name, owner string, mode RWMode, slot int, token int64) func(context.Context) error {
	return func(ctx context.Context) error { return c.ReleaseRW(ctx, name, owner, mode, slot, token) }
}

// ownerRWRelease is the clean-up release of owner's leases of mode of the
// read/write lock name (an acquire whose outcome stayed unknown, for an
// owner nobody else knows): the status read finds them; none is nothing to
// do.
func (c *Client) ownerRWRelease(name, owner string, mode RWMode) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := c.RWStatus(ctx, name)
		if err != nil {
			return err
		}
		var errs []error
		for _, l := range st.leases() {
			if l.Owner == owner && l.Mode == mode {
				errs = append(errs, c.ReleaseRW(ctx, name, owner, mode, l.Slot, l.FencingToken))
			}
		}
		return errors.Join(errs...)
	}
}

// RWQueueEntry is a waiter of a read/write lock.
type RWQueueEntry struct {
	// Mode is the lease the waiter asks for.
	Mode RWMode `json:"mode"`
	// Owner is the waiter's owner.
	Owner string `json:"owner"`
	// Until is when the place lapses unless the waiter keeps it.
	Until time.Time `json:"until"`
}

// RWStatus is a read/write lock's state: its live writer or readers, and
// its waiters in queue order.
type RWStatus struct {
	// Name is the read/write lock's name.
	Name string `json:"name"`
	// Writer is the live writer's lease, nil when none.
	Writer *RWLeaseInfo `json:"writer,omitempty"`
	// Readers are the live readers' leases.
	Readers []RWLeaseInfo `json:"readers"`
	// Queue is the waiters in arrival order.
	Queue []RWQueueEntry `json:"queue"`
	// FencingToken is the latest grant's token, live or not; 0 when the
	// name was never taken.
	FencingToken int64 `json:"fencing_token,omitempty"`
}

// leases returns the writer's lease, if any, and the readers'.
func (s RWStatus) leases() []RWLeaseInfo {
	if s.Writer == nil {
		return s.Readers
	}
	return append([]RWLeaseInfo{*s.Writer}, s.Readers...)
}

// RWStatus reads the read/write lock name strongly consistently: its live
// leases and its queue (none held is not an error).
func (c *Client) RWStatus(ctx context.Context, name string) (RWStatus, error) {
	return call(ctx, c, request{op: fmt.Sprintf("status of read/write lock %q", name), bad: checkName("name", name),
		method: http.MethodGet, path: rwPath(name)}, func(st *RWStatus) error {
		st.Readers, st.Queue, st.Name = nonNil(st.Readers), nonNil(st.Queue), name
		return checkRWLeases(name, st.Writer, st.Readers)
	})
}

// checkMode checks a mode and a reader's slot before they are sent.
func checkMode(mode RWMode, slot int) error {
	switch {
	case mode != ReadMode && mode != WriteMode:
		return fmt.Errorf("%w: mode %q: want %q or %q", ErrValidation, mode, ReadMode, WriteMode)
	case mode == ReadMode && (slot < 0 || slot >= MaxReaders):
		return fmt.Errorf("%w: slot %d: want 0 to %d", ErrValidation, slot, MaxReaders-1)
	}
	return nil
}

func rwPath(name string) string { return "/rwlocks/" + url.PathEscape(name) }

// AdminRWLease is a read/write lock's lease as the admin routes show it:
// the lease and the IAM principal bound to it ("" without IAM auth). A
// lease inside its lock-delay has an ExpiresAt in the past.
type AdminRWLease struct {
	RWLeaseInfo
	// Principal is the IAM principal that took the lease, if any.
	Principal string `json:"principal,omitempty"`
	// ForceReleased is set for a lease an operator force released that
	// still keeps others out (inside its lock-delay).
	ForceReleased bool `json:"force_released,omitempty"`
}

// AdminRWQueueEntry is a waiter of a read/write lock as the admin listing
// shows it.
type AdminRWQueueEntry struct {
	// Mode is the lease the waiter asks for.
	Mode RWMode `json:"mode"`
	// Owner is the waiter's owner.
	Owner string `json:"owner"`
	// Principal is the waiter's IAM principal, if any.
	Principal string `json:"principal,omitempty"`
	// JoinedAt is when the waiter took its place.
	JoinedAt time.Time `json:"joined_at"`
	// Until is when the place lapses unless the waiter keeps it.
	Until time.Time `json:"until"`
}

// AdminRWLock is one read/write lock of the admin listing: its writer or
// readers (each in its slot), its waiters in queue order with their kind,
// and the latest fencing token.
type AdminRWLock struct {
	// Name is the read/write lock's name.
	Name string `json:"name"`
	// Writer is the writer's lease, nil when none.
	Writer *AdminRWLease `json:"writer,omitempty"`
	// Readers are the readers' leases.
	Readers []AdminRWLease `json:"readers"`
	// Queue is the waiters in arrival order.
	Queue []AdminRWQueueEntry `json:"queue"`
	// FencingToken is the latest grant's token, live or not.
	FencingToken int64 `json:"fencing_token"`
}

// RWLockPage is one page of ListRWLocks.
type RWLockPage struct {
	// RWLocks are the page's read/write locks, in no order of names.
	RWLocks []AdminRWLock `json:"rwlocks"`
	// Cursor is set when the listing goes on: pass it as
	// ListOptions.Cursor for the next page.
	Cursor string `json:"cursor,omitempty"`
}

// ListRWLocks returns one page of the read/write locks whose name starts
// with prefix and that have a lease keeping others out (live, or inside
// its lock-delay) or a live waiter. Limit counts locks. A page may be
// short, even empty, and still have a Cursor: follow it. An admin call.
func (c *Client) ListRWLocks(ctx context.Context, prefix string, opt ListOptions) (RWLockPage, error) {
	path, bad := listPath("/admin/rwlocks", prefix, opt)
	return call(ctx, c, request{op: fmt.Sprintf("list read/write locks %q", prefix), bad: bad, method: http.MethodGet, path: path},
		func(p *RWLockPage) error {
			p.RWLocks = nonNil(p.RWLocks)
			for i := range p.RWLocks {
				l := &p.RWLocks[i]
				l.Readers, l.Queue = nonNil(l.Readers), nonNil(l.Queue)
				if !strings.HasPrefix(l.Name, prefix) || l.Name == "" {
					return fmt.Errorf("malformed read/write lock in response: %+v", *l)
				}
				if l.Writer != nil {
					if err := l.Writer.check(l.Name, WriteMode); err != nil {
						return err
					}
				}
				for _, r := range l.Readers {
					if err := r.check(l.Name, ReadMode); err != nil {
						return err
					}
				}
			}
			return nil
		})
}

// ListAllRWLocks returns every read/write lock ListRWLocks finds under
// prefix, following the cursor page by page until the listing ends or ctx
// does.
func (c *Client) ListAllRWLocks(ctx context.Context, prefix string) ([]AdminRWLock, error) {
	return listAll(func(opt ListOptions) ([]AdminRWLock, string, error) {
		page, err := c.ListRWLocks(ctx, prefix, opt)
		return page.RWLocks, page.Cursor, err
	})
}

// RWWatchResult is one answer of WatchRW: a read/write lock's state as a
// watcher sees it.
type RWWatchResult struct {
	// Name is the read/write lock's name.
	Name string `json:"name"`
	// Index identifies the state: 0 for a name never taken, else 2 × the
	// latest fencing token + 1 − the number of live leases. It grows at
	// every grant and every end, read or write (a renewal is no change).
	// Pass it to the next WatchRW.
	Index int64 `json:"index"`
	// Changed reports whether Index differs from the index asked with.
	Changed bool `json:"changed"`
	// Writer is the live writer's lease, nil when none.
	Writer *RWLeaseInfo `json:"writer,omitempty"`
	// Readers are the live readers' leases.
	Readers []RWLeaseInfo `json:"readers"`
	// FencingToken is the latest grant's token, read or write, live or
	// not; 0 for a name never taken.
	FencingToken int64 `json:"fencing_token,omitempty"`
}

// WatchRW is Watch for the read/write lock name: its writer and readers as
// soon as its state differs from index (0 at first, then the last answer's
// Index), or when wait (whole seconds, 0 to MaxServerWait) has passed.
// ErrUnavailable answers are retried with backoff until ctx ends.
func (c *Client) WatchRW(ctx context.Context, name string, index int64, wait time.Duration) (RWWatchResult, error) {
	if err := checkWatch(name, index, wait); err != nil {
		return RWWatchResult{}, fmt.Errorf("watch read/write lock %q: %w", name, err)
	}
	label := fmt.Sprintf("watch read/write lock %q", name)
	var r RWWatchResult
	err := c.watchRetrying(ctx, label, rwPath(name)+"/watch?"+c.watchQuery(index, wait), func(resp *response) error {
		if err := resp.decode(&r); err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		if r.Index < 0 || r.FencingToken < 0 || checkRWLeases(name, r.Writer, r.Readers) != nil {
			return fmt.Errorf("%s: malformed response: %s", label, resp.body)
		}
		r.Readers, r.Name = nonNil(r.Readers), name
		return nil
	})
	return r, err
}

// ObserveRW returns a channel of the read/write lock name's states: first
// the state when ObserveRW is called, then every change (a grant or an end,
// read or write), in order, as Election.Observe does for a lock. It
// long-polls with WatchRW, retrying failures with backoff, and closes the
// channel when ctx ends (at once for a name the client refuses). A state
// waits for its reader: the next one is the latest then.
func (c *Client) ObserveRW(ctx context.Context, name string) <-chan RWWatchResult {
	ch := make(chan RWWatchResult)
	go func() {
		defer close(ch)
		if checkWatch(name, 0, 0) != nil {
			return
		}
		follow(ctx, c, func(ctx context.Context, index int64, wait time.Duration) (RWWatchResult, int64, error) {
			r, err := c.WatchRW(ctx, name, index, wait)
			return r, r.Index, err
		}, func(r RWWatchResult) bool {
			select {
			case ch <- r:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return ch
}

// checkRWLeases checks the writer (nil: none) and the readers of a status
// or watch answer of the read/write lock name.
func checkRWLeases(name string, writer *RWLeaseInfo, readers []RWLeaseInfo) error {
	if writer != nil {
		if err := writer.check(name, WriteMode); err != nil {
			return err
		}
	}
	for _, r := range readers {
		if err := r.check(name, ReadMode); err != nil {
			return err
		}
	}
	return nil
}

// RWForceReleased is what ForceReleaseRW did: the lease it ended, as it
// was, and when others may take its place.
type RWForceReleased struct {
	// AdminRWLease is the lease it ended, as it was.
	AdminRWLease
	// Reason is the reason the service recorded.
	Reason string `json:"reason"`
	// Immediate reports whether the place was freed at once.
	Immediate bool `json:"immediate"`
	// FreeAt is when the ended lease stops keeping others out: now, or
	// the end of its lock-delay.
	FreeAt time.Time `json:"free_at,omitzero"`
}

// ForceReleaseRW ends one holder of the read/write lock name whoever holds
// it — the writer (WriteMode), or the reader in slot (ReadMode) — with
// reason (1–500 bytes) for the audit log, as ForceRelease does for a lock
// (opts: Immediate, FencingToken); the other holders keep their leases. It
// returns ErrNotFound when no lease keeps that place, or ErrStaleToken with
// a *ProblemError whose CurrentRWLease is the lease that does. An admin
// call.
func (c *Client) ForceReleaseRW(ctx context.Context, name string, mode RWMode, slot int, reason string, opts ...ForceReleaseOptions) (RWForceReleased, error) {
	req, bad := forceReleaseBody(reason, opts)
	if bad == nil {
		req["mode"] = mode
		if mode == ReadMode {
			req["slot"] = slot
		}
	}
	bad = cmp.Or(checkMode(mode, slot), bad)
	if name == "" || strings.Contains(name, "/") || strings.TrimSpace(reason) == "" {
		bad = fmt.Errorf("%w: name and reason must not be empty, and name has no \"/\"", ErrValidation)
	}
	op := fmt.Sprintf("force-release read/write lock %q writer", name)
	if mode == ReadMode {
		op = fmt.Sprintf("force-release read/write lock %q reader in slot %d", name, slot)
	}
	f, err := call(ctx, c, request{op: op, bad: bad, method: http.MethodDelete, path: "/admin" + rwPath(name), payload: req},
		func(f *forced[AdminRWLease]) error {
			if f.Ended.check(name, mode) != nil || (mode == ReadMode && f.Ended.Slot != slot) {
				return errors.New("malformed response: no lease ended")
			}
			return nil
		})
	return RWForceReleased{AdminRWLease: f.Ended, Reason: f.Reason, Immediate: f.Immediate, FreeAt: f.FreeAt}, err
}
