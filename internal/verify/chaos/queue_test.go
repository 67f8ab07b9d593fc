package chaos

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ft288/locks/internal/verify/faultproxy"
)

// The queue's writes as the service sends them (docs/design.md, the
// listing's [H]–[K]), with their values filled in.

var queueNamesAll = map[string]string{"#r": "resource", "#q": "queue", "#qu": "queue_until", "#qi": "id", "#qt": "until", "#o": "owner", "#p": "principal"}

func entryJSON(ticket, owner string, until int64) map[string]any {
	return map[string]any{"M": map[string]any{"id": s(ticket), "owner": s(owner), "until": n(until)}}
}

// committed answers a queue write or a head's grant: 200, with the item
// after it when item is set.
func (f *fake) queueRec(req map[string]any, recv, ans int, result string, item map[string]any) {
	status, answer := 0, map[string]any{}
	switch result {
	case "committed":
		status = 200
		if item != nil {
			answer["Attributes"] = item
		}
	case "refused":
		status, answer["__type"] = 400, "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"
	}
	f.rec("UpdateItem", req, recv, ans, status, answer, faultproxy.None, status)
}

// versionCond is the condition and values of a queue write that saw
// queue version qv (0: none yet).
func versionCond(qv int, vals map[string]any) string {
	vals[":qv1"] = n(int64(qv + 1))
	if qv == 0 {
		return "attribute_not_exists(#qv)"
	}
	vals[":qv"] = n(int64(qv))
	return "#qv = :qv"
}

// join records owner's join with ticket, lapsing at untilMs, at queue
// version qv.
func (f *fake) join(owner, ticket string, untilMs, qv int, recv, ans int, result string) {
	vals := map[string]any{":qe": map[string]any{"L": []any{entryJSON(ticket, owner, f.now(untilMs))}},
		":nil": map[string]any{"L": []any{}}, ":qu": n(f.now(untilMs))}
	req := map[string]any{"Key": map[string]any{"resource": s("r")},
		"UpdateExpression":          "SET #q = list_append(if_not_exists(#q, :nil), :qe), #qu = :qu, #qv = :qv1",
		"ConditionExpression":       "attribute_exists(#r) AND " + versionCond(qv, vals),
		"ExpressionAttributeNames":  map[string]string{"#r": "resource", "#q": "queue", "#qu": "queue_until", "#qv": "queue_version"},
		"ExpressionAttributeValues": vals}
	f.queueRec(req, recv, ans, result, nil)
}

// keep records owner's keep of its entry i (ticket) at nowMs, to untilMs.
func (f *fake) keep(owner, ticket string, i, nowMs, untilMs int, recv, ans int, result string, qv int) {
	e := fmt.Sprintf("#q[%d]", i)
	vals := map[string]any{":qt": n(f.now(untilMs)), ":qu": n(f.now(untilMs)), ":now": n(f.now(nowMs)), ":tk": s(ticket), ":o": s(owner)}
	req := map[string]any{"Key": map[string]any{"resource": s("r")},
		"UpdateExpression":          "SET " + e + ".#qt = :qt, #qu = :qu, #qv = :qv1",
		"ConditionExpression":       e + ".#qi = :tk AND " + e + ".#o = :o AND attribute_not_exists(" + e + ".#p) AND " + e + ".#qt > :now AND " + versionCond(qv, vals),
		"ExpressionAttributeNames":  map[string]string{"#q": "queue", "#qu": "queue_until", "#qv": "queue_version", "#qi": "id", "#qt": "until", "#o": "owner", "#p": "principal"},
		"ExpressionAttributeValues": vals}
	f.queueRec(req, recv, ans, result, nil)
}

// prune records the removal of the lapsed entries tickets at the front.
func (f *fake) prune(nowMs int, recv, ans int, result string, tickets ...string) {
	vals := map[string]any{":now": n(f.now(nowMs))}
	cond, remove := "", ""
	for j, t := range tickets {
		vals[fmt.Sprintf(":q%d", j)] = s(t)
		if j > 0 {
			cond += " AND "
			remove = ", " + remove
		}
		cond += fmt.Sprintf("#q[%d].#qi = :q%d AND #q[%d].#qt <= :now", j, j, j)
		remove = fmt.Sprintf("#q[%d]", j) + remove
	}
	req := map[string]any{"Key": map[string]any{"resource": s("r")}, "UpdateExpression": "REMOVE " + remove, "ConditionExpression": cond,
		"ExpressionAttributeNames": map[string]string{"#q": "queue", "#qi": "id", "#qt": "until"}, "ExpressionAttributeValues": vals}
	f.queueRec(req, recv, ans, result, nil)
}

