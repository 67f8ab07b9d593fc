package locklogic

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// queueStore is a lock item (or, with sem, a semaphore of one permit)
// held for good, with a queue, over the fake clock: a join appends (unless
// refuseJoins), a keep moves the entry's until; the item is never granted.
// From promoteAt on (when set) the entries ahead of the last are gone, as
// if their waiters had been served. Failed writes return the old item when
// oldItem is set (DynamoDB). The integration tests run the real
// expressions on dynalite; this one counts and paces.
type queueStore struct {
	clock       *fakeClock
	oldItem     bool
	refuseJoins bool
	sem         bool
	promoteAt   time.Time

	mu       sync.Mutex
	queue    []map[string]types.AttributeValue
	getTimes []time.Time // when each read was made
}

func (q *queueStore) item() map[string]types.AttributeValue {
	if !q.promoteAt.IsZero() && !q.clock.Now().Before(q.promoteAt) && len(q.queue) > 1 {
		q.queue = q.queue[len(q.queue)-1:]
	}
	it := item("holder", "", 7, t0.Add(time.Hour))
	if q.sem {
		it = semItem(1, 7, map[int]permitSpec{0: {owner: "holder", token: 7, exp: t0.Add(time.Hour)}})
	}
	l := make([]types.AttributeValue, len(q.queue))
	for i, e := range q.queue {
		l[i] = &types.AttributeValueMemberM{Value: e}
	}
	it[AttrQueue] = &types.AttributeValueMemberL{Value: l}
	it[AttrQueueUntil] = num(t0.Add(time.Hour).UnixMilli())
	return it
}

func (q *queueStore) db() *dynamofake.DB {
	db := &dynamofake.DB{}
	fail := func() error {
		if q.oldItem {
			return ccf(q.item())
		}
		return ccf(nil)
	}
	db.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		q.mu.Lock()
		defer q.mu.Unlock()
		v := in.ExpressionAttributeValues
		switch u := *in.UpdateExpression; {
		case strings.Contains(u, "list_append") && !q.refuseJoins:
			q.queue = append(q.queue, v[":qe"].(*types.AttributeValueMemberL).Value[0].(*types.AttributeValueMemberM).Value)
		case strings.HasPrefix(u, "SET #q["):
			for _, e := range q.queue {
				if e[entryID].(*types.AttributeValueMemberS).Value == v[":tk"].(*types.AttributeValueMemberS).Value {
					e[entryUntil] = v[":qt"]
				}
			}
		default:
			return nil, fail()
		}
		return &dynamodb.UpdateItemOutput{Attributes: q.item()}, nil
	}
	db.Get = func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.getTimes = append(q.getTimes, q.clock.Now())
		return &dynamodb.GetItemOutput{Item: q.item()}, nil
	}
	return db
}

// others returns n live entries of other waiters.
func others(n int) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	for i := range n {
		out = append(out, map[string]types.AttributeValue{
			entryID: &types.AttributeValueMemberS{Value: "other" + string(rune('a'+i))}, AttrOwner: &types.AttributeValueMemberS{Value: "o"},
			entryUntil: num(t0.Add(time.Hour).UnixMilli()),
		})
	}
	return out
}

