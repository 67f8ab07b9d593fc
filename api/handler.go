// Package api adapts API Gateway HTTP API (payload format 2.0) events to the
// lock service in locklogic and back. It owns request parsing, the JSON and
// problem+json shapes, the mapping of outcomes to status codes, and the
// route table shared by the Lambda functions, the local runner and the CDK
// app. It holds no lock rules.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ft288/locks/locklogic"
)

// TimeFormat is how every timestamp leaves the API: RFC 3339, UTC,
// millisecond precision.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Handler serves the routes of api.Routes: the four lock routes and the
// admin routes. Build one per process (cold start); it is safe for
// concurrent use.
type Handler struct {
	svc *locklogic.Service
	log *slog.Logger
	now func() time.Time
	// storeBudget bounds one request's time on the store (StoreBudget).
	storeBudget time.Duration
	// emf is the metric directive of every request line.
	emf *metricFormat
	// admins limits the admin routes (SetAdmins); nil leaves them open.
	admins *adminSet
}

// NewHandler returns a Handler over svc that logs one JSON line per request
// to log, with the request's CloudWatch metrics in the Embedded Metric
// Format (namespace DefaultMetricsNamespace; see SetMetricsNamespace). now
// is the clock used for Retry-After; nil means time.Now.
func NewHandler(svc *locklogic.Service, log *slog.Logger, now func() time.Time) *Handler {
	if now == nil {
		now = time.Now
	}
	return &Handler{svc: svc, log: log, now: now, storeBudget: StoreBudget, emf: newMetricFormat(DefaultMetricsNamespace)}
}

// SetMetricsNamespace sets the CloudWatch namespace of the request metrics
// (METRICS_NAMESPACE); call it before the handler serves.
func (h *Handler) SetMetricsNamespace(namespace string) { h.emf = newMetricFormat(namespace) }

// LockJSON is a live lease as the API shows it.
type LockJSON struct {
	Resource     string `json:"resource"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencing_token"`
	AcquiredAt   string `json:"acquired_at"`
	ExpiresAt    string `json:"expires_at"`
	// LockDelaySeconds is the lease's lock-delay, when it has one.
	LockDelaySeconds int64 `json:"lock_delay_seconds,omitempty"`
}

// AcquireResponse is the 200 body of POST /locks/{resource}.
type AcquireResponse struct {
	Acquired bool      `json:"acquired"`
	Lock     *LockJSON `json:"lock,omitempty"`
	// Resource and ExpiresAt are set when the lock is held by someone else;
	// ExpiresAt only when the store reported the holder's expiry.
	Resource  string `json:"resource,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"`
	// QueueTicket is a waiting acquire's place in the lock's queue, when
	// it ended held with one: the next round sends it back to keep it.
	QueueTicket string `json:"queue_ticket,omitempty"`
}

// RenewResponse is the 200 body of POST /locks/{resource}/renew.
type RenewResponse struct {
	Renewed bool     `json:"renewed"`
	Lock    LockJSON `json:"lock"`
}

func lockJSON(l locklogic.Lock) LockJSON {
	return LockJSON{
		Resource:     l.Resource,
		Owner:        l.Owner,
		FencingToken: l.FencingToken,
		AcquiredAt:   l.AcquiredAt.UTC().Format(TimeFormat),
		ExpiresAt:    l.ExpiresAt.UTC().Format(TimeFormat),

		LockDelaySeconds: int64(l.LockDelay / time.Second),
	}
}

// result is what a route produces before it becomes a response.
type result struct {
	status  int
	body    any // nil for an empty body
	outcome string
	headers map[string]string
	// waits says the request waited at the service (wait_seconds > 0),
	// for waited: its WaitTime metric.
	waits  bool
	waited time.Duration
}

// SetStoreBudget sets the time one request may spend on the store
// (StoreBudget by default). Tests shorten it to reach the 503 path fast;
// call it before the handler serves.
func (h *Handler) SetStoreBudget(d time.Duration) { h.storeBudget = d }

