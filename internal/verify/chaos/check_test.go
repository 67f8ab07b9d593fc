package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// fake builds a history by hand: client operations and the proxy records
// of their store requests, at millisecond offsets from t0, with the
// service's clock equal to the clients' (wall milliseconds wall+offset).
type fake struct {
	t0   time.Time
	wall int64 // epoch ms at t0
	h    History
}

func newFake() *fake {
	t0 := time.Now()
	return &fake{t0: t0, wall: t0.UnixMilli(), h: History{Start: t0, Offsets: []time.Duration{0}}}
}

func (f *fake) at(ms int) time.Time { return f.t0.Add(time.Duration(ms) * time.Millisecond) }

// now is the service's :now (epoch ms) at offset ms.
func (f *fake) now(ms int) int64 { return f.wall + int64(ms) }

// op adds a client operation invoked at inv and answered at ret (ms).
func (f *fake) op(client int, kind Kind, inv, ret int, status int, body string, mod ...func(*Op)) *Op {
	op := Op{Client: client, Owner: fmt.Sprintf("c%d", client), Kind: kind, Resource: "r", TTL: 2,
		Invoke: f.at(inv), Return: f.at(ret), Status: status, Body: []byte(body)}
	switch {
	case status >= 400:
		op.ContentType = "application/problem+json"
	case status == 200:
		op.ContentType = "application/json"
	}
	if status == 503 {
		op.RetryAfter = "1"
	}
	for _, m := range mod {
		m(&op)
	}
	op.decode()
	op.ID = len(f.h.Ops)
	f.h.Ops = append(f.h.Ops, op)
	return &f.h.Ops[len(f.h.Ops)-1]
}

// lockBody is a LOCK as the API renders it; token 0 leaves the owner's
// acquire out.
func (f *fake) lockBody(owner string, token int64, acqMs, ttlMs int) string {
	ts := func(ms int) string { return time.UnixMilli(f.now(ms)).UTC().Format("2006-01-02T15:04:05.000Z07:00") }
	return fmt.Sprintf(`{"resource":"r","owner":%q,"fencing_token":%d,"acquired_at":%q,"expires_at":%q}`, owner, token, ts(acqMs), ts(acqMs+ttlMs))
}

func (f *fake) granted(owner string, token int64, acqMs, ttlMs int) string {
	return `{"acquired":true,"lock":` + f.lockBody(owner, token, acqMs, ttlMs) + `}`
}

func problem(status int, slug string) string {
	return fmt.Sprintf(`{"type":"https://ft288.dev/problems/%s","title":"t","status":%d,"detail":"d","instance":"/locks/r"}`, slug, status)
}

// rec adds a proxy record: a store request received at recv and answered
// at ans (ms); storeStatus 0 means never forwarded.
func (f *fake) rec(op string, req map[string]any, recv, ans int, storeStatus int, answer map[string]any, fault faultproxy.Fault, callerStatus int) {
	body, _ := json.Marshal(req)
	r := faultproxy.Record{Seq: len(f.h.Records) + 1, Op: op, Body: body, Fault: fault, Received: f.at(recv), CallerStatus: callerStatus}
	if storeStatus != 0 {
		r.Forwarded, r.Sent, r.Answered, r.StoreStatus = true, f.at(recv), f.at(ans), storeStatus
		r.StoreBody, _ = json.Marshal(answer)
	}
	f.h.Records = append(f.h.Records, r)
}

func s(v string) map[string]string { return map[string]string{"S": v} }
func n(v int64) map[string]string  { return map[string]string{"N": fmt.Sprint(v)} }

// serviceWrites are the UpdateItem requests the real service sends for an
// acquire, a renew and a release, as the proxy records them (captureWrites).
// The fixtures' writes are these with their values replaced, so they follow
// the service's expressions whatever their text.
var serviceWrites = sync.OnceValues(captureWrites)

// captureWrites runs the real service through a fault proxy against a
// stand-in store that answers every request with an empty item, and
// returns the wire bodies of its writes by kind, in the order it made them.
func captureWrites() (map[storeKind]map[string]any, error) {
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetItem") {
			// A lease long expired, which no write ended: the watch
			// records its expiry.
			io.WriteString(w, `{"Item":{"resource":{"S":"x"},"owner":{"S":"o"},"fencing_token":{"N":"7"},"acquired_at":{"N":"1"},"expires_at":{"N":"2"}}}`)
			return
		}
		io.WriteString(w, `{}`)
	}))
	defer store.Close()
	proxy, err := faultproxy.New(store.URL, nil)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	ctx := context.Background()
	db, err := api.NewDynamoDB(ctx, proxy.URL())
	if err != nil {
		return nil, err
	}
	svc := locklogic.New(db, locklogic.Config{Table: "t"})
	caller := locklogic.Caller{Owner: "o"}
	// The stand-in's empty answers make acquire and renew fail to decode
	// a lease; only the requests matter here.
	_, _ = svc.Acquire(ctx, locklogic.AcquireRequest{Resource: "x", Caller: caller, TTLSeconds: 1})
	_, _ = svc.Renew(ctx, locklogic.RenewRequest{Resource: "x", Caller: caller, TTLSeconds: 1})
	_ = svc.Release(ctx, locklogic.ReleaseRequest{Resource: "x", Caller: caller})
	_, _ = svc.Watch(ctx, locklogic.WatchRequest{Resource: "x"}, locklogic.Budget{})
	out := map[storeKind]map[string]any{}
	kinds := []storeKind{storeAcquire, storeRenew, storeRelease, storeSettle}
	for _, r := range proxy.Records() {
		if r.Op != "UpdateItem" || len(out) == len(kinds) {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil {
			return nil, err
		}
		out[kinds[len(out)]] = body
	}
	if len(out) != len(kinds) {
		return nil, fmt.Errorf("captured %d writes of the service, want %d", len(out), len(kinds))
	}
	return out, nil
}

