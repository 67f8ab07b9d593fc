package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// semWrites are the semaphore writes the real service sends — an
// acquire's first write (its guess of the home slot), a renew, a release
// — as the proxy records them (captureSemWrites).
var semWrites = sync.OnceValues(captureSemWrites)

func captureSemWrites() (map[storeKind]map[string]any, error) {
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
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
	// a permit; only the requests matter here.
	_, _ = svc.AcquireSemaphore(ctx, locklogic.SemaphoreAcquireRequest{Name: "x", Caller: caller, TTLSeconds: 1, Permits: 2}, locklogic.Budget{})
	_, _ = svc.RenewSemaphore(ctx, locklogic.SemaphoreRenewRequest{Name: "x", Caller: caller, TTLSeconds: 1})
	_ = svc.ReleaseSemaphore(ctx, locklogic.SemaphoreReleaseRequest{Name: "x", Caller: caller})
	out := map[storeKind]map[string]any{}
	kinds := []storeKind{storeAcquire, storeRenew, storeRelease}
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
		return nil, fmt.Errorf("captured %d semaphore writes, want %d", len(out), len(kinds))
	}
	return out, nil
}

// slotName matches a slot's attribute name.
var slotName = regexp.MustCompile(`^(o|p|t|a|n|e|d|f|x|g|r|z)[0-9]+$`)

// permit is a permit of the fake semaphore "s": its slot, owner, token,
// grant id, and times (ms from t0).
type permit struct {
	slot          int
	owner         string
	token         int64
	gid           string
	acq, ren, exp int
	released      bool
}

func (f *fake) slotAttrs(p permit) map[string]any {
	k := fmt.Sprint(p.slot)
	m := map[string]any{"o" + k: s(p.owner), "t" + k: n(p.token), "a" + k: n(f.now(p.acq)), "n" + k: n(f.now(p.ren)), "e" + k: n(f.now(p.exp)), "g" + k: s(p.gid)}
	if p.released {
		m["x"+k] = n(f.now(p.exp))
	}
	return m
}

// permitBody is a PERMIT as the API renders it.
func (f *fake) permitBody(p permit) string {
	ts := func(ms int) string { return time.UnixMilli(f.now(ms)).UTC().Format("2006-01-02T15:04:05.000Z07:00") }
	return fmt.Sprintf(`{"name":"s","slot":%d,"owner":%q,"fencing_token":%d,"acquired_at":%q,"expires_at":%q}`, p.slot, p.owner, p.token, ts(p.acq), ts(p.exp))
}

// semOp adds a client's semaphore call on "s" (N = 2).
func (f *fake) semOp(client int, kind Kind, inv, ret int, status int, body string, mod ...func(*Op)) *Op {
	return f.op(client, kind, inv, ret, status, body, append([]func(*Op){func(o *Op) { o.Resource, o.Permits = "s", 2 }}, mod...)...)
}