// Acquire serves the try-acquires, POST /locks/{resource} with body
// {"owner", "ttl_seconds"} and an optional "lock_delay_seconds" (the
// lease's lock-delay), and POST /semaphores/{name}: one attempt, answered
// at once. A "wait_seconds" above 0 or a "queue_ticket" is refused (422
// naming it): waiting acquires go to AcquireWait's routes.
func (h *Handler) Acquire(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return h.serve(ctx, &req, pick(&req, routeAcquire, routeSemAcquire, routeRWRead, routeRWWrite)) // the acquire function serves both rows
}

// AcquireWait serves the waiting acquires, POST /locks/{resource}/wait with
// the try body plus "wait_seconds" (required, 1 to MAX_WAIT_SECONDS): how
// long to wait, inside this request, for a lock held by someone else
// (locklogic.Service.AcquireWait; each store call of a wait has its own
// store budget), and an optional "queue_ticket": the place in the lock's
// queue an earlier round's answer gave; and POST /semaphores/{name}/wait.
func (h *Handler) AcquireWait(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return h.serve(ctx, &req, pick(&req, routeAcquireWait, routeSemAcquireWait, routeRWReadWait, routeRWWriteWait)) // the wait function serves both rows
}

// acquire is the route of Acquire (waits false) and of AcquireWait: parse,
// one AcquireWait, map its outcome.
func (h *Handler) acquire(ctx context.Context, req *events.APIGatewayV2HTTPRequest, resource string, waits bool) (result, error) {
	b, err := parseBody(req, pickExample(waits, exampleLease, exampleLeaseWait), "owner", "ttl_seconds", "wait_seconds", "lock_delay_seconds", "queue_ticket")
	if err != nil {
		return result{}, err
	}
	owner, ttl, wait := b.str("owner"), b.int("ttl_seconds", true), b.int("wait_seconds", waits)
	delay := b.int("lock_delay_seconds", false)
	ar := locklogic.AcquireRequest{
		Resource: resource, Caller: locklogic.Caller{Owner: owner, Principal: principal(*req)},
		TTLSeconds: deref(ttl), WaitSeconds: deref(wait), LockDelaySeconds: deref(delay), Arrived: h.arrived(req),
		QueueTicket: b.optStr("queue_ticket"),
	}
	// Every invalid field in one answer: what the body could not give,
	// the route's rule on waiting, then the service's rules for the rest.
	h.checkWaiting(waits, ar.WaitSeconds, ar.QueueTicket, routeAcquire, routeAcquireWait, &b.errs)
	if h.svc.ValidateAcquire(&ar, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	res, err := h.svc.AcquireWait(ctx, ar, h.serviceBudget(ar.Arrived, ar.WaitSeconds))
	if err != nil {
		return result{}, err
	}
	grant := func() any { return acquiredBody(res.Lock) }
	return h.acquireAnswer(waits, res.Waited, res.Acquired, grant, "held", res.HolderExpiresAt, func(at string) any {
		return AcquireResponse{Resource: resource, ExpiresAt: at, QueueTicket: res.QueueTicket}
	}), nil
}

// acquireAnswer is the 200 answer to an acquire of any kind (waits and
// waited for its metrics). Acquired, it carries the kind's grant body.
// Otherwise its outcome is refused ("held", "full"), its body the kind's
// refusal built with the time the holder frees as RFC 3339 text ("" when
// the service does not know), and with that time comes a Retry-After of
// the whole seconds until it (at least 1).
func (h *Handler) acquireAnswer(waits bool, waited time.Duration, acquired bool, grant func() any, refused string, freeAt time.Time, body func(at string) any) result {
	if acquired {
		return result{status: 200, outcome: "acquired", body: grant(), waits: waits, waited: waited}
	}
	out := result{status: 200, outcome: refused, waits: waits, waited: waited}
	at := ""
	if !freeAt.IsZero() {
		at = string(appendTime(nil, freeAt))
		secs := math.Ceil(freeAt.Sub(h.now()).Seconds())
		out.headers = map[string]string{"retry-after": strconv.Itoa(max(1, int(secs)))}
	}
	out.body = body(at)
	return out
}

// checkWaiting applies an acquire route's rule on waiting to the body's
// wait_seconds and queue_ticket, unless they are already refused: a try
// route (waits false; its waiting twin is wait) takes no wait_seconds above
// 0 and no queue_ticket; a waiting route (its try twin is try) needs
// wait_seconds from 1 to the service's MaxWaitSeconds, and none at all when
// waiting is off. Each refusal names the other route.
func (h *Handler) checkWaiting(waits bool, wait int64, ticket string, try, wait2 int, v *locklogic.ValidationError) {
	if !waits {
		if !v.Has("wait_seconds") && wait > 0 {
			v.Add("wait_seconds", "this route does not wait: send waiting acquires to "+rows[wait2].key)
		}
		if !v.Has("queue_ticket") && ticket != "" {
			v.Add("queue_ticket", "only waiting acquires queue: send it with wait_seconds to "+rows[wait2].key)
		}
		return
	}
	if v.Has("wait_seconds") {
		return
	}
	switch limit := h.svc.MaxWaitSeconds(); {
	case limit == 0:
		v.Add("wait_seconds", "this service does not wait (MAX_WAIT_SECONDS=0): try with "+rows[try].key)
	case wait < 1 || wait > limit:
		v.Add("wait_seconds", "must be an integer from 1 to "+strconv.FormatInt(limit, 10)+
			" (a try without waiting is "+rows[try].key+")")
	}
}

// Status serves GET /locks/{resource}: the live lease, or 404; and GET
// /semaphores/{name}: N and the live permits.
func (h *Handler) Status(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return h.serve(ctx, &req, pick(&req, routeStatus, routeSemStatus, routeRWStatus))
}

func (h *Handler) status(ctx context.Context, resource string) (result, error) {
	lock, err := h.svc.Status(ctx, resource)
	if err != nil {
		return result{}, err
	}
	return result{status: 200, body: lockBody(lock), outcome: "found"}, nil
}

// Release serves DELETE /locks/{resource} with body {"owner"} and an
// optional "fencing_token": 204, or 404/403/409; and DELETE
// /semaphores/{name}, whose body also names the "slot".
func (h *Handler) Release(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return h.serve(ctx, &req, pick(&req, routeRelease, routeSemRelease, routeRWRelease))
}

func (h *Handler) release(ctx context.Context, req *events.APIGatewayV2HTTPRequest, resource string) (result, error) {
	b, err := parseBody(req, exampleRelease, "owner", "fencing_token")
	if err != nil {
		return result{}, err
	}
	rr := locklogic.ReleaseRequest{
		Resource: resource, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		FencingToken: b.int("fencing_token", false),
	}
	if h.svc.ValidateRelease(&rr, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	if err := h.svc.Release(ctx, rr); err != nil {
		return result{}, err
	}
	return result{status: 204, outcome: "released"}, nil
}

// Renew serves POST /locks/{resource}/renew with body {"owner",
// "ttl_seconds"} and an optional "fencing_token"; and POST
// /semaphores/{name}/renew, whose body also names the "slot".
func (h *Handler) Renew(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return h.serve(ctx, &req, pick(&req, routeRenew, routeSemRenew, routeRWRenew))
}

func (h *Handler) renew(ctx context.Context, req *events.APIGatewayV2HTTPRequest, resource string) (result, error) {
	b, err := parseBody(req, exampleLease, "owner", "ttl_seconds", "fencing_token")
	if err != nil {
		return result{}, err
	}
	rr := locklogic.RenewRequest{
		Resource: resource, Caller: locklogic.Caller{Owner: b.str("owner"), Principal: principal(*req)},
		TTLSeconds: deref(b.int("ttl_seconds", true)), FencingToken: b.int("fencing_token", false),
	}
	if h.svc.ValidateRenew(&rr, &b.errs); b.errs.Err() != nil {
		return result{}, &b.errs
	}
	lock, err := h.svc.Renew(ctx, rr)
	if err != nil {
		return result{}, err
	}
	return result{status: 200, body: renewedBody(lock), outcome: "renewed"}, nil
}

// Watch serves GET /locks/{resource}/watch?index=I&wait_seconds=N: the
// lock's state as soon as its index differs from I, or when N seconds have
// passed (locklogic.Service.Watch); GET /semaphores/{name}/watch
// (locklogic.Service.WatchSemaphore); and GET /rwlocks/{name}/watch
// (locklogic.Service.WatchRW).
func (h *Handler) Watch(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return h.serve(ctx, &req, pick(&req, routeWatch, routeSemWatch, routeRWWatch))
}

// watchParams are the query parameters GET /locks/{resource}/watch accepts.
var watchParams = []string{"index", "wait_seconds"}

// watch is Watch's route: read the query, one Watch, the state.
func (h *Handler) watch(ctx context.Context, req *events.APIGatewayV2HTTPRequest, resource string) (result, error) {
	wr, v := h.watchQuery(req, resource)
	if h.svc.ValidateWatch(&wr, &v); v.Err() != nil {
		return result{}, &v
	}
	res, err := h.svc.Watch(ctx, wr, h.budget(h.arrived(req), wr.WaitSeconds))
	if err != nil {
		return result{}, err
	}
	body := WatchResponse{Resource: resource, Index: res.Index, Changed: res.Changed, FencingToken: res.Token}
	if res.Lock != nil {
		l := lockJSON(*res.Lock)
		body.Lock = &l
	}
	if !res.BlockedUntil.IsZero() {
		body.BlockedUntil = string(appendTime(nil, res.BlockedUntil))
	}
	outcome := "unchanged"
	if res.Changed {
		outcome = "changed"
	}
	return result{status: 200, body: body, outcome: outcome, waits: wr.WaitSeconds > 0}, nil
}

// watchQuery reads a watch's query parameters, recording the ones it
// cannot read in the returned ValidationError.
func (h *Handler) watchQuery(req *events.APIGatewayV2HTTPRequest, resource string) (locklogic.WatchRequest, locklogic.ValidationError) {
	var v locklogic.ValidationError
	q := req.QueryStringParameters
	for name := range q {
		if !contains(watchParams, name) {
			v.Add(name, "is not a known query parameter; allowed: "+strings.Join(watchParams, ", "))
		}
	}
	wr := locklogic.WatchRequest{Resource: resource, Arrived: h.arrived(req)}
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"index", &wr.Index}, {"wait_seconds", &wr.WaitSeconds}} {
		s, ok := q[p.name]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || !integerLiteral([]byte(s)) {
			v.Add(p.name, "must be an integer")
		}
		*p.dst = n
	}
	return wr, v
}

