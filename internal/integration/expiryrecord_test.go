package integration_test

// A watched expiry is final (docs/design.md): the lock watch and the
// semaphore watch record an expiry they answer (expired_at, y<k>), so that
// no renewal landing late revives what watchers were told had ended —
// and the record changes nothing else (a timely release, the listing).
// These began as a review's reproductions; each failed before its fix.

import (
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// holdFirstUpdate holds the first UpdateItem through the proxy at g (it
// is forwarded once g.open is closed); every other request passes.
func holdFirstUpdate(g gate) faultproxy.Plan {
	var n atomic.Int32
	return func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" && n.Add(1) == 1 {
			close(g.arrived)
			<-g.open
		}
		return faultproxy.Action{}
	}
}

// TestSemaphoreWatchedExpiryHidesNoGrant: the semaphore's index, 2 ×
// counter + 1 − live permits, is one-to-one with its states only while no
// permit comes back: a revival would take one off, the next grant add it
// back, and the two cancel. So the watch records the expiries it answers,
// and the late renewal is refused.
//
// History (one clock, N = 3): A takes a permit at home, ttl 1 s (t0). At
// t0+500 A renews (ttl 30); the write is held in flight. At t0+1200 a
// watcher asks and is told A's permit ended (index i1 = i0 + 1, no
// holders). The renewal lands (:now t0+500 < expires_at, A at home with no
// marker): without the record it revived the permit (200), and after B's
// grant the index was 2(c+1) + 1 − 2 = i1 again: the watcher asking with
// i1 was told "unchanged" until one of the two permits ended. With it, the
// renewal is 404 and B's grant changes the index.
func TestSemaphoreWatchedExpiryHidesNoGrant(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{Now: clock.Now, StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	const permits = 3
	pa := semAcquire(t, srv, name, "A", 1, permits)
	k := slotOf(t, pa)
	w0 := call(t, srv, "GET", semPath(name)+"/watch", "")
	i0 := index(t, w0)

	g := newGate()
	proxy.SetPlan(holdFirstUpdate(g))
	clock.Advance(500 * time.Millisecond)
	renewed := make(chan reply, 1)
	go func() {
		renewed <- call(t, slow, "POST", semPath(name)+"/renew", slotBody("A", k, "ttl_seconds", 30, "fencing_token", token(t, pa)))
	}()
	<-g.arrived // issued at t0+500, while A's permit is live
	clock.Advance(700 * time.Millisecond)

	ended := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", semPath(name), i0), "")
	i1 := index(t, ended)
	if i1 != i0+1 || ended.json["changed"] != true || len(ended.json["holders"].([]any)) != 0 {
		t.Fatalf("watch after A's expiry: got %s, want index %d changed, no holders (the history this test needs)", ended.raw, i0+1)
	}
	close(g.open)
	if r := <-renewed; r.status != 404 {
		t.Errorf("A's late renewal, after a watch answered its permit's end: got %d %s, want 404", r.status, r.raw)
	}
	semAcquire(t, srv, name, "B", 5, permits)
	st := call(t, srv, "GET", semPath(name), "")

	for _, wait := range []int{0, 1} {
		r := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d&wait_seconds=%d", semPath(name), i1, wait), "")
		if r.status != 200 || r.json["changed"] != true {
			t.Errorf("watch from index %d (A ended, nothing else) after B's grant, wait %d s: got %d %s, want changed: "+
				"a grant happened since (status: %s)", i1, wait, r.status, r.raw, st.raw)
		}
	}
}

// TestWatchRecordKeepsTimelyRelease: the record (expired_at) is there to
// stop a late renewal from reviving a lease a watcher was told had ended.
// A release revives nothing — it ends the lease, and the index a watcher
// was told (2 × token + 1) stays — so it does not look at the record:
// whether a release issued while its lease was live frees the lock must
// not depend on whether somebody watched.
//
// History (one clock): A takes the lock, ttl 2 s, lock-delay 60 s (t0). At
// t0+1000 A releases; the write is held in flight. At t0+2500 (expired,
// inside the lock-delay) a watcher asks: the watch records the expiry. The
// release lands: 204, and B takes the lock at once (it was 404, the lock
// blocked until t0+62 s, when release looked at the record), as in the
// same history without the watcher (checked first, on another lock).
//
// Promised: a release frees the lock at once, lock-delay or not (service.go
// AcquireRequest: "a release frees it at once"; design.md Lock-delay:
// "release sets free_at = now"); and Late writes: "a request may act only
// on the lease that existed when it was issued" — this one did.
func TestWatchRecordKeepsTimelyRelease(t *testing.T) {
	t.Parallel()
	for _, watched := range []bool{false, true} {
		clock := testenv.NewClock()
		proxy := newProxy(t)
		slow := testenv.Start(t, testenv.Options{Now: clock.Now, StoreEndpoint: proxy.URL()})
		srv := testenv.Start(t, testenv.Options{Now: clock.Now})
		r0 := res(t) + fmt.Sprint(watched)
		tok := token(t, acquireDelay(t, srv, r0, "A", 2, 60))

		g := newGate()
		proxy.SetPlan(holdFirstUpdate(g))
		clock.Advance(1000 * time.Millisecond)
		released := make(chan reply, 1)
		go func() { released <- call(t, slow, "DELETE", lockPath(r0), ownerBody("A", tok)) }()
		<-g.arrived // issued at t0+1000, while the lease is live
		clock.Advance(1500 * time.Millisecond)
		if watched {
			if w := watch(t, srv, r0, 2*tok, 0); index(t, w) != 2*tok+1 {
				t.Fatalf("watch after the expiry: got %s, want index %d", w.raw, 2*tok+1)
			}
		}
		close(g.open)
		rel := <-released
		b := call(t, srv, "POST", lockPath(r0), acquireBody("B", 30))
		switch {
		case !watched && (rel.status != 204 || b.json["acquired"] != true):
			t.Fatalf("without a watcher: release %d %s, B's acquire %s; want 204 and the lock free (the history this test needs)", rel.status, rel.raw, b.raw)
		case watched && (rel.status != 204 || b.json["acquired"] != true):
			t.Errorf("a watcher recorded the expiry before A's release (issued at t0+1000, lease live until t0+2000) landed: "+
				"release got %d %s, B's acquire %s; want 204 and the lock free at once, as without the watcher", rel.status, rel.raw, b.raw)
		}
	}
}

// TestAdminListLeavesOutRecordedLease: the listing leaves out a lease a
// watch recorded expired, unless its lock-delay still blocks. A renewal
// writes free_at = expires_at + lock_delay even without a lock-delay, so
// the filter counts free_at only beyond expires_at; "OR free_at > :now"
// alone let any renewed lease through on an instance whose clock is
// behind the watch's — a lease (expires_at ahead, not force released) that
// status, the watch and force release on the same instance all say has
// ended.
//
// History: srv at clock c, ahead at c + 300 ms. A acquires, ttl 1 (t0),
// renews at t0+100 (ttl 1: expires t0+1100, free_at t0+1100). At srv's
// t0+950 (ahead's t0+1250) a watch on ahead answers the expiry and records
// it. On srv: status 404, a default force release finds nothing to force,
// and the listing shows A's lease.
func TestAdminListLeavesOutRecordedLease(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	ahead := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(300 * time.Millisecond) }})
	r0 := res(t)
	tok := token(t, acquire(t, srv, r0, "A", 1))
	clock.Advance(100 * time.Millisecond)
	if r := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("A", 1, tok)); r.status != 200 {
		t.Fatalf("renew: %d %s", r.status, r.raw)
	}
	clock.Advance(850 * time.Millisecond)
	if w := watch(t, ahead, r0, 2*tok, 0); index(t, w) != 2*tok+1 {
		t.Fatalf("watch ahead: got %s, want index %d (the history this test needs)", w.raw, 2*tok+1)
	}
	st := call(t, srv, "GET", lockPath(r0), "")
	if st.status != 404 {
		t.Fatalf("status behind after the record: got %d %s, want 404 (the history this test needs)", st.status, st.raw)
	}
	fr := call(t, srv, "DELETE", adminPath(r0), reasonBody("review"))
	list := call(t, srv, "GET", "/admin/locks?prefix="+url.QueryEscape(r0), "")
	if n := len(list.json["locks"].([]any)); n != 0 {
		t.Errorf("listing on the instance behind: got %s, want no lease: status there is 404 and a force release answers %d %s",
			list.raw, fr.status, fr.raw)
	}
}

