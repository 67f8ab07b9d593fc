package integration_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// The five histories of issue 23 ("One lease engine"), each as found: on
// dynalite, with the fault proxy applying writes and then answering 500,
// holding writes until an event, and watches recording expiries. Each test
// asserts what must hold, so it fails on the code that has the bug and
// passes once it is fixed. Every step waits for an event (a request held
// at the proxy, an answer, the store's reply), never a sleep.

// hold is a point at which the fault proxy holds one request until the
// test lets it go: arrived is closed when the request comes, and it is
// forwarded once open is. It is let go when the test ends, whatever
// happened, so the proxy can close.
type hold struct {
	arrived, open chan struct{}
	come, go_     sync.Once
}

// newHold returns a hold let go at tb's end (register it after the proxy:
// cleanups run last-in first-out).
func newHold(tb testing.TB) *hold {
	h := &hold{arrived: make(chan struct{}), open: make(chan struct{})}
	tb.Cleanup(h.release)
	return h
}

// wait is called by a plan: it marks the request arrived and blocks until
// the test lets it go.
func (h *hold) wait() {
	h.come.Do(func() { close(h.arrived) })
	<-h.open
}

// release lets the held request go.
func (h *hold) release() { h.go_.Do(func() { close(h.open) }) }

// await waits for ch to be closed (or to deliver), at most 20 s.
func await[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		tb.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// dynaliteServer starts a server on dynalite's path (the histories were
// found there), through endpoint when not "".
func dynaliteServer(tb testing.TB, clock *testenv.Clock, endpoint string) *testenv.Server {
	tb.Helper()
	opt := testenv.Options{Store: testenv.StoreDynalite, StoreEndpoint: endpoint, StoreBudget: 10 * time.Second}
	if clock != nil {
		opt.Now = clock.Now
	}
	return testenv.Start(tb, opt)
}

// ownerWhere returns the first owner prefix-<i> whose home slots satisfy
// ok.
func ownerWhere(tb testing.TB, prefix string, ok func(home func(permits int64) int) bool) string {
	tb.Helper()
	for i := range 10000 {
		o := fmt.Sprintf("%s-%d", prefix, i)
		if ok(func(n int64) int { return locklogic.HomeSlot(locklogic.Caller{Owner: o}, n) }) {
			return o
		}
	}
	tb.Fatal("no owner found")
	return ""
}

// TestEngine_GhostPlaceAfterFailedJoin (issue 23, history 1): a holder has
// the lock; W's waiting acquire joins the queue, and the join lands but is
// answered 500, as are the SDK's retries of it, so W is answered 503. The
// wait's leave used the view from before the join, found no entry and wrote
// nothing: W's entry stayed at the head of the queue until its until (the
// round's end plus QueueGrace, ~22 s), a ghost that keeps every plain
// acquire out once the holder releases. Once W has its answer, W may keep
// a place only when the answer gives it its ticket; without one, the queue
// must hold no entry of W, and a plain acquire after the release is
// granted.
func TestEngine_GhostPlaceAfterFailedJoin(t *testing.T) {
	t.Parallel()
	proxy := testenv.NewProxy(t, testenv.StoreDynalite, nil)
	slow := dynaliteServer(t, nil, proxy.URL())
	srv := dynaliteServer(t, nil, "")
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 30)
	var joins atomic.Int32
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" && strings.Contains(string(r.Body), "list_append") {
			joins.Add(1) // the join, and each SDK retry of it
			return faultproxy.Action{Fault: faultproxy.AppliedThen500}
		}
		return faultproxy.Action{}
	})
	w := await(t, fifoWait(t, slow, r0, "w", 20, ""), "W's answer")
	if joins.Load() == 0 {
		t.Fatalf("W's answer %d %s came without a join: not the history this test needs", w.status, w.raw)
	}
	ticket, _ := w.json["queue_ticket"].(string)
	t.Logf("W (its join applied, then 500 ×%d): answered %d %s", joins.Load(), w.status, w.raw)
	ghost := false
	for _, e := range queueOf(t, srv, r0) {
		if e.owner == "w" && e.id != ticket {
			ghost = true
			t.Errorf("after W's answer (%d, queue_ticket %q) its entry %q stays in the queue until %s: a ghost place, "+
				"want none (or the answer to carry its ticket)", w.status, ticket, e.id, time.UnixMilli(e.until).Format(time.RFC3339Nano))
		}
	}
	release(t, srv, r0, "holder", held)
	if ticket != "" && !ghost {
		return // W kept its place legitimately: the next waiter is W
	}
	if r := call(t, srv, "POST", lockPath(r0), acquireBody("d", 30)); r.json["acquired"] != true {
		t.Errorf("a plain acquire after the holder's release: got %d %s, want the lock (W has no place)", r.status, r.raw)
	}
}

