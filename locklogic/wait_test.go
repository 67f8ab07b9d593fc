package locklogic

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// fakeClock is a service clock that moves only when the service sleeps, so
// a 20 s wait runs in microseconds.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(max(d, 0))
	return nil
}

// waitStore is a lock item that a test scripts over the fake clock: held by
// "holder" until releaseAt (if set), with the lease ending at exp; writes
// succeed once the lock is free by the clock. It answers a failed write
// with the old item only when oldItem is set (DynamoDB), not (dynalite).
type waitStore struct {
	clock     *fakeClock
	exp       time.Time
	freeAt    time.Time // the lease's free_at (lock-delay), if set
	releaseAt time.Time
	oldItem   bool
	getErr    error // every read fails with it when set
	writeErr  error // writes after the first fail with it when set

	grantedAt time.Time
}

func (w *waitStore) free(now time.Time) bool {
	return (!now.Before(w.exp) && !now.Before(w.freeAt)) || (!w.releaseAt.IsZero() && !now.Before(w.releaseAt))
}

func (w *waitStore) item(now time.Time) map[string]types.AttributeValue {
	it := item("holder", "", 7, w.exp)
	if !w.freeAt.IsZero() {
		it[AttrFreeAt] = num(w.freeAt.UnixMilli())
		it[AttrLockDelay] = num(w.freeAt.Sub(w.exp).Milliseconds())
	}
	if !w.releaseAt.IsZero() && !now.Before(w.releaseAt) {
		it[AttrReleasedAt] = num(w.releaseAt.UnixMilli())
	}
	return it
}

func (w *waitStore) db() *dynamofake.DB {
	db := &dynamofake.DB{}
	db.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		now := w.clock.Now()
		if w.writeErr != nil && len(db.Updates()) > 1 {
			return nil, w.writeErr
		}
		if !w.free(now) {
			var old map[string]types.AttributeValue
			if w.oldItem {
				old = w.item(now)
			}
			return nil, ccf(old)
		}
		w.grantedAt = now
		v := in.ExpressionAttributeValues
		return &dynamodb.UpdateItemOutput{Attributes: map[string]types.AttributeValue{
			AttrResource: &types.AttributeValueMemberS{Value: "r"}, AttrOwner: v[":o"], AttrToken: num(8),
			AttrAcquiredAt: v[":now"], AttrExpiresAt: v[":exp"],
		}}, nil
	}
	db.Get = func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
		if w.getErr != nil {
			return nil, w.getErr
		}
		if in.ConsistentRead != nil && *in.ConsistentRead {
			return nil, errors.New("a waiter's read must be eventually consistent")
		}
		return &dynamodb.GetItemOutput{Item: w.item(w.clock.Now())}, nil
	}
	return db
}

func newWaitService(db DynamoDBAPI, clock *fakeClock, cfg Config) *Service {
	cfg.Table, cfg.Now, cfg.Sleep = "t", clock.Now, clock.Sleep
	return New(db, cfg)
}

func waitReq(wait int64) AcquireRequest {
	return AcquireRequest{Resource: "r", Caller: Caller{Owner: "w2"}, TTLSeconds: 30, WaitSeconds: wait}
}