// headGrant records the head's grant of owner's place ticket: the
// service's acquire write with :tk and no :iss, removing queue[0].
func (f *fake) headGrant(owner, ticket string, nowMs, ttlMs int, recv, ans int, result string, token int64) {
	f.write(storeAcquire, owner, nowMs, ttlMs, recv, ans, result, token, faultproxy.None, 200)
	r := &f.h.Records[len(f.h.Records)-1]
	var req map[string]any
	_ = json.Unmarshal(r.Body, &req)
	vals := req["ExpressionAttributeValues"].(map[string]any)
	vals[":tk"] = s(ticket)
	delete(vals, ":iss")
	req["UpdateExpression"] = req["UpdateExpression"].(string) + ", #q[0]"
	r.Body, _ = json.Marshal(req)
}

// withQueue adds the queue (each entry ticket/owner/untilMs) and its
// queue_until to the item the last record's write returned, as the store
// returns them with a lease write.
func (f *fake) withQueue(qu int, entries ...qentry) {
	r := &f.h.Records[len(f.h.Records)-1]
	var ans map[string]any
	_ = json.Unmarshal(r.StoreBody, &ans)
	item, _ := ans["Attributes"].(map[string]any)
	if item == nil {
		return
	}
	l := []any{}
	for _, e := range entries {
		l = append(l, entryJSON(e.id, e.owner, f.now(int(e.until))))
	}
	item["queue"] = map[string]any{"L": l}
	item["queue_until"] = n(f.now(qu))
	r.StoreBody, _ = json.Marshal(ans)
}

// waiters starts a history of fair waiting: c0 holds the lock (101, 2 s
// from 2); c1 and c2 wait (invoked at 100 and 200, their first attempts
// refused) and join in that order: places a (until 3000) and b (3100).
// The waiting acquires' ops are the caller's (their answers depend on
// the rest).
func waiters() *fake {
	f := newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
	f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.write(storeAcquire, "c1", 101, 2000, 102, 104, "refused", 0, faultproxy.None, 400)
	f.join("c1", "a", 3000, 0, 106, 108, "committed")
	f.write(storeAcquire, "c2", 201, 2000, 202, 204, "refused", 0, faultproxy.None, 400)
	f.join("c2", "b", 3100, 1, 206, 208, "committed")
	return f
}

var (
	placeA = qentry{"a", "c1", 3000}
	placeB = qentry{"b", "c2", 3100}
)

func wait1(o *Op) { o.Wait = 1 }

// queued is a clean history of fair waiting: waiters(), then c0 releases
// at 500, c1's place (the head) takes the lock (102) and releases it at
// 800, and c2's place takes it (103).
func queued() *fake {
	f := waiters()
	f.op(1, Acquire, 100, 520, 200, f.granted("c1", 102, 510, 2000), wait1)
	f.op(2, Acquire, 200, 830, 200, f.granted("c2", 103, 820, 2000), wait1)
	f.op(0, Release, 500, 505, 204, "", func(o *Op) { o.TTL = 0 })
	f.write(storeRelease, "c0", 501, 0, 501, 503, "committed", 0, faultproxy.None, 200)
	f.headGrant("c1", "a", 510, 2000, 511, 515, "committed", 102)
	f.withQueue(3100, placeB)
	f.op(1, Release, 800, 805, 204, "", func(o *Op) { o.TTL = 0 })
	f.write(storeRelease, "c1", 801, 0, 801, 803, "committed", 0, faultproxy.None, 200)
	f.headGrant("c2", "b", 820, 2000, 821, 825, "committed", 103)
	f.withQueue(3100)
	return f
}

func TestCheckFairQueueCleanHistory(t *testing.T) {
	rep := check(queued())
	wantOnly(t, rep)
	if rep.QueueJoins != 2 || rep.HeadGrants != 2 || rep.Linearizable["r"] != "ok" {
		t.Errorf("got %d joins, %d head grants, linearizable %q; want 2, 2, ok", rep.QueueJoins, rep.HeadGrants, rep.Linearizable["r"])
	}
	// c2 waited from 200 and was granted at 821 with nobody else waiting.
	if rep.ContestedGrants != 1 || rep.LongestWaiterGrants != 1 {
		t.Errorf("got %d of %d contested grants to the longest waiter, want 1 of 1", rep.LongestWaiterGrants, rep.ContestedGrants)
	}
}

func TestCheckDecodesQueueWrites(t *testing.T) {
	f := queued()
	f.keep("c2", "b", 0, 600, 3600, 600, 602, "refused", 2)
	f.prune(3700, 3700, 3702, "refused", "b")
	ops, err := decodeRecords(f.h.Records)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range ops {
		kinds = append(kinds, o.kind.String())
	}
	want := "[acquire-write acquire-write queue-join acquire-write queue-join release-write acquire-write release-write acquire-write queue-keep queue-prune]"
	// (in record order)
	if got := fmt.Sprint(kinds); got != want {
		t.Fatalf("decoded %s, want %s", got, want)
	}
	j, k, p, g := ops[2], ops[9], ops[10], ops[6]
	if k.outcome != refused {
		t.Errorf("keep outcome %v", k.outcome)
	}
	if j.entry != (qentry{"a", "c1", f.now(3000)}) || j.owner != "c1" || j.qv != 0 || j.qu != f.now(3000) {
		t.Errorf("join decoded as %+v", j)
	}
	if k.index != 0 || k.ticket != "b" || k.owner != "c2" || k.qt != f.now(3600) || k.now != f.now(600) {
		t.Errorf("keep decoded as %+v", k)
	}
	if fmt.Sprint(p.pruned) != "[b]" || p.outcome != refused {
		t.Errorf("prune decoded as %+v", p)
	}
	if g.ticket != "a" || g.owner != "c1" || g.iss != g.now {
		t.Errorf("head's grant decoded as %+v", g)
	}
}

