package integration_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// Waiting for a semaphore's permit on dynalite: the lock's queue on the
// semaphore's item. Waiters are granted in arrival order, a plain acquire
// does not pass a queued waiter, a departed waiter's place lapses, a slot's
// lock-delay holds for the head, and an SDK retry of the head's landed
// grant answers that grant. Tests wait on events (an entry in the item, an
// answer), not sleeps.

// semWaitFor sends a waiting acquire of a permit of name (of permits) in
// the background, with ticket when not ""; the answer arrives on the
// channel.
func semWaitFor(t *testing.T, srv *testenv.Server, name, owner string, permits, wait int, ticket string) <-chan timedReply {
	t.Helper()
	m := map[string]any{"owner": owner, "ttl_seconds": 30, "permits": permits, "wait_seconds": wait}
	if ticket != "" {
		m["queue_ticket"] = ticket
	}
	body := semBody(m)
	out := make(chan timedReply, 1)
	go func() {
		r := call(t, srv, "POST", semWaitPath(name), body)
		out <- timedReply{r, time.Now()}
	}()
	return out
}

// semGranted returns the permit of a granted answer, and fails the test
// otherwise.
func semGranted(tb testing.TB, who string, r timedReply) map[string]any {
	tb.Helper()
	if r.status != 200 || r.json["acquired"] != true {
		tb.Fatalf("%s: got %d %s, want a permit", who, r.status, r.raw)
	}
	return r.json["permit"].(map[string]any)
}

// semRelease releases owner's permit p of name.
func semRelease(tb testing.TB, srv *testenv.Server, name, owner string, p map[string]any) {
	tb.Helper()
	if r := call(tb, srv, "DELETE", semPath(name), slotBody(owner, slotOf(tb, p), "fencing_token", token(tb, p))); r.status != 204 {
		tb.Fatalf("release of %q's permit of %q: got %d %s", owner, name, r.status, r.raw)
	}
}

// TestSemaphoreWaitArrivalOrder: a semaphore of 2 permits, both held; six
// waiters arrive in a known order (each starts once the one before it is
// in the queue). The holders release, and every waiter releases its permit
// as soon as it is answered: the grants' tokens (one counter) come in
// arrival order, whichever answer comes first. It also counts what the
// waiters' rounds cost.
func TestSemaphoreWaitArrivalOrder(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	key := locklogic.SemaphorePrefix + name
	const permits, n = 2, 6
	h0 := semAcquire(t, srv, name, "h0", 30, permits)
	h1 := semAcquire(t, srv, name, "h1", 30, permits)
	answers := make([]<-chan timedReply, n)
	srv.Ops.Take()
	for i := range n {
		owner := "w" + strconv.Itoa(i)
		answers[i] = semWaitFor(t, srv, name, owner, permits, 20, "")
		awaitJoin(t, srv, key, owner, i+1)
	}
	joined := srv.Ops.Take()
	semRelease(t, srv, name, "h0", h0)
	semRelease(t, srv, name, "h1", h1)
	tokens := make([]int64, n)
	pending := map[int]bool{}
	for i := range n {
		pending[i] = true
	}
	var order []int
	for len(pending) > 0 {
		got, answer := firstAnswer(answers, pending)
		delete(pending, got)
		order = append(order, got)
		owner := "w" + strconv.Itoa(got)
		p := semGranted(t, owner, answer)
		tokens[got] = token(t, p)
		semRelease(t, srv, name, owner, p)
	}
	for i := 1; i < n; i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens by arrival %v (answers in the order %v): want them increasing, the grants in arrival order", tokens, order)
		}
	}
	if q := queueOf(t, srv, key); len(q) != 0 {
		t.Errorf("queue after every waiter was served: %+v, want empty", q)
	}
	all := srv.Ops.Take()
	// Before the releases: each waiter's first attempt (its guess, refused:
	// the semaphore is full), the consistent read that explains it
	// (dynalite returns no old item) and its join, plus the watch reads;
	// after them: the holders' releases, a grant and a release each, and
	// the watch.
	t.Logf("requests while %d waiters joined: %v; from the releases to the last waiter's release: %v", n, joined, all)
	if joined["UpdateItem"] != 2*n || joined["GetItem"] < n {
		t.Errorf("while joining: got %v, want %d UpdateItem (a first attempt and a join each) and at least %d GetItem", joined, 2*n, n)
	}
	if all["UpdateItem"] != 2+2*n {
		t.Errorf("writes from the releases on: got %d, want %d (2 releases, then a grant and a release each)", all["UpdateItem"], 2+2*n)
	}
}