// TestFairWaitPace: over a 20 s round on a lock (or a semaphore) that
// stays held, a waiter makes two writes (its first attempt and its join)
// and reads at the pace of its place (PlacePollInterval): the head every
// LoneHeadPollInterval (it waits alone here), the second every
// NextPollInterval, the third every ThirdPollInterval, the others every
// QueuePollInterval; on a store that returns no old item, one consistent
// read before the join.
func TestFairWaitPace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ahead   int
		oldItem bool
		sem     bool
		perSec  [2]float64
	}{
		{"Head", 0, true, false, [2]float64{35, 45}},
		{"HeadDynalite", 0, false, false, [2]float64{35, 45}},
		{"Second", 1, true, false, [2]float64{4.2, 5.8}},
		{"Third", 2, true, false, [2]float64{2.8, 3.9}},
		{"Fourth", 3, true, false, [2]float64{0.7, 1.4}},
		{"Tenth", 9, true, false, [2]float64{0.7, 1.4}},
		{"SemaphoreHead", 0, true, true, [2]float64{35, 45}},
		{"SemaphoreHeadDynalite", 0, false, true, [2]float64{35, 45}},
		{"SemaphoreSecond", 1, false, true, [2]float64{4.2, 5.8}},
		{"SemaphoreThird", 2, true, true, [2]float64{2.8, 3.9}},
		{"SemaphoreFifth", 4, false, true, [2]float64{0.7, 1.4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			st := &queueStore{clock: clock, oldItem: tc.oldItem, sem: tc.sem, queue: others(tc.ahead)}
			db := st.db()
			svc := newWaitService(db, clock, Config{OldItemOnFailure: tc.oldItem, FairWaiting: true})
			var ticket string
			var acquired bool
			if tc.sem {
				res, err := svc.AcquireSemaphore(context.Background(), SemaphoreAcquireRequest{Name: "s", Caller: Caller{Owner: "w2"},
					TTLSeconds: 30, Permits: 1, WaitSeconds: 20}, Budget{})
				if err != nil {
					t.Fatal(err)
				}
				ticket, acquired = res.QueueTicket, res.Acquired
				if res.Writes != len(db.Updates()) || res.Reads != db.Gets() {
					t.Errorf("the answer counts %d writes and %d reads, the store saw %d and %d", res.Writes, res.Reads, len(db.Updates()), db.Gets())
				}
				if want := t0.Add(time.Hour); !res.FreeAt.Equal(want) {
					t.Errorf("free_at %v, want the holder's expiry %v", res.FreeAt, want)
				}
			} else {
				res, err := svc.AcquireWait(context.Background(), waitReq(20), Budget{})
				if err != nil {
					t.Fatal(err)
				}
				ticket, acquired = res.QueueTicket, res.Acquired
			}
			if acquired {
				t.Fatal("acquired, want held")
			}
			if len(st.queue) != tc.ahead+1 || ticket == "" || str(st.queue[tc.ahead], entryID) != ticket {
				t.Fatalf("queue %v, answer's ticket %q: want the waiter's entry last, and its ticket answered", st.queue, ticket)
			}
			if want := t0.Add(20*time.Second + QueueGrace).UnixMilli(); mustN(t, st.queue[tc.ahead], entryUntil) != want {
				t.Errorf("the place lapses at %v, want the round's end plus QueueGrace", st.queue[tc.ahead][entryUntil])
			}
			if n := len(db.Updates()); n != 2 {
				t.Errorf("got %d writes, want 2 (the first attempt and the join)", n)
			}
			waited := clock.Now().Sub(t0).Seconds()
			perSec := float64(db.Gets()) / waited
			t.Logf("%s: %d writes, %d reads in %.1f s: %.1f reads/s (mean interval %s at place %d)", tc.name, len(db.Updates()), db.Gets(),
				waited, perSec, PlacePollInterval(tc.ahead, tc.ahead+1), tc.ahead)
			if perSec < tc.perSec[0] || perSec > tc.perSec[1] {
				t.Errorf("got %d reads in %.1f s (%.1f/s), want %v a second", db.Gets(), waited, perSec, tc.perSec)
			}
		})
	}
}

// TestQueueReadBound: the reads a waited-on item costs a second, summed
// over the places of its waiters, stay within 40 + 1 × (waiters − 1), and
// the waiter behind the head reads often enough to notice its promotion
// within 1.5 × NextPollInterval: 300 ms, within a hold of half a second.
func TestQueueReadBound(t *testing.T) {
	t.Parallel()
	for w := 1; w <= MaxQueue; w++ {
		sum := 0.0
		for i := range w {
			sum += float64(time.Second) / float64(PlacePollInterval(i, w))
		}
		if bound := 40 + float64(w-1); sum > bound+1e-9 {
			t.Errorf("%d waiters read %.1f times a second, over %.0f", w, sum, bound)
		}
	}
	if d := NextPollInterval * 3 / 2; d > 300*time.Millisecond {
		t.Errorf("the second in line may read %s apart, want at most 300 ms", d)
	}
	if !(LoneHeadPollInterval <= HeadPollInterval && HeadPollInterval < NextPollInterval && NextPollInterval < ThirdPollInterval && ThirdPollInterval < QueuePollInterval) {
		t.Error("the tiers must slow down with the place")
	}
}

// TestFairWaitPromotion: the second in line, whose head is served (the
// head's entry gone from the item at promoteAt), reads within 1.5 ×
// NextPollInterval of it and then watches at the head's pace: after a
// short hold it is watching closely when the hold ends.
func TestFairWaitPromotion(t *testing.T) {
	t.Parallel()
	for _, sem := range []bool{false, true} {
		t.Run(map[bool]string{false: "Lock", true: "Semaphore"}[sem], func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			promote := t0.Add(3*time.Second + 17*time.Millisecond)
			st := &queueStore{clock: clock, oldItem: true, sem: sem, queue: others(1), promoteAt: promote}
			svc := newWaitService(st.db(), clock, Config{OldItemOnFailure: true, FairWaiting: true})
			if sem {
				_, _ = svc.AcquireSemaphore(context.Background(), SemaphoreAcquireRequest{Name: "s", Caller: Caller{Owner: "w2"},
					TTLSeconds: 30, Permits: 1, WaitSeconds: 6}, Budget{})
			} else {
				_, _ = svc.AcquireWait(context.Background(), waitReq(6), Budget{})
			}
			var after []time.Time
			for _, at := range st.getTimes {
				if !at.Before(promote) {
					after = append(after, at)
				}
			}
			if len(after) < 2 {
				t.Fatalf("%d reads after the promotion, want many", len(after))
			}
			if d := after[0].Sub(promote); d > NextPollInterval*3/2 {
				t.Errorf("the promoted waiter read %s after it became the head, want within %s", d, NextPollInterval*3/2)
			}
			rate := float64(len(after)-1) / after[len(after)-1].Sub(after[0]).Seconds()
			t.Logf("first read %s after the promotion, then %.1f reads/s", after[0].Sub(promote), rate)
			if want := float64(time.Second / LoneHeadPollInterval); rate < 0.85*want || rate > 1.15*want {
				t.Errorf("the new head reads %.1f times a second, want about %.0f", rate, want)
			}
		})
	}
}