func TestCheckFairness(t *testing.T) {
	// A plain acquire takes the lock released at 500 while a and b wait:
	// a barge.
	f := waiters()
	f.op(0, Release, 500, 505, 204, "", func(o *Op) { o.TTL = 0 })
	f.write(storeRelease, "c0", 501, 0, 501, 503, "committed", 0, faultproxy.None, 200)
	f.op(3, Acquire, 502, 509, 200, f.granted("c3", 102, 504, 2000))
	f.write(storeAcquire, "c3", 504, 2000, 504, 506, "committed", 102, faultproxy.None, 200)
	f.withQueue(3100, placeA, placeB)
	rep := check(f)
	wantOnly(t, rep, RuleFairness, RuleLinearizable)
	excerptHas(t, rep, RuleFairness, "c3 took the lock", "c1's place (ticket a)", "queue-join")

	// b's place is granted while a's, ahead of it, is live: out of order.
	g := waiters()
	g.op(2, Acquire, 200, 530, 200, g.granted("c2", 102, 520, 2000), wait1)
	g.op(0, Release, 500, 505, 204, "", func(o *Op) { o.TTL = 0 })
	g.write(storeRelease, "c0", 501, 0, 501, 503, "committed", 0, faultproxy.None, 200)
	g.headGrant("c2", "b", 520, 2000, 521, 525, "committed", 102)
	g.withQueue(3100, placeA)
	rep = check(g)
	wantOnly(t, rep, RuleFairness, RuleLinearizable)
	excerptHas(t, rep, RuleFairness, "c2's place (ticket b) was granted", "c1's place (ticket a)")

	// Places that lapsed and were pruned before the grant are passed
	// rightly.
	h := waiters()
	h.prune(3300, 3300, 3302, "committed", "a", "b")
	h.op(3, Acquire, 3400, 3410, 200, h.granted("c3", 102, 3401, 2000))
	h.write(storeAcquire, "c3", 3401, 2000, 3401, 3405, "committed", 102, faultproxy.None, 200)
	h.withQueue(3100)
	wantOnly(t, check(h))

	// The holder's re-acquire of its own live lease while waiters are
	// queued is no barge.
	k := waiters()
	k.op(0, Acquire, 300, 310, 200, k.granted("c0", 102, 301, 2000))
	k.write(storeAcquire, "c0", 301, 2000, 302, 305, "committed", 102, faultproxy.None, 200)
	k.withQueue(3100, placeA, placeB)
	wantOnly(t, check(k))

	// Its re-acquire of its released lease is a barge.
	m := waiters()
	m.op(0, Release, 300, 305, 204, "", func(o *Op) { o.TTL = 0 })
	m.write(storeRelease, "c0", 301, 0, 301, 303, "committed", 0, faultproxy.None, 200)
	m.op(0, Acquire, 310, 320, 200, m.granted("c0", 102, 311, 2000))
	m.write(storeAcquire, "c0", 311, 2000, 312, 315, "committed", 102, faultproxy.None, 200)
	m.withQueue(3100, placeA, placeB)
	rep = check(m)
	wantOnly(t, rep, RuleFairness, RuleLinearizable)
	excerptHas(t, rep, RuleFairness, "c0 took the lock")
}

func TestCheckQueueModel(t *testing.T) {
	// A join that met another queue version cannot have committed; a
	// keep of a place that lapsed cannot either; nor a prune of a live
	// place.
	f := waiters()
	f.join("c3", "c", 3200, 0, 300, 302, "committed")
	wantOnly(t, check(f), RuleLinearizable)
	g := waiters()
	g.keep("c2", "b", 1, 3500, 5000, 3500, 3502, "committed", 2)
	wantOnly(t, check(g), RuleLinearizable)
	p := waiters()
	p.prune(2000, 2000, 2002, "committed", "a")
	wantOnly(t, check(p), RuleLinearizable)
	// Refused, they are the model's; and the right ones commit.
	h := waiters()
	h.join("c3", "c", 3200, 0, 300, 302, "refused")
	h.keep("c2", "b", 1, 3500, 5000, 3500, 3502, "refused", 2)
	h.keep("c2", "b", 1, 600, 3600, 600, 602, "committed", 2)
	h.join("c3", "c", 3700, 3, 700, 702, "committed")
	h.prune(3050, 3050, 3052, "committed", "a")
	wantOnly(t, check(h))
}
