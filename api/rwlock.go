package api

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/locklogic"
)

// Examples of the read/write lock routes' bodies, for the hint of an
// answer to an empty one.
const (
	exampleRW        = `{"owner": "worker-1", "ttl_seconds": 30}`
	exampleRWWait    = `{"owner": "worker-1", "ttl_seconds": 30, "wait_seconds": 10}`
	exampleRWRenew   = `{"owner": "worker-1", "mode": "read", "slot": 0, "fencing_token": 7, "ttl_seconds": 30}`
	exampleRWRelease = `{"owner": "worker-1", "mode": "read", "slot": 0, "fencing_token": 7}`
)

// RWLeaseJSON is a read/write lock's lease as the API shows it: the
// writer's (mode "write", no slot) or a reader's in slot.
type RWLeaseJSON struct {
	Name             string `json:"name"`
	Mode             string `json:"mode"`
	Slot             *int   `json:"slot,omitempty"`
	Owner            string `json:"owner"`
	FencingToken     int64  `json:"fencing_token"`
	AcquiredAt       string `json:"acquired_at"`
	ExpiresAt        string `json:"expires_at"`
	LockDelaySeconds int64  `json:"lock_delay_seconds,omitempty"`
}

func rwLeaseJSON(l locklogic.RWLease) RWLeaseJSON {
	j := lockJSON(l.Lock)
	out := RWLeaseJSON{Name: j.Resource, Mode: string(l.Mode), Owner: j.Owner, FencingToken: j.FencingToken, AcquiredAt: j.AcquiredAt,
		ExpiresAt: j.ExpiresAt, LockDelaySeconds: j.LockDelaySeconds}
	if l.Mode == locklogic.Read {
		slot := l.Slot
		out.Slot = &slot
	}
	return out
}

// RWAcquireResponse is the 200 body of the read/write lock's acquires: a
// lease, or held (Name, FreeAt when the service saw when the lock comes
// free for the mode, QueueTicket when a wait ended with a place).
type RWAcquireResponse struct {
	Acquired    bool         `json:"acquired"`
	Lease       *RWLeaseJSON `json:"lease,omitempty"`
	Name        string       `json:"name,omitempty"`
	FreeAt      string       `json:"free_at,omitempty"`
	QueueTicket string       `json:"queue_ticket,omitempty"`
}

// RWRenewResponse is the 200 body of POST /rwlocks/{name}/renew.
type RWRenewResponse struct {
	Renewed bool        `json:"renewed"`
	Lease   RWLeaseJSON `json:"lease"`
}

// RWQueueEntryJSON is a waiter of a read/write lock in status.
type RWQueueEntryJSON struct {
	Mode  string `json:"mode"`
	Owner string `json:"owner"`
	Until string `json:"until"`
}

// RWStatusResponse is the 200 body of GET /rwlocks/{name}.
type RWStatusResponse struct {
	Name    string             `json:"name"`
	Writer  *RWLeaseJSON       `json:"writer,omitempty"`
	Readers []RWLeaseJSON      `json:"readers"`
	Queue   []RWQueueEntryJSON `json:"queue"`
	// FencingToken is the latest grant's token, live or not (absent: never
	// taken).
	FencingToken int64 `json:"fencing_token,omitempty"`
}

func rwStatusJSON(st locklogic.RWStatus) RWStatusResponse {
	out := RWStatusResponse{Name: st.Name, Readers: make([]RWLeaseJSON, len(st.Readers)), Queue: make([]RWQueueEntryJSON, len(st.Queue)),
		FencingToken: st.Counter}
	if st.Writer != nil {
		w := rwLeaseJSON(*st.Writer)
		out.Writer = &w
	}
	for i, r := range st.Readers {
		out.Readers[i] = rwLeaseJSON(r)
	}
	for i, e := range st.Queue {
		mode := locklogic.Read
		if e.Writer {
			mode = locklogic.Write
		}
		out.Queue[i] = RWQueueEntryJSON{Mode: string(mode), Owner: e.Owner, Until: string(appendTime(nil, e.Until))}
	}
	return out
}

// rwModeOf is the mode of an acquire route.
func rwModeOf(route int) locklogic.RWMode {
	if route == routeRWWrite || route == routeRWWriteWait {
		return locklogic.Write
	}
	return locklogic.Read
}

// serveRW runs a read/write lock route for serve.
func (h *Handler) serveRW(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int, name string) (result, error) {
	switch route {
	case routeRWRead, routeRWWrite, routeRWReadWait, routeRWWriteWait:
		return h.rwAcquire(ctx, req, route, name)
	case routeRWStatus:
		st, err := h.svc.RWLockStatus(ctx, name)
		if err != nil {
			return result{}, err
		}
		return result{status: 200, outcome: "found", body: rwStatusJSON(st)}, nil
	case routeRWRenew, routeRWRelease:
		return h.rwLease(ctx, req, route, name)
	case routeRWWatch:
		return h.rwWatch(ctx, req, name)
	}
	return result{}, errors.New("no such route")
}

