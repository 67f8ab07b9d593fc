package api

import (
	"encoding/json"
	"errors"
	"strconv"

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
}

// problemKind is one row of the error table: the HTTP status, the type slug
// and the fixed title for one class of outcome.
type problemKind struct {
	status int
	slug   string
	title  string
}

// Problem kinds that are not tied to a locklogic sentinel.
var (
	kindValidation  = problemKind{422, "validation-failed", "Request validation failed"}
	kindInvalidJSON = problemKind{400, "invalid-json", "Malformed request body"}
	kindTooLarge    = problemKind{413, "payload-too-large", "Request body too large"}
	kindInternal    = problemKind{500, "internal", "Internal error"}
)

// errorTable maps every domain error to its HTTP answer. It is the one place
// where lock outcomes meet status codes.
var errorTable = []struct {
	err  error
	kind problemKind
}{
	// Refinements first: each is also one of the sentinels below.
	{locklogic.ErrForceReleased, problemKind{404, "not-found", "Lock not found"}},
	{locklogic.ErrNothingToForce, problemKind{404, "not-found", "Lock not found"}},
	{locklogic.ErrForceUnknown, problemKind{503, "service-unavailable", "Lock store unavailable"}},
	{locklogic.ErrRenewRaced, problemKind{503, "service-unavailable", "Lock store unavailable"}},
	{locklogic.ErrWaitElapsed, problemKind{503, "service-unavailable", "Lock store unavailable"}},
	{locklogic.ErrNotFound, problemKind{404, "not-found", "Lock not found"}},
	{locklogic.ErrForbidden, problemKind{403, "forbidden", "Lock held by another owner"}},
	{locklogic.ErrStaleToken, problemKind{409, "stale-token", "Stale fencing token"}},
	{locklogic.ErrUnavailable, problemKind{503, "service-unavailable", "Lock store unavailable"}},
	{errNotAdministrator, problemKind{403, "not-an-administrator", "Not an administrator"}},
	{locklogic.ErrPermitsMismatch, kindPermitsMismatch},
}

// kindPermitsMismatch is a semaphore acquire that asked for another N.
var kindPermitsMismatch = problemKind{409, "permits-mismatch", "Semaphore permits mismatch"}

// problemFor turns err into a problem. The detail never carries err's text
// for 5xx answers: SDK messages and table names stay in the logs.
func problemFor(err error, resource string) Problem { return problemOf(err, resource, false) }

// problemOf is problemFor, its details about the semaphore resource when
// sem is set.
func problemOf(err error, resource string, sem bool) Problem {
	var verr *locklogic.ValidationError
	if errors.As(err, &verr) {
		p := newProblem(kindValidation, "The request has invalid fields; see errors.")
		p.Errors = verr.Fields
		return p
	}
	var berr *bodyError
	if errors.As(err, &berr) {
		kind := kindInvalidJSON
		if berr.status == 413 {
			kind = kindTooLarge
		}
		return newProblem(kind, berr.detail)
	}
	var changed *locklogic.LeaseChangedError
	if errors.As(err, &changed) {
		p := newProblem(problemKind{409, "stale-token", "Stale fencing token"}, "The lease on "+strconv.Quote(resource)+
			" is not the one this request meant (another fencing token, or granted after the request was issued); it was not ended. "+
			"It is shown in current: to end it, send its fencing_token.")
		cur := adminLockJSON(changed.Current)
		p.Current = &cur
		return p
	}
	var mismatch *locklogic.PermitsMismatchError
	if errors.As(err, &mismatch) {
		p := newProblem(kindPermitsMismatch, "The semaphore "+strconv.Quote(resource)+" has "+strconv.FormatInt(mismatch.Permits, 10)+
			" permits (see permits), not the number this request asks for, and some of them are held: every acquirer must ask for the same number. "+
			"It changes only while no permit is held.")
		p.Permits = mismatch.Permits
		return p
	}
	var permitChanged *locklogic.PermitChangedError
	if errors.As(err, &permitChanged) {
		p := newProblem(problemKind{409, "stale-token", "Stale fencing token"}, "The permit in slot "+strconv.Itoa(permitChanged.Current.Slot)+
			" of "+strconv.Quote(resource)+" is not the one this request meant (another fencing token, or granted after the request was issued); "+
			"it was not ended. It is shown in current: to end it, send its fencing_token.")
		cur := adminPermitJSON(permitChanged.Current)
		p.Current = &cur
		return p
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			detail := detailFor(row.err, resource)
			if sem {
				detail = semDetailFor(row.err, resource)
			}
			p := newProblem(row.kind, detail)
			p.ForceReleased = row.err == locklogic.ErrForceReleased
			return p
		}
	}
	return newProblem(kindInternal, "The request could not be completed; it has been logged.")
}

