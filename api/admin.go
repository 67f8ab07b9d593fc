package api

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/locklogic"
)

// The admin routes: the listing and the force release of locks and of
// semaphore permits. Both kinds share their plumbing (the query, the body,
// the audit line, the answers' shape); they differ only in their service
// calls and wire types. Who may call them is adminauth.go's.

// Admin is the admin function's entry point, the Handle of every api.Routes
// row marked Admin: GET /admin/locks (the leases whose name starts with
// ?prefix, a page of at most ?limit, from ?cursor on), DELETE
// /admin/locks/{resource} with body {"reason"} (it ends the live lease
// whoever holds it and answers what it ended), and their semaphore twins
// GET /admin/semaphores (one row per permit that keeps its slot) and DELETE
// /admin/semaphores/{name} with body {"slot", "reason"}, and the read/write
// locks' GET /admin/rwlocks (one row per lock: writer, readers, waiters
// with their kind) and DELETE /admin/rwlocks/{name} with body {"mode",
// "slot" for a reader, "reason"} (one holder). It picks the row
// by the event's route key; an event of another route is answered 404 as
// API Gateway answers an unknown route.
func (h *Handler) Admin(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	for id := range rows {
		if rows[id].Admin && rows[id].key == req.RouteKey {
			return h.serve(ctx, &req, id)
		}
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: 404, Headers: map[string]string{"content-type": "application/json"},
		Body: `{"message":"Not Found"}`}, nil
}

// AdminLockJSON is a lease as the admin routes show it: LockJSON's members
// and the IAM principal bound to the lease, when there is one.
type AdminLockJSON struct {
	Resource         string `json:"resource"`
	Owner            string `json:"owner"`
	Principal        string `json:"principal,omitempty"`
	FencingToken     int64  `json:"fencing_token"`
	AcquiredAt       string `json:"acquired_at"`
	ExpiresAt        string `json:"expires_at"`
	LockDelaySeconds int64  `json:"lock_delay_seconds,omitempty"`
	// ForceReleased marks a lease an operator ended, listed while its
	// lock-delay still blocks the lock.
	ForceReleased bool `json:"force_released,omitempty"`
	// Queue is the lock's waiters in queue order, in the listing only.
	Queue []QueueEntryJSON `json:"queue,omitempty"`
	// SetID is the lock set whose request granted the lease, when one did.
	SetID string `json:"set_id,omitempty"`
}

// QueueEntryJSON is a waiter's place in a queue, as the admin listings
// show it.
type QueueEntryJSON struct {
	Owner     string `json:"owner"`
	Principal string `json:"principal,omitempty"`
	JoinedAt  string `json:"joined_at,omitempty"`
	Until     string `json:"until"`
}

// queueJSON is q as the admin listings show it; nil for none.
func queueJSON(q []locklogic.QueueEntry) []QueueEntryJSON {
	var out []QueueEntryJSON
	for _, e := range q {
		j := QueueEntryJSON{Owner: e.Owner, Principal: e.Principal, Until: e.Until.UTC().Format(TimeFormat)}
		if !e.JoinedAt.IsZero() {
			j.JoinedAt = e.JoinedAt.UTC().Format(TimeFormat)
		}
		out = append(out, j)
	}
	return out
}

// AdminPermitJSON is a permit as the admin routes show it: PermitJSON's
// members, the semaphore's N, the IAM principal bound to the permit and
// whether an operator ended it.
type AdminPermitJSON struct {
	Name             string `json:"name"`
	Slot             int    `json:"slot"`
	Permits          int64  `json:"permits"`
	Owner            string `json:"owner"`
	Principal        string `json:"principal,omitempty"`
	FencingToken     int64  `json:"fencing_token"`
	AcquiredAt       string `json:"acquired_at"`
	ExpiresAt        string `json:"expires_at"`
	LockDelaySeconds int64  `json:"lock_delay_seconds,omitempty"`
	ForceReleased    bool   `json:"force_released,omitempty"`
	// Queue is the semaphore's waiters in queue order, on its first
	// permit listed only.
	Queue []QueueEntryJSON `json:"queue,omitempty"`
}

