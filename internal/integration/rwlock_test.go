package integration_test

import (
	"encoding/json"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

func rwPath(name, suffix string) string { return "/rwlocks/" + url.PathEscape(name) + suffix }

// rwTry sends a try of mode ("read" or "write") for owner and returns the
// answer (200 with acquired true or false, or a problem).
func rwTry(tb testing.TB, srv *testenv.Server, name, mode, owner string, ttl int) reply {
	tb.Helper()
	return call(tb, srv, "POST", rwPath(name, "/"+mode), semBody(map[string]any{"owner": owner, "ttl_seconds": ttl}))
}

// rwTake takes mode for owner and fails unless granted; it returns the
// lease object.
func rwTake(tb testing.TB, srv *testenv.Server, name, mode, owner string, ttl int) map[string]any {
	tb.Helper()
	r := rwTry(tb, srv, name, mode, owner, ttl)
	if r.status != 200 || r.json["acquired"] != true {
		tb.Fatalf("%s %q as %q: got %d %s, want 200 acquired", mode, name, owner, r.status, r.raw)
	}
	return r.json["lease"].(map[string]any)
}

// rwHeld checks that owner's try of mode is answered held.
func rwHeld(tb testing.TB, srv *testenv.Server, name, mode, owner string) {
	tb.Helper()
	r := rwTry(tb, srv, name, mode, owner, 30)
	if r.status != 200 || r.json["acquired"] != false {
		tb.Fatalf("%s %q as %q: got %d %s, want 200 acquired:false", mode, name, owner, r.status, r.raw)
	}
}

// rwLeaseBody names lease l of owner (mode, slot, token) plus extra members.
func rwLeaseBody(l map[string]any, extra ...any) string {
	m := map[string]any{"owner": l["owner"], "mode": l["mode"], "fencing_token": l["fencing_token"]}
	if s, ok := l["slot"]; ok {
		m["slot"] = s
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return semBody(m)
}

func rwRelease(tb testing.TB, srv *testenv.Server, name string, l map[string]any) {
	tb.Helper()
	if r := call(tb, srv, "DELETE", rwPath(name, ""), rwLeaseBody(l)); r.status != 204 {
		tb.Fatalf("release %v: got %d %s, want 204", l, r.status, r.raw)
	}
}

func tokenOf(tb testing.TB, l map[string]any) int64 {
	tb.Helper()
	n, err := l["fencing_token"].(json.Number).Int64()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestRWLockReadersAndWriter: many readers hold at once, each in its own
// slot; a writer is held out by any of them and holds out readers and
// writers; every grant's token is above every earlier one, read or write;
// status shows what holds.
func TestRWLockReadersAndWriter(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	var last int64
	grow := func(l map[string]any) {
		t.Helper()
		if tok := tokenOf(t, l); tok <= last {
			t.Errorf("token %d after %d: want it greater", tok, last)
		} else {
			last = tok
		}
	}
	var readers []map[string]any
	slots := map[any]bool{}
	for i := range 10 {
		l := rwTake(t, srv, name, "read", "r"+string(rune('0'+i)), 30)
		grow(l)
		if slots[l["slot"]] {
			t.Errorf("slot %v granted twice", l["slot"])
		}
		slots[l["slot"]] = true
		readers = append(readers, l)
	}
	rwHeld(t, srv, name, "write", "w1")
	st := call(t, srv, "GET", rwPath(name, ""), "")
	if st.status != 200 || len(st.json["readers"].([]any)) != 10 || st.json["writer"] != nil {
		t.Fatalf("status: got %d %s, want 10 readers and no writer", st.status, st.raw)
	}
	for _, l := range readers[:9] {
		rwRelease(t, srv, name, l)
	}
	rwHeld(t, srv, name, "write", "w1") // one reader left
	rwRelease(t, srv, name, readers[9])
	w := rwTake(t, srv, name, "write", "w1", 30)
	grow(w)
	if _, ok := w["slot"]; ok || w["mode"] != "write" {
		t.Errorf("writer's lease: got %v, want mode write and no slot", w)
	}
	rwHeld(t, srv, name, "read", "r1")
	rwHeld(t, srv, name, "write", "w2")
	if r := call(t, srv, "POST", rwPath(name, "/renew"), rwLeaseBody(w, "ttl_seconds", 60)); r.status != 200 {
		t.Errorf("renew the writer: got %d %s", r.status, r.raw)
	}
	rwRelease(t, srv, name, w)
	grow(rwTake(t, srv, name, "read", "r1", 30))
}

// TestRWLockBadInput: bad bodies are 422 problems naming the member, never
// a 5xx.
func TestRWLockBadInput(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	for _, tc := range []struct{ name, method, path, body, field string }{
		{"WaitOnTry", "POST", "/read", `{"owner":"a","ttl_seconds":5,"wait_seconds":3}`, "wait_seconds"},
		{"NoWaitOnWait", "POST", "/write/wait", `{"owner":"a","ttl_seconds":5}`, "wait_seconds"},
		{"BadMode", "DELETE", "", `{"owner":"a","mode":"both"}`, "mode"},
		{"ReadWithoutSlot", "DELETE", "", `{"owner":"a","mode":"read"}`, "slot"},
		{"WriteWithSlot", "POST", "/renew", `{"owner":"a","mode":"write","slot":1,"ttl_seconds":5}`, "slot"},
		{"SlotOutOfRange", "DELETE", "", `{"owner":"a","mode":"read","slot":64}`, "slot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, srv, tc.method, rwPath(name, tc.path), tc.body)
			if r.status != 422 {
				t.Fatalf("got %d %s, want 422", r.status, r.raw)
			}
			found := false
			for _, e := range r.json["errors"].([]any) {
				found = found || e.(map[string]any)["field"] == tc.field
			}
			if !found {
				t.Errorf("got %s, want an error naming %q", r.raw, tc.field)
			}
		})
	}
}

// TestRWLockWriterQueuedBlocksReaders: while readers hold, a waiting
// writer queues; a reader that comes after it is not let in ahead of it
// (no writer starvation behind continuous readers). Once the readers
// release, the writer is granted; the readers queued behind it are then
// granted together when it releases (the head's batch).
func TestRWLockWriterQueuedBlocksReaders(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	r1 := rwTake(t, srv, name, "read", "r1", 30)
	wrote := make(chan reply, 1)
	go func() {
		wrote <- call(t, srv, "POST", rwPath(name, "/write/wait"), `{"owner":"w1","ttl_seconds":30,"wait_seconds":15}`)
	}()
	waitQueued(t, srv, name, 1)
	rwHeld(t, srv, name, "read", "r2") // a try behind the queued writer
	var wg sync.WaitGroup
	var granted atomic.Int32
	readers := make(chan map[string]any, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := call(t, srv, "POST", rwPath(name, "/read/wait"), semBody(map[string]any{"owner": "q" + string(rune('0'+i)),
				"ttl_seconds": 30, "wait_seconds": 15}))
			if r.status == 200 && r.json["acquired"] == true {
				granted.Add(1)
				readers <- r.json["lease"].(map[string]any)
			}
		}()
	}
	waitQueued(t, srv, name, 4)
	rwRelease(t, srv, name, r1)
	w := <-wrote
	if w.status != 200 || w.json["acquired"] != true {
		t.Fatalf("queued writer: got %d %s, want granted", w.status, w.raw)
	}
	if g := granted.Load(); g != 0 {
		t.Fatalf("%d readers queued behind the writer were granted while it holds", g)
	}
	wl := w.json["lease"].(map[string]any)
	rwRelease(t, srv, name, wl)
	wg.Wait()
	close(readers)
	if g := granted.Load(); g != 3 {
		t.Fatalf("readers behind the writer: %d granted, want 3", g)
	}
	for l := range readers {
		if tokenOf(t, l) <= tokenOf(t, wl) {
			t.Errorf("reader token %d not above the writer's %d", tokenOf(t, l), tokenOf(t, wl))
		}
	}
}

// waitQueued polls status until the queue holds n entries (the event the
// test needs: a waiter has joined).
func waitQueued(tb testing.TB, srv *testenv.Server, name string, n int) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st := call(tb, srv, "GET", rwPath(name, ""), "")
		if q, _ := st.json["queue"].([]any); len(q) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling for an event in another process, not ordering
	}
	tb.Fatalf("the queue of %q never held %d entries", name, n)
}