// write records an UpdateItem as the service sends it: kind is acquire,
// renew or release; committed items carry token (acquire, renew). An
// acquire's :iss is its :now and its grant id unique unless setVals
// changes them.
func (f *fake) write(kind storeKind, owner string, nowMs, ttlMs int, recv, ans int, result string, token int64, fault faultproxy.Fault, callerStatus int) {
	writes, err := serviceWrites()
	if err != nil {
		panic(err)
	}
	var req map[string]any
	b, _ := json.Marshal(writes[kind])
	_ = json.Unmarshal(b, &req) // a deep copy
	req["Key"] = map[string]any{"resource": s("r")}
	vals := req["ExpressionAttributeValues"].(map[string]any)
	vals[":o"], vals[":now"] = s(owner), n(f.now(nowMs))
	if kind == storeAcquire {
		// :base 100: the first token of the (fresh) item is 101.
		vals[":iss"], vals[":base"], vals[":gid"] = n(f.now(nowMs)), n(100), s(fmt.Sprintf("g%d", len(f.h.Records)+1))
	}
	if kind != storeRelease {
		vals[":exp"] = n(f.now(nowMs + ttlMs))
	}
	status, answer := 0, map[string]any{}
	switch result {
	case "committed":
		status = 200
		if kind != storeRelease {
			answer["Attributes"] = map[string]any{"resource": s("r"), "owner": s(owner), "fencing_token": n(token),
				"acquired_at": n(f.now(nowMs)), "renewed_at": n(f.now(nowMs)), "expires_at": n(f.now(nowMs + ttlMs))}
		}
	case "refused":
		status, answer["__type"] = 400, "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"
	}
	f.rec("UpdateItem", req, recv, ans, status, answer, fault, callerStatus)
}

// settle records a watch's record of the expiry of lease token at nowMs,
// as the service sends it; committed, the store returns the lease ended.
func (f *fake) settle(token int64, nowMs, recv, ans int, result string) {
	writes, err := serviceWrites()
	if err != nil {
		panic(err)
	}
	var req map[string]any
	b, _ := json.Marshal(writes[storeSettle])
	_ = json.Unmarshal(b, &req)
	req["Key"] = map[string]any{"resource": s("r")}
	vals := req["ExpressionAttributeValues"].(map[string]any)
	vals[":tok"], vals[":now"] = n(token), n(f.now(nowMs))
	status, answer := 200, map[string]any{}
	if result == "refused" {
		status, answer["__type"] = 400, "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"
	}
	f.rec("UpdateItem", req, recv, ans, status, answer, faultproxy.None, 200)
}

// setAnswer sets attribute name of the item the last record's store
// answer carries (a write's Attributes, a read's Item).
func (f *fake) setAnswer(name string, v any) {
	r := &f.h.Records[len(f.h.Records)-1]
	var answer map[string]map[string]any
	_ = json.Unmarshal(r.StoreBody, &answer)
	for _, item := range answer {
		item[name] = v
	}
	r.StoreBody, _ = json.Marshal(answer)
}

// setVals sets expression attribute values of the last record (a write).
func (f *fake) setVals(vals map[string]any) {
	r := &f.h.Records[len(f.h.Records)-1]
	var req map[string]any
	_ = json.Unmarshal(r.Body, &req)
	for k, v := range vals {
		req["ExpressionAttributeValues"].(map[string]any)[k] = v
	}
	r.Body, _ = json.Marshal(req)
}

// read records a GetItem that found owner's lease (owner "" for none).
func (f *fake) read(owner string, token int64, acqMs, renMs, expMs int, recv, ans int) {
	answer := map[string]any{}
	if owner != "" {
		answer["Item"] = map[string]any{"resource": s("r"), "owner": s(owner), "fencing_token": n(token),
			"acquired_at": n(f.now(acqMs)), "renewed_at": n(f.now(renMs)), "expires_at": n(f.now(expMs))}
	}
	f.rec("GetItem", map[string]any{"Key": map[string]any{"resource": s("r")}, "ConsistentRead": true}, recv, ans, 200, answer, faultproxy.None, 200)
}

// peek records a waiting acquire's eventually consistent read of
// expires_at and released_at.
func (f *fake) peek(expMs int, recv, ans int) {
	req := map[string]any{"Key": map[string]any{"resource": s("r")}, "ProjectionExpression": "#e, #x",
		"ExpressionAttributeNames": map[string]string{"#e": "expires_at", "#x": "released_at"}}
	f.rec("GetItem", req, recv, ans, 200, map[string]any{"Item": map[string]any{"expires_at": n(f.now(expMs))}}, faultproxy.None, 200)
}

func check(f *fake) Report {
	return Check(&f.h, Options{StoreBudget: time.Second, Slack: 500 * time.Millisecond})
}

// wantOnly fails unless exactly the given rules were reported, and each
// reported violation's excerpt contains every snippet of its rule.
func wantOnly(t *testing.T, rep Report, rules ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, r := range rules {
		want[r] = true
		if !rep.Has(r) {
			t.Errorf("want a %s violation; got %v", r, rep.Counts)
		}
	}
	for _, v := range rep.Violations {
		if !want[v.Rule] {
			t.Errorf("unexpected violation: %v", v)
		}
	}
}

func excerptHas(t *testing.T, rep Report, rule string, snippets ...string) {
	t.Helper()
	for _, v := range rep.Violations {
		if v.Rule != rule {
			continue
		}
		all := v.String()
		for _, sn := range snippets {
			if !strings.Contains(all, sn) {
				t.Errorf("%s excerpt lacks %q:\n%s", rule, sn, all)
			}
		}
		return
	}
	t.Errorf("no %s violation", rule)
}

// clean is a correct history: c0 takes the lock (2 s), c1 is refused, c0
// reads, renews and releases it, then c1 takes it.
func clean() *fake {
	f := newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
	f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.op(1, Acquire, 20, 30, 200, `{"acquired":false,"resource":"r"}`)
	f.write(storeAcquire, "c1", 21, 2000, 22, 28, "refused", 0, faultproxy.None, 400)
	f.op(2, Status, 40, 50, 200, f.lockBody("c0", 101, 2, 2000))
	f.read("c0", 101, 2, 2, 2002, 42, 48)
	f.op(0, Renew, 100, 110, 200, `{"renewed":true,"lock":`+f.lockBody("c0", 101, 2, 101+1000-2)+`}`, func(o *Op) { o.TTL = 1 })
	f.write(storeRenew, "c0", 101, 1000, 102, 108, "committed", 0, faultproxy.None, 200)
	// The renew's item: acquired_at stays, renewed_at and expires_at move.
	r := &f.h.Records[len(f.h.Records)-1]
	r.StoreBody = []byte(fmt.Sprintf(`{"Attributes":{"resource":{"S":"r"},"owner":{"S":"c0"},"fencing_token":{"N":"101"},"acquired_at":{"N":"%d"},"renewed_at":{"N":"%d"},"expires_at":{"N":"%d"}}}`, f.now(2), f.now(101), f.now(1101)))
	f.op(0, Release, 200, 210, 204, "", func(o *Op) { o.TTL = 0 })
	f.write(storeRelease, "c0", 201, 0, 202, 208, "committed", 0, faultproxy.None, 200)
	f.op(1, Acquire, 300, 310, 200, f.granted("c1", 102, 301, 2000))
	f.write(storeAcquire, "c1", 301, 2000, 302, 308, "committed", 102, faultproxy.None, 200)
	f.op(2, Status, 400, 410, 200, f.lockBody("c1", 102, 301, 2000))
	f.read("c1", 102, 301, 301, 2301, 402, 408)
	return f
}

