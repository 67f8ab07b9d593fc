package integration_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/local"
)

// The gateway's own refusals, as API Gateway sends them.
const (
	throttledRoute    = `{"message":"Too Many Requests"}`     // 429: a route throttle
	throttledFunction = `{"message":"Internal Server Error"}` // 500: the function at its concurrency
)

// floodAnswer is one answer of the flood test, decoded enough to count it.
type floodAnswer struct {
	status int
	body   []byte
	doc    struct {
		Acquired bool `json:"acquired"`
		Renewed  bool `json:"renewed"`
		Lock     struct {
			Owner        string `json:"owner"`
			FencingToken int64  `json:"fencing_token"`
		} `json:"lock"`
		Owner        string `json:"owner"`
		FencingToken int64  `json:"fencing_token"`
	}
	// refused is the gateway's status (429 or 500) when it refused the
	// request before any handler ran; 0 otherwise.
	refused int
}

// floodCounts counts the flood test's requests and answers, safe for
// concurrent use.
type floodCounts struct {
	requests, handled, refused500, refused429, waits, renewals, refusedRenewals atomic.Int64
}

// send sends one request, and fails the test (without stopping the
// goroutine's caller) on a transport error or an answer that is neither a
// JSON body of the service nor one of the gateway's refusals.
func (c *floodCounts) send(t *testing.T, srv *testenv.Server, method, path, body string) (floodAnswer, bool) {
	var a floodAnswer
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return a, false
	}
	req.Header.Set("Content-Type", "application/json")
	c.requests.Add(1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return a, false
	}
	a.status = resp.StatusCode
	a.body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return a, false
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case a.status == http.StatusTooManyRequests && string(a.body) == throttledRoute && ct == "application/json":
		a.refused = a.status
		c.refused429.Add(1)
	case a.status == http.StatusInternalServerError && string(a.body) == throttledFunction && ct == "application/json":
		a.refused = a.status
		c.refused500.Add(1)
	default:
		c.handled.Add(1)
		if err := json.Unmarshal(a.body, &a.doc); err != nil && len(a.body) > 0 {
			t.Errorf("%s %s: got %d %q, not JSON: %v", method, path, a.status, a.body, err)
			return a, false
		}
	}
	return a, true
}

// requestLines counts the handlers' request log lines: one per request a
// handler served.
type requestLines struct {
	mu    sync.Mutex
	lines int
}

func (l *requestLines) Write(b []byte) (int, error) {
	var line struct{ Msg string }
	if json.Unmarshal(b, &line) == nil && line.Msg == "request" {
		l.mu.Lock()
		l.lines++
		l.mu.Unlock()
	}
	return len(b), nil
}

func (l *requestLines) count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(l.lines)
}

