package api

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/locklogic"
)

// Lock sets (docs/design.md#lock-sets): POST /locksets/{prefix} takes
// several lock names all or nothing, …/wait waits for them, …/renew and
// DELETE renew and release them, each name with the lock's own write.

// Budgets and timeouts of the lock set routes. A set makes up to
// locklogic.MaxSetNames (25) acquire writes and, refused on the last, 25
// releases: 50 writes of ~10 ms each (~20 ms at DynamoDB's p99), 0.5 to
// 1 s, where a lock route makes one.
const (
	// LockSetBudget bounds one request's writes on a set's names (a try's
	// acquires, or a renewal's or release's writes): 25 writes at 20 ms
	// are 0.5 s, so 5 s leaves ten times that for a slow store.
	LockSetBudget = 5 * time.Second
	// LockSetTimeout is the lockset function's timeout: a try's
	// LockSetBudget, its rollback's locklogic.SetRollbackBudget (3 s, 25
	// releases) and the deadline reserve (0.3 s) are 8.3 s; rounded up.
	LockSetTimeout = 10 * time.Second
	// LockSetWaitTimeout is the locksetwait function's timeout: a wait of
	// up to locklogic.MaxWaitLimit (20 s), then a try and its rollback
	// (5 + 3 s) and the reserve: 28.3 s, below API Gateway's 30 s.
	LockSetWaitTimeout = 29 * time.Second
	// LockSetWaitHold is the longest a waiting set request holds its
	// execution: a round, its last try and that try's rollback.
	LockSetWaitHold = locklogic.MaxWaitLimit*time.Second + LockSetBudget + locklogic.SetRollbackBudget
)

// Examples of the lock set routes' bodies, for the hint of an answer to an
// empty one.
const (
	exampleLockSet        = `{"owner": "worker-1", "ttl_seconds": 30, "names": ["acct-1", "acct-2"]}`
	exampleLockSetWait    = `{"owner": "worker-1", "ttl_seconds": 30, "names": ["acct-1", "acct-2"], "wait_seconds": 10}`
	exampleLockSetRenew   = `{"owner": "worker-1", "ttl_seconds": 30, "locks": [{"resource": "acct-1", "fencing_token": 7}]}`
	exampleLockSetRelease = `{"owner": "worker-1", "locks": [{"resource": "acct-1", "fencing_token": 7}]}`
)

// LockSetResponse is the 200 body of POST /locksets/{prefix} and its
// …/wait: the set's leases in name order, or the name that refused the set
// (BlockedBy, with FreeAt when the service saw when it comes free); nothing
// is held then, but for Unreleased, which lapse at their TTL.
type LockSetResponse struct {
	Acquired   bool       `json:"acquired"`
	SetID      string     `json:"set_id,omitempty"`
	Locks      []LockJSON `json:"locks,omitempty"`
	BlockedBy  string     `json:"blocked_by,omitempty"`
	FreeAt     string     `json:"free_at,omitempty"`
	Unreleased []string   `json:"unreleased,omitempty"`
	// QueueTicket is, for a waiting round that ended not granted, its
	// place in blocked_by's queue: the next round sends it back.
	QueueTicket string `json:"queue_ticket,omitempty"`
}

// LockSetItemJSON is one name's outcome in a set's renewal or release:
// OK, with the renewed lease (Lock) for a renewal, or the problem the
// lock's own route would have answered for that name.
type LockSetItemJSON struct {
	Resource string    `json:"resource"`
	OK       bool      `json:"ok"`
	Lock     *LockJSON `json:"lock,omitempty"`
	Problem  *Problem  `json:"problem,omitempty"`
}

// LockSetRenewResponse is the 200 body of POST /locksets/{prefix}/renew:
// Renewed when every name was, and each name's outcome in the request's
// order.
type LockSetRenewResponse struct {
	Renewed bool              `json:"renewed"`
	Locks   []LockSetItemJSON `json:"locks"`
}

// LockSetReleaseResponse is the 200 body of DELETE /locksets/{prefix} when
// some name was not released (all released: 204): each name's outcome.
type LockSetReleaseResponse struct {
	Released bool              `json:"released"`
	Locks    []LockSetItemJSON `json:"locks"`
}

