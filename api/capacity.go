package api

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ft288/locks/locklogic"
)

// Capacity: how the stack carries load and keeps waiters from starving the
// holders. docs/operations.md (Capacity) has the arithmetic in full.
//
// A request on a quick route (try-acquire, renew, release, status, of locks
// and semaphores) holds one Lambda execution for one store call: ~15 ms,
// up to StoreBudget (3 s) when DynamoDB is slow. A request on a waiting
// route (wait, watch) may hold one for a whole round and its last store
// call (WaitHold: locklogic.MaxWaitLimit, 20 s, plus StoreBudget, 3 s). Lambda's concurrency is one pool per
// account and Region (1,000 by default, as few as 10 on new accounts), so
// without a bound enough waiters fill it and renewals are throttled: every
// holder then loses its lease. Two bounds, both read from Routes by the CDK
// app (infra/) and by the local runner (local/), which models them:
//
//   - Route throttles (on by default; best-effort targets, as API Gateway
//     applies them): each quick route admits QuickThrottle (1,000
//     requests/s); a waiting route admitting R requests a second with burst
//     B keeps at most about B + R × 23 s executions at once (Holds), and
//     all of them together (the lock sets' wait holds for LockSetWaitHold,
//     28 s) at most WaitingBound (788) of a default account's 1,000. The
//     212 left serve the quick routes while their mean duration is under
//     212 / 10,000 s = 21 ms at the account's full rate (all thirteen at
//     theirs would be 13,000 requests/s: the account's bucket caps them
//     together), and the account's other functions. API Gateway answers a throttled route 429
//     {"message":"Too Many Requests"}.
//   - Reserved concurrency (-c reserve=true): the one hard cap. Each
//     function with a Reserve gets that many executions nobody else may
//     use, and no more: a floor for acquire, renew and release, the cap on
//     waiters (wait) and watchers (watch). Lambda refuses a reservation
//     that leaves the account less than UnreservedMinimum unreserved, so
//     the default stack reserves nothing (it must deploy on a new account).
//     A request over a function's concurrency is answered 500
//     {"message":"Internal Server Error"} by API Gateway.
//
// A semaphore row runs on the function of its lock row's job, in a throttle
// bucket of its own (API Gateway throttles by route key); the function's
// reserved concurrency bounds both rows together. Every route's throttle
// can be set at deploy time (ParseThrottles: -c throttle=OP=RATE:BURST, as
// locald's -throttle), each within the account's bucket (CheckAccountBucket).
//
// Both refusals are retryable: the clients back off and retry them.

// Throttle is one API Gateway route throttle: Rate requests per second on
// average, Burst at once.
type Throttle struct {
	Rate  float64
	Burst int
}

// WaitHold is the longest a waiting request holds its execution: a whole
// round (locklogic.MaxWaitLimit), whose last write may start just before
// the round's end, and that write's StoreBudget.
const WaitHold = locklogic.MaxWaitLimit*time.Second + StoreBudget

// Holds returns how many executions a waiting route throttled by t may hold
// at once at most: its burst, and its rate for WaitHold.
func (t Throttle) Holds() int { return t.holds(WaitHold) }

func (t Throttle) holds(hold time.Duration) int {
	return t.Burst + int(math.Ceil(t.Rate*hold.Seconds()))
}

// Holds returns how many executions r, a waiting route, may hold at once
// at most: its throttle's Holds, for LockSetWaitHold on a lock set's.
func (r Route) Holds() int {
	if r.Set {
		return r.Throttle.holds(LockSetWaitHold)
	}
	return r.Throttle.Holds()
}