// TestSemaphoreWaitNoBarging: while a waiter is queued, a plain acquire of
// a semaphore with a free slot does not take it, not even in the moment
// between the release and the head's grant (the head's reads are held
// back so that the moment lasts): it is answered full, without free_at,
// in one write and the read that explains it. A holder's re-acquire of its
// own live permit is no barge. Once the queue is empty, the plain acquire
// takes the slot in one request.
func TestSemaphoreWaitNoBarging(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	const permits = 2
	a := semOwner(t, "a", permits, 0, false)
	b := semOwner(t, "b", permits, 1, false)
	barger := semOwner(t, "barger", permits, 0, false) // a's slot is its guess
	pa := semAcquire(t, srv, name, a, 30, permits)
	pb := semAcquire(t, srv, name, b, 30, permits)
	if slotOf(t, pa) != 0 || slotOf(t, pb) != 1 {
		t.Fatalf("got slots %d and %d, want 0 and 1", slotOf(t, pa), slotOf(t, pb))
	}
	answer := semWaitFor(t, slow, name, "waiter", permits, 10, "")
	awaitJoin(t, srv, locklogic.SemaphorePrefix+name, "waiter", 1)
	// b re-acquires its own live permit: no barge.
	if again := semAcquire(t, srv, name, b, 30, permits); slotOf(t, again) != 1 || token(t, again) <= token(t, pb) {
		t.Fatalf("b's re-acquire while a waiter is queued: got %v, want its slot 1 with a new token", again)
	}
	// From now on the waiter's reads are held at the proxy until the
	// barging attempt has been answered: it cannot see the release first
	// (an event, not a delay a loaded machine could outrun).
	reads := newHold(t)
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "GetItem" {
			reads.wait()
		}
		return faultproxy.Action{}
	})
	await(t, reads.arrived, "the waiter's next read")
	semRelease(t, srv, name, a, pa)
	srv.Ops.Take()
	r := call(t, srv, "POST", semPath(name), semAcquireBody(barger, 30, permits))
	if r.status != 200 || r.json["acquired"] != false || r.json["free_at"] != nil || r.header.Get("Retry-After") != "" {
		t.Fatalf("plain acquire of a free slot while a waiter is queued: got %d %s, want acquired:false without free_at", r.status, r.raw)
	}
	// A refused write is explained by a read on dynalite's path; on the
	// path AWS takes the refusal carries the item.
	wantReads := 1
	if srv.Store == testenv.StoreOldItem {
		wantReads = 0
	}
	if ops := srv.Ops.Take(); ops["UpdateItem"] != 1 || ops["GetItem"] != wantReads || len(ops) != 1+wantReads {
		t.Errorf("the refused acquire sent %v, want 1 UpdateItem and %d GetItem (%s)", ops, wantReads, srv.Store)
	}
	reads.release()
	p := semGranted(t, "waiter", <-answer)
	if slotOf(t, p) != 0 {
		t.Errorf("the waiter got slot %d, want the freed 0", slotOf(t, p))
	}
	semRelease(t, srv, name, "waiter", p)
	srv.Ops.Take()
	if r := call(t, srv, "POST", semPath(name), semAcquireBody(barger, 30, permits)); r.json["acquired"] != true {
		t.Fatalf("plain acquire once the queue is empty: got %d %s, want a permit", r.status, r.raw)
	}
	if ops := srv.Ops.Take(); ops["UpdateItem"] != 1 || len(ops) != 1 {
		t.Errorf("the acquire sent %v, want 1 UpdateItem", ops)
	}
}

