package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// Fair waiting on dynalite: waiters are served in arrival order, a plain
// acquire does not pass a queued waiter, a departed waiter's place lapses,
// and the rules of locks (grant guard, late writes, lock-delay, principal
// binding, force release, watch) hold with a queue on the item. Tests
// wait on events (an entry appearing in the item, an answer), not sleeps.

// fifoBody is a waiting acquire's body, with ticket when not "".
func fifoBody(owner string, ttl, wait int, ticket string) string {
	m := map[string]any{"owner": owner, "ttl_seconds": ttl, "wait_seconds": wait}
	if ticket != "" {
		m["queue_ticket"] = ticket
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// fifoWait sends a waiting acquire (with ticket when not "") in the
// background; the answer arrives on the channel.
func fifoWait(t *testing.T, srv *testenv.Server, resource, owner string, wait int, ticket string) <-chan timedReply {
	t.Helper()
	out := make(chan timedReply, 1)
	go func() {
		r := call(t, srv, "POST", waitPath(resource), fifoBody(owner, 30, wait, ticket))
		out <- timedReply{r, time.Now()}
	}()
	return out
}

// qEntry is one entry of a lock's queue as stored.
type qEntry struct {
	id, owner, principal string
	until                int64
}

// lockItem reads resource's item strongly consistently, straight from
// the store.
func lockItem(tb testing.TB, srv *testenv.Server, resource string) map[string]types.AttributeValue {
	tb.Helper()
	out, err := srv.DB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(testenv.Table),
		Key: map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: resource}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		tb.Fatal(err)
	}
	return out.Item
}

// queueOf returns the queue stored on resource's item.
func queueOf(tb testing.TB, srv *testenv.Server, resource string) []qEntry {
	tb.Helper()
	l, _ := lockItem(tb, srv, resource)[locklogic.AttrQueue].(*types.AttributeValueMemberL)
	if l == nil {
		return nil
	}
	var out []qEntry
	for _, v := range l.Value {
		m := v.(*types.AttributeValueMemberM).Value
		s := func(k string) string {
			if x, ok := m[k].(*types.AttributeValueMemberS); ok {
				return x.Value
			}
			return ""
		}
		until, _ := strconv.ParseInt(m["until"].(*types.AttributeValueMemberN).Value, 10, 64)
		out = append(out, qEntry{id: s("id"), owner: s("owner"), principal: s("principal"), until: until})
	}
	return out
}

// awaitQueue polls resource's item until ok holds for its queue (at most
// 10 s) and returns that queue: the event a test waits for before the next
// step.
func awaitQueue(tb testing.TB, srv *testenv.Server, resource, what string, ok func([]qEntry) bool) []qEntry {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q := queueOf(tb, srv, resource)
		if ok(q) {
			return q
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the queue of %q never showed %s: %+v", resource, what, q)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitJoin waits until owner's live entry is the last of n in the queue.
func awaitJoin(tb testing.TB, srv *testenv.Server, resource, owner string, n int) []qEntry {
	tb.Helper()
	return awaitQueue(tb, srv, resource, owner+" joined as entry "+strconv.Itoa(n), func(q []qEntry) bool {
		return len(q) == n && q[n-1].owner == owner
	})
}

func release(tb testing.TB, srv *testenv.Server, resource, owner string, lock map[string]any) {
	tb.Helper()
	if r := call(tb, srv, "DELETE", lockPath(resource), ownerBody(owner, token(tb, lock))); r.status != 204 {
		tb.Fatalf("release %q by %q: got %d %s", resource, owner, r.status, r.raw)
	}
}

func granted(tb testing.TB, who string, r timedReply) map[string]any {
	tb.Helper()
	if r.status != 200 || r.json["acquired"] != true {
		tb.Fatalf("%s: got %d %s, want the lock", who, r.status, r.raw)
	}
	return r.json["lock"].(map[string]any)
}

func msOf(tb testing.TB, lock map[string]any, field string) int64 {
	tb.Helper()
	at, err := time.Parse(time.RFC3339, lock[field].(string))
	if err != nil {
		tb.Fatal(err)
	}
	return at.UnixMilli()
}

// firstAnswer waits for the first answer on answers[j] of any j in
// pending and returns j and the answer.
func firstAnswer(answers []<-chan timedReply, pending map[int]bool) (int, timedReply) {
	var idx []int
	var cases []reflect.SelectCase
	for j := range pending {
		idx = append(idx, j)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(answers[j])})
	}
	i, v, _ := reflect.Select(cases)
	return idx[i], v.Interface().(timedReply)
}