func mustN(t *testing.T, m map[string]types.AttributeValue, name string) int64 {
	t.Helper()
	v, ok := n(m, name)
	if !ok {
		t.Fatalf("%s is not a number in %v", name, m)
	}
	return v
}

// TestFairWaitKeepsPlace: a round that sends back its ticket moves its
// place's until with one write and joins no more; a ticket whose place
// lapsed, or that names another owner's place, joins at the back. A round
// without a ticket takes over its owner's place whose round has ended,
// not one whose round still runs.
func TestFairWaitKeepsPlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		owner    string
		until    time.Duration // the place's until, from t0
		noTicket bool
		wantKept bool
	}{
		{"Live", "w2", 500 * time.Millisecond, false, true},
		{"Lapsed", "w2", -time.Millisecond, false, false},
		{"OtherOwner", "someone", 500 * time.Millisecond, false, false},
		{"NoTicketRoundEnded", "w2", 500 * time.Millisecond, true, true},
		{"NoTicketRoundRuns", "w2", QueueGrace + time.Second, true, false},
		{"NoTicketOtherOwner", "someone", 500 * time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			place := map[string]types.AttributeValue{entryID: &types.AttributeValueMemberS{Value: "mine"},
				AttrOwner: &types.AttributeValueMemberS{Value: tc.owner}, entryUntil: num(t0.Add(tc.until).UnixMilli())}
			st := &queueStore{clock: clock, oldItem: true, queue: append(others(1), place)}
			db := st.db()
			req := waitReq(3)
			if !tc.noTicket {
				req.QueueTicket = "mine"
			}
			res, err := newWaitService(db, clock, Config{OldItemOnFailure: true, FairWaiting: true}).AcquireWait(context.Background(), req, Budget{})
			if err != nil || res.Acquired {
				t.Fatalf("got %+v, %v; want held", res, err)
			}
			kept := res.QueueTicket == "mine"
			if kept != tc.wantKept || len(st.queue) != map[bool]int{true: 2, false: 3}[tc.wantKept] {
				t.Fatalf("answered ticket %q with queue %v; want the place kept: %v", res.QueueTicket, st.queue, tc.wantKept)
			}
			if n := len(db.Updates()); n != 2 {
				t.Errorf("got %d writes, want 2 (the first attempt, then one keep or one join)", n)
			}
		})
	}
}

// TestFairWaitJoinRefused: a join refused again and again (the queue keeps
// changing) is tried three times at most in a round; the waiter then waits
// without a place instead of writing on.
func TestFairWaitJoinRefused(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &queueStore{clock: clock, oldItem: true, refuseJoins: true, queue: others(1)}
	db := st.db()
	res, err := newWaitService(db, clock, Config{OldItemOnFailure: true, FairWaiting: true}).AcquireWait(context.Background(), waitReq(20), Budget{})
	if err != nil || res.Acquired || res.QueueTicket != "" {
		t.Fatalf("got %+v, %v; want held without a place", res, err)
	}
	if n := len(db.Updates()); n != 4 {
		t.Errorf("got %d writes in a 20 s round, want 4 (the first attempt and three joins)", n)
	}
}

func TestValidateQueueTicket(t *testing.T) {
	t.Parallel()
	for ticket, ok := range map[string]bool{
		"": true, "3ryokmsrhxukz": true, "A-z_9": true, strings.Repeat("a", 64): true,
		strings.Repeat("a", 65): false, "a b": false, "é": false, "a\x00": false, "#q": false, ":tk": false,
	} {
		var v ValidationError
		ValidateQueueTicket(ticket, &v)
		if (v.Err() == nil) != ok {
			t.Errorf("ValidateQueueTicket(%q): got %v, want valid %v", ticket, v.Err(), ok)
		}
	}
}