func TestCheckCleanHistory(t *testing.T) {
	rep := check(clean())
	wantOnly(t, rep)
	if rep.Holds != 2 || rep.Linearizable["r"] != "ok" {
		t.Errorf("got %d holds, linearizable %q; want 2, ok", rep.Holds, rep.Linearizable["r"])
	}
}

func TestCheckMutualExclusion(t *testing.T) {
	f := clean()
	// c3 is granted while c0 holds the lease (and the store agrees: a
	// broken condition). Its hold overlaps c0's.
	f.op(3, Acquire, 50, 60, 200, f.granted("c3", 150, 52, 2000))
	f.write(storeAcquire, "c3", 52, 2000, 52, 58, "committed", 150, faultproxy.None, 200)
	rep := check(f)
	wantOnly(t, rep, RuleMutualExclusion, RuleLinearizable, RuleFencing, RuleOneHolder)
	excerptHas(t, rep, RuleMutualExclusion, "c0 and c3 both held the lock", "op#0 c0@i0 POST /locks/r {owner:c0 ttl:2}", "c3@i0 POST /locks/r {owner:c3 ttl:2}", "store#")
}

func TestCheckMutualExclusionUsesClientDeadline(t *testing.T) {
	// c0's 2 s lease was invoked at 0: it relies on it until 2000 - 200
	// (margin). c1 is granted at 1850 (its answer): after c0's deadline,
	// no overlap, even though c0's expires_at (2002) is later.
	f := newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
	f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.op(1, Acquire, 1840, 1850, 200, f.granted("c1", 102, 2003, 2000))
	f.write(storeAcquire, "c1", 2003, 2000, 1842, 1848, "committed", 102, faultproxy.None, 200)
	rep := check(f)
	if rep.Has(RuleMutualExclusion) {
		t.Errorf("grant after the holder's client deadline reported: %v", rep.Violations)
	}
	// At 1750 it overlaps c0's belief by 50 ms.
	f.h.Ops[1].Invoke, f.h.Ops[1].Return = f.at(1740), f.at(1750)
	if rep := check(f); !rep.Has(RuleMutualExclusion) {
		t.Errorf("grant 50 ms before the holder's client deadline not reported: %v", rep.Counts)
	}
}

func TestCheckRenewWithoutAnswerShortensBelief(t *testing.T) {
	// c0 holds a 2 s lease (deadline 1800), renews for 1 s at 100 and
	// gets 503: the renew may have landed (lease until ~1100), so c0
	// relies on it only until 100 + 1000 - 100 = 1000. c1's grant at
	// 1050 overlaps nothing.
	f := newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
	f.op(0, Renew, 100, 1100, 503, problem(503, "service-unavailable"), func(o *Op) { o.TTL = 1 })
	f.op(1, Acquire, 1040, 1050, 200, f.granted("c1", 102, 1042, 2000))
	hs := holds(f.h.Ops, ClientMargin, f.h.Offsets)["r"]
	if len(hs) != 2 || !hs[0].End.Equal(f.at(1000)) {
		t.Fatalf("got holds %+v, want c0's to end at +1.000s", hs)
	}
	// A shorter renew counts from its invoke: c0 renews for 1 s at 100,
	// an attempt lands and the lease ends ~1100; c1 takes it at 1200,
	// and only then is c0's renew answered 403 (its last attempt found
	// c1). c0 relied on the lease until 100 + 1000 - 100 = 1000: no
	// overlap with c1.
	k := newFake()
	k.op(0, Acquire, 0, 10, 200, k.granted("c0", 101, 2, 2000))
	k.op(0, Renew, 100, 1300, 403, problem(403, "forbidden"), func(o *Op) { o.TTL = 1 })
	k.op(1, Acquire, 1190, 1200, 200, k.granted("c1", 102, 1192, 2000))
	if hs := holds(k.h.Ops, ClientMargin, k.h.Offsets)["r"]; len(hs) != 2 || !hs[0].End.Equal(k.at(1000)) {
		t.Fatalf("got holds %+v, want c0's to end at +1.000s", hs)
	}
	// A release ends the hold when it is invoked, whatever its answer.
	g := newFake()
	g.op(0, Acquire, 0, 10, 200, g.granted("c0", 101, 2, 2000))
	g.op(0, Release, 100, 1100, 503, problem(503, "service-unavailable"))
	if hs := holds(g.h.Ops, ClientMargin, g.h.Offsets)["r"]; len(hs) != 1 || !hs[0].End.Equal(g.at(100)) {
		t.Fatalf("got holds %+v, want one ending at the release's invoke", hs)
	}
}

func TestCheckRenewAnsweredFromLaterRenewal(t *testing.T) {
	// Another process of owner c0 renews at 100 through an instance whose
	// clock is 50 ms ahead (stamped 150); c0's own renew at 120 (stamped
	// 120) is refused and answered with the lease the other left, read
	// to explain the refusal. A waiter's peek in between is only a hint.
	f := newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
	f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.write(storeRenew, "c0", 150, 2000, 102, 108, "committed", 0, faultproxy.None, 200)
	f.op(0, Renew, 120, 400, 200, `{"renewed":true,"lock":`+f.lockBody("c0", 101, 2, 2148)+`}`)
	r := &f.h.Records[len(f.h.Records)-1]
	r.StoreBody = []byte(fmt.Sprintf(`{"Attributes":{"resource":{"S":"r"},"owner":{"S":"c0"},"fencing_token":{"N":"101"},"acquired_at":{"N":"%d"},"renewed_at":{"N":"%d"},"expires_at":{"N":"%d"}}}`, f.now(2), f.now(150), f.now(2150)))
	f.peek(9999, 200, 205) // stale or not, a peek is never evidence
	f.write(storeRenew, "c0", 120, 2000, 300, 305, "refused", 0, faultproxy.Delay, 400)
	f.read("c0", 101, 2, 150, 2150, 310, 315)
	wantOnly(t, check(f))
	// Without the read, the 200 has nothing behind it.
	f.h.Records = f.h.Records[:len(f.h.Records)-1]
	wantOnly(t, check(f), RuleNoFalseGrant)
}

