package cli

import (
	"context"
	"strings"

	"github.com/ft288/locks/client"
)

// releaseHelp is the help of `lockctl release`.
const releaseHelp = `Ends the owner's live lease on RESOURCE. With --token the live lease must
carry that fencing token. With --slot K RESOURCE is a semaphore, and the
permit released is the owner's in slot K (as 'lockctl acquire -n' printed
it); the slot is free at once. With --read --slot K or --write RESOURCE is
a read/write lock, and the lease released is the owner's reader in slot K
or its writer (as 'lockctl acquire --read/--write' printed it).`

// releaseCmd is `lockctl release`.
func releaseCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("release"), env)
	owner := fs.String("owner", "", "the lease's `owner` (required)")
	token := fs.Int64("token", 0, "the lease's fencing `token` (optional)")
	slot := fs.slotFlag("RESOURCE is a semaphore: release the owner's permit in slot `K` (with --read: its reader in slot K)")
	rw := fs.rwFlags()
	resource, err := parseOnly(fs, args)
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
			if err := c.ReleaseRW(ctx, resource, *owner, m, max(*slot, 0), *token); err != nil {
				return nil, err
			}
			out := map[string]any{"name": resource, "mode": m, "released": true}
			if m == client.ReadMode {
				out["slot"] = *slot
			}
			return out, nil
		}
		if isSet(fs.FlagSet, "slot") {
			if err := c.ReleasePermit(ctx, resource, *owner, *slot, *token); err != nil {
				return nil, err
			}
			return map[string]any{"name": resource, "slot": *slot, "released": true}, nil
		}
		if err := c.Release(ctx, resource, *owner, *token); err != nil {
			return nil, err
		}
		return map[string]any{"resource": resource, "released": true}, nil
	})
}