// Route throttles, by the work one request of each route does.
var (
	// QuickThrottle is each quick route's: try-acquire, renew, release and
	// status, of locks, semaphores and read/write locks. One execution per
	// store call.
	QuickThrottle = Throttle{Rate: 1000, Burst: 1000}
	// WaitThrottle bounds waiting lock acquires (POST
	// /locks/{resource}/wait): at most 75 + 15 × 23 = 420 at once.
	WaitThrottle = Throttle{Rate: 15, Burst: 75}
	// SemaphoreWaitThrottle bounds waiting semaphore acquires: at most
	// 20 + 4 × 23 = 112 at once.
	SemaphoreWaitThrottle = Throttle{Rate: 4, Burst: 20}
	// RWWaitThrottle bounds each of a read/write lock's waiting acquires
	// (read and write): at most 5 + 1 × 23 = 28 at once.
	RWWaitThrottle = Throttle{Rate: 1, Burst: 5}
	// RWWatchThrottle bounds read/write lock watches: at most 5 + 1 × 23
	// = 28 at once.
	RWWatchThrottle = Throttle{Rate: 1, Burst: 5}
	// WatchThrottle bounds lock watches: at most 20 + 4 × 23 = 112 at once.
	WatchThrottle = Throttle{Rate: 4, Burst: 20}
	// SemaphoreWatchThrottle bounds semaphore watches: at most 5 + 1 × 23
	// = 28 at once.
	SemaphoreWatchThrottle = Throttle{Rate: 1, Burst: 5}
	// LockSetThrottle is each lock set route's but the wait's: try,
	// renew, release. A request holds one execution for up to 2 ×
	// locklogic.MaxSetNames writes (~0.5 s for 25 names): 3 × 20/s keep
	// about 30 executions busy.
	LockSetThrottle = Throttle{Rate: 20, Burst: 40}
	// LockSetWaitThrottle bounds waiting lock sets: at most 4 + 1 × 28
	// = 32 at once (a round, a try and its rollback: LockSetWaitHold).
	LockSetWaitThrottle = Throttle{Rate: 1, Burst: 4}
	// AdminThrottle bounds the operator routes (a listing scans).
	AdminThrottle = Throttle{Rate: 5, Burst: 10}
	// AccountThrottle is API Gateway's default bucket for all APIs of an
	// account in a Region (10,000 requests/s, burst 5,000; 2,500 and
	// 1,250 in some Regions): the route throttles must fit in it.
	AccountThrottle = Throttle{Rate: 10000, Burst: 5000}
)

// WaitingBound is how many executions the waiting routes' default
// throttles let waiters and watchers hold at once: the sum of their Holds.
const WaitingBound = 788

// MinQuickRate is the least a quick route admits by default, requests/s.
const MinQuickRate = 1000

// Reserved concurrency of -c reserve=true, by function; each can be
// overridden by a context flag (infra/). Together they need an account
// concurrency limit of at least their sum plus UnreservedMinimum (430).
// Each is a floor and a cap: by Little's law a function serving R requests
// a second that take D seconds each needs R × D executions.
const (
	// AcquireReserve is the try-acquires' floor (and cap): 50 executions
	// of ~25 ms serve the two try routes' 2,000 requests a second.
	AcquireReserve = 50
	// WaitReserve caps waiting acquires (locks and semaphores) at once.
	WaitReserve = 100
	// RenewReserve is the renewals' floor: 50 executions of ~25 ms serve
	// the two renew routes' 2,000 requests a second.
	RenewReserve = 50
	// ReleaseReserve is the releases' floor: 20 executions of ~20 ms serve
	// 1,000 a second (a refused release is retried, or its lease expires).
	ReleaseReserve = 20
	// WatchReserve caps watches (locks and semaphores) at once.
	WatchReserve = 50
	// LockSetReserve is the lock set tries', renewals' and releases'
	// floor (and cap): 30 executions of ~0.5 s serve 60 requests a second.
	LockSetReserve = 30
	// LockSetWaitReserve caps waiting lock sets at once (their throttle
	// lets up to 32 in).
	LockSetWaitReserve = 30
	// UnreservedMinimum is the concurrency Lambda keeps unreserved in every
	// account: a reservation that would leave less is refused.
	UnreservedMinimum = 100
	// DefaultAccountConcurrency is Lambda's default concurrency limit per
	// account and Region.
	DefaultAccountConcurrency = 1000
)