func adminLockJSON(l locklogic.Lock) AdminLockJSON {
	j := lockJSON(l)
	return AdminLockJSON{Resource: j.Resource, Owner: j.Owner, Principal: l.Principal, FencingToken: j.FencingToken,
		AcquiredAt: j.AcquiredAt, ExpiresAt: j.ExpiresAt, LockDelaySeconds: j.LockDelaySeconds, ForceReleased: l.ForceReleased,
		Queue: queueJSON(l.Queue), SetID: l.SetID}
}

func adminPermitJSON(p locklogic.Permit) AdminPermitJSON {
	l := lockJSON(p.Lock)
	return AdminPermitJSON{Name: l.Resource, Slot: p.Slot, Permits: p.Permits, Owner: l.Owner, Principal: p.Principal,
		FencingToken: l.FencingToken, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt, LockDelaySeconds: l.LockDelaySeconds,
		ForceReleased: p.ForceReleased, Queue: queueJSON(p.Queue)}
}

// ListResponse is the 200 body of GET /admin/locks: one page of leases and,
// when the listing goes on, the cursor to ask for the next page with.
type ListResponse struct {
	Locks  []AdminLockJSON `json:"locks"`
	Cursor string          `json:"cursor,omitempty"`
}

// SemaphoreListResponse is the 200 body of GET /admin/semaphores.
type SemaphoreListResponse struct {
	Holders []AdminPermitJSON `json:"holders"`
	Cursor  string            `json:"cursor,omitempty"`
}

// ForceReleaseResponse is the 200 body of DELETE /admin/locks/{resource}:
// the lease it ended, as it was, the reason given, whether the lock was
// freed at once, and when others may take it.
type ForceReleaseResponse struct {
	Ended     AdminLockJSON `json:"ended"`
	Reason    string        `json:"reason"`
	Immediate bool          `json:"immediate"`
	FreeAt    string        `json:"free_at"`
}

// SemaphoreForceReleaseResponse is the 200 body of DELETE
// /admin/semaphores/{name}, as ForceReleaseResponse for a permit.
type SemaphoreForceReleaseResponse struct {
	Ended     AdminPermitJSON `json:"ended"`
	Reason    string          `json:"reason"`
	Immediate bool            `json:"immediate"`
	FreeAt    string          `json:"free_at"`
}

// AdminRWLeaseJSON is a read/write lock's lease as the admin routes show
// it: RWLeaseJSON's members, the IAM principal bound to the lease and
// whether an operator ended it.
type AdminRWLeaseJSON struct {
	Name             string `json:"name"`
	Mode             string `json:"mode"`
	Slot             *int   `json:"slot,omitempty"`
	Owner            string `json:"owner"`
	Principal        string `json:"principal,omitempty"`
	FencingToken     int64  `json:"fencing_token"`
	AcquiredAt       string `json:"acquired_at"`
	ExpiresAt        string `json:"expires_at"`
	LockDelaySeconds int64  `json:"lock_delay_seconds,omitempty"`
	ForceReleased    bool   `json:"force_released,omitempty"`
}

// AdminRWQueueEntryJSON is a waiter of a read/write lock in the listing:
// its kind ("read" or "write") and its place.
type AdminRWQueueEntryJSON struct {
	Mode string `json:"mode"`
	QueueEntryJSON
}

// AdminRWLockJSON is one read/write lock in the listing: the writer or the
// readers that keep others out (live, or inside their lock-delay), and
// the waiters in queue order.
type AdminRWLockJSON struct {
	Name    string                  `json:"name"`
	Writer  *AdminRWLeaseJSON       `json:"writer,omitempty"`
	Readers []AdminRWLeaseJSON      `json:"readers"`
	Queue   []AdminRWQueueEntryJSON `json:"queue"`
	// FencingToken is the latest grant's token, read or write.
	FencingToken int64 `json:"fencing_token"`
}

