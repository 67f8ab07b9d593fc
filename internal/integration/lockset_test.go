package integration_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// Lock sets (docs/design.md#lock-sets) against dynalite, in the harness's
// store mode (TESTENV_STORE=old-item runs them on the path AWS takes).

func setPath(prefix string) string { return "/locksets/" + url.PathEscape(prefix) }

func setBody(owner string, ttl int, names ...string) string {
	b, _ := json.Marshal(map[string]any{"owner": owner, "ttl_seconds": ttl, "names": names})
	return string(b)
}

// setLocksBody is a renewal's (ttl above 0) or a release's body: the
// set's answered locks sent back as they are.
func setLocksBody(owner string, ttl int, locks []any) string {
	m := map[string]any{"owner": owner, "locks": locks}
	if ttl > 0 {
		m["ttl_seconds"] = ttl
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// acquireSet takes names as owner and fails the test unless granted; it
// returns the answer's locks.
func acquireSet(tb testing.TB, srv *testenv.Server, prefix, owner string, names ...string) []any {
	tb.Helper()
	r := call(tb, srv, "POST", setPath(prefix), setBody(owner, 60, names...))
	if r.status != 200 || r.json["acquired"] != true {
		tb.Fatalf("set %v as %s: got %d %s, want 200 acquired", names, owner, r.status, r.raw)
	}
	return r.json["locks"].([]any)
}

// heldBy reports the owner of resource's live lease ("" when free).
func heldBy(tb testing.TB, srv *testenv.Server, resource string) string {
	tb.Helper()
	r := call(tb, srv, "GET", lockPath(resource), "")
	if r.status == 404 {
		return ""
	}
	if r.status != 200 {
		tb.Fatalf("status %q: got %d %s", resource, r.status, r.raw)
	}
	return r.json["owner"].(string)
}

// TestLockSetGranted: an uncontended set of 5 is one write per name, in
// byte order whatever order it was asked in, each with its own lease and
// token; one call renews all and one releases all (one write per name
// each). The admin listing shows the set's id on each lease.
func TestLockSetGranted(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	p := res(t)
	names := []string{p + ":e", p + ":c", p + ":a", p + ":d", p + ":b"}
	srv.Ops.Take()
	r := call(t, srv, "POST", setPath(p), setBody("w1", 60, names...))
	if r.status != 200 || r.json["acquired"] != true {
		t.Fatalf("got %d %s, want acquired", r.status, r.raw)
	}
	ops := srv.Ops.Take()
	t.Logf("acquire, 5 names uncontended: %v", ops)
	if ops["UpdateItem"] != 5 || len(ops) != 1 {
		t.Errorf("acquire of 5: got store calls %v, want 5 UpdateItem", ops)
	}
	locks := r.json["locks"].([]any)
	setID, _ := r.json["set_id"].(string)
	for i, l := range locks {
		lk := l.(map[string]any)
		if want := p + ":" + string(rune('a'+i)); lk["resource"] != want {
			t.Errorf("locks[%d]: got %v, want %s (byte order)", i, lk["resource"], want)
		}
		if heldBy(t, srv, lk["resource"].(string)) != "w1" {
			t.Errorf("%v is not held by w1", lk["resource"])
		}
	}
	list := call(t, srv, "GET", "/admin/locks?prefix="+url.QueryEscape(p), "")
	for _, l := range list.json["locks"].([]any) {
		if got := l.(map[string]any)["set_id"]; got != setID || setID == "" {
			t.Errorf("listing of %v: set_id %v, want %q", l.(map[string]any)["resource"], got, setID)
		}
	}

	srv.Ops.Take()
	rn := call(t, srv, "POST", setPath(p)+"/renew", setLocksBody("w1", 120, locks))
	if rn.status != 200 || rn.json["renewed"] != true {
		t.Fatalf("renew: got %d %s", rn.status, rn.raw)
	}
	if ops := srv.Ops.Take(); ops["UpdateItem"] != 5 || len(ops) != 1 {
		t.Errorf("renew of 5: got store calls %v, want 5 UpdateItem", ops)
	}
	rel := call(t, srv, "DELETE", setPath(p), setLocksBody("w1", 0, locks))
	if rel.status != 204 {
		t.Fatalf("release: got %d %s, want 204", rel.status, rel.raw)
	}
	if ops := srv.Ops.Take(); ops["UpdateItem"] != 5 || len(ops) != 1 {
		t.Errorf("release of 5: got store calls %v, want 5 UpdateItem", ops)
	}
	for _, n := range names {
		if o := heldBy(t, srv, n); o != "" {
			t.Errorf("%s after the release: held by %q", n, o)
		}
	}
}

// TestLockSetRollback: a set whose third name is held takes the first two,
// is refused on the third, releases the two and answers the name that
// blocked it; the names after it are never written.
func TestLockSetRollback(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	p := res(t)
	acquire(t, srv, p+":c", "w2", 60)
	srv.Ops.Take()
	r := call(t, srv, "POST", setPath(p), setBody("w1", 60, p+":a", p+":b", p+":c", p+":d", p+":e"))
	if r.status != 200 || r.json["acquired"] != false || r.json["blocked_by"] != p+":c" || r.json["unreleased"] != nil {
		t.Fatalf("got %d %s, want acquired false, blocked_by %s", r.status, r.raw, p+":c")
	}
	ops := srv.Ops.Take()
	t.Logf("refused on the 3rd of 5 (%s store): %v", srv.Store, ops)
	if ops["UpdateItem"] != 5 { // a, b, c refused; a and b released
		t.Errorf("got store calls %v, want 5 UpdateItem (3 acquires, 2 releases)", ops)
	}
	if srv.Store == testenv.StoreOldItem && r.json["free_at"] == nil {
		t.Errorf("old-item store: got %s, want free_at", r.raw)
	}
	for _, n := range []string{"a", "b", "d", "e"} {
		if o := heldBy(t, srv, p+":"+n); o != "" {
			t.Errorf("%s after the refused set: held by %q, want free", n, o)
		}
	}
	if o := heldBy(t, srv, p+":c"); o != "w2" {
		t.Errorf("the blocker: held by %q, want w2", o)
	}
}

// TestLockSetNoDeadlock: two owners ask for overlapping sets in opposite
// orders, again and again, at once. Neither ever holds the shared name
// while the other does (checked by both from their grant to their
// release), and both finish: a set never waits holding a name.
func TestLockSetNoDeadlock(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	p := res(t)
	shared := p + ":m"
	sets := map[string][]string{
		"w1": {p + ":z", shared, p + ":a"},
		"w2": {p + ":a", shared, p + ":z"},
	}
	var holder atomic.Value
	holder.Store("")
	grants := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for owner, names := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				r := call(t, srv, "POST", setPath(p), setBody(owner, 30, names...))
				if r.status != 200 {
					t.Errorf("%s: got %d %s", owner, r.status, r.raw)
					return
				}
				if r.json["acquired"] != true {
					if r.json["unreleased"] != nil {
						t.Errorf("%s: rollback left %v", owner, r.json["unreleased"])
					}
					continue
				}
				if !holder.CompareAndSwap("", owner) {
					t.Errorf("%s granted the shared name while %v holds it", owner, holder.Load())
				}
				mu.Lock()
				grants[owner]++
				mu.Unlock()
				locks := r.json["locks"].([]any)
				holder.Store("")
				if rel := call(t, srv, "DELETE", setPath(p), setLocksBody(owner, 0, locks)); rel.status != 204 {
					t.Errorf("%s release: got %d %s", owner, rel.status, rel.raw)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("grants: %v", grants)
	if grants["w1"]+grants["w2"] == 0 {
		t.Errorf("no set was ever granted")
	}
}

// TestLockSetSDKRetryFindsOwnGrant: the second name's write lands but its
// answer is lost (500); the SDK's retry carries the same set id as grant
// id and finds its own lease: the set is granted, not refused by itself.
func TestLockSetSDKRetryFindsOwnGrant(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL(), Now: steppingClock()})
	p := res(t)
	var n atomic.Int32
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" && n.Add(1) == 2 {
			return faultproxy.Action{Fault: faultproxy.AppliedThen500}
		}
		return faultproxy.Action{}
	})
	r := call(t, srv, "POST", setPath(p), setBody("w1", 60, p+":a", p+":b", p+":c"))
	if r.status != 200 || r.json["acquired"] != true {
		t.Fatalf("got %d %s, want acquired (the retry finds its own grant)", r.status, r.raw)
	}
	writes := 0
	for _, rec := range proxy.Records() {
		if rec.Op == "UpdateItem" {
			writes++
		}
	}
	if writes != 4 {
		t.Errorf("got %d writes, want 4 (a, b, b retried, c)", writes)
	}
	for _, l := range r.json["locks"].([]any) {
		lk := l.(map[string]any)
		if o := heldBy(t, srv, lk["resource"].(string)); o != "w1" {
			t.Errorf("%v: held by %q, want w1", lk["resource"], o)
		}
	}
}