// ThrottleOf returns r's throttle: the override of overrides for r's
// operationId, or r.Throttle.
func (r Route) ThrottleOf(overrides map[string]Throttle) Throttle {
	if t, ok := overrides[r.OperationID()]; ok {
		return t
	}
	return r.Throttle
}

// ParseThrottles reads route throttles written OP=RATE:BURST, several
// separated by commas (e.g. "acquire=2000:2000,acquireWait=30:150"): OP is
// a route's operationId (Route.OperationID), RATE:BURST as ParseThrottle
// reads it. It is the syntax of locald's -throttle and of the CDK app's
// throttle context flag; an operation named twice takes its last value.
// Every bad item is reported, each naming what it wants.
func ParseThrottles(s string) (map[string]Throttle, error) {
	out := map[string]Throttle{}
	var errs []error
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		op, limits, ok := strings.Cut(item, "=")
		op = strings.TrimSpace(op)
		if !ok || op == "" {
			errs = append(errs, fmt.Errorf("%q: want OPERATION=RATE:BURST, e.g. acquire=2000:2000", item))
			continue
		}
		if !slices.ContainsFunc(Routes, func(r Route) bool { return r.OperationID() == op }) {
			errs = append(errs, fmt.Errorf("%q: %q is no route's operation; want one of %s", item, op, strings.Join(operations(), ", ")))
			continue
		}
		t, err := ParseThrottle(limits)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", item, err))
			continue
		}
		out[op] = t
	}
	return out, errors.Join(errs...)
}

// ParseThrottle reads one throttle written RATE:BURST: RATE requests a
// second (a number, 0 or more), BURST requests at once (an integer, 1 or
// more).
func ParseThrottle(s string) (Throttle, error) {
	rate, burst, ok := strings.Cut(s, ":")
	rate, burst = strings.TrimSpace(rate), strings.TrimSpace(burst)
	if !ok {
		return Throttle{}, fmt.Errorf("%q: want RATE:BURST, e.g. 2000:2000", s)
	}
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return Throttle{}, fmt.Errorf("rate %q: want a number of requests per second, 0 or more", rate)
	}
	b, err := strconv.Atoi(burst)
	if err != nil || b < 1 {
		return Throttle{}, fmt.Errorf("burst %q: want a whole number of requests, 1 or more", burst)
	}
	return Throttle{Rate: r, Burst: b}, nil
}

// operations returns the operationIds of Routes, in the table's order.
func operations() []string {
	ops := make([]string, len(Routes))
	for i, r := range Routes {
		ops[i] = r.OperationID()
	}
	return ops
}

// CheckAccountBucket reports route throttles that no request could ever
// have in an account whose API Gateway bucket is account: a route's rate
// (with overrides) above account.Rate, or its burst above account.Burst.
//
// The route rates may add up to more than account.Rate (the defaults do:
// RateSum): a route's throttle is its ceiling, not a reservation. API
// Gateway applies the account's bucket first, to every API of the account
// and Region together, so the routes busy at one moment share it, and a
// table's write capacity bounds the writing routes together long before
// (docs/operations.md, Capacity).
func CheckAccountBucket(routes []Route, overrides map[string]Throttle, account Throttle) error {
	var errs []error
	for _, r := range routes {
		t := r.ThrottleOf(overrides)
		if t.Rate > account.Rate {
			errs = append(errs, fmt.Errorf("route %s (%s): rate %g requests/s is above the account's API Gateway limit of %g "+
				"requests/s (shared by every API of the account in the Region)", r.Key(), r.OperationID(), t.Rate, account.Rate))
		}
		if t.Burst > account.Burst {
			errs = append(errs, fmt.Errorf("route %s (%s): burst %d is above the account's API Gateway burst of %d",
				r.Key(), r.OperationID(), t.Burst, account.Burst))
		}
	}
	return errors.Join(errs...)
}

// RateSum returns the sum of the rates of routes (with overrides): what
// they would admit together if the account's bucket did not cap them.
func RateSum(routes []Route, overrides map[string]Throttle) float64 {
	var sum float64
	for _, r := range routes {
		sum += r.ThrottleOf(overrides).Rate
	}
	return sum
}