func adminRWLeaseJSON(l locklogic.RWLease) AdminRWLeaseJSON {
	r := rwLeaseJSON(l)
	return AdminRWLeaseJSON{Name: r.Name, Mode: r.Mode, Slot: r.Slot, Owner: r.Owner, Principal: l.Principal, FencingToken: r.FencingToken,
		AcquiredAt: r.AcquiredAt, ExpiresAt: r.ExpiresAt, LockDelaySeconds: r.LockDelaySeconds, ForceReleased: l.ForceReleased}
}

func adminRWLockJSON(st locklogic.RWStatus) AdminRWLockJSON {
	out := AdminRWLockJSON{Name: st.Name, Readers: rowsJSON(st.Readers, adminRWLeaseJSON), FencingToken: st.Counter}
	if st.Writer != nil {
		w := adminRWLeaseJSON(*st.Writer)
		out.Writer = &w
	}
	q := queueJSON(st.Queue)
	out.Queue = make([]AdminRWQueueEntryJSON, len(q))
	for i, e := range q {
		mode := locklogic.Read
		if st.Queue[i].Writer {
			mode = locklogic.Write
		}
		out.Queue[i] = AdminRWQueueEntryJSON{Mode: string(mode), QueueEntryJSON: e}
	}
	return out
}

// RWListResponse is the 200 body of GET /admin/rwlocks.
type RWListResponse struct {
	RWLocks []AdminRWLockJSON `json:"rwlocks"`
	Cursor  string            `json:"cursor,omitempty"`
}

// RWForceReleaseResponse is the 200 body of DELETE /admin/rwlocks/{name},
// as ForceReleaseResponse for one holder of a read/write lock.
type RWForceReleaseResponse struct {
	Ended     AdminRWLeaseJSON `json:"ended"`
	Reason    string           `json:"reason"`
	Immediate bool             `json:"immediate"`
	FreeAt    string           `json:"free_at"`
}

// listParams are the query parameters of the listings.
var listParams = []string{"prefix", "limit", "cursor"}

// list is the listings' route (routeList, routeSemList): read the query,
// one page, its rows. The listing's Scans run under the request's one
// store budget (serve), a page it cuts off ending the listing early.
func (h *Handler) list(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int) (result, error) {
	lr, err := listQuery(req)
	if err != nil {
		return result{}, err
	}
	var body any
	switch route {
	case routeRWList:
		page, err := h.svc.ListRWLocks(ctx, lr, locklogic.Budget{})
		if err != nil {
			return result{}, err
		}
		body = RWListResponse{RWLocks: rowsJSON(page.Locks, adminRWLockJSON), Cursor: page.Cursor}
	case routeSemList:
		page, err := h.svc.ListSemaphores(ctx, lr, locklogic.Budget{})
		if err != nil {
			return result{}, err
		}
		body = SemaphoreListResponse{Holders: rowsJSON(page.Permits, adminPermitJSON), Cursor: page.Cursor}
	default:
		page, err := h.svc.List(ctx, lr, locklogic.Budget{})
		if err != nil {
			return result{}, err
		}
		body = ListResponse{Locks: rowsJSON(page.Locks, adminLockJSON), Cursor: page.Cursor}
	}
	return result{status: 200, body: body, outcome: "listed"}, nil
}

// rowsJSON is a listing's rows as the API shows them: never nil, so an
// empty page is [].
func rowsJSON[T, J any](rows []T, show func(T) J) []J {
	out := make([]J, len(rows))
	for i, r := range rows {
		out[i] = show(r)
	}
	return out
}

// listQuery reads a listing's query parameters.
func listQuery(req *events.APIGatewayV2HTTPRequest) (locklogic.ListRequest, error) {
	var v locklogic.ValidationError
	q := req.QueryStringParameters
	for name := range q {
		if !contains(listParams, name) {
			v.Add(name, "is not a known query parameter; allowed: "+strings.Join(listParams, ", "))
		}
	}
	lr := locklogic.ListRequest{Prefix: q["prefix"], Cursor: q["cursor"]}
	if s, ok := q["limit"]; ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || !integerLiteral([]byte(s)) || n < 1 {
			v.Add("limit", "must be an integer from 1 to "+strconv.Itoa(locklogic.MaxListLimit))
		}
		lr.Limit = n
	}
	return lr, v.Err()
}

