package api

import (
	"fmt"
	"maps"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIGatewayRefusals: every operation documents the answers of the
// stack's capacity bounds (see Capacity) — API Gateway's 429 for a route
// over its throttle and its 500 for an invocation Lambda refused — as
// application/json {"message": string}, the shared GatewayMessage, so a
// client generated from the document knows them and internal/verify/contract accepts
// the local runner's.
func TestOpenAPIGatewayRefusals(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, rt := range Routes {
		item := doc.Paths.Find(rt.Path)
		if item == nil || item.GetOperation(rt.Method) == nil {
			t.Errorf("%s: not in api/openapi.yaml", rt.Key())
			continue
		}
		op := item.GetOperation(rt.Method)
		for _, status := range []int{http.StatusTooManyRequests, http.StatusInternalServerError} {
			resp := op.Responses.Status(status)
			if resp == nil || resp.Value == nil {
				t.Errorf("%s: %d is not documented", rt.Key(), status)
				continue
			}
			mt := resp.Value.Content.Get("application/json")
			if mt == nil || mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/GatewayMessage" {
				t.Errorf("%s: %d does not document application/json GatewayMessage", rt.Key(), status)
			}
		}
	}
	msg := doc.Components.Schemas["GatewayMessage"]
	if msg == nil {
		t.Fatal("no components.schemas.GatewayMessage")
	}
	if p := msg.Value.Properties["message"]; p == nil || !p.Value.Type.Is("string") || len(msg.Value.Required) != 1 {
		t.Errorf("GatewayMessage: got %v required, message %v, want one required string member, message", msg.Value.Required, p)
	}
}

// TestQuickRoutesCarryLoad: each quick route (try-acquire, renew,
// release, status, of locks and semaphores) admits at least MinQuickRate
// requests a second by default, with a burst at least as large.
func TestQuickRoutesCarryLoad(t *testing.T) {
	n := 0
	for _, r := range Routes {
		if !r.Quick() {
			continue
		}
		n++
		if r.Throttle.Rate < MinQuickRate || float64(r.Throttle.Burst) < r.Throttle.Rate {
			t.Errorf("%s: got %+v, want a rate of at least %d and a burst to match", r.Key(), r.Throttle, MinQuickRate)
		}
	}
	if n != 13 {
		t.Errorf("got %d quick routes, want 13 (try-acquire, renew, release, status; of locks and semaphores; and try-read, try-write of read/write locks)", n)
	}
}

// TestWaitingBound: the waiting routes' default throttles let waiters and
// watchers hold at most WaitingBound executions together (a burst, and the
// rate for WaitHold, a 20 s round and its last store call), which leaves a
// default account's pool room for the quick routes at their full rate while
// their mean duration stays under 21 ms (Little's law), as
// docs/operations.md states.
func TestWaitingBound(t *testing.T) {
	holds, quick := 0, 0.0
	for _, r := range Routes {
		switch {
		case r.Waits:
			holds += r.Holds()
		case r.Quick():
			quick += r.Throttle.Rate
		}
	}
	if holds != WaitingBound {
		t.Errorf("the waiting routes hold up to %d executions, want WaitingBound (%d)", holds, WaitingBound)
	}
	// The account's bucket admits at most its rate of them together.
	admitted := min(quick, AccountThrottle.Rate)
	if left := DefaultAccountConcurrency - WaitingBound; math.Round(float64(left)/admitted*1000) != 21 || quick != 13000 || admitted != 10000 {
		t.Errorf("%d executions left for %g quick requests/s (%g admitted by the account): they fill the pool at %g s each, "+
			"want the documented 13,000/s, 10,000/s and 21 ms", left, quick, admitted, float64(left)/admitted)
	}
	if got := (Throttle{Rate: 15, Burst: 75}).Holds(); got != 420 {
		t.Errorf("Holds of 15/s burst 75: got %d, want 420", got)
	}
}

// TestReservations: reserve=true's numbers fit a default account with
// Lambda's unreserved minimum to spare, as docs/operations.md states (430).
func TestReservations(t *testing.T) {
	sum := 0
	seen := map[string]bool{}
	for _, r := range Routes {
		if !seen[r.Name] {
			seen[r.Name] = true
			sum += r.Reserve
		}
	}
	if sum+UnreservedMinimum != 430 || sum+UnreservedMinimum > DefaultAccountConcurrency {
		t.Errorf("reserve=true needs an account limit of %d, want the documented 430", sum+UnreservedMinimum)
	}
}