// TestQueueView: what a waiter reads from the queue — the lapsed entries
// at the front, its own live place (owner and principal must match), and
// whether the queue lets a plain acquire in.
func TestQueueView(t *testing.T) {
	t.Parallel()
	nowMs := t0.UnixMilli()
	e := func(id, owner, principal string, until int64) types.AttributeValue {
		m := map[string]types.AttributeValue{entryID: &types.AttributeValueMemberS{Value: id},
			AttrOwner: &types.AttributeValueMemberS{Value: owner}, entryUntil: num(until)}
		if principal != "" {
			m[AttrPrincipal] = &types.AttributeValueMemberS{Value: principal}
		}
		return &types.AttributeValueMemberM{Value: m}
	}
	v := newView(map[string]types.AttributeValue{
		AttrQueue: &types.AttributeValueMemberL{Value: []types.AttributeValue{
			e("a", "x", "", nowMs-1), e("b", "x", "", nowMs), e("c", "w", "p", nowMs+1), e("d", "w", "", nowMs+1), e("e", "w", "", nowMs-5),
		}},
		AttrQueueUntil: num(nowMs + 1),
	}, true)
	if k := v.lapsedFront(nowMs); k != 2 {
		t.Errorf("lapsedFront: got %d, want 2 (until <= now is lapsed)", k)
	}
	for _, tc := range []struct {
		tickets []string
		c       Caller
		want    int
	}{
		{[]string{"c"}, Caller{Owner: "w", Principal: "p"}, 2},
		{[]string{"c"}, Caller{Owner: "w"}, -1},
		{[]string{"zz", "d"}, Caller{Owner: "w"}, 3},
		{[]string{"e"}, Caller{Owner: "w"}, -1}, // lapsed: no place
		{[]string{"d"}, Caller{Owner: "x"}, -1},
	} {
		if i, _ := v.find(tc.tickets, tc.c, nowMs); i != tc.want {
			t.Errorf("find(%v, %+v): got %d, want %d", tc.tickets, tc.c, i, tc.want)
		}
	}
	if v.open(nowMs) || !v.open(nowMs+1) {
		t.Errorf("open: got %v at now and %v once queue_until passed, want false, true", v.open(nowMs), v.open(nowMs+1))
	}
	if !newView(nil, true).open(nowMs) {
		t.Error("open: an absent item has no queue")
	}
}

// ctxDB is a fake store that records, for each write, whether its context
// was already done when the write was sent.
type ctxDB struct {
	*dynamofake.DB
	mu   sync.Mutex
	done []bool
}

func (d *ctxDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.mu.Lock()
	d.done = append(d.done, ctx.Err() != nil)
	d.mu.Unlock()
	return d.DB.UpdateItem(ctx, in, opts...)
}

// TestFairWaitLeavesOnError: a wait that ends with an error (here its read
// is refused for good, and the request is cancelled meanwhile) removes its
// own entry before it answers, with one write conditioned on its ticket
// that the cancellation does not cut short; without it, the dead place
// would block the waiters behind it until its round's end + QueueGrace.
func TestFairWaitLeavesOnError(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &queueStore{clock: clock, oldItem: true, queue: others(1)}
	fake := st.db()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "no dynamodb:GetItem"}
	fake.Get = func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
		cancel() // the request is cancelled while its read fails
		return nil, denied
	}
	update := fake.Update
	var left []string
	fake.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		if u := *in.UpdateExpression; strings.HasPrefix(u, "REMOVE #q[") {
			st.mu.Lock()
			defer st.mu.Unlock()
			tk := in.ExpressionAttributeValues[":tk"].(*types.AttributeValueMemberS).Value
			left = append(left, tk)
			st.queue = slices.DeleteFunc(st.queue, func(e map[string]types.AttributeValue) bool {
				return e[entryID].(*types.AttributeValueMemberS).Value == tk
			})
			return &dynamodb.UpdateItemOutput{Attributes: st.item()}, nil
		}
		return update(in)
	}
	db := &ctxDB{DB: fake}
	_, err := newWaitService(db, clock, Config{OldItemOnFailure: true, FairWaiting: true}).AcquireWait(ctx, waitReq(10), Budget{})
	if !errors.Is(err, denied) {
		t.Fatalf("got %v, want the read's error", err)
	}
	ups := fake.Updates()
	if len(ups) != 3 || len(left) != 1 {
		t.Fatalf("got %d writes (leaves %v), want 3: the first attempt, the join, the leave", len(ups), left)
	}
	joined := ups[1].ExpressionAttributeValues[":qe"].(*types.AttributeValueMemberL).Value[0].(*types.AttributeValueMemberM).Value
	if id := joined[entryID].(*types.AttributeValueMemberS).Value; left[0] != id {
		t.Errorf("the leave removed ticket %q, want the waiter's own %q", left[0], id)
	}
	if len(st.queue) != 1 {
		t.Errorf("queue after the leave: %v, want only the other waiter's entry", st.queue)
	}
	if db.done[2] {
		t.Error("the leave was sent with a cancelled context, want it to run whatever the request's cancellation")
	}
}