// TestSemaphoreWatchEchoKeepsHolders: the same root cause as
// TestSemaphoreWatchedExpiryHidesNoGrant, seen in an echoed answer's
// holders. The echo leaves out "the first to expire", which stands for the
// permit the caller saw end only when that permit is the one a clock
// behind still sees live; a revived permit would run longer.
//
// History (one clock, N = 3): C takes a permit, ttl 60; A one, ttl 1 (t0).
// A renews at t0+500 with ttl 90; the write is held. At t0+1200 a watcher
// is told A ended, C holds (index i1). The renewal lands: without the
// record it revived A until t0+90.5 s, and the watcher asking again with
// i1 was echoed i1, unchanged, with the holders minus the first to expire
// — C — told that A holds and C does not, a state that never was. With
// it, the renewal is 404 and the answer is i1 with C alone.
func TestSemaphoreWatchEchoKeepsHolders(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{Now: clock.Now, StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	const permits = 3
	semAcquire(t, srv, name, "C", 60, permits)
	pa := semAcquire(t, srv, name, "A", 1, permits)
	i0 := index(t, call(t, srv, "GET", semPath(name)+"/watch", ""))

	g := newGate()
	proxy.SetPlan(holdFirstUpdate(g))
	clock.Advance(500 * time.Millisecond)
	renewed := make(chan reply, 1)
	go func() {
		renewed <- call(t, slow, "POST", semPath(name)+"/renew", slotBody("A", slotOf(t, pa), "ttl_seconds", 90))
	}()
	<-g.arrived
	clock.Advance(700 * time.Millisecond)
	seen := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", semPath(name), i0), "")
	i1 := index(t, seen)
	if hs := seen.json["holders"].([]any); i1 != i0+1 || len(hs) != 1 || hs[0].(map[string]any)["owner"] != "C" {
		t.Fatalf("watch after A's expiry: got %s, want index %d with C alone (the history this test needs)", seen.raw, i0+1)
	}
	close(g.open)
	if r := <-renewed; r.status != 404 {
		t.Errorf("A's late renewal, after a watch answered its permit's end: got %d %s, want 404", r.status, r.raw)
	}
	r := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", semPath(name), i1), "")
	hs, _ := r.json["holders"].([]any)
	if r.status != 200 || len(hs) != 1 || hs[0].(map[string]any)["owner"] != "C" {
		t.Errorf("watch from index %d (told: C holds, A ended) after A's revival: got %d %s, "+
			"want the state the caller saw (C alone) or a change; an unchanged answer naming A and not C never was a state", i1, r.status, r.raw)
	}
}
