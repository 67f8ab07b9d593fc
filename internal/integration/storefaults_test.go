package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// TestStoreFaultsAre503 injects every store fault on every attempt of every
// route and checks the answer is 503 service-unavailable with Retry-After
// and a problem body — never 500, never a dropped connection — and counts
// the attempts the SDK makes per request (no retry for a fault that leaves
// no answer to retry on, api.StoreAttempts for the rest).
func TestStoreFaultsAre503(t *testing.T) {
	t.Parallel()
	const budget = time.Second
	// wantAttempts is how many times the SDK sends the request for each
	// fault when every attempt fails; 0 means "1 to api.StoreAttempts"
	// (throttling backs off from a 1 s base, so the budget may end first).
	wantAttempts := map[faultproxy.Fault]int{
		faultproxy.InternalError:      api.StoreAttempts,
		faultproxy.Throttle:           0,
		faultproxy.ThroughputExceeded: 0,
		faultproxy.AppliedThen500:     api.StoreAttempts,
		faultproxy.AppliedThenReset:   api.StoreAttempts,
		faultproxy.AppliedThenCut:     api.StoreAttempts,
		faultproxy.Blackhole:          1,
		faultproxy.Late:               1,
	}
	routes := []struct {
		name, method, suffix, body string
	}{
		{"Acquire", "POST", "", `{"owner":"w1","ttl_seconds":30}`},
		{"Status", "GET", "", ""},
		{"Renew", "POST", "/renew", `{"owner":"w1","ttl_seconds":30}`},
		{"Release", "DELETE", "", `{"owner":"w1"}`},
	}
	for _, fault := range faultproxy.Faults() {
		if fault == faultproxy.Delay {
			continue // a delay is not a failure
		}
		for _, rt := range routes {
			t.Run(fmt.Sprintf("%s/%s", fault, rt.name), func(t *testing.T) {
				t.Parallel()
				proxy := newProxy(t)
				srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), StoreBudget: budget})
				r0 := res(t)
				acquire(t, testenv.Start(t, testenv.Options{}), r0, "w1", 30) // straight to dynalite
				before := len(proxy.Records())

				proxy.SetPlan(func(faultproxy.Request) faultproxy.Action { return faultproxy.Action{Fault: fault} })
				start := time.Now()
				r := call(t, srv, rt.method, lockPath(r0)+rt.suffix, rt.body)
				took := time.Since(start)
				wantProblem(t, r, 503, "service-unavailable")
				if r.header.Get("Retry-After") == "" {
					t.Errorf("503 without Retry-After")
				}
				if took > budget+500*time.Millisecond {
					t.Errorf("answered after %v, want within the %v store budget plus a margin", took, budget)
				}
				proxy.SetPlan(nil)
				proxy.Settle()
				attempts := len(proxy.Records()) - before
				if want := wantAttempts[fault]; want != 0 && attempts != want {
					t.Errorf("the SDK sent %d attempts, want %d", attempts, want)
				} else if attempts < 1 || attempts > api.StoreAttempts {
					t.Errorf("the SDK sent %d attempts, want 1..%d", attempts, api.StoreAttempts)
				}
			})
		}
	}
}

// TestClientDisconnectDoesNotCancelStoreCall: API Gateway does not cancel a
// Lambda when its client hangs up, and neither may the runner — a store
// call cut off half-way leaves its outcome unknown (and kills dynalite). The
// store answer here is delayed past the client's patience; the handler must
// still read it.
func TestClientDisconnectDoesNotCancelStoreCall(t *testing.T) {
	t.Parallel()
	// The store call is held in the plan, before it reaches the store,
	// until the client has given up.
	arrived, gaveUp := make(chan struct{}), make(chan struct{})
	var once sync.Once
	proxy, err := faultproxy.New(testenv.Endpoint(), func(faultproxy.Request) faultproxy.Action {
		once.Do(func() { close(arrived) })
		<-gaveUp
		return faultproxy.Action{}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	logs := &logBuffer{}
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), LogTo: logs})
	r0 := res(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+lockPath(r0), strings.NewReader(acquireBody("w1", 30)))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got an answer (%d) while the store call was held, want the client to give up first", resp.StatusCode)
	}
	close(gaveUp)
	// The handler logs its request when it is done: with the store's
	// answer, not the client's cancellation.
	if line := logs.waitLines(t, "request", 1)[0]; line["outcome"] != "acquired" || line["status"] != 200.0 {
		t.Errorf("the handler ended with outcome %v, status %v (%v); want acquired, 200: the store call must not be cancelled", line["outcome"], line["status"], line["error"])
	}
	proxy.Settle()
	recs := proxy.Records()
	if len(recs) != 1 {
		t.Fatalf("got %d store calls, want one", len(recs))
	}
	if recs[0].CallerStatus != 200 {
		t.Errorf("the store call was answered %d to the handler, want 200 to a handler still waiting for it", recs[0].CallerStatus)
	}
	if st := call(t, srv, "GET", lockPath(r0), ""); st.status != 200 || st.json["owner"] != "w1" {
		t.Errorf("status: got %d %s, want the lease w1 was granted", st.status, st.raw)
	}
}
