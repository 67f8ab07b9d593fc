package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
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

func semPath(name string) string { return "/semaphores/" + url.PathEscape(name) }

// semWaitPath is the waiting acquire's route of a semaphore.
func semWaitPath(name string) string { return semPath(name) + "/wait" }

func semBody(m map[string]any) string {
	b, _ := json.Marshal(m)
	return string(b)
}

func semAcquireBody(owner string, ttl, permits int) string {
	return semBody(map[string]any{"owner": owner, "ttl_seconds": ttl, "permits": permits})
}

// semAcquire takes a permit of name for owner and fails the test unless it
// was granted; it returns the permit object.
func semAcquire(tb testing.TB, srv *testenv.Server, name, owner string, ttl, permits int) map[string]any {
	tb.Helper()
	r := call(tb, srv, "POST", semPath(name), semAcquireBody(owner, ttl, permits))
	if r.status != 200 || r.json["acquired"] != true {
		tb.Fatalf("acquire %q as %q: got %d %s, want 200 acquired", name, owner, r.status, r.raw)
	}
	return r.json["permit"].(map[string]any)
}

// semFull checks that owner's acquire of name is answered full.
func semFull(tb testing.TB, srv *testenv.Server, name, owner string, permits int) reply {
	tb.Helper()
	r := call(tb, srv, "POST", semPath(name), semAcquireBody(owner, 30, permits))
	if r.status != 200 || r.json["acquired"] != false || r.json["name"] != name {
		tb.Fatalf("acquire %q as %q: got %d %s, want 200 acquired:false (full)", name, owner, r.status, r.raw)
	}
	return r
}

func slotOf(tb testing.TB, permit map[string]any) int64 {
	tb.Helper()
	n, err := permit["slot"].(json.Number).Int64()
	if err != nil {
		tb.Fatalf("slot %v: %v", permit["slot"], err)
	}
	return n
}

func slotBody(owner string, slot int64, extra ...any) string {
	m := map[string]any{"owner": owner, "slot": slot}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return semBody(m)
}

// semHolders returns the status's holders as owner → slot.
func semHolders(tb testing.TB, srv *testenv.Server, name string) (map[string]int64, reply) {
	tb.Helper()
	r := call(tb, srv, "GET", semPath(name), "")
	if r.status != 200 {
		tb.Fatalf("status %q: got %d %s", name, r.status, r.raw)
	}
	out := map[string]int64{}
	for _, h := range r.json["holders"].([]any) {
		p := h.(map[string]any)
		out[p["owner"].(string)] = slotOf(tb, p)
	}
	return out, r
}

// TestSemaphoreLifecycle: N owners each get a permit in a slot of their
// own, the next is full (with the time a permit comes free), status lists
// the holders; renew and release act by slot, and a released slot is
// free at once; a same-owner acquire takes its own slot again with a new
// token; tokens grow across all permits.
func TestSemaphoreLifecycle(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Now: steppingClock()})
	name := res(t)
	var last int64
	slots := map[int64]string{}
	for _, o := range []string{"w1", "w2", "w3"} {
		p := semAcquire(t, srv, name, o, 30, 3)
		if tok := token(t, p); tok <= last {
			t.Fatalf("%s: token %d, want > %d", o, tok, last)
		} else {
			last = tok
		}
		k := slotOf(t, p)
		if other, taken := slots[k]; taken || k < 0 || k > 2 {
			t.Fatalf("%s got slot %d (held by %q), want a free slot of 0..2", o, k, other)
		}
		slots[k] = o
		if p["name"] != name || p["owner"] != o {
			t.Errorf("got permit %v", p)
		}
	}
	full := semFull(t, srv, name, "w4", 3)
	if full.json["free_at"] == nil || full.header.Get("Retry-After") == "" {
		t.Errorf("full: got %s %v, want free_at and Retry-After (the service read the item)", full.raw, full.header)
	}
	holders, st := semHolders(t, srv, name)
	if len(holders) != 3 || st.json["permits"] != json.Number("3") {
		t.Fatalf("status: got %s, want 3 holders of 3 permits", st.raw)
	}
	// The same owner again: its own slot, a new token.
	k1 := holders["w1"]
	again := semAcquire(t, srv, name, "w1", 30, 3)
	if slotOf(t, again) != k1 || token(t, again) <= last {
		t.Fatalf("re-acquire: got slot %d token %d, want slot %d and a token > %d", slotOf(t, again), token(t, again), k1, last)
	}
	last = token(t, again)
	// Renew by slot.
	r := call(t, srv, "POST", semPath(name)+"/renew", slotBody("w1", k1, "ttl_seconds", 60, "fencing_token", last))
	if r.status != 200 || r.json["renewed"] != true || token(t, r.json["permit"].(map[string]any)) != last {
		t.Fatalf("renew: got %d %s", r.status, r.raw)
	}
	// Another's slot, a wrong token, a slot beyond N.
	wantProblem(t, call(t, srv, "POST", semPath(name)+"/renew", slotBody("w2", k1, "ttl_seconds", 60)), 403, "forbidden")
	wantProblem(t, call(t, srv, "DELETE", semPath(name), slotBody("w1", k1, "fencing_token", last-1)), 409, "stale-token")
	wantProblem(t, call(t, srv, "POST", semPath(name)+"/renew", slotBody("w1", 7, "ttl_seconds", 60)), 404, "not-found")
	// Release by slot: the slot is free at once.
	if r := call(t, srv, "DELETE", semPath(name), slotBody("w1", k1, "fencing_token", last)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	wantProblem(t, call(t, srv, "DELETE", semPath(name), slotBody("w1", k1)), 404, "not-found")
	p4 := semAcquire(t, srv, name, "w4", 30, 3)
	if slotOf(t, p4) != k1 || token(t, p4) <= last {
		t.Fatalf("w4: got slot %d token %d, want the freed slot %d and a token > %d", slotOf(t, p4), token(t, p4), k1, last)
	}
}

