package cli

import (
	"context"
	"strings"

	"github.com/ft288/locks/client"
)

// releaseHelp is the help of `lockctl release`.
const releaseHelp = `Ends the owner's live lease on RESOURCE. With --token the live lease must
carry that fencing token.`

// releaseCmd is `lockctl release`.
func releaseCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("release"), env)
	owner := fs.String("owner", "", "the lease's `owner` (required)")
	token := fs.Int64("token", 0, "the lease's fencing `token` (optional)")
	resource, err := parseOnly(fs, args)
	if err == nil && strings.TrimSpace(*owner) == "" {
		err = &usageError{"--owner is required"}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		if err := c.Release(ctx, resource, *owner, *token); err != nil {
			return nil, err
		}
		return map[string]any{"resource": resource, "released": true}, nil
	})
}