// WatchResponse is the 200 body of GET /locks/{resource}/watch.
type WatchResponse struct {
	Resource string `json:"resource"`
	// Index is the state's index: pass it back to wait for the next change.
	Index int64 `json:"index"`
	// Changed says Index differs from the one asked with.
	Changed bool `json:"changed"`
	// FencingToken is the latest lease's token, live or not (absent: the
	// lock was never taken).
	FencingToken int64 `json:"fencing_token,omitempty"`
	// Lock is the live lease, when there is one.
	Lock *LockJSON `json:"lock,omitempty"`
	// BlockedUntil is when the lock comes free for others while no lease
	// is live but the last one's lock-delay keeps them out.
	BlockedUntil string `json:"blocked_until,omitempty"`
}

// Routes' work on the store, as serve runs it: each names one row of
// Routes (Route.id), whose descriptor (rows) says the rest. A switch rather
// than a function value: a pointer passed to a function value escapes, and
// the event would move to the heap on every request.
const (
	routeAcquire = iota
	routeAcquireWait
	routeStatus
	routeRelease
	routeRenew
	routeList
	routeForceRelease
	routeWatch
	routeSemAcquire
	routeSemAcquireWait
	routeSemStatus
	routeSemRelease
	routeSemRenew
	routeSemWatch
	routeSemList
	routeSemForceRelease
	routeSetAcquire
	routeSetAcquireWait
	routeSetRenew
	routeSetRelease
	routeRWRead
	routeRWWrite
	routeRWReadWait
	routeRWWriteWait
	routeRWStatus
	routeRWRelease
	routeRWRenew
	routeRWWatch
	routeRWList
	routeRWForceRelease
	routeCount
)