// TestFairWaitingArrivalOrder: four waiters arrive in a known order (each
// starts once the one before it is in the queue); every one takes the lock
// and releases it at once, and the grants come in arrival order, whichever
// answer comes first. It also reports what a waiter's round costs.
func TestFairWaitingArrivalOrder(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 30)
	const n = 4
	answers := make([]<-chan timedReply, n)
	srv.Ops.Take()
	for i := range n {
		owner := "w" + strconv.Itoa(i)
		answers[i] = fifoWait(t, srv, r0, owner, 20, "")
		awaitJoin(t, srv, r0, owner, i+1)
	}
	joined := srv.Ops.Take()
	release(t, srv, r0, "holder", held)
	var order []int
	pending := map[int]bool{0: true, 1: true, 2: true, 3: true}
	for len(pending) > 0 {
		// Whichever answer comes first: a grant out of order shows here.
		got, answer := firstAnswer(answers, pending)
		delete(pending, got)
		order = append(order, got)
		owner := "w" + strconv.Itoa(got)
		release(t, srv, r0, owner, granted(t, owner, answer))
	}
	for k, got := range order {
		if got != k {
			t.Fatalf("grant order %v, want arrival order [0 1 2 3]", order)
		}
	}
	if q := queueOf(t, srv, r0); len(q) != 0 {
		t.Errorf("queue after every waiter was served: %+v, want empty", q)
	}
	all := srv.Ops.Take()
	// Before the release: each waiter's first attempt, its consistent read
	// (dynalite returns no old item) and its join, plus the watch reads;
	// after it: the grants, the releases and the watch.
	t.Logf("requests while %d waiters joined: %v; from the release to the last grant's release: %v", n, joined, all)
	if joined["UpdateItem"] != 2*n {
		t.Errorf("writes while joining: got %d, want %d (first attempt and join each)", joined["UpdateItem"], 2*n)
	}
	if all["UpdateItem"] != 2*n+1 {
		t.Errorf("writes from the release on: got %d, want %d (the holder's release, then a grant and a release each)", all["UpdateItem"], 2*n+1)
	}
}

// TestFairWaitingNoBarging: while a waiter is queued, an acquire without
// wait_seconds does not take the free lock, not even in the moment between
// the release and the head's grant (the head's reads are held back here so
// that the moment lasts); once the queue is empty, it does, in one request.
func TestFairWaitingNoBarging(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 30)
	answer := fifoWait(t, slow, r0, "waiter", 10, "")
	awaitJoin(t, srv, r0, "waiter", 1)
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
	release(t, srv, r0, "holder", held)
	srv.Ops.Take()
	if r := call(t, srv, "POST", lockPath(r0), acquireBody("barger", 30)); r.status != 200 || r.json["acquired"] != false {
		t.Fatalf("plain acquire of the free lock while a waiter is queued: got %d %s, want acquired:false", r.status, r.raw)
	}
	if ops := srv.Ops.Take(); ops["UpdateItem"] != 1 || len(ops) != 1 {
		t.Errorf("the refused acquire sent %v, want 1 UpdateItem", ops)
	}
	reads.release()
	lock := granted(t, "waiter", <-answer)
	release(t, srv, r0, "waiter", lock)
	srv.Ops.Take()
	if r := call(t, srv, "POST", lockPath(r0), acquireBody("barger", 30)); r.json["acquired"] != true {
		t.Fatalf("plain acquire once the queue is empty: got %d %s, want the lock", r.status, r.raw)
	}
	if ops := srv.Ops.Take(); ops["UpdateItem"] != 1 || len(ops) != 1 {
		t.Errorf("the acquire sent %v, want 1 UpdateItem", ops)
	}
}