func TestCheckUnheardGrantIsNotAViolation(t *testing.T) {
	// c0's acquire is held by the proxy past its 503 and lands at 1500:
	// c0 holds the lock in the store without knowing. c1 is refused until
	// it expires, then granted.
	f := newFake()
	f.op(0, Acquire, 0, 1000, 503, problem(503, "service-unavailable"))
	f.write(storeAcquire, "c0", 1, 2000, 1, 1510, "committed", 101, faultproxy.Late, 0)
	f.h.Records[0].Sent = f.at(1500)
	f.op(1, Acquire, 1600, 1610, 200, `{"acquired":false,"resource":"r"}`)
	f.write(storeAcquire, "c1", 1601, 2000, 1602, 1608, "refused", 0, faultproxy.None, 400)
	f.op(1, Acquire, 2100, 2110, 200, f.granted("c1", 102, 2101, 2000))
	f.write(storeAcquire, "c1", 2101, 2000, 2102, 2108, "committed", 102, faultproxy.None, 200)
	rep := check(f)
	wantOnly(t, rep)
	if rep.UnheardGrants != 1 || rep.LateWrites != 1 || rep.LateApplied != 1 {
		t.Errorf("got %d unheard grants, %d/%d late writes applied; want 1, 1/1", rep.UnheardGrants, rep.LateApplied, rep.LateWrites)
	}
}

func TestCheckFencing(t *testing.T) {
	// c1's grant comes after c0's was answered but carries a smaller
	// token, in the answer and in the store.
	f := newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 1000), func(o *Op) { o.TTL = 1 })
	f.write(storeAcquire, "c0", 2, 1000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.op(1, Acquire, 1500, 1510, 200, f.granted("c1", 100, 1502, 2000))
	f.write(storeAcquire, "c1", 1502, 2000, 1502, 1508, "committed", 100, faultproxy.None, 200)
	rep := check(f)
	wantOnly(t, rep, RuleFencing, RuleLinearizable)
	excerptHas(t, rep, RuleFencing, "token 100 granted after token 101")
	if rep.Counts[RuleFencing] != 2 {
		t.Errorf("got %d fencing violations, want 2 (answers and committed writes)", rep.Counts[RuleFencing])
	}
}

func TestCheckNoFalseGrant(t *testing.T) {
	cases := map[string]func(f *fake){
		// The answer says granted; the store refused.
		"Refused": func(f *fake) {
			f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
			f.write(storeAcquire, "c0", 2, 2000, 2, 8, "refused", 0, faultproxy.None, 400)
		},
		// The write committed, after the answer.
		"OutsideWindow": func(f *fake) {
			f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
			f.write(storeAcquire, "c0", 2, 2000, 5, 20, "committed", 101, faultproxy.None, 200)
		},
		// Another lease than the store wrote.
		"OtherToken": func(f *fake) {
			f.op(0, Acquire, 0, 10, 200, f.granted("c0", 107, 2, 2000))
			f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
		},
		// Status 200 with no read at all (a cache).
		"StatusWithoutRead": func(f *fake) {
			f.op(0, Status, 0, 10, 200, f.lockBody("c0", 101, 2, 2000))
		},
		// Status 200 backed only by a waiter's peek, not a consistent
		// read.
		"StatusFromPeek": func(f *fake) {
			f.op(0, Status, 0, 10, 200, f.lockBody("c0", 101, 2, 2000))
			f.peek(2002, 2, 8)
		},
		// Release 204 with the release refused.
		"ReleaseRefused": func(f *fake) {
			f.op(0, Release, 0, 10, 204, "")
			f.write(storeRelease, "c0", 2, 0, 2, 8, "refused", 0, faultproxy.None, 400)
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFake()
			build(f)
			rep := check(f)
			if !rep.Has(RuleNoFalseGrant) {
				t.Fatalf("not reported: %v", rep.Counts)
			}
			excerptHas(t, rep, RuleNoFalseGrant, "op#0 c0@i0")
		})
	}
}

func TestCheckAnswers(t *testing.T) {
	cases := map[string]func(f *fake){
		"500": func(f *fake) { f.op(0, Acquire, 0, 10, 500, problem(500, "internal")) },
		"503NoRetryAfter": func(f *fake) {
			f.op(0, Acquire, 0, 10, 503, problem(503, "service-unavailable"), func(o *Op) { o.RetryAfter = "" })
		},
		"503NotAProblem": func(f *fake) { f.op(0, Status, 0, 10, 503, `{"message":"Service Unavailable"}`) },
		"404WrongSlug":   func(f *fake) { f.op(0, Renew, 0, 10, 404, problem(404, "forbidden")) },
		"Undocumented":   func(f *fake) { f.op(0, Status, 0, 10, 418, problem(418, "teapot")) },
		"Dropped":        func(f *fake) { f.op(0, Acquire, 0, 10, 0, "", func(o *Op) { o.Err = "EOF" }) },
		"Slow":           func(f *fake) { f.op(0, Acquire, 0, 1600, 503, problem(503, "service-unavailable")) },
		"Malformed":      func(f *fake) { f.op(0, Acquire, 0, 10, 200, `{"acquired":true}`) },
		"GrantOtherTTL":  func(f *fake) { f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 3000)) },
		// Watch answers: documented statuses, fields that agree, in time.
		"Watch404": func(f *fake) { f.op(0, Watch, 0, 10, 404, problem(404, "not-found")) },
		"WatchTokenNotHalfIndex": func(f *fake) {
			f.op(0, Watch, 0, 10, 200, `{"resource":"r","index":203,"changed":true,"fencing_token":100}`)
		},
		"WatchEndedWithLease": func(f *fake) {
			f.op(0, Watch, 0, 10, 200, `{"resource":"r","index":203,"changed":true,"fencing_token":101,"lock":`+f.lockBody("c0", 101, 2, 2000)+`}`)
		},
		"WatchChangedWrong": func(f *fake) {
			f.op(0, Watch, 0, 10, 200, `{"resource":"r","index":203,"changed":false,"fencing_token":101}`, func(o *Op) { o.Index = 202 })
		},
		"WatchSlow": func(f *fake) {
			f.op(0, Watch, 0, 3600, 200, `{"resource":"r","index":0,"changed":false}`, func(o *Op) { o.Wait = 1 })
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFake()
			build(f)
			rep := check(f)
			if !rep.Has(RuleAnswers) {
				t.Fatalf("not reported: %v", rep.Counts)
			}
			excerptHas(t, rep, RuleAnswers, "op#0 c0@i0")
		})
	}
	// A 503 problem with Retry-After within the budget is fine, and a
	// waiting acquire may take its wait and three store budgets.
	f := newFake()
	f.op(0, Acquire, 0, 1400, 503, problem(503, "service-unavailable"))
	f.op(1, Acquire, 0, 4900, 200, `{"acquired":false,"resource":"r"}`, func(o *Op) { o.Wait = 2 })
	f.op(3, Watch, 0, 3400, 200, `{"resource":"r","index":0,"changed":false}`, func(o *Op) { o.Wait = 1 })
	if rep := check(f); rep.Has(RuleAnswers) {
		t.Errorf("proper answers reported: %v", rep.Violations)
	}
	f.op(2, Acquire, 0, 5100, 200, `{"acquired":false,"resource":"r"}`, func(o *Op) { o.Wait = 2 })
	excerptHas(t, check(f), RuleAnswers, "op#3 c2@i0 POST /locks/r/wait {owner:c2 ttl:2 wait:2}", "more than its 2 s wait")
}

