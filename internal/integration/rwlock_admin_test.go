package integration_test

// The read/write lock's watch and admin routes (docs/api.md): the watch's
// index over the writer and the readers, its expiry record, and the
// listing and force release of one holder.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// rwWatch asks the read/write lock's watch from index, answering at once.
func rwWatch(tb testing.TB, srv *testenv.Server, name string, index int64) reply {
	tb.Helper()
	r := call(tb, srv, "GET", fmt.Sprintf("%s?index=%d", rwPath(name, "/watch"), index), "")
	if r.status != 200 {
		tb.Fatalf("watch %q from %d: got %d %s, want 200", name, index, r.status, r.raw)
	}
	return r
}

// TestRWLockWatch: the index grows at every grant, read or write, and at
// every end of a lease (release, expiry); a renewal leaves it; the answer
// shows the live writer or readers. An index above 2 × the counter + 1 is
// 422, and 2 × the counter + 1 (every lease ended) is echoed.
func TestRWLockWatch(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	r := rwWatch(t, srv, name, 0)
	if index(t, r) != 0 || r.json["changed"] != false || len(r.json["readers"].([]any)) != 0 || r.json["writer"] != nil {
		t.Fatalf("never taken: got %s, want index 0, no leases", r.raw)
	}
	last := int64(0)
	step := func(what string, changes bool, readers int, writer bool) reply {
		t.Helper()
		r := rwWatch(t, srv, name, last)
		i := index(t, r)
		if changes && (r.json["changed"] != true || i <= last) || !changes && (r.json["changed"] != false || i != last) {
			t.Fatalf("%s: got index %d (changed %v) after %d, want a change %v: %s", what, i, r.json["changed"], last, changes, r.raw)
		}
		if n := len(r.json["readers"].([]any)); n != readers || (r.json["writer"] != nil) != writer {
			t.Fatalf("%s: got %s, want %d readers, a writer %v", what, r.raw, readers, writer)
		}
		last = i
		return r
	}
	r1 := rwTake(t, srv, name, "read", "r1", 10)
	step("read grant", true, 1, false)
	r2 := rwTake(t, srv, name, "read", "r2", 5)
	step("second read grant", true, 2, false)
	clock.Advance(time.Second)
	if r := call(t, srv, "POST", rwPath(name, "/renew"), rwLeaseBody(r1, "ttl_seconds", 10)); r.status != 200 {
		t.Fatalf("renew: got %d %s", r.status, r.raw)
	}
	step("renewal", false, 2, false)
	rwRelease(t, srv, name, r1)
	step("release", true, 1, false)
	clock.Advance(5 * time.Second) // r2's lease expires
	step("expiry", true, 0, false)
	if r := call(t, srv, "POST", rwPath(name, "/renew"), rwLeaseBody(r2, "ttl_seconds", 10)); r.status != 404 {
		t.Errorf("renewal of the reader whose end the watch answered: got %d %s, want 404", r.status, r.raw)
	}
	w := rwTake(t, srv, name, "write", "w1", 10)
	got := step("write grant", true, 0, true)
	if wl := got.json["writer"].(map[string]any); wl["mode"] != "write" || tokenOf(t, wl) != tokenOf(t, w) || wl["slot"] != nil {
		t.Errorf("the watch's writer: got %v, want w1's lease %v (no slot)", wl, w)
	}
	rwRelease(t, srv, name, w)
	got = step("write release", true, 0, false)

	c := tokenOf(t, got.json)
	wantProblem(t, call(t, srv, "GET", fmt.Sprintf("%s?index=%d", rwPath(name, "/watch"), 2*c+2), ""), 422, "validation-failed")
	if r := rwWatch(t, srv, name, 2*c+1); index(t, r) != 2*c+1 || r.json["changed"] != false {
		t.Errorf("index %d (every lease ended): got %s, want it echoed", 2*c+1, r.raw)
	}
	wantProblem(t, call(t, srv, "GET", rwPath(name, "/watch")+"?index=-1", ""), 422, "validation-failed")
	wantProblem(t, call(t, srv, "GET", rwPath(name, "/watch")+"?wait_seconds=x", ""), 422, "validation-failed")
}

