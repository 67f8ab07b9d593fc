package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Lock is a live lease as the service reports it. Its times are the
// service's clock: informational, never a basis for deciding whether the
// lease is still held.
type Lock struct {
	// Resource is the lock's name.
	Resource string `json:"resource"`
	// Owner is who holds the lease.
	Owner string `json:"owner"`
	// FencingToken grows with every acquire of Resource.
	FencingToken int64 `json:"fencing_token"`
	// AcquiredAt is when this lease was taken.
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is when the lease ends unless renewed.
	ExpiresAt time.Time `json:"expires_at"`
	// LockDelaySeconds is the lease's lock-delay, 0 when it has none: if
	// it expires unreleased, others can take the lock only this long after
	// ExpiresAt.
	LockDelaySeconds int64 `json:"lock_delay_seconds,omitempty"`
}

func (l Lock) check(resource string) error {
	if l.FencingToken <= 0 || l.Owner == "" || l.ExpiresAt.IsZero() {
		return fmt.Errorf("malformed lock in response for %q", resource)
	}
	return nil
}

// Status returns the live lease on resource, or ErrNotFound when there is
// none.
func (c *Client) Status(ctx context.Context, resource string) (Lock, error) {
	if resource == "" || strings.Contains(resource, "/") {
		return Lock{}, fmt.Errorf("status %q: %w: resource must be non-empty and without \"/\"", resource, ErrValidation)
	}
	resp, err := c.send(ctx, http.MethodGet, lockPath(resource), nil)
	if err != nil {
		return Lock{}, fmt.Errorf("status %q: %w", resource, err)
	}
	var lock Lock
	if err := resp.decode(&lock); err != nil {
		return Lock{}, fmt.Errorf("status %q: %w", resource, err)
	}
	if err := lock.check(resource); err != nil {
		return Lock{}, fmt.Errorf("status %q: %w", resource, err)
	}
	return lock, nil
}

// Renew extends owner's live lease on resource to ttl (0: DefaultTTL) from
// now. With token
// non-zero the live lease must carry that fencing token (ErrStaleToken
// otherwise). A lease that expired cannot be renewed (ErrNotFound): acquire
// it again. Leases renew themselves; Lease.Renew renews one by hand.
func (c *Client) Renew(ctx context.Context, resource, owner string, ttl time.Duration, token int64) (Lock, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if err := checkArgs(resource, owner, ttl); err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	req := map[string]any{"owner": owner, "ttl_seconds": int64(ttl / time.Second)}
	if token != 0 {
		req["fencing_token"] = token
	}
	resp, err := c.send(ctx, http.MethodPost, lockPath(resource)+"/renew", req)
	if err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	var body struct {
		Renewed bool `json:"renewed"`
		Lock    Lock `json:"lock"`
	}
	if err := resp.decode(&body); err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	if !body.Renewed {
		return Lock{}, fmt.Errorf("renew %q: malformed response: renewed is false", resource)
	}
	if err := body.Lock.check(resource); err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	return body.Lock, nil
}

// Release ends owner's live lease on resource. With token non-zero the live
// lease must carry that fencing token. It returns ErrNotFound when there is
// no live lease (it expired or was released), ErrForbidden when another
// owner holds it and ErrStaleToken when a newer lease replaced token's.
func (c *Client) Release(ctx context.Context, resource, owner string, token int64) error {
	if resource == "" || strings.Contains(resource, "/") || strings.TrimSpace(owner) == "" {
		return fmt.Errorf("release %q: %w: resource and owner must not be empty, and resource has no \"/\"", resource, ErrValidation)
	}
	req := map[string]any{"owner": owner}
	if token != 0 {
		req["fencing_token"] = token
	}
	if _, err := c.send(ctx, http.MethodDelete, lockPath(resource), req); err != nil {
		return fmt.Errorf("release %q: %w", resource, err)
	}
	return nil
}

func checkArgs(resource, owner string, ttl time.Duration) error {
	switch {
	case resource == "":
		return fmt.Errorf("%w: empty resource", ErrValidation)
	case strings.Contains(resource, "/"):
		// The server refuses it too, but an API Gateway may route an
		// encoded "/" elsewhere before the server sees it.
		return fmt.Errorf("%w: resource must not contain \"/\"", ErrValidation)
	case strings.TrimSpace(owner) == "":
		return fmt.Errorf("%w: empty owner", ErrValidation)
	case ttl < time.Second || ttl%time.Second != 0:
		return fmt.Errorf("%w: ttl %s: must be a whole number of seconds, at least 1s", ErrValidation, ttl)
	}
	return nil
}

func lockPath(resource string) string { return "/locks/" + url.PathEscape(resource) }
