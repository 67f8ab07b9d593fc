package cli

import (
	"context"

	"github.com/ft288/locks/client"
)

// statusHelp is the help of `lockctl status`.
const statusHelp = `Prints the live lease on RESOURCE as JSON; exits 3 when there is none.

With -s (--semaphore) RESOURCE is a semaphore: it prints its number of
permits and its live permits, {"name", "permits", "holders": [...]}, each
with its slot, owner and fencing token; a semaphore nobody holds has no
holders (exit 0).

With --rw RESOURCE is a read/write lock: it prints its live leases and its
waiters, {"name", "writer", "readers": [...], "queue": [...],
"fencing_token"}, each lease with its mode, a reader's slot, its owner and
fencing token, and each waiter with the lease it waits for; a read/write
lock nobody holds has no writer and no readers (exit 0).`

// statusCmd is `lockctl status`.
func statusCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("status"), env)
	sem := fs.semaphoreFlag("RESOURCE is a semaphore: print its permits")
	rw := fs.rwFlag("RESOURCE is a read/write lock: print its writer, readers and waiters")
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkKind(*sem, *rw)
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		switch {
		case *sem:
			return c.SemaphoreStatus(ctx, resource)
		case *rw:
			return c.RWStatus(ctx, resource)
		}
		return c.Status(ctx, resource)
	})
}
