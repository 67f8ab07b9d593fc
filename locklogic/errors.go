package locklogic

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors for the outcomes of Release, Renew and Status that are not
// successes. Callers compare with errors.Is; the HTTP layer maps each to one
// status code. Together with a nil error they are the seed design's
// ReleaseResult enum (Released, NotFound, Forbidden) plus StaleToken.
var (
	// ErrNotFound means there is no live lease: the lock never existed, was
	// released, or has expired.
	ErrNotFound = errors.New("lock not found")
	// ErrForbidden means a live lease exists but belongs to another owner
	// (or to the same owner string under another principal).
	ErrForbidden = errors.New("lock held by another owner")
	// ErrStaleToken means the owner matches but the fencing token given is
	// not the live lease's token: the caller holds an older lease.
	ErrStaleToken = errors.New("fencing token is not the current lease's")
	// ErrUnavailable means the store could not decide (throttling, 5xx,
	// timeouts after the SDK's own retries). Nothing was changed that the
	// caller was told about; retrying is safe.
	ErrUnavailable = errors.New("lock store unavailable")
	// ErrForceReleased means the caller's lease was ended by an operator's
	// force release (ForceRelease). It is an ErrNotFound: the lease is gone.
	ErrForceReleased = fmt.Errorf("lease force released by an operator: %w", ErrNotFound)
	// ErrRenewRaced means a renewal of the same lease issued after this one
	// landed first and set an earlier expiry than this one asks for. It is
	// an ErrUnavailable: nothing changed, and a retry extends the lease.
	ErrRenewRaced = fmt.Errorf("a later renewal with a nearer expiry landed first: %w", ErrUnavailable)
	// ErrWaitElapsed means a waiting acquire reached the service with less
	// than GrantGuard of its wait left, so it did not try: no grant may be
	// made that a caller waiting wait_seconds would not hear. It is an
	// ErrUnavailable: nothing changed, and the caller may try again.
	ErrWaitElapsed = fmt.Errorf("the wait ran out before the lock could be tried: %w", ErrUnavailable)
	// ErrNothingToForce means a force release found no lease it may end:
	// none live (a lease in its lock-delay is ended only immediately), or
	// none at all. It is an ErrNotFound.
	ErrNothingToForce = fmt.Errorf("no live lease to force release: %w", ErrNotFound)
	// ErrForceUnknown means the store did not answer a force release: it
	// may or may not have ended the lease. It is an ErrUnavailable, but a
	// blind repeat could end a newer lease the operator never saw.
	ErrForceUnknown = fmt.Errorf("force release outcome unknown: %w", ErrUnavailable)
)

// LeaseChangedError is a force release refused because the lease that now
// blocks the lock is not the one the operator meant: another fencing token
// than the one given, or a lease granted after the request was issued (the
// late-write rule). Current is that lease. It is an ErrStaleToken.
type LeaseChangedError = LeaseChangedOf[Lock]

// QueueTicketError is a waiting acquire's ErrUnavailable (Err) that ended
// while the caller may still hold a place in the queue: a queue write's
// outcome was unknown, and the wait could neither read the item nor
// remove the place it found. Ticket is that place: a next round that
// sends it back (AcquireRequest.QueueTicket) reclaims it, instead of
// waiting behind it until it lapses. It is an ErrUnavailable.
type QueueTicketError struct {
	Ticket string
	Err    error
}

func (e *QueueTicketError) Error() string { return e.Err.Error() + " (queue ticket " + e.Ticket + ")" }

// Unwrap returns Err.
func (e *QueueTicketError) Unwrap() error { return e.Err }

// FieldError is one invalid input field.
type FieldError struct {
	// Field is the JSON member or path parameter name, e.g. "ttl_seconds".
	Field string `json:"field"`
	// Detail says what is wrong in words a client developer can act on.
	Detail string `json:"detail"`
}

// ValidationError reports every invalid field of one request. It is a client
// error: the request never reached the store.
type ValidationError struct {
	Fields []FieldError
}

// Error joins the field errors into one line.
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Detail
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Add records one invalid field.
func (e *ValidationError) Add(field, detail string) {
	e.Fields = append(e.Fields, FieldError{Field: field, Detail: detail})
}

// Has reports whether field already has an error in e, so later checks of
// a field whose value could not be read are skipped.
func (e *ValidationError) Has(field string) bool {
	for _, f := range e.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

// Err returns e as an error when it holds at least one field error, else nil.
func (e *ValidationError) Err() error {
	if e == nil || len(e.Fields) == 0 {
		return nil
	}
	return e
}