func TestCheckRecovery(t *testing.T) {
	f := clean()
	f.h.RecoveryFrom = f.at(250)
	f.op(4, Acquire, 420, 430, 200, `{"acquired":false,"resource":"r"}`, func(o *Op) { o.Phase, o.Owner, o.Client = PhaseFinal, "final-r", -1 })
	f.write(storeAcquire, "final-r", 421, 1000, 422, 428, "refused", 0, faultproxy.None, 400)
	rep := check(f)
	wantOnly(t, rep, RuleRecovery)
	excerptHas(t, rep, RuleRecovery, "still not free", "final@i0 POST /locks/r {owner:final-r")

	g := clean()
	g.h.RecoveryFrom = g.at(250)
	g.op(1, Status, 420, 430, 503, problem(503, "service-unavailable"))
	g.op(4, Acquire, 2400, 2410, 200, g.granted("final-r", 103, 2401, 1000), func(o *Op) { o.Phase, o.Owner, o.Client, o.TTL = PhaseFinal, "final-r", -1, 1 })
	g.write(storeAcquire, "final-r", 2401, 1000, 2402, 2408, "committed", 103, faultproxy.None, 200)
	rep = check(g)
	wantOnly(t, rep, RuleRecovery)
	excerptHas(t, rep, RuleRecovery, "failed", "c1@i0 GET /locks/r → 503")
}

func TestCheckRecoveryExcusesSkewRetry(t *testing.T) {
	// After the faults, c0 renews at 150 through an instance 40 ms behind
	// the one that stamped its renewal of 120 (renewed_at 160): the store
	// refuses it for the late-write rule and the service says 503, retry.
	f := newFake()
	f.h.RecoveryFrom = f.at(100)
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
	f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.write(storeRenew, "c0", 160, 1000, 122, 128, "committed", 0, faultproxy.None, 200)
	r := &f.h.Records[len(f.h.Records)-1]
	r.StoreBody = []byte(fmt.Sprintf(`{"Attributes":{"resource":{"S":"r"},"owner":{"S":"c0"},"fencing_token":{"N":"101"},"acquired_at":{"N":"%d"},"renewed_at":{"N":"%d"},"expires_at":{"N":"%d"}}}`, f.now(2), f.now(160), f.now(1160)))
	f.op(0, Renew, 150, 160, 503, problem(503, "service-unavailable"), func(o *Op) { o.TTL = 3 })
	f.write(storeRenew, "c0", 110, 3000, 152, 154, "refused", 0, faultproxy.None, 400)
	f.read("c0", 101, 2, 160, 1160, 155, 158)
	f.op(9, Acquire, 3000, 3010, 200, f.granted("final-r", 102, 3002, 1000), func(o *Op) { o.Phase, o.Owner, o.Client, o.TTL = PhaseFinal, "final-r", -1, 1 })
	f.write(storeAcquire, "final-r", 3002, 1000, 3002, 3008, "committed", 102, faultproxy.None, 200)
	wantOnly(t, check(f))
	// Without the read that shows the later stamp, it is a failure.
	f.h.Records = append(f.h.Records[:3], f.h.Records[4:]...)
	wantOnly(t, check(f), RuleRecovery)
}

func TestCheckLinearizable(t *testing.T) {
	// The store says the lease is gone (released), then a read shows it.
	f := clean()
	f.read("c0", 101, 2, 101, 1101, 250, 255)
	rep := check(f)
	wantOnly(t, rep, RuleLinearizable)
	excerptHas(t, rep, RuleLinearizable, "model state then", "GetItem r")

	// A late release (issued at 150, before c1's grant, landing after it)
	// must be refused; a store that applies it is not the model.
	g := clean()
	g.write(storeRelease, "c1", 150, 0, 350, 355, "committed", 0, faultproxy.Late, 0)
	rep = check(g)
	wantOnly(t, rep, RuleLinearizable)
	h := clean()
	h.write(storeRelease, "c1", 150, 0, 350, 355, "refused", 0, faultproxy.Late, 0)
	wantOnly(t, check(h))

	// A same-owner re-acquire stamped before the lease's last renewal
	// (a renewal served by a faster clock) is refused: the model agrees,
	// and a store that applied it would not be the model.
	m := clean()
	m.write(storeAcquire, "c0", 100, 2000, 130, 135, "refused", 0, faultproxy.None, 400)
	wantOnly(t, check(m))
	m.h.Records = m.h.Records[:len(m.h.Records)-1]
	m.write(storeAcquire, "c0", 100, 2000, 130, 135, "committed", 102, faultproxy.None, 200)
	wantOnly(t, check(m), RuleLinearizable, RuleFencing) // and c1's later grant repeats token 102

	// A status 404 while the lease is live on every clock.
	k := clean()
	k.op(3, Status, 450, 460, 404, problem(404, "not-found"))
	wantOnly(t, check(k), RuleLinearizable)
}

// TestCheckWatchedExpiry: a watch's record of an expiry ends the lease for
// good. A renewal issued before the expiry (the late-write rule would let
// it land after it) is refused once the record is there; a store that
// applied it, or a record of a lease not yet expired, is not the model.
func TestCheckWatchedExpiry(t *testing.T) {
	late := func(result string) *fake {
		f := clean() // c1 holds token 102 until 2301
		f.settle(102, 2400, 2400, 2402, "committed")
		f.write(storeRenew, "c1", 2250, 1000, 2450, 2452, result, 102, faultproxy.Late, 0)
		return f
	}
	wantOnly(t, check(late("refused")))
	wantOnly(t, check(late("committed")), RuleLinearizable)

	early := clean()
	early.settle(102, 2200, 2200, 2202, "committed")
	wantOnly(t, check(early), RuleLinearizable)
	refused := clean()
	refused.settle(102, 2200, 2200, 2202, "refused")
	wantOnly(t, check(refused))
}

