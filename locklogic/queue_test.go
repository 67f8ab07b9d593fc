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
// if their waiters had been served. With serveEvery set, the entry at the
// front is served (removed) at serveFrom and every serveEvery after, up to
// serveMax of them, never the last. Failed writes return the old item when
// oldItem is set (DynamoDB). The integration tests run the real
// expressions on dynalite; this one counts and paces.
type queueStore struct {
	clock       *fakeClock
	oldItem     bool
	refuseJoins bool
	sem         bool
	promoteAt   time.Time
	serveFrom   time.Time
	serveEvery  time.Duration
	serveMax    int
	served      int

	mu        sync.Mutex
	queue     []map[string]types.AttributeValue
	getTimes  []time.Time // when each read was made
	getPlaces []int       // the place of the last entry (the waiter's) at each read
}

func (q *queueStore) item() map[string]types.AttributeValue {
	now := q.clock.Now()
	if !q.promoteAt.IsZero() && !now.Before(q.promoteAt) && len(q.queue) > 1 {
		q.queue = q.queue[len(q.queue)-1:]
	}
	if q.serveEvery > 0 && !now.Before(q.serveFrom) {
		for want := min(q.serveMax, int(now.Sub(q.serveFrom)/q.serveEvery)+1); q.served < want && len(q.queue) > 1; q.served++ {
			q.queue = q.queue[1:]
		}
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
		it := q.item()
		q.getPlaces = append(q.getPlaces, len(q.queue)-1)
		return &dynamodb.GetItemOutput{Item: it}, nil
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
// stays held and whose queue does not move, a waiter makes two writes
// (its first attempt and its join) and reads at the tier of its place
// (PlacePollInterval), after a few faster reads while it takes the queue
// as moving: the head every LoneHeadPollInterval (it waits alone here),
// the second every NextPollInterval, the third every ThirdPollInterval,
// the others every QueuePollInterval; on a store that returns no old
// item, one consistent read before the join.
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

// harmonic returns H(k) = 1 + 1/2 + … + 1/k (0 for k < 1).
func harmonic(k int) float64 {
	h := 0.0
	for i := 1; i <= k; i++ {
		h += 1 / float64(i)
	}
	return h
}

// TestQueueReadBoundBatch: a read/write lock's readers ahead of its first
// queued writer may each take a slot as the head does (rwTarget.front), so
// each reads at the head's pace; summed over the places at the fastest pace
// PaceInterval allows, as waitFair schedules them by front, the reads of
// n waiters whose first b are readers stay within QueueReadBoundBatch(n, b)
// and reach it, which is 62.5 × b + 62.5 × (H(n − 1) − H(b − 1)) below 64
// waiters; a writer's front is its head alone (QueueReadBound).
func TestQueueReadBoundBatch(t *testing.T) {
	t.Parallel()
	paces := []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond, time.Second}
	perSec := func(d time.Duration) float64 { return float64(time.Second) / float64(d) }
	for n := 1; n <= MaxQueue; n++ {
		for b := 0; b <= n; b++ {
			// b readers, then a writer (when b < n), then readers and
			// writers alternating: only the first b are the head's batch.
			v := &view{}
			for i := range n {
				v.queue = append(v.queue, entry{writer: i == b || i > b && i%2 == 0})
			}
			fastest := 0.0
			for i := range n {
				mode := Read
				if v.queue[i].writer {
					mode = Write
				}
				place := i
				if (&rwTarget{req: RWAcquireRequest{Mode: mode}}).front(v, i) {
					place = 0 // waitFair: the head's cadence
				}
				shortest := PaceInterval(place, n, paces[0])
				for _, d := range paces {
					shortest = min(shortest, PaceInterval(place, n, d))
				}
				fastest += perSec(shortest)
			}
			batch := max(b, 1) // the head reads at its pace, a writer too
			bound := QueueReadBoundBatch(n, batch)
			if fastest > bound+1e-9 || fastest < bound-1e-9 {
				t.Errorf("%d queued, %d readers first: fastest reads %.2f a second, want QueueReadBoundBatch %.2f", n, b, fastest, bound)
			}
			if n < 64 {
				want := 62.5*float64(batch) + 62.5*(harmonic(n-1)-harmonic(batch-1))
				if bound < want-1e-9 || bound > want+1e-9 {
					t.Errorf("QueueReadBoundBatch(%d, %d) = %.2f, want 62.5 × b + 62.5 × (H(n−1) − H(b−1)) = %.2f", n, batch, bound, want)
				}
			}
		}
	}
	for _, c := range []struct {
		n, b int
		want float64
	}{{16, 1, 269.9}, {16, 16, 1000}, {16, 8, 545.3}, {64, 64, 4000}} {
		if got := QueueReadBoundBatch(c.n, c.b); got < c.want-0.05 || got > c.want+0.05 {
			t.Errorf("QueueReadBoundBatch(%d, %d) = %.2f, want %.1f as docs/design.md states", c.n, c.b, got, c.want)
		}
	}
}

// TestQueueReadBound: the reads a waited-on item costs a second, summed
// over the places of its waiters at the fastest pace PaceInterval allows
// (over a range of paces, the unknown one included), stay within the
// stated bound 62.5 × (1 + H(N − 1)) for 1 to 63 waiters, plus 1 for each
// one beyond, and reach it; QueueReadBound says the same, with the values
// docs/design.md states. A queue that does not move costs its tiers,
// 40 + (N − 1) at most; the second reads often enough to notice its
// promotion within 1.5 × NextPollInterval: 300 ms, within a hold of half
// a second.
func TestQueueReadBound(t *testing.T) {
	t.Parallel()
	paces := []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 40 * time.Millisecond,
		100 * time.Millisecond, 333 * time.Millisecond, time.Second, time.Minute}
	perSec := func(d time.Duration) float64 { return float64(time.Second) / float64(d) }
	for n := 1; n <= MaxQueue+8; n++ {
		fastest, still := 0.0, 0.0
		for i := range n {
			if i >= MaxQueue {
				fastest += perSec(QueuePollInterval) // no place
				still += perSec(QueuePollInterval)
				continue
			}
			shortest := PaceInterval(i, n, paces[0])
			for _, d := range paces {
				shortest = min(shortest, PaceInterval(i, n, d))
			}
			fastest += perSec(shortest)
			still += perSec(PaceInterval(i, n, time.Hour))
		}
		bound := 62.5*(1+harmonic(min(n, 63)-1)) + float64(max(n-63, 0))
		if fastest > bound+1e-9 || fastest < bound-1e-9 {
			t.Errorf("%d waiters read at most %.2f times a second, want the stated bound %.2f", n, fastest, bound)
		}
		if got := QueueReadBound(n); got < bound-1e-9 || got > bound+1e-9 {
			t.Errorf("QueueReadBound(%d) = %.2f, want %.2f", n, got, bound)
		}
		if slow := 40 + float64(n-1); still > slow+1e-9 {
			t.Errorf("%d waiters of a queue that does not move read %.1f times a second, over %.0f", n, still, slow)
		}
	}
	for n, want := range map[int]float64{1: 62.5, 4: 177.1, 16: 269.9, 64: 358.0} {
		if got := QueueReadBound(n); got < want-0.05 || got > want+0.05 {
			t.Errorf("QueueReadBound(%d) = %.2f, want %.1f as docs/design.md states", n, got, want)
		}
	}
	for _, d := range paces {
		if got := PaceInterval(1, 2, d); got*3/2 > 300*time.Millisecond {
			t.Errorf("the second in line, queue pace %s, may read %s apart, want at most 300 ms", d, got*3/2)
		}
	}
	if !(LoneHeadPollInterval <= HeadPollInterval && HeadPollInterval < NextPollInterval && NextPollInterval < ThirdPollInterval && ThirdPollInterval < QueuePollInterval) {
		t.Error("the tiers must slow down with the place")
	}
}