// Examples of the force releases' bodies, for the hint of an answer to an
// empty one.
const (
	exampleForceRelease   = `{"reason": "the holder's host is gone"}`
	exampleSemaphoreForce = `{"slot": 0, "reason": "the holder's host is gone"}`
	exampleRWForce        = `{"mode": "read", "slot": 0, "fencing_token": 7, "reason": "the holder's host is gone"}`
)

// forceRequest is a force release of either kind as its route reads it.
type forceRequest struct {
	resource  string
	mode      locklogic.RWMode // a read/write lock's holder; "" for the others
	slot      *int64           // a semaphore's or a reader's slot; nil for a lock or a writer
	reason    string           // normalized once validated
	immediate bool
	token     *int64
}

// forced is what a force release that reached the store came to: the
// answer's body, and the lease it ended or, refused, the one it names.
type forced struct {
	body  any
	lease locklogic.Lock
}

// forceRelease is the force releases' route (routeForceRelease,
// routeSemForceRelease): parse, one force release, and one audit line for
// every attempt that reached the store, refused or not.
func (h *Handler) forceRelease(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int, resource string) (result, error) {
	sem, rw := route == routeSemForceRelease, route == routeRWForceRelease
	example, members := exampleForceRelease, []string{"reason", "immediate", "fencing_token"}
	switch {
	case sem:
		example, members = exampleSemaphoreForce, []string{"slot", "reason", "immediate", "fencing_token"}
	case rw:
		example, members = exampleRWForce, []string{"mode", "slot", "reason", "immediate", "fencing_token"}
	}
	b, err := parseBody(req, example, members...)
	if err != nil {
		return result{}, err
	}
	fr := forceRequest{resource: resource}
	if rw {
		fr.mode = locklogic.RWMode(b.str("mode"))
		if fr.mode == locklogic.Read {
			fr.slot = b.int("slot", true)
		} else if _, ok := b.members["slot"]; ok && fr.mode == locklogic.Write {
			b.errs.Add("slot", `only a reader's lease has a slot: leave it out with "mode": "write"`)
		}
	} else if sem {
		fr.slot = b.int("slot", true)
	}
	fr.reason, fr.immediate, fr.token = b.str("reason"), b.bool("immediate"), b.int("fencing_token", false)
	var f forced
	switch {
	case rw:
		f, err = h.forceRWLease(ctx, &fr, &b.errs)
	case sem:
		f, err = h.forcePermit(ctx, &fr, &b.errs)
	default:
		f, err = h.forceLock(ctx, &fr, &b.errs)
	}
	if f.body == nil { // invalid: it never reached the store
		return result{}, err
	}
	h.audit(ctx, req, &fr, f.lease, err)
	if err != nil {
		return result{}, err
	}
	return result{status: 200, outcome: "force-released", body: f.body}, nil
}

// forceLock validates fr as a lock's force release and, if valid, sends it.
func (h *Handler) forceLock(ctx context.Context, fr *forceRequest, v *locklogic.ValidationError) (forced, error) {
	r := locklogic.ForceReleaseRequest{Resource: fr.resource, Reason: fr.reason, Immediate: fr.immediate, FencingToken: fr.token}
	if h.svc.ValidateForceRelease(&r, v); v.Err() != nil {
		return forced{}, v
	}
	fr.reason = r.Reason
	res, err := h.svc.ForceRelease(ctx, r)
	var changed *locklogic.LeaseChangedError
	if errors.As(err, &changed) {
		res.Ended = changed.Current
	}
	return forced{lease: res.Ended, body: ForceReleaseResponse{Ended: adminLockJSON(res.Ended), Reason: r.Reason,
		Immediate: res.Immediate, FreeAt: freeAt(res.FreeAt)}}, err
}

