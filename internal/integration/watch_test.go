package integration_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// watch calls GET /locks/{resource}/watch and returns the answer's index
// and whether it changed.
func watch(tb testing.TB, srv *testenv.Server, resource string, index int64, wait int) reply {
	tb.Helper()
	r := call(tb, srv, "GET", fmt.Sprintf("%s/watch?index=%d&wait_seconds=%d", lockPath(resource), index, wait), "")
	if r.status != 200 {
		tb.Fatalf("watch: got %d %s", r.status, r.raw)
	}
	return r
}

func index(tb testing.TB, r reply) int64 {
	tb.Helper()
	n, err := r.json["index"].(json.Number).Int64()
	if err != nil {
		tb.Fatalf("index %v: %v", r.json["index"], err)
	}
	return n
}

// TestWatchSeesEveryChange: against dynalite, a watch answers a lock never
// taken with index 0, a grant with 2 × its token and the lease, its
// release, its expiry (no write at all) and a takeover each as soon as they
// happen, and a renewal not at all; the index only grows.
func TestWatchSeesEveryChange(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)

	if r := watch(t, srv, r0, 0, 0); index(t, r) != 0 || r.json["changed"] != false || r.json["lock"] != nil {
		t.Fatalf("never taken: got %s, want index 0 unchanged", r.raw)
	}
	tok := token(t, acquire(t, srv, r0, "w1", 30))
	held := watch(t, srv, r0, 0, 5)
	if index(t, held) != 2*tok || held.json["changed"] != true || held.json["lock"] == nil {
		t.Fatalf("granted: got %s, want index %d with the lease", held.raw, 2*tok)
	}

	// A renewal is no change: the watch runs its whole wait.
	start := time.Now()
	if r := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 30)); r.status != 200 {
		t.Fatalf("renew: %d %s", r.status, r.raw)
	}
	if r := watch(t, srv, r0, 2*tok, 1); r.json["changed"] != false || time.Since(start) < time.Second {
		t.Errorf("after a renewal: got %s after %s, want no change after the whole second", r.raw, time.Since(start))
	}

	// The release: answered at once, or as soon as the watch sees it.
	done := make(chan reply, 1)
	go func() { done <- watch(t, srv, r0, 2*tok, 10) }()
	if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", tok)); r.status != 204 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	released := time.Now()
	r := <-done
	if index(t, r) != 2*tok+1 || r.json["lock"] != nil || time.Since(released) > 2*time.Second {
		t.Errorf("after the release: got %s %s later, want index %d without a lease, soon", r.raw, time.Since(released), 2*tok+1)
	}

	// A takeover by another owner, then an expiry that no client writes
	// (the watch records it). The lease is 3 s: the first watch must read
	// it live, even on a machine that stalls a second.
	tok2 := token(t, acquire(t, srv, r0, "w2", 3))
	if r := watch(t, srv, r0, 2*tok+1, 10); index(t, r) != 2*tok2 || tok2 != tok+1 {
		t.Errorf("takeover: got %s, want index %d (token %d)", r.raw, 2*tok2, tok+1)
	}
	r = watch(t, srv, r0, 2*tok2, 10)
	if index(t, r) != 2*tok2+1 {
		t.Errorf("expiry: got %s, want index %d", r.raw, 2*tok2+1)
	}
}

// TestWatchQuery: the query is checked whole, before any read.
func TestWatchQuery(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	for _, q := range []string{"?index=-1", "?index=x", "?wait_seconds=21", "?wait_seconds=1.5", "?since=3", "?index=2&wait_seconds=-1"} {
		srv.Ops.Take()
		wantProblem(t, call(t, srv, "GET", lockPath(res(t))+"/watch"+q, ""), 422, "validation-failed")
		if ops := srv.Ops.Take(); len(ops) != 0 {
			t.Errorf("%s: reached the store: %v", q, ops)
		}
	}
}