// semWrite records a semaphore write as the service sends it, of slot
// p.slot by p.owner at p.acq (acquire: its grant, with the counter the
// answer shows; renew: :now p.ren to p.exp; release: :now p.exp).
func (f *fake) semWrite(kind storeKind, p permit, recv, ans int, result string, counter int64) {
	writes, err := semWrites()
	if err != nil {
		panic(err)
	}
	var req map[string]any
	b, _ := json.Marshal(writes[kind])
	_ = json.Unmarshal(b, &req)
	req["Key"] = map[string]any{"resource": s("sem/s")}
	names := req["ExpressionAttributeNames"].(map[string]any)
	for ph, v := range names {
		if m := slotName.FindStringSubmatch(v.(string)); m != nil {
			names[ph] = fmt.Sprint(m[1], p.slot)
		} else if isMarkerName(v.(string)) {
			_, names[ph] = identity(p.owner, 2)
		}
	}
	vals := req["ExpressionAttributeValues"].(map[string]any)
	vals[":o"] = s(p.owner)
	answer := map[string]any{}
	switch kind {
	case storeAcquire:
		vals[":now"], vals[":iss"], vals[":exp"], vals[":base"], vals[":gid"] = n(f.now(p.acq)), n(f.now(p.acq)), n(f.now(p.exp)), n(100), s(p.gid)
		attrs := f.slotAttrs(p)
		attrs["counter"], attrs["permits"] = n(counter), n(2)
		if home, marker := identity(p.owner, 2); home != p.slot {
			attrs[marker] = s(p.gid)
		}
		answer["Attributes"] = attrs
	case storeRenew:
		vals[":now"], vals[":exp"], vals[":k"] = n(f.now(p.ren)), n(f.now(p.exp)), n(int64(p.slot))
	case storeRelease:
		vals[":now"] = n(f.now(p.exp))
	}
	status := 0
	switch result {
	case "committed":
		status = 200
	case "refused":
		status, answer = 400, map[string]any{"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}
	}
	f.rec("UpdateItem", req, recv, ans, status, answer, faultproxy.None, status)
}

// semRead records a consistent read of "s" finding permits (none: no
// item), the counter, and the owners' markers of permits away from home.
func (f *fake) semRead(counter int64, recv, ans int, ps ...permit) {
	answer := map[string]any{}
	if counter > 0 {
		item := map[string]any{"resource": s("sem/s"), "counter": n(counter), "permits": n(2)}
		for _, p := range ps {
			for k, v := range f.slotAttrs(p) {
				item[k] = v
			}
			if home, marker := identity(p.owner, 2); home != p.slot && !p.released {
				item[marker] = s(p.gid)
			}
		}
		answer["Item"] = item
	}
	f.rec("GetItem", map[string]any{"Key": map[string]any{"resource": s("sem/s")}, "ConsistentRead": true}, recv, ans, 200, answer, faultproxy.None, 200)
}

// The owners' home slots among 2: c0 and c3 home 0, c1 and c2 home 1.
var (
	p0 = permit{slot: 0, owner: "c0", token: 101, gid: "ga", acq: 2, ren: 2, exp: 2002}
	p1 = permit{slot: 1, owner: "c1", token: 102, gid: "gb", acq: 22, ren: 22, exp: 2022}
	p2 = permit{slot: 0, owner: "c2", token: 103, gid: "gc", acq: 121, ren: 121, exp: 2121}
)

// semClean is a correct history of a semaphore of 2: c0 and c1 take a
// permit each (homes 0 and 1); c2 finds it full; c0 releases; c2 takes
// slot 0, away from its home; a status shows c1 and c2.
func semClean() *fake {
	f := newFake()
	f.semOp(0, SemAcquire, 0, 10, 200, `{"acquired":true,"permit":`+f.permitBody(p0)+`}`)
	f.semWrite(storeAcquire, p0, 2, 8, "committed", 101)
	f.semOp(1, SemAcquire, 20, 30, 200, `{"acquired":true,"permit":`+f.permitBody(p1)+`}`)
	f.semWrite(storeAcquire, p1, 22, 28, "committed", 102)
	f.semOp(2, SemAcquire, 40, 60, 200, `{"acquired":false,"name":"s"}`)
	f.semWrite(storeAcquire, permit{slot: 1, owner: "c2", gid: "gx", acq: 41, exp: 2041}, 41, 45, "refused", 0)
	f.semRead(102, 46, 50, p0, p1)
	f.semOp(0, SemRelease, 100, 110, 204, "", func(o *Op) { o.Slot = 0 })
	rel := p0
	rel.exp, rel.released = 101, true
	f.semWrite(storeRelease, rel, 101, 105, "committed", 0)
	f.semOp(2, SemAcquire, 120, 140, 200, `{"acquired":true,"permit":`+f.permitBody(p2)+`}`)
	f.semWrite(storeAcquire, permit{slot: 1, owner: "c2", gid: "gc", acq: 121, exp: 2121}, 121, 123, "refused", 0)
	f.semRead(102, 124, 126, rel, p1)
	f.semWrite(storeAcquire, p2, 127, 130, "committed", 103)
	f.semOp(3, SemStatus, 200, 210, 200, `{"name":"s","permits":2,"holders":[`+f.permitBody(p2)+`,`+f.permitBody(p1)+`]}`)
	f.semRead(103, 202, 205, p2, p1)
	return f
}

func TestSemaphoreIdentity(t *testing.T) {
	for _, o := range []string{"c0", "c1", "c2", "c3", "w0", "final-s0"} {
		for _, n := range []int64{1, 2, 3, 7} {
			if home, _ := identity(o, n); home != locklogic.HomeSlot(locklogic.Caller{Owner: o}, n) {
				t.Errorf("%s among %d: home %d, the service's %d", o, n, home, locklogic.HomeSlot(locklogic.Caller{Owner: o}, n))
			}
		}
	}
}

func TestDecodeSemaphoreWrites(t *testing.T) {
	f := semClean()
	ops, err := decodeRecords(f.h.Records)
	if err != nil {
		t.Fatal(err)
	}
	type decoded struct {
		kind        storeKind
		owner       string
		slot, home  int
		n           int64
		setMarker   bool
		markerSet   bool
		outcome     outcome
		partialItem bool
	}
	var got []decoded
	for _, o := range ops {
		got = append(got, decoded{o.kind, o.owner, o.sem.slot, o.sem.home, o.sem.n, o.sem.setMarker, o.sem.markerSet, o.outcome, o.sem.partial})
	}
	want := []decoded{
		{storeAcquire, "c0", 0, -1, 2, false, false, applied, true},
		{storeAcquire, "c1", 1, -1, 2, false, false, applied, true},
		{storeAcquire, "c2", 1, -1, 2, false, false, refused, false},
		{storeRead, "", -1, -1, 0, false, false, applied, false},
		{storeRelease, "c0", 0, -1, 0, false, false, applied, false},
		{storeAcquire, "c2", 1, -1, 2, false, false, refused, false},
		{storeRead, "", -1, -1, 0, false, false, applied, false},
		{storeAcquire, "c2", 0, 1, 2, true, false, applied, true},
		{storeRead, "", -1, -1, 0, false, false, applied, false},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decoded\n%v\nwant\n%v", got, want)
	}
	if it := ops[0].sem.item; it.counter != 101 || it.permits != 2 || it.slots[0].token != 101 || it.slots[0].owner != "c0" {
		t.Errorf("the first grant's item decoded as %v", it)
	}
}

func TestCheckSemaphoreCleanHistory(t *testing.T) {
	rep := check(semClean())
	wantOnly(t, rep)
	if rep.PermitHolds != 3 || rep.Linearizable["s"] != "ok" {
		t.Errorf("got %d permit holds, linearizable %q; want 3, ok", rep.PermitHolds, rep.Linearizable["s"])
	}
}

func TestCheckSemaphoreLimit(t *testing.T) {
	// c3 is granted slot 0 (its home) while c0 holds it and c1 holds slot
	// 1: a store that overwrote a live permit. Three owners hold permits
	// of two.
	f := semClean()
	f.h.Ops, f.h.Records = f.h.Ops[:2], f.h.Records[:2]
	p3 := permit{slot: 0, owner: "c3", token: 103, gid: "gd", acq: 61, ren: 61, exp: 2061}
	f.semOp(3, SemAcquire, 60, 70, 200, `{"acquired":true,"permit":`+f.permitBody(p3)+`}`)
	f.semWrite(storeAcquire, p3, 61, 65, "committed", 103)
	rep := check(f)
	wantOnly(t, rep, RuleSemaphoreLimit, RuleSemaphoreHolders, RuleLinearizable)
	excerptHas(t, rep, RuleSemaphoreLimit, "3 owners held permits of a semaphore of 2", "c0 holds token 101", "c3 holds token 103")
	excerptHas(t, rep, RuleSemaphoreHolders, "c3 was granted slot 0 (token 103) while c0's permit there (token 101) was live")
}

func TestCheckSemaphoreSlots(t *testing.T) {
	// The answer names slot 1 for the permit the store wrote into slot 0.
	f := semClean()
	f.h.Ops[0].Body = []byte(`{"acquired":true,"permit":` + f.permitBody(permit{slot: 1, owner: "c0", token: 101, acq: 2, exp: 2002}) + `}`)
	f.h.Ops[0].decode()
	rep := check(f)
	wantOnly(t, rep, RuleSemaphoreSlots)
	excerptHas(t, rep, RuleSemaphoreSlots, "c0 was answered slot 1 for token 101, which the store wrote into slot 0")

	// A grant's token is not the counter's.
	g := newFake()
	g.semOp(0, SemAcquire, 0, 10, 200, `{"acquired":true,"permit":`+g.permitBody(p0)+`}`)
	g.semWrite(storeAcquire, p0, 2, 8, "committed", 150)
	wantOnly(t, check(g), RuleSemaphoreSlots, RuleLinearizable)

	// c2, holding slot 0 away from its home, is granted its home slot 1
	// (freed by c1's release): two permits of one owner.
	h := semClean()
	h.h.Ops, h.h.Records = h.h.Ops[:len(h.h.Ops)-1], h.h.Records[:len(h.h.Records)-1]
	h.semOp(1, SemRelease, 150, 160, 204, "", func(o *Op) { o.Slot = 1 })
	rel1 := p1
	rel1.exp, rel1.released = 151, true
	h.semWrite(storeRelease, rel1, 151, 155, "committed", 0)
	again := permit{slot: 1, owner: "c2", token: 104, gid: "ge", acq: 171, ren: 171, exp: 2171}
	h.semOp(4, SemAcquire, 170, 180, 200, `{"acquired":true,"permit":`+h.permitBody(again)+`}`, func(o *Op) { o.Owner = "c2" })
	h.semWrite(storeAcquire, again, 171, 175, "committed", 104)
	rep = check(h)
	wantOnly(t, rep, RuleSemaphoreSlots, RuleLinearizable)
	excerptHas(t, rep, RuleSemaphoreSlots, "c2 was granted slot 1 (token 104) while its permit in slot 0 (token 103) was live", "two permits of one owner")
}

func TestCheckSemaphoreFencing(t *testing.T) {
	// Two slots' grants with one token.
	f := semClean()
	f.h.Ops, f.h.Records = f.h.Ops[:1], f.h.Records[:1]
	dup := p1
	dup.token = 101
	f.semOp(1, SemAcquire, 20, 30, 200, `{"acquired":true,"permit":`+f.permitBody(dup)+`}`)
	f.semWrite(storeAcquire, dup, 22, 28, "committed", 101)
	rep := check(f)
	wantOnly(t, rep, RuleFencing, RuleLinearizable)
	excerptHas(t, rep, RuleFencing, "token 101")
}

func TestCheckSemaphoreStatusModel(t *testing.T) {
	// A status that leaves out a live permit is no state of the
	// semaphore.
	f := semClean()
	f.semOp(3, SemStatus, 300, 310, 200, `{"name":"s","permits":2,"holders":[`+f.permitBody(p1)+`]}`)
	f.semRead(103, 302, 305, p1)
	rep := check(f)
	if !rep.Has(RuleLinearizable) {
		t.Errorf("got %v, want linearizable", rep.Counts)
	}
}

func TestCheckSemaphoreLateRenewalAfterMarkerMoved(t *testing.T) {
	// c2 holds slot 0 away from home (its marker names gc) until 2121. A
	// renewal stamped 2100 is held back in the network; meanwhile c2
	// takes its home slot 1 (the marker it saw, gc, goes). The renewal
	// then lands: the service's marker condition refuses it (design.md,
	// "A permit that comes back"), so the permit stays ended. A store
	// that applied it would revive a second permit of c2, which the
	// model must not allow, and it must allow the refusal (the model
	// without the marker condition judged it impossible, CI 2026-12-07).
	for _, result := range []string{"refused", "committed"} {
		t.Run(result, func(t *testing.T) {
			f := semClean()
			f.semOp(2, SemRenew, 2090, 2500, 503, problem(503, "service-unavailable"), func(o *Op) { o.Slot = 0 })
			home := permit{slot: 1, owner: "c2", token: 104, gid: "gd", acq: 2201, ren: 2201, exp: 4201}
			f.semOp(2, SemAcquire, 2200, 2220, 200, `{"acquired":true,"permit":`+f.permitBody(home)+`}`)
			f.semWrite(storeAcquire, home, 2201, 2205, "committed", 104)
			f.setVals(map[string]any{":wv": s("gc")})
			renewed := p2
			renewed.ren, renewed.exp = 2100, 4100
			f.semWrite(storeRenew, renewed, 2300, 2400, result, 0)
			rep := check(f)
			if result == "refused" {
				wantOnly(t, rep)
			} else if !rep.Has(RuleLinearizable) {
				t.Errorf("a late renewal revived a permit its owner's marker no longer names: got %v, want linearizable", rep.Counts)
			}
		})
	}
}

func TestSemaphoreMarkerAllows(t *testing.T) {
	// A renewal's marker condition, as locklogic's markerCondition: away
	// from home the owner's marker must name the slot's grant, at home
	// there must be none. c2's home among 2 is slot 1.
	_, marker := identity("c2", 2)
	for _, tc := range []struct {
		name    string
		markers map[string]string
		slot    int
		want    bool
	}{
		{"AwayMarked", map[string]string{marker: "gc"}, 0, true},
		{"AwayMarkerNamesAnotherGrant", map[string]string{marker: "gz"}, 0, false},
		{"AwayUnmarked", nil, 0, false},
		{"Home", nil, 1, true},
		{"HomeWhileMarked", map[string]string{marker: "gc"}, 1, false},
		{"AnotherOwnersMarker", map[string]string{"w0123456789abcdef": "gc"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st semState
			st.exists, st.permits = true, 2
			st.slots[0] = leaseState{owner: "c2", gid: "gc", token: 103}
			st.slots[1] = leaseState{owner: "c2", gid: "gd", token: 104}
			st.markers = encodeMarkers(tc.markers)
			if got := st.markerAllows("c2", tc.slot); got != tc.want {
				t.Errorf("markerAllows(c2, slot %d) with markers %v: got %v, want %v", tc.slot, tc.markers, got, tc.want)
			}
		})
	}
}
