package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ft288/locks/client"
)

// acquireHelp is the help of `lockctl acquire`.
const acquireHelp = `Takes the lock on RESOURCE and prints the lease as JSON; it stays held
until its TTL runs out unless renewed ('lockctl renew') or released
('lockctl release') with the owner and token printed. Without --owner the
owner is HOST:PID:RANDOM, unique to this call. With --lock-delay, a lease
that expires unreleased keeps others from the lock that much longer.

With -n N (--permits N) RESOURCE is a semaphore of N permits: lockctl takes
one of them and prints the permit, with its "slot" (renew and release it
with --slot). Every acquirer must give the same N; another is refused
(exit 4). A full semaphore exits 75 as a held lock does.

If --wait runs out while a request is in flight and the service grants it
after all, lockctl releases that lease before it exits.`

// acquireCmd is `lockctl acquire`.
func acquireCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("acquire"), env)
	ttl := fs.duration("ttl", 30*time.Second, "lease length in whole `seconds`: 90 or 90s")
	wait := fs.duration("wait", 0, "how long to wait for the lock, in `seconds` or as a duration; 0 tries once")
	owner := fs.ownerFlag()
	lockDelay := fs.lockDelayFlag()
	permits := fs.permitsFlag()
	held := fs.heldFlags()
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkTTL(*ttl)
	}
	if err == nil {
		err = checkPermits(*permits)
	}
	var opts []client.AcquireOption
	if err == nil {
		opts, err = checkLockDelay(*lockDelay)
	}
	if err == nil {
		err = held.check()
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		if *permits > 0 {
			p, err := takePermit(ctx, c, resource, *permits, *owner, *ttl, *wait, opts)
			if errors.Is(err, client.ErrFull) {
				h := &heldError{err: err, opt: held}
				if *wait > 0 {
					h.msg = fmt.Sprintf("semaphore %q is full: its %d permits are held by other owners; gave up after waiting %s (--wait)", resource, *permits, *wait)
				}
				return nil, h
			}
			if err != nil {
				return nil, err
			}
			return p.Info(), nil
		}
		lease, err := take(ctx, c, resource, *owner, *ttl, *wait, opts)
		if errors.Is(err, client.ErrHeld) {
			h := &heldError{err: err, opt: held}
			if *wait > 0 {
				h.msg = fmt.Sprintf("lock %q is held by another owner; gave up after waiting %s (--wait)", resource, *wait)
			}
			return nil, h
		}
		if err != nil {
			return nil, err
		}
		return lease.Lock(), nil
	})
}
