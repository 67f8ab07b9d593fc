package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/ft288/locks/client"
)

// watchHelp is the help of `lockctl watch`.
const watchHelp = `Watches the lock NAME (or the election NAME, the same lock) until Ctrl-C or
SIGTERM, then exits 0. It prints one JSON line for the state when it starts
and one for each change after it, in order:

  {"index":N,"fencing_token":T,"leader":"OWNER","skipped":K}

index is the watch index (0: never taken; 2 × T while the lease of token T
is live, 2 × T + 1 once it ended), fencing_token the latest lease's token,
leader the live lease's owner or null, and skipped the number of leases
that began and ended unseen since the line before (the service looks about
seven times a second; 0 when unknown). A renewal is no change. It waits for
changes at the service (one request per change, or per 20 s), reconnecting
with backoff when a request fails; it exits 1 when the first one fails.

With --rw NAME is a read/write lock, and each line is its writer and
readers (a grant or an end of either is a change):

  {"index":N,"fencing_token":T,"writer":"OWNER","readers":[{"slot":S,"owner":"OWNER"}]}

index is the read/write lock's watch index (0: never taken; else 2 × T +
1 − the number of live leases), writer the live writer's owner or null,
and readers the live readers, by slot ([] for none).`

// watchLine is one line of `lockctl watch`.
type watchLine struct {
	Index        int64   `json:"index"`
	FencingToken int64   `json:"fencing_token"`
	Leader       *string `json:"leader"`
	Skipped      int     `json:"skipped"`
}

// rwWatchLine is one line of `lockctl watch --rw`.
type rwWatchLine struct {
	Index        int64         `json:"index"`
	FencingToken int64         `json:"fencing_token"`
	Writer       *string       `json:"writer"`
	Readers      []rwWatchSlot `json:"readers"`
}

// rwWatchSlot is a reader of a `lockctl watch --rw` line.
type rwWatchSlot struct {
	Slot  int    `json:"slot"`
	Owner string `json:"owner"`
}

// rwLine is r as `lockctl watch --rw` prints it.
func rwLine(r client.RWWatchResult) rwWatchLine {
	line := rwWatchLine{Index: r.Index, FencingToken: r.FencingToken, Readers: []rwWatchSlot{}}
	if r.Writer != nil {
		line.Writer = &r.Writer.Owner
	}
	for _, l := range r.Readers {
		line.Readers = append(line.Readers, rwWatchSlot{Slot: l.Slot, Owner: l.Owner})
	}
	slices.SortFunc(line.Readers, func(a, b rwWatchSlot) int { return cmp.Compare(a.Slot, b.Slot) })
	return line
}

// watchCmd is `lockctl watch`.
func watchCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("watch"), env)
	rw := fs.rwFlag("NAME is a read/write lock: print its writer and readers")
	name, err := parseOnly(fs, args)
	if err != nil {
		return parseFailed(fs, env, err)
	}
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sigc:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := fs.common.client(ctx)
	if err != nil {
		return failed(env, err)
	}
	// One look first, so that a wrong endpoint, name or identity fails
	// instead of being retried forever.
	pctx, pcancel := context.WithTimeout(ctx, requestTimeout)
	if *rw {
		_, err = c.WatchRW(pctx, name, 0, 0)
	} else {
		_, err = c.Watch(pctx, name, 0, 0)
	}
	pcancel()
	if ctx.Err() != nil {
		return ExitOK
	}
	if err != nil {
		return failed(env, err)
	}
	if *rw {
		return printLines(env, c.ObserveRW(ctx, name), rwLine)
	}
	return printLines(env, client.NewElection(c, name).Observe(ctx), func(o client.Observation) watchLine {
		line := watchLine{Index: o.Index, FencingToken: o.Index / 2, Skipped: o.Skipped}
		if o.Leader != nil {
			line.Leader = &o.Leader.Owner
		}
		return line
	})
}

// printLines prints each state of states as a JSON line (line makes it
// one) until states closes; exit 1 when stdout is gone (a closed pipe).
func printLines[S, L any](env Env, states <-chan S, line func(S) L) int {
	enc := json.NewEncoder(env.Stdout)
	for s := range states {
		if err := enc.Encode(line(s)); err != nil {
			return failed(env, err)
		}
	}
	return ExitOK
}