// TestLockSetRollbackFailure: a refused set whose release of a name it
// took fails (the store answers 500 to every attempt) says which name it
// could not release; that name stays held by the caller, until its TTL.
func TestLockSetRollbackFailure(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	direct := testenv.Start(t, testenv.Options{})
	p := res(t)
	acquire(t, direct, p+":b", "w2", 60)
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		// The release's update sets release_id (#ri); acquires do not.
		if r.Op == "UpdateItem" && bytes.Contains(r.Body, []byte(`":ri"`)) {
			return faultproxy.Action{Fault: faultproxy.InternalError}
		}
		return faultproxy.Action{}
	})
	r := call(t, srv, "POST", setPath(p), setBody("w1", 60, p+":a", p+":b"))
	if r.status != 200 || r.json["acquired"] != false || r.json["blocked_by"] != p+":b" {
		t.Fatalf("got %d %s, want refused on %s", r.status, r.raw, p+":b")
	}
	un, _ := r.json["unreleased"].([]any)
	if len(un) != 1 || un[0] != p+":a" {
		t.Errorf("unreleased: got %v, want [%s]", r.json["unreleased"], p+":a")
	}
	if o := heldBy(t, direct, p+":a"); o != "w1" {
		t.Errorf("%s: held by %q, want w1 until its TTL", p+":a", o)
	}
}

