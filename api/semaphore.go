package api

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/locklogic"
)

// Examples of the semaphore routes' bodies, for the hint of an answer to
// an empty one.
const (
	exampleSemaphore        = `{"owner": "worker-1", "ttl_seconds": 30, "permits": 3}`
	exampleSemaphoreWait    = `{"owner": "worker-1", "ttl_seconds": 30, "permits": 3, "wait_seconds": 10}`
	exampleSemaphoreRenew   = `{"owner": "worker-1", "slot": 0, "ttl_seconds": 30}`
	exampleSemaphoreRelease = `{"owner": "worker-1", "slot": 0}`
)

// PermitJSON is a permit as the API shows it.
type PermitJSON struct {
	Name             string `json:"name"`
	Slot             int    `json:"slot"`
	Owner            string `json:"owner"`
	FencingToken     int64  `json:"fencing_token"`
	AcquiredAt       string `json:"acquired_at"`
	ExpiresAt        string `json:"expires_at"`
	LockDelaySeconds int64  `json:"lock_delay_seconds,omitempty"`
}

func permitJSON(p locklogic.Permit) PermitJSON {
	l := lockJSON(p.Lock)
	return PermitJSON{Name: l.Resource, Slot: p.Slot, Owner: l.Owner, FencingToken: l.FencingToken, AcquiredAt: l.AcquiredAt,
		ExpiresAt: l.ExpiresAt, LockDelaySeconds: l.LockDelaySeconds}
}

// SemaphoreAcquireResponse is the 200 body of POST /semaphores/{name}: a
// permit, or full (Name, FreeAt when the service saw when a permit comes
// free, and QueueTicket when a wait ended with a place in the queue).
type SemaphoreAcquireResponse struct {
	Acquired    bool        `json:"acquired"`
	Permit      *PermitJSON `json:"permit,omitempty"`
	Name        string      `json:"name,omitempty"`
	FreeAt      string      `json:"free_at,omitempty"`
	QueueTicket string      `json:"queue_ticket,omitempty"`
}

// SemaphoreRenewResponse is the 200 body of POST /semaphores/{name}/renew.
type SemaphoreRenewResponse struct {
	Renewed bool       `json:"renewed"`
	Permit  PermitJSON `json:"permit"`
}

// SemaphoreStatusResponse is the 200 body of GET /semaphores/{name}.
type SemaphoreStatusResponse struct {
	Name string `json:"name"`
	// Permits is N; absent when the semaphore has no record.
	Permits int64        `json:"permits,omitempty"`
	Holders []PermitJSON `json:"holders"`
}

// SemaphoreWatchResponse is the 200 body of GET /semaphores/{name}/watch.
type SemaphoreWatchResponse struct {
	Name    string `json:"name"`
	Index   int64  `json:"index"`
	Changed bool   `json:"changed"`
	Permits int64  `json:"permits,omitempty"`
	// FencingToken is the latest permit's token, live or not (absent: the
	// semaphore was never taken).
	FencingToken int64        `json:"fencing_token,omitempty"`
	Holders      []PermitJSON `json:"holders"`
}

func holdersJSON(ps []locklogic.Permit) []PermitJSON {
	out := make([]PermitJSON, len(ps))
	for i, p := range ps {
		out[i] = permitJSON(p)
	}
	return out
}

// serveSemaphore runs a semaphore route for serve.
func (h *Handler) serveSemaphore(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int, name string) (result, error) {
	switch route {
	case routeSemAcquire, routeSemAcquireWait:
		return h.semAcquire(ctx, req, name, rows[route].Waits)
	case routeSemStatus:
		st, err := h.svc.SemaphoreStatus(ctx, name)
		if err != nil {
			return result{}, err
		}
		return result{status: 200, outcome: "found", body: SemaphoreStatusResponse{Name: name, Permits: st.Permits, Holders: holdersJSON(st.Holders)}}, nil
	case routeSemRelease:
		return h.semRelease(ctx, req, name)
	case routeSemRenew:
		return h.semRenew(ctx, req, name)
	case routeSemWatch:
		return h.semWatch(ctx, req, name)
	}
	return result{}, errors.New("no such route")
}