// TestAcquireWait covers how a wait ends, on a clock that only the wait
// moves: granted after a release or at the holder's expiry, or held when
// the wait or the deadline runs out.
func TestAcquireWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		wait      int64
		exp       time.Duration // the holder's lease ends at t0+exp
		freeAt    time.Duration // with a lock-delay: free for others at t0+freeAt (0: at exp)
		release   time.Duration // the holder releases at t0+release (0: never)
		oldItem   bool
		deadline  time.Duration // the request context's deadline, real time from now (0: none)
		budget    Budget
		wantAcq   bool
		wantAt    [2]time.Duration // returns within [from, to] after t0 on the service clock
		wantHeld  time.Duration    // held answers: the holder expiry reported (0: none)
		maxWrites int
	}{
		{
			name: "GrantedAfterRelease", wait: 10, exp: 30 * time.Second, release: 2 * time.Second,
			// The first read after the release sees it: 150 ms at most.
			wantAcq: true, wantAt: [2]time.Duration{2 * time.Second, 2*time.Second + 150*time.Millisecond}, maxWrites: 2,
		},
		{
			name: "GrantedAtExpiryFromOldItem", wait: 10, exp: 3 * time.Second, oldItem: true,
			wantAcq: true, wantAt: [2]time.Duration{3 * time.Second, 3 * time.Second}, maxWrites: 2,
		},
		{
			// dynalite: no old item, but the first read tells the expiry.
			name: "GrantedAtExpiryFromRead", wait: 10, exp: 3 * time.Second,
			wantAcq: true, wantAt: [2]time.Duration{3 * time.Second, 3 * time.Second}, maxWrites: 2,
		},
		{
			// A lease with a lock-delay: the waiter wakes at free_at, not
			// at the lease's expiry.
			name: "GrantedAtFreeAtFromOldItem", wait: 10, exp: 2 * time.Second, freeAt: 5 * time.Second, oldItem: true,
			wantAcq: true, wantAt: [2]time.Duration{5 * time.Second, 5 * time.Second}, maxWrites: 2,
		},
		{
			name: "GrantedAtFreeAtFromRead", wait: 10, exp: 2 * time.Second, freeAt: 5 * time.Second,
			wantAcq: true, wantAt: [2]time.Duration{5 * time.Second, 5 * time.Second}, maxWrites: 2,
		},
		{
			// Expired already, but in its lock-delay: held, and the
			// expiry reported is when the lock comes free.
			name: "RunsOutInLockDelay", wait: 3, exp: time.Second, freeAt: 30 * time.Second, oldItem: true,
			wantAt:   [2]time.Duration{3*time.Second - GrantGuard, 3*time.Second - GrantGuard},
			wantHeld: 30 * time.Second, maxWrites: 1,
		},
		{
			// dynalite: the answer carries no expiry, as for one attempt.
			name: "RunsOut", wait: 2, exp: 30 * time.Second,
			wantAt:    [2]time.Duration{2*time.Second - GrantGuard, 2*time.Second - GrantGuard},
			maxWrites: 1,
		},
		{
			name: "RunsOutOldItem", wait: 2, exp: 30 * time.Second, oldItem: true,
			wantAt:   [2]time.Duration{2*time.Second - GrantGuard, 2*time.Second - GrantGuard},
			wantHeld: 30 * time.Second, maxWrites: 1,
		},
		{
			name: "RunsOutJustBeforeExpiry", wait: 3, exp: 3 * time.Second, oldItem: true,
			wantAt:   [2]time.Duration{3*time.Second - GrantGuard, 3*time.Second - GrantGuard},
			wantHeld: 3 * time.Second, maxWrites: 1,
		},
		{
			// The invocation ends in 2 s: the wait stops early enough for
			// its last write to have its whole budget before the reserve.
			name: "DeadlineEndsWait", wait: 20, exp: 30 * time.Second, oldItem: true, deadline: 2 * time.Second,
			budget: Budget{PerCall: 500 * time.Millisecond, Reserve: 300 * time.Millisecond},
			wantAt: [2]time.Duration{1100 * time.Millisecond, 1200 * time.Millisecond}, wantHeld: 30 * time.Second, maxWrites: 1,
		},
		{
			name: "DeadlineLeavesNoTime", wait: 20, exp: 30 * time.Second, deadline: 700 * time.Millisecond,
			budget: Budget{PerCall: 500 * time.Millisecond, Reserve: 300 * time.Millisecond},
			// No read was made, and dynalite sent no old item: no expiry.
			wantAt: [2]time.Duration{0, 0}, maxWrites: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			st := &waitStore{clock: clock, exp: t0.Add(tt.exp), oldItem: tt.oldItem}
			if tt.freeAt > 0 {
				st.freeAt = t0.Add(tt.freeAt)
			}
			if tt.release > 0 {
				st.releaseAt = t0.Add(tt.release)
			}
			db := st.db()
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			res, err := newWaitService(db, clock, Config{OldItemOnFailure: tt.oldItem}).AcquireWait(ctx, waitReq(tt.wait), tt.budget)
			if err != nil {
				t.Fatalf("AcquireWait: %v", err)
			}
			if res.Acquired != tt.wantAcq {
				t.Fatalf("got acquired %v, want %v", res.Acquired, tt.wantAcq)
			}
			took := clock.Now().Sub(t0)
			if took < tt.wantAt[0] || took > tt.wantAt[1] {
				t.Errorf("returned %s after the start, want within %v", took, tt.wantAt)
			}
			if res.Waited != took {
				t.Errorf("got Waited %s, want the whole wait %s (the first attempt takes no clock time)", res.Waited, took)
			}
			if tt.wantAcq && !st.grantedAt.Equal(clock.Now()) {
				t.Errorf("granted at %s, want at the end of the wait %s", st.grantedAt.Sub(t0), took)
			}
			if !tt.wantAcq {
				want := time.Time{}
				if tt.wantHeld > 0 {
					want = t0.Add(tt.wantHeld)
				}
				if !res.HolderExpiresAt.Equal(want) {
					t.Errorf("holder expiry: got %v, want %v", res.HolderExpiresAt, want)
				}
			}
			if n := len(db.Updates()); n < 1 || n > tt.maxWrites {
				t.Errorf("got %d writes, want 1 to %d", n, tt.maxWrites)
			}
		})
	}
}

