package integration_test

import (
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// Review of issue 24 (read/write locks): histories a reviewer tried in
// order to break the writer's exclusion, each passing on the service as
// merged. They cover paths the other read/write lock tests do not: the
// lock-delay of either kind against the other, a reader's grant on a clock
// ahead of the writer's, the head's batch stopping at a queued writer, a
// queued writer that gave up, and what a reader's owner is answered when
// it asks for the writer's lease (no upgrade).

// TestRWReviewNoUpgrade: the owner of a reader's lease that asks for the
// writer's is kept out by its own reader (docs/design.md, "No upgrade"):
// a try answers acquired false with free_at at its reader's expiry, and a
// waiting round answers the same with its place when the wait ends.
func TestRWReviewNoUpgrade(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	l := rwTake(t, srv, name, "read", "a", 30)
	r := rwTry(t, srv, name, "write", "a", 30)
	if r.status != 200 || r.json["acquired"] != false || r.json["free_at"] != l["expires_at"] {
		t.Errorf("write try by the reader's owner: got %d %s, want acquired false, free_at %v", r.status, r.raw, l["expires_at"])
	}
	r = call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"a","ttl_seconds":30,"wait_seconds":1}`)
	if r.status != 200 || r.json["acquired"] != false || r.json["queue_ticket"] == nil {
		t.Errorf("write wait by the reader's owner: got %d %s, want acquired false with a queue_ticket", r.status, r.raw)
	}
}

// TestRWReviewLockDelayWriterVsReaders: an expired writer's lock-delay
// keeps readers out until it ends; a reader's lock-delay, kept by a
// renewal that shortens its lease, keeps the writer out until it ends.
func TestRWReviewLockDelayWriterVsReaders(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	r := call(t, srv, "POST", rwPath(name, "/write"), `{"owner":"w","ttl_seconds":1,"lock_delay_seconds":5}`)
	if r.status != 200 || r.json["acquired"] != true {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	clock.Advance(2 * time.Second)
	rwHeld(t, srv, name, "read", "r")
	clock.Advance(5 * time.Second)
	rwTake(t, srv, name, "read", "r", 30)
	// a reader with lock-delay keeps the writer out after expiry
	name2 := name + "-2"
	r = call(t, srv, "POST", rwPath(name2, "/read"), `{"owner":"r","ttl_seconds":1,"lock_delay_seconds":5}`)
	if r.status != 200 || r.json["acquired"] != true {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	l := r.json["lease"].(map[string]any)
	// renew shorter, keeps delay
	if rr := call(t, srv, "POST", rwPath(name2, "/renew"), rwLeaseBody(l, "ttl_seconds", 1)); rr.status != 200 {
		t.Fatalf("renew: %d %s", rr.status, rr.raw)
	}
	clock.Advance(2 * time.Second)
	rwHeld(t, srv, name2, "write", "w")
	clock.Advance(5 * time.Second)
	rwTake(t, srv, name2, "write", "w", 30)
}

// TestRWReviewLateReaderGrantAndRenew: a reader's grant stamped before
// the writer's (an instance 3 s behind, as a delayed write) is refused; one
// stamped 3 s ahead finds the writer expired on its clock and is granted,
// and the writer's renewal after it is refused (the counter moved).
func TestRWReviewLateReaderGrantAndRenew(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	late := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(-3 * time.Second) }})
	ahead := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(3 * time.Second) }})
	name := res(t)
	w := rwTake(t, srv, name, "write", "w", 2)
	// a reader's write stamped before the writer's grant (lagging, as a delayed write)
	rwHeld(t, late, name, "read", "r")
	// a reader on a clock ahead sees the writer expired: it is granted; then the writer's renewal must fail
	rl := rwTake(t, ahead, name, "read", "r", 30)
	if tokenOf(t, rl) <= tokenOf(t, w) {
		t.Errorf("reader's token %d not above the writer's %d", tokenOf(t, rl), tokenOf(t, w))
	}
	if rr := call(t, srv, "POST", rwPath(name, "/renew"), rwLeaseBody(w, "ttl_seconds", 60)); rr.status != 404 {
		t.Errorf("writer's renewal after a reader's grant: got %d %s, want 404", rr.status, rr.raw)
	}
}

// TestRWReviewBatchStopsAtWriter: queued reader a, writer w2, reader b
// behind writer w1: w1's release grants a alone (b is behind w2), a's
// grants w2, w2's grants b.
func TestRWReviewBatchStopsAtWriter(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	w1 := rwTake(t, srv, name, "write", "w1", 30)
	out := make(chan reply, 3)
	go func() {
		out <- call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"a","ttl_seconds":30,"wait_seconds":6}`)
	}()
	waitQueued(t, srv, name, 1)
	go func() {
		out <- call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"w2","ttl_seconds":30,"wait_seconds":6}`)
	}()
	waitQueued(t, srv, name, 2)
	go func() {
		out <- call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"b","ttl_seconds":30,"wait_seconds":6}`)
	}()
	waitQueued(t, srv, name, 3)
	rwRelease(t, srv, name, w1)
	first := <-out
	if first.json["acquired"] != true || first.json["lease"].(map[string]any)["owner"] != "a" {
		t.Fatalf("first answer: %s, want a granted", first.raw)
	}
	st := call(t, srv, "GET", rwPath(name, ""), "")
	if rs := st.json["readers"].([]any); len(rs) != 1 {
		t.Errorf("readers: %v, want a alone (b is behind w2)", rs)
	}
	rwRelease(t, srv, name, first.json["lease"].(map[string]any))
	second := <-out
	if second.json["acquired"] != true || second.json["lease"].(map[string]any)["owner"] != "w2" {
		t.Fatalf("second answer: %s, want w2 granted", second.raw)
	}
	rwRelease(t, srv, name, second.json["lease"].(map[string]any))
	third := <-out
	if third.json["acquired"] != true {
		t.Fatalf("third: %s", third.raw)
	}
}