// TestSemaphoreNeverExceeded: many acquirers of a semaphore of N permits,
// each holding for a few milliseconds and releasing: never more than N of
// them hold a permit at once (counted here, where a holder counts itself
// before its work and uncounts itself before its release), every grant
// has a token of its own, each slot's tokens increase, and each
// acquirer's tokens increase.
func TestSemaphoreNeverExceeded(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	const (
		permits    = 3
		acquirers  = 8
		iterations = 12
	)
	var (
		holding, most atomic.Int32
		mu            sync.Mutex
		tokens        = map[int64]string{}
		bySlot        = map[int64][]int64{}
		full, grants  atomic.Int32
		wg            sync.WaitGroup
	)
	for g := range acquirers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("worker-%d", g)
			var last int64
			for range iterations {
				// Eight on one item can keep dynalite past the try
				// function's timeout (api.RouteTimeout: a few writes of a
				// try) on a loaded machine: a 503 is an unknown outcome,
				// which a client retries as the same owner (its own live
				// permit, if a write landed, it takes again).
				r := call(t, srv, "POST", semPath(name), semAcquireBody(owner, 10, permits))
				for try := 0; r.status == 503 && try < 5; try++ {
					time.Sleep(100 * time.Millisecond)
					r = call(t, srv, "POST", semPath(name), semAcquireBody(owner, 10, permits))
				}
				if r.status != 200 {
					t.Errorf("%s: got %d %s", owner, r.status, r.raw)
					return
				}
				if r.json["acquired"] != true {
					full.Add(1)
					time.Sleep(2 * time.Millisecond)
					continue
				}
				grants.Add(1)
				p := r.json["permit"].(map[string]any)
				tok, k := token(t, p), slotOf(t, p)
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if n > permits {
					t.Errorf("%d holders at once, want at most %d", n, permits)
				}
				mu.Lock()
				if other, dup := tokens[tok]; dup {
					t.Errorf("token %d granted to %s and %s", tok, other, owner)
				}
				tokens[tok] = owner
				bySlot[k] = append(bySlot[k], tok)
				mu.Unlock()
				if tok <= last {
					t.Errorf("%s: token %d after %d", owner, tok, last)
				}
				last = tok
				time.Sleep(3 * time.Millisecond)
				holding.Add(-1)
				if r := call(t, srv, "DELETE", semPath(name), slotBody(owner, k, "fencing_token", tok)); r.status != 204 {
					t.Errorf("%s release slot %d: got %d %s", owner, k, r.status, r.raw)
				}
			}
		}()
	}
	wg.Wait()
	for k, toks := range bySlot {
		if k < 0 || k >= permits {
			t.Errorf("slot %d granted, want 0..%d", k, permits-1)
		}
		if !slices.IsSorted(toks) {
			// Grants of one slot are serialized by its item: each later
			// one has a larger token, though the answers may arrive out of
			// order; sorted order here is the order they were recorded.
			t.Logf("slot %d tokens recorded out of order: %v", k, toks)
		}
	}
	t.Logf("%d grants, %d full answers, at most %d holders at once", grants.Load(), full.Load(), most.Load())
	if grants.Load() < acquirers {
		t.Errorf("got %d grants, want at least one per acquirer", grants.Load())
	}
}

// TestSemaphoreTokensNeverReused: a semaphore's tokens grow across every
// permit and every way a permit ends — release, expiry, force release —
// and across the deletion of the item by garbage collection, after which
// a fresh counter starts above the clock in microseconds.
func TestSemaphoreTokensNeverReused(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	var last int64
	next := func(step string, p map[string]any) int64 {
		t.Helper()
		tok := token(t, p)
		if tok <= last {
			t.Fatalf("%s: token %d, want > %d", step, tok, last)
		}
		last = tok
		return tok
	}
	tok := next("first", semAcquire(t, srv, name, "w1", 5, 2))
	k := slotOf(t, semAcquire(t, srv, name, "w1", 5, 2)) // re-acquire: a new token in the same slot
	last++
	if r := call(t, srv, "DELETE", semPath(name), slotBody("w1", k)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	next("after release", semAcquire(t, srv, name, "w2", 5, 2))
	clock.Advance(5 * time.Second)
	p := semAcquire(t, srv, name, "w3", 5, 2)
	next("after expiry", p)
	if r := call(t, srv, "DELETE", "/admin/semaphores/"+url.PathEscape(name), semBody(map[string]any{"slot": slotOf(t, p), "reason": "test"})); r.status != 200 {
		t.Fatalf("force release: got %d %s", r.status, r.raw)
	}
	next("after force release", semAcquire(t, srv, name, "w4", 5, 2))
	if _, err := srv.DB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(testenv.Table),
		Key: map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: locklogic.SemaphorePrefix + name}}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond)
	fresh := next("after garbage collection", semAcquire(t, srv, name, "w5", 5, 2))
	if fresh <= clock.Now().UnixMicro() {
		t.Errorf("fresh counter %d, want above the clock in µs (%d)", fresh, clock.Now().UnixMicro())
	}
	_ = tok
}