// forcePermit is forceLock for the permit in a semaphore's slot.
func (h *Handler) forcePermit(ctx context.Context, fr *forceRequest, v *locklogic.ValidationError) (forced, error) {
	r := locklogic.SemaphoreForceReleaseRequest{Name: fr.resource, Slot: deref(fr.slot), Reason: fr.reason, Immediate: fr.immediate,
		FencingToken: fr.token}
	if h.svc.ValidateSemaphoreForceRelease(&r, v); v.Err() != nil {
		return forced{}, v
	}
	fr.reason = r.Reason
	res, err := h.svc.ForceReleaseSemaphore(ctx, r)
	var changed *locklogic.PermitChangedError
	if errors.As(err, &changed) {
		res.Ended = changed.Current
	}
	return forced{lease: res.Ended.Lock, body: SemaphoreForceReleaseResponse{Ended: adminPermitJSON(res.Ended), Reason: r.Reason,
		Immediate: res.Immediate, FreeAt: freeAt(res.FreeAt)}}, err
}

// forceRWLease is forceLock for one holder of a read/write lock: the
// writer, or the reader in a slot.
func (h *Handler) forceRWLease(ctx context.Context, fr *forceRequest, v *locklogic.ValidationError) (forced, error) {
	r := locklogic.RWForceReleaseRequest{Name: fr.resource, Mode: fr.mode, Slot: deref(fr.slot), Reason: fr.reason,
		Immediate: fr.immediate, FencingToken: fr.token}
	if h.svc.ValidateRWForceRelease(&r, v); v.Err() != nil {
		return forced{}, v
	}
	fr.reason = r.Reason
	res, err := h.svc.ForceReleaseRW(ctx, r)
	var changed *locklogic.RWLeaseChangedError
	if errors.As(err, &changed) {
		res.Ended = changed.Current
	}
	return forced{lease: res.Ended.Lock, body: RWForceReleaseResponse{Ended: adminRWLeaseJSON(res.Ended), Reason: r.Reason,
		Immediate: res.Immediate, FreeAt: freeAt(res.FreeAt)}}, err
}

// freeAt is a force release's free_at.
func freeAt(t time.Time) string { return string(appendTime(nil, t)) }

// audit writes the audit line of a force release: who asked, what for, and
// what came of it — the lease it ended, or the refusal and the lease that
// stayed (lease; none when nothing blocked).
func (h *Handler) audit(ctx context.Context, req *events.APIGatewayV2HTTPRequest, fr *forceRequest, lease locklogic.Lock, err error) {
	action, outcome := "force-release", "force-released"
	switch {
	case fr.mode != "":
		action = "force-release-rwlock"
	case fr.slot != nil:
		action = "force-release-semaphore"
	}
	if err != nil {
		outcome = problemFor(err, fr.resource).Type[len(ProblemTypeBase):]
	}
	attrs := []slog.Attr{
		slog.String("action", action),
		slog.String("outcome", outcome),
		slog.String("request_id", req.RequestContext.RequestID),
		slog.String("principal", caller(*req)),
		slog.String("resource", fr.resource),
	}
	if fr.mode != "" {
		attrs = append(attrs, slog.String("mode", string(fr.mode)))
	}
	if fr.slot != nil {
		attrs = append(attrs, slog.Int64("slot", *fr.slot))
	}
	attrs = append(attrs, slog.Bool("immediate", fr.immediate), slog.String("reason", fr.reason))
	if fr.token != nil {
		attrs = append(attrs, slog.Int64("expected_token", *fr.token))
	}
	if lease.Owner != "" {
		attrs = append(attrs, slog.String("owner", lease.Owner), slog.String("owner_principal", lease.Principal),
			slog.Int64("fencing_token", lease.FencingToken))
	}
	h.log.LogAttrs(ctx, slog.LevelInfo, "audit", attrs...)
}
