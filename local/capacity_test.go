package local

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/api"
)

// route returns the api.Routes row of operationId op.
func route(tb testing.TB, op string) api.Route {
	tb.Helper()
	for _, rt := range api.Routes {
		if rt.OperationID() == op {
			return rt
		}
	}
	tb.Fatalf("no route %q", op)
	return api.Route{}
}

// TestBucket: a route throttle starts with Burst tokens, refills at Rate a
// second up to Burst, and each request takes one.
func TestBucket(t *testing.T) {
	type step struct {
		advance time.Duration
		want    bool
	}
	cases := []struct {
		name     string
		throttle api.Throttle
		steps    []step
	}{
		{"BurstThenRefused", api.Throttle{Rate: 1, Burst: 2}, []step{{0, true}, {0, true}, {0, false}}},
		{"RefillsAtRate", api.Throttle{Rate: 2, Burst: 1}, []step{{0, true}, {0, false}, {250 * time.Millisecond, false}, {250 * time.Millisecond, true}, {0, false}}},
		{"RefillCappedAtBurst", api.Throttle{Rate: 10, Burst: 2}, []step{{0, true}, {0, true}, {time.Hour, true}, {0, true}, {0, false}}},
		{"NoRateBurstOnly", api.Throttle{Rate: 0, Burst: 1}, []step{{0, true}, {time.Hour, false}}},
		{"NoBurstRefusesAll", api.Throttle{Rate: 100, Burst: 0}, []step{{0, false}, {time.Second, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			b := newBucket(tc.throttle, func() time.Time { return now })
			for i, s := range tc.steps {
				now = now.Add(s.advance)
				if got := b.take(); got != s.want {
					t.Fatalf("step %d (+%s): got take %v, want %v", i, s.advance, got, s.want)
				}
			}
		})
	}
}

// TestCapacityResolve: the model's numbers come from api.Routes, with the
// overrides applied, and nonsense is refused.
func TestCapacityResolve(t *testing.T) {
	var reserved int
	for _, r := range []int{api.AcquireReserve, api.WaitReserve, api.RenewReserve, api.ReleaseReserve, api.WatchReserve,
		api.LockSetReserve, api.LockSetWaitReserve} {
		reserved += r
	}
	cases := []struct {
		name           string
		c              Capacity
		wantErr        bool
		wantUnreserved int
		wantReserves   map[string]int
		wantAcquire    api.Throttle // the acquire route's throttle
	}{
		{name: "Off", c: Capacity{}, wantReserves: map[string]int{}},
		{name: "Stack", c: StackCapacity(), wantUnreserved: api.DefaultAccountConcurrency,
			wantReserves: map[string]int{}, wantAcquire: api.QuickThrottle},
		{name: "Reserve", c: ReserveCapacity(), wantUnreserved: api.DefaultAccountConcurrency - reserved,
			wantReserves: map[string]int{"acquire": api.AcquireReserve, "wait": api.WaitReserve, "renew": api.RenewReserve, "release": api.ReleaseReserve,
				"watch": api.WatchReserve, "lockset": api.LockSetReserve, "locksetwait": api.LockSetWaitReserve},
			wantAcquire: api.QuickThrottle},
		{name: "Overrides", c: Capacity{Mode: CapacityReserve, AccountConcurrency: 20,
			Reserves: map[string]int{"acquire": 4, "renew": 3, "release": 0, "status": 2, "watch": 0, "wait": 0,
				"lockset": 0, "locksetwait": 0},
			Throttles: map[string]api.Throttle{"acquire": {Rate: 1, Burst: 2}}},
			wantUnreserved: 20 - 4 - 3 - 2,
			wantReserves:   map[string]int{"acquire": 4, "renew": 3, "status": 2},
			wantAcquire:    api.Throttle{Rate: 1, Burst: 2}},
		{name: "ThrottleOff", c: Capacity{Mode: CapacityDefault, Throttles: map[string]api.Throttle{"acquire": {}}},
			wantUnreserved: api.DefaultAccountConcurrency, wantReserves: map[string]int{}},
		{name: "ErrUnknownOperation", c: Capacity{Mode: CapacityDefault, Throttles: map[string]api.Throttle{"take": {Rate: 1}}}, wantErr: true},
		{name: "ErrNegativeRate", c: Capacity{Mode: CapacityDefault, Throttles: map[string]api.Throttle{"acquire": {Rate: -1}}}, wantErr: true},
		{name: "ErrUnknownFunction", c: Capacity{Mode: CapacityReserve, Reserves: map[string]int{"listLocks": 1}}, wantErr: true},
		{name: "ErrNegativeReserve", c: Capacity{Mode: CapacityReserve, Reserves: map[string]int{"renew": -1}}, wantErr: true},
		{name: "ErrReservesWithoutReserve", c: Capacity{Mode: CapacityDefault, Reserves: map[string]int{"renew": 1}}, wantErr: true},
		{name: "ErrOverbooked", c: Capacity{Mode: CapacityReserve, AccountConcurrency: reserved - 1}, wantErr: true},
		{name: "ErrNegativePool", c: Capacity{Mode: CapacityDefault, AccountConcurrency: -1}, wantErr: true},
		{name: "ErrUnknownMode", c: Capacity{Mode: 7}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.c.resolve()
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if err := (&Runner{}).SetCapacity(tc.c); err == nil {
					t.Errorf("SetCapacity: got no error, want the same refusal")
				}
				return
			}
			if m.unreserved != tc.wantUnreserved {
				t.Errorf("got unreserved %d, want %d", m.unreserved, tc.wantUnreserved)
			}
			if len(m.reserves) != len(tc.wantReserves) {
				t.Errorf("got reserves %v, want %v", m.reserves, tc.wantReserves)
			}
			for fn, r := range tc.wantReserves {
				if m.reserves[fn] != r {
					t.Errorf("got reserves %v, want %v", m.reserves, tc.wantReserves)
				}
			}
			if got := m.throttles[route(t, "acquire").Key()]; got != tc.wantAcquire {
				t.Errorf("got acquire throttle %+v, want %+v", got, tc.wantAcquire)
			}
		})
	}
}

