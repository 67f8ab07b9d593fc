package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProblemTypeBase prefixes the type URI of every problem the lock service
// answers with; the slug after it names the problem.
const ProblemTypeBase = "https://ft288.dev/problems/"

// Sentinel errors. Compare with errors.Is: the typed errors of this package
// (*ProblemError, *HeldError, *LeaseLostError) match them.
var (
	// ErrHeld means the lock is held by another owner; see *HeldError for
	// when it may come free.
	ErrHeld = errors.New("lock held by another owner")
	// ErrNotFound means there is no live lease to renew or release: it was
	// never taken, was released, has expired, or was force released by an
	// operator (then the *ProblemError's ForceReleased is set). Take the
	// lock again.
	ErrNotFound = errors.New("lock not found")
	// ErrForbidden means a live lease exists but belongs to another owner.
	ErrForbidden = errors.New("live lease belongs to another owner")
	// ErrStaleToken means the owner matches but the fencing token does not:
	// a newer lease of the same owner replaced the one the caller holds.
	ErrStaleToken = errors.New("fencing token is not the live lease's")
	// ErrValidation means the request was invalid: rejected by this
	// package before it was sent, or answered 400, 413 or 422 by the
	// service.
	ErrValidation = errors.New("invalid request")
	// ErrInvalid is ErrValidation's former name: the same value, so
	// errors.Is matches either.
	//
	// Deprecated: use ErrValidation, the name the three clients share.
	ErrInvalid = ErrValidation
	// ErrUnavailable means the service could not decide (503), or API
	// Gateway answered for it: a gateway error (502, 504) or a throttle
	// (429 {"message":"Too Many Requests"} for a throttled route, 500
	// {"message":"Internal Server Error"} for a throttled function).
	// Nothing was changed that the caller was told about; retrying is safe,
	// and the client retries these answers with backoff.
	ErrUnavailable = errors.New("lock service unavailable")
	// ErrLeaseLost is the cause of a lease's context when the lease was
	// lost; the *LeaseLostError that matches it says why.
	ErrLeaseLost = errors.New("lease lost")
	// ErrLeaseExpired is the reason of a lost lease whose local deadline
	// passed without a successful renewal (the service was unreachable,
	// slow, or never asked).
	ErrLeaseExpired = errors.New("no successful renewal before the lease's local deadline")
	// ErrReleased is the cause of a lease's context after Release.
	ErrReleased = errors.New("lease released")
	// ErrNoLeader means an election has no leader: nobody holds its lock.
	// Election.Leader's error matches ErrNotFound too.
	ErrNoLeader = errors.New("no leader")
	// ErrFull means every permit of a semaphore is held by other owners;
	// see *FullError for when one may come free. A *FullError matches
	// ErrHeld too: it is the semaphore's "held".
	ErrFull = errors.New("semaphore full: every permit is held by another owner")
	// ErrPermitsMismatch means a semaphore acquire asked for another number
	// of permits than the semaphore has while some permit is held (409
	// permits-mismatch; ProblemError.Permits is the semaphore's number).
	// Every acquirer of a semaphore must give the same number; retrying does
	// not help.
	ErrPermitsMismatch = errors.New("semaphore has another number of permits")
)

// FieldError is one invalid field of a validation-failed problem.
type FieldError struct {
	// Field is the JSON member or path parameter, e.g. "ttl_seconds".
	Field string `json:"field"`
	// Detail says what is wrong with it.
	Detail string `json:"detail"`
}

