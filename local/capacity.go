package local

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ft288/locks/api"
)

// CapacityMode says which of the stack's capacity bounds (api/capacity.go)
// a Runner models.
type CapacityMode int

const (
	// CapacityOff models no bound: every request reaches its handler at
	// once, however many run. The zero value, for tests and benchmarks.
	CapacityOff CapacityMode = iota
	// CapacityDefault models the default stack: each route's throttle, and
	// one account pool of concurrency that every function shares.
	CapacityDefault
	// CapacityReserve models the stack deployed with -c reserve=true: the
	// route throttles, and each function with a reservation runs at most
	// that many at once while the others share what is left of the pool.
	CapacityReserve
)

// String returns the mode's name: off, default or reserve.
func (m CapacityMode) String() string {
	switch m {
	case CapacityOff:
		return "off"
	case CapacityDefault:
		return "default"
	case CapacityReserve:
		return "reserve"
	}
	return fmt.Sprintf("CapacityMode(%d)", int(m))
}

// Capacity configures the capacity bounds a Runner models, from the numbers
// in api.Routes unless overridden. A request over a route's throttle is
// answered 429 {"message":"Too Many Requests"} and one over its function's
// concurrency 500 {"message":"Internal Server Error"}, as API Gateway
// answers them; either way the handler never runs.
type Capacity struct {
	// Mode is the model; the zero value is CapacityOff.
	Mode CapacityMode
	// Throttles overrides route throttles by operationId
	// (api.Route.OperationID: acquire, acquireWait, status, release,
	// renew, watch, listLocks, …; api.ParseThrottles reads them from
	// OP=RATE:BURST). A zero Throttle leaves the route unthrottled.
	Throttles map[string]api.Throttle
	// Reserves overrides reserved concurrency by function name
	// (api.Route.Name), with CapacityReserve only; 0 takes the function's
	// reservation away (it shares the pool).
	Reserves map[string]int
	// AccountConcurrency is the account's pool of concurrent executions,
	// api.DefaultAccountConcurrency when 0. The reservations are taken out
	// of it; what is left may be 0 (no unreserved function ever runs), not
	// less.
	AccountConcurrency int
}

// StackCapacity returns the capacity model of the default stack: route
// throttles on, no reservations, the default account pool.
func StackCapacity() Capacity { return Capacity{Mode: CapacityDefault} }

// ReserveCapacity returns the capacity model of the stack deployed with
// -c reserve=true, with api.Routes' reservations.
func ReserveCapacity() Capacity { return Capacity{Mode: CapacityReserve} }

// capacityModel is a Capacity resolved against api.Routes.
type capacityModel struct {
	mode CapacityMode
	// throttles by route key; a route without one is not throttled.
	throttles map[string]api.Throttle
	// reserves by function name, only functions with a reservation.
	reserves   map[string]int
	pool       int
	unreserved int
}

// resolve checks c and applies its overrides to api.Routes.
func (c Capacity) resolve() (capacityModel, error) {
	m := capacityModel{mode: c.Mode, throttles: map[string]api.Throttle{}, reserves: map[string]int{}}
	switch c.Mode {
	case CapacityOff:
		return m, nil
	case CapacityDefault:
		if len(c.Reserves) > 0 {
			return m, fmt.Errorf("capacity: Reserves needs mode %s, not %s", CapacityReserve, c.Mode)
		}
	case CapacityReserve:
	default:
		return m, fmt.Errorf("capacity: unknown mode %d", int(c.Mode))
	}
	ops, fns := map[string]bool{}, map[string]bool{}
	for _, rt := range api.Routes {
		ops[rt.OperationID()], fns[rt.Name] = true, true
		if t := rt.ThrottleOf(c.Throttles); t != (api.Throttle{}) {
			m.throttles[rt.Key()] = t
		}
		if c.Mode == CapacityReserve {
			r := rt.Reserve
			if o, ok := c.Reserves[rt.Name]; ok {
				r = o
			}
			if r > 0 {
				m.reserves[rt.Name] = r
			}
		}
	}
	for op, t := range c.Throttles {
		if !ops[op] {
			return m, fmt.Errorf("capacity: throttle for %q, which is no route's operationId", op)
		}
		if t.Rate < 0 || t.Burst < 0 || math.IsNaN(t.Rate) || math.IsInf(t.Rate, 0) {
			return m, fmt.Errorf("capacity: throttle for %q: got rate %v burst %d, want finite and not negative", op, t.Rate, t.Burst)
		}
	}
	for fn, r := range c.Reserves {
		if !fns[fn] {
			return m, fmt.Errorf("capacity: reservation for %q, which is no function", fn)
		}
		if r < 0 {
			return m, fmt.Errorf("capacity: reservation for %q: got %d, want 0 or more", fn, r)
		}
	}
	m.pool = c.AccountConcurrency
	if m.pool == 0 {
		m.pool = api.DefaultAccountConcurrency
	}
	if m.pool < 0 {
		return m, fmt.Errorf("capacity: account concurrency %d, want more than 0", m.pool)
	}
	m.unreserved = m.pool
	for _, r := range m.reserves {
		m.unreserved -= r
	}
	if m.unreserved < 0 {
		return m, fmt.Errorf("capacity: reservations of %d exceed the account concurrency %d", m.pool-m.unreserved, m.pool)
	}
	return m, nil
}

