package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The admin routes are for operators; see "Operators" in the package
// documentation.

// AdminLock is a lease as the admin routes show it: the Lock and the IAM
// principal bound to it ("" without IAM auth). A lease inside its
// lock-delay has an ExpiresAt in the past.
type AdminLock struct {
	Lock
	// Principal is the IAM principal that took the lease, if any.
	Principal string `json:"principal,omitempty"`
	// Queue is the lock's waiters in queue order, in a listing only; nil
	// when none wait. (A pointer keeps AdminLock comparable, as it was
	// before listings showed queues.)
	Queue *Queue `json:"queue,omitempty"`
	// SetID is the lock set whose request granted the lease (Set.ID),
	// "" for a lease of its own.
	SetID string `json:"set_id,omitempty"`
}

// Queue is the waiters of a lock or a semaphore in queue order, as the
// listings show them.
type Queue []QueueEntry

// QueueEntry is a waiter's place in a queue, as the listings show it.
type QueueEntry struct {
	// Owner is the waiter's owner.
	Owner string `json:"owner"`
	// Principal is the waiter's IAM principal, if any.
	Principal string `json:"principal,omitempty"`
	// JoinedAt is when it joined the queue; zero for a place taken
	// before the service recorded it.
	JoinedAt time.Time `json:"joined_at,omitzero"`
	// Until is when the place lapses unless the waiter's next round
	// keeps it.
	Until time.Time `json:"until"`
}

// ListOptions shapes one page of a listing.
type ListOptions struct {
	// Limit is the most leases in the page, 1 to 1000; 0 means the
	// service's default (100).
	Limit int
	// Cursor continues a listing: the Cursor of the previous page.
	Cursor string
}

// LockPage is one page of a listing.
type LockPage struct {
	// Locks are the page's leases, in no order of names.
	Locks []AdminLock `json:"locks"`
	// Cursor is set when the listing goes on: pass it as
	// ListOptions.Cursor for the next page.
	Cursor string `json:"cursor,omitempty"`
}

// List returns one page of the leases that keep others from their lock
// (live, or expired but in their lock-delay) whose name starts with prefix.
// A page may be short, even empty, and still have a Cursor: follow it.
func (c *Client) List(ctx context.Context, prefix string, opt ListOptions) (LockPage, error) {
	path, bad := listPath("/admin/locks", prefix, opt)
	return call(ctx, c, request{op: fmt.Sprintf("list %q", prefix), bad: bad, method: http.MethodGet, path: path}, func(p *LockPage) error {
		p.Locks = nonNil(p.Locks)
		return checkRows(p.Locks, "lock", func(l AdminLock) bool {
			return strings.HasPrefix(l.Resource, prefix) && l.Resource != "" && l.FencingToken > 0
		})
	})
}

// checkRows checks a listing's rows with ok; what names a row in the error.
func checkRows[R any](rows []R, what string, ok func(R) bool) error {
	for _, r := range rows {
		if !ok(r) {
			return fmt.Errorf("malformed %s in response: %+v", what, r)
		}
	}
	return nil
}

// nonNil returns rows, or an empty slice for nil: a page's rows are never
// nil.
func nonNil[R any](rows []R) []R {
	if rows == nil {
		return []R{}
	}
	return rows
}

// listPath is the path of a listing's page at route.
func listPath(route, prefix string, opt ListOptions) (string, error) {
	if strings.Contains(prefix, "/") {
		return "", fmt.Errorf("%w: prefix must not contain \"/\"", ErrValidation)
	}
	if opt.Limit < 0 || opt.Limit > 1000 {
		return "", fmt.Errorf("%w: limit %d: want 1 to 1000 (0: the default)", ErrValidation, opt.Limit)
	}
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if opt.Limit > 0 {
		q.Set("limit", strconv.Itoa(opt.Limit))
	}
	if opt.Cursor != "" {
		q.Set("cursor", opt.Cursor)
	}
	if len(q) > 0 {
		route += "?" + q.Encode()
	}
	return route, nil
}

// ListAll returns every lease List finds under prefix, following the
// cursor page by page until the listing ends or ctx does.
func (c *Client) ListAll(ctx context.Context, prefix string) ([]AdminLock, error) {
	return listAll(func(opt ListOptions) ([]AdminLock, string, error) {
		page, err := c.List(ctx, prefix, opt)
		return page.Locks, page.Cursor, err
	})
}

