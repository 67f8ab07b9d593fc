package integration_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// holdNext returns a plan that holds the next UpdateItem until its caller
// gave up and hold is closed (a write delivered late), and forwards the rest.
func holdNext(hold <-chan struct{}) faultproxy.Plan {
	var armed atomic.Bool
	armed.Store(true)
	return func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" && armed.CompareAndSwap(true, false) {
			return faultproxy.Action{Fault: faultproxy.Late, Hold: hold}
		}
		return faultproxy.Action{}
	}
}

// TestLateWriteCannotTouchNewerLease is the late-write regression: one
// request's UpdateItem is held in a proxy until the service gave up on it
// (503), a newer grant or renewal of the same resource lands, and only then
// does the held write reach dynalite. The newer lease must be untouched (the
// held write fails its condition), for every write that could carry a stale
// :now — acquire, renew with and without a token, release.
func TestLateWriteCannotTouchNewerLease(t *testing.T) {
	t.Parallel()
	type step struct {
		method, path, body string
	}
	cases := []struct {
		name string
		held step // answered 503 while its write is held
		// newer runs after the held request gave up; its answer's lock
		// is the lease that must survive.
		newer step
	}{
		{"AcquireThenNewerGrant",
			step{"POST", "", `{"owner":"w1","ttl_seconds":5}`},
			step{"POST", "", `{"owner":"w1","ttl_seconds":30}`}},
		{"RenewThenNewerGrant",
			step{"POST", "/renew", `{"owner":"w1","ttl_seconds":5}`},
			step{"POST", "", `{"owner":"w1","ttl_seconds":30}`}},
		{"RenewThenNewerRenew",
			step{"POST", "/renew", `{"owner":"w1","ttl_seconds":5}`},
			step{"POST", "/renew", `{"owner":"w1","ttl_seconds":30}`}},
		{"RenewWithTokenThenNewerGrant",
			step{"POST", "/renew", `{"owner":"w1","ttl_seconds":5,"fencing_token":TOKEN}`},
			step{"POST", "", `{"owner":"w1","ttl_seconds":30}`}},
		{"ReleaseThenNewerGrant",
			step{"DELETE", "", `{"owner":"w1"}`},
			step{"POST", "", `{"owner":"w1","ttl_seconds":30}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := newProxy(t)
			// Two instances over the proxy: the held request goes through one
			// that gives up on the store soon (300 ms), the rest through one
			// with the normal budget, so a busy machine cannot fail them.
			// A shared stepping clock stamps the newer request after the
			// held one, as it is in real time.
			now := steppingClock()
			impatient := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), StoreBudget: 300 * time.Millisecond, Now: now})
			srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: now})
			r0 := res(t)
			path := lockPath(r0)
			tok := token(t, acquire(t, srv, r0, "w1", 30))

			hold := make(chan struct{})
			proxy.SetPlan(holdNext(hold))
			held := call(t, impatient, tc.held.method, path+tc.held.path, strings.ReplaceAll(tc.held.body, "TOKEN", strconv.FormatInt(tok, 10)))
			if held.status != 503 {
				t.Fatalf("held %s: got %d %s, want 503 (write held in flight)", tc.held.method, held.status, held.raw)
			}
			proxy.SetPlan(nil)

			newer := call(t, srv, tc.newer.method, path+tc.newer.path, tc.newer.body)
			if newer.status != 200 {
				t.Fatalf("newer %s: got %d %s", tc.newer.method, newer.status, newer.raw)
			}
			want := newer.json["lock"].(map[string]any)

			close(hold)
			proxy.Settle()
			var late faultproxy.Record
			for _, r := range proxy.Records() {
				if r.Fault == faultproxy.Late {
					late = r
				}
			}
			if !late.Forwarded {
				t.Fatalf("no held write was forwarded late: %d records", len(proxy.Records()))
			}
			if late.StoreStatus != 400 {
				t.Errorf("late write: store answered %d %s, want 400 ConditionalCheckFailed", late.StoreStatus, late.StoreBody)
			}

			got := call(t, srv, "GET", path, "")
			if got.status != 200 {
				t.Fatalf("status after the late write: got %d %s, want 200 with the newer lease", got.status, got.raw)
			}
			for _, k := range []string{"owner", "fencing_token", "acquired_at", "expires_at"} {
				if got.json[k] != want[k] {
					t.Errorf("%s after the late write: got %v, want %v (the newer lease, untouched)", k, got.json[k], want[k])
				}
			}
			if r := call(t, srv, "POST", path, `{"owner":"w2","ttl_seconds":30}`); r.json["acquired"] != false {
				t.Errorf("w2 acquire after the late write: got %d %s, want acquired:false", r.status, r.raw)
			}
		})
	}
}

// TestRenewalsOutOfOrder: two renewals of one lease in flight at once (a
// keep-alive and a renew by hand, or two processes of one owner) can land
// in the opposite order. The earlier one then finds the lease renewed by a
// later request: it is answered with that lease when it runs at least as
// far as asked (200), or 503 to retry when it does not — never 404, which
// would tell a live holder that its lease is gone.
func TestRenewalsOutOfOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name             string
		earlyTTL, later  int
		wantStatus       int
		wantExpiresLater bool
	}{
		{"LaterRunsFurther", 30, 30, 200, true},
		{"LaterRunsShorter", 60, 10, 503, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := newProxy(t)
			// The stepping clock stamps the later renewal after the early
			// one, as it is in real time.
			srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: steppingClock()})
			r0 := res(t)
			tok := token(t, acquire(t, srv, r0, "w1", 30))

			// The early renewal's write, stamped, waits in the plan until
			// the later renewal has been answered.
			var armed atomic.Bool
			armed.Store(true)
			stamped, laterDone := make(chan struct{}), make(chan struct{})
			proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
				if r.Op == "UpdateItem" && armed.CompareAndSwap(true, false) {
					close(stamped)
					<-laterDone
				}
				return faultproxy.Action{}
			})
			early := make(chan reply, 1)
			go func() { early <- call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", tc.earlyTTL, tok)) }()
			<-stamped
			later := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", tc.later, tok))
			close(laterDone)
			if later.status != 200 {
				t.Fatalf("later renewal: got %d %s", later.status, later.raw)
			}
			got := <-early
			if got.status != tc.wantStatus {
				t.Fatalf("earlier renewal landing second: got %d %s, want %d", got.status, got.raw, tc.wantStatus)
			}
			if tc.wantExpiresLater {
				if g, w := got.json["lock"].(map[string]any)["expires_at"], later.json["lock"].(map[string]any)["expires_at"]; g != w {
					t.Errorf("answered expires_at %v, want the lease as the later renewal left it (%v)", g, w)
				}
			} else {
				wantProblem(t, got, 503, "service-unavailable")
			}
			st := call(t, srv, "GET", lockPath(r0), "")
			if st.status != 200 || st.json["expires_at"] != later.json["lock"].(map[string]any)["expires_at"] {
				t.Errorf("lease after both: got %d %s, want the later renewal's expiry", st.status, st.raw)
			}
		})
	}
}

// TestWaitCannotReplaceNewerSameOwnerLease is the late-write rule for the
// writes of a wait: a waiting acquire issued before a lease of its own
// owner was granted must not replace that lease, however late in the wait
// its write comes. The waiter (owner w1) waits for another owner's lease;
// that lease is released; the waiter's next read finds the lock free, but
// its answer is held in a proxy while a newer acquire of w1 (not waiting)
// is granted. The waiter then writes, stamped after that grant: its write
// must fail, so the newer lease keeps its token and its holder can renew
// it, and the waiter is not granted.
func TestWaitCannotReplaceNewerSameOwnerLease(t *testing.T) {
	t.Parallel()
	// Dynalite's path: the waiter reads the item after its refused first
	// write (the read this history holds). With the old item returned it
	// joins the queue at once, and its owner's plain acquire is then
	// refused for the queued waiter: no newer lease can come.
	proxy := testenv.NewProxy(t, testenv.StoreDynalite, nil)
	// A shared stepping clock stamps the newer grant after the waiter's
	// arrival, as it is in real time.
	now := steppingClock()
	waiterSrv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: now, Store: testenv.StoreDynalite})
	srv := testenv.Start(t, testenv.Options{Now: now, Store: testenv.StoreDynalite})
	r0 := res(t)
	path := lockPath(r0)
	other := token(t, acquire(t, srv, r0, "w2", 30))

	// The waiter's first read (after its first write was refused) waits
	// in the plan until w2 has released, and is then answered "free" by
	// the store; that answer is held until the newer lease is granted.
	// (Holds let go when the test ends, so a failure cannot hang it.)
	released, hold, readAnswered := newHold(t), newHold(t), make(chan struct{})
	firstRead := released.arrived
	var reads atomic.Int32
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op != "GetItem" || reads.Add(1) != 1 {
			return faultproxy.Action{}
		}
		released.wait()
		return faultproxy.Action{Answered: readAnswered, HoldAnswer: hold.open}
	})
	waited := make(chan reply, 1)
	go func() {
		waited <- call(t, waiterSrv, "POST", path+"/wait", `{"owner":"w1","ttl_seconds":30,"wait_seconds":3}`)
	}()
	<-firstRead
	if r := call(t, srv, "DELETE", path, ownerBody("w2", other)); r.status != 204 {
		t.Fatalf("release by w2: got %d %s", r.status, r.raw)
	}
	released.release()
	<-readAnswered
	newer := acquire(t, srv, r0, "w1", 30)
	hold.release()

	got := <-waited
	if got.status != 200 || got.json["acquired"] != false {
		t.Errorf("the wait: got %d %s, want acquired:false (its write must not replace the newer lease)", got.status, got.raw)
	}
	r := call(t, srv, "POST", path+"/renew", renewBody("w1", 30, token(t, newer)))
	if r.status != 200 {
		t.Errorf("renew of the newer lease after the wait: got %d %s, want 200 (the lease untouched)", r.status, r.raw)
	}
}