// semCaller finds an owner, other than avoid, whose home slot among
// permits is home (or, with other set, is not home).
func semOwner(tb testing.TB, prefix string, permits int64, home int, other bool) string {
	tb.Helper()
	for i := range 1000 {
		o := fmt.Sprintf("%s-%d", prefix, i)
		if (locklogic.HomeSlot(locklogic.Caller{Owner: o}, permits) == home) != other {
			return o
		}
	}
	tb.Fatal("no owner found")
	return ""
}

// oldItemStore is a DynamoDB as DynamoDB answers a failed condition, over
// dynalite, which ignores ReturnValuesOnConditionCheckFailure: it reads
// the old item itself (a request the service does not count) and returns
// it with the failure. calls counts the requests the service makes.
type oldItemStore struct {
	*dynamodb.Client
	calls atomic.Int32
}

func (s *oldItemStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	s.calls.Add(1)
	out, err := s.Client.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) && ccf.Item == nil {
		got, gerr := s.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
		if gerr != nil {
			return nil, gerr
		}
		ccf.Item = got.Item
	}
	return out, err
}

func (s *oldItemStore) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	s.calls.Add(1)
	return s.Client.GetItem(ctx, in, opts...)
}

// TestSemaphoreRequestCounts measures the DynamoDB requests of an acquire
// whose guessed slot is free, one whose guess collides with a held slot
// while another is free, and one of a full semaphore: on dynalite, counted
// by the SDK's transport (a failed write's old item costs a read there),
// and over a store that returns the old item with a failed condition, as
// DynamoDB does.
func TestSemaphoreRequestCounts(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Store: testenv.StoreDynalite})
	const permits = 2
	a := semOwner(t, "a", permits, 0, false)
	b := semOwner(t, "b", permits, 0, false) // the same home slot as a
	c := semOwner(t, "c", permits, 0, false)

	t.Run("Dynalite", func(t *testing.T) {
		name := res(t)
		steps := []struct {
			step, owner  string
			granted      bool
			writes, gets int
		}{
			{"free", a, true, 1, 0},
			{"collided", b, true, 2, 1},
			{"full", c, false, 1, 1},
		}
		for _, s := range steps {
			srv.Ops.Take()
			r := call(t, srv, "POST", semPath(name), semAcquireBody(s.owner, 30, permits))
			if r.json["acquired"] != s.granted {
				t.Fatalf("%s: got %s, want acquired %v", s.step, r.raw, s.granted)
			}
			ops := srv.Ops.Take()
			t.Logf("%s: %d UpdateItem, %d GetItem", s.step, ops["UpdateItem"], ops["GetItem"])
			if ops["UpdateItem"] != s.writes || ops["GetItem"] != s.gets || len(ops) > 2 {
				t.Errorf("%s: got %v, want %d UpdateItem and %d GetItem", s.step, ops, s.writes, s.gets)
			}
		}
	})
	t.Run("OldItemReturned", func(t *testing.T) {
		name := res(t)
		store := &oldItemStore{Client: srv.DB}
		svc := locklogic.New(store, locklogic.Config{Table: testenv.Table, OldItemOnFailure: true})
		for _, s := range []struct {
			step, owner string
			granted     bool
			calls       int
		}{
			{"free", a, true, 1},
			{"collided", b, true, 2},
			{"full", c, false, 1},
		} {
			store.calls.Store(0)
			res, err := svc.AcquireSemaphore(context.Background(), locklogic.SemaphoreAcquireRequest{Name: name,
				Caller: locklogic.Caller{Owner: s.owner}, TTLSeconds: 30, Permits: permits}, locklogic.Budget{})
			if err != nil || res.Acquired != s.granted {
				t.Fatalf("%s: got %+v %v, want acquired %v", s.step, res, err, s.granted)
			}
			t.Logf("%s: %d requests", s.step, store.calls.Load())
			if got := int(store.calls.Load()); got != s.calls || res.Writes+res.Reads != s.calls {
				t.Errorf("%s: got %d requests (%d writes, %d reads), want %d", s.step, got, res.Writes, res.Reads, s.calls)
			}
			if s.step == "full" && res.FreeAt.IsZero() {
				t.Errorf("full: no free_at, want the earliest expiry from the old item")
			}
		}
	})
}

