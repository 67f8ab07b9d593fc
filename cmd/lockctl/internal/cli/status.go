package cli

import (
	"context"

	"github.com/ft288/locks/client"
)

// statusHelp is the help of `lockctl status`.
const statusHelp = `Prints the live lease on RESOURCE as JSON; exits 3 when there is none.`

// statusCmd is `lockctl status`.
func statusCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("status"), env)
	resource, err := parseOnly(fs, args)
	if err != nil {
		return parseFailed(fs, env, err)
	}
	return fs.common.call(env, requestTimeout, func(ctx context.Context, c *client.Client) (any, error) {
		return c.Status(ctx, resource)
	})
}