// LockSet serves the lockset function's routes: POST /locksets/{prefix}
// (a try: {"owner", "ttl_seconds", "names"} and an optional
// "lock_delay_seconds"), POST /locksets/{prefix}/renew and DELETE
// /locksets/{prefix} ({"owner", "locks": [{"resource",
// "fencing_token"}]}, the renewal with "ttl_seconds").
func (h *Handler) LockSet(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	route := routeSetAcquire
	switch req.RouteKey {
	case rows[routeSetRenew].key:
		route = routeSetRenew
	case rows[routeSetRelease].key:
		route = routeSetRelease
	}
	return h.serve(ctx, &req, route)
}

// LockSetWait serves POST /locksets/{prefix}/wait: a try's body plus
// "wait_seconds" (1 to MAX_WAIT_SECONDS) and an optional "queue_ticket"
// (an earlier round's), waiting in the queue of each held name in turn,
// holding the names before it (locklogic.Service.AcquireSet).
func (h *Handler) LockSetWait(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return h.serve(ctx, &req, routeSetAcquireWait)
}

// serveLockSet runs a lock set route for serve.
func (h *Handler) serveLockSet(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int, prefix string) (result, error) {
	switch route {
	case routeSetAcquire, routeSetAcquireWait:
		return h.setAcquire(ctx, req, prefix, rows[route].Waits)
	case routeSetRenew:
		return h.setRenew(ctx, req, prefix)
	}
	return h.setRelease(ctx, req, prefix)
}

// setBudget is the store budget of a set request that arrived at arrived
// and waits up to waitSeconds: LockSetBudget for each try (and for the
// whole of a renewal or release) after the wait's end counted from the
// arrival; a rollback has its own (locklogic.SetRollbackBudget).
func (h *Handler) setBudget(arrived time.Time, waitSeconds int64) locklogic.Budget {
	age := max(h.now().Sub(arrived), 0)
	return locklogic.Budget{Reserve: deadlineReserve, PerCall: LockSetBudget,
		Deadline: time.Now().Add(time.Duration(waitSeconds)*time.Second + LockSetBudget - age)}
}