// TestEngine_ChangeOfNRacesLateRenewal (issue 23, history 2): N = 3, A
// holds its home slot 0 with ttl 1. A's renew is answered 500 without
// landing, and the SDK's retry (the same :now) is held. A's permit
// expires. X asks for 5 permits: its view shows nothing blocking, so it
// plans the change of N, and that write is held. A's retry lands and
// revives slot 0; then X's change of N lands: it conditioned only the
// slots at or above the new N, not slot 0, which its view judged ended.
// Under N = 5 A's home is another slot and A has no marker, so A's next
// acquire is granted there: one owner, two live permits. One permit per
// owner must hold, whatever X and A are answered.
func TestEngine_ChangeOfNRacesLateRenewal(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	proxyA := testenv.NewProxy(t, testenv.StoreDynalite, nil)
	proxyX := testenv.NewProxy(t, testenv.StoreDynalite, nil)
	slowA := dynaliteServer(t, clock, proxyA.URL())
	slowX := dynaliteServer(t, clock, proxyX.URL())
	srv := dynaliteServer(t, clock, "")
	name := res(t)
	a := ownerWhere(t, "a", func(home func(int64) int) bool { return home(3) == 0 && home(5) != 0 })
	x := ownerWhere(t, "x", func(home func(int64) int) bool {
		return home(5) != 0 && home(5) != locklogic.HomeSlot(locklogic.Caller{Owner: a}, 5)
	})
	pa := semAcquire(t, srv, name, a, 1, 3)
	if slotOf(t, pa) != 0 {
		t.Fatalf("A got slot %d, want its home 0", slotOf(t, pa))
	}

	retry, change := newHold(t), newHold(t)
	var aWrites, xWrites atomic.Int32
	proxyA.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op != "UpdateItem" {
			return faultproxy.Action{}
		}
		switch aWrites.Add(1) {
		case 1:
			return faultproxy.Action{Fault: faultproxy.InternalError} // not applied: the SDK sends it again
		case 2:
			retry.wait()
		}
		return faultproxy.Action{}
	})
	proxyX.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" && xWrites.Add(1) == 2 { // the guess is refused (N is 3); then the change of N
			change.wait()
		}
		return faultproxy.Action{}
	})
	renewed := make(chan reply, 1)
	go func() {
		renewed <- call(t, slowA, "POST", semPath(name)+"/renew", slotBody(a, 0, "ttl_seconds", 30, "fencing_token", token(t, pa)))
	}()
	await(t, retry.arrived, "A's renew retry")
	clock.Advance(1100 * time.Millisecond) // A's permit has expired
	xAnswer := make(chan reply, 1)
	go func() { xAnswer <- call(t, slowX, "POST", semPath(name), semAcquireBody(x, 30, 5)) }()
	await(t, change.arrived, "X's change of N")
	retry.release()
	if r := await(t, renewed, "A's renew"); r.status != 200 {
		t.Fatalf("A's renew retry: got %d %s, want it to land and revive slot 0 (the history this test needs)", r.status, r.raw)
	}
	change.release()
	xr := await(t, xAnswer, "X's acquire")
	again := call(t, srv, "POST", semPath(name), semAcquireBody(a, 30, 5))
	if n, st := countOwner(t, srv, name, a); n > 1 {
		t.Errorf("A holds %d live permits (one permit per owner): X's change of N answered %d %s; A's acquire under N = 5 "+
			"answered %d %s; status %s", n, xr.status, xr.raw, again.status, again.raw, st.raw)
	}
}

