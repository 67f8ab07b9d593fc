package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ft288/locks/client"
)

// electHelp is the help of `lockctl elect`.
const electHelp = `Campaigns to lead the election NAME (the lock NAME: every candidate that
campaigns on it, with lockctl or a client, competes for it), waiting as long
as it takes, and runs CMD only while leader: with LOCK_RESOURCE, LOCK_OWNER
and LOCK_FENCING_TOKEN in its environment, the lease renewed every ttl/3,
supervised as by 'lockctl run' (its own process group, signals forwarded,
Ctrl-C escalating, Ctrl-Z, background children covered).

If the leadership is lost, CMD is stopped as 'run' stops it (--on-lost,
SIGTERM, SIGKILL after --grace) and lockctl campaigns again, to run CMD
anew when it leads again; with --once it exits 76 instead. A leader learns
of a force release only at its next renewal (up to ttl/3 later), so elect
asks for a lock-delay of ttl/3 + grace by default (--lock-delay): a force
release that keeps it cannot let the next leader start before this CMD is
stopped. Pass --lock-delay 0 to a service that has lock-delay off. When CMD exits
by itself lockctl resigns and exits with CMD's status. A signal while
campaigning (not leading) stops lockctl with 128+n.`

// electCmd is `lockctl elect`.
func electCmd(args []string, env Env) int {
	fs := newFlagSet(lookup("elect"), env)
	lf := fs.leaseFlags()
	once := fs.Bool("once", false, "after losing the leadership exit 76 instead of campaigning again")
	name, argv, err := parse(fs, args)
	var opts []client.AcquireOption
	if err == nil {
		opts, err = lf.check(fs, argv, "lockctl elect NAME [flags] -- CMD [ARGS...]")
	}
	if err != nil {
		return parseFailed(fs, env, err)
	}
	if err := runSupported(); err != nil {
		fmt.Fprintln(env.Stderr, "lockctl:", err)
		return ExitError
	}
	if !isSet(fs.FlagSet, "lock-delay") {
		// ttl/3 (the next renewal, which learns of a force release) +
		// grace (the kill sequence), in whole seconds, within the
		// service's default bound.
		d := min((*lf.ttl/3 + *lf.grace + time.Second - 1).Truncate(time.Second), 300*time.Second)
		opts = append(opts, client.WithLockDelay(d))
	}
	opts = append(opts, client.WithTTL(*lf.ttl))
	if *lf.owner != "" {
		opts = append(opts, client.WithOwner(*lf.owner))
	}
	opt := lf.runOptions()
	opt.again = !*once

	// As for run: SIGINT, SIGTERM and SIGHUP stop a campaign, and are
	// forwarded to the command while it runs.
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	doing := fmt.Sprintf("campaigning for %q", name)
	for {
		lease, code, err := waitForLock(fs.common, lf.margin(), doing, func(ctx context.Context, c *client.Client) (hold, error) {
			l, err := client.NewElection(c, name).Campaign(ctx, opts...)
			if err != nil {
				return nil, err
			}
			return leaseHold{l}, nil
		}, sigc, env)
		if err != nil {
			return failed(env, err)
		}
		if lease == nil {
			return code
		}
		if err := lease.Check(); err != nil { // lost between the grant and now, by the clock
			release(lease, lf.margin(), env)
			if *once {
				fmt.Fprintf(env.Stderr, "lockctl: %v; not running the command; exiting %d\n", err, ExitLeaseLost)
				return ExitLeaseLost
			}
			fmt.Fprintf(env.Stderr, "lockctl: %v; not running the command; campaigning again\n", err)
			continue
		}
		code, lost := runLocked(argv, lease, opt, sigc, env)
		if !lost || *once {
			return code
		}
	}
}