// TestLockSetPartialRelease: a set's release whose one name was force
// released by an operator releases the rest and answers 200 with each
// name's outcome: the lost one with the lock's own problem.
func TestLockSetPartialRelease(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	p := res(t)
	locks := acquireSet(t, srv, p, "w1", p+":a", p+":b")
	if r := call(t, srv, "DELETE", adminPath(p+":b"), `{"reason":"test","immediate":true}`); r.status != 200 {
		t.Fatalf("force release: got %d %s", r.status, r.raw)
	}
	rel := call(t, srv, "DELETE", setPath(p), setLocksBody("w1", 0, locks))
	if rel.status != 200 || rel.json["released"] != false {
		t.Fatalf("got %d %s, want 200 released false", rel.status, rel.raw)
	}
	items := rel.json["locks"].([]any)
	a, b := items[0].(map[string]any), items[1].(map[string]any)
	if a["ok"] != true || b["ok"] != false {
		t.Errorf("got %s, want a ok and b not", rel.raw)
	}
	if pr, _ := b["problem"].(map[string]any); pr == nil || !strings.HasSuffix(pr["type"].(string), "/not-found") {
		t.Errorf("b: got %v, want a not-found problem", b["problem"])
	}
	if o := heldBy(t, srv, p+":a"); o != "" {
		t.Errorf("a: held by %q after the release", o)
	}
	rn := call(t, srv, "POST", setPath(p)+"/renew", setLocksBody("w1", 60, locks))
	if rn.status != 200 || rn.json["renewed"] != false {
		t.Errorf("renew of a released set: got %d %s, want 200 renewed false", rn.status, rn.raw)
	}
}

