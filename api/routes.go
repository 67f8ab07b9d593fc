package api

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// HandlerFunc is the signature every Lambda handler in this service has: one
// API Gateway HTTP API (payload format 2.0) event in, one response out. It
// never returns a non-nil error; failures are problem responses.
type HandlerFunc func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Route is one row of the route table: the Lambda function Name (also the
// folder functions/<Name> that holds its main), the HTTP Method and the API
// Gateway Path template, the function's Timeout, and the Handler method
// that serves it. Several rows may share one function (the same Name): that
// function serves them all, dispatching on the event's route key
// (Handler.Admin; the lock routes' handlers serve their semaphore rows).
type Route struct {
	Name   string
	Method string
	Path   string
	// Operation is the route's OpenAPI operationId; empty means Name (a
	// function that serves one route). Rows that share a function need
	// their own.
	Operation string
	// Admin marks the operator routes (/admin/...): they run in the admin
	// function, whose role may Scan the table and force-release any lock,
	// and only administrators' IAM policies allow invoking them. Lock users
	// never need them.
	Admin bool
	// Timeout is the function's timeout: the deadline of every invocation
	// (the CDK app sets it; the local runner gives each call that long).
	// It stays below API Gateway's 30 s integration timeout.
	Timeout time.Duration
	// Throttle is the route's API Gateway throttle (steady requests per
	// second and burst), set on the stage by default: see Capacity.
	Throttle Throttle
	// Reserve is the function's reserved concurrency when the stack is
	// deployed with -c reserve=true (0: none): a floor of executions no
	// other function may take, and a cap on the function's own (for wait
	// and watch, the cap on waiters and watchers). Rows of one function
	// must agree.
	Reserve int
	// Waits marks the routes whose requests may hold an execution for a
	// whole waiting round (locklogic.MaxWaitLimit, 20 s): the waiting
	// acquires and the watches. Their throttles bound the waiters (see
	// Capacity) and only their functions get MAX_WAIT_SECONDS; every
	// other lock route is quick: one store call, or a few. Rows of one
	// function must agree.
	Waits bool
	// Set marks the lock set routes (/locksets/...): a request writes
	// each of up to locklogic.MaxSetNames names, and a refused try
	// releases what it took, so they are not quick routes; their budget
	// and timeouts are LockSetBudget's.
	Set bool
	// Handle is the entry point of the row's function, which the rows of
	// one function share: it serves each by the event's route key. A
	// method expression on *Handler, so the table can be read (by the CDK
	// app) without building a Handler.
	Handle func(h *Handler, ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

	// id is the handler's constant for the row (serve's switch): every
	// constant names exactly one row (checked when the package starts).
	id int
	// perCall says the route's handler hands its request's store budget
	// to the service (h.budget), which bounds each store call of a wait;
	// the others (the listings too) run under one StoreBudget from the
	// request's arrival as their context's deadline (serve).
	perCall bool
}

// Key returns the API Gateway route key, e.g. "POST /locks/{resource}".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Function timeouts. One store call needs at most StoreBudget; a waiting
// acquire may also wait up to locklogic.MaxWaitLimit (20 s) for a held lock,
// then write: 20 + 3 s and the deadline reserve, rounded up.
const (
	// RouteTimeout is the timeout of the functions of the quick routes,
	// which make one store call (a semaphore's try-acquire a few), all
	// within one StoreBudget from the request's arrival: that budget, the
	// deadline reserve and a margin.
	RouteTimeout = 5 * time.Second
	// AdminTimeout is the admin function's timeout: a listing may Scan for
	// several pages within one StoreBudget.
	AdminTimeout = 10 * time.Second
	// WaitTimeout is the timeout of the functions that may wait: wait (for
	// a held lock or a full semaphore) and watch (for a change).
	WaitTimeout = 25 * time.Second
	// IntegrationTimeout is API Gateway's limit on one Lambda integration of
	// an HTTP API: it answers 503 after it, whatever the function does.
	IntegrationTimeout = 30 * time.Second
)

// Routes is the one route table. The local runner serves it and the CDK app
// in infra/ creates one function per distinct Name and one API Gateway route
// per row. Try-acquires (POST /locks/{resource}, POST /semaphores/{name})
// answer at once; a waiting acquire has its own route (…/wait) and
// function, so that the throttle that bounds waiters does not bound tries.
var Routes = []Route{
	{Name: "acquire", Method: "POST", Path: "/locks/{resource}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: AcquireReserve, Handle: (*Handler).Acquire, id: routeAcquire},
	{Name: "wait", Operation: "acquireWait", Method: "POST", Path: "/locks/{resource}/wait", Timeout: WaitTimeout, Waits: true,
		Throttle: WaitThrottle, Reserve: WaitReserve, Handle: (*Handler).AcquireWait, id: routeAcquireWait, perCall: true},
	{Name: "status", Method: "GET", Path: "/locks/{resource}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Handle: (*Handler).Status, id: routeStatus},
	{Name: "release", Method: "DELETE", Path: "/locks/{resource}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: ReleaseReserve, Handle: (*Handler).Release, id: routeRelease},
	{Name: "renew", Method: "POST", Path: "/locks/{resource}/renew", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: RenewReserve, Handle: (*Handler).Renew, id: routeRenew},
	{Name: "watch", Method: "GET", Path: "/locks/{resource}/watch", Timeout: WaitTimeout, Waits: true,
		Throttle: WatchThrottle, Reserve: WatchReserve, Handle: (*Handler).Watch, id: routeWatch, perCall: true},
	{Name: "admin", Operation: "listLocks", Admin: true, Method: "GET", Path: "/admin/locks", Timeout: AdminTimeout,
		Throttle: AdminThrottle, Handle: (*Handler).Admin, id: routeList},
	{Name: "admin", Operation: "forceRelease", Admin: true, Method: "DELETE", Path: "/admin/locks/{resource}", Timeout: AdminTimeout,
		Throttle: AdminThrottle, Handle: (*Handler).Admin, id: routeForceRelease},
	// Semaphores: each row on the function of the same job as the lock's,
	// so capacity isolation and IAM carry over (the function tells the
	// rows apart by the event's route key).
	{Name: "acquire", Operation: "acquireSemaphore", Method: "POST", Path: "/semaphores/{name}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: AcquireReserve, Handle: (*Handler).Acquire, id: routeSemAcquire},
	{Name: "wait", Operation: "acquireSemaphoreWait", Method: "POST", Path: "/semaphores/{name}/wait", Timeout: WaitTimeout, Waits: true,
		Throttle: SemaphoreWaitThrottle, Reserve: WaitReserve, Handle: (*Handler).AcquireWait, id: routeSemAcquireWait, perCall: true},
	{Name: "status", Operation: "semaphoreStatus", Method: "GET", Path: "/semaphores/{name}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Handle: (*Handler).Status, id: routeSemStatus},
	{Name: "release", Operation: "releaseSemaphore", Method: "DELETE", Path: "/semaphores/{name}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: ReleaseReserve, Handle: (*Handler).Release, id: routeSemRelease},
	{Name: "renew", Operation: "renewSemaphore", Method: "POST", Path: "/semaphores/{name}/renew", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: RenewReserve, Handle: (*Handler).Renew, id: routeSemRenew},
	{Name: "watch", Operation: "watchSemaphore", Method: "GET", Path: "/semaphores/{name}/watch", Timeout: WaitTimeout, Waits: true,
		Throttle: SemaphoreWatchThrottle, Reserve: WatchReserve, Handle: (*Handler).Watch, id: routeSemWatch, perCall: true},
	{Name: "admin", Operation: "listSemaphores", Admin: true, Method: "GET", Path: "/admin/semaphores", Timeout: AdminTimeout,
		Throttle: AdminThrottle, Handle: (*Handler).Admin, id: routeSemList},
	{Name: "admin", Operation: "forceReleaseSemaphore", Admin: true, Method: "DELETE", Path: "/admin/semaphores/{name}",
		Timeout: AdminTimeout, Throttle: AdminThrottle, Handle: (*Handler).Admin, id: routeSemForceRelease},
	// Read/write locks: as the semaphore rows, on the function of each
	// row's job; the mode is in the path, so an IAM policy can allow
	// reading alone (docs/design.md#read-write-locks).
	{Name: "acquire", Operation: "acquireRead", Method: "POST", Path: "/rwlocks/{name}/read", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: AcquireReserve, Handle: (*Handler).Acquire, id: routeRWRead},
	{Name: "acquire", Operation: "acquireWrite", Method: "POST", Path: "/rwlocks/{name}/write", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: AcquireReserve, Handle: (*Handler).Acquire, id: routeRWWrite},
	{Name: "wait", Operation: "acquireReadWait", Method: "POST", Path: "/rwlocks/{name}/read/wait", Timeout: WaitTimeout, Waits: true,
		Throttle: RWWaitThrottle, Reserve: WaitReserve, Handle: (*Handler).AcquireWait, id: routeRWReadWait, perCall: true},
	{Name: "wait", Operation: "acquireWriteWait", Method: "POST", Path: "/rwlocks/{name}/write/wait", Timeout: WaitTimeout, Waits: true,
		Throttle: RWWaitThrottle, Reserve: WaitReserve, Handle: (*Handler).AcquireWait, id: routeRWWriteWait, perCall: true},
	{Name: "status", Operation: "rwlockStatus", Method: "GET", Path: "/rwlocks/{name}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Handle: (*Handler).Status, id: routeRWStatus},
	{Name: "release", Operation: "releaseRWLock", Method: "DELETE", Path: "/rwlocks/{name}", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: ReleaseReserve, Handle: (*Handler).Release, id: routeRWRelease},
	{Name: "renew", Operation: "renewRWLock", Method: "POST", Path: "/rwlocks/{name}/renew", Timeout: RouteTimeout,
		Throttle: QuickThrottle, Reserve: RenewReserve, Handle: (*Handler).Renew, id: routeRWRenew},
	{Name: "watch", Operation: "watchRWLock", Method: "GET", Path: "/rwlocks/{name}/watch", Timeout: WaitTimeout, Waits: true,
		Throttle: RWWatchThrottle, Reserve: WatchReserve, Handle: (*Handler).Watch, id: routeRWWatch, perCall: true},
	{Name: "admin", Operation: "listRWLocks", Admin: true, Method: "GET", Path: "/admin/rwlocks", Timeout: AdminTimeout,
		Throttle: AdminThrottle, Handle: (*Handler).Admin, id: routeRWList},
	{Name: "admin", Operation: "forceReleaseRWLock", Admin: true, Method: "DELETE", Path: "/admin/rwlocks/{name}",
		Timeout: AdminTimeout, Throttle: AdminThrottle, Handle: (*Handler).Admin, id: routeRWForceRelease},
	// Lock sets: several names per request, up to 2 × MaxSetNames writes,
	// so functions and throttles of their own (docs/design.md#lock-sets).
	{Name: "lockset", Operation: "acquireLockSet", Set: true, Method: "POST", Path: "/locksets/{prefix}", Timeout: LockSetTimeout,
		Throttle: LockSetThrottle, Reserve: LockSetReserve, Handle: (*Handler).LockSet, id: routeSetAcquire, perCall: true},
	{Name: "locksetwait", Operation: "acquireLockSetWait", Set: true, Waits: true, Method: "POST", Path: "/locksets/{prefix}/wait",
		Timeout: LockSetWaitTimeout, Throttle: LockSetWaitThrottle, Reserve: LockSetWaitReserve, Handle: (*Handler).LockSetWait,
		id: routeSetAcquireWait, perCall: true},
	{Name: "lockset", Operation: "renewLockSet", Set: true, Method: "POST", Path: "/locksets/{prefix}/renew", Timeout: LockSetTimeout,
		Throttle: LockSetThrottle, Reserve: LockSetReserve, Handle: (*Handler).LockSet, id: routeSetRenew, perCall: true},
	{Name: "lockset", Operation: "releaseLockSet", Set: true, Method: "DELETE", Path: "/locksets/{prefix}", Timeout: LockSetTimeout,
		Throttle: LockSetThrottle, Reserve: LockSetReserve, Handle: (*Handler).LockSet, id: routeSetRelease, perCall: true},
}

// OperationID returns the route's OpenAPI operationId: Operation, or Name
// when the function serves this route alone.
func (r Route) OperationID() string {
	if r.Operation != "" {
		return r.Operation
	}
	return r.Name
}

// Quick reports whether r is a quick lock route: neither one that waits nor
// an operator's. The stack admits at least 1,000 requests a second on each
// by default.
func (r Route) Quick() bool { return !r.Waits && !r.Admin && !r.Set }

// rowInfo is a row of Routes as serve reads it, by route constant.
type rowInfo struct {
	*Route
	key   string // the route key, built once
	param string // the path parameter: "resource", or "name" for a semaphore's
}

// rows are the rows of Routes by route constant. Every constant names
// exactly one row, or the package panics when it starts (init): a route
// cannot be half registered.
var rows [routeCount]rowInfo

// init fills rows. (A function, not rows' initializer: the handlers that
// Routes names read rows, an initialization cycle.)
func init() { rows = rowsOf(Routes) }

// noun is the kind of lease the row's problems speak of.
func (r *rowInfo) noun() noun {
	// The path's first segment after /admin, if any: "/rwlocks/{name}" and
	// "/admin/rwlocks" both name the read/write locks.
	first, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(r.Path, "/admin"), "/"), "/")
	switch first {
	case "rwlocks":
		return nounRWLock
	case "semaphores":
		return nounSemaphore
	}
	return nounLock
}

// rowsOf indexes routes by route constant, panicking unless every
// constant names exactly one row.
func rowsOf(routes []Route) (out [routeCount]rowInfo) {
	for i := range routes {
		r := &routes[i]
		if r.id < 0 || r.id >= routeCount || out[r.id].Route != nil {
			panic("api: route " + r.Key() + ": its route constant is out of range or another row's")
		}
		param := "resource"
		if strings.Contains(r.Path, "{name}") {
			param = "name"
		}
		if strings.Contains(r.Path, "{prefix}") {
			param = "prefix"
		}
		out[r.id] = rowInfo{Route: r, key: r.Key(), param: param}
	}
	for id, ri := range out {
		if ri.Route == nil {
			panic("api: route constant " + strconv.Itoa(id) + " has no row in Routes")
		}
	}
	return out
}

// pick returns the row of others whose route key is the event's, else
// lock: the route of a function that serves a lock row and its semaphore
// and read/write lock twins.
func pick(req *events.APIGatewayV2HTTPRequest, lock int, others ...int) int {
	for _, r := range others {
		if req.RouteKey == rows[r].key {
			return r
		}
	}
	return lock
}