// TestAdmit: a route's bucket is asked first (429), then its function's
// executions (500); a function with a reservation has its own, the others
// share the rest of the pool, and an execution comes back when done.
func TestAdmit(t *testing.T) {
	c := Capacity{Mode: CapacityReserve, AccountConcurrency: 4,
		Reserves: map[string]int{"acquire": 2, "renew": 1, "release": 0, "watch": 0, "wait": 0,
			"lockset": 0, "locksetwait": 0},
		Throttles: map[string]api.Throttle{"status": {Rate: 0, Burst: 2}}}
	m, err := c.resolve()
	if err != nil {
		t.Fatal(err)
	}
	l := newLimits(m, time.Now)
	// admit asks for op and returns its done (nil when refused).
	admit := func(op string, want int) func() {
		t.Helper()
		done, status, ok := l.admit(route(t, op))
		if ok {
			status = http.StatusOK
		}
		if status != want {
			t.Fatalf("%s: got %d, want %d", op, status, want)
		}
		return done
	}
	acquire1 := admit("acquire", 200)
	admit("acquire", 200)
	admit("acquire", 500) // its reservation is its cap
	admit("renew", 200)
	admit("renew", 500) // its floor is all it has
	release := admit("release", 200)
	admit("status", 500) // the pool (4 - 2 - 1 = 1 unreserved) is release's
	admit("listLocks", 500)
	acquire1()
	admit("acquire", 200)
	release()
	status := admit("status", 200)
	admit("status", 429) // its bucket (burst 2) is empty: the refused 500 took a token too
	status()
	admit("status", 429)
	admit("forceRelease", 200)

	if _, _, ok := (*limits)(nil).admit(route(t, "acquire")); !ok {
		t.Error("CapacityOff refused a request")
	}
}

