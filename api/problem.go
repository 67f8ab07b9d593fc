package api

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/locklogic"
)

// ProblemTypeBase prefixes every problem type URI; the slug after it names
// the problem (RFC 9457 "type").
const ProblemTypeBase = "https://ft288.dev/problems/"

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	// Errors lists the invalid fields of a validation-failed problem.
	Errors []locklogic.FieldError `json:"errors,omitempty"`
	// ForceReleased marks a not-found answer to the holder of a lease an
	// operator force released.
	ForceReleased bool `json:"force_released,omitempty"`
	// Current is the lease that blocks the lock (an *AdminLockJSON), or
	// the permit that blocks the slot (an *AdminPermitJSON), on a force
	// release refused because it is not the one the request meant.
	Current any `json:"current,omitempty"`
	// Permits is the semaphore's number of permits, on a
	// permits-mismatch.
	Permits int64 `json:"permits,omitempty"`
	// QueueTicket is, on a waiting acquire's service-unavailable, the
	// place in the queue the waiter may still hold
	// (locklogic.QueueTicketError): its next round sends it back.
	QueueTicket string `json:"queue_ticket,omitempty"`
	// Unreleased are, on a lock set request that failed part-way, the
	// names it may hold and could not release: they lapse at their TTL
	// (locklogic.SetRollbackError).
	Unreleased []string `json:"unreleased,omitempty"`
}

// problemKind is one row of the error table: the HTTP status, the type slug
// and the fixed title for one class of outcome.
type problemKind struct {
	status int
	slug   string
	title  string
}

// Problem kinds.
var (
	kindValidation      = problemKind{422, "validation-failed", "Request validation failed"}
	kindInvalidJSON     = problemKind{400, "invalid-json", "Malformed request body"}
	kindTooLarge        = problemKind{413, "payload-too-large", "Request body too large"}
	kindInternal        = problemKind{500, "internal", "Internal error"}
	kindNotFound        = problemKind{404, "not-found", "Lock not found"}
	kindUnavailable     = problemKind{503, "service-unavailable", "Lock store unavailable"}
	kindStaleToken      = problemKind{409, "stale-token", "Stale fencing token"}
	kindPermitsMismatch = problemKind{409, "permits-mismatch", "Semaphore permits mismatch"}
)

// errorTable maps every domain error to its HTTP answer: the one place where
// lock outcomes meet status codes. Its details are the answer's on a lock's
// routes, on a semaphore's (sem) and on a read/write lock's (rw; "" where
// the lock's serves), {q} standing for the quoted resource.
var errorTable = []struct {
	err           error
	kind          problemKind
	lock, sem, rw string
}{
	// Refinements first: each is also one of the sentinels below.
	{locklogic.ErrForceReleased, kindNotFound,
		"The lease on {q} was ended by an operator's force release; it is no longer held.",
		"The permit in that slot of the semaphore {q} was ended by an operator's force release; it is no longer held.",
		"That lease of the read/write lock {q} was ended by an operator's force release; it is no longer held."},
	{locklogic.ErrNothingToForce, kindNotFound,
		"There is no live lease on {q} to end: it was never taken, was released, has expired or was force released already. " +
			"A lock still inside a lock-delay is freed only with \"immediate\": true.",
		"There is no live permit in that slot of the semaphore {q} to end: it was never taken, was released, has expired or was force released already. " +
			"A slot still inside a lock-delay is freed only with \"immediate\": true.",
		"There is no live lease of the read/write lock {q} in that mode and slot to end: it was never taken, was released, has expired or was " +
			"force released already. A slot still inside a lock-delay is freed only with \"immediate\": true."},
	{locklogic.ErrForceUnknown, kindUnavailable,
		"The lock store did not answer in time: the force release may or may not have ended the lease on {q}. " +
			"Do not repeat it blindly, since the lock may have gone to a newer lease since: " +
			"list it (GET /admin/locks?prefix=...) and send the fencing_token of the lease you mean to end.",
		"The lock store did not answer in time: the force release may or may not have ended the permit in that slot of {q}. " +
			"Do not repeat it blindly, since the slot may have gone to a newer permit since: " +
			"list it (GET /admin/semaphores?prefix=...) and send the fencing_token of the permit you mean to end.",
		"The lock store did not answer in time: the force release may or may not have ended that lease of {q}. " +
			"Do not repeat it blindly, since its slot may have gone to a newer lease since: " +
			"list it (GET /admin/rwlocks?prefix=...) and send the fencing_token of the lease you mean to end."},
	{locklogic.ErrRenewRaced, kindUnavailable,
		"A renewal of this lease sent after this one landed first and set an earlier expiry than this one asks for; nothing was changed. Retry the renewal.", "", ""},
	{locklogic.ErrWaitElapsed, kindUnavailable,
		"The request reached the lock service with less than 0.5 s of wait_seconds left, too late to try without risking a grant you would not hear; " +
			"nothing was changed. Retry.", "", ""},
	{locklogic.ErrNotFound, kindNotFound,
		"There is no live lock on {q}: it was never taken, was released, or has expired.",
		"There is no live permit of the semaphore {q} in that slot: it was never taken, was released, or has expired.",
		"There is no live lease of the read/write lock {q} in that mode and slot: it was never taken, was released, or has expired."},
	{locklogic.ErrForbidden, problemKind{403, "forbidden", "Lock held by another owner"},
		"The lock on {q} is held by another owner.",
		"The permit in that slot of the semaphore {q} is held by another owner.",
		"That lease of the read/write lock {q} is held by another owner."},
	{locklogic.ErrStaleToken, kindStaleToken,
		"The lock on {q} is held by this owner under a different fencing token: your lease was replaced by a newer one, or the token is wrong.",
		"The permit in that slot of the semaphore {q} is held by this owner under a different fencing token: " +
			"your permit was replaced by a newer one, or the token is wrong.",
		"That lease of the read/write lock {q} is held by this owner under a different fencing token: " +
			"your lease was replaced by a newer one, or the token is wrong."},
	{locklogic.ErrUnavailable, kindUnavailable,
		"The lock store did not answer in time; nothing was changed that you were told about. Retry after a moment.", "", ""},
	{errNotAdministrator, problemKind{403, "not-an-administrator", "Not an administrator"},
		"The admin routes answer only the IAM principals in the admin function's " + AdminPrincipalsEnv + "; the caller is not one of them.", "", ""},
	{locklogic.ErrPermitsMismatch, kindPermitsMismatch,
		"The semaphore {q} has another number of permits than this request asks for, and some of them are held.", "", ""},
}

