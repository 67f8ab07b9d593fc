package integration_test

// SDK retries and unknown outcomes meeting the late-write rule, grant ids
// and force release (found by the issue-14 review).

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// retryPlan makes the first UpdateItem through the proxy (the one write of
// the request under test) land and then answers it 500 (the SDK retries
// it); the retry is held in the plan until between is closed, so a test can
// grant the lock to someone else between the attempt that landed and the
// SDK's retry.
func retryPlan(retrying chan<- struct{}, between <-chan struct{}) faultproxy.Plan {
	var n atomic.Int32
	return func(r faultproxy.Request) faultproxy.Action {
		if r.Op != "UpdateItem" {
			return faultproxy.Action{}
		}
		switch n.Add(1) {
		case 1:
			return faultproxy.Action{Fault: faultproxy.AppliedThen500}
		case 2:
			close(retrying)
			<-between
		}
		return faultproxy.Action{}
	}
}

// TestForceReleaseSDKRetryAfterNextGrant: a force release whose first
// attempt landed (answer lost, SDK retries) while the freed lock was taken
// by w2 before the retry. The operator must be told the lease it ended
// (w1's), and w2's lease must survive.
//
// NoSkew: the retry is refused, finds its own release_id (an acquire keeps
// release_id) and answers 200 "ended" with w2's lease — the lease it did
// NOT end; the audit line says the same.
//
// Skew80ms: the admin instance's clock is 80 ms ahead. The retry passes
// acquired_at <= :now (w2 was granted within 80 ms of the force release's
// :now) and, having no owner check, ends w2's lease too. With immediate
// (the operator asserts w1 is dead), w3 then takes the lock while w2 —
// alive, granted 30 s — still believes it holds: two holders.
func TestForceReleaseSDKRetryAfterNextGrant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		skew      time.Duration
		immediate bool
	}{
		{"NoSkew", 0, false},
		{"Skew80msImmediate", 80 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := newProxy(t)
			// One stepping clock (the admin's skewed): w2's grant is stamped
			// after the force release's :now, as it is in real time.
			skew, now := tc.skew, steppingClock()
			admin := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(),
				Now: func() time.Time { return now().Add(skew) }})
			srv := testenv.Start(t, testenv.Options{Now: now})
			r0 := res(t)
			path := lockPath(r0)
			tok1 := token(t, acquire(t, srv, r0, "w1", 3600))

			retrying, between := make(chan struct{}), make(chan struct{})
			proxy.SetPlan(retryPlan(retrying, between))
			body := `{"reason":"w1's host is gone"}`
			if tc.immediate {
				body = `{"reason":"w1's host is gone","immediate":true}`
			}
			answered := make(chan reply, 1)
			go func() { answered <- call(t, admin, "DELETE", adminPath(r0), body) }()
			// The first attempt landed: w1's lease is ended, the lock free,
			// and w2 takes it (e.g. a waiter polling the item).
			<-retrying
			w2 := acquire(t, srv, r0, "w2", 30)
			tok2 := token(t, w2)
			close(between)
			fr := <-answered

			if fr.status != 200 {
				t.Fatalf("force release: got %d %s, want 200", fr.status, fr.raw)
			}
			ended := fr.json["ended"].(map[string]any)
			if ended["owner"] != "w1" || token(t, ended) != tok1 {
				t.Errorf("force release answered ended=%v (token %v), want w1's lease (token %d): the operator is told it ended w2's live lease",
					ended["owner"], ended["fencing_token"], tok1)
			}
			st := call(t, srv, "GET", path, "")
			if st.status != 200 || st.json["owner"] != "w2" {
				t.Errorf("status after the retried force release: got %d %s, want w2's lease (token %d) intact", st.status, st.raw, tok2)
			}
			if r := call(t, srv, "POST", path+"/renew", renewBody("w2", 30, tok2)); r.status != 200 {
				t.Errorf("w2 renews its 30 s lease, granted after the force release: got %d %s", r.status, r.raw)
			}
			if tc.immediate {
				if r := call(t, srv, "POST", path, acquireBody("w3", 30)); r.json["acquired"] == true {
					t.Errorf("w3 was granted (token %v) while w2 (token %d, granted moments ago for 30 s, never told) is alive: two holders",
						r.json["lock"].(map[string]any)["fencing_token"], tok2)
				}
			}
		})
	}
}

// TestAcquireSDKRetryOfLandedGrant: the SDK retries an acquire whose
// first attempt landed but whose answer was lost (5xx after the write, a
// reset or a cut-off reply: api.newRetryer says "a repeated acquire ...
// carries the same :now and passes its own stamp"). Since issue 14 the
// same-owner branch compares with :iss (the arrival, before :now), and the
// first attempt stamped acquired_at = renewed_at = :now > :iss, so the
// retry fails its own stamp: the caller is told acquired:false (held) while
// the service holds the lease for it, orphaned until its TTL (a day at
// most) — nobody else can take it, and the caller, told it lost, will not
// release it.
func TestAcquireSDKRetryOfLandedGrant(t *testing.T) {
	t.Parallel()
	for _, fault := range []faultproxy.Fault{faultproxy.AppliedThen500, faultproxy.AppliedThenReset} {
		for _, wait := range []int{0, 2} {
			t.Run(fault.String()+"/wait"+string(rune('0'+wait)), func(t *testing.T) {
				t.Parallel()
				proxy := newProxy(t)
				// Each reading of this clock is at least 1 ms after the last, as
				// API Gateway's timeEpoch is always some ms before the Lambda's
				// :now in AWS (the local runner stamps both within the same ms
				// most of the time).
				srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: steppingClock()})
				direct := testenv.Start(t, testenv.Options{})
				r0 := res(t)
				var n atomic.Int32
				proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
					if r.Op == "UpdateItem" && n.Add(1) == 1 {
						return faultproxy.Action{Fault: fault}
					}
					return faultproxy.Action{}
				})
				body := `{"owner":"w1","ttl_seconds":3600,"wait_seconds":` + string(rune('0'+wait)) + `}`
				path := lockPath(r0)
				if wait > 0 {
					path = waitPath(r0)
				}
				r := call(t, srv, "POST", path, body)
				st := call(t, direct, "GET", lockPath(r0), "")
				if r.status != 200 || r.json["acquired"] != true {
					t.Errorf("acquire whose first attempt landed: got %d %s; the store holds %d %s for the caller — want 200 acquired:true (or 503)",
						r.status, r.raw, st.status, st.raw)
				}
			})
		}
	}
}