// Unreserved returns the account concurrency the functions without a
// reservation share under c, or an error if c is not valid. Lambda refuses
// reservations that leave less than api.UnreservedMinimum.
func (c Capacity) Unreserved() (int, error) {
	m, err := c.resolve()
	return m.unreserved, err
}

// LogValue describes the resolved model for a log line: the mode, and
// unless off the account pool, what is left unreserved, the reservations
// and the route throttles.
func (c Capacity) LogValue() slog.Value {
	m, err := c.resolve()
	if err != nil {
		return slog.StringValue(err.Error())
	}
	attrs := []slog.Attr{slog.String("mode", m.mode.String())}
	if m.mode == CapacityOff {
		return slog.GroupValue(attrs...)
	}
	var reserves, throttles []string
	for fn, r := range m.reserves {
		reserves = append(reserves, fmt.Sprintf("%s=%d", fn, r))
	}
	for _, rt := range api.Routes {
		if t, ok := m.throttles[rt.Key()]; ok {
			throttles = append(throttles, fmt.Sprintf("%s=%g/s burst %d", rt.OperationID(), t.Rate, t.Burst))
		}
	}
	slices.Sort(reserves)
	attrs = append(attrs,
		slog.Int("account_concurrency", m.pool),
		slog.Int("unreserved", m.unreserved),
		slog.String("reserved", strings.Join(reserves, ", ")),
		slog.String("throttles", strings.Join(throttles, ", ")))
	return slog.GroupValue(attrs...)
}

// limits is a resolved capacity model in force: a token bucket per
// throttled route and a semaphore per function.
type limits struct {
	buckets map[string]*bucket // by route key
	slots   map[string]chan struct{}
}

// newLimits builds the buckets and semaphores of m; nil when m is off.
func newLimits(m capacityModel, now func() time.Time) *limits {
	if m.mode == CapacityOff {
		return nil
	}
	l := &limits{buckets: map[string]*bucket{}, slots: map[string]chan struct{}{}}
	for key, t := range m.throttles {
		l.buckets[key] = newBucket(t, now)
	}
	// Functions without a reservation share one semaphore: the pool.
	pool := make(chan struct{}, m.unreserved)
	for _, rt := range api.Routes {
		if r, ok := m.reserves[rt.Name]; ok {
			if l.slots[rt.Name] == nil {
				l.slots[rt.Name] = make(chan struct{}, r)
			}
			continue
		}
		l.slots[rt.Name] = pool
	}
	return l
}

// admit decides whether a request on rt runs: it takes a token from the
// route's bucket (status 429 when empty), then an execution of the
// function (500 when all are busy), at once, never waiting. When ok, done
// must be called once the handler returns.
func (l *limits) admit(rt api.Route) (done func(), status int, ok bool) {
	if l == nil {
		return func() {}, 0, true
	}
	if b := l.buckets[rt.Key()]; b != nil && !b.take() {
		return nil, http.StatusTooManyRequests, false
	}
	sem := l.slots[rt.Name]
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, 0, true
	default:
		return nil, http.StatusInternalServerError, false
	}
}

// bucket is a token bucket as API Gateway throttles a route: it holds up to
// burst tokens, starts full, gains rate tokens a second, and each request
// takes one.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newBucket(t api.Throttle, now func() time.Time) *bucket {
	return &bucket{rate: t.Rate, burst: float64(t.Burst), tokens: float64(t.Burst), last: now(), now: now}
}

// take takes a token, and reports whether there was one.
func (b *bucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(b.burst, b.tokens+d*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