// serve runs one route: it recovers panics, renders the result or the
// problem, and logs one line with the request id, route, resource, outcome
// and latency. It never returns an error, so API Gateway never answers a bare
// 500 of its own. Every request has one store budget from its arrival
// (h.budget): a route that waits (Route.perCall) passes it to the
// service; every other route runs under it as its context's deadline.
func (h *Handler) serve(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int) (resp events.APIGatewayV2HTTPResponse, _ error) {
	start := time.Now()
	row := &rows[route]
	if !row.perCall {
		var cancel context.CancelFunc
		ctx, cancel = h.budget(h.arrived(req), 0).Context(ctx)
		defer cancel()
	}
	resource := req.PathParameters[row.param]
	var (
		res result
		err error
	)
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("panic: " + stringify(p))
			res = result{}
			resp = h.render(res, err, req, resource, route)
		}
		h.logRequest(ctx, req, route, resource, resp.StatusCode, &res, err, time.Since(start))
	}()
	if err = h.admit(ctx, req, route); err != nil {
		resp = h.render(res, err, req, resource, route)
		return resp, nil
	}
	switch route {
	case routeAcquire, routeAcquireWait:
		res, err = h.acquire(ctx, req, resource, row.Waits)
	case routeStatus:
		res, err = h.status(ctx, resource)
	case routeRelease:
		res, err = h.release(ctx, req, resource)
	case routeRenew:
		res, err = h.renew(ctx, req, resource)
	case routeList, routeSemList, routeRWList:
		res, err = h.list(ctx, req, route)
	case routeForceRelease, routeSemForceRelease, routeRWForceRelease:
		res, err = h.forceRelease(ctx, req, route, resource)
	case routeWatch:
		res, err = h.watch(ctx, req, resource)
	case routeSetAcquire, routeSetAcquireWait, routeSetRenew, routeSetRelease:
		res, err = h.serveLockSet(ctx, req, route, resource)
	case routeRWRead, routeRWWrite, routeRWReadWait, routeRWWriteWait, routeRWStatus, routeRWRelease, routeRWRenew, routeRWWatch:
		res, err = h.serveRW(ctx, req, route, resource)
	default:
		res, err = h.serveSemaphore(ctx, req, route, resource)
	}
	resp = h.render(res, err, req, resource, route)
	return resp, nil
}