func newProblem(k problemKind, detail string) Problem {
	return Problem{Type: ProblemTypeBase + k.slug, Title: k.title, Status: k.status, Detail: detail}
}

func detailFor(err error, resource string) string {
	q := strconv.Quote(resource)
	switch err {
	case locklogic.ErrNotFound:
		return "There is no live lock on " + q + ": it was never taken, was released, or has expired."
	case locklogic.ErrForbidden:
		return "The lock on " + q + " is held by another owner."
	case locklogic.ErrStaleToken:
		return "The lock on " + q + " is held by this owner under a different fencing token: your lease was replaced by a newer one, or the token is wrong."
	case locklogic.ErrForceReleased:
		return "The lease on " + q + " was ended by an operator's force release; it is no longer held."
	case locklogic.ErrNothingToForce:
		return "There is no live lease on " + q + " to end: it was never taken, was released, has expired or was force released already. A lock still inside a lock-delay is freed only with \"immediate\": true."
	case locklogic.ErrForceUnknown:
		return "The lock store did not answer in time: the force release may or may not have ended the lease on " + q + ". Do not repeat it blindly, since the lock may have gone to a newer lease since: list it (GET /admin/locks?prefix=...) and send the fencing_token of the lease you mean to end."
	case locklogic.ErrRenewRaced:
		return "A renewal of this lease sent after this one landed first and set an earlier expiry than this one asks for; nothing was changed. Retry the renewal."
	case locklogic.ErrWaitElapsed:
		return "The request reached the lock service with less than 0.5 s of wait_seconds left, too late to try without risking a grant you would not hear; nothing was changed. Retry."
	case locklogic.ErrUnavailable:
		return "The lock store did not answer in time; nothing was changed that you were told about. Retry after a moment."
	case locklogic.ErrPermitsMismatch:
		return "The semaphore " + q + " has another number of permits than this request asks for, and some of them are held."
	case errNotAdministrator:
		return "The admin routes answer only the IAM principals in the admin function's " + AdminPrincipalsEnv + "; the caller is not one of them."
	}
	return ""
}

// semDetailFor is detailFor for the routes of semaphore resource.
func semDetailFor(err error, resource string) string {
	q := strconv.Quote(resource)
	switch err {
	case locklogic.ErrNotFound:
		return "There is no live permit of the semaphore " + q + " in that slot: it was never taken, was released, or has expired."
	case locklogic.ErrForbidden:
		return "The permit in that slot of the semaphore " + q + " is held by another owner."
	case locklogic.ErrStaleToken:
		return "The permit in that slot of the semaphore " + q + " is held by this owner under a different fencing token: your permit was replaced by a newer one, or the token is wrong."
	case locklogic.ErrForceReleased:
		return "The permit in that slot of the semaphore " + q + " was ended by an operator's force release; it is no longer held."
	case locklogic.ErrNothingToForce:
		return "There is no live permit in that slot of the semaphore " + q + " to end: it was never taken, was released, has expired or was force released already. A slot still inside a lock-delay is freed only with \"immediate\": true."
	case locklogic.ErrForceUnknown:
		return "The lock store did not answer in time: the force release may or may not have ended the permit in that slot of " + q + ". Do not repeat it blindly, since the slot may have gone to a newer permit since: list it (GET /admin/semaphores?prefix=...) and send the fencing_token of the permit you mean to end."
	}
	return detailFor(err, resource)
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
