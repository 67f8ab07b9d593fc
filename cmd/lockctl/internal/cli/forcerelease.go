package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ft288/locks/client"
)

// forceReleaseHelp is the help of `lockctl force-release`.
const forceReleaseHelp = `Ends the lease on RESOURCE whoever holds it, and prints the lease it ended
as JSON with "reason", "immediate" and "free_at" (when others may take the
lock); exits 3 when no lease holds the lock. --reason (1 to 500 bytes) is
required: the service writes it to its audit log with your identity, the
owner and the fencing token it ended. The fencing counter survives: the
next grant gets a larger token, and the ended holder's renewals fail, so
its 'lockctl run' stops its command. Use it for a holder that is gone while
its lease runs on (a long TTL), not to take a lock from a live job.

By default the lease expires now but keeps its lock-delay: nobody, the
evicted owner included, may take the lock until free_at, so a holder that
is slow rather than dead cannot overlap the next one. --immediate frees the
lock at once: for a holder you know is dead. --token N ends only the lease
with fencing token N (the one you saw in 'lockctl ls'); when another lease
holds the lock by then, lockctl shows it, suggests its --token, and exits 4.

With --slot K RESOURCE is a semaphore, and the permit ended is the one in
slot K (as 'lockctl ls --semaphores' showed it): the same rules, for that
slot.

With --read --slot K or --write RESOURCE is a read/write lock, and the
lease ended is the reader's in slot K or the writer's (as 'lockctl ls --rw'
showed them): the same rules for that lease; the other holders keep
theirs.

An admin command: against the IAM-authorized API it needs an identity
allowed to call the /admin routes (see docs/api.md, Admin API).`

// forceReleaseCmd is `lockctl force-release`.
func forceReleaseCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("force-release"), env)
	reason := fs.String("reason", "", "why, for the audit log: `TEXT` of 1 to 500 bytes (required)")
	immediate := fs.Bool("immediate", false, "free the lock at once, ignoring the lease's lock-delay (the holder is dead)")
	token := fs.Int64("token", 0, "end only the lease with this fencing `token` (as 'lockctl ls' showed it)")
	slot := fs.slotFlag("RESOURCE is a semaphore: end the permit in slot `K` (with --read: the reader in slot K)")
	rw := fs.rwFlags()
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkSlot(fs, *slot)
	}
	if err == nil {
		err = rw.checkByHand(fs)
	}
	if err == nil && strings.TrimSpace(*reason) == "" {
		err = &usageError{"--reason is required"}
	}
	if err == nil && *token < 0 {
		err = &usageError{fmt.Sprintf("--token %d: want a positive fencing token", *token)}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	opts := client.ForceReleaseOptions{Immediate: *immediate, FencingToken: *token}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		if m := rw.mode(); m != "" {
			ended, err := c.ForceReleaseRW(ctx, resource, m, max(*slot, 0), *reason, opts)
			var p *client.ProblemError
			if errors.Is(err, client.ErrStaleToken) && errors.As(err, &p) && p.CurrentRWLease != nil {
				what := "writer's place"
				if m == client.ReadMode {
					what = "reader's slot"
				}
				return nil, &staleForceRelease{err: err, current: *p.CurrentRWLease, token: p.CurrentRWLease.FencingToken, flags: args, what: what}
			}
			return ended, err
		}
		if isSet(fs.FlagSet, "slot") {
			ended, err := c.ForceReleasePermit(ctx, resource, *slot, *reason, opts)
			var p *client.ProblemError
			if errors.Is(err, client.ErrStaleToken) && errors.As(err, &p) && p.CurrentPermit != nil {
				return nil, &staleForceRelease{err: err, current: *p.CurrentPermit, token: p.CurrentPermit.FencingToken, flags: args, what: "slot"}
			}
			return ended, err
		}
		ended, err := c.ForceRelease(ctx, resource, *reason, opts)
		var p *client.ProblemError
		if errors.Is(err, client.ErrStaleToken) && errors.As(err, &p) && p.Current != nil {
			return nil, &staleForceRelease{err: err, current: *p.Current, token: p.Current.FencingToken, flags: args, what: "lock"}
		}
		return ended, err
	})
}

// staleForceRelease is a force release refused because another lease than
// the one asked for holds the lock; it shows that lease and how to end it.
type staleForceRelease struct {
	err     error
	current any      // client.AdminLock, client.AdminPermit, or client.AdminRWLease
	token   int64    // current's
	what    string   // "lock", "slot", "writer's place" or "reader's slot"
	flags   []string // the command line, for the suggestion
}

func (e *staleForceRelease) Error() string {
	cur, _ := json.Marshal(e.current)
	args := []string{"lockctl", "force-release"}
	skip := false
	for _, a := range e.flags {
		switch {
		case skip:
			skip = false
			continue
		case a == "--token" || a == "-token":
			skip = true
			continue
		case strings.HasPrefix(a, "--token=") || strings.HasPrefix(a, "-token="):
			continue
		}
		args = append(args, shellQuote(a))
	}
	args = append(args, "--token", strconv.FormatInt(e.token, 10))
	return fmt.Sprintf("%v\nthe %s is held by another lease now: %s\nto end that one, check it and run: %s", e.err, e.what, cur, strings.Join(args, " "))
}

func (e *staleForceRelease) Unwrap() error { return e.err }

// shellQuote quotes s for a POSIX shell unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