// TestFairWaitingDepartedWaiter: a waiter whose round ends, held, and that
// never comes back keeps its place only until its until (the round's end
// plus QueueGrace); then the waiter behind it is served. A plain acquire
// is not kept out by lapsed entries alone.
func TestFairWaitingDepartedWaiter(t *testing.T) {
	t.Parallel()
	t.Run("NextIsServed", func(t *testing.T) {
		t.Parallel()
		srv := testenv.Start(t, testenv.Options{})
		r0 := res(t)
		held := acquire(t, srv, r0, "holder", 30)
		gone := fifoWait(t, srv, r0, "gone", 2, "")
		q := awaitJoin(t, srv, r0, "gone", 1)
		next := fifoWait(t, srv, r0, "next", 20, "")
		awaitJoin(t, srv, r0, "next", 2)
		g := <-gone
		if g.status != 200 || g.json["acquired"] != false || g.json["queue_ticket"] != q[0].id {
			t.Fatalf("the departing waiter's round: got %d %s, want held with its ticket %q", g.status, g.raw, q[0].id)
		}
		release(t, srv, r0, "holder", held)
		lock := granted(t, "next", <-next)
		at := msOf(t, lock, "acquired_at")
		if at < q[0].until {
			t.Errorf("next was granted %d ms before the departed waiter's place lapsed: it must wait for it", q[0].until-at)
		}
		// The second in line looks every 100 ms on average (150 ms at
		// most); slack for a loaded machine.
		if at > q[0].until+1500 {
			t.Errorf("next was granted %d ms after the departed waiter's place lapsed, want within 1.5 s", at-q[0].until)
		}
		if q := queueOf(t, srv, r0); len(q) != 0 {
			t.Errorf("queue after the grant: %+v, want the lapsed entry removed", q)
		}
	})
	t.Run("PlainAcquireOverLapsedEntries", func(t *testing.T) {
		t.Parallel()
		// A server of its own: the requests it counts are its own, not
		// the other waiter's reads.
		srv := testenv.Start(t, testenv.Options{})
		r0 := res(t)
		held := acquire(t, srv, r0, "holder", 30)
		gone := fifoWait(t, srv, r0, "gone", 1, "")
		q := awaitJoin(t, srv, r0, "gone", 1)
		<-gone
		release(t, srv, r0, "holder", held)
		if r := call(t, srv, "POST", lockPath(r0), acquireBody("plain", 30)); r.json["acquired"] != false {
			t.Fatalf("plain acquire while the waiter's place is live: got %s, want held", r.raw)
		}
		time.Sleep(time.Until(time.UnixMilli(q[0].until + 10)))
		srv.Ops.Take()
		if r := call(t, srv, "POST", lockPath(r0), acquireBody("plain", 30)); r.json["acquired"] != true {
			t.Fatalf("plain acquire once every queued place lapsed: got %s, want the lock", r.raw)
		}
		if ops := srv.Ops.Take(); ops["UpdateItem"] != 1 || len(ops) != 1 {
			t.Errorf("the acquire sent %v, want 1 UpdateItem", ops)
		}
	})
}

// TestFairWaitingTicketKeepsPlace: a waiter whose round ended held comes
// back with its queue_ticket and keeps its place ahead of a later waiter;
// a ticket of a lapsed place would have joined it behind. A round without a
// ticket (a client that predates it) takes over its owner's place whose
// round has ended, likewise.
func TestFairWaitingTicketKeepsPlace(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	for _, sendTicket := range []bool{true, false} {
		t.Run(map[bool]string{true: "Ticket", false: "NoTicket"}[sendTicket], func(t *testing.T) {
			t.Parallel()
			r0 := res(t)
			held := acquire(t, srv, r0, "holder", 30)
			first := fifoWait(t, srv, r0, "first", 2, "") // a short round: it ends held, with a ticket
			q := awaitJoin(t, srv, r0, "first", 1)
			later := fifoWait(t, srv, r0, "later", 20, "")
			awaitJoin(t, srv, r0, "later", 2)
			r := <-first
			ticket, _ := r.json["queue_ticket"].(string)
			if r.json["acquired"] != false || ticket != q[0].id {
				t.Fatalf("first round: got %s, want held with the ticket %q", r.raw, q[0].id)
			}
			if !sendTicket {
				ticket = ""
			}
			again := fifoWait(t, srv, r0, "first", 20, ticket)
			awaitQueue(t, srv, r0, "first's place moved to its second round", func(e []qEntry) bool {
				return len(e) == 2 && e[0].id == q[0].id && e[0].until > q[0].until
			})
			release(t, srv, r0, "holder", held)
			select {
			case r := <-later:
				t.Fatalf("the later waiter answered first: %d %s", r.status, r.raw)
			case r := <-again:
				release(t, srv, r0, "first", granted(t, "first, second round", r))
			}
			release(t, srv, r0, "later", granted(t, "later", <-later))
		})
	}
}