// ProblemError is an error answer of the service: an RFC 9457 problem
// document, or the bare {"message": ...} API Gateway itself answers with
// (then only Status and Title are set).
type ProblemError struct {
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Type is the problem type URI, e.g.
	// "https://ft288.dev/problems/not-found"; empty when the answer was not
	// a problem document.
	Type string `json:"type"`
	// Title is the problem's short summary (or API Gateway's message).
	Title string `json:"title"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// Instance is the request path the problem is about.
	Instance string `json:"instance"`
	// Errors lists the invalid fields of a validation-failed problem.
	Errors []FieldError `json:"errors"`
	// ForceReleased is set on the not-found answer to a renewal or release
	// of a lease that an operator force released (the force_released
	// member).
	ForceReleased bool `json:"force_released,omitempty"`
	// Current is the lease that now blocks the lock, on the stale-token
	// answer to a force release whose fencing token was not the live
	// lease's (the current member); nil otherwise.
	Current *AdminLock `json:"current,omitempty"`
	// CurrentPermit is the permit that now blocks the slot, on the
	// stale-token answer to ForceReleasePermit with a fencing token that
	// was not the permit's (the current member); nil otherwise.
	CurrentPermit *AdminPermit `json:"-"`
	// CurrentRWLease is the read/write lock's lease that now holds the
	// writer's place or the reader's slot, on the stale-token answer to
	// ForceReleaseRW with a fencing token that was not the lease's (the
	// current member); nil otherwise.
	CurrentRWLease *AdminRWLease `json:"-"`
	// Permits is the semaphore's number of permits on the permits-mismatch
	// answer (the permits member); 0 otherwise.
	Permits int `json:"permits,omitempty"`
	// RetryAfter is the Retry-After header's delay; zero when absent.
	RetryAfter time.Duration `json:"-"`
	// gateway: the answer was API Gateway's own JSON {"message": ...}.
	gateway bool
	// queueTicket is the waiter's place in the queue that a waiting
	// round's 503 may carry (queue_ticket): the service could not learn
	// whether its queue write landed, and the next round reclaims the
	// place with it.
	queueTicket string
}

// Slug returns the problem's slug ("not-found", "stale-token", ...), or ""
// when Type is not one of the lock service's problem types.
func (e *ProblemError) Slug() string {
	slug, ok := strings.CutPrefix(e.Type, ProblemTypeBase)
	if !ok {
		return ""
	}
	return slug
}

// Error describes the problem in one line.
func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", e.Status)
	if e.Title != "" {
		b.WriteString(" " + e.Title)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for i, f := range e.Errors {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.Field + ": " + f.Detail)
		if i == len(e.Errors)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}

// Is matches the sentinel errors. The lock outcomes (ErrNotFound,
// ErrForbidden, ErrStaleToken) match only the service's own problem types:
// API Gateway answers a wrong path 404 and a bad signature 403 with a bare
// message, and those must not read as "no lease" or "held by another".
func (e *ProblemError) Is(target error) bool {
	slug := e.Slug()
	switch target {
	case ErrNotFound:
		return slug == "not-found"
	case ErrForbidden:
		return slug == "forbidden"
	case ErrStaleToken:
		return slug == "stale-token"
	case ErrPermitsMismatch:
		return slug == "permits-mismatch"
	case ErrValidation:
		switch slug {
		case "validation-failed", "invalid-json", "payload-too-large":
			return true
		}
		return slug == "" && (e.Status == 400 || e.Status == 413 || e.Status == 422)
	case ErrUnavailable:
		return slug == "service-unavailable" || e.Status == 502 || e.Status == 503 || e.Status == 504 || e.gatewayThrottle()
	}
	return false
}

// gatewayThrottle reports whether the answer is API Gateway's own throttle
// answer rather than the service's: 429 for a throttled route, 500 for a
// throttled function (no problem document, only {"message"}).
func (e *ProblemError) gatewayThrottle() bool {
	return e.Type == "" && (e.Status == 429 || e.Status == 500)
}

// temporary reports whether the same request may succeed later: server
// errors, throttling (the gateway's 429 and 500 included) and timeouts.
// The service's own 500 (the internal problem: a setup error such as a
// missing table or denied access) is not: retrying does not cure it.
func (e *ProblemError) temporary() bool {
	if e.Slug() == "internal" {
		return false
	}
	return e.Status >= 500 || e.Status == 429 || e.Status == 408
}

// HeldError is TryAcquire's answer when another owner holds the lock. It
// matches ErrHeld.
type HeldError struct {
	// Resource is the lock's name.
	Resource string
	// ExpiresAt is when the holder's lease ends by the service's clock;
	// zero when the service did not say. The holder may renew it.
	ExpiresAt time.Time
	// RetryAfter is the service's advice on when to try again (the
	// Retry-After header); zero when absent.
	RetryAfter time.Duration
}

// Error says who holds what and, when known, until when.
func (e *HeldError) Error() string {
	msg := fmt.Sprintf("lock %q is held by another owner", e.Resource)
	if !e.ExpiresAt.IsZero() {
		msg += " until " + e.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// FullError is a semaphore acquire's answer when every permit is held by
// another owner (TryAcquireSemaphore, or AcquireSemaphore whose wait ran
// out). It matches ErrFull and ErrHeld; a semaphore that has another number
// of permits is not full but ErrPermitsMismatch.
type FullError struct {
	// Name is the semaphore's name.
	Name string
	// FreeAt is the earliest time a permit comes free by the service's
	// clock (an expiry, or the end of a lock-delay); zero when the service
	// did not say: then the permits it saw free were taken meanwhile, and
	// trying again at once may succeed. Holders may renew.
	FreeAt time.Time
	// RetryAfter is the service's advice on when to try again (the
	// Retry-After header); zero when absent.
	RetryAfter time.Duration
}

// Error says that the semaphore is full and, when known, until when.
func (e *FullError) Error() string {
	msg := fmt.Sprintf("semaphore %q is full: every permit is held by another owner", e.Name)
	if !e.FreeAt.IsZero() {
		msg += " until " + e.FreeAt.UTC().Format(time.RFC3339Nano)
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

// Is reports whether target is ErrFull or ErrHeld.
func (e *FullError) Is(target error) bool { return target == ErrFull || target == ErrHeld }

// LeaseLostError is the cause of a lost lease's context (see Lease.Err). It
// matches ErrLeaseLost and unwraps to the reason: a renewal answered with
// ErrNotFound, ErrForbidden or ErrStaleToken, ErrLeaseExpired, or another
// error the service gave that renewing cannot get past.
type LeaseLostError struct {
	// Resource is the lock's name (the semaphore's, for a permit).
	Resource string
	// Permit is set when the lease was a semaphore's permit; Slot is then
	// its slot.
	Permit bool
	Slot   int
	// Mode is set when the lease was a read/write lock's (ReadMode: Slot
	// is then the reader's slot).
	Mode RWMode
	// FencingToken is the lost lease's token.
	FencingToken int64
	// ForceReleased is set when the service said that an operator force
	// released the lease (a not-found answer with force_released).
	ForceReleased bool
	// Reason is why the lease was lost.
	Reason error
}

// Error names the lease and the reason, and says so when an operator
// force released it.
func (e *LeaseLostError) Error() string {
	what := fmt.Sprintf("lease on %q", e.Resource)
	switch {
	case e.Permit:
		what = fmt.Sprintf("permit in slot %d of semaphore %q", e.Slot, e.Resource)
	case e.Mode == ReadMode:
		what = fmt.Sprintf("read lease in slot %d of %q", e.Slot, e.Resource)
	case e.Mode == WriteMode:
		what = fmt.Sprintf("write lease on %q", e.Resource)
	}
	if e.ForceReleased {
		return fmt.Sprintf("%s (fencing token %d) lost: it was force released by an operator (%v)", what, e.FencingToken, e.Reason)
	}
	return fmt.Sprintf("%s (fencing token %d) lost: %v", what, e.FencingToken, e.Reason)
}

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Unwrap returns the reason.
func (e *LeaseLostError) Unwrap() error { return e.Reason }

// permanentError marks a failure on the client's side that retrying will
// not cure, such as missing credentials.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// unsentError marks a failure before the request was sent (it could not be
// built or signed): the service cannot have acted on it.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// retryable reports whether a failed request may be sent again: transport
// failures (which may or may not have reached the service; every request of
// this API is safe to repeat) and temporary service answers.
func retryable(err error) bool {
	var perm *permanentError
	if errors.As(err, &perm) || errors.Is(err, ErrValidation) {
		return false
	}
	var p *ProblemError
	if errors.As(err, &p) {
		return p.temporary()
	}
	return true
}

// definitive reports whether a renewal's failure means the lease is gone.
func definitive(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrForbidden) || errors.Is(err, ErrStaleToken)
}

// forceReleased reports whether err is the service's answer that an
// operator force released the lease.
func forceReleased(err error) bool {
	var p *ProblemError
	return errors.As(err, &p) && p.ForceReleased
}
