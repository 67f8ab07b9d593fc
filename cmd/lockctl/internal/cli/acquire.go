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

With --lock NAME, once per name (and no RESOURCE), lockctl takes a lock
set: every name or none, for one owner, each name with its own lease and
fencing token. It prints {"set_id", "owner", "locks": [...]}, the leases in
the set's name order (byte order). Renew or release the names one at a
time with 'lockctl renew' and 'lockctl release' and the owner printed.

With --read or --write RESOURCE is a read/write lock: lockctl takes a
reader's lease (shared with other readers) or the writer's and prints it,
with its "mode" and a reader's "slot". Renew and release it with --read
--slot K or --write. Refused, it exits 75 as a held lock does.

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
	rw := fs.rwFlags()
	held := fs.heldFlags()
	locks := fs.lockFlag()
	setPrefix := fs.String("set-prefix", "", "with --lock: the lock set's path `prefix`, which every name must begin with (default: the names' longest common prefix)")
	names, rest, err := parseRun(fs, args, locks)
	if err == nil && len(rest) > 0 {
		err = &usageError{fmt.Sprintf("unexpected arguments: %q", rest)}
	}
	var resource string
	if err == nil {
		resource = names[0]
	}
	set := len(*locks) > 0
	if err == nil && set && *permits > 0 {
		err = &usageError{"-n and --lock do not go together: a lock set's names are locks"}
	}
	if err == nil {
		err = rw.check(*permits, set)
	}
	if err == nil && !set && isSet(fs.FlagSet, "set-prefix") {
		err = &usageError{"--set-prefix needs --lock"}
	}
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
	if *setPrefix != "" {
		opts = append(opts, client.WithSetPrefix(*setPrefix))
	}
	return fs.common.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		if set {
			s, err := takeSet(ctx, c, *locks, *owner, *ttl, *wait, opts)
			if errors.Is(err, client.ErrHeld) {
				h := &heldError{err: heldCause(err), opt: held}
				if *wait > 0 {
					h.msg = fmt.Sprintf("%v; gave up after waiting %s (--wait)", heldCause(err), *wait)
				}
				return nil, h
			}
			if err != nil {
				return nil, err
			}
			return setInfo(s), nil
		}
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
		if m := rw.mode(); m != "" {
			l, err := takeRW(ctx, c, resource, m, *owner, *ttl, *wait, opts)
			if errors.Is(err, client.ErrHeld) {
				h := &heldError{err: err, opt: held, msg: rwHeld(resource, m)}
				if *wait > 0 {
					h.msg += fmt.Sprintf("; gave up after waiting %s (--wait)", *wait)
				}
				return nil, h
			}
			if err != nil {
				return nil, err
			}
			return rwInfo(l), nil
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

// setJSON is a lock set as `acquire --lock` prints it.
type setJSON struct {
	SetID string        `json:"set_id"`
	Owner string        `json:"owner"`
	Locks []client.Lock `json:"locks"`
}

// setInfo is s as `acquire --lock` prints it.
func setInfo(s *client.Set) setJSON {
	out := setJSON{SetID: s.ID(), Owner: s.Owner()}
	for _, l := range s.Leases() {
		out.Locks = append(out.Locks, l.Lock())
	}
	return out
}
