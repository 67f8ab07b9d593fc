package integration_test

// Reproductions of the final review of "a watched expiry is final" (the
// lock watch records an expiry it answers: expired_at) and of the
// semaphore fixes (the semaphore watch keeps to the asked index; a permit
// renewal requires its owner marker). Each test states its history and the
// property it checks; each fails on the code under review.

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

// TestReviewSemaphoreRevivalHidesGrant: the semaphore watch keeps to the
// asked index instead of recording an expiry (as the lock watch now does),
// but its index, 2 × counter + 1 − live permits, is not one-to-one with
// states once a permit can come back: a revival takes one off, the next
// grant adds it back, and the two cancel.
//
// History (one clock, N = 3): A takes a permit at home, ttl 1 s (t0). At
// t0+500 A renews (ttl 30); the write is held in flight. At t0+1200 a
// watcher asks and is told A's permit ended (index i1 = i0 + 1, no
// holders). The renewal lands: :now t0+500 < expires_at, A at home with no
// marker: 200, the permit is back (the design allows it: "a late renewal's
// revival"). B then takes a permit. The index is 2(c+1) + 1 − 2 = i1 again:
// the watcher asking with i1 is told "unchanged" although a permit was
// granted since, and keeps being told so until one of the two permits ends
// (up to A's revived 30 s).
//
// design.md (Rules that carry over): "a grant adds 2 to the first part and
// at most one live permit, a permit's end takes one, so it grows at every
// grant and every end". Here a grant leaves it where a watcher already is.
func TestReviewSemaphoreRevivalHidesGrant(t *testing.T) {
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
	if r := <-renewed; r.status != 200 {
		t.Fatalf("A's late renewal: got %d %s, want 200 (a revival at home: the history this test needs)", r.status, r.raw)
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

// TestReviewRecordRefusesTimelyRelease: the record (expired_at) is there to
// stop a late renewal from reviving a lease a watcher was told had ended.
// A release revives nothing — it ends the lease, and the index a watcher
// was told (2 × token + 1) stays — yet release also requires
// attribute_not_exists(expired_at). So whether a release issued while its
// lease was live frees the lock now depends on whether somebody watched.
//
// History (one clock): A takes the lock, ttl 2 s, lock-delay 60 s (t0). At
// t0+1000 A releases; the write is held in flight. At t0+2500 (expired,
// inside the lock-delay) a watcher asks: the watch records the expiry. The
// release lands: 404, and the lock stays blocked for everyone until t0+62 s.
// The same history without the watcher (checked first, on another lock):
// the release is 204 and B takes the lock at once.
//
// Promised: a release frees the lock at once, lock-delay or not (service.go
// AcquireRequest: "a release frees it at once"; design.md Lock-delay:
// "release sets free_at = now"); and Late writes: "a request may act only
// on the lease that existed when it was issued" — this one did.
func TestReviewRecordRefusesTimelyRelease(t *testing.T) {
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

// TestReviewListShowsRecordedLease: the listing's filter is meant to leave
// out a lease a watch recorded expired ("(#e > :now AND
// attribute_not_exists(#xa)) OR #f > :now"), but a renewal writes free_at =
// expires_at + lock_delay even without a lock-delay, so for any renewed
// lease the second term lets it through: on an instance whose clock is
// behind the watch's, the listing shows a lease (expires_at ahead, not
// force released) that status, the watch and force release on the same
// instance all say has ended.
//
// History: srv at clock c, ahead at c + 300 ms. A acquires, ttl 1 (t0),
// renews at t0+100 (ttl 1: expires t0+1100, free_at t0+1100). At srv's
// t0+950 (ahead's t0+1250) a watch on ahead answers the expiry and records
// it. On srv: status 404, a default force release finds nothing to force,
// and the listing shows A's lease.
func TestReviewListShowsRecordedLease(t *testing.T) {
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

// TestReviewSemaphoreEchoNamesWrongHolders: the same root cause as
// TestReviewSemaphoreRevivalHidesGrant (a semaphore expiry answered by a
// watch is not recorded, so a late renewal can revive it), seen in the
// echoed answer's holders. The echo leaves out "the first to expire",
// which stands for the permit the caller saw end only when that permit is
// the one a clock behind still sees live; a revived permit runs longer.
//
// History (one clock, N = 3): C takes a permit, ttl 60; A one, ttl 1 (t0).
// A renews at t0+500 with ttl 90; the write is held. At t0+1200 a watcher
// is told A ended, C holds (index i1). The renewal lands (200, A back until
// t0+90.5 s). The watcher asks again with i1: it is echoed i1, unchanged,
// with the holders minus the first to expire — C — so it is told that A
// holds and C does not: the permit it saw end is back, the one it saw live
// is gone, and "changed" is false.
//
// design.md: "the answer keeps to the caller's index and leaves out that
// many holders, the first to expire" — meant to show the caller's state,
// here it shows one that never was.
func TestReviewSemaphoreEchoNamesWrongHolders(t *testing.T) {
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
	if r := <-renewed; r.status != 200 {
		t.Fatalf("A's late renewal: got %d %s, want 200 (the history this test needs)", r.status, r.raw)
	}
	r := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", semPath(name), i1), "")
	hs, _ := r.json["holders"].([]any)
	if r.status != 200 || len(hs) != 1 || hs[0].(map[string]any)["owner"] != "C" {
		t.Errorf("watch from index %d (told: C holds, A ended) after A's revival: got %d %s, "+
			"want the state the caller saw (C alone) or a change; an unchanged answer naming A and not C never was a state", i1, r.status, r.raw)
	}
}
