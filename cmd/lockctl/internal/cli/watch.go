package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
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
with backoff when a request fails; it exits 1 when the first one fails.`

// watchLine is one line of `lockctl watch`.
type watchLine struct {
	Index        int64   `json:"index"`
	FencingToken int64   `json:"fencing_token"`
	Leader       *string `json:"leader"`
	Skipped      int     `json:"skipped"`
}

// watchCmd is `lockctl watch`.
func watchCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("watch"), env)
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
	_, err = c.Watch(pctx, name, 0, 0)
	pcancel()
	if ctx.Err() != nil {
		return ExitOK
	}
	if err != nil {
		return failed(env, err)
	}
	enc := json.NewEncoder(env.Stdout)
	for o := range client.NewElection(c, name).Observe(ctx) {
		line := watchLine{Index: o.Index, FencingToken: o.Index / 2, Skipped: o.Skipped}
		if o.Leader != nil {
			line.Leader = &o.Leader.Owner
		}
		if err := enc.Encode(line); err != nil {
			return failed(env, err) // stdout is gone (a closed pipe)
		}
	}
	return ExitOK
}