// TestSemaphoreWaitDepartedWaiter: a semaphore waiter whose round ends
// without a permit, and that never comes back, keeps its place only until
// its until (the round's end plus QueueGrace); then the waiter behind it
// is served. A plain acquire is not kept out by lapsed entries alone.
func TestSemaphoreWaitDepartedWaiter(t *testing.T) {
	t.Parallel()
	t.Run("NextIsServed", func(t *testing.T) {
		t.Parallel()
		srv := testenv.Start(t, testenv.Options{})
		name := res(t)
		key := locklogic.SemaphorePrefix + name
		held := semAcquire(t, srv, name, "holder", 30, 1)
		gone := semWaitFor(t, srv, name, "gone", 1, 2, "")
		q := awaitJoin(t, srv, key, "gone", 1)
		next := semWaitFor(t, srv, name, "next", 1, 20, "")
		awaitJoin(t, srv, key, "next", 2)
		g := <-gone
		if g.status != 200 || g.json["acquired"] != false || g.json["queue_ticket"] != q[0].id || g.json["free_at"] == nil {
			t.Fatalf("the departing waiter's round: got %d %s, want full with free_at and its ticket %q", g.status, g.raw, q[0].id)
		}
		semRelease(t, srv, name, "holder", held)
		at := msOf(t, semGranted(t, "next", <-next), "acquired_at")
		if at < q[0].until {
			t.Errorf("next was granted %d ms before the departed waiter's place lapsed: it must wait for it", q[0].until-at)
		}
		// The second in line reads every 100 ms on average (150 ms at
		// most); slack for a loaded machine.
		if at > q[0].until+1500 {
			t.Errorf("next was granted %d ms after the departed waiter's place lapsed, want within 1.5 s", at-q[0].until)
		}
		if q := queueOf(t, srv, key); len(q) != 0 {
			t.Errorf("queue after the grant: %+v, want the lapsed entry removed", q)
		}
	})
	t.Run("PlainAcquireOverLapsedEntries", func(t *testing.T) {
		t.Parallel()
		srv := testenv.Start(t, testenv.Options{}) // its own: the requests it counts are its own
		name := res(t)
		held := semAcquire(t, srv, name, "holder", 30, 1)
		gone := semWaitFor(t, srv, name, "gone", 1, 1, "")
		q := awaitJoin(t, srv, locklogic.SemaphorePrefix+name, "gone", 1)
		<-gone
		semRelease(t, srv, name, "holder", held)
		if r := call(t, srv, "POST", semPath(name), semAcquireBody("plain", 30, 1)); r.json["acquired"] != false {
			t.Fatalf("plain acquire while the waiter's place is live: got %s, want full", r.raw)
		}
		time.Sleep(time.Until(time.UnixMilli(q[0].until + 10)))
		srv.Ops.Take()
		if r := call(t, srv, "POST", semPath(name), semAcquireBody("plain", 30, 1)); r.json["acquired"] != true {
			t.Fatalf("plain acquire once every queued place lapsed: got %s, want a permit", r.raw)
		}
		if ops := srv.Ops.Take(); ops["UpdateItem"] != 1 || len(ops) != 1 {
			t.Errorf("the acquire sent %v, want 1 UpdateItem", ops)
		}
	})
}

// TestSemaphoreWaitGrantGuard: with a waiter queued, a slot freed in the
// last half second of its wait is not taken: the head writes no grant its
// caller may no longer be waiting for.
func TestSemaphoreWaitGrantGuard(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	held := semAcquire(t, srv, name, "holder", 30, 1)
	answer := semWaitFor(t, srv, name, "waiter", 1, 2, "")
	awaitJoin(t, srv, locklogic.SemaphorePrefix+name, "waiter", 1)
	// The waiter arrived at the clock's time (which stands still): move
	// it into the last GrantGuard of the wait, then free the slot. A
	// real-time sleep raced the waiter's arrival on a loaded machine.
	clock.Advance(2*time.Second - locklogic.GrantGuard/2)
	semRelease(t, srv, name, "holder", held)
	if got := <-answer; got.json["acquired"] != false || got.json["queue_ticket"] == nil {
		t.Fatalf("waiter: got %d %s, want full with its place: the slot came free in the last %s of its wait", got.status, got.raw,
			locklogic.GrantGuard)
	}
	if holders, st := semHolders(t, srv, name); len(holders) != 0 {
		t.Errorf("status: %s, want no holder", st.raw)
	}
}