// StoreBudget bounds the time one request may spend on DynamoDB from its
// arrival, SDK retries included, however many store calls it makes; past
// it the answer is 503 service-unavailable. A request that waits
// (wait_seconds) has StoreBudget after its wait's end, and each of its
// store calls at most StoreBudget.
const StoreBudget = 3 * time.Second

// deadlineReserve is kept back from the Lambda deadline so a slow store
// still gets a problem answer instead of a runtime timeout (which API
// Gateway would turn into a bare 500/503 without a body we control).
const deadlineReserve = 300 * time.Millisecond

// budget is the store budget of a request that arrived at arrived (the
// service clock; zero: now) and waits up to waitSeconds: one deadline,
// the store budget after the wait's end counted from the arrival, never
// later than the invocation's deadline minus a reserve. A request that
// waits also bounds each store call by the store budget.
func (h *Handler) budget(arrived time.Time, waitSeconds int64) locklogic.Budget {
	b := locklogic.Budget{Reserve: deadlineReserve}
	if !arrived.IsZero() {
		// The arrival on the real clock, which deadlines use: the
		// service clock may be a test's.
		age := max(h.now().Sub(arrived), 0)
		b.Deadline = time.Now().Add(time.Duration(waitSeconds)*time.Second + h.storeBudget - age)
	}
	if waitSeconds > 0 || arrived.IsZero() {
		b.PerCall = h.storeBudget
	}
	return b
}