// TestFairWaitingJoinSDKRetry: a join lands but its answer is lost; the
// SDK's retry is refused (the queue version moved with the join). The
// waiter must find its place in the item rather than join twice: a second
// entry would outlive its grant and keep the lock from others.
func TestFairWaitingJoinSDKRetry(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	direct := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	var n atomic.Int32
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "UpdateItem" && strings.Contains(string(r.Body), "list_append") && n.Add(1) == 1 {
			return faultproxy.Action{Fault: faultproxy.AppliedThen500}
		}
		return faultproxy.Action{}
	})
	held := acquire(t, direct, r0, "holder", 30)
	answer := fifoWait(t, srv, r0, "waiter", 5, "")
	awaitJoin(t, direct, r0, "waiter", 1)
	release(t, direct, r0, "holder", held)
	release(t, direct, r0, "waiter", granted(t, "waiter", <-answer))
	if n.Load() == 0 {
		t.Fatal("the join was never sent")
	}
	if q := queueOf(t, direct, r0); len(q) != 0 {
		t.Fatalf("queue after the waiter's grant: %+v, want empty (one entry, removed by the grant)", q)
	}
	if r := call(t, direct, "POST", lockPath(r0), acquireBody("plain", 30)); r.json["acquired"] != true {
		t.Errorf("plain acquire after the waiter's turn: got %s, want the lock", r.raw)
	}
}

// TestFairWaitingGrantGuard: with a waiter queued, a release in the last
// half second of its wait is not taken: the head writes no grant the
// caller may no longer be waiting for.
func TestFairWaitingGrantGuard(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 30)
	answer := fifoWait(t, srv, r0, "waiter", 2, "")
	awaitJoin(t, srv, r0, "waiter", 1)
	// The waiter arrived at the clock's time (which stands still): move
	// it into the last GrantGuard of the wait, then free the lock. A
	// real-time sleep raced the waiter's arrival on a loaded machine.
	clock.Advance(2*time.Second - locklogic.GrantGuard/2)
	release(t, srv, r0, "holder", held)
	if got := <-answer; got.json["acquired"] != false {
		t.Fatalf("waiter: got %d %s, want held: the lock came free in the last %s of its wait", got.status, got.raw, locklogic.GrantGuard)
	}
	wantProblem(t, call(t, srv, "GET", lockPath(r0), ""), 404, "not-found")
}

// TestFairWaitingWatchIgnoresQueue: joins and keeps of the queue write the
// item but change no lease: the watch index stays.
func TestFairWaitingWatchIgnoresQueue(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	acquire(t, srv, r0, "holder", 30)
	index := func() string {
		r := call(t, srv, "GET", lockPath(r0)+"/watch?index=0", "")
		if r.status != 200 {
			t.Fatalf("watch: got %d %s", r.status, r.raw)
		}
		return r.json["index"].(json.Number).String()
	}
	before := index()
	answer := fifoWait(t, srv, r0, "waiter", 2, "") // 2 s: room to join on a loaded machine
	awaitJoin(t, srv, r0, "waiter", 1)
	ticket, _ := (<-answer).json["queue_ticket"].(string)
	next := fifoWait(t, srv, r0, "waiter", 2, ticket)
	<-next
	r := call(t, srv, "GET", lockPath(r0)+"/watch?index="+before+"&wait_seconds=1", "")
	if r.status != 200 || r.json["index"].(json.Number).String() != before {
		t.Errorf("watch after the queue changed: got %d %s, want index %s unchanged", r.status, r.raw, before)
	}
}