// TestAcquireWaitLoad: a waiter reads the item about once per PollInterval,
// and writes only when the lock looks free, so the load of one waiter is
// bounded (about 10 half-unit reads a second, no writes while held).
func TestAcquireWaitLoad(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &waitStore{clock: clock, exp: t0.Add(time.Hour)}
	db := st.db()
	res, err := newWaitService(db, clock, Config{}).AcquireWait(context.Background(), waitReq(20), Budget{})
	if err != nil || res.Acquired {
		t.Fatalf("got %+v, %v; want held", res, err)
	}
	waited := clock.Now().Sub(t0).Seconds()
	perSecond := float64(db.Gets()) / waited
	if perSecond < 8 || perSecond > 12 {
		t.Errorf("got %d reads in %.1f s (%.1f/s), want about %v/s", db.Gets(), waited, perSecond, float64(time.Second/PollInterval))
	}
	if n := len(db.Updates()); n != 1 {
		t.Errorf("got %d writes, want 1 (the first attempt) while the lock stays held", n)
	}
}

// TestAcquireWaitReadFailures: reads are hints. A throttled or failed read
// only slows the watch down (up to MaxPollInterval); a store that refuses
// reads for good (no table, no permission) is an error, not a silent wait.
func TestAcquireWaitReadFailures(t *testing.T) {
	t.Parallel()
	throttled := &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "slow down"}
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "no dynamodb:GetItem"}
	t.Run("Throttled", func(t *testing.T) {
		t.Parallel()
		clock := &fakeClock{t: t0}
		st := &waitStore{clock: clock, exp: t0.Add(time.Hour), getErr: throttled}
		db := st.db()
		res, err := newWaitService(db, clock, Config{}).AcquireWait(context.Background(), waitReq(20), Budget{})
		if err != nil || res.Acquired {
			t.Fatalf("got %+v, %v; want held and no error", res, err)
		}
		// 100, 200, 400, 800 ms, then 1 s (±50 %): about 20 reads in 19.5 s.
		if n := db.Gets(); n < 14 || n > 40 {
			t.Errorf("got %d failing reads in 19.5 s, want them backed off to about one a second", n)
		}
	})
	t.Run("AccessDenied", func(t *testing.T) {
		t.Parallel()
		clock := &fakeClock{t: t0}
		st := &waitStore{clock: clock, exp: t0.Add(time.Hour), getErr: denied}
		_, err := newWaitService(st.db(), clock, Config{}).AcquireWait(context.Background(), waitReq(20), Budget{})
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want a store error that is not ErrUnavailable (a 500: misconfiguration)", err)
		}
	})
	t.Run("WriteThrottled", func(t *testing.T) {
		t.Parallel()
		clock := &fakeClock{t: t0}
		st := &waitStore{clock: clock, exp: t0.Add(time.Hour), releaseAt: t0.Add(time.Second), writeErr: throttled}
		_, err := newWaitService(st.db(), clock, Config{}).AcquireWait(context.Background(), waitReq(20), Budget{})
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want ErrUnavailable: the outcome of the write is unknown", err)
		}
	})
}

// TestAcquireWaitStillClock: a service clock that never moves (a test's
// frozen clock) cannot make a wait last for ever: the real clock ends it.
func TestAcquireWaitStillClock(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &waitStore{clock: clock, exp: t0.Add(time.Hour)}
	svc := New(st.db(), Config{Table: "t", Now: clock.Now})
	start := time.Now()
	res, err := svc.AcquireWait(context.Background(), waitReq(1), Budget{})
	if err != nil || res.Acquired {
		t.Fatalf("got %+v, %v; want held", res, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s, want about %s", took, time.Second-GrantGuard)
	}
}

func TestValidateWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		maxWait int64 // Config.MaxWaitSeconds
		wait    int64
		wantErr bool
	}{
		{"Zero", 0, 0, false},
		{"DefaultMax", 0, 20, false},
		{"OverDefault", 0, 21, true},
		{"Negative", 0, -1, true},
		{"ConfiguredLower", 5, 6, true},
		{"ConfiguredAboveLimit", 60, 21, true},
		{"OffAllowsZero", -1, 0, false},
		{"OffRefusesWait", -1, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A free lock: a valid request is granted at once.
			db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return &dynamodb.UpdateItemOutput{Attributes: item("w2", "", 8, t0.Add(30*time.Second))}, nil
			}}
			svc := New(db, Config{Table: "t", Now: func() time.Time { return t0 }, MaxWaitSeconds: tt.maxWait})
			_, err := svc.Acquire(context.Background(), waitReq(tt.wait))
			var verr *ValidationError
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if !errors.As(err, &verr) || len(verr.Fields) != 1 || verr.Fields[0].Field != "wait_seconds" {
				t.Fatalf("got %v, want one validation error on wait_seconds", err)
			}
			if len(db.Updates()) != 0 {
				t.Errorf("an invalid request reached the store")
			}
		})
	}
}