func (h *Handler) setAcquire(ctx context.Context, req *events.APIGatewayV2HTTPRequest, prefix string, waits bool) (result, error) {
	b, err := parseBody(req, pickExample(waits, exampleLockSet, exampleLockSetWait), "owner", "ttl_seconds", "names", "wait_seconds", "lock_delay_seconds", "queue_ticket")
	if err != nil {
		return result{}, err
	}
	ar := locklogic.SetAcquireRequest{
		Prefix: prefix, Names: b.strs("names"), Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		TTLSeconds: deref(b.int("ttl_seconds", true)), WaitSeconds: deref(b.int("wait_seconds", waits)),
		LockDelaySeconds: deref(b.int("lock_delay_seconds", false)), Arrived: h.arrived(req),
		QueueTicket: b.optStr("queue_ticket"),
	}
	h.checkWaiting(waits, ar.WaitSeconds, ar.QueueTicket, routeSetAcquire, routeSetAcquireWait, &b.errs)
	if h.svc.ValidateSetAcquire(&ar, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	res, err := h.svc.AcquireSet(ctx, ar, h.setBudget(ar.Arrived, ar.WaitSeconds))
	if err != nil {
		return result{}, err
	}
	out := result{status: 200, waits: waits, waited: res.Waited}
	body := LockSetResponse{Acquired: res.Acquired, SetID: res.SetID, Unreleased: res.Unreleased}
	if res.Acquired {
		out.outcome = "acquired"
		body.Locks = make([]LockJSON, len(res.Locks))
		for i, l := range res.Locks {
			body.Locks[i] = lockJSON(l)
		}
		body.Unreleased = nil
	} else {
		out.outcome = "held"
		body.SetID = ""
		body.BlockedBy = res.BlockedBy
		body.QueueTicket = res.QueueTicket
		if !res.FreeAt.IsZero() {
			body.FreeAt = string(appendTime(nil, res.FreeAt))
			secs := math.Ceil(res.FreeAt.Sub(h.now()).Seconds())
			out.headers = map[string]string{"retry-after": strconv.Itoa(max(1, int(secs)))}
		}
	}
	out.body = body
	return out, nil
}

func (h *Handler) setRenew(ctx context.Context, req *events.APIGatewayV2HTTPRequest, prefix string) (result, error) {
	b, err := parseBody(req, exampleLockSetRenew, "owner", "ttl_seconds", "locks")
	if err != nil {
		return result{}, err
	}
	rr := locklogic.SetRenewRequest{Prefix: prefix, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		TTLSeconds: deref(b.int("ttl_seconds", true)), Locks: b.setLocks("locks")}
	if h.svc.ValidateSetRenew(&rr, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	cctx, cancel := h.setBudget(h.arrived(req), 0).Context(ctx)
	defer cancel()
	items, err := h.svc.RenewSet(cctx, rr)
	if err != nil {
		return result{}, err
	}
	body, all := setItemsJSON(items, true)
	outcome := "renewed"
	if !all {
		outcome = "partial"
	}
	return result{status: 200, outcome: outcome, body: LockSetRenewResponse{Renewed: all, Locks: body}}, nil
}

func (h *Handler) setRelease(ctx context.Context, req *events.APIGatewayV2HTTPRequest, prefix string) (result, error) {
	b, err := parseBody(req, exampleLockSetRelease, "owner", "locks")
	if err != nil {
		return result{}, err
	}
	rr := locklogic.SetReleaseRequest{Prefix: prefix, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		Locks: b.setLocks("locks")}
	if h.svc.ValidateSetRelease(&rr, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	cctx, cancel := h.setBudget(h.arrived(req), 0).Context(ctx)
	defer cancel()
	items, err := h.svc.ReleaseSet(cctx, rr)
	if err != nil {
		return result{}, err
	}
	body, all := setItemsJSON(items, false)
	if all {
		return result{status: 204, outcome: "released"}, nil
	}
	return result{status: 200, outcome: "partial", body: LockSetReleaseResponse{Locks: body}}, nil
}

// setItemsJSON renders each name's outcome, its problem by the error
// table (the answer the lock's own route gives), and reports whether all
// were done.
func setItemsJSON(items []locklogic.SetItemResult, renewed bool) ([]LockSetItemJSON, bool) {
	out := make([]LockSetItemJSON, len(items))
	all := true
	for i, it := range items {
		out[i] = LockSetItemJSON{Resource: it.Resource, OK: it.Err == nil}
		switch {
		case it.Err != nil:
			all = false
			p := problemFor(it.Err, it.Resource)
			out[i].Problem = &p
		case renewed:
			l := lockJSON(it.Lock)
			out[i].Lock = &l
		}
	}
	return out, all
}

// strs returns the required member name, a JSON array of strings; nil
// (its error recorded) when it is not one. The names are checked by the
// service.
func (b *body) strs(name string) []string {
	raw, ok := b.members[name]
	if !ok {
		b.errs.Add(name, "is required")
		return nil
	}
	var out []string
	if raw[0] != '[' || json.Unmarshal(raw, &out) != nil {
		b.errs.Add(name, "must be a JSON array of strings")
		return nil
	}
	if loneSurrogate(raw) { // encoding/json would make it U+FFFD
		b.errs.Add(name, "must be valid UTF-8 (no lone surrogate escapes)")
		return nil
	}
	return out
}

// setLocks returns the required member name, a JSON array of {"resource",
// "fencing_token"} objects (a set's answer's locks may be sent back as
// they are: their other members are ignored); nil (its error recorded)
// when it is not one.
func (b *body) setLocks(name string) []locklogic.SetLock {
	raw, ok := b.members[name]
	if !ok {
		b.errs.Add(name, "is required")
		return nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		b.errs.Add(name, `must be a JSON array of {"resource", "fencing_token"} objects`)
		return nil
	}
	out := make([]locklogic.SetLock, len(items))
	for i, it := range items {
		field := locklogic.SetField(name, i)
		var m struct {
			Resource     *string         `json:"resource"`
			FencingToken json.RawMessage `json:"fencing_token"`
		}
		if len(it) == 0 || it[0] != '{' || json.Unmarshal(it, &m) != nil || loneSurrogate(it) {
			b.errs.Add(field, `must be a {"resource", "fencing_token"} object of a string and an integer`)
			continue
		}
		if m.Resource == nil {
			b.errs.Add(field+".resource", "is required")
		} else {
			out[i].Resource = *m.Resource
		}
		tok, err := strconv.ParseInt(string(m.FencingToken), 10, 64)
		switch {
		case m.FencingToken == nil:
			b.errs.Add(field+".fencing_token", "is required")
		case err != nil || !integerLiteral(m.FencingToken):
			b.errs.Add(field+".fencing_token", "must be a JSON integer")
		default:
			out[i].FencingToken = tok
		}
	}
	return out
}