// TestEngine_LateReacquireAfterWatchedExpiry (issue 23, history 3): N = 1
// (or a lock), A holds with ttl 1 and W waits in the queue. A's plain
// re-acquire is answered 500 without landing, and the SDK's retry is held.
// The permit expires and a watch answers the expiry, recording it (y0, or
// the lock's expired_at). A's retry then lands. The lock's own-lease
// branch refuses it (attribute_not_exists(expired_at)); the slot's lacked
// the clause, so A was granted ahead of the queued W. What a watcher was
// told has ended must stay ended: A's late retry takes nothing, and W, the
// head, is granted.
func TestEngine_LateReacquireAfterWatchedExpiry(t *testing.T) {
	t.Parallel()
	for _, kind := range []struct {
		name    string
		key     func(string) string
		path    func(string) string
		body    func(owner string, ttl int) string
		wait    func(t *testing.T, srv *testenv.Server, name, owner string, wait int) <-chan timedReply
		holds   func(tb testing.TB, srv *testenv.Server, name, owner string) (int, reply)
		granted func(tb testing.TB, r reply) bool
	}{
		{"Lock", func(n string) string { return n }, lockPath, acquireBody,
			func(t *testing.T, srv *testenv.Server, name, owner string, wait int) <-chan timedReply {
				return fifoWait(t, srv, name, owner, wait, "")
			},
			func(tb testing.TB, srv *testenv.Server, name, owner string) (int, reply) {
				r := call(tb, srv, "GET", lockPath(name), "")
				if r.status == 200 && r.json["owner"] == owner {
					return 1, r
				}
				return 0, r
			},
			func(tb testing.TB, r reply) bool { return r.status == 200 && r.json["acquired"] == true }},
		{"Semaphore", func(n string) string { return locklogic.SemaphorePrefix + n }, semPath,
			func(owner string, ttl int) string { return semAcquireBody(owner, ttl, 1) },
			func(t *testing.T, srv *testenv.Server, name, owner string, wait int) <-chan timedReply {
				return semWaitFor(t, srv, name, owner, 1, wait, "")
			},
			countOwner,
			func(tb testing.TB, r reply) bool { return r.status == 200 && r.json["acquired"] == true }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock()
			proxyA := testenv.NewProxy(t, testenv.StoreDynalite, nil)
			proxyW := testenv.NewProxy(t, testenv.StoreDynalite, nil)
			slowA := dynaliteServer(t, clock, proxyA.URL())
			slowW := dynaliteServer(t, clock, proxyW.URL())
			srv := dynaliteServer(t, clock, "")
			name := res(t)
			if r := call(t, srv, "POST", kind.path(name), kind.body("a", 1)); !kind.granted(t, r) {
				t.Fatalf("A: got %d %s, want it granted", r.status, r.raw)
			}
			// W waits long enough for every step below on a loaded
			// machine; its wait ends by the real clock (this one stands
			// still), so a W never served answers held within ~8 s.
			wAnswer := kind.wait(t, slowW, name, "w", 8)
			awaitJoin(t, srv, kind.key(name), "w", 1)
			wGrant := newHold(t)
			proxyW.SetPlan(func(r faultproxy.Request) faultproxy.Action {
				if r.Op == "UpdateItem" {
					wGrant.wait() // W's grant, once it sees the permit free: after A's retry
				}
				return faultproxy.Action{}
			})
			retry := newHold(t)
			var aWrites atomic.Int32
			proxyA.SetPlan(func(r faultproxy.Request) faultproxy.Action {
				if r.Op != "UpdateItem" {
					return faultproxy.Action{}
				}
				switch aWrites.Add(1) {
				case 1:
					return faultproxy.Action{Fault: faultproxy.InternalError}
				case 2:
					retry.wait()
				}
				return faultproxy.Action{}
			})
			// The watcher's index while A holds, then A's re-acquire.
			index := json.Number("0")
			if r := call(t, srv, "GET", kind.path(name)+"/watch?index=0", ""); r.status != 200 {
				t.Fatalf("watch: got %d %s", r.status, r.raw)
			} else {
				index = r.json["index"].(json.Number)
			}
			aAnswer := make(chan reply, 1)
			go func() { aAnswer <- call(t, slowA, "POST", kind.path(name), kind.body("a", 30)) }()
			await(t, retry.arrived, "A's re-acquire retry")
			clock.Advance(1100 * time.Millisecond) // A's lease has expired
			if r := call(t, srv, "GET", kind.path(name)+"/watch?index="+index.String(), ""); r.status != 200 || r.json["changed"] != true {
				t.Fatalf("the watch of the expiry: got %d %s, want it answered changed (the history this test needs)", r.status, r.raw)
			}
			retry.release()
			ar := await(t, aAnswer, "A's re-acquire")
			if n, st := kind.holds(t, srv, name, "a"); n != 0 || kind.granted(t, ar) {
				t.Errorf("A's re-acquire, issued before the expiry a watch answered and landing after it, ahead of the queued W: "+
					"answered %d %s; A holds %d (status %s); want nothing taken", ar.status, ar.raw, n, st.raw)
			}
			wGrant.release()
			if wr := await(t, wAnswer, "W's answer"); !kind.granted(t, wr.reply) {
				t.Errorf("W, the head of the queue: got %d %s, want it granted once the lease a watch saw end was free", wr.status, wr.raw)
			}
		})
	}
}