// TestWaitGrantGuard: no grant write starts in the last GrantGuard of
// wait_seconds counted from the request's arrival, whatever slowed the
// wait: a cold start before the first write (Arrived in the past), a slow
// first write, a read that returns after the guard began with the lock
// free. Each write's start time on the service clock is recorded.
func TestWaitGrantGuard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		arrived   time.Duration // before t0, when the request reached the service
		wait      int64
		slowWrite time.Duration // the first write takes this long
		slowRead  time.Duration // every read takes this long, then sees the lock free
		wantErr   error
		wantWrite int
	}{
		// 1.6 s of a 2 s wait went before the handler ran: no time to try.
		{name: "ArrivedTooLate", arrived: 1600 * time.Millisecond, wait: 2, wantErr: ErrWaitElapsed},
		// The first write took 1.45 s of 2 s: the guard starts at 1.5 s,
		// the next read cannot come back before it.
		{name: "SlowFirstWrite", wait: 2, slowWrite: 1450 * time.Millisecond, slowRead: 100 * time.Millisecond, wantWrite: 1},
		// A read that began before the guard and finds the lock free after
		// it starts: no write.
		{name: "SlowLastRead", wait: 2, slowRead: 1500 * time.Millisecond, wantWrite: 1},
		// A cold start of 1 s out of 3: the guard is at 2.5 s from
		// arrival, 1.5 s into the handler's clock; reads of 0.7 s each.
		{name: "ColdStartThenSlowReads", arrived: time.Second, wait: 3, slowRead: 700 * time.Millisecond, wantWrite: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			var starts []time.Time
			db := &dynamofake.DB{}
			db.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				starts = append(starts, clock.Now())
				if len(starts) == 1 {
					clock.Sleep(context.Background(), tc.slowWrite)
					return nil, ccf(nil) // held (dynalite: no old item)
				}
				v := in.ExpressionAttributeValues
				return &dynamodb.UpdateItemOutput{Attributes: map[string]types.AttributeValue{
					AttrResource: &types.AttributeValueMemberS{Value: "r"}, AttrOwner: v[":o"], AttrToken: num(8),
					AttrAcquiredAt: v[":now"], AttrExpiresAt: v[":exp"],
				}}, nil
			}
			db.Get = func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				clock.Sleep(context.Background(), tc.slowRead)
				return &dynamodb.GetItemOutput{}, nil // free
			}
			req := waitReq(tc.wait)
			req.Arrived = t0.Add(-tc.arrived)
			_, err := newWaitService(db, clock, Config{}).AcquireWait(context.Background(), req, Budget{})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			guard := req.Arrived.Add(time.Duration(tc.wait)*time.Second - GrantGuard)
			for i, at := range starts {
				if !at.Before(guard) {
					t.Errorf("write %d started %s after arrival, in the last %s of the wait", i+1, at.Sub(req.Arrived), GrantGuard)
				}
			}
			if len(starts) != tc.wantWrite {
				t.Errorf("got %d writes, want %d", len(starts), tc.wantWrite)
			}
		})
	}
}

// TestWaitWritesAsOfIssue: every write of a wait carries the request's issue
// time for the same-owner branch (:iss), however late it comes, while :now
// moves with the clock: a wait cannot replace a lease its own owner was
// granted after the wait was issued (local.TestWaitCannotReplaceNewerSameOwnerLease
// shows it on dynalite).
func TestWaitWritesAsOfIssue(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &waitStore{clock: clock, exp: t0.Add(30 * time.Second), releaseAt: t0.Add(3 * time.Second)}
	db := st.db()
	req := waitReq(10)
	req.Arrived = t0.Add(-200 * time.Millisecond)
	res, err := newWaitService(db, clock, Config{}).AcquireWait(context.Background(), req, Budget{})
	if err != nil || !res.Acquired {
		t.Fatalf("got %+v, %v; want a grant after the release", res, err)
	}
	ups := db.Updates()
	if len(ups) < 2 {
		t.Fatalf("got %d writes, want the first and the grant", len(ups))
	}
	for i, in := range ups {
		v := in.ExpressionAttributeValues
		if got, want := v[":iss"].(*types.AttributeValueMemberN).Value, num(req.Arrived.UnixMilli()).Value; got != want {
			t.Errorf("write %d: :iss %s, want the arrival %s", i+1, got, want)
		}
	}
	last := ups[len(ups)-1].ExpressionAttributeValues[":now"].(*types.AttributeValueMemberN).Value
	if last == num(req.Arrived.UnixMilli()).Value {
		t.Errorf("the grant's :now is the arrival time; want the time of the write (expiry is judged then)")
	}
}