// TestLockSetValidation: bad sets are 422 naming every bad field, and
// never reach the store.
func TestLockSetValidation(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	p := res(t)
	many := make([]string, 26)
	for i := range many {
		many[i] = p + ":" + string(rune('a'+i))
	}
	for _, tc := range []struct {
		name, path, method, body string
		fields                   []string
	}{
		{"Duplicate", setPath(p), "POST", setBody("w1", 30, p+":a", p+":b", p+":a"), []string{"names[2]"}},
		{"OutsidePrefix", setPath(p), "POST", setBody("w1", 30, p+":a", "other:b"), []string{"names[1]"}},
		{"TooMany", setPath(p), "POST", setBody("w1", 30, many...), []string{"names"}},
		{"Empty", setPath(p), "POST", setBody("w1", 30), []string{"names"}},
		{"NotStrings", setPath(p), "POST", `{"owner":"w1","ttl_seconds":30,"names":[1,2]}`, []string{"names"}},
		{"EveryField", setPath(p), "POST", `{"owner":" ","ttl_seconds":0,"names":["` + p + `:a","` + p + `:a"],"wait_seconds":3}`,
			[]string{"owner", "ttl_seconds", "names[1]", "wait_seconds"}},
		{"WaitMissing", setPath(p) + "/wait", "POST", setBody("w1", 30, p+":a"), []string{"wait_seconds"}},
		{"RenewNoToken", setPath(p) + "/renew", "POST", `{"owner":"w1","ttl_seconds":30,"locks":[{"resource":"` + p + `:a"}]}`,
			[]string{"locks[0].fencing_token"}},
		{"ReleaseOutside", setPath(p), "DELETE", `{"owner":"w1","locks":[{"resource":"x","fencing_token":"7"}]}`,
			[]string{"locks[0].resource", "locks[0].fencing_token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Ops.Take()
			r := call(t, srv, tc.method, tc.path, tc.body)
			wantProblem(t, r, 422, "validation-failed")
			var got []string
			for _, e := range r.json["errors"].([]any) {
				got = append(got, e.(map[string]any)["field"].(string))
			}
			for _, f := range tc.fields {
				if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+f+" ") {
					t.Errorf("got fields %v, want %s among them (%s)", got, f, r.raw)
				}
			}
			if ops := srv.Ops.Take(); len(ops) != 0 {
				t.Errorf("store calls %v, want none", ops)
			}
		})
	}
}