// TestFloodKeepsLeases floods one held lock with waiting acquires on their
// route (POST …/wait), far more than the wait function's cap, while holders
// renew their own locks every ttl/3 over plain HTTP, on a runner that
// models the stack's capacity. With the stack's bounds no holder loses its
// lease — every renewal is 200 with the holder's fencing token and the
// final status shows it — and the flood gets the gateway's documented
// refusals: 500 {"message":"Internal Server Error"} from wait's
// reservation (a cap), or 429 {"message":"Too Many Requests"} from the
// waiting route's throttle, which the tries (the holders' acquires) do not
// share. A refused request never reaches
// a handler (the handlers log one line per request they serve). The last
// case shows the test sees the failure it guards against: without
// reservations, waiters that fill a small shared pool get the holders'
// renewals refused.
func TestFloodKeepsLeases(t *testing.T) {
	t.Parallel()
	const (
		holders  = 4
		waiters  = 16 // 4× wait's cap
		ttl      = 6  // seconds: the holders' leases, taken before the flood saturates (seconds on a loaded machine)
		renewals = 3  // per holder, one every ttl/3
		wait     = 2  // the waiters' wait_seconds
		backoff  = 100 * time.Millisecond
	)
	cases := []struct {
		name     string
		capacity local.Capacity
		// want429 and want500: the flood must get these refusals.
		want429, want500 bool
		// starved: the holders' renewals must get refused (the failure
		// mode); otherwise every renewal must succeed.
		starved bool
	}{
		{name: "Reserve", want500: true, capacity: local.Capacity{Mode: local.CapacityReserve, AccountConcurrency: 16,
			Reserves: map[string]int{"acquire": 2, "wait": 4, "renew": holders, "release": 1, "watch": 1,
				// The lock sets' functions: not in this flood (0: no reservation).
				"lockset": 0, "locksetwait": 0}}},
		// Burst: 3 waiters; the holders' and the blocker's tries are on
		// the try route, whose throttle is its own (1,000/s).
		{name: "WaitThrottle", want429: true, capacity: local.Capacity{Mode: local.CapacityDefault,
			Throttles: map[string]api.Throttle{"acquireWait": {Rate: 2, Burst: 3}}}},
		{name: "SharedPoolStarvesHolders", want500: true, starved: true,
			capacity: local.Capacity{Mode: local.CapacityDefault, AccountConcurrency: 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lines := &requestLines{}
			srv := testenv.Start(t, testenv.Options{Capacity: tc.capacity, LogTo: lines})
			var c floodCounts
			r0 := res(t)

			// The holders' locks, and the lock the waiters wait for.
			tokens := make([]int64, holders)
			for i := range tokens {
				a, ok := c.send(t, srv, "POST", lockPath(fmt.Sprintf("%s-holder-%d", r0, i)), acquireBody(fmt.Sprintf("holder-%d", i), ttl))
				if !ok || a.status != 200 || !a.doc.Acquired {
					t.Fatalf("holder %d: got %d %s, want the lock", i, a.status, a.body)
				}
				tokens[i] = a.doc.Lock.FencingToken
			}
			contended := lockPath(r0 + "-contended")
			if a, ok := c.send(t, srv, "POST", contended, acquireBody("blocker", 60)); !ok || !a.doc.Acquired {
				t.Fatalf("blocker: got %d %s, want the lock", a.status, a.body)
			}

			// The flood: each waiter asks again as soon as it is answered,
			// after a short pause when refused.
			stop, saturated := make(chan struct{}), make(chan struct{})
			var once sync.Once
			var flood sync.WaitGroup
			for i := range waiters {
				flood.Add(1)
				go func() {
					defer flood.Done()
					body := waitBody(fmt.Sprintf("waiter-%d", i), ttl, wait)
					for {
						select {
						case <-stop:
							return
						default:
						}
						a, ok := c.send(t, srv, "POST", contended+"/wait", body)
						switch {
						case !ok:
							return
						case a.refused != 0:
							once.Do(func() { close(saturated) })
							select {
							case <-stop:
								return
							case <-time.After(backoff):
							}
						case a.status == 200 && !a.doc.Acquired:
							c.waits.Add(1)
						default:
							t.Errorf("waiter %d: got %d %s, want acquired:false or a gateway refusal", i, a.status, a.body)
							return
						}
					}
				}()
			}
			select {
			case <-saturated:
			case <-time.After(20 * time.Second):
				t.Fatal("no waiter was refused within 20 s: the flood never reached wait's bound")
			}

			// The holders renew every ttl/3 while the flood goes on, then
			// read their lock.
			var lost atomic.Int64
			var hold sync.WaitGroup
			for i := range holders {
				hold.Add(1)
				go func() {
					defer hold.Done()
					owner, path := fmt.Sprintf("holder-%d", i), lockPath(fmt.Sprintf("%s-holder-%d", r0, i))
					tick := time.NewTicker(ttl * time.Second / 3)
					defer tick.Stop()
					for range renewals {
						<-tick.C
						a, ok := c.send(t, srv, "POST", path+"/renew", renewBody(owner, ttl, tokens[i]))
						switch {
						case !ok:
							return
						case a.refused != 0 && tc.starved:
							c.refusedRenewals.Add(1)
						case a.status == 404 && tc.starved:
							// Starved: earlier renewals were refused and the
							// lease expired; the one that got through finds
							// it gone. That is the failure this case shows.
						case a.status == 200 && a.doc.Renewed && a.doc.Lock.FencingToken == tokens[i]:
							c.renewals.Add(1)
						default:
							t.Errorf("%s's renewal: got %d %s, want 200 renewed with fencing token %d", owner, a.status, a.body, tokens[i])
						}
					}
					a, ok := c.send(t, srv, "GET", path, "")
					if ok && a.status == 200 && a.doc.Owner == owner && a.doc.FencingToken == tokens[i] {
						return
					}
					lost.Add(1)
					if !tc.starved {
						t.Errorf("%s's lock after the flood: got %d %s, want its lease (token %d)", owner, a.status, a.body, tokens[i])
					}
				}()
			}
			hold.Wait()
			close(stop)
			flood.Wait() // every wait in flight ends within its wait_seconds

			t.Logf("%d requests: %d handled, %d refused 500, %d refused 429; %d waits answered held; %d renewals, %d refused; %d final statuses without the lease",
				c.requests.Load(), c.handled.Load(), c.refused500.Load(), c.refused429.Load(), c.waits.Load(),
				c.renewals.Load(), c.refusedRenewals.Load(), lost.Load())
			if tc.want500 && c.refused500.Load() == 0 {
				t.Errorf("got no 500 %s, want the flood refused by wait's concurrency", throttledFunction)
			}
			if tc.want429 && c.refused429.Load() == 0 {
				t.Errorf("got no 429 %s, want the flood refused by the waiting route's throttle", throttledRoute)
			}
			if tc.starved {
				if c.refusedRenewals.Load() == 0 {
					t.Errorf("got every renewal through a shared pool of %d filled by waiters, want some refused", tc.capacity.AccountConcurrency)
				}
			} else if got := c.renewals.Load(); got != holders*renewals {
				t.Errorf("got %d renewals, want %d", got, holders*renewals)
			}
			if got, want := lines.count(), c.handled.Load(); got != want {
				t.Errorf("got %d requests served by handlers, want %d (every request the gateway did not refuse, and no other)", got, want)
			}
		})
	}
}
