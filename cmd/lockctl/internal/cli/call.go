package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/client/awsauth"
)

// requestTimeout bounds single requests that are not part of a wait.
const requestTimeout = 30 * time.Second

// drainTimeout bounds how long lockctl waits, before it exits, for the
// clean-up releases (see "Leases nobody heard of" in doc.go): a round's
// answer, then its release.
const drainTimeout = client.MaxServerWait + 10*time.Second

// client builds the service's client from the common flags.
func (c *common) client(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	if c.sigv4 {
		opt, err := awsauth.SigV4FromDefaultChain(ctx, c.region)
		if err != nil {
			return nil, fmt.Errorf("--sigv4: %w", err)
		}
		opts = append(opts, opt)
	}
	return client.New(c.endpoint, append(opts, client.WithUserAgent("lockctl/1"))...)
}

// call runs do, one request of a command, bounded by timeout (0: do's own
// bound) and by SIGINT/SIGTERM; prints its result as JSON unless nil; drains
// the clean-up releases; and returns the exit code.
func (c *common) call(env Env, timeout time.Duration, do func(context.Context, *client.Client) (any, error)) int {
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The lease of `acquire` outlives lockctl: nothing renews it.
	cl, err := c.client(ctx, client.WithoutKeepAlive())
	if err != nil {
		return failed(env, err)
	}
	if timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, timeout)
		defer cancelTimeout()
	}
	type result struct {
		out any
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := do(ctx, cl)
		done <- result{out, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-sigc:
		cancel()
		r = <-done
	}
	code := ExitOK
	if r.err != nil {
		code = failed(env, r.err)
	} else if r.out != nil { // nil: do wrote its own output
		printJSON(env.Stdout, r.out)
	}
	drain(cl, sigc)
	return code
}

// drain waits up to drainTimeout for c's clean-up releases, or until a
// signal arrives on abort (a second Ctrl-C).
func drain(c *client.Client, abort <-chan os.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if abort != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-abort:
				cancel()
			case <-done:
			}
		}()
	}
	_ = c.Drain(ctx)
}

// take acquires resource: once when wait is 0, else waiting up to wait.
// An empty owner has the client make up a unique one.
func take(ctx context.Context, c *client.Client, resource, owner string, ttl, wait time.Duration, opts []client.AcquireOption) (*client.Lease, error) {
	if wait <= 0 {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return c.TryAcquire(ctx, resource, owner, ttl, opts...)
	}
	// The client's own bound, not a deadline on ctx: when it runs out the
	// error says how long it waited instead of "context deadline exceeded".
	return c.Acquire(ctx, resource, owner, ttl, append(opts, client.WithWait(wait))...)
}

// takePermit takes one of the permits of the semaphore name, as take
// takes a lock.
func takePermit(ctx context.Context, c *client.Client, name string, permits int, owner string, ttl, wait time.Duration, opts []client.AcquireOption) (*client.Permit, error) {
	if wait <= 0 {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return c.TryAcquireSemaphore(ctx, name, permits, owner, ttl, opts...)
	}
	return c.AcquireSemaphore(ctx, name, permits, owner, ttl, append(opts, client.WithWait(wait))...)
}

// failed reports err and returns its exit code.
func failed(env Env, err error) int {
	var held *heldError
	if errors.As(err, &held) {
		if !held.opt.quiet {
			fmt.Fprintln(env.Stderr, "lockctl:", err)
		}
		return held.opt.code
	}
	fmt.Fprintln(env.Stderr, "lockctl:", err)
	return exitCode(err)
}

// exitCode is the exit code for err.
func exitCode(err error) int {
	switch {
	case errors.Is(err, client.ErrHeld):
		return ExitHeld
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, client.ErrForbidden), errors.Is(err, client.ErrStaleToken), errors.Is(err, client.ErrPermitsMismatch):
		return ExitConflict
	case errors.Is(err, client.ErrValidation):
		return ExitUsage
	}
	return ExitError
}

// heldError is an error for the lock being held by another owner, reported
// (msg, else err's text) and coded as heldOptions say.
type heldError struct {
	err error
	opt *heldOptions
	msg string
}

func (e *heldError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return e.err.Error()
}
func (e *heldError) Unwrap() error { return e.err }

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) {
	_ = json.NewEncoder(w).Encode(v)
}

// takeSet takes every one of names, all or none, as take takes a lock.
func takeSet(ctx context.Context, c *client.Client, names []string, owner string, ttl, wait time.Duration, opts []client.AcquireOption) (*client.Set, error) {
	if wait <= 0 {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return c.TryAcquireSet(ctx, names, owner, ttl, opts...)
	}
	return c.AcquireSet(ctx, names, owner, ttl, append(opts, client.WithWait(wait))...)
}