// TestSemaphorePermitsMismatch: another N than the semaphore's is 409
// permits-mismatch (naming the semaphore's N) while a permit is held, told
// apart from full (200, acquired false); once no permit is held, the
// acquire sets the new N.
func TestSemaphorePermitsMismatch(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	k := slotOf(t, semAcquire(t, srv, name, "w1", 30, 1))
	semFull(t, srv, name, "w2", 1)
	r := call(t, srv, "POST", semPath(name), semAcquireBody("w2", 30, 2))
	wantProblem(t, r, 409, "permits-mismatch")
	if r.json["permits"] != json.Number("1") {
		t.Errorf("got %s, want permits 1", r.raw)
	}
	if r := call(t, srv, "DELETE", semPath(name), slotBody("w1", k)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	semAcquire(t, srv, name, "w2", 30, 3)
	if _, st := semHolders(t, srv, name); st.json["permits"] != json.Number("3") {
		t.Errorf("status after the change: got %s, want permits 3", st.raw)
	}
	semAcquire(t, srv, name, "w3", 30, 3)
	wantProblem(t, call(t, srv, "POST", semPath(name), semAcquireBody("w4", 30, 1)), 409, "permits-mismatch")
}

// TestSemaphoreShrinkKeepsOutOfRangeSlotsDead: after N shrinks, a permit
// in a slot beyond the new N can neither be renewed nor show up: the
// change needs every such slot ended, and renew needs the slot below N.
func TestSemaphoreShrinkKeepsOutOfRangeSlotsDead(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	far := semOwner(t, "far", 3, 2, false) // home slot 2
	k := slotOf(t, semAcquire(t, srv, name, far, 5, 3))
	if k != 2 {
		t.Fatalf("got slot %d, want 2", k)
	}
	clock.Advance(5 * time.Second)
	semAcquire(t, srv, name, "w1", 30, 1)
	wantProblem(t, call(t, srv, "POST", semPath(name)+"/renew", slotBody(far, 2, "ttl_seconds", 30)), 404, "not-found")
	if holders, st := semHolders(t, srv, name); len(holders) != 1 || holders["w1"] != 0 {
		t.Errorf("got %s, want only w1 in slot 0", st.raw)
	}
}

// TestSemaphoreOnePermitPerOwner: an owner whose permit is not in its home
// slot (that was taken) still holds one permit only: when its home slot
// frees, its next acquire takes its own permit again instead of a second.
func TestSemaphoreOnePermitPerOwner(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	const permits = 3
	a := semOwner(t, "a", permits, 0, false)
	b := semOwner(t, "b", permits, 0, false)
	ka := slotOf(t, semAcquire(t, srv, name, a, 30, permits))
	kb := slotOf(t, semAcquire(t, srv, name, b, 30, permits))
	if ka != 0 || kb == 0 {
		t.Fatalf("got slots %d and %d, want a in its home 0 and b elsewhere", ka, kb)
	}
	if r := call(t, srv, "DELETE", semPath(name), slotBody(a, ka)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	// b's home is free now; b's acquire must find its own permit.
	if again := slotOf(t, semAcquire(t, srv, name, b, 30, permits)); again != kb {
		t.Errorf("b's acquire with its home free: got slot %d, want its own %d", again, kb)
	}
	if holders, st := semHolders(t, srv, name); len(holders) != 1 {
		t.Errorf("got %s, want b's one permit", st.raw)
	}
	// Released away from home, b's next permit is in its home slot: the
	// marker it left is removed on the way.
	if r := call(t, srv, "DELETE", semPath(name), slotBody(b, kb)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	if home := slotOf(t, semAcquire(t, srv, name, b, 30, permits)); home != 0 {
		t.Errorf("got slot %d, want b's home 0", home)
	}
	if holders, st := semHolders(t, srv, name); len(holders) != 1 {
		t.Errorf("got %s, want b's one permit", st.raw)
	}
	for attr := range storedItem(t, srv, locklogic.SemaphorePrefix+name) {
		if len(attr) == 17 && attr[0] == 'w' {
			t.Errorf("marker %s left on the item after its owner came home", attr)
		}
	}
}

// gate holds one store request in the fault proxy: arrived is closed when
// it comes, and it goes on when open is closed.
type gate struct{ arrived, open chan struct{} }

func newGate() gate { return gate{make(chan struct{}), make(chan struct{})} }

// updatePlan answers the first UpdateItem through the proxy 500 without
// forwarding it (the SDK sends it again, with the same :now) and holds
// the n-th UpdateItem at gates[n]; every other request passes.
func updatePlan(gates map[int32]gate) faultproxy.Plan {
	var n atomic.Int32
	return func(r faultproxy.Request) faultproxy.Action {
		if r.Op != "UpdateItem" {
			return faultproxy.Action{}
		}
		i := n.Add(1)
		if i == 1 {
			return faultproxy.Action{Fault: faultproxy.InternalError}
		}
		if g, ok := gates[i]; ok {
			close(g.arrived)
			<-g.open
		}
		return faultproxy.Action{}
	}
}

// countOwner returns how many live permits of owner the status lists.
func countOwner(tb testing.TB, srv *testenv.Server, name, owner string) (int, reply) {
	tb.Helper()
	_, st := semHolders(tb, srv, name)
	count := 0
	for _, h := range st.json["holders"].([]any) {
		if h.(map[string]any)["owner"] == owner {
			count++
		}
	}
	return count, st
}

// TestSemaphoreLateRenewCannotReviveUnmarkedPermit (found by review): A
// holds a permit away from its home slot (held by C), so one permit per
// owner rests on A's marker. A's renew, issued while the permit is live,
// is answered 500 without landing; the SDK's retry (the same :now) lands
// after the permit's end. In between, B's acquire judged A's marker stale
// and removed it. The retry used to revive the permit without its marker
// (the late-write rule lets a renewal revive its own lease), and once C
// released, A's next acquire took its free home slot: two live permits.
// The renewal now requires the marker to name the permit: it is 404.
func TestSemaphoreLateRenewCannotReviveUnmarkedPermit(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{Now: clock.Now, StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	const permits = 3
	a := semOwner(t, "a", permits, 0, false)
	b := semOwner(t, "b", permits, 0, false)
	c := semOwner(t, "c", permits, 0, false)
	pc := semAcquire(t, srv, name, c, 30, permits)
	r := call(t, srv, "POST", semPath(name), semBody(map[string]any{"owner": a, "ttl_seconds": 1, "permits": permits, "lock_delay_seconds": 5}))
	if r.json["acquired"] != true {
		t.Fatalf("A: got %d %s, want a permit", r.status, r.raw)
	}
	pa := r.json["permit"].(map[string]any)
	k := slotOf(t, pa)
	if k == 0 {
		t.Fatalf("A got its home slot 0, held by C: %s", r.raw)
	}
	// Renewals as usual: C's at home (no marker), A's away (its marker
	// names the permit).
	for _, rn := range []struct {
		owner string
		slot  int64
		ttl   int
	}{{c, 0, 30}, {a, k, 1}} {
		if r := call(t, srv, "POST", semPath(name)+"/renew", slotBody(rn.owner, rn.slot, "ttl_seconds", rn.ttl)); r.status != 200 {
			t.Fatalf("renew of %s's permit in slot %d: got %d %s", rn.owner, rn.slot, r.status, r.raw)
		}
	}

	retry := newGate()
	proxy.SetPlan(updatePlan(map[int32]gate{2: retry}))
	renewed := make(chan reply, 1)
	go func() {
		renewed <- call(t, slow, "POST", semPath(name)+"/renew", slotBody(a, k, "ttl_seconds", 3, "fencing_token", token(t, pa)))
	}()
	<-retry.arrived // issued while live; its retry is held
	clock.Advance(1100 * time.Millisecond)
	pb := semAcquire(t, srv, name, b, 30, permits) // home 0 held, A's slot in its lock-delay: B cleans A's marker
	markers := 0
	for attr := range storedItem(t, srv, locklogic.SemaphorePrefix+name) {
		if len(attr) == 17 && attr[0] == 'w' {
			markers++
		}
	}
	if markers != 1 {
		t.Fatalf("got %d markers after B's acquire away from home, want B's alone (A's removed: the history this test needs)", markers)
	}
	close(retry.open)
	wantProblem(t, <-renewed, 404, "not-found")

	semRelease(t, srv, name, c, pc)
	again := call(t, srv, "POST", semPath(name), semAcquireBody(a, 30, permits))
	if n, st := countOwner(t, srv, name, a); n != 1 {
		t.Errorf("A holds %d live permits (one permit per owner): its acquire answered %s; status %s, B in slot %d",
			n, again.raw, st.raw, slotOf(t, pb))
	}
}

// TestSemaphoreAcquireRechecksRevivablePermit (found by review): A holds a
// permit away from home, marked; its home frees, the permit expires, and
// A's renew retry (issued while live) is held. A's acquire plans its home
// slot from a view where the marked permit is ended; before its write
// lands, the renewal's retry revives the permit (the marker still names
// it). The home write would have left A two live permits; it requires the
// marked permit still not live, fails, and takes that permit again.
func TestSemaphoreAcquireRechecksRevivablePermit(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	proxy := newProxy(t)
	slow := testenv.Start(t, testenv.Options{Now: clock.Now, StoreEndpoint: proxy.URL()})
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	const permits = 3
	a := semOwner(t, "a", permits, 0, false)
	c := semOwner(t, "c", permits, 0, false)
	pc := semAcquire(t, srv, name, c, 30, permits)
	pa := semAcquire(t, srv, name, a, 1, permits)
	k := slotOf(t, pa)
	if k == 0 {
		t.Fatalf("A got its home slot 0, held by C")
	}
	semRelease(t, srv, name, c, pc)

	// UpdateItem 1: the renew, answered 500; 2: its retry, held; 3: A's
	// guess (refused: A's marker); 4: A's planned home write, held.
	retry, home := newGate(), newGate()
	proxy.SetPlan(updatePlan(map[int32]gate{2: retry, 4: home}))
	renewed := make(chan reply, 1)
	go func() {
		renewed <- call(t, slow, "POST", semPath(name)+"/renew", slotBody(a, k, "ttl_seconds", 3, "fencing_token", token(t, pa)))
	}()
	<-retry.arrived
	clock.Advance(1100 * time.Millisecond) // A's permit has ended
	acquired := make(chan reply, 1)
	go func() { acquired <- call(t, slow, "POST", semPath(name), semAcquireBody(a, 30, permits)) }()
	<-home.arrived
	close(retry.open)
	if r := <-renewed; r.status != 200 {
		t.Fatalf("A's renew: got %d %s, want the permit revived (the history this test needs)", r.status, r.raw)
	}
	close(home.open)
	r := <-acquired
	if n, st := countOwner(t, srv, name, a); n != 1 {
		t.Errorf("A holds %d live permits (one permit per owner): its acquire answered %s; status %s", n, r.raw, st.raw)
	}
	if r.json["acquired"] != true || slotOf(t, r.json["permit"].(map[string]any)) != k {
		t.Errorf("A's acquire: got %d %s, want its revived permit in slot %d again", r.status, r.raw, k)
	}
}

// TestSemaphoreLockDelay: a permit with a lock-delay that expires
// unreleased keeps its slot from others for the delay (a full semaphore
// says when it comes free), not from its owner; a release frees it at
// once.
func TestSemaphoreLockDelay(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	r := call(t, srv, "POST", semPath(name), semBody(map[string]any{"owner": "w1", "ttl_seconds": 5, "permits": 1, "lock_delay_seconds": 60}))
	if r.json["acquired"] != true || r.json["permit"].(map[string]any)["lock_delay_seconds"] != json.Number("60") {
		t.Fatalf("got %s, want a permit with lock_delay_seconds 60", r.raw)
	}
	clock.Advance(5 * time.Second)
	full := semFull(t, srv, name, "w2", 1)
	want := clock.Now().Add(60 * time.Second).UTC().Format("2006-01-02T15:04:05.000Z")
	if full.json["free_at"] != want {
		t.Errorf("free_at: got %v, want %s (expiry + lock-delay)", full.json["free_at"], want)
	}
	if holders, _ := semHolders(t, srv, name); len(holders) != 0 {
		t.Errorf("status lists %v, want no live permit", holders)
	}
	semAcquire(t, srv, name, "w1", 30, 1) // the owner takes its slot again
	if r := call(t, srv, "DELETE", semPath(name), slotBody("w1", 0)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	semAcquire(t, srv, name, "w2", 30, 1)
}

// TestSemaphoreForceRelease: an operator ends a permit by slot: by default
// the slot keeps its lock-delay and the holder is told its permit was
// force released; immediately, the slot is free at once; with another
// token, 409 with the permit that stayed.
func TestSemaphoreForceRelease(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	srv := testenv.Start(t, testenv.Options{LogTo: logs})
	name := res(t)
	admin := "/admin/semaphores/" + url.PathEscape(name)
	r := call(t, srv, "POST", semPath(name), semBody(map[string]any{"owner": "w1", "ttl_seconds": 300, "permits": 1, "lock_delay_seconds": 60}))
	p := r.json["permit"].(map[string]any)
	tok := token(t, p)

	r = call(t, srv, "DELETE", admin, semBody(map[string]any{"slot": 0, "reason": "host gone", "fencing_token": tok + 1}))
	wantProblem(t, r, 409, "stale-token")
	if cur, _ := r.json["current"].(map[string]any); cur == nil || token(t, cur) != tok || cur["slot"] != json.Number("0") {
		t.Errorf("got %s, want the permit that stayed as current", r.raw)
	}
	r = call(t, srv, "DELETE", admin, semBody(map[string]any{"slot": 0, "reason": "host gone"}))
	if r.status != 200 || r.json["ended"].(map[string]any)["owner"] != "w1" || r.json["immediate"] != false {
		t.Fatalf("force release: got %d %s", r.status, r.raw)
	}
	for _, r := range []reply{
		call(t, srv, "POST", semPath(name)+"/renew", slotBody("w1", 0, "ttl_seconds", 30)),
		call(t, srv, "DELETE", semPath(name), slotBody("w1", 0)),
	} {
		wantProblem(t, r, 404, "not-found")
		if r.json["force_released"] != true {
			t.Errorf("the evicted holder is not told: %s", r.raw)
		}
	}
	semFull(t, srv, name, "w2", 1) // the slot's lock-delay runs on
	semFull(t, srv, name, "w1", 1) // for its owner too
	if r := call(t, srv, "GET", "/admin/semaphores?prefix="+url.QueryEscape(name), ""); r.status != 200 ||
		len(r.json["holders"].([]any)) != 1 || r.json["holders"].([]any)[0].(map[string]any)["force_released"] != true {
		t.Errorf("listing: got %d %s, want the force-released permit inside its lock-delay", r.status, r.raw)
	}
	r = call(t, srv, "DELETE", admin, semBody(map[string]any{"slot": 0, "reason": "end the delay", "immediate": true}))
	if r.status != 200 || r.json["immediate"] != true {
		t.Fatalf("immediate force release: got %d %s", r.status, r.raw)
	}
	if next := token(t, semAcquire(t, srv, name, "w2", 30, 1)); next <= tok {
		t.Errorf("got token %d, want > %d", next, tok)
	}
	wantProblem(t, call(t, srv, "DELETE", admin, semBody(map[string]any{"slot": 5, "reason": "x"})), 404, "not-found")
	audits := logs.lines(t, "audit")
	if len(audits) != 4 || audits[1]["action"] != "force-release-semaphore" || audits[1]["slot"] != float64(0) || audits[1]["owner"] != "w1" {
		t.Errorf("got audit lines %v, want 4 with action, slot and owner", audits)
	}
}

// TestSemaphoreWatch: the watch index grows at every grant and every end
// of a permit (release, expiry), and a renewal leaves it.
func TestSemaphoreWatch(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	name := res(t)
	watch := func(index int64) (int64, bool, reply) {
		t.Helper()
		r := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", semPath(name), index), "")
		if r.status != 200 {
			t.Fatalf("watch: got %d %s", r.status, r.raw)
		}
		i, _ := r.json["index"].(json.Number).Int64()
		return i, r.json["changed"] == true, r
	}
	i0, _, r := watch(0)
	if i0 != 0 || len(r.json["holders"].([]any)) != 0 {
		t.Fatalf("never taken: got %s, want index 0", r.raw)
	}
	index := i0
	step := func(what string, changes bool) {
		t.Helper()
		i, changed, r := watch(index)
		if changes && (!changed || i <= index) || !changes && (changed || i != index) {
			t.Fatalf("%s: got index %d (changed %v) after %d, want a change %v: %s", what, i, changed, index, changes, r.raw)
		}
		index = i
	}
	k1 := slotOf(t, semAcquire(t, srv, name, "w1", 10, 3))
	step("grant", true)
	semAcquire(t, srv, name, "w2", 5, 3)
	step("second grant", true)
	clock.Advance(time.Second)
	if r := call(t, srv, "POST", semPath(name)+"/renew", slotBody("w1", k1, "ttl_seconds", 10)); r.status != 200 {
		t.Fatalf("renew: got %d %s", r.status, r.raw)
	}
	step("renewal", false)
	semAcquire(t, srv, name, "w1", 10, 3)
	step("re-acquire", true)
	if r := call(t, srv, "DELETE", semPath(name), slotBody("w1", k1)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	step("release", true)
	clock.Advance(5 * time.Second)
	step("expiry", true)
	if _, _, r := watch(index); len(r.json["holders"].([]any)) != 0 || r.json["permits"] != json.Number("3") {
		t.Errorf("got %s, want no holders of 3 permits", r.raw)
	}
}

// TestSemaphoreWatchNeverGoesBack (found by review): two instances 300 ms
// apart. The watcher's last answer came from the instance ahead, which saw
// the permit expire; the instance behind would still see it live by its
// clock. Its answer keeps to the watcher's index, unchanged and without the
// permit, with or without a wait — it used to answer at once "changed" with
// an index one lower, the ended permit live again. Since the watch records
// the expiries it answers, the instance behind sees the end too: its
// status agrees. An index above every state the semaphore's counter allows
// is 422.
func TestSemaphoreWatchNeverGoesBack(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	ahead := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(300 * time.Millisecond) }})
	name := res(t)
	semAcquire(t, srv, name, "A", 1, 2)
	semAcquire(t, srv, name, "B", 30, 2)
	clock.Advance(850 * time.Millisecond) // A's permit: 150 ms left behind, ended 150 ms ago ahead
	seen := call(t, ahead, "GET", semPath(name)+"/watch", "")
	i1 := index(t, seen)
	if n := len(seen.json["holders"].([]any)); n != 1 {
		t.Fatalf("the instance ahead: got %s, want B's permit alone", seen.raw)
	}
	for _, wait := range []int{0, 1} {
		r := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d&wait_seconds=%d", semPath(name), i1, wait), "")
		if r.status != 200 || index(t, r) != i1 || r.json["changed"] != false || len(r.json["holders"].([]any)) != 1 {
			t.Errorf("wait %d s from the index ahead, %d: got %d %s, want index %d unchanged with B's permit alone", wait, i1, r.status, r.raw, i1)
		}
	}
	if st := call(t, srv, "GET", semPath(name), ""); len(st.json["holders"].([]any)) != 1 {
		t.Errorf("status behind, after the watch ahead answered A's end: got %s, want B's permit alone (the end recorded)", st.raw)
	}
	// Counter c: every state's index is at most 2c + 1 (no permit live).
	c := token(t, seen.json)
	wantProblem(t, call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", semPath(name), 2*c+2), ""), 422, "validation-failed")
	if r := call(t, srv, "GET", fmt.Sprintf("%s/watch?index=%d", semPath(name), 2*c+1), ""); r.status != 200 || index(t, r) != 2*c+1 {
		t.Errorf("index %d (every permit ended): got %d %s, want it echoed", 2*c+1, r.status, r.raw)
	}
}

// TestSemaphoreWatchWaits: a watch with wait_seconds answers as soon as a
// permit is granted.
func TestSemaphoreWatchWaits(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	semAcquire(t, srv, name, "w1", 30, 2)
	r := call(t, srv, "GET", semPath(name)+"/watch", "")
	index := r.json["index"].(json.Number).String()
	go func() {
		time.Sleep(300 * time.Millisecond)
		semAcquire(t, srv, name, "w2", 30, 2)
	}()
	start := time.Now()
	r = call(t, srv, "GET", semPath(name)+"/watch?wait_seconds=5&index="+index, "")
	if r.status != 200 || r.json["changed"] != true || len(r.json["holders"].([]any)) != 2 {
		t.Fatalf("got %d %s, want the change: 2 holders", r.status, r.raw)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %s, want soon after the grant", d)
	}
}

// TestSemaphoreAdminList: one row per permit of the semaphores whose name
// starts with the prefix, each with N; a page ends after the semaphore
// that reaches the limit; a lock of the same name is not a semaphore.
func TestSemaphoreAdminList(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	base := res(t)
	for i, n := range []int{2, 1} {
		name := fmt.Sprintf("%s-%d", base, i)
		for j := range n {
			semAcquire(t, srv, name, fmt.Sprintf("w%d", j), 60, 3)
		}
	}
	acquire(t, srv, base+"-0", "lock-holder", 60) // a lock with a semaphore's name
	rows := map[string]int{}
	cursor, pages := "", 0
	for {
		q := url.Values{"prefix": {base}, "limit": {"1"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := call(t, srv, "GET", "/admin/semaphores?"+q.Encode(), "")
		if r.status != 200 {
			t.Fatalf("list: got %d %s", r.status, r.raw)
		}
		pages++
		names := map[string]bool{}
		for _, h := range r.json["holders"].([]any) {
			p := h.(map[string]any)
			rows[p["name"].(string)]++
			names[p["name"].(string)] = true
			if p["permits"] != json.Number("3") || p["owner"] == "lock-holder" {
				t.Errorf("row %v", p)
			}
		}
		if len(names) > 1 {
			t.Errorf("page %d holds %d semaphores, want one (limit 1)", pages, len(names))
		}
		c, _ := r.json["cursor"].(string)
		if c == "" || pages > 50 {
			break
		}
		cursor = c
	}
	if rows[base+"-0"] != 2 || rows[base+"-1"] != 1 || len(rows) != 2 {
		t.Errorf("got rows %v, want 2 and 1", rows)
	}
	// The lock listing shows the lock, not the semaphore.
	r := call(t, srv, "GET", "/admin/locks?prefix="+url.QueryEscape(base), "")
	if locks := r.json["locks"].([]any); len(locks) != 1 || locks[0].(map[string]any)["owner"] != "lock-holder" {
		t.Errorf("lock listing: got %s, want the one lock", r.raw)
	}
}

// TestSemaphorePrincipalBinding: with IAM auth a permit answers only to
// the principal that took it, whatever the owner string; another
// principal with the same owner string is another owner (its own permit).
func TestSemaphorePrincipalBinding(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Identity: func(r *http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
		if arn := r.Header.Get("X-Test-Caller"); arn != "" {
			return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: arn}
		}
		return nil
	}})
	as := func(arn, method, path, body string) reply {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Caller", arn)
		return do(t, req)
	}
	const (
		alice = "arn:aws:iam::123456789012:user/alice"
		bob   = "arn:aws:iam::123456789012:user/bob"
	)
	name := res(t)
	r := as(alice, "POST", semPath(name), semAcquireBody("w1", 30, 2))
	ka := slotOf(t, r.json["permit"].(map[string]any))
	wantProblem(t, as(bob, "POST", semPath(name)+"/renew", slotBody("w1", ka, "ttl_seconds", 30)), 403, "forbidden")
	wantProblem(t, as(bob, "DELETE", semPath(name), slotBody("w1", ka)), 403, "forbidden")
	r = as(bob, "POST", semPath(name), semAcquireBody("w1", 30, 2))
	if r.json["acquired"] != true || slotOf(t, r.json["permit"].(map[string]any)) == ka {
		t.Fatalf("bob with alice's owner string: got %s, want a permit of its own", r.raw)
	}
	if r := as(alice, "DELETE", semPath(name), slotBody("w1", ka)); r.status != 204 {
		t.Errorf("alice's release: got %d %s", r.status, r.raw)
	}
}

// TestSemaphoreValidation: the semaphore routes' bodies and names, every
// invalid field in one 422.
func TestSemaphoreValidation(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	name := res(t)
	for _, tc := range []struct {
		method, path, body string
		fields             []string
	}{
		{"POST", semWaitPath(name), `{"owner":"w1","ttl_seconds":30,"permits":3,"wait_seconds":21,"queue_ticket":"a b"}`, []string{"wait_seconds", "queue_ticket"}},
		{"POST", semPath(name), `{"owner":"w1","ttl_seconds":30,"permits":3,"wait_seconds":1,"queue_ticket":"a"}`, []string{"wait_seconds", "queue_ticket"}},
		{"POST", semPath(name), `{"owner":" ","ttl_seconds":0,"permits":101}`, []string{"owner", "ttl_seconds", "permits"}},
		{"POST", semPath(name), `{"owner":"w1","ttl_seconds":30}`, []string{"permits"}},
		{"POST", semPath(name) + "/renew", `{"owner":"w1","slot":100,"ttl_seconds":30,"fencing_token":0}`, []string{"slot", "fencing_token"}},
		{"DELETE", semPath(name), `{"owner":"w1"}`, []string{"slot"}},
		{"DELETE", semPath(name), `{"owner":"w1","slot":-1,"x":1}`, []string{"x", "slot"}},
		{"DELETE", "/admin/semaphores/" + url.PathEscape(name), `{"reason":""}`, []string{"slot", "reason"}},
		{"GET", "/semaphores/a%2Fb", "", []string{"name"}},
		{"GET", semPath(name) + "/watch?index=-1&wait_seconds=99", "", []string{"index", "wait_seconds"}},
	} {
		r := call(t, srv, tc.method, tc.path, tc.body)
		wantProblem(t, r, 422, "validation-failed")
		var got []string
		for _, e := range r.json["errors"].([]any) {
			got = append(got, e.(map[string]any)["field"].(string))
		}
		slices.Sort(got)
		want := slices.Clone(tc.fields)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s %s %s: got fields %v, want %v", tc.method, tc.path, tc.body, got, want)
		}
	}
}