// TestRWLockWatchedExpiryIsFinal: a renewal issued while the lease was
// live, landing after a watch answered the lease's end, is refused — for a
// reader and for the writer — since the watch records the expiry it
// answers (recordExpiry, y<k> or expired_at). Without the record the
// renewal landed (its :now is before the expiry; no grant came since), and
// the index went back on what the watcher was told.
func TestRWLockWatchedExpiryIsFinal(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"read", "write"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock()
			proxy := newProxy(t)
			slow := testenv.Start(t, testenv.Options{Now: clock.Now, StoreEndpoint: proxy.URL()})
			srv := testenv.Start(t, testenv.Options{Now: clock.Now})
			name := res(t)
			l := rwTake(t, srv, name, mode, "A", 1)
			i0 := index(t, rwWatch(t, srv, name, 0))

			g := newGate()
			proxy.SetPlan(holdFirstUpdate(g))
			clock.Advance(500 * time.Millisecond)
			renewed := make(chan reply, 1)
			go func() { renewed <- call(t, slow, "POST", rwPath(name, "/renew"), rwLeaseBody(l, "ttl_seconds", 30)) }()
			<-g.arrived // issued while A's lease is live
			clock.Advance(700 * time.Millisecond)

			ended := rwWatch(t, srv, name, i0)
			i1 := index(t, ended)
			if i1 != i0+1 || len(ended.json["readers"].([]any)) != 0 || ended.json["writer"] != nil {
				t.Fatalf("watch after A's expiry: got %s, want index %d, no lease", ended.raw, i0+1)
			}
			close(g.open)
			if r := <-renewed; r.status != 404 {
				t.Errorf("A's late renewal, after a watch answered its end: got %d %s, want 404", r.status, r.raw)
			}
			if r := rwWatch(t, srv, name, i1); r.json["changed"] != false {
				t.Errorf("after the refused renewal: got %s, want index %d unchanged", r.raw, i1)
			}
		})
	}
}

// TestRWLockWatchWaits: a watch with wait_seconds answers the grant that
// comes while it waits (the grant is made once the watch's first
// eventually consistent read has reached the store).
func TestRWLockWatchWaits(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	watcher := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	rwTake(t, srv, name, "read", "r1", 30)
	i0 := index(t, rwWatch(t, srv, name, 0))
	peeked := make(chan struct{})
	var gets atomic.Int32
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		// The watch's first read is consistent; the next are its peeks.
		if r.Op == "GetItem" && !bytes.Contains(r.Body, []byte(`"ConsistentRead":true`)) && gets.Add(1) == 1 {
			close(peeked)
		}
		return faultproxy.Action{}
	})
	answered := make(chan reply, 1)
	go func() {
		answered <- call(t, watcher, "GET", fmt.Sprintf("%s?index=%d&wait_seconds=10", rwPath(name, "/watch"), i0), "")
	}()
	<-peeked
	start := time.Now()
	rwTake(t, srv, name, "read", "r2", 30)
	r := <-answered
	if r.status != 200 || r.json["changed"] != true || len(r.json["readers"].([]any)) != 2 {
		t.Fatalf("got %d %s, want the change: 2 readers", r.status, r.raw)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered %s after the grant, want within a few polls", d)
	}
}

// rwAdminPath is the force release of read/write lock name.
func rwAdminPath(name string) string { return "/admin/rwlocks/" + url.PathEscape(name) }