// TestFairWaitFollowsFastQueue: a waiter that joins at place 15 of a
// queue serving one place every 40 ms (as a hot lock does) reads more
// often as it moves up, so it reads within 40 ms of becoming the head —
// the lock never waits for it longer than a handoff takes — with fewer
// reads on its way than places it moved up; at the tiers (1 s behind the
// third place) it would learn of it up to 1.5 s late. Locks and
// semaphores share the queue.
func TestFairWaitFollowsFastQueue(t *testing.T) {
	t.Parallel()
	const ahead, every = 15, 40 * time.Millisecond
	for _, tc := range []struct {
		name    string
		sem     bool
		oldItem bool
	}{
		{"Lock", false, true},
		{"LockDynalite", false, false},
		{"Semaphore", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			start := t0.Add(100 * time.Millisecond)
			st := &queueStore{clock: clock, oldItem: tc.oldItem, sem: tc.sem, queue: others(ahead),
				serveFrom: start, serveEvery: every, serveMax: ahead}
			svc := newWaitService(st.db(), clock, Config{OldItemOnFailure: tc.oldItem, FairWaiting: true})
			if tc.sem {
				_, _ = svc.AcquireSemaphore(context.Background(), SemaphoreAcquireRequest{Name: "s", Caller: Caller{Owner: "w2"},
					TTLSeconds: 30, Permits: 1, WaitSeconds: 3}, Budget{})
			} else {
				_, _ = svc.AcquireWait(context.Background(), waitReq(3), Budget{})
			}
			promoted := start.Add((ahead - 1) * every)
			var before int
			first := time.Time{}
			for k, at := range st.getTimes {
				if at.Before(promoted) {
					before++
				} else if first.IsZero() && st.getPlaces[k] == 0 {
					first = at
				}
			}
			t.Logf("%d reads on the way from place %d to the head, the first as the head %s after its promotion; places read at: %v",
				before, ahead, first.Sub(promoted), st.getPlaces[:min(len(st.getPlaces), before+2)])
			if first.IsZero() || first.Sub(promoted) > every {
				t.Errorf("the waiter read as the head %s after it became the head, want within %s", first.Sub(promoted), every)
			}
			if before >= ahead {
				t.Errorf("%d reads on the way up %d places, want fewer than one a place", before, ahead)
			}
		})
	}
}

