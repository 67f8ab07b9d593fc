package api

// Capacity: how the stack keeps waiting acquires from starving the holders.
//
// A waiting acquire holds one Lambda execution for up to its round
// (locklogic.MaxWaitLimit, 20 s); renew, release and status hold one for a
// single store call (~10–50 ms). Lambda's concurrency is one pool per
// account and Region (1,000 by default, as low as 10 on new accounts), so
// without a bound, enough waiters fill it and renewals are throttled: every
// holder then loses its lease. Two bounds, both read from Routes by the CDK
// app (infra/) and by the local runner (local/), which models them:
//
//   - Route throttles (on by default): a route that may wait (acquire,
//     watch), admitting R requests a second with burst B, keeps at most
//     about B + R × 20 s executions at once. The four such routes together
//     (lock acquire 375, lock watch 200, semaphore acquire 100, semaphore
//     watch 100) hold at most 775 of a default account's 1,000, leaving 225
//     for renewals, releases, status and the account's other functions,
//     while renew and release admit enough for HolderThrottle.Rate × ttl/3
//     holders (200 rps: 2,000 holders of 30 s leases renewing every 10 s).
//     API Gateway answers a throttled route 429 {"message":"Too Many
//     Requests"}.
//   - Reserved concurrency (-c reserve=true): renew and release get a floor
//     of executions nobody else may use, and acquire a cap, so waiters can
//     never take the holders' capacity, whatever the account's other
//     functions do. Lambda refuses a reservation that leaves the account
//     less than UnreservedMinimum unreserved, so the default stack reserves
//     nothing (it must deploy on a new account). A request over a
//     function's concurrency is answered 500 {"message":"Internal Server
//     Error"} by API Gateway.
//
// A semaphore row runs on the function of its lock row's job, in a
// throttle bucket of its own (API Gateway throttles by route key): its own,
// lower rate for the rows that wait; the function's reserved concurrency
// bounds both rows together.
//
// Both answers are retryable: the clients back off and retry them.

// Throttle is one API Gateway route throttle: Rate requests per second on
// average, Burst at once.
type Throttle struct {
	Rate  float64
	Burst int
}

// Route throttles, by the work one request of each route does.
var (
	// AcquireThrottle bounds lock acquires: each may hold an execution for
	// a whole waiting round (20 s), so its rate sets the number of
	// waiters: at most 75 + 15 × 20 = 375 at once.
	AcquireThrottle = Throttle{Rate: 15, Burst: 75}
	// SemaphoreAcquireThrottle bounds semaphore acquires likewise: at most
	// 20 + 4 × 20 = 100 waiters at once.
	SemaphoreAcquireThrottle = Throttle{Rate: 4, Burst: 20}
	// HolderThrottle bounds renewals and releases, one store call each.
	HolderThrottle = Throttle{Rate: 200, Burst: 400}
	// StatusThrottle bounds status reads, one store call each.
	StatusThrottle = Throttle{Rate: 100, Burst: 200}
	// WatchThrottle bounds lock watches: each may hold an execution for a
	// whole round (20 s), as a waiting acquire does, so its rate sets the
	// number of watchers: at most 40 + 8 × 20 = 200 at once.
	WatchThrottle = Throttle{Rate: 8, Burst: 40}
	// SemaphoreWatchThrottle bounds semaphore watches: at most 100.
	SemaphoreWatchThrottle = Throttle{Rate: 4, Burst: 20}
	// AdminThrottle bounds the operator routes (a listing scans).
	AdminThrottle = Throttle{Rate: 5, Burst: 10}
)

// Reserved concurrency of -c reserve=true, by function; each can be
// overridden by a context flag (infra/). Together they need an account
// concurrency limit of at least their sum plus UnreservedMinimum (280).
const (
	// AcquireReserve caps simultaneous acquires (waiters) and reserves them.
	AcquireReserve = 100
	// RenewReserve is the renewals' floor: 20 executions of ~20 ms serve
	// about 1,000 renewals a second.
	RenewReserve = 20
	// ReleaseReserve is the releases' floor.
	ReleaseReserve = 10
	// WatchReserve caps simultaneous watches and reserves them.
	WatchReserve = 50
	// UnreservedMinimum is the concurrency Lambda keeps unreserved in every
	// account: a reservation that would leave less is refused.
	UnreservedMinimum = 100
	// DefaultAccountConcurrency is Lambda's default concurrency limit per
	// account and Region.
	DefaultAccountConcurrency = 1000
)
