package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The admin routes are for operators: in AWS only identities whose IAM
// policy allows execute-api:Invoke on the /admin routes may call them (a
// lock user's call is answered 403 by API Gateway, a *ProblemError).

// AdminLock is a lease as the admin routes show it: the Lock and the IAM
// principal bound to it ("" without IAM auth). A lease inside its
// lock-delay has an ExpiresAt in the past.
type AdminLock struct {
	Lock
	// Principal is the IAM principal that took the lease, if any.
	Principal string `json:"principal,omitempty"`
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

// List returns one page of the leases that keep others from their lock —
// live leases, and expired ones still in their lock-delay — whose name
// starts with prefix ("" for every lock). The service scans its table, so a
// page may hold fewer than Limit leases, even none, and still have a
// Cursor: follow it until it is empty (or use ListAll).
func (c *Client) List(ctx context.Context, prefix string, opt ListOptions) (LockPage, error) {
	if strings.Contains(prefix, "/") {
		return LockPage{}, fmt.Errorf("list %q: %w: prefix must not contain \"/\"", prefix, ErrInvalid)
	}
	if opt.Limit < 0 || opt.Limit > 1000 {
		return LockPage{}, fmt.Errorf("list %q: %w: limit %d: want 1 to 1000 (0: the default)", prefix, ErrInvalid, opt.Limit)
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
	path := "/admin/locks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return LockPage{}, fmt.Errorf("list %q: %w", prefix, err)
	}
	var page LockPage
	if err := resp.decode(&page); err != nil {
		return LockPage{}, fmt.Errorf("list %q: %w", prefix, err)
	}
	for _, l := range page.Locks {
		if l.Resource == "" || !strings.HasPrefix(l.Resource, prefix) || l.FencingToken <= 0 {
			return LockPage{}, fmt.Errorf("list %q: malformed lock in response: %+v", prefix, l)
		}
	}
	if page.Locks == nil {
		page.Locks = []AdminLock{}
	}
	return page, nil
}

// ListAll returns every lease List finds under prefix, following the
// cursor page by page until the listing ends or ctx does.
func (c *Client) ListAll(ctx context.Context, prefix string) ([]AdminLock, error) {
	locks := []AdminLock{}
	opt := ListOptions{Limit: 1000}
	for {
		page, err := c.List(ctx, prefix, opt)
		if err != nil {
			return locks, err
		}
		locks = append(locks, page.Locks...)
		if page.Cursor == "" {
			return locks, nil
		}
		opt.Cursor = page.Cursor
	}
}

// ForceRelease ends the lease on resource whoever holds it (an operator's
// tool for a holder that is gone, e.g. with a long TTL) and returns the
// lease it ended. reason is required (1–500 bytes): the service writes it
// to its audit log with the caller's identity. The fencing counter
// survives: the next grant gets a larger token, and the ended holder's
// renewals fail (its lease's context ends with ErrNotFound). ErrNotFound
// when no lease blocks the lock.
func (c *Client) ForceRelease(ctx context.Context, resource, reason string) (AdminLock, error) {
	if resource == "" || strings.Contains(resource, "/") || strings.TrimSpace(reason) == "" {
		return AdminLock{}, fmt.Errorf("force-release %q: %w: resource and reason must not be empty, and resource has no \"/\"", resource, ErrInvalid)
	}
	resp, err := c.send(ctx, http.MethodDelete, "/admin/locks/"+url.PathEscape(resource), map[string]string{"reason": reason})
	if err != nil {
		return AdminLock{}, fmt.Errorf("force-release %q: %w", resource, err)
	}
	var body struct {
		Ended AdminLock `json:"ended"`
	}
	if err := resp.decode(&body); err != nil {
		return AdminLock{}, fmt.Errorf("force-release %q: %w", resource, err)
	}
	if err := body.Ended.check(resource); err != nil {
		return AdminLock{}, fmt.Errorf("force-release %q: %w", resource, err)
	}
	return body.Ended, nil
}
