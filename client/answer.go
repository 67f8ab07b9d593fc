package client

import (
	"errors"
	"reflect"
	"time"
)

// acquireAnswer is the 200 answer to an acquire of any kind but for the
// lease it grants, which stands under the kind's own name (a lock's
// "lock", a read/write lock's "lease", a semaphore's "permit").
type acquireAnswer struct {
	Acquired bool `json:"acquired"`
	// FreeAt is when a read/write lock's holders or a semaphore's permit
	// free, as the service saw it ("" when it does not know).
	FreeAt string `json:"free_at"`
	// ExpiresAt is when a lock's holder's lease ends ("" when unknown).
	ExpiresAt   string `json:"expires_at"`
	QueueTicket string `json:"queue_ticket"`
}

// sortAnswer sorts the 200 answer to an acquire whose kind grants an L
// under field. Not acquired is the kind's refusal (refused, given the
// answer and its Retry-After) with the answer's queue ticket. Acquired,
// the answer must carry the lease and grantOf must accept it (its error
// is a malformed lease); otherwise the outcome is unknown. An answer that
// does not decode is unknown too.
func sortAnswer[L any](resp *response, fail func(outcome, error) attemptResult, field string,
	refused func(body acquireAnswer, retry time.Duration) error, grantOf func(*L) (grant, error)) attemptResult {
	var body acquireAnswer
	if err := resp.decode(&body); err != nil {
		return fail(unknown, err)
	}
	lease, err := leaseField[L](resp, field)
	if err != nil {
		return fail(unknown, err)
	}
	if !body.Acquired {
		return attemptResult{out: notGranted, err: refused(body, resp.retryAfter()), ticket: body.QueueTicket}
	}
	if lease == nil {
		return fail(unknown, errors.New("malformed response: acquired without a "+field))
	}
	g, err := grantOf(lease)
	if err != nil {
		return fail(unknown, err)
	}
	return attemptResult{out: granted, grant: g}
}

// leaseField decodes the answer's lease, an L under field, by the rules
// encoding/json has for every other field of the answer (a struct field
// tagged field: its key in any case matches, an exact one first, and a
// value of another type is an error even in a refusal), as each kind's
// own answer struct did before the kinds shared sortAnswer.
func leaseField[L any](resp *response, field string) (*L, error) {
	t := reflect.StructOf([]reflect.StructField{{
		Name: "Lease", Type: reflect.TypeFor[*L](), Tag: reflect.StructTag(`json:"` + field + `"`),
	}})
	v := reflect.New(t)
	if err := resp.decode(v.Interface()); err != nil {
		return nil, err
	}
	return v.Elem().Field(0).Interface().(*L), nil
}

// answerTime is an answer's RFC 3339 time, zero when absent or malformed
// (the refusal then says the service did not know).
func answerTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339, s)
	return t
}