// TestEngine_SemaphoreAcquireOwnGrantIsAcquired (issue 23, history 4): a
// semaphore acquire's write lands but is answered 500, so the SDK's retry
// is refused (a write away from home requires the caller's marker absent,
// and the first attempt set it). The service reads the item and finds its
// own grant id, yet planned another write instead of answering with that
// grant; when no write was left to make — the wait's end had passed
// (AwayFromHomeWaitEnded) or it was the 4th and last write (FourthWrite) —
// it answered acquired:false while the caller held a live permit, blocking
// a slot until its TTL. A lock acquire answers its own grant whatever
// happens; a semaphore acquire must too.
func TestEngine_SemaphoreAcquireOwnGrantIsAcquired(t *testing.T) {
	t.Parallel()
	// check fails unless c's acquire answer r is granted with the permit
	// the status shows c holding.
	check := func(t *testing.T, srv *testenv.Server, name, c string, r reply) {
		t.Helper()
		n, st := countOwner(t, srv, name, c)
		if n != 1 {
			t.Fatalf("C holds %d live permits, want 1 (the history this test needs: its write landed): status %s", n, st.raw)
		}
		if r.status != 200 || r.json["acquired"] != true {
			t.Errorf("C's acquire: got %d %s while C holds a live permit (status %s), want that permit", r.status, r.raw, st.raw)
		}
	}
	t.Run("AwayFromHomeWaitEnded", func(t *testing.T) {
		t.Parallel()
		clock := testenv.NewClock()
		proxy := testenv.NewProxy(t, testenv.StoreDynalite, nil)
		slow := dynaliteServer(t, clock, proxy.URL())
		srv := dynaliteServer(t, clock, "")
		name := res(t)
		const permits = 2
		c := ownerWhere(t, "c", func(home func(int64) int) bool { return home(permits) == 0 })
		o := ownerWhere(t, "o", func(home func(int64) int) bool { return home(permits) == 0 })
		semAcquire(t, srv, name, o, 30, permits) // C's home slot 0 is held
		retry := newHold(t)
		var writes atomic.Int32
		proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
			if r.Op != "UpdateItem" {
				return faultproxy.Action{}
			}
			switch writes.Add(1) {
			case 2: // the write of slot 1, away from home, setting C's marker
				return faultproxy.Action{Fault: faultproxy.AppliedThen500}
			case 3: // the SDK's retry of it: held while the wait's end passes
				retry.wait()
			}
			return faultproxy.Action{}
		})
		answer := make(chan reply, 1)
		go func() {
			answer <- call(t, slow, "POST", semWaitPath(name), semBody(map[string]any{"owner": c, "ttl_seconds": 30, "permits": permits,
				"wait_seconds": 1}))
		}()
		await(t, retry.arrived, "the SDK's retry of C's write")
		clock.Advance(time.Second) // past the wait's end (arrival + 1 s − GrantGuard)
		retry.release()
		check(t, srv, name, c, await(t, answer, "C's acquire"))
	})
	t.Run("FourthWrite", func(t *testing.T) {
		t.Parallel()
		proxy := testenv.NewProxy(t, testenv.StoreDynalite, nil)
		slow := dynaliteServer(t, nil, proxy.URL())
		srv := dynaliteServer(t, nil, "")
		name := res(t)
		const permits = 4
		c := ownerWhere(t, "c", func(home func(int64) int) bool { return home(permits) == 0 })
		o := ownerWhere(t, "o", func(home func(int64) int) bool { return home(permits) == 0 })
		semAcquire(t, srv, name, o, 30, permits) // C's home slot 0 is held for good
		// occupy takes the three other slots (others' acquires: C's next
		// write, planned from a read that showed them free, is refused);
		// free gives them back before C's next read.
		var taken []map[string]any
		others := []string{"p1", "p2", "p3"}
		occupy := func() {
			for _, p := range others {
				taken = append(taken, semAcquire(t, srv, name, p, 30, permits))
			}
		}
		free := func() {
			for i, p := range taken {
				semRelease(t, srv, name, others[i], p)
			}
			taken = nil
		}
		type readStep struct {
			before, answered, after *hold
		}
		// C's reads after its refused writes 1, 2 and 3: the first two
		// show free slots that others take before C writes; the third
		// shows them free for good.
		reads := []readStep{{nil, newHold(t), newHold(t)}, {newHold(t), newHold(t), newHold(t)}, {newHold(t), nil, nil}}
		var nWrites, nReads atomic.Int32
		proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
			switch r.Op {
			case "UpdateItem":
				if nWrites.Add(1) == 4 { // the 4th write: applied, then 500 (the SDK's retry is refused)
					return faultproxy.Action{Fault: faultproxy.AppliedThen500}
				}
			case "GetItem":
				i := int(nReads.Add(1)) - 1
				if i >= len(reads) {
					return faultproxy.Action{}
				}
				s := reads[i]
				if s.before != nil {
					s.before.wait()
				}
				if s.answered == nil {
					return faultproxy.Action{}
				}
				answered := make(chan struct{})
				go func() { <-answered; s.answered.wait() }()
				return faultproxy.Action{Answered: answered, HoldAnswer: s.after.open}
			}
			return faultproxy.Action{}
		})
		answer := make(chan reply, 1)
		go func() { answer <- call(t, slow, "POST", semPath(name), semAcquireBody(c, 30, permits)) }()
		for i, s := range reads {
			if s.before != nil {
				await(t, s.before.arrived, fmt.Sprintf("C's read %d", i+1))
				free()
				s.before.release()
			}
			if s.answered != nil {
				await(t, s.answered.arrived, fmt.Sprintf("the store's answer to C's read %d", i+1))
				occupy()
				s.answered.release()
				s.after.release()
			}
		}
		r := await(t, answer, "C's acquire")
		if got := nWrites.Load(); got < 5 {
			t.Fatalf("C made %d write attempts, want 5 (4 writes, the last retried by the SDK): not the history this test needs", got)
		}
		check(t, srv, name, c, r)
	})
}

