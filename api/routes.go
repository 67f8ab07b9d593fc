package api

import (
	"context"
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
	// deployed with -c reserve=true (0: none). For renew and release it is
	// a floor that waiting acquires cannot take; for acquire it is also the
	// cap on simultaneous waiters. Rows of one function must agree.
	Reserve int
	// Handle is a method expression on *Handler, so the table can be read
	// (by the CDK app) without building a Handler.
	Handle func(h *Handler, ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
}

// Key returns the API Gateway route key, e.g. "POST /locks/{resource}".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Function timeouts. One store call needs at most StoreBudget; an acquire
// may also wait up to locklogic.MaxWaitLimit (20 s) for a held lock, then
// write: 20 + 3 s and the deadline reserve, rounded up.
const (
	// RouteTimeout is the timeout of the functions that make one store call.
	RouteTimeout = 5 * time.Second
	// AdminTimeout is the admin function's timeout: a listing may Scan for
	// several pages within one StoreBudget.
	AdminTimeout = 10 * time.Second
	// AcquireTimeout is the timeout of the functions that may wait: acquire
	// (for a held lock) and watch (for a change).
	AcquireTimeout = 25 * time.Second
	// IntegrationTimeout is API Gateway's limit on one Lambda integration of
	// an HTTP API: it answers 503 after it, whatever the function does.
	IntegrationTimeout = 30 * time.Second
)

// Routes is the one route table. The local runner serves it and the CDK app
// in infra/ creates one function and one API Gateway route per row.
var Routes = []Route{
	{Name: "acquire", Method: "POST", Path: "/locks/{resource}", Timeout: AcquireTimeout,
		Throttle: AcquireThrottle, Reserve: AcquireReserve, Handle: (*Handler).Acquire},
	{Name: "status", Method: "GET", Path: "/locks/{resource}", Timeout: RouteTimeout,
		Throttle: StatusThrottle, Handle: (*Handler).Status},
	{Name: "release", Method: "DELETE", Path: "/locks/{resource}", Timeout: RouteTimeout,
		Throttle: HolderThrottle, Reserve: ReleaseReserve, Handle: (*Handler).Release},
	{Name: "renew", Method: "POST", Path: "/locks/{resource}/renew", Timeout: RouteTimeout,
		Throttle: HolderThrottle, Reserve: RenewReserve, Handle: (*Handler).Renew},
	{Name: "watch", Method: "GET", Path: "/locks/{resource}/watch", Timeout: AcquireTimeout,
		Throttle: WatchThrottle, Reserve: WatchReserve, Handle: (*Handler).Watch},
	{Name: "admin", Operation: "listLocks", Admin: true, Method: "GET", Path: "/admin/locks", Timeout: AdminTimeout,
		Throttle: AdminThrottle, Handle: (*Handler).ListLocks},
	{Name: "admin", Operation: "forceRelease", Admin: true, Method: "DELETE", Path: "/admin/locks/{resource}", Timeout: AdminTimeout,
		Throttle: AdminThrottle, Handle: (*Handler).ForceRelease},
	// Semaphores: each row on the function of the same job as the lock's,
	// so capacity isolation and IAM carry over (the function tells the
	// rows apart by the event's route key).
	{Name: "acquire", Operation: "acquireSemaphore", Method: "POST", Path: "/semaphores/{name}", Timeout: AcquireTimeout,
		Throttle: SemaphoreAcquireThrottle, Reserve: AcquireReserve, Handle: (*Handler).AcquireSemaphore},
	{Name: "status", Operation: "semaphoreStatus", Method: "GET", Path: "/semaphores/{name}", Timeout: RouteTimeout,
		Throttle: StatusThrottle, Handle: (*Handler).SemaphoreStatus},
	{Name: "release", Operation: "releaseSemaphore", Method: "DELETE", Path: "/semaphores/{name}", Timeout: RouteTimeout,
		Throttle: HolderThrottle, Reserve: ReleaseReserve, Handle: (*Handler).ReleaseSemaphore},
	{Name: "renew", Operation: "renewSemaphore", Method: "POST", Path: "/semaphores/{name}/renew", Timeout: RouteTimeout,
		Throttle: HolderThrottle, Reserve: RenewReserve, Handle: (*Handler).RenewSemaphore},
	{Name: "watch", Operation: "watchSemaphore", Method: "GET", Path: "/semaphores/{name}/watch", Timeout: AcquireTimeout,
		Throttle: SemaphoreWatchThrottle, Reserve: WatchReserve, Handle: (*Handler).WatchSemaphore},
	{Name: "admin", Operation: "listSemaphores", Admin: true, Method: "GET", Path: "/admin/semaphores", Timeout: AdminTimeout,
		Throttle: AdminThrottle, Handle: (*Handler).ListSemaphores},
	{Name: "admin", Operation: "forceReleaseSemaphore", Admin: true, Method: "DELETE", Path: "/admin/semaphores/{name}",
		Timeout: AdminTimeout, Throttle: AdminThrottle, Handle: (*Handler).ForceReleaseSemaphore},
}

// OperationID returns the route's OpenAPI operationId: Operation, or Name
// when the function serves this route alone.
func (r Route) OperationID() string {
	if r.Operation != "" {
		return r.Operation
	}
	return r.Name
}