// TestAdmitExact: however many requests race for a function's executions,
// exactly its limit run at once and the rest are refused at once.
func TestAdmitExact(t *testing.T) {
	const limit, racers = 3, 64
	m, err := Capacity{Mode: CapacityReserve, Reserves: map[string]int{"acquire": limit}}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	l := newLimits(m, time.Now)
	var (
		admitted, refused atomic.Int32
		start             = make(chan struct{})
		release           = make(chan struct{})
		asked, wg         sync.WaitGroup
	)
	acquire := route(t, "acquire")
	for range racers {
		asked.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			done, status, ok := l.admit(acquire)
			if !ok {
				if status != http.StatusInternalServerError {
					t.Errorf("got %d, want 500", status)
				}
				refused.Add(1)
				asked.Done()
				return
			}
			admitted.Add(1)
			asked.Done()
			<-release // held until every racer has been answered
			done()
		}()
	}
	close(start)
	asked.Wait()
	close(release)
	wg.Wait()
	if admitted.Load() != limit || refused.Load() != racers-limit {
		t.Fatalf("got %d admitted and %d refused, want %d and %d", admitted.Load(), refused.Load(), limit, racers-limit)
	}
	// Every execution came back.
	for range limit {
		done, _, ok := l.admit(acquire)
		if !ok {
			t.Fatal("an execution was not given back")
		}
		defer done()
	}
	if _, _, ok := l.admit(acquire); ok {
		t.Fatalf("admitted %d at once, want %d", limit+1, limit)
	}
}

// TestStackAdmitsQuickLoad: the default stack's capacity model, on a fake
// clock, admits 1,000 requests a second for 10 s on every quick route at
// once (each request holding an execution for 20 ms, as a store call
// does), without a 429 or a 500; 1,200 a second on one route is more than
// its throttle and is refused in part, so the model is not unbounded.
func TestStackAdmitsQuickLoad(t *testing.T) {
	m, err := StackCapacity().resolve()
	if err != nil {
		t.Fatal(err)
	}
	var quick []api.Route
	for _, rt := range api.Routes {
		if rt.Quick() {
			quick = append(quick, rt)
		}
	}
	if len(quick) != 13 {
		t.Fatalf("got %d quick routes, want 13", len(quick))
	}
	// run sends perSecond requests a second, evenly, on each of routes for
	// d of fake time, and returns the requests refused by status.
	run := func(routes []api.Route, perSecond int, d time.Duration) map[int]int {
		now := time.Unix(1_800_000_000, 0)
		l := newLimits(m, func() time.Time { return now })
		const hold = 20 * time.Millisecond
		type running struct {
			until time.Time
			done  func()
		}
		var busy []running
		refused := map[int]int{}
		step := time.Second / time.Duration(perSecond)
		for end := now.Add(d); now.Before(end); now = now.Add(step) {
			kept := busy[:0]
			for _, r := range busy {
				if now.Before(r.until) {
					kept = append(kept, r)
				} else {
					r.done()
				}
			}
			busy = kept
			for _, rt := range routes {
				done, status, ok := l.admit(rt)
				if !ok {
					refused[status]++
					continue
				}
				busy = append(busy, running{now.Add(hold), done})
			}
		}
		return refused
	}
	if refused := run(quick, 1000, 10*time.Second); len(refused) != 0 {
		t.Errorf("1,000 requests/s for 10 s on each quick route: refused %v, want none", refused)
	}
	if refused := run(quick[:1], 1200, 10*time.Second); refused[http.StatusTooManyRequests] == 0 {
		t.Errorf("1,200 requests/s for 10 s on %s: refused %v, want some 429s (its throttle is %+v)", quick[0].Key(), refused, quick[0].Throttle)
	}
}