// TestWatchMadeUpIndex (found by review): an index later than any state of
// the lock — no answer of the service had it — is 422, not an answer with a
// token the service never issued; an index the caller saw before garbage
// collection deleted the idle item is echoed until the next grant.
func TestWatchMadeUpIndex(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	tok := token(t, acquire(t, srv, r0, "w1", 30))
	wantProblem(t, call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", lockPath(r0), int64(1)<<52), ""), 422, "validation-failed")
	wantProblem(t, call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", lockPath(r0), 2*tok+2), ""), 422, "validation-failed")
	if r := watch(t, srv, r0, 2*tok, 0); index(t, r) != 2*tok || r.json["lock"] == nil {
		t.Errorf("the real index: got %s", r.raw)
	}
}

// TestWatchBlockedUntil (found by review): after a force release that keeps
// the lease's lock-delay, no lease is live but the lock is not free: the
// watch answer says until when (blocked_until), and stops saying it once an
// immediate force release ends the delay. The end of a delay is no change
// of the index.
func TestWatchBlockedUntil(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	tok := token(t, acquireDelay(t, srv, r0, "w1", 3600, 60))
	if r := call(t, srv, "DELETE", adminPath(r0), reasonBody("holder gone")); r.status != 200 {
		t.Fatalf("force release: %d %s", r.status, r.raw)
	}
	r := watch(t, srv, r0, 2*tok, 0)
	if index(t, r) != 2*tok+1 || r.json["lock"] != nil || r.json["blocked_until"] == nil {
		t.Fatalf("in the lock-delay: got %s, want index %d, no lease, blocked_until", r.raw, 2*tok+1)
	}
	wantAcquire(t, srv, r0, "w2", false)
	if r := call(t, srv, "DELETE", adminPath(r0), `{"reason":"end the delay","immediate":true}`); r.status != 200 {
		t.Fatalf("immediate force release: %d %s", r.status, r.raw)
	}
	if r := watch(t, srv, r0, 2*tok+1, 0); index(t, r) != 2*tok+1 || r.json["blocked_until"] != nil {
		t.Errorf("after the immediate force release: got %s, want index %d without blocked_until", r.raw, 2*tok+1)
	}
	wantAcquire(t, srv, r0, "w2", true)
}

// TestWatchExpiryStaysAnswered: a renewal issued just before its lease's
// expiry lands after it (held in flight); meanwhile a watch answers the
// expiry. The late-write rule lets a renew revive its own lease within its
// retry window — but not one a watcher was told had ended: the watch
// records the expiry before answering it, the late renew is refused (404),
// and the lock stays ended for every later reader. Without the record the
// renew lands 200 and the watcher's index goes back to a live lease.
func TestWatchExpiryStaysAnswered(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	lock := acquire(t, srv, r0, "w1", 2)
	tok, exp := token(t, lock), msOf(t, lock, "expires_at")

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" {
			once.Do(func() { close(held) })
			<-release
		}
		return faultproxy.Action{}
	})
	time.Sleep(time.Until(time.UnixMilli(exp - 300)))
	renewed := make(chan reply, 1)
	go func() { renewed <- call(t, slow, "POST", lockPath(r0)+"/renew", renewBody("w1", 30, tok)) }()
	<-held // the renew's write is in flight, issued before the expiry

	ended := watch(t, srv, r0, 2*tok, 5)
	if index(t, ended) != 2*tok+1 || ended.json["lock"] != nil {
		t.Fatalf("watch across the expiry: got %s, want index %d without a lease", ended.raw, 2*tok+1)
	}
	close(release)
	if r := <-renewed; r.status != 404 {
		t.Errorf("the late renew, after a watch answered the expiry: got %d %s, want 404 (the lease ended)", r.status, r.raw)
	}
	if st := call(t, srv, "GET", lockPath(r0), ""); st.status != 404 {
		t.Errorf("status after: got %d %s, want 404", st.status, st.raw)
	}
	if r := watch(t, srv, r0, 2*tok+1, 0); index(t, r) != 2*tok+1 || r.json["lock"] != nil {
		t.Errorf("watch after: got %s, want index %d without a lease", r.raw, 2*tok+1)
	}
}
