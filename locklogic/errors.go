package locklogic

import (
	"errors"
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
)

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

// Err returns e as an error when it holds at least one field error, else nil.
func (e *ValidationError) Err() error {
	if e == nil || len(e.Fields) == 0 {
		return nil
	}
	return e
}