// TestRWLockAdmin: the listing shows a read/write lock's readers (each
// with its slot), its writer, and its waiters with their kind; the lock
// listing does not show the writer as a lock. A force release ends one
// holder, named by mode and slot and checked by fencing token (another is
// 409 with the lease as current); the others keep theirs; the ended
// reader's renewal is 404 force_released; its lock-delay keeps the writer
// out until an immediate force release ends it. Every attempt that
// reaches the store is audited with the mode and the slot.
func TestRWLockAdmin(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	srv := testenv.Start(t, testenv.Options{LogTo: logs})
	name := res(t)
	r1 := call(t, srv, "POST", rwPath(name, "/read"), `{"owner":"r1","ttl_seconds":300,"lock_delay_seconds":60}`)
	if r1.status != 200 || r1.json["acquired"] != true {
		t.Fatalf("r1: got %d %s", r1.status, r1.raw)
	}
	l1 := r1.json["lease"].(map[string]any)
	l2 := rwTake(t, srv, name, "read", "r2", 300)
	waits := make(chan reply, 2)
	go func() {
		waits <- call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"w1","ttl_seconds":30,"wait_seconds":2}`)
	}()
	waitQueued(t, srv, name, 1)
	go func() {
		waits <- call(t, srv, "POST", rwPath(name, "/read/wait"), `{"owner":"q1","ttl_seconds":30,"wait_seconds":2}`)
	}()
	waitQueued(t, srv, name, 2)

	list := call(t, srv, "GET", "/admin/rwlocks?prefix="+url.QueryEscape(name), "")
	if list.status != 200 || len(list.json["rwlocks"].([]any)) != 1 {
		t.Fatalf("listing: got %d %s, want one read/write lock", list.status, list.raw)
	}
	row := list.json["rwlocks"].([]any)[0].(map[string]any)
	readers := row["readers"].([]any)
	queue := row["queue"].([]any)
	if row["name"] != name || row["writer"] != nil || len(readers) != 2 || len(queue) != 2 {
		t.Fatalf("listing row: got %v, want 2 readers and 2 waiters of %q", row, name)
	}
	for _, r := range readers {
		m := r.(map[string]any)
		if m["mode"] != "read" || m["slot"] == nil || (m["owner"] != "r1" && m["owner"] != "r2") {
			t.Errorf("listed reader %v: want mode read, a slot, r1 or r2", m)
		}
	}
	if q0, q1 := queue[0].(map[string]any), queue[1].(map[string]any); q0["mode"] != "write" || q0["owner"] != "w1" ||
		q1["mode"] != "read" || q1["owner"] != "q1" || q0["joined_at"] == nil {
		t.Errorf("listed queue: got %v, want w1 (write) then q1 (read), with when they joined", queue)
	}
	if tokenOf(t, row) != tokenOf(t, l2) {
		t.Errorf("listed fencing_token %v, want the latest grant's %d", row["fencing_token"], tokenOf(t, l2))
	}
	// A read/write lock's writer has the lock's attribute names; it is no lock.
	rwTake(t, srv, name+"-w", "write", "w9", 300)
	if locks, _ := listAll(t, srv, "rw", 1000); strings.Contains(strings.Join(locks, "\n"), name) {
		t.Errorf("the lock listing shows a read/write lock's writer: %v", locks)
	}

	force := func(body map[string]any) reply { return call(t, srv, "DELETE", rwAdminPath(name), semBody(body)) }
	slot1 := l1["slot"]
	r := force(map[string]any{"mode": "read", "slot": slot1, "reason": "host gone", "fencing_token": tokenOf(t, l1) + 100})
	wantProblem(t, r, 409, "stale-token")
	if cur, _ := r.json["current"].(map[string]any); cur == nil || tokenOf(t, cur) != tokenOf(t, l1) || cur["mode"] != "read" || cur["slot"] != slot1 {
		t.Errorf("got %s, want r1's lease as current", r.raw)
	}
	r = force(map[string]any{"mode": "read", "slot": slot1, "reason": "host gone", "fencing_token": tokenOf(t, l1)})
	if r.status != 200 || r.json["immediate"] != false {
		t.Fatalf("force release of r1: got %d %s, want 200", r.status, r.raw)
	}
	if e := r.json["ended"].(map[string]any); e["owner"] != "r1" || e["slot"] != slot1 || tokenOf(t, e) != tokenOf(t, l1) {
		t.Errorf("ended: got %v, want r1's lease", e)
	}
	if freeAt, err := time.Parse(time.RFC3339Nano, r.json["free_at"].(string)); err != nil || time.Until(freeAt) < 50*time.Second {
		t.Errorf("free_at %v: want the end of r1's 60 s lock-delay", r.json["free_at"])
	}
	if r := call(t, srv, "POST", rwPath(name, "/renew"), rwLeaseBody(l1, "ttl_seconds", 30)); r.status != 404 || r.json["force_released"] != true {
		t.Errorf("r1's renewal after the force release: got %d %s, want 404 force_released", r.status, r.raw)
	}
	if r := call(t, srv, "POST", rwPath(name, "/renew"), rwLeaseBody(l2, "ttl_seconds", 300)); r.status != 200 {
		t.Errorf("r2's renewal: got %d %s, want 200 (another holder keeps its lease)", r.status, r.raw)
	}
	for range 2 {
		if w := <-waits; w.status == 200 && w.json["acquired"] == true {
			rwRelease(t, srv, name, w.json["lease"].(map[string]any)) // a reader may have been granted a slot
		}
	}
	rwRelease(t, srv, name, l2)
	if r := rwTry(t, srv, name, "write", "w2", 30); r.json["acquired"] != false {
		t.Fatalf("write while r1's lock-delay runs: got %s, want held", r.raw)
	}
	r = force(map[string]any{"mode": "read", "slot": slot1, "reason": "end the delay", "immediate": true})
	if r.status != 200 || r.json["immediate"] != true {
		t.Fatalf("immediate force release: got %d %s", r.status, r.raw)
	}
	// A wait: w1's place may not have lapsed yet, and a try never passes a
	// live queue.
	wr := call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"w2","ttl_seconds":300,"wait_seconds":10}`)
	if wr.status != 200 || wr.json["acquired"] != true {
		t.Fatalf("write after the immediate force release: got %d %s, want granted", wr.status, wr.raw)
	}
	w := wr.json["lease"].(map[string]any)
	if tokenOf(t, w) <= tokenOf(t, l2) {
		t.Errorf("writer's token %d, want above every earlier one (%d)", tokenOf(t, w), tokenOf(t, l2))
	}
	wantProblem(t, force(map[string]any{"mode": "write", "reason": "x", "fencing_token": tokenOf(t, w) - 1}), 409, "stale-token")
	r = force(map[string]any{"mode": "write", "reason": "writer hung", "immediate": true})
	if e, _ := r.json["ended"].(map[string]any); r.status != 200 || e["mode"] != "write" || e["slot"] != nil || e["owner"] != "w2" {
		t.Fatalf("force release of the writer: got %d %s", r.status, r.raw)
	}
	r3 := rwTake(t, srv, name, "read", "r3", 30)
	// A slot no reader holds: r3 is the only reader, and its slot is
	// drawn from the 64 (it was 63 once, the slot this line named).
	empty := (slotOf(t, r3) + 1) % 64
	wantProblem(t, force(map[string]any{"mode": "read", "slot": empty, "reason": "x"}), 404, "not-found")
	before := len(logs.lines(t, "audit"))
	wantProblem(t, force(map[string]any{"mode": "write", "slot": 0, "reason": "x"}), 422, "validation-failed")
	wantProblem(t, force(map[string]any{"mode": "read", "reason": "x"}), 422, "validation-failed")
	wantProblem(t, force(map[string]any{"mode": "read", "slot": 0}), 422, "validation-failed")
	wantProblem(t, force(map[string]any{"mode": "read", "slot": 64, "reason": "x"}), 422, "validation-failed")

	audits := logs.lines(t, "audit")
	if len(audits) != before || len(audits) != 6 {
		t.Fatalf("got %d audit lines (%d before the invalid bodies), want 6: every attempt that reached the store, none for invalid bodies", len(audits), before)
	}
	slotN, _ := slot1.(json.Number).Int64()
	for i, want := range []map[string]any{
		{"outcome": "stale-token", "mode": "read", "slot": float64(slotN)},
		{"outcome": "force-released", "mode": "read", "slot": float64(slotN), "owner": "r1", "immediate": false, "reason": "host gone"},
		{"outcome": "force-released", "mode": "read", "immediate": true},
		{"outcome": "stale-token", "mode": "write"},
		{"outcome": "force-released", "mode": "write", "owner": "w2"},
		{"outcome": "not-found", "mode": "read", "slot": float64(empty)},
	} {
		a := audits[i]
		if a["action"] != "force-release-rwlock" || a["resource"] != name {
			t.Errorf("audit %d: got %v, want action force-release-rwlock on %q", i, a, name)
		}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("audit %d %s: got %v, want %v", i, k, a[k], v)
			}
		}
		if want["mode"] == "write" && a["slot"] != nil {
			t.Errorf("audit %d: a writer's has no slot: %v", i, a)
		}
	}
}