// TestParseThrottles: OP=RATE:BURST items, comma separated, keyed by a
// route's operationId; every bad item is reported with what it wants.
func TestParseThrottles(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]Throttle
		wantErrs []string // each in the error
	}{
		{name: "One", in: "acquire=2000:4000", want: map[string]Throttle{"acquire": {Rate: 2000, Burst: 4000}}},
		{name: "Several", in: " acquireWait=30:150 , renewSemaphore = 0.5 : 1", want: map[string]Throttle{
			"acquireWait": {Rate: 30, Burst: 150}, "renewSemaphore": {Rate: 0.5, Burst: 1}}},
		{name: "LastWins", in: "status=1:1,status=2:2", want: map[string]Throttle{"status": {Rate: 2, Burst: 2}}},
		{name: "RateZero", in: "listLocks=0:1", want: map[string]Throttle{"listLocks": {Rate: 0, Burst: 1}}},
		{name: "ErrSyntax", in: "acquire=2000", wantErrs: []string{`"acquire=2000"`, "want RATE:BURST"}},
		{name: "ErrNoOperation", in: "2000:2000", wantErrs: []string{"OPERATION=RATE:BURST"}},
		{name: "ErrEmpty", in: "", wantErrs: []string{"OPERATION=RATE:BURST"}},
		{name: "ErrUnknownOperation", in: "lock=1:1", wantErrs: []string{`"lock" is no route's operation`, "acquireWait"}},
		{name: "ErrFunctionName", in: "wait=1:1", wantErrs: []string{`"wait" is no route's operation`}},
		{name: "ErrRate", in: "status=fast:1", wantErrs: []string{`rate "fast"`}},
		{name: "ErrNegativeRate", in: "status=-1:1", wantErrs: []string{`rate "-1"`}},
		{name: "ErrInfiniteRate", in: "status=Inf:1", wantErrs: []string{`rate "Inf"`}},
		{name: "ErrBurstFraction", in: "status=1:1.5", wantErrs: []string{`burst "1.5"`}},
		{name: "ErrBurstZero", in: "status=1:0", wantErrs: []string{`burst "0"`, "1 or more"}},
		{name: "ErrEveryItem", in: "status=1:0,renew=x:1,acquire=5:5", wantErrs: []string{`burst "0"`, `rate "x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseThrottles(tc.in)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				for _, w := range tc.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("got error %q, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Errorf("got %v %v, want %v", got, err, tc.want)
			}
		})
	}
}

// TestCheckAccountBucket: the default throttles fit API Gateway's default
// account bucket route by route, though their rates add up to more than
// it (a route's throttle is a ceiling, not a reservation); a rate or a
// burst above an account's is reported, naming the numbers.
func TestCheckAccountBucket(t *testing.T) {
	if err := CheckAccountBucket(Routes, nil, AccountThrottle); err != nil {
		t.Errorf("the default throttles: %v", err)
	}
	// docs/operations.md states the sum.
	if got := RateSum(Routes, nil); got != 13118 {
		t.Errorf("the default rates add up to %g requests/s, want 13118 (update docs/operations.md)", got)
	}
	for _, tc := range []struct {
		name      string
		overrides map[string]Throttle
		account   Throttle
		want      []string // in the error; none: no error
	}{
		{name: "SmallRegion", account: Throttle{Rate: 2500, Burst: 1250}},
		{name: "RateAbove", overrides: map[string]Throttle{"status": {Rate: 3000, Burst: 1000}}, account: Throttle{Rate: 2500, Burst: 1250},
			want: []string{"GET /locks/{resource} (status): rate 3000 requests/s is above the account's API Gateway limit of 2500"}},
		{name: "BurstAbove", overrides: map[string]Throttle{"renew": {Rate: 100, Burst: 6000}}, account: AccountThrottle,
			want: []string{"POST /locks/{resource}/renew (renew): burst 6000 is above the account's API Gateway burst of 5000"}},
		{name: "SmallRegionBurst", account: Throttle{Rate: 2500, Burst: 900},
			want: []string{"POST /locks/{resource} (acquire): burst 1000 is above the account's API Gateway burst of 900"}},
		{name: "Lowered", overrides: map[string]Throttle{"status": {Rate: 1, Burst: 1}}, account: Throttle{Rate: 1000, Burst: 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAccountBucket(Routes, tc.overrides, tc.account)
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("got %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatal("got no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestRowsOf: every route constant names exactly one row of the table,
// or the package refuses to start: a route cannot be half registered.
func TestRowsOf(t *testing.T) {
	panics := func(routes []Route) (msg string) {
		defer func() {
			if r := recover(); r != nil {
				msg = fmt.Sprint(r)
			}
		}()
		rowsOf(routes)
		return ""
	}
	if msg := panics(Routes); msg != "" {
		t.Fatalf("Routes: %s", msg)
	}
	missing := slices.Clone(Routes[1:])
	if msg := panics(missing); !strings.Contains(msg, "has no row") {
		t.Errorf("a constant without a row: got %q, want a panic naming it", msg)
	}
	dup := append(slices.Clone(Routes), Route{Name: "acquire", Method: "POST", Path: "/locks/{resource}/again", id: routeAcquire})
	if msg := panics(dup); !strings.Contains(msg, "POST /locks/{resource}/again") {
		t.Errorf("two rows of one constant: got %q, want a panic naming the row", msg)
	}
	for id, ri := range rows {
		if ri.id != id || ri.key != ri.Key() || (ri.param == "name") != strings.Contains(ri.Path, "{name}") {
			t.Errorf("rows[%d]: %+v", id, ri)
		}
	}
}

// TestOneEntryPointPerFunction: the rows of one function share its entry
// point (Route.Handle), which serves each of them by the event's route key,
// as the function's main does; each function has its own.
func TestOneEntryPointPerFunction(t *testing.T) {
	entry := map[string]uintptr{}
	for _, r := range Routes {
		p := reflect.ValueOf(r.Handle).Pointer()
		if q, ok := entry[r.Name]; ok && q != p {
			t.Errorf("%s: its Handle is not the one of the other rows of function %q", r.Key(), r.Name)
		}
		entry[r.Name] = p
	}
	seen := map[uintptr]string{}
	for name, p := range entry {
		if other, ok := seen[p]; ok {
			t.Errorf("functions %q and %q share one entry point", name, other)
		}
		seen[p] = name
	}
}
