package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ft288/locks/client"
)

// hold is what a command runs under: one lease (a lock, a permit, a
// leadership) or a lock set's leases. runLocked applies the same rules to
// either (see runHelp): the loss of any lease is the loss of the whole,
// and the local deadline is the earliest of the leases'.
type hold interface {
	// Done is closed when it is lost or released.
	Done() <-chan struct{}
	// Check returns nil while it is held by the clock now; else a
	// *client.LeaseLostError (ErrLeaseLost), or ErrReleased.
	Check() error
	// Deadline is the local deadline (the earliest of its leases').
	Deadline() time.Time
	// Release ends it at the service.
	Release(ctx context.Context) error
	// what names it in lockctl's messages: `lease on "x"`.
	what() string
	// env is its variables for the command and the --on-lost hook.
	env() []string
}

var (
	_ hold = leaseHold{}
	_ hold = setHold{}
)

// leaseHold is one lease.
type leaseHold struct{ *client.Lease }

func (l leaseHold) what() string { return fmt.Sprintf("lease on %q", l.Resource()) }

// env is LOCK_RESOURCE, LOCK_OWNER and LOCK_FENCING_TOKEN.
func (l leaseHold) env() []string {
	return []string{
		"LOCK_RESOURCE=" + l.Resource(),
		"LOCK_OWNER=" + l.Owner(),
		"LOCK_FENCING_TOKEN=" + strconv.FormatInt(l.FencingToken(), 10),
	}
}

// setHold is a lock set: held while every one of its leases is.
type setHold struct{ *client.Set }

// Done is closed once any lease of the set is lost (by the clock first,
// as Lease.Done), or the set released.
func (s setHold) Done() <-chan struct{} {
	_ = s.Check()
	return s.Context().Done()
}

// Deadline is the earliest local deadline of the set's leases.
func (s setHold) Deadline() time.Time {
	ls := s.Leases()
	d := ls[0].Deadline()
	for _, l := range ls[1:] {
		d = earliest(d, l.Deadline())
	}
	return d
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s setHold) what() string { return setNames(s.Set) }

// setNames is the set's names as lockctl says them: "a", "b".
func setNames(s *client.Set) string {
	var names []string
	for _, l := range s.Leases() {
		names = append(names, strconv.Quote(l.Resource()))
	}
	return "lock set " + strings.Join(names, ", ")
}

// setLock is one name of a set in LOCKS_JSON.
type setLock struct {
	Resource     string `json:"resource"`
	FencingToken int64  `json:"fencing_token"`
}

// env is a set's variables: LOCK_OWNER, LOCK_SET_ID, LOCK_COUNT,
// LOCK_NAME_i and LOCK_FENCING_TOKEN_i (i from 1, in the set's name
// order), LOCKS_JSON (the same as [{"resource", "fencing_token"}]), and
// for a set of one name LOCK_RESOURCE and LOCK_FENCING_TOKEN as a lock's.
func (s setHold) env() []string {
	ls := s.Leases()
	out := []string{"LOCK_OWNER=" + s.Owner(), "LOCK_SET_ID=" + s.ID(), "LOCK_COUNT=" + strconv.Itoa(len(ls))}
	js := make([]setLock, len(ls))
	for i, l := range ls {
		n := strconv.Itoa(i + 1)
		out = append(out, "LOCK_NAME_"+n+"="+l.Resource(), "LOCK_FENCING_TOKEN_"+n+"="+strconv.FormatInt(l.FencingToken(), 10))
		js[i] = setLock{l.Resource(), l.FencingToken()}
	}
	b, _ := json.Marshal(js) // strings and integers: cannot fail
	out = append(out, "LOCKS_JSON="+string(b))
	if len(ls) == 1 {
		out = append(out, "LOCK_RESOURCE="+ls[0].Resource(), "LOCK_FENCING_TOKEN="+strconv.FormatInt(ls[0].FencingToken(), 10))
	}
	return out
}