// semAcquire is the route of AcquireSemaphore (waits false) and of
// AcquireSemaphoreWait, as acquire is for a lock.
func (h *Handler) semAcquire(ctx context.Context, req *events.APIGatewayV2HTTPRequest, name string, waits bool) (result, error) {
	b, err := parseBody(req, pickExample(waits, exampleSemaphore, exampleSemaphoreWait), "owner", "ttl_seconds", "permits", "lock_delay_seconds", "wait_seconds", "queue_ticket")
	if err != nil {
		return result{}, err
	}
	ar := locklogic.SemaphoreAcquireRequest{
		Name: name, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		TTLSeconds: deref(b.int("ttl_seconds", true)), Permits: deref(b.int("permits", true)),
		LockDelaySeconds: deref(b.int("lock_delay_seconds", false)), WaitSeconds: deref(b.int("wait_seconds", waits)),
		Arrived: h.arrived(req), QueueTicket: b.optStr("queue_ticket"),
	}
	h.checkWaiting(waits, ar.WaitSeconds, ar.QueueTicket, routeSemAcquire, routeSemAcquireWait, &b.errs)
	if h.svc.ValidateSemaphoreAcquire(&ar, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	res, err := h.svc.AcquireSemaphore(ctx, ar, h.serviceBudget(ar.Arrived, ar.WaitSeconds))
	if err != nil {
		return result{}, err
	}
	grant := func() any { return SemaphoreAcquireResponse{Acquired: true, Permit: new(permitJSON(res.Permit))} }
	return h.acquireAnswer(waits, res.Waited, res.Acquired, grant, "full", res.FreeAt, func(at string) any {
		return SemaphoreAcquireResponse{Name: name, FreeAt: at, QueueTicket: res.QueueTicket}
	}), nil
}

func (h *Handler) semRenew(ctx context.Context, req *events.APIGatewayV2HTTPRequest, name string) (result, error) {
	b, err := parseBody(req, exampleSemaphoreRenew, "owner", "slot", "ttl_seconds", "fencing_token")
	if err != nil {
		return result{}, err
	}
	rr := locklogic.SemaphoreRenewRequest{
		Name: name, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		Slot: deref(b.int("slot", true)), TTLSeconds: deref(b.int("ttl_seconds", true)), FencingToken: b.int("fencing_token", false),
	}
	if h.svc.ValidateSemaphoreRenew(&rr, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	p, err := h.svc.RenewSemaphore(ctx, rr)
	if err != nil {
		return result{}, err
	}
	return result{status: 200, outcome: "renewed", body: SemaphoreRenewResponse{Renewed: true, Permit: permitJSON(p)}}, nil
}

func (h *Handler) semRelease(ctx context.Context, req *events.APIGatewayV2HTTPRequest, name string) (result, error) {
	b, err := parseBody(req, exampleSemaphoreRelease, "owner", "slot", "fencing_token")
	if err != nil {
		return result{}, err
	}
	rr := locklogic.SemaphoreReleaseRequest{
		Name: name, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		Slot: deref(b.int("slot", true)), FencingToken: b.int("fencing_token", false),
	}
	if h.svc.ValidateSemaphoreRelease(&rr, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	if err := h.svc.ReleaseSemaphore(ctx, rr); err != nil {
		return result{}, err
	}
	return result{status: 204, outcome: "released"}, nil
}

func (h *Handler) semWatch(ctx context.Context, req *events.APIGatewayV2HTTPRequest, name string) (result, error) {
	wr, v := h.watchQuery(req, name)
	if h.svc.ValidateSemaphoreWatch(&wr, &v); v.Err() != nil {
		return result{}, &v
	}
	res, err := h.svc.WatchSemaphore(ctx, wr, h.budget(h.arrived(req), wr.WaitSeconds))
	if err != nil {
		return result{}, err
	}
	body := SemaphoreWatchResponse{Name: name, Index: res.Index, Changed: res.Changed, Permits: res.Status.Permits,
		FencingToken: res.Status.Counter, Holders: holdersJSON(res.Status.Holders)}
	outcome := "unchanged"
	if res.Changed {
		outcome = "changed"
	}
	return result{status: 200, body: body, outcome: outcome, waits: wr.WaitSeconds > 0}, nil
}