// TestFairWaitingPrincipal: a place belongs to its owner and principal
// together: the same owner string under another principal, sending the
// ticket, joins at the back instead of taking the place.
func TestFairWaitingPrincipal(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Identity: func(r *http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
		if arn := r.Header.Get("X-Test-Caller"); arn != "" {
			return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: arn}
		}
		return nil
	}})
	const (
		alice = "arn:aws:iam::123456789012:user/alice"
		bob   = "arn:aws:iam::123456789012:user/bob"
	)
	r0 := res(t)
	// as sends an acquire as arn: a waiting one when the body waits.
	as := func(arn, body string) reply {
		path := lockPath(r0)
		if strings.Contains(body, `"wait_seconds"`) {
			path = waitPath(r0)
		}
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Caller", arn)
		return do(t, req)
	}
	if r := as(alice, acquireBody("holder", 30)); r.json["acquired"] != true {
		t.Fatalf("holder: %s", r.raw)
	}
	first := as(alice, fifoBody("w", 30, 1, ""))
	ticket, _ := first.json["queue_ticket"].(string)
	q := queueOf(t, srv, r0)
	if ticket == "" || len(q) != 1 || q[0].principal != alice {
		t.Fatalf("alice's round: got %s and queue %+v, want held with a place bound to alice", first.raw, q)
	}
	as(bob, fifoBody("w", 30, 1, ticket))
	q2 := queueOf(t, srv, r0)
	if len(q2) != 2 || q2[0].id != ticket || q2[0].until != q[0].until || q2[1].principal != bob || q2[1].id == ticket {
		t.Errorf("after bob sent alice's ticket: queue %+v, want alice's place untouched and bob at the back", q2)
	}
	// Alice's next round keeps her place and, once the holder is gone,
	// takes the lock as the head: a grant bound to her principal, with a
	// lock-delay.
	b, _ := json.Marshal(map[string]any{"owner": "w", "ttl_seconds": 30, "wait_seconds": 5, "queue_ticket": ticket, "lock_delay_seconds": 5})
	done := make(chan reply, 1)
	go func() { done <- as(alice, string(b)) }()
	awaitQueue(t, srv, r0, "alice's place moved", func(e []qEntry) bool { return len(e) > 0 && e[0].id == ticket && e[0].until > q[0].until })
	req, _ := http.NewRequest("DELETE", srv.URL+lockPath(r0), strings.NewReader(ownerBody("holder")))
	req.Header.Set("X-Test-Caller", alice)
	if r := do(t, req); r.status != 204 {
		t.Fatalf("holder's release: got %d %s", r.status, r.raw)
	}
	r := <-done
	if r.json["acquired"] != true {
		t.Fatalf("alice's round with her ticket: got %d %s, want the lock", r.status, r.raw)
	}
	item := lockItem(t, srv, r0)
	if p, _ := item[locklogic.AttrPrincipal].(*types.AttributeValueMemberS); p == nil || p.Value != alice || item[locklogic.AttrFreeAt] == nil {
		t.Errorf("alice's lease: %v, want bound to her principal, with a lock-delay", item)
	}
}

// joinRetryPlan lands the first queue join through the proxy and answers
// it 500 (the SDK retries it); the retry is held until between is closed.
func joinRetryPlan(retrying chan<- struct{}, between <-chan struct{}, landed chan struct{}) faultproxy.Plan {
	var n atomic.Int32
	return func(r faultproxy.Request) faultproxy.Action {
		if r.Op != "UpdateItem" || !bytes.Contains(r.Body, []byte("list_append")) {
			return faultproxy.Action{}
		}
		switch n.Add(1) {
		case 1:
			return faultproxy.Action{Fault: faultproxy.AppliedThen500}
		case 2:
			close(retrying)
			<-between
			return faultproxy.Action{Answered: landed}
		}
		return faultproxy.Action{}
	}
}