// TestEngine_SemaphoreAcquireHasOneDeadline (issue 23, history 5): with
// every store call slowed by 2.5 s, a lock acquire answers in ~2.5 s, but a
// plain semaphore acquire whose guess is refused gave each of its calls (a
// write, a read, a write) a store budget of its own and answered in ~7.5
// s. Every request has one store budget from its arrival (3 s for a
// non-waiting request): the semaphore acquire must answer within it plus
// a margin for a loaded machine, as the lock acquire does.
func TestEngine_SemaphoreAcquireHasOneDeadline(t *testing.T) {
	t.Parallel()
	const slowdown, margin = 2500 * time.Millisecond, time.Second
	proxy := testenv.NewProxy(t, testenv.StoreDynalite, nil)
	slow := testenv.Start(t, testenv.Options{Store: testenv.StoreDynalite, StoreEndpoint: proxy.URL()}) // the default budget
	srv := dynaliteServer(t, nil, "")
	name, r0 := res(t), res(t)
	const permits = 2
	c := ownerWhere(t, "c", func(home func(int64) int) bool { return home(permits) == 0 })
	o := ownerWhere(t, "o", func(home func(int64) int) bool { return home(permits) == 0 })
	semAcquire(t, srv, name, o, 30, permits) // C's guess is refused; slot 1 is free
	acquire(t, srv, r0, o, 30)
	proxy.SetPlan(func(faultproxy.Request) faultproxy.Action {
		return faultproxy.Action{Fault: faultproxy.Delay, Delay: slowdown}
	})
	budget := api.StoreBudget // 3 s: a non-waiting request's
	for _, tc := range []struct{ what, path, body string }{
		{"lock acquire", lockPath(r0), acquireBody(c, 30)},
		{"semaphore acquire", semPath(name), semAcquireBody(c, 30, permits)},
	} {
		start := time.Now()
		r := call(t, slow, "POST", tc.path, tc.body)
		took := time.Since(start)
		t.Logf("%s, every store call slowed by %v: answered %d in %v", tc.what, slowdown, r.status, took.Round(time.Millisecond))
		if took > budget+margin {
			t.Errorf("%s: answered %d %s in %v, want within the store budget %v (+ %v)", tc.what, r.status, r.raw,
				took.Round(time.Millisecond), budget, margin)
		}
	}
}