func TestDecodeServiceWrites(t *testing.T) {
	// The service's own writes (captureWrites) decode to their kind and
	// values, whatever the text of their expressions.
	f := newFake()
	f.write(storeAcquire, "c0", 5, 2000, 5, 6, "committed", 101, faultproxy.None, 200)
	f.setVals(map[string]any{":iss": n(f.now(1)), ":gid": s("g")})
	f.write(storeRenew, "c0", 7, 1000, 7, 8, "refused", 0, faultproxy.None, 400)
	f.setVals(map[string]any{":tok": n(101)})
	f.write(storeRelease, "c0", 9, 0, 9, 10, "committed", 0, faultproxy.None, 200)
	ops, err := decodeRecords(f.h.Records)
	if err != nil {
		t.Fatal(err)
	}
	type decoded struct {
		kind               storeKind
		owner, gid         string
		now, iss, exp, tok int64
		outcome            outcome
		resource           string
	}
	want := []decoded{
		{storeAcquire, "c0", "g", f.now(5), f.now(1), f.now(2005), 0, applied, "r"},
		{storeRenew, "c0", "", f.now(7), f.now(7), f.now(1007), 101, refused, "r"},
		{storeRelease, "c0", "", f.now(9), f.now(9), 0, 0, applied, "r"},
	}
	if len(ops) != len(want) {
		t.Fatalf("got %d store requests, want %d", len(ops), len(want))
	}
	for i, w := range want {
		o := ops[i]
		if got := (decoded{o.kind, o.owner, o.gid, o.now, o.iss, o.exp, o.tok, o.outcome, o.resource}); got != w {
			t.Errorf("write %d: got %+v, want %+v", i, got, w)
		}
	}
}

// w0 makes an op one of owner w0's, whose clients 0 and 1 share it.
func w0(o *Op) { o.Owner = "w0" }