// rwAcquire is the route of the read and write acquires, try and waiting.
func (h *Handler) rwAcquire(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int, name string) (result, error) {
	waits := rows[route].Waits
	b, err := parseBody(req, pickExample(waits, exampleRW, exampleRWWait), "owner", "ttl_seconds", "lock_delay_seconds", "wait_seconds", "queue_ticket")
	if err != nil {
		return result{}, err
	}
	ar := locklogic.RWAcquireRequest{
		Name: name, Mode: rwModeOf(route), Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		TTLSeconds: deref(b.int("ttl_seconds", true)), LockDelaySeconds: deref(b.int("lock_delay_seconds", false)),
		WaitSeconds: deref(b.int("wait_seconds", waits)), Arrived: h.arrived(req), QueueTicket: b.optStr("queue_ticket"),
	}
	try, wait := routeRWRead, routeRWReadWait
	if ar.Mode == locklogic.Write {
		try, wait = routeRWWrite, routeRWWriteWait
	}
	h.checkWaiting(waits, ar.WaitSeconds, ar.QueueTicket, try, wait, &b.errs)
	if h.svc.ValidateRWAcquire(&ar, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	res, err := h.svc.AcquireRW(ctx, ar, h.serviceBudget(ar.Arrived, ar.WaitSeconds))
	if err != nil {
		return result{}, err
	}
	grant := func() any { return RWAcquireResponse{Acquired: true, Lease: new(rwLeaseJSON(res.Lease))} }
	return h.acquireAnswer(waits, res.Waited, res.Acquired, grant, "held", res.FreeAt, func(at string) any {
		return RWAcquireResponse{Name: name, FreeAt: at, QueueTicket: res.QueueTicket}
	}), nil
}

// rwLease is the route of a renewal and a release.
func (h *Handler) rwLease(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int, name string) (result, error) {
	renew := route == routeRWRenew
	allowed := []string{"owner", "mode", "slot", "fencing_token"}
	example := exampleRWRelease
	if renew {
		allowed, example = append(allowed, "ttl_seconds"), exampleRWRenew
	}
	b, err := parseBody(req, example, allowed...)
	if err != nil {
		return result{}, err
	}
	lr := locklogic.RWLeaseRequest{
		Name: name, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		Mode: locklogic.RWMode(b.str("mode")), FencingToken: b.int("fencing_token", false),
	}
	if lr.Mode == locklogic.Read {
		lr.Slot = deref(b.int("slot", true))
	} else if _, ok := b.members["slot"]; ok && lr.Mode == locklogic.Write {
		b.errs.Add("slot", `only a reader's lease has a slot: leave it out with "mode": "write"`)
	}
	if renew {
		lr.TTLSeconds = deref(b.int("ttl_seconds", true))
	}
	if h.svc.ValidateRWLease(&lr, renew, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	if !renew {
		if err := h.svc.ReleaseRW(ctx, lr); err != nil {
			return result{}, err
		}
		return result{status: 204, outcome: "released"}, nil
	}
	l, err := h.svc.RenewRW(ctx, lr)
	if err != nil {
		return result{}, err
	}
	return result{status: 200, outcome: "renewed", body: RWRenewResponse{Renewed: true, Lease: rwLeaseJSON(l)}}, nil
}

// RWWatchResponse is the 200 body of GET /rwlocks/{name}/watch: the index
// to send back, and the live writer or readers.
type RWWatchResponse struct {
	Name    string        `json:"name"`
	Index   int64         `json:"index"`
	Changed bool          `json:"changed"`
	Writer  *RWLeaseJSON  `json:"writer,omitempty"`
	Readers []RWLeaseJSON `json:"readers"`
	// FencingToken is the latest grant's token, read or write, live or not
	// (absent: never taken).
	FencingToken int64 `json:"fencing_token,omitempty"`
}

// rwWatch is the route of GET /rwlocks/{name}/watch, as semWatch.
func (h *Handler) rwWatch(ctx context.Context, req *events.APIGatewayV2HTTPRequest, name string) (result, error) {
	wr, v := h.watchQuery(req, name)
	if h.svc.ValidateRWWatch(&wr, &v); v.Err() != nil {
		return result{}, &v
	}
	res, err := h.svc.WatchRW(ctx, wr, h.budget(h.arrived(req), wr.WaitSeconds))
	if err != nil {
		return result{}, err
	}
	st := rwStatusJSON(res.Status)
	body := RWWatchResponse{Name: name, Index: res.Index, Changed: res.Changed, Writer: st.Writer, Readers: st.Readers,
		FencingToken: st.FencingToken}
	outcome := "unchanged"
	if res.Changed {
		outcome = "changed"
	}
	return result{status: 200, body: body, outcome: outcome, waits: wr.WaitSeconds > 0}, nil
}