// TestSemaphoreWaitPermitsMismatch: a waiting acquire with another N than
// the held semaphore's is 409 permits-mismatch at once, not a wait.
func TestSemaphoreWaitPermitsMismatch(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	semAcquire(t, srv, name, "holder", 30, 1)
	start := time.Now()
	r := <-semWaitFor(t, srv, name, "waiter", 2, 10, "")
	wantProblem(t, r.reply, 409, "permits-mismatch")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("answered after %s, want at once", d)
	}
	if q := queueOf(t, srv, locklogic.SemaphorePrefix+name); len(q) != 0 {
		t.Errorf("queue %+v, want none: a mismatch does not queue", q)
	}
}

// TestSemaphoreWaitHeadBlockedByOwnNewerPermit: a semaphore of 2,
// full (h0, h1). Two waiting acquires of one owner "A" (two processes
// given the same --owner) queue, then C. h0 releases: the first A round
// (head) gets slot 0. The second A round is now the head: its planner finds
// A's permit, granted after that round arrived (the late-write rule keeps
// it), and judges the semaphore blocked for it until that permit ends —
// which A's keep-alive pushes back for ever. h1 releases: slot 1 is free,
// but only the head may take a slot, so C — next in line — never gets it:
// the queue is stuck behind a head that will never take anything while a
// permit sits free.
func TestSemaphoreWaitHeadBlockedByOwnNewerPermit(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	key := "sem/" + name
	const permits = 2
	h0 := semAcquire(t, srv, name, "h0", 30, permits)
	h1 := semAcquire(t, srv, name, "h1", 30, permits)
	a1 := semWaitFor(t, srv, name, "A", permits, 20, "")
	awaitJoin(t, srv, key, "A", 1)
	a2 := semWaitFor(t, srv, name, "A", permits, 6, "")
	awaitJoin(t, srv, key, "A", 2)
	c := semWaitFor(t, srv, name, "C", permits, 4, "")
	awaitJoin(t, srv, key, "C", 3)

	semRelease(t, srv, name, "h0", h0)
	pa := semGranted(t, "A (first round)", <-a1)
	semRelease(t, srv, name, "h1", h1) // slot 1 free; C is second in line
	start := time.Now()
	r := <-c
	if r.status != 200 || r.json["acquired"] != true {
		holders, _ := semHolders(t, srv, name)
		t.Errorf("C, queued behind A's second round, with a permit free for %v: got %d %s; holders %v, queue %+v",
			time.Since(start).Round(100*time.Millisecond), r.status, r.raw, holders, queueOf(t, srv, key))
	}
	r2 := <-a2
	if r2.status != 200 || r2.json["acquired"] != false || r2.json["queue_ticket"] != nil || r2.json["free_at"] != pa["expires_at"] {
		t.Errorf("A's second round, blocked by A's newer permit: got %d %s, want acquired:false with free_at its permit's end %s and no queue_ticket",
			r2.status, r2.raw, pa["expires_at"])
	}
	if d := r2.at.Sub(start); d > 2*time.Second {
		t.Errorf("A's second round answered %v after the first's grant, want at once", d)
	}
	semRelease(t, srv, name, "A", pa)
}