// TestRWLockLateRenewal: a reader's renewal issued before its lease
// expired but landing after a writer took the lock (an instance whose
// clock lags) must not revive the reader; a writer's, after a reader took
// the lock, neither.
func TestRWLockLateRenewal(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	late := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(-3 * time.Second) }})
	name := res(t)
	r1 := rwTake(t, srv, name, "read", "r1", 2)
	clock.Advance(3 * time.Second)
	w := rwTake(t, srv, name, "write", "w1", 2)
	if r := call(t, late, "POST", rwPath(name, "/renew"), rwLeaseBody(r1, "ttl_seconds", 60)); r.status != 404 {
		t.Errorf("late renewal of the reader after the writer's grant: got %d %s, want 404", r.status, r.raw)
	}
	clock.Advance(3 * time.Second)
	r2 := rwTake(t, srv, name, "read", "r2", 30)
	if r := call(t, late, "POST", rwPath(name, "/renew"), rwLeaseBody(w, "ttl_seconds", 60)); r.status != 404 {
		t.Errorf("late renewal of the writer after a reader's grant: got %d %s, want 404", r.status, r.raw)
	}
	st := call(t, srv, "GET", rwPath(name, ""), "")
	if st.json["writer"] != nil || len(st.json["readers"].([]any)) != 1 {
		t.Errorf("status: got %s, want r2 alone (%v)", st.raw, r2)
	}
}

// TestRWLockSDKRetryFindsOwnGrant: an acquire's write lands but its
// answer is lost (the proxy answers 500 after applying it); the SDK's
// retry is refused (the lease is taken), and the service finds its own
// grant by grant id and answers it.
func TestRWLockSDKRetryFindsOwnGrant(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"read", "write"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			proxy := newProxy(t)
			srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: steppingClock()})
			name := res(t)
			var n atomic.Int32
			proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
				if r.Op == "UpdateItem" && n.Add(1) == 1 {
					return faultproxy.Action{Fault: faultproxy.AppliedThen500}
				}
				return faultproxy.Action{}
			})
			r := rwTry(t, srv, name, mode, "a1", 3600)
			if r.status != 200 || r.json["acquired"] != true {
				t.Fatalf("acquire whose first write landed: got %d %s, want 200 acquired", r.status, r.raw)
			}
			st := call(t, srv, "GET", rwPath(name, ""), "")
			holders := len(st.json["readers"].([]any))
			if st.json["writer"] != nil {
				holders++
			}
			if holders != 1 {
				t.Errorf("status: got %s, want one lease", st.raw)
			}
		})
	}
}

// TestRWLockReaderBound: MaxReaders readers hold at once; one more is held.
func TestRWLockReaderBound(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	for i := range locklogic.MaxReaders {
		rwTake(t, srv, name, "read", "r", 30)
		_ = i
	}
	rwHeld(t, srv, name, "read", "r")
}