// TestForceReleaseUnknownOutcome: a force release whose write landed but
// whose answers were all lost is 503, and the answer must not advise a
// blind repeat (the lock may have gone to a newer lease since). Meanwhile
// w2 takes the freed lock. The documented way on — repeat with the token of
// the lease the operator meant (w1's) — ends nothing and shows w2's lease
// as current (409); w2 keeps the lock.
func TestForceReleaseUnknownOutcome(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	admin := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), StoreBudget: time.Second})
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	path := lockPath(r0)
	tok1 := token(t, acquire(t, srv, r0, "w1", 3600))

	// Only the admin instance writes through the proxy: every attempt of
	// its force release lands and loses its answer.
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" {
			return faultproxy.Action{Fault: faultproxy.AppliedThen500}
		}
		return faultproxy.Action{}
	})
	first := call(t, admin, "DELETE", adminPath(r0), `{"reason":"w1's host is gone","immediate":true}`)
	wantProblem(t, first, 503, "service-unavailable")
	proxy.SetPlan(nil)
	if d, _ := first.json["detail"].(string); strings.Contains(d, "Retry after") || !strings.Contains(d, "fencing_token") {
		t.Errorf("the 503 of a force release advises a blind retry or no token: %q", d)
	}

	tok2 := token(t, acquire(t, srv, r0, "w2", 30)) // w1's lease did end: a waiter takes the lock
	again := call(t, admin, "DELETE", adminPath(r0), fmt.Sprintf(`{"reason":"w1's host is gone","immediate":true,"fencing_token":%d}`, tok1))
	wantProblem(t, again, 409, "stale-token")
	if cur, _ := again.json["current"].(map[string]any); cur == nil || token(t, cur) != tok2 {
		t.Errorf("got %s, want w2's lease (%d) as current", again.raw, tok2)
	}
	if r := call(t, srv, "POST", path, acquireBody("w3", 30)); r.json["acquired"] == true {
		t.Errorf("w3 granted while w2 (token %d) holds the lock", tok2)
	}
}

// TestValidationNamesEveryField: "every field error in one 422". A
// body member named like a path parameter ("resource", unknown in every
// body) records a field error under "resource", and the service's checks
// then skip the path's resource (ValidationError.Has): the 422 names the
// unknown member but not that the path's lock name is invalid.
func TestValidationNamesEveryField(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r := call(t, srv, "POST", "/locks/bad%01name", `{"owner":"w1","ttl_seconds":30,"resource":"x"}`)
	wantProblem(t, r, 422, "validation-failed")
	var details []string
	for _, e := range r.json["errors"].([]any) {
		f := e.(map[string]any)
		if f["field"] == "resource" {
			details = append(details, f["detail"].(string))
		}
	}
	if len(details) < 2 {
		t.Errorf("got resource errors %q for path name \"bad\\x01name\" and a body member \"resource\": want both the unknown member and the path's control character", details)
	}
}

// TestReleaseSDKRetryAfterNextGrant: a release whose first attempt landed
// (its answer lost, the SDK retries) while w2 took the freed lock before the
// retry. The retry finds its own release_id on w2's lease, because an
// acquire keeps release_id, and the release is reported done (204), not
// 403; w2's lease is untouched.
func TestReleaseSDKRetryAfterNextGrant(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	now := steppingClock()
	holder := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: now})
	srv := testenv.Start(t, testenv.Options{Now: now})
	r0 := res(t)
	path := lockPath(r0)
	tok1 := token(t, acquire(t, srv, r0, "w1", 3600))

	retrying, between := make(chan struct{}), make(chan struct{})
	proxy.SetPlan(retryPlan(retrying, between))
	answered := make(chan reply, 1)
	go func() { answered <- call(t, holder, "DELETE", path, ownerBody("w1", tok1)) }()
	<-retrying // the first attempt landed: the lock is free
	tok2 := token(t, acquire(t, srv, r0, "w2", 30))
	close(between)
	if r := <-answered; r.status != 204 {
		t.Errorf("release whose retry met w2's grant: got %d %s, want 204 (the release it made)", r.status, r.raw)
	}
	if st := call(t, srv, "GET", path, ""); st.status != 200 || st.json["owner"] != "w2" || token(t, st.json) != tok2 {
		t.Errorf("status after the retried release: got %d %s, want w2's lease (token %d)", st.status, st.raw, tok2)
	}
	if r := call(t, srv, "POST", path+"/renew", renewBody("w2", 30, tok2)); r.status != 200 {
		t.Errorf("w2 renews its lease: got %d %s, want 200", r.status, r.raw)
	}
}