// setWaitBody is a waiting set request's body (ticket: an earlier
// round's queue_ticket, or "").
func setWaitBody(owner string, ttl, wait int, ticket string, names ...string) string {
	m := map[string]any{"owner": owner, "ttl_seconds": ttl, "names": names, "wait_seconds": wait}
	if ticket != "" {
		m["queue_ticket"] = ticket
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// expiresAt returns the expires_at of resource's live lease.
func expiresAt(tb testing.TB, srv *testenv.Server, resource string) time.Time {
	tb.Helper()
	r := call(tb, srv, "GET", lockPath(resource), "")
	if r.status != 200 {
		tb.Fatalf("status %q: got %d %s, want 200", resource, r.status, r.raw)
	}
	at, err := time.Parse(time.RFC3339Nano, r.json["expires_at"].(string))
	if err != nil {
		tb.Fatal(err)
	}
	return at
}

// waitReadsName returns a proxy plan that closes the channel at the first
// read of name: a set's wait on it has begun (its lock's fair wait reads
// the item before or after it joins the queue, in either store mode).
func waitReadsName(name string) (func(faultproxy.Request) faultproxy.Action, <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "GetItem" && bytes.Contains(r.Body, []byte(strconv.Quote(name))) {
			once.Do(func() { close(ch) })
		}
		return faultproxy.Action{}
	}, ch
}

// TestLockSetWaitGranted: a waiting set refused by a held name waits in
// that name's queue holding the names before it, their leases written to
// outlive the wait; once the holder releases, the set is granted, and
// the earlier names' leases are renewed to the set's TTL from the grant.
func TestLockSetWaitGranted(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	direct := testenv.Start(t, testenv.Options{})
	p := res(t)
	holder := acquire(t, direct, p+":b", "w2", 60)
	plan, waiting := waitReadsName(p + ":b")
	proxy.SetPlan(plan)
	done := make(chan reply, 1)
	invoke := time.Now()
	go func() {
		done <- call(t, srv, "POST", setPath(p)+"/wait", setWaitBody("w1", 30, 10, "", p+":a", p+":b"))
	}()
	<-waiting
	if o := heldBy(t, direct, p+":a"); o != "w1" {
		t.Errorf("%s while the set waits on %s: held by %q, want w1 (a set waits holding the names before)", p+":a", p+":b", o)
	}
	// The wait ends 0.5 s before its 10 s: the lease runs past that
	// plus the TTL, where a try's would end 30 s after the invoke.
	if exp, want := expiresAt(t, direct, p+":a"), invoke.Add(39*time.Second); exp.Before(want) {
		t.Errorf("%s expires at %v while the set waits, want at least %v (the wait plus the TTL)", p+":a", exp, want)
	}
	if r := call(t, direct, "DELETE", lockPath(p+":b"), ownerBody("w2", token(t, holder))); r.status != 204 {
		t.Fatalf("release the blocker: got %d %s", r.status, r.raw)
	}
	r := <-done
	granted := time.Now()
	if r.status != 200 || r.json["acquired"] != true {
		t.Fatalf("got %d %s, want acquired once the blocker released", r.status, r.raw)
	}
	for _, n := range []string{":a", ":b"} {
		if o := heldBy(t, direct, p+n); o != "w1" {
			t.Errorf("%s: held by %q, want w1", p+n, o)
		}
		if exp := expiresAt(t, direct, p+n); exp.After(granted.Add(30 * time.Second)) {
			t.Errorf("%s expires at %v, want by %v (the TTL from the grant)", p+n, exp, granted.Add(30*time.Second))
		}
	}
}

// TestLockSetWaitRoundKeepsPlace: a waiting round that runs out gives back
// the names it held and answers the name it waited on with its place in
// that name's queue; the next round that sends the ticket back finds the
// same place.
func TestLockSetWaitRoundKeepsPlace(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	p := res(t)
	acquire(t, srv, p+":b", "w2", 60)
	r := call(t, srv, "POST", setPath(p)+"/wait", setWaitBody("w1", 30, 1, "", p+":a", p+":b"))
	ticket, _ := r.json["queue_ticket"].(string)
	if r.status != 200 || r.json["acquired"] != false || r.json["blocked_by"] != p+":b" || ticket == "" {
		t.Fatalf("got %d %s, want not acquired, blocked by %s, with a queue_ticket", r.status, r.raw, p+":b")
	}
	if o := heldBy(t, srv, p+":a"); o != "" {
		t.Errorf("%s after the round: held by %q, want free (given back)", p+":a", o)
	}
	r = call(t, srv, "POST", setPath(p)+"/wait", setWaitBody("w1", 30, 1, ticket, p+":a", p+":b"))
	if r.status != 200 || r.json["acquired"] != false || r.json["queue_ticket"] != ticket {
		t.Errorf("the next round: got %d %s, want not acquired with queue_ticket %q (its place kept)", r.status, r.raw, ticket)
	}
}

// TestLockSetWaitForceReleased: a name the set holds while it waits is
// force released; at the grant the set takes it again with the set's own
// grant (or, were it gone to another, gives everything back and starts
// over), so the answer never lists the lease that ended: the name's lease
// in the answer is a new one, held.
func TestLockSetWaitForceReleased(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	direct := testenv.Start(t, testenv.Options{})
	p := res(t)
	holder := acquire(t, direct, p+":b", "w2", 60)
	plan, waiting := waitReadsName(p + ":b")
	proxy.SetPlan(plan)
	done := make(chan reply, 1)
	go func() {
		done <- call(t, srv, "POST", setPath(p)+"/wait", setWaitBody("w1", 30, 10, "", p+":a", p+":b"))
	}()
	<-waiting
	st := call(t, direct, "GET", lockPath(p+":a"), "")
	if st.status != 200 {
		t.Fatalf("status of %s while the set waits: got %d %s", p+":a", st.status, st.raw)
	}
	first := token(t, st.json)
	if r := call(t, direct, "DELETE", adminPath(p+":a"), reasonBody("test")); r.status != 200 && r.status != 204 {
		t.Fatalf("force release %s: got %d %s", p+":a", r.status, r.raw)
	}
	if r := call(t, direct, "DELETE", lockPath(p+":b"), ownerBody("w2", token(t, holder))); r.status != 204 {
		t.Fatalf("release the blocker: got %d %s", r.status, r.raw)
	}
	r := <-done
	if r.status != 200 || r.json["acquired"] != true {
		t.Fatalf("got %d %s, want acquired", r.status, r.raw)
	}
	a := r.json["locks"].([]any)[0].(map[string]any)
	if got := token(t, a); got <= first {
		t.Errorf("%s in the answer: token %d, want above %d (the force released lease's)", p+":a", got, first)
	}
	if o := heldBy(t, direct, p+":a"); o != "w1" {
		t.Errorf("%s: held by %q, want w1", p+":a", o)
	}
}