// TestSemaphoreWaitMismatchLeavesQueue: a semaphore of 2, full; Y
// (N=2) waits, its reads slowed (a slow poll or a cold read), so when both
// holders release, the slots stay free for a moment with Y queued. W
// asks for N=5 with a 20 s wait: no permit blocks, but a waiter is queued,
// so W joins behind Y rather than changing N. Y takes a slot (N=2): W's
// next look finds another N with a permit held and answers 409 at once,
// and must remove its entry first: X (N=2) joined behind W, and W's dead
// entry would otherwise be the head once Y is served, live until W's
// round's end + 2 s, with X waiting its whole round with a permit free.
func TestSemaphoreWaitMismatchLeavesQueue(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	key := "sem/" + name
	h0 := semAcquire(t, srv, name, "h0", 30, 2)
	h1 := semAcquire(t, srv, name, "h1", 30, 2)
	y := semWaitFor(t, slow, name, "Y", 2, 10, "")
	awaitJoin(t, srv, key, "Y", 1)
	// Y's next read is held until W and X have joined: the slots stay
	// free with Y queued, however slow the machine.
	var delayed atomic.Int32
	hold := make(chan struct{})
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "GetItem" && delayed.Add(1) == 1 {
			<-hold
		}
		return faultproxy.Action{}
	})
	for delayed.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	semRelease(t, srv, name, "h0", h0)
	semRelease(t, srv, name, "h1", h1)
	w := semWaitFor(t, srv, name, "W", 5, 20, "")
	awaitJoin(t, srv, key, "W", 2)
	x := semWaitFor(t, srv, name, "X", 2, 5, "")
	awaitJoin(t, srv, key, "X", 3)
	close(hold)
	py := semGranted(t, "Y", <-y)
	wantProblem(t, (<-w).reply, 409, "permits-mismatch")
	start := time.Now()
	rx := <-x
	if rx.status != 200 || rx.json["acquired"] != true {
		t.Errorf("X (N=2), queued behind W's answered 409, a permit free for %v: got %d %s; queue %+v",
			time.Since(start).Round(100*time.Millisecond), rx.status, rx.raw, queueOf(t, srv, key))
	}
	semRelease(t, srv, name, "Y", py)
}

// TestWaitEndsRightAfterItsJoin: a wait whose end passes between its join
// landing and its next look at the item answers with the place the join
// took (the queue_ticket), for a lock and a semaphore alike. Before, the
// answer had no ticket: the place stayed in the queue, unreported, ahead of
// later waiters until it lapsed. The proxy holds the join's answer while
// the clock moves past the end of the wait (a scheduler that ran the
// waiter late made the same history, in 4 of 300 loaded runs of
// TestSemaphoreWaitGrantGuard).
func TestWaitEndsRightAfterItsJoin(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"lock", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock()
			proxy := newProxy(t)
			srv := testenv.Start(t, testenv.Options{Now: clock.Now, StoreEndpoint: proxy.URL()})
			name := res(t)
			var answer <-chan timedReply
			item := name
			if kind == "lock" {
				acquire(t, srv, name, "holder", 30)
			} else {
				semAcquire(t, srv, name, "holder", 30, 1)
				item = locklogic.SemaphorePrefix + name
			}
			var joins atomic.Int32
			hold := make(chan struct{})
			proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
				if r.Op != "UpdateItem" || !strings.Contains(string(r.Body), "list_append(if_not_exists(#q") || joins.Add(1) != 1 {
					return faultproxy.Action{}
				}
				answered := make(chan struct{})
				go func() {
					<-answered // the join landed in the store
					clock.Advance(3 * time.Second)
					close(hold)
				}()
				return faultproxy.Action{Answered: answered, HoldAnswer: hold}
			})
			if kind == "lock" {
				answer = waitFor(t, srv, name, "waiter", 30, 2)
			} else {
				answer = semWaitFor(t, srv, name, "waiter", 1, 2, "")
			}
			var got timedReply
			select {
			case got = <-answer:
			case <-time.After(15 * time.Second):
				// The clock stands still unless the plan moves it.
				t.Fatalf("no answer: the proxy saw %d joins (did the join's expression change?)", joins.Load())
			}
			q := queueOf(t, srv, item)
			if got.status != 200 || got.json["acquired"] != false || len(q) != 1 || got.json["queue_ticket"] != q[0].id {
				t.Fatalf("waiter: got %d %s with the queue %+v, want held with the ticket of its place", got.status, got.raw, q)
			}
		})
	}
}
