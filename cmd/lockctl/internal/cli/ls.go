package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ft288/locks/client"
)

// lsHelp is the help of `lockctl ls`.
const lsHelp = `Lists the leases that keep others from their lock — live leases, and
expired ones still in their lock-delay — whose name starts with PREFIX
(every lock without one), as a table: name, owner, fencing token, expiry
(UTC), lock-delay, and the IAM principal bound to the lease. With --json it
prints them as one JSON array instead. The service scans its table page by
page; lockctl follows every page.

With -s (--semaphores) it lists the permits that keep their slot of the
semaphores whose name starts with PREFIX instead: name, slot, the
semaphore's permits, owner, fencing token, expiry, lock-delay, principal
(--json: one JSON array). --limit counts permits, but a semaphore's permits
are listed together, so the list may end a little past it.

An admin command: against the IAM-authorized API it needs an identity
allowed to call the /admin routes (see docs/api.md, Admin API).`

// lsCmd is `lockctl ls`.
func lsCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("ls"), env)
	asJSON := fs.Bool("json", false, "print the leases as one JSON array")
	limit := fs.Int("limit", 0, "list at most `N` leases (0: all)")
	sems := fs.semaphoreFlag("list the semaphores' permits instead of the locks")
	err := fs.Parse(args)
	prefix := ""
	if err == nil && fs.NArg() > 0 {
		prefix = fs.Arg(0)
		err = fs.Parse(fs.Args()[1:])
	}
	if err == nil && fs.NArg() > 0 {
		err = &usageError{fmt.Sprintf("unexpected arguments: %q", fs.Args())}
	}
	if err == nil && *limit < 0 {
		err = &usageError{fmt.Sprintf("--limit %d: want 0 (all) or more", *limit)}
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	if *sems {
		return lsSemaphores(fs, env, prefix, *limit, *asJSON)
	}
	return fs.common.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		locks := []client.AdminLock{}
		opt := client.ListOptions{Limit: 1000}
		for {
			if *limit > 0 {
				opt.Limit = min(1000, *limit-len(locks))
			}
			pctx, cancel := context.WithTimeout(ctx, requestTimeout)
			page, err := c.List(pctx, prefix, opt)
			cancel()
			if err != nil {
				return nil, err
			}
			locks = append(locks, page.Locks...)
			if page.Cursor == "" || (*limit > 0 && len(locks) >= *limit) {
				break
			}
			opt.Cursor = page.Cursor
		}
		if *asJSON {
			return locks, nil
		}
		writeTable(env.Stdout, locks)
		return nil, nil
	})
}

// writeTable prints locks as an aligned table with a header.
func writeTable(w io.Writer, locks []client.AdminLock) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tOWNER\tTOKEN\tEXPIRES\tDELAY\tPRINCIPAL")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, l := range locks {
		delay := ""
		if l.LockDelaySeconds > 0 {
			delay = (time.Duration(l.LockDelaySeconds) * time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", tableCell(l.Resource), tableCell(l.Owner), l.FencingToken,
			l.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z"), dash(delay), dash(tableCell(l.Principal)))
	}
	_ = tw.Flush()
}

// lsSemaphores is `lockctl ls --semaphores`.
func lsSemaphores(fs *flagSet, env Env, prefix string, limit int, asJSON bool) int {
	return fs.common.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		permits := []client.AdminPermit{}
		opt := client.ListOptions{Limit: 1000}
		for {
			if limit > 0 {
				opt.Limit = max(1, min(1000, limit-len(permits)))
			}
			pctx, cancel := context.WithTimeout(ctx, requestTimeout)
			page, err := c.ListSemaphores(pctx, prefix, opt)
			cancel()
			if err != nil {
				return nil, err
			}
			permits = append(permits, page.Holders...)
			if page.Cursor == "" || (limit > 0 && len(permits) >= limit) {
				break
			}
			opt.Cursor = page.Cursor
		}
		if asJSON {
			return permits, nil
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SEMAPHORE\tSLOT\tPERMITS\tOWNER\tTOKEN\tEXPIRES\tDELAY\tPRINCIPAL")
		for _, p := range permits {
			delay, principal := "-", "-"
			if p.LockDelaySeconds > 0 {
				delay = (time.Duration(p.LockDelaySeconds) * time.Second).String()
			}
			if p.Principal != "" {
				principal = tableCell(p.Principal)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", tableCell(p.Name), p.Slot, p.Permits, tableCell(p.Owner),
				p.FencingToken, p.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z"), delay, principal)
		}
		_ = tw.Flush()
		return nil, nil
	})
}

// tableCell makes s safe for one table cell: names may hold spaces and
// tabs are impossible (the service refuses control characters), but quote
// anything with white space so columns stay readable.
func tableCell(s string) string {
	if strings.ContainsAny(s, " \u00a0") {
		return strconv.Quote(s)
	}
	return s
}