// TestFairWaitingJoinSDKRetryAfterHeadServed: B's join lands (queue [A, B])
// but its answer is lost; before the SDK's retry lands, A is granted (the
// head's grant removes queue[0]: the queue is [B], size 1 again). The
// retry must be refused (the queue version moved with the join), not
// append B's entry a second time: the ghost would stay queued after B's
// grant, live until B's round's end + 2 s, and keep the free lock from
// every later waiter and plain acquire. (A join conditioned on the
// queue's size did exactly that.)
func TestFairWaitingJoinSDKRetryAfterHeadServed(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 30)
	a := fifoWait(t, srv, r0, "A", 20, "")
	awaitJoin(t, srv, r0, "A", 1)

	retrying, between, landed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	proxy.SetPlan(joinRetryPlan(retrying, between, landed))
	b := fifoWait(t, slow, r0, "B", 20, "")
	<-retrying // B's join landed: [A, B]; its SDK retry is held
	release(t, srv, r0, "holder", held)
	la := granted(t, "A", <-a) // the head's grant: queue [B]
	close(between)             // B's retried join lands on a queue of size 1 again
	<-landed                   // the store answered B's retried join
	q := queueOf(t, srv, r0)
	t.Logf("queue after B's retried join: %+v", q)
	release(t, srv, r0, "A", la)
	lb := granted(t, "B", <-b)
	release(t, srv, r0, "B", lb)

	// Nobody holds the lock, nobody is waiting any more.
	q = queueOf(t, srv, r0)
	if len(q) != 0 {
		t.Errorf("queue after B was granted and released: %+v, want empty (B's ghost entry, live until %s, keeps the free lock from everyone)",
			q, time.UnixMilli(q[0].until).Format(time.RFC3339Nano))
	}
	start := time.Now()
	c := <-fifoWait(t, srv, r0, "C", 3, "")
	if c.status != 200 || c.json["acquired"] != true {
		t.Errorf("C's waiting acquire of the free lock (3 s): got %d %s after %v, want the lock", c.status, c.raw, time.Since(start).Round(time.Millisecond))
	} else {
		release(t, srv, r0, "C", granted(t, "C", c))
	}
	if r := call(t, srv, "POST", lockPath(r0), acquireBody("D", 30)); r.json["acquired"] != true {
		t.Errorf("D's plain acquire of the free lock: got %d %s, want the lock", r.status, r.raw)
	}
}

// TestFairWaitingServedHeadLowersQueueUntil: W1 (a 20 s
// round) and W2 (a 1 s round) queue behind holder H; W2's round ends and
// its client goes away, so W2's place lapses 2 s later. H releases, W1 is
// granted (its own entry leaves) and releases at once. The lock is free
// and the only entry left is lapsed: a plain acquire is not kept out by
// lapsed entries alone. W1's grant must lower queue_until to the entries
// it leaves (W2's, lapsed); before, it stayed W1's until (its round's
// end + 2 s, ~20 s away) and nobody removes W2's entry (only waiters
// prune), so every plain acquire of the free lock was refused until then.
func TestFairWaitingServedHeadLowersQueueUntil(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	held := acquire(t, srv, r0, "H", 30)
	w1 := fifoWait(t, srv, r0, "W1", 20, "")
	awaitJoin(t, srv, r0, "W1", 1)
	w2 := fifoWait(t, srv, r0, "W2", 1, "")
	q := awaitJoin(t, srv, r0, "W2", 2)
	if r := <-w2; r.json["acquired"] != false {
		t.Fatalf("W2's 1 s round: got %d %s, want held", r.status, r.raw)
	}
	// W2 does not come back: wait until its place has lapsed.
	time.Sleep(time.Until(time.UnixMilli(q[1].until)) + 100*time.Millisecond)
	release(t, srv, r0, "H", held)
	release(t, srv, r0, "W1", granted(t, "W1", <-w1))

	q = queueOf(t, srv, r0)
	t.Logf("queue with the lock free: %+v (now %d)", q, time.Now().UnixMilli())
	r := call(t, srv, "POST", lockPath(r0), acquireBody("D", 30))
	if r.json["acquired"] != true {
		t.Errorf("D's plain acquire of a free lock whose queue holds only a lapsed entry: got %d %s, want the lock (refused until W1's old until, %v from now)",
			r.status, r.raw, time.Until(time.UnixMilli(lockUntil(t, srv, r0))).Round(time.Second))
	}
}

// lockUntil returns the queue_until stored on resource's item (0: none).
func lockUntil(tb testing.TB, srv *testenv.Server, resource string) int64 {
	tb.Helper()
	item := lockItem(tb, srv, resource)
	v, ok := item["queue_until"]
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(v.(*types.AttributeValueMemberN).Value, 10, 64)
	return n
}
