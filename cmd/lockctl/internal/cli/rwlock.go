package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ft288/locks/client"
)

// rwFlags are --read and --write: RESOURCE is a read/write lock, and the
// lease taken is a reader's or the writer's.
type rwFlags struct{ read, write *bool }

// rwFlags defines --read and --write: for run and acquire, the lease to
// take; for renew, release and force-release, the lease to act on.
func (fs *flagSet) rwFlags() rwFlags {
	read, write := "take a reader's lease (shared with other readers)", "take the writer's lease (excludes readers and writers)"
	switch n := fs.cmd.name; n {
	case "renew", "release":
		read, write = n+" the owner's reader's lease in --slot K", n+" the owner's writer's lease"
	case "force-release":
		read, write = "end the reader's lease in --slot K, whoever holds it", "end the writer's lease, whoever holds it"
	}
	return rwFlags{
		read:  fs.Bool("read", false, "RESOURCE is a read/write lock: "+read),
		write: fs.Bool("write", false, "RESOURCE is a read/write lock: "+write),
	}
}

// mode is the lease --read or --write asks for, "" for neither.
func (f rwFlags) mode() client.RWMode {
	switch {
	case *f.read:
		return client.ReadMode
	case *f.write:
		return client.WriteMode
	}
	return ""
}

// check refuses --read with --write, and either with -n or --lock.
func (f rwFlags) check(permits int, set bool) error {
	switch {
	case *f.read && *f.write:
		return &usageError{"--read and --write do not go together: a lease is a reader's or the writer's"}
	case f.mode() != "" && permits > 0:
		return &usageError{fmt.Sprintf("--%s and -n do not go together: a read/write lock is not a semaphore", f.mode())}
	case f.mode() != "" && set:
		return &usageError{fmt.Sprintf("--%s and --lock do not go together: a lock set's names are locks", f.mode())}
	}
	return nil
}

// rwHeld is what lockctl says when the lease of mode on name is refused.
func rwHeld(name string, mode client.RWMode) string {
	if mode == client.ReadMode {
		return fmt.Sprintf("read/write lock %q has no room for a reader: a writer holds it or waits for it, or its %d reader slots are taken", name, client.MaxReaders)
	}
	return fmt.Sprintf("read/write lock %q is held by readers or a writer, or another waiter is ahead", name)
}

// takeRW takes a lease of mode of the read/write lock name, as take takes
// a lock.
func takeRW(ctx context.Context, c *client.Client, name string, mode client.RWMode, owner string, ttl, wait time.Duration, opts []client.AcquireOption) (*client.RWLease, error) {
	if wait <= 0 {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if mode == client.ReadMode {
			return c.TryAcquireRead(ctx, name, owner, ttl, opts...)
		}
		return c.TryAcquireWrite(ctx, name, owner, ttl, opts...)
	}
	opts = append(opts, client.WithWait(wait))
	if mode == client.ReadMode {
		return c.AcquireRead(ctx, name, owner, ttl, opts...)
	}
	return c.AcquireWrite(ctx, name, owner, ttl, opts...)
}

// rwHold is a reader's or the writer's lease of a read/write lock: a
// lease whose loss is judged as a lock's.
type rwHold struct{ *client.RWLease }

var _ hold = rwHold{}

func (l rwHold) what() string { return fmt.Sprintf("%s lease on %q", l.Mode(), l.Name()) }

// env is a lock's variables, LOCK_MODE (read or write) and, for a reader,
// LOCK_SLOT.
func (l rwHold) env() []string {
	out := leaseHold{l.Lease}.env()
	out = append(out, "LOCK_MODE="+string(l.Mode()))
	if l.Mode() == client.ReadMode {
		out = append(out, "LOCK_SLOT="+strconv.Itoa(l.Slot()))
	}
	return out
}

// checkByHand checks --read/--write of renew, release and force-release:
// not both, a reader names its --slot, and the writer has none.
func (f rwFlags) checkByHand(fs *flagSet) error {
	switch {
	case *f.read && *f.write:
		return &usageError{"--read and --write do not go together: a lease is a reader's or the writer's"}
	case *f.read && !isSet(fs.FlagSet, "slot"):
		return &usageError{"--read needs --slot K: the reader's slot, as 'lockctl acquire --read' printed it"}
	case *f.write && isSet(fs.FlagSet, "slot"):
		return &usageError{"--write takes no --slot: a read/write lock has one writer"}
	}
	return nil
}

// rwJSON is a read/write lock's lease as acquire prints it: a reader's
// "slot" always, 0 included; the writer has none.
type rwJSON struct {
	client.RWLeaseInfo
	Slot *int `json:"slot,omitempty"`
}

// rwInfo is l as acquire prints it.
func rwInfo(l *client.RWLease) rwJSON {
	out := rwJSON{RWLeaseInfo: l.Info()}
	if l.Mode() == client.ReadMode {
		slot := l.Slot()
		out.Slot = &slot
	}
	return out
}
