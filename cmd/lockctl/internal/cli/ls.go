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

With --rw it lists the read/write locks whose name starts with PREFIX that
a lease keeps from others or a waiter waits for: one row per lease, the
writer's (slot -) before the readers': name, mode, slot, owner, fencing
token, expiry, lock-delay, principal, and the number of waiters (a lock
only waited for: one row of dashes with its latest token). --json prints
the locks as one JSON array, each with its writer, readers and queue.
--limit counts read/write locks.

An admin command: against the IAM-authorized API it needs an identity
allowed to call the /admin routes (see docs/api.md, Admin API).`

// lsCmd is `lockctl ls`.
func lsCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("ls"), env)
	asJSON := fs.Bool("json", false, "print the leases as one JSON array")
	limit := fs.Int("limit", 0, "list at most `N` leases (0: all)")
	sems := fs.semaphoreFlag("list the semaphores' permits instead of the locks")
	rw := fs.rwFlag("list the read/write locks instead of the locks (--limit counts read/write locks)")
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
	if err == nil {
		err = checkKind(*sems, *rw)
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	switch {
	case *sems:
		return lsRows(fs, env, *limit, *asJSON, func(ctx context.Context, c *client.Client, opt client.ListOptions) ([]client.AdminPermit, string, error) {
			page, err := c.ListSemaphores(ctx, prefix, opt)
			return page.Holders, page.Cursor, err
		}, writeSemaphoreTable)
	case *rw:
		return lsRows(fs, env, *limit, *asJSON, func(ctx context.Context, c *client.Client, opt client.ListOptions) ([]client.AdminRWLock, string, error) {
			page, err := c.ListRWLocks(ctx, prefix, opt)
			return page.RWLocks, page.Cursor, err
		}, writeRWTable)
	}
	return lsRows(fs, env, *limit, *asJSON, func(ctx context.Context, c *client.Client, opt client.ListOptions) ([]client.AdminLock, string, error) {
		page, err := c.List(ctx, prefix, opt)
		return page.Locks, page.Cursor, err
	}, writeTable)
}

// lsRows is one form of `lockctl ls`: it asks next for page after page
// of rows (1,000 at most each) until the listing ends or has limit rows
// (0: all; a page may end a little past it), then prints them as one JSON
// array or with table.
func lsRows[R any](fs *flagSet, env Env, limit int, asJSON bool,
	next func(ctx context.Context, c *client.Client, opt client.ListOptions) ([]R, string, error), table func(io.Writer, []R)) int {
	return fs.common.call(env, 0, func(ctx context.Context, c *client.Client) (any, error) {
		rows := []R{}
		opt := client.ListOptions{Limit: 1000}
		for {
			if limit > 0 {
				opt.Limit = max(1, min(1000, limit-len(rows)))
			}
			pctx, cancel := context.WithTimeout(ctx, requestTimeout)
			page, cursor, err := next(pctx, c, opt)
			cancel()
			if err != nil {
				return nil, err
			}
			rows = append(rows, page...)
			if cursor == "" || (limit > 0 && len(rows) >= limit) {
				break
			}
			opt.Cursor = cursor
		}
		if asJSON {
			return rows, nil
		}
		table(env.Stdout, rows)
		return nil, nil
	})
}

// writeTable prints locks as an aligned table with a header.
func writeTable(w io.Writer, locks []client.AdminLock) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tOWNER\tTOKEN\tEXPIRES\tDELAY\tPRINCIPAL")
	for _, l := range locks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", tableCell(l.Resource), tableCell(l.Owner), l.FencingToken,
			timeCell(l.ExpiresAt), delayCell(l.LockDelaySeconds), dashCell(l.Principal))
	}
	_ = tw.Flush()
}

// writeSemaphoreTable prints permits as an aligned table with a header.
func writeSemaphoreTable(w io.Writer, permits []client.AdminPermit) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEMAPHORE\tSLOT\tPERMITS\tOWNER\tTOKEN\tEXPIRES\tDELAY\tPRINCIPAL")
	for _, p := range permits {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", tableCell(p.Name), p.Slot, p.Permits, tableCell(p.Owner),
			p.FencingToken, timeCell(p.ExpiresAt), delayCell(p.LockDelaySeconds), dashCell(p.Principal))
	}
	_ = tw.Flush()
}

// writeRWTable prints read/write locks as an aligned table with a header:
// one row per lease, the writer's first (its slot "-"), then the readers';
// a lock only waited for has one row of dashes. WAITING is the lock's
// number of waiters.
func writeRWTable(w io.Writer, locks []client.AdminRWLock) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RWLOCK\tMODE\tSLOT\tOWNER\tTOKEN\tEXPIRES\tDELAY\tPRINCIPAL\tWAITING")
	for _, l := range locks {
		leases := l.Readers
		if l.Writer != nil {
			leases = append([]client.AdminRWLease{*l.Writer}, leases...)
		}
		waiting := len(l.Queue)
		if len(leases) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%d\t-\t-\t-\t%d\n", tableCell(l.Name), l.FencingToken, waiting)
		}
		for _, r := range leases {
			slot := "-"
			if r.Mode == client.ReadMode {
				slot = strconv.Itoa(r.Slot)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\n", tableCell(l.Name), r.Mode, slot, tableCell(r.Owner),
				r.FencingToken, timeCell(r.ExpiresAt), delayCell(r.LockDelaySeconds), dashCell(r.Principal), waiting)
		}
	}
	_ = tw.Flush()
}

// timeCell is an expiry as the tables show it: UTC, to the millisecond.
func timeCell(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// delayCell is a lock-delay of secs as the tables show it; "-" for none.
func delayCell(secs int64) string {
	if secs <= 0 {
		return "-"
	}
	return (time.Duration(secs) * time.Second).String()
}

// dashCell is tableCell(s), or "-" for an empty s.
func dashCell(s string) string {
	if s == "" {
		return "-"
	}
	return tableCell(s)
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