// serviceBudget is the budget an acquire that arrived at arrived hands the
// service: a waiting one's (budget); none for a try, whose route runs
// under the request's one budget already (serve).
func (h *Handler) serviceBudget(arrived time.Time, waitSeconds int64) locklogic.Budget {
	if waitSeconds == 0 {
		return locklogic.Budget{}
	}
	return h.budget(arrived, waitSeconds)
}

func (h *Handler) render(res result, err error, req *events.APIGatewayV2HTTPRequest, resource string, route int) events.APIGatewayV2HTTPResponse {
	if err != nil {
		p := problemOf(err, resource, rows[route].noun())
		p.Instance = canonicalPath(req.RawPath)
		return problemResponse(p)
	}
	headers := make(map[string]string, 2+len(res.headers))
	headers["cache-control"] = "no-store"
	for k, v := range res.headers {
		headers[k] = v
	}
	resp := events.APIGatewayV2HTTPResponse{StatusCode: res.status, Headers: headers}
	if res.body != nil {
		var b []byte
		if a, ok := res.body.(jsonAppender); ok {
			b = a.appendJSON(make([]byte, 0, 256))
		} else {
			var merr error
			if b, merr = json.Marshal(res.body); merr != nil {
				return problemResponse(problemFor(merr, resource))
			}
		}
		headers["content-type"] = "application/json"
		resp.Body = string(b)
	}
	return resp
}

func (h *Handler) logRequest(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int, resource string, status int, res *result, err error, latency time.Duration) {
	outcome := res.outcome
	if outcome == "" && err != nil {
		outcome = problemFor(err, resource).Type[len(ProblemTypeBase):]
	}
	line := requestLine{
		requestID: req.RequestContext.RequestID, route: req.RouteKey, resource: resource,
		outcome: outcome, status: status, latency: latency,
		emf: h.emf, name: rows[route].Name, metricResult: metricOutcome(outcome), waits: res.waits, waited: res.waited,
	}
	if status >= 500 {
		line.err = err
	}
	logLine(ctx, h.log, &line)
}

// canonicalPath percent-encodes each segment of path, whether API Gateway
// delivered it decoded or encoded, so a problem's instance is always a valid
// URI reference.
func canonicalPath(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if dec, err := url.PathUnescape(s); err == nil {
			s = dec
		}
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func stringify(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// arrived is when req reached the service: API Gateway's timeEpoch,
// unless that cannot be this invocation's arrival (later than now, or older
// than API Gateway waits for an answer: a replayed or recorded event), then
// now. A wait's end is counted from it, so a cold start's time counts.
// (The local runner stamps timeEpoch with the handler's clock, as a test's
// clock may be a fake one.)
func (h *Handler) arrived(req *events.APIGatewayV2HTTPRequest) time.Time {
	now := h.now()
	ms := req.RequestContext.TimeEpoch
	if ms <= 0 {
		return now
	}
	at := time.UnixMilli(ms)
	if at.After(now) || now.Sub(at) > IntegrationTimeout {
		return now
	}
	return at
}

// deref returns *p, or 0 for nil (a member the body did not give: its
// error is already recorded).
func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
