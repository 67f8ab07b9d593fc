package cli

import (
	"context"
	"strings"
	"time"

	"github.com/ft288/locks/client"
)

// renewHelp is the help of `lockctl renew`.
const renewHelp = `Extends the owner's live lease on RESOURCE to --ttl from now and prints it.
With --token the live lease must carry that fencing token. With --slot K
RESOURCE is a semaphore, and the permit renewed is the owner's in slot K
(as 'lockctl acquire -n' printed it). With --read --slot K or --write
RESOURCE is a read/write lock, and the lease renewed is the owner's reader
in slot K or its writer (as 'lockctl acquire --read/--write' printed it).`

// renewCmd is `lockctl renew`.
func renewCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("renew"), env)
	ttl := fs.duration("ttl", 30*time.Second, "new lease length from now, in whole `seconds`: 90 or 90s")
	owner := fs.String("owner", "", "the lease's `owner` (required)")
	token := fs.Int64("token", 0, "the lease's fencing `token` (optional)")
	slot := fs.slotFlag("RESOURCE is a semaphore: renew the owner's permit in slot `K` (with --read: its reader in slot K)")
	rw := fs.rwFlags()
	resource, err := parseOnly(fs, args)
	if err == nil {
		err = checkTTL(*ttl)
	}
	if err == nil {
		err = checkSlot(fs, *slot)
	}
	if err == nil {
		err = rw.checkByHand(fs)
	}
	if err == nil && strings.TrimSpace(*owner) == "" {
		err = &usageError{"--owner is required"}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		if m := rw.mode(); m != "" {
			return c.RenewRW(ctx, resource, *owner, m, max(*slot, 0), *ttl, *token)
		}
		if isSet(fs.FlagSet, "slot") {
			return c.RenewPermit(ctx, resource, *owner, *slot, *ttl, *token)
		}
		return c.Renew(ctx, resource, *owner, *ttl, *token)
	})
}