// TestRWReviewLapsedWriterAhead: a queued writer that gave up (its place
// lapses) does not stall the reader queued behind it once the lock is
// free.
func TestRWReviewLapsedWriterAhead(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	w0 := rwTake(t, srv, name, "write", "w0", 30)
	wdone := make(chan reply, 1)
	go func() {
		wdone <- call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"w","ttl_seconds":30,"wait_seconds":1}`)
	}()
	waitQueued(t, srv, name, 1)
	rdone := make(chan reply, 1)
	start := time.Now()
	go func() {
		rdone <- call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"b","ttl_seconds":30,"wait_seconds":20}`)
	}()
	waitQueued(t, srv, name, 2)
	if w := <-wdone; w.status != 200 || w.json["acquired"] != false {
		t.Fatalf("writer's wait: got %d %s, want acquired false", w.status, w.raw)
	}
	rwRelease(t, srv, name, w0)
	if r := <-rdone; r.status != 200 || r.json["acquired"] != true {
		t.Errorf("reader behind the lapsed writer: got %d %s after %v, want granted", r.status, r.raw, time.Since(start))
	}
}

// TestRWReviewLateReaderLandsAfterWriterRelease is the history of a chaos
// report ("rw-exclusive: the store granted q0 the reader 32's lease (token
// …324) while q3's writer lease (token …319) was live for 440 ms more"):
// a reader's write stamped before a writer's grant is delivered late,
// after that writer's release, and is granted — rightly: a released lease
// is free on any clock. The reader's lease has the larger token and is
// stamped (acquired_at) before the writer's grant, so a history that reads
// each lease as live from its acquired_at sees the writer live over it;
// the store applied it after the release (the checker before the proof
// branch's 16eff38, "a grant is live no earlier than the grants committed
// before it", read it so). The writer cannot be revived over it: its
// renewal is refused, and a writer is held out by the late reader.
func TestRWReviewLateReaderLandsAfterWriterRelease(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	now := steppingClock()
	impatient := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), StoreBudget: 300 * time.Millisecond, Now: now})
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: now})
	name := res(t)

	hold := make(chan struct{})
	proxy.SetPlan(holdNext(hold))
	if r := rwTry(t, impatient, name, "read", "q", 30); r.status != 503 {
		t.Fatalf("held read: got %d %s, want 503 (its write held in flight)", r.status, r.raw)
	}
	proxy.SetPlan(nil)
	w := rwTake(t, srv, name, "write", "w", 30)
	rwRelease(t, srv, name, w)
	close(hold)
	proxy.Settle()
	var late faultproxy.Record
	for _, r := range proxy.Records() {
		if r.Fault == faultproxy.Late {
			late = r
		}
	}
	if !late.Forwarded || late.StoreStatus != 200 {
		t.Fatalf("late reader's write: forwarded %v, store answered %d %s; want applied after the release", late.Forwarded, late.StoreStatus, late.StoreBody)
	}
	st := call(t, srv, "GET", rwPath(name, ""), "")
	rs, _ := st.json["readers"].([]any)
	if st.json["writer"] != nil || len(rs) != 1 {
		t.Fatalf("status: got %s, want the late reader alone", st.raw)
	}
	rl := rs[0].(map[string]any)
	ra, _ := time.Parse(time.RFC3339Nano, rl["acquired_at"].(string))
	wa, _ := time.Parse(time.RFC3339Nano, w["acquired_at"].(string))
	if tokenOf(t, rl) <= tokenOf(t, w) || !ra.Before(wa) {
		t.Errorf("late reader %v: want a token above the writer's %d, stamped before its grant (%v)", rl, tokenOf(t, w), w["acquired_at"])
	}
	if r := call(t, srv, "POST", rwPath(name, "/renew"), rwLeaseBody(w, "ttl_seconds", 60)); r.status != 404 {
		t.Errorf("released writer's renewal: got %d %s, want 404", r.status, r.raw)
	}
	rwHeld(t, srv, name, "write", "w2")
}