func TestCheckLateWrite(t *testing.T) {
	// c2 holds the lock; w0's client 0 waits for it (its first write is
	// refused); c2 releases; w0's client 1 is granted token 102 at 300
	// (2 s); the wait's next write comes at 500.
	base := func(f *fake) {
		f.op(2, Acquire, 0, 10, 200, f.granted("c2", 101, 2, 2000))
		f.write(storeAcquire, "c2", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
		f.op(0, Acquire, 20, 510, 200, f.granted("w0", 103, 500, 2000), w0, func(o *Op) { o.Wait = 1 })
		f.write(storeAcquire, "w0", 21, 2000, 22, 24, "refused", 0, faultproxy.None, 400)
		f.setVals(map[string]any{":gid": s("gW")})
		f.op(2, Release, 250, 260, 204, "")
		f.write(storeRelease, "c2", 251, 0, 252, 258, "committed", 0, faultproxy.None, 200)
		f.op(1, Acquire, 290, 310, 200, f.granted("w0", 102, 300, 2000), w0)
		f.write(storeAcquire, "w0", 300, 2000, 300, 305, "committed", 102, faultproxy.None, 200)
	}
	// short makes client 1's lease last 1 s (to 1300) and the wait 2 s,
	// answered at 1410 with the lease of a write at 1400.
	short := func(f *fake) {
		base(f)
		w := &f.h.Ops[1]
		w.Return, w.Wait, w.Body = f.at(1410), 2, []byte(f.granted("w0", 103, 1400, 2000))
		w.decode()
		p := &f.h.Ops[3]
		p.TTL, p.Body = 1, []byte(f.granted("w0", 102, 300, 1000))
		p.decode()
		f.h.Records = f.h.Records[:len(f.h.Records)-1]
		f.write(storeAcquire, "w0", 300, 1000, 300, 305, "committed", 102, faultproxy.None, 200)
	}
	// wait writes the wait's write at ms (committed with token, stamped
	// :iss=:now as a service that forgot the arrival does, so the model
	// alone would accept it).
	wait := func(f *fake, ms int, token int64, fault faultproxy.Fault) {
		f.write(storeAcquire, "w0", ms, 2000, ms, ms+5, "committed", token, fault, 200)
		f.setVals(map[string]any{":gid": s("gW")})
	}
	cases := []struct {
		name     string
		build    func(f *fake)
		want     []string
		replaced int
	}{
		// The wait's write replaces the newer lease of its own owner.
		{name: "WaitReplacesNewerSameOwnerLease", want: []string{RuleLateWrite}, build: func(f *fake) {
			base(f)
			wait(f, 500, 103, faultproxy.None)
		}},
		// Its first attempt landed and its answer was lost; the SDK's
		// retry found its own grant (same grant id) and answered 104. The
		// first attempt replaced w0's lease all the same.
		{name: "SDKRetryAfterReplacing", want: []string{RuleLateWrite}, build: func(f *fake) {
			base(f)
			f.h.Ops[1].Body = []byte(f.granted("w0", 104, 500, 2000))
			f.h.Ops[1].decode()
			wait(f, 500, 103, faultproxy.AppliedThenReset)
			wait(f, 500, 104, faultproxy.None)
		}},
		// The wait writes at 1400, after client 1's lease expired.
		{name: "ReplacedLeaseHadExpired", build: func(f *fake) {
			short(f)
			wait(f, 1400, 103, faultproxy.None)
		}},
		// The same, but client 1 renewed the lease (to 2001) and was
		// answered before the wait's write: it had not expired.
		{name: "RenewedPastItsFirstExpiry", want: []string{RuleLateWrite}, build: func(f *fake) {
			short(f)
			f.op(1, Renew, 1000, 1010, 200, `{"renewed":true,"lock":`+f.lockBody("w0", 102, 300, 1701)+`}`, w0, func(o *Op) { o.TTL, o.Token = 1, 102 })
			f.write(storeRenew, "w0", 1001, 1000, 1002, 1008, "committed", 0, faultproxy.None, 200)
			f.setVals(map[string]any{":tok": n(102)})
			r := &f.h.Records[len(f.h.Records)-1]
			r.StoreBody = []byte(fmt.Sprintf(`{"Attributes":{"resource":{"S":"r"},"owner":{"S":"w0"},"fencing_token":{"N":"102"},"acquired_at":{"N":"%d"},"renewed_at":{"N":"%d"},"expires_at":{"N":"%d"}}}`, f.now(300), f.now(1001), f.now(2001)))
			wait(f, 1400, 103, faultproxy.None)
		}},
		// Client 1 released the lease before the wait's write: the wait
		// takes a free lock.
		{name: "ReplacedLeaseWasReleased", build: func(f *fake) {
			base(f)
			f.h.Ops[1].Return, f.h.Ops[1].Body = f.at(710), []byte(f.granted("w0", 103, 700, 2000))
			f.h.Ops[1].decode()
			f.op(1, Release, 600, 610, 204, "", w0)
			f.write(storeRelease, "w0", 601, 0, 602, 608, "committed", 0, faultproxy.None, 200)
			wait(f, 700, 103, faultproxy.None)
		}},
		// Client 1's lease was granted before the wait arrived: a
		// re-acquire may replace it.
		{name: "GrantedBeforeTheWaitArrived", replaced: 1, build: func(f *fake) {
			f.op(1, Acquire, 0, 10, 200, f.granted("w0", 101, 2, 2000), w0)
			f.write(storeAcquire, "w0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
			f.op(0, Acquire, 20, 30, 200, f.granted("w0", 102, 21, 2000), w0, func(o *Op) { o.Wait = 1 })
			f.write(storeAcquire, "w0", 21, 2000, 22, 28, "committed", 102, faultproxy.None, 200)
			f.setVals(map[string]any{":iss": n(f.now(20))})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			tc.build(f)
			rep := check(f)
			wantOnly(t, rep, tc.want...)
			if len(tc.want) > 0 {
				excerptHas(t, rep, RuleLateWrite, "w0 was granted token", "op#1 c0@i0 POST /locks/r/wait {owner:w0 ttl:2 wait:", "op#3 c1@i0", "granted at", "ms later")
			}
			if rep.CoOwnerReplaced != tc.replaced {
				t.Errorf("got %d co-owner replacements, want %d", rep.CoOwnerReplaced, tc.replaced)
			}
		})
	}
}

func TestCheckSharedOwnerHolds(t *testing.T) {
	// A lease belongs to its owner: another client of the same owner may
	// end or shorten it unseen, so the holder's belief ends there — but
	// not for a write issued before the lease was granted, which the
	// late-write rule keeps off it.
	cases := []struct {
		name    string
		build   func(f *fake)
		wantEnd int // of client 0's hold, ms
		wantME  bool
	}{
		{name: "ReleasedByCoOwner", wantEnd: 100, build: func(f *fake) {
			f.op(0, Acquire, 0, 10, 200, f.granted("w0", 101, 2, 2000), w0)
			f.op(1, Release, 100, 110, 204, "", w0)
			f.op(2, Acquire, 150, 160, 200, f.granted("c2", 102, 152, 2000))
		}},
		{name: "ReplacedByShorterLease", wantEnd: 1000, build: func(f *fake) {
			f.op(0, Acquire, 0, 10, 200, f.granted("w0", 101, 2, 3000), w0, func(o *Op) { o.TTL = 3 })
			f.op(1, Acquire, 100, 110, 200, f.granted("w0", 102, 102, 1000), w0, func(o *Op) { o.TTL = 1 })
			f.op(2, Acquire, 1200, 1210, 200, f.granted("c2", 103, 1202, 2000))
		}},
		// Client 1 re-acquires (token 102), then releases with its own
		// token: the owner's lease ends, whatever token client 0 holds.
		{name: "ReleasedUnderTheCoOwnersToken", wantEnd: 200, build: func(f *fake) {
			f.op(0, Acquire, 0, 10, 200, f.granted("w0", 101, 2, 3000), w0, func(o *Op) { o.TTL = 3 })
			f.op(1, Acquire, 100, 110, 200, f.granted("w0", 102, 102, 2000), w0)
			f.op(1, Release, 200, 210, 204, "", w0, func(o *Op) { o.Token = 102 })
			f.op(2, Acquire, 300, 310, 200, f.granted("c2", 103, 302, 2000))
		}},
		{name: "LateReleaseIssuedBeforeTheGrant", wantEnd: 1818, wantME: true, build: func(f *fake) {
			f.op(1, Release, 0, 5, 503, problem(503, "service-unavailable"), w0)
			f.op(0, Acquire, 18, 30, 200, f.granted("w0", 101, 20, 2000), w0)
			f.op(2, Acquire, 100, 110, 200, f.granted("c2", 102, 102, 2000))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			tc.build(f)
			var end time.Time
			for _, h := range holds(f.h.Ops, ClientMargin, f.h.Offsets)["r"] {
				if h.Client == 0 {
					end = h.End
				}
			}
			if !end.Equal(f.at(tc.wantEnd)) {
				t.Errorf("client 0's hold ends at %s, want +%.3fs", at(f.t0, end), float64(tc.wantEnd)/1000)
			}
			if got := check(f).Has(RuleMutualExclusion); got != tc.wantME {
				t.Errorf("mutual exclusion reported: got %v, want %v", got, tc.wantME)
			}
		})
	}
}

// TestCheckSetProgressCountsAskingOnly: a set owner whose ask waits at the
// service and is refused for 11 s on end breaks the 10 s rule; one refused
// for 6 s, stopped for 5 s (the run between its phases), then refused for
// 6 s more does not: it did not keep asking through the pause. Two asks
// (other names) of 6 s each are two waits; an ask that only polls (tries)
// is owed nothing, however long.
func TestCheckSetProgressCountsAskingOnly(t *testing.T) {
	refused := `{"acquired":false,"blocked_by":"p-r0"}`
	type span struct {
		from, to, ask int
		wait          int64
	}
	asks := func(f *fake, sp span) {
		for ms := sp.from; ms+50 <= sp.to; ms += 60 {
			f.op(7, SetAcquire, ms, ms+50, 200, refused, func(o *Op) {
				o.Owner, o.Resource, o.Names, o.Ask, o.Wait = "s0", "p-r", []string{"p-r0", "p-r1"}, sp.ask, sp.wait
			})
		}
	}
	for _, tt := range []struct {
		name  string
		spans []span
		want  []string
	}{
		{"11 s on end", []span{{0, 11_000, 1, 1}}, []string{RuleSetProgress}},
		{"a try, then 11 s of rounds", []span{{0, 60, 1, 0}, {60, 11_000, 1, 1}}, []string{RuleSetProgress}},
		{"6 s, a 5 s pause, 6 s", []span{{0, 6_000, 1, 1}, {11_000, 17_000, 1, 1}}, nil},
		{"9 s, a 0.9 s pause, 2 s", []span{{0, 9_000, 1, 1}, {9_900, 11_900, 1, 1}}, []string{RuleSetProgress}},
		{"two asks of 6 s", []span{{0, 6_000, 1, 1}, {6_000, 12_000, 2, 1}}, nil},
		{"11 s of polls", []span{{0, 11_000, 1, 0}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			for _, sp := range tt.spans {
				asks(f, sp)
			}
			rep := Check(&f.h, Options{StoreBudget: time.Second, Slack: 500 * time.Millisecond, SetGap: 10 * time.Second})
			wantOnly(t, rep, tt.want...)
		})
	}
}

// TestCheckSetRollbackExpiredTake: a waiting set round's head take of
// its first name whose answer was lost (500, the write applied) and that
// the round neither released nor listed: its lease is no violation when
// it expired before the refused answer (the round's store calls were slow
// and the take's hold TTL ran out; a run with faults, seed 28,
// 2026-12-07), and is one when it outlived the answer.
func TestCheckSetRollbackExpiredTake(t *testing.T) {
	for _, tt := range []struct {
		name    string
		ttlMs   int
		offsets []time.Duration // the instances' clock offsets (instance clock = real + offset)
		want    []string
	}{
		{"expired 1.5 s before the answer", 3000, nil, nil},
		{"live 0.5 s past the answer", 5000, nil, []string{RuleSetRollback}},
		// Another instance's clock runs 2 s behind: on it the lease
		// ends 0.5 s after the answer.
		{"expired, but not on an instance 2 s behind", 3000, []time.Duration{0, -2 * time.Second}, []string{RuleSetRollback}},
		{"expired on an instance 1 s ahead too", 3000, []time.Duration{0, time.Second}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.offsets != nil {
				f.h.Offsets = tt.offsets
			}
			f.op(7, SetAcquire, 0, 4500, 200, `{"acquired":false,"blocked_by":"r"}`, func(o *Op) {
				o.Owner, o.Resource, o.Names, o.Ask, o.Wait = "s0", "p", []string{"r", "r2"}, 1, 1
			})
			f.write(storeAcquire, "s0", 10, tt.ttlMs, 10, 15, "committed", 101, faultproxy.AppliedThen500, 500)
			wantOnly(t, check(f), tt.want...)
		})
	}
}

// TestRetryAfterSkew: after the faults, a renewal refused only because an
// earlier one, served by an instance whose clock is ahead, stamped the
// lease later (the service answers 503, retry) is no recovery failure,
// when the item returned with the refusal or a consistent read during the
// call shows that stamp; otherwise it is. One rule for a lock's lease, a
// permit's slot and a read/write lock's writer and reader slots (the read/
// write lock's case first seen in a 30 s run with -skew 80ms -old-item,
// 2026-12-07).
func TestRetryAfterSkew(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lease := func(owner string, renewed int64) leaseState {
		return leaseState{owner: owner, token: 7, acquired: 1000, renewed: renewed, expires: renewed + 2000}
	}
	// Each kind: the renewal's call, and a store request carrying l in
	// slot k (the renewed one: 3, or rwWriter) as its item or old item.
	type kind struct {
		op    Op
		slot  int
		carry func(s *storeOp, k int, l leaseState, old bool)
	}
	kinds := map[string]kind{
		"Lock": {Op{Kind: Renew}, 0, func(s *storeOp, _ int, l leaseState, old bool) {
			if old {
				s.old = &storeItem{leaseState: l}
			} else {
				s.item = &storeItem{leaseState: l}
			}
		}},
		"Permit": {Op{Kind: SemRenew, Slot: 3}, 3, func(s *storeOp, k int, l leaseState, old bool) {
			it := &semItem{exists: true, permits: 5}
			it.slots[k] = l
			if old {
				s.sem.old = it
			} else {
				s.sem.item = it
			}
		}},
		"Reader": {Op{Kind: RWRenew, Mode: "read", Slot: 3}, 3, nil},
		"Writer": {Op{Kind: RWRenew, Mode: "write"}, rwWriter, nil},
	}
	rw := func(s *storeOp, k int, l leaseState, old bool) {
		it := &rwItem{readers: map[int]leaseState{}}
		if k == rwWriter {
			it.writer = l
		} else {
			it.readers[k] = l
		}
		if old {
			s.rw.old = it
		} else {
			s.rw.item = it
		}
	}
	for name, kd := range kinds {
		if kd.carry == nil {
			kd.carry = rw
		}
		refused := func(k int, old *leaseState) *storeOp {
			s := &storeOp{rec: &faultproxy.Record{Received: at(105), Answered: at(106)}, kind: storeRenew, owner: "o", now: 1100,
				outcome: refused, sem: &semOp{slot: k}, rw: &rwOp{slot: k}}
			if old != nil {
				kd.carry(s, kd.slot, *old, true)
			}
			return s
		}
		read := func(k int, l leaseState) *storeOp {
			s := &storeOp{rec: &faultproxy.Record{Received: at(107), Answered: at(108)}, kind: storeRead, full: true, outcome: applied,
				sem: &semOp{slot: -1}, rw: &rwOp{slot: rwNone}}
			kd.carry(s, k, l, false)
			return s
		}
		stamped, early, other := lease("o", 1140), lease("o", 1090), lease("o9", 1140)
		for _, tc := range []struct {
			name string
			ops  []*storeOp
			want bool
		}{
			{"OldItem", []*storeOp{refused(kd.slot, &stamped)}, true},
			{"Read", []*storeOp{refused(kd.slot, nil), read(kd.slot, stamped)}, true},
			{"NotStampedLater", []*storeOp{refused(kd.slot, nil), read(kd.slot, early)}, false},
			{"AnotherOwner", []*storeOp{refused(kd.slot, nil), read(kd.slot, other)}, false},
			{"NoRead", []*storeOp{refused(kd.slot, nil)}, false},
			{"ReadOfAnotherSlot", []*storeOp{refused(kd.slot, nil), read(kd.slot+4, stamped)}, name == "Lock"},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				c := &checker{byRes: map[string][]*storeOp{"r": tc.ops}, bySem: map[string][]*storeOp{"r": tc.ops}, byRW: map[string][]*storeOp{"r": tc.ops}}
				op := kd.op
				op.Resource, op.Owner, op.Status, op.Invoke, op.Return = "r", "o", 503, at(100), at(110)
				if got := c.retryAfterSkew(&op); got != tc.want {
					t.Errorf("retryAfterSkew: got %v, want %v", got, tc.want)
				}
			})
		}
	}
}
