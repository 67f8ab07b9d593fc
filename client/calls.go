package client

import (
	"context"
	"errors"
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

// request is one call of the API: the operation that names it in errors
// (`renew "payment:42"`), what is wrong with its arguments (nil: nothing;
// it is then not sent), and the HTTP request.
type request struct {
	op      string
	bad     error
	method  string
	path    string
	payload any
}

// noAnswer is the answer type of a call whose success has no body.
type noAnswer struct{}

// call makes r and returns its 2xx answer decoded as T, then checked by
// check (nil: none). It is the one place where a call's failures are
// named: every error is "op: cause".
func call[T any](ctx context.Context, c *Client, r request, check func(*T) error) (T, error) {
	var out T
	err := r.bad
	if err == nil {
		err = c.answer(ctx, r, &out)
	}
	if err == nil && check != nil {
		err = check(&out)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", r.op, err)
	}
	return out, nil
}

// answer sends r and decodes its answer into out (a *noAnswer: nothing to
// decode).
func (c *Client) answer(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r.method, r.path, r.payload)
	if err != nil {
		return err
	}
	if _, none := out.(*noAnswer); none {
		return nil
	}
	return resp.decode(out)
}

// checkName checks a lock's or a semaphore's name (what) before it is sent.
func checkName(what, name string) error {
	if name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%w: %s must be non-empty and without \"/\"", ErrValidation, what)
	}
	return nil
}

// withToken adds the fencing_token member to payload unless token is 0.
func withToken(payload map[string]any, token int64) map[string]any {
	if token != 0 {
		payload["fencing_token"] = token
	}
	return payload
}

// Status returns the live lease on resource, or ErrNotFound when there is
// none.
func (c *Client) Status(ctx context.Context, resource string) (Lock, error) {
	return call(ctx, c, request{op: fmt.Sprintf("status %q", resource), bad: checkName("resource", resource),
		method: http.MethodGet, path: lockPath(resource)}, func(l *Lock) error { return l.check(resource) })
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
	type answer struct {
		Renewed bool `json:"renewed"`
		Lock    Lock `json:"lock"`
	}
	body, err := call(ctx, c, request{op: fmt.Sprintf("renew %q", resource), bad: checkArgs(resource, owner, ttl),
		method: http.MethodPost, path: lockPath(resource) + "/renew",
		payload: withToken(map[string]any{"owner": owner, "ttl_seconds": int64(ttl / time.Second)}, token),
	}, func(b *answer) error { return checkRenewed(b.Renewed, b.Lock.check(resource)) })
	return body.Lock, err
}

// checkRenewed is a renewal answer's check: renewed, and its lease's check
// (leaseErr).
func checkRenewed(renewed bool, leaseErr error) error {
	if !renewed {
		return errors.New("malformed response: renewed is false")
	}
	return leaseErr
}

// Release ends owner's live lease on resource. With token non-zero the live
// lease must carry that fencing token. It returns ErrNotFound when there is
// no live lease (it expired or was released), ErrForbidden when another
// owner holds it and ErrStaleToken when a newer lease replaced token's.
func (c *Client) Release(ctx context.Context, resource, owner string, token int64) error {
	var bad error
	if resource == "" || strings.Contains(resource, "/") || strings.TrimSpace(owner) == "" {
		bad = fmt.Errorf("%w: resource and owner must not be empty, and resource has no \"/\"", ErrValidation)
	}
	_, err := call[noAnswer](ctx, c, request{op: fmt.Sprintf("release %q", resource), bad: bad,
		method: http.MethodDelete, path: lockPath(resource), payload: withToken(map[string]any{"owner": owner}, token)}, nil)
	return err
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
