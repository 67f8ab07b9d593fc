package locklogic

import (
	"errors"
	"fmt"
	"time"
)

// Leased is a lease of any kind an operator may force release: a lock's,
// a read/write lock's writer or reader, a semaphore's permit. Each is a
// Lock with what names its place.
type Leased interface {
	Lock | RWLease | Permit
	// lockOf is the lease as a Lock (the embedded one of an RWLease or a
	// Permit).
	lockOf() Lock
	// place names the lease's place for a message: "lease on \"x\"".
	place() string
}

func (l Lock) lockOf() Lock     { return l }
func (l Lock) place() string    { return fmt.Sprintf("lease on %q", l.Resource) }
func (l RWLease) place() string { return fmt.Sprintf("%s lease of %q", l.Mode, l.Resource) }
func (p Permit) place() string  { return fmt.Sprintf("permit in slot %d of %q", p.Slot, p.Resource) }

// ForceReleaseOf is what a force release of a lease of kind L ended.
type ForceReleaseOf[L Leased] struct {
	// Ended is the lease as it was before the write (after an SDK retry
	// of a write that landed, as the write left it).
	Ended L
	// FreeAt is when others may take the lease's place: now, or the end
	// of the lease's lock-delay unless Immediate.
	FreeAt time.Time
	// Immediate says the place was freed at once.
	Immediate bool
}

// LeaseChangedOf is a force release refused because the lease of kind L
// that now holds the place the operator named is not the one meant:
// another fencing token than the one given, or a lease granted after the
// request was issued (the late-write rule). Current is that lease. It is
// an ErrStaleToken.
type LeaseChangedOf[L Leased] struct {
	Current L
}

func (e *LeaseChangedOf[L]) Error() string {
	l := e.Current.lockOf()
	return fmt.Sprintf("the %s is now fencing token %d of %q", e.Current.place(), l.FencingToken, l.Owner)
}

// Is makes a LeaseChangedOf an ErrStaleToken.
func (e *LeaseChangedOf[L]) Is(target error) bool { return target == ErrStaleToken }

// forceOutcome is a force release's answer for a lease of kind L, from
// what forceLease at now ended (or its error): as dresses a Lock as the
// kind's lease, in the result and in a *LeaseChangedOf[L].
func forceOutcome[L Leased](ended Lock, err error, now time.Time, immediate bool, as func(Lock) L) (ForceReleaseOf[L], error) {
	var changed *LeaseChangedError
	if errors.As(err, &changed) {
		return ForceReleaseOf[L]{}, &LeaseChangedOf[L]{Current: as(changed.Current)}
	}
	if err != nil {
		return ForceReleaseOf[L]{}, err
	}
	r := forceResult(ended, now, immediate)
	return ForceReleaseOf[L]{Ended: as(ended), FreeAt: r.FreeAt, Immediate: r.Immediate}, nil
}

// validateForce checks a force release of any kind, in one order: its
// name (field, by valid), the lease's place within it (place, the kind's
// own: nil for a lock), the reason, normalized, and the fencing token.
func validateForce(v *ValidationError, field, name string, valid func(string, *ValidationError), place func(),
	reason *string, token *int64) {
	if !v.Has(field) {
		valid(name, v)
	}
	if place != nil {
		place()
	}
	if !v.Has("reason") {
		*reason = NormalizeReason(*reason, v)
	}
	if !v.Has("fencing_token") {
		ValidateFencingToken(token, v)
	}
}