// listAll follows a listing's cursor from its first page on (next asks
// for one), until the listing ends or a page fails; the rows so far come
// with the failure.
func listAll[R any](next func(ListOptions) (rows []R, cursor string, err error)) ([]R, error) {
	all := []R{}
	opt := ListOptions{Limit: 1000}
	for {
		rows, cursor, err := next(opt)
		if err != nil {
			return all, err
		}
		all = append(all, rows...)
		if cursor == "" {
			return all, nil
		}
		opt.Cursor = cursor
	}
}

// ForceReleaseOptions shape a force release. The zero value is the
// default: end whichever lease blocks the lock, keeping its lock-delay.
type ForceReleaseOptions struct {
	// Immediate frees the lock at once, lock-delay or not: for an operator
	// who knows the holder is dead. Without it the lease expires now but
	// keeps its lock-delay: nobody, not even the evicted owner, may take
	// the lock until FreeAt, so a holder that is slow rather than dead
	// cannot overlap the next one.
	Immediate bool
	// FencingToken, when non-zero, ends only the lease with this token —
	// the one the operator saw — and otherwise fails with ErrStaleToken and
	// the lease that blocks the lock instead (ProblemError.Current).
	FencingToken int64
}

// ForceReleased is what a force release did: the lease it ended, as it
// was, and when others may take the lock.
type ForceReleased struct {
	// AdminLock is the lease it ended, as it was.
	AdminLock
	// Reason is the reason the service recorded.
	Reason string `json:"reason"`
	// Immediate reports whether the lock was freed at once, lock-delay or
	// not.
	Immediate bool `json:"immediate"`
	// FreeAt is when others may take the lock: now for an immediate force
	// release or a lease without lock-delay, else the end of the lease's
	// lock-delay. Zero when the service did not say (a service that
	// predates it, which frees the lock at once).
	FreeAt time.Time `json:"free_at,omitzero"`
}

// ForceRelease ends the lease on resource whoever holds it, with reason
// (1–500 bytes) for the audit log, and returns the lease it ended. It
// returns ErrNotFound when no lease blocks the lock, or ErrStaleToken with
// a *ProblemError whose Current is the lease that does.
func (c *Client) ForceRelease(ctx context.Context, resource, reason string, opts ...ForceReleaseOptions) (ForceReleased, error) {
	req, bad := forceReleaseBody(reason, opts)
	if resource == "" || strings.Contains(resource, "/") || strings.TrimSpace(reason) == "" {
		bad = fmt.Errorf("%w: resource and reason must not be empty, and resource has no \"/\"", ErrValidation)
	}
	f, err := call(ctx, c, request{op: fmt.Sprintf("force-release %q", resource), bad: bad, method: http.MethodDelete,
		path: "/admin/locks/" + url.PathEscape(resource), payload: req}, func(f *forced[AdminLock]) error { return f.Ended.check(resource) })
	return ForceReleased{AdminLock: f.Ended, Reason: f.Reason, Immediate: f.Immediate, FreeAt: f.FreeAt}, err
}

// forced is a force release's answer, the lease it ended of type L (an
// AdminLock or an AdminPermit).
type forced[L any] struct {
	Ended     L         `json:"ended"`
	Reason    string    `json:"reason"`
	Immediate bool      `json:"immediate"`
	FreeAt    time.Time `json:"free_at"`
}

// forceReleaseBody is the body of a force release with reason and opts.
func forceReleaseBody(reason string, opts []ForceReleaseOptions) (map[string]any, error) {
	if len(opts) > 1 {
		return nil, fmt.Errorf("%w: at most one ForceReleaseOptions", ErrValidation)
	}
	req := map[string]any{"reason": reason}
	if len(opts) == 1 {
		opt := opts[0]
		if opt.FencingToken < 0 {
			return nil, fmt.Errorf("%w: fencing token %d: want a positive token, or 0 for any", ErrValidation, opt.FencingToken)
		}
		if opt.Immediate {
			req["immediate"] = true
		}
		if opt.FencingToken > 0 {
			req["fencing_token"] = opt.FencingToken
		}
	}
	return req, nil
}