// problemFor turns err into a problem. The detail never carries err's text
// for 5xx answers: SDK messages and table names stay in the logs.
func problemFor(err error, resource string) Problem { return problemOf(err, resource, nounLock) }

// noun is the kind of lease a problem's detail speaks of.
type noun int

const (
	nounLock noun = iota
	nounSemaphore
	nounRWLock
)

// problemOf is problemFor, its details about a resource of kind.
func problemOf(err error, resource string, kind noun) Problem {
	q := strconv.Quote(resource)
	var (
		verr          *locklogic.ValidationError
		berr          *bodyError
		changed       *locklogic.LeaseChangedError
		permitChanged *locklogic.PermitChangedError
		rwChanged     *locklogic.RWLeaseChangedError
		mismatch      *locklogic.PermitsMismatchError
	)
	switch {
	case errors.As(err, &verr):
		p := newProblem(kindValidation, "The request has invalid fields; see errors.")
		p.Errors = verr.Fields
		return p
	case errors.As(err, &berr):
		kind := kindInvalidJSON
		if berr.status == 413 {
			kind = kindTooLarge
		}
		return newProblem(kind, berr.detail)
	case errors.As(err, &changed):
		cur := adminLockJSON(changed.Current)
		return notMeant("The lease on "+q, &cur)
	case errors.As(err, &rwChanged):
		cur := adminRWLeaseJSON(rwChanged.Current)
		what := "The writer's lease of " + q
		if rwChanged.Current.Mode == locklogic.Read {
			what = "The reader's lease in slot " + strconv.Itoa(rwChanged.Current.Slot) + " of " + q
		}
		return notMeant(what, &cur)
	case errors.As(err, &permitChanged):
		cur := adminPermitJSON(permitChanged.Current)
		return notMeant("The permit in slot "+strconv.Itoa(permitChanged.Current.Slot)+" of "+q, &cur)
	case errors.As(err, &mismatch):
		p := newProblem(kindPermitsMismatch, "The semaphore "+q+" has "+strconv.FormatInt(mismatch.Permits, 10)+
			" permits (see permits), not the number this request asks for, and some of them are held: every acquirer must ask for the same number. "+
			"It changes only while no permit is held.")
		p.Permits = mismatch.Permits
		return p
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			detail := row.lock
			switch {
			case kind == nounSemaphore && row.sem != "":
				detail = row.sem
			case kind == nounRWLock && row.rw != "":
				detail = row.rw
			}
			p := newProblem(row.kind, strings.ReplaceAll(detail, "{q}", q))
			p.ForceReleased = row.err == locklogic.ErrForceReleased
			if qt := (*locklogic.QueueTicketError)(nil); errors.As(err, &qt) {
				p.QueueTicket = qt.Ticket
			}
			if sr := (*locklogic.SetRollbackError)(nil); errors.As(err, &sr) {
				p.Unreleased = sr.Unreleased
			}
			return p
		}
	}
	return newProblem(kindInternal, "The request could not be completed; it has been logged.")
}

// notMeant is the stale-token answer to a force release that found another
// lease than the one it meant (what, current: an *AdminLockJSON or an
// *AdminPermitJSON), which it did not end.
func notMeant(what string, current any) Problem {
	p := newProblem(kindStaleToken, what+" is not the one this request meant (another fencing token, or granted after the request was issued); "+
		"it was not ended. It is shown in current: to end it, send its fencing_token.")
	p.Current = current
	return p
}

func newProblem(k problemKind, detail string) Problem {
	return Problem{Type: ProblemTypeBase + k.slug, Title: k.title, Status: k.status, Detail: detail}
}

// problemResponse renders p as an application/problem+json response.
func problemResponse(p Problem) events.APIGatewayV2HTTPResponse {
	b, _ := json.Marshal(p)
	resp := events.APIGatewayV2HTTPResponse{
		StatusCode: p.Status,
		Headers:    map[string]string{"content-type": "application/problem+json", "cache-control": "no-store"},
		Body:       string(b),
	}
	if p.Status == 503 {
		resp.Headers["retry-after"] = "1"
	}
	return resp
}