// TestRWReviewTicketKeepsItsMode (failing): a queue_ticket is one place of
// one mode. A write wait that brings a read wait's ticket is answered as
// that place — a reader's entry (no kind) — so readers queued behind it
// count it as a reader of the head's batch and take slots ahead of the
// writer, which "a queued writer keeps out every reader that arrives after
// it" (docs/design.md, "Waiting: fair, writer-preferring by arrival")
// forbids. Either the ticket of the other mode is refused (a problem) or
// the write wait holds a writer's place of its own: it joins as a writer
// (a new ticket), and the read wait's place, whose round has ended, lapses
// as any departed waiter's does.
func TestRWReviewTicketKeepsItsMode(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	rwTake(t, srv, name, "write", "w0", 30)
	r := call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"a","ttl_seconds":30,"wait_seconds":1}`)
	tk, _ := r.json["queue_ticket"].(string)
	if r.status != 200 || r.json["acquired"] != false || tk == "" {
		t.Fatalf("read wait behind the writer: got %d %s, want acquired false with a queue_ticket", r.status, r.raw)
	}
	r = call(t, srv, "POST", rwPath(name, "/write/wait"), semBody(map[string]any{"owner": "a", "ttl_seconds": 30, "wait_seconds": 1, "queue_ticket": tk}))
	if r.status >= 400 && r.status < 500 {
		return // refused: the ticket is a reader's place
	}
	if got, _ := r.json["queue_ticket"].(string); r.status != 200 || got == "" || got == tk {
		t.Errorf("write wait with a read wait's ticket %q: answered %d %s, want a writer's place of its own (a new queue_ticket) or a refusal",
			tk, r.status, r.raw)
	}
	st := call(t, srv, "GET", rwPath(name, ""), "")
	q, _ := st.json["queue"].([]any)
	writers := 0
	for _, e := range q {
		if m := e.(map[string]any); m["owner"] == "a" && m["mode"] == "write" {
			writers++
		}
	}
	if writers != 1 {
		t.Errorf("after the write wait: %d writer entries of a in the queue (%s), want 1", writers, st.raw)
	}
}

// TestRWReviewOrphanPlaceKeepsItsMode (failing): a round that brings no
// ticket takes over its owner's orphaned place (view.orphan: by owner and
// principal alone). A write wait that follows the owner's read wait (one
// process switching mode, or two processes sharing an owner) thus takes
// the read wait's place, a reader's entry: queued readers behind it then
// batch past the writer (see TestRWReviewTicketKeepsItsMode). The writer's
// round must not adopt a reader's place (nor a reader's a writer's).
func TestRWReviewOrphanPlaceKeepsItsMode(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	rwTake(t, srv, name, "write", "w0", 30)
	r := call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"a","ttl_seconds":30,"wait_seconds":1}`)
	if r.status != 200 || r.json["acquired"] != false {
		t.Fatalf("read wait behind the writer: got %d %s, want acquired false", r.status, r.raw)
	}
	r = call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"a","ttl_seconds":30,"wait_seconds":1}`)
	st := call(t, srv, "GET", rwPath(name, ""), "")
	q, _ := st.json["queue"].([]any)
	writer := false
	for _, e := range q {
		if m := e.(map[string]any); m["owner"] == "a" && m["mode"] == "write" {
			writer = true
		}
	}
	if !writer {
		t.Errorf("write wait after the owner's read wait: answered %d %s; queue %v has no writer's place of a, want one", r.status, r.raw, q)
	}
}

// TestRWReviewReaderPassesAdoptedWriterPlace (failing): the consequence of
// TestRWReviewOrphanPlaceKeepsItsMode. Behind writer w0 queue reader r1,
// then owner a's read wait (which ends), then a's write wait (taking a's
// place), then reader b. When w0 releases, r1 is the head and is granted;
// b, behind a's writer's wait, must wait for it, and is answered acquired
// false when its wait ends. It is granted instead, before the writer.
func TestRWReviewReaderPassesAdoptedWriterPlace(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	w0 := rwTake(t, srv, name, "write", "w0", 30)
	r1 := make(chan reply, 1)
	go func() {
		r1 <- call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"r1","ttl_seconds":30,"wait_seconds":10}`)
	}()
	waitQueued(t, srv, name, 1)
	if r := call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"a","ttl_seconds":30,"wait_seconds":1}`); r.json["acquired"] != false {
		t.Fatalf("a's read wait: got %d %s, want acquired false", r.status, r.raw)
	}
	var readUntil string // a's read wait's place lapses then
	for _, e := range call(t, srv, "GET", rwPath(name, ""), "").json["queue"].([]any) {
		if m := e.(map[string]any); m["owner"] == "a" {
			readUntil = m["until"].(string)
		}
	}
	a := make(chan reply, 1)
	go func() {
		a <- call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"a","ttl_seconds":30,"wait_seconds":4}`)
	}()
	// a's write wait holds a place: a writer's entry of its own, or (as
	// merged) the read wait's place, kept to a later until.
	deadline := time.Now().Add(10 * time.Second)
	for queued := false; !queued; {
		if time.Now().After(deadline) {
			t.Fatal("a's write wait never held a place")
		}
		for _, e := range call(t, srv, "GET", rwPath(name, ""), "").json["queue"].([]any) {
			if m := e.(map[string]any); m["owner"] == "a" && (m["mode"] == "write" || m["until"].(string) > readUntil) {
				queued = true
			}
		}
		time.Sleep(20 * time.Millisecond) // polling for an event in another process, not ordering
	}
	b := make(chan reply, 1)
	go func() {
		b <- call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"b","ttl_seconds":30,"wait_seconds":2}`)
	}()
	waitQueued(t, srv, name, 3)
	rwRelease(t, srv, name, w0)
	if r := <-r1; r.json["acquired"] != true {
		t.Fatalf("r1 at the head: got %d %s, want granted", r.status, r.raw)
	}
	if r := <-b; r.json["acquired"] != false {
		t.Errorf("reader b behind a's write wait: got %d %s, want acquired false (a writer is queued ahead of it)", r.status, r.raw)
	}
	<-a
}