// TestFairWaitStalledQueue: a waiter whose queue moved fast and then
// stopped (the holder keeps the lock) slows down to the tier of its place
// within a second: from a second after the queue's last move to the end
// of its round (8.7 s), the third in line reads about every
// ThirdPollInterval, as in a queue that never moved. (The pauses are
// jittered uniformly over ±50 %: over ~29 reads the rate's spread is
// ~0.2 a second, so the ±20 % bound below is 3.7 spreads wide.)
func TestFairWaitStalledQueue(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &queueStore{clock: clock, oldItem: true, queue: others(10),
		serveFrom: t0.Add(50 * time.Millisecond), serveEvery: 30 * time.Millisecond, serveMax: 8}
	svc := newWaitService(st.db(), clock, Config{OldItemOnFailure: true, FairWaiting: true})
	_, _ = svc.AcquireWait(context.Background(), waitReq(10), Budget{})
	lastMove := st.serveFrom.Add(st.serveEvery * time.Duration(st.serveMax-1))
	from := lastMove.Add(time.Second)
	window := clock.Now().Sub(from)
	late := 0
	for k, at := range st.getTimes {
		if !at.Before(from) {
			late++
			if st.getPlaces[k] != 2 {
				t.Fatalf("read at place %d, want 2 (8 of 10 ahead served)", st.getPlaces[k])
			}
		}
	}
	perSec := float64(late) / window.Seconds()
	t.Logf("%d reads in all, %.2f a second over the last %s", len(st.getTimes), perSec, window)
	if want := float64(time.Second) / float64(ThirdPollInterval); perSec < 0.8*want || perSec > 1.25*want {
		t.Errorf("the stalled third in line reads %.1f times a second, want about %.1f (its tier)", perSec, want)
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
// changing) is tried again after a random pause that doubles with each
// refusal up to a mean of QueuePollInterval: the waiter keeps trying for
// a place all round (waiters that arrive at once spread out and all get
// one), writing about once a second at most.
func TestFairWaitJoinRefused(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &queueStore{clock: clock, oldItem: true, refuseJoins: true, queue: others(1)}
	db := st.db()
	res, err := newWaitService(db, clock, Config{OldItemOnFailure: true, FairWaiting: true}).AcquireWait(context.Background(), waitReq(20), Budget{})
	if err != nil || res.Acquired || res.QueueTicket != "" {
		t.Fatalf("got %+v, %v; want held without a place", res, err)
	}
	joins := 0
	var last time.Time
	for _, u := range db.Updates() {
		if strings.Contains(*u.UpdateExpression, "list_append") {
			joins++
		}
	}
	if len(st.getTimes) > 0 {
		last = st.getTimes[len(st.getTimes)-1]
	}
	t.Logf("%d joins in a 20 s round, the last read at %s", joins, last.Sub(t0))
	if joins < 12 || joins > 40 {
		t.Errorf("got %d joins in a 20 s round, want a join about every second once the pause has grown (12 to 40)", joins)
	}
	if last.Sub(t0) < 15*time.Second {
		t.Errorf("the waiter's last read at %s, want it to keep trying all round", last.Sub(t0))
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
		if i, _ := v.find(tc.tickets, tc.c, false, nowMs); i != tc.want {
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

// TestFairWaitJoinUnknownOutcome: a join that lands but is answered 500
// leaves the wait no view that shows it. The leave reads the item, whatever
// the request's cancellation, and removes the entry it finds (ReadLeaves);
// when that read fails too, the error carries the join's ticket
// (*QueueTicketError), so that the next round reclaims the place rather
// than queueing behind its own ghost (ReadFails).
func TestFairWaitJoinUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, readFails := range []bool{false, true} {
		name := "ReadLeaves"
		if readFails {
			name = "ReadFails"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			st := &queueStore{clock: clock, queue: others(1)}
			fake := st.db()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			update, get := fake.Update, fake.Get
			var joined string
			fake.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				u := *in.UpdateExpression
				switch {
				case strings.Contains(u, "list_append"):
					if _, err := update(in); err != nil {
						return nil, err
					}
					joined = in.ExpressionAttributeValues[":qe"].(*types.AttributeValueMemberL).Value[0].(*types.AttributeValueMemberM).Value[entryID].(*types.AttributeValueMemberS).Value
					cancel() // the request is cancelled, too
					return nil, &smithy.GenericAPIError{Code: "InternalServerError", Message: "applied, then 500"}
				case strings.HasPrefix(u, "REMOVE #q["):
					st.mu.Lock()
					defer st.mu.Unlock()
					tk := in.ExpressionAttributeValues[":tk"].(*types.AttributeValueMemberS).Value
					st.queue = slices.DeleteFunc(st.queue, func(e map[string]types.AttributeValue) bool {
						return e[entryID].(*types.AttributeValueMemberS).Value == tk
					})
					return &dynamodb.UpdateItemOutput{Attributes: st.item()}, nil
				}
				return update(in)
			}
			fake.Get = func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				if joined != "" && readFails {
					return nil, &smithy.GenericAPIError{Code: "InternalServerError", Message: "read failed"}
				}
				return get(in)
			}
			_, err := newWaitService(fake, clock, Config{FairWaiting: true}).AcquireWait(ctx, waitReq(10), Budget{})
			if !errors.Is(err, ErrUnavailable) || joined == "" {
				t.Fatalf("got %v (joined %q), want ErrUnavailable after a join", err, joined)
			}
			var qt *QueueTicketError
			switch {
			case readFails && (!errors.As(err, &qt) || qt.Ticket != joined):
				t.Errorf("got %v, want a *QueueTicketError with the join's ticket %q", err, joined)
			case !readFails && errors.As(err, &qt):
				t.Errorf("got %v, want no ticket: the leave removed the place", err)
			}
			left := len(st.queue) == 1
			if left == readFails {
				t.Errorf("queue after the answer: %d entries, want %d", len(st.queue), map[bool]int{false: 1, true: 2}[readFails])
			}
		})
	}
}

// TestFairWaitExtendInvalidPath: a round that moves its place's until
// (SET #q[i].until) after a grant shortened the queue may meet DynamoDB's
// ValidationException for the index that is gone, rather than the failed
// condition dynalite answers. It is the same news, a stale view: the
// waiter reads the item again and moves its place where it now is.
func TestFairWaitExtendInvalidPath(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	place := map[string]types.AttributeValue{entryID: &types.AttributeValueMemberS{Value: "mine"},
		AttrOwner: &types.AttributeValueMemberS{Value: "w2"}, entryUntil: num(t0.Add(500 * time.Millisecond).UnixMilli())}
	st := &queueStore{clock: clock, oldItem: true, queue: append(others(1), place)}
	db := st.db()
	update := db.Update
	var paths []string
	db.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		u := *in.UpdateExpression
		if strings.HasPrefix(u, "SET #q[") {
			paths = append(paths, u[:len("SET #q[0]")])
			if strings.HasPrefix(u, "SET #q[1]") {
				st.mu.Lock()
				st.queue = st.queue[1:] // the head was served meanwhile
				st.mu.Unlock()
				return nil, &smithy.GenericAPIError{Code: "ValidationException",
					Message: "The document path provided in the update expression is invalid for update"}
			}
		}
		return update(in)
	}
	req := waitReq(3)
	req.QueueTicket = "mine"
	res, err := newWaitService(db, clock, Config{OldItemOnFailure: true, FairWaiting: true}).AcquireWait(context.Background(), req, Budget{})
	if err != nil || res.Acquired || res.QueueTicket != "mine" {
		t.Fatalf("got %+v, %v; want held, the place kept", res, err)
	}
	if want := []string{"SET #q[1]", "SET #q[0]"}; !slices.Equal(paths, want) {
		t.Errorf("the keeps' paths: got %v, want %v (refused at the old index, then moved where the place now is)", paths, want)
	}
	if u := mustN(t, st.queue[0], entryUntil); u <= t0.Add(500*time.Millisecond).UnixMilli() {
		t.Errorf("the place's until is %s, want it moved to this round's end + QueueGrace", time.UnixMilli(u).Sub(t0))
	}
}
