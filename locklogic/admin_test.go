package locklogic

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// TestLockDelayOutcomes: a granted lease reports the lock-delay and free_at
// the store returned; a refused acquire reports when the lock comes free,
// lock-delay included (the old item DynamoDB returns with the failed
// condition). What the writes store is tested against dynalite
// (internal/integration TestStoredLockDelay, TestLockDelay).
func TestLockDelayOutcomes(t *testing.T) {
	t.Parallel()
	db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		it := item("w1", "", 7, t0.Add(30*time.Second))
		it[AttrLockDelay] = num(10000)
		return &dynamodb.UpdateItemOutput{Attributes: it}, nil
	}}
	s := newTestService(db)
	ctx := context.Background()
	res, err := s.Acquire(ctx, AcquireRequest{Resource: "r", Caller: Caller{Owner: "w1"}, TTLSeconds: 30, LockDelaySeconds: 10})
	if err != nil || res.Lock.LockDelay != 10*time.Second || !res.Lock.FreeAt().Equal(t0.Add(40*time.Second)) {
		t.Fatalf("got %+v, %v; want the lease with its 10 s lock-delay", res, err)
	}

	// Refused, by a lease that expired 1 s ago and is free in 9 s.
	db.Update = func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		it := item("w1", "", 7, t0.Add(-time.Second))
		it[AttrFreeAt] = num(t0.Add(9 * time.Second).UnixMilli())
		return nil, ccf(it)
	}
	res, err = s.Acquire(ctx, AcquireRequest{Resource: "r", Caller: Caller{Owner: "w2"}, TTLSeconds: 30})
	if err != nil || res.Acquired || !res.HolderExpiresAt.Equal(t0.Add(9*time.Second)) {
		t.Errorf("got %+v, %v; want held until free_at", res, err)
	}
}

// TestBlockedUntil: whether an item keeps others out, and until when, as
// the acquire condition decides it.
func TestBlockedUntil(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name        string
		exp, free   time.Duration
		noFree      bool
		released    bool
		want        time.Time
		wantBlocked bool
	}{
		{name: "Live", exp: time.Second, noFree: true, want: at(time.Second), wantBlocked: true},
		{name: "LiveWithDelay", exp: time.Second, free: 5 * time.Second, want: at(5 * time.Second), wantBlocked: true},
		{name: "InLockDelay", exp: -time.Second, free: 5 * time.Second, want: at(5 * time.Second), wantBlocked: true},
		{name: "DelayOver", exp: -5 * time.Second, free: -time.Second},
		{name: "ExpiredNoFreeAt", exp: -time.Second, noFree: true},
		{name: "Released", exp: time.Second, free: 5 * time.Second, released: true},
		{name: "StaleFreeAt", exp: time.Second, free: -time.Minute, want: at(time.Second), wantBlocked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := item("w1", "", 7, at(tc.exp))
			if !tc.noFree {
				it[AttrFreeAt] = num(at(tc.free).UnixMilli())
			}
			if tc.released {
				it[AttrReleasedAt] = num(t0.UnixMilli())
			}
			got, blocked := blockedUntil(it, t0)
			if blocked != tc.wantBlocked || !got.Equal(tc.want) {
				t.Errorf("got %v, %v; want %v, %v", got, blocked, tc.want, tc.wantBlocked)
			}
		})
	}
}

// TestValidateLockDelay: 0 to the maximum; only 0 when lock-delay is off.
func TestValidateLockDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		delay, max int64
		ok         bool
	}{{0, 300, true}, {300, 300, true}, {301, 300, false}, {-1, 300, false}, {0, -1, true}, {1, -1, false}} {
		var v ValidationError
		ValidateLockDelay(tc.delay, tc.max, &v)
		if (v.Err() == nil) != tc.ok {
			t.Errorf("delay %d, max %d: got %v, want ok %v", tc.delay, tc.max, v.Err(), tc.ok)
		}
	}
	s := New(&dynamofake.DB{}, Config{Table: "t"})
	if s.MaxLockDelaySeconds() != DefaultMaxLockDelaySeconds {
		t.Errorf("got max lock-delay %d, want the default %d", s.MaxLockDelaySeconds(), DefaultMaxLockDelaySeconds)
	}
	_, err := s.Acquire(context.Background(), AcquireRequest{Resource: "r", Caller: Caller{Owner: "w"}, TTLSeconds: 1, LockDelaySeconds: 301})
	var verr *ValidationError
	if !errors.As(err, &verr) || verr.Fields[0].Field != "lock_delay_seconds" {
		t.Errorf("got %v, want a validation error on lock_delay_seconds", err)
	}
}

// scanTable is a fake table for List: names in scan order, the live ones
// marked, served ScanPageItems at a time from ExclusiveStartKey on, with the
// filter applied as DynamoDB would (live and starting with :pre).
type scanTable struct {
	names []string
	live  map[string]bool
}

func (st *scanTable) scan(in *dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
	start := 0
	if k, ok := in.ExclusiveStartKey[AttrResource]; ok {
		after := k.(*types.AttributeValueMemberS).Value
		for i, n := range st.names {
			if n == after {
				start = i + 1
			}
		}
	}
	pre := ""
	if p, ok := in.ExpressionAttributeValues[":pre"]; ok {
		pre = p.(*types.AttributeValueMemberS).Value
	}
	end := min(start+int(*in.Limit), len(st.names))
	out := &dynamodb.ScanOutput{ScannedCount: int32(end - start)}
	for _, n := range st.names[start:end] {
		if st.live[n] && strings.HasPrefix(n, pre) {
			it := item("w-"+n, "", 1, t0.Add(time.Minute))
			it[AttrResource] = &types.AttributeValueMemberS{Value: n}
			out.Items = append(out.Items, it)
		}
	}
	if end < len(st.names) {
		out.LastEvaluatedKey = map[string]types.AttributeValue{AttrResource: &types.AttributeValueMemberS{Value: st.names[end-1]}}
	}
	out.Count = int32(len(out.Items))
	return out, nil
}

// TestList: pages of live leases across Scan pages, a cursor that resumes
// exactly after the last lock listed, and a stop after MaxScanPages.
func TestList(t *testing.T) {
	t.Parallel()
	st := &scanTable{live: map[string]bool{}}
	// 2.5 Scan pages; every 300th name is live, a tenth of them outside
	// the prefix.
	var want []string
	for i := range ScanPageItems*5/2 + 1 {
		name := "job-" + strconv.Itoa(i)
		if i%3000 == 1500 {
			name = "other-" + strconv.Itoa(i)
		}
		st.names = append(st.names, name)
		if i%300 == 0 || i%3000 == 1500 {
			st.live[name] = true
			if strings.HasPrefix(name, "job-") {
				want = append(want, name)
			}
		}
	}
	db := &dynamofake.DB{ScanFunc: st.scan}
	s := newTestService(db)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("no end after %d pages: %v", pages, got)
		}
		res, err := s.List(context.Background(), ListRequest{Prefix: "job-", Limit: 3, Cursor: cursor}, Budget{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Locks) > 3 {
			t.Fatalf("got %d locks, want at most the limit 3", len(res.Locks))
		}
		for _, l := range res.Locks {
			got = append(got, l.Resource)
		}
		if res.Cursor == "" {
			break
		}
		cursor = res.Cursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("got %v, want %v (each once, in scan order)", got, want)
	}
	// Which leases the filter keeps is tested against dynalite
	// (internal/integration TestAdminList, TestListWithoutPrefix).
	in := db.Scans()[0]
	if in.ConsistentRead != nil && *in.ConsistentRead {
		t.Errorf("a listing must read eventually consistent (half the cost)")
	}

	// A table of idle items only: one request reads MaxScanPages pages at
	// most and answers no lock with a cursor to go on.
	idle := &scanTable{live: map[string]bool{}}
	for i := range ScanPageItems * (MaxScanPages + 1) {
		idle.names = append(idle.names, "idle-"+strconv.Itoa(i))
	}
	db = &dynamofake.DB{ScanFunc: idle.scan}
	res, err := New(db, Config{Table: "t"}).List(context.Background(), ListRequest{}, Budget{})
	if err != nil || len(res.Locks) != 0 || res.Cursor == "" || len(db.Scans()) != MaxScanPages || res.Scanned != MaxScanPages*ScanPageItems {
		t.Errorf("got %+v, %v after %d scans; want no lock, a cursor, %d scans", res, err, len(db.Scans()), MaxScanPages)
	}
}

// TestListValidation: bad limits, prefixes and cursors never reach the
// store.
func TestListValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		req   ListRequest
		field string
	}{
		{"LimitTooLarge", ListRequest{Limit: MaxListLimit + 1}, "limit"},
		{"LimitNegative", ListRequest{Limit: -1}, "limit"},
		{"PrefixSlash", ListRequest{Prefix: "a/b"}, "prefix"},
		{"PrefixControl", ListRequest{Prefix: "a\x00"}, "prefix"},
		{"CursorNotBase64", ListRequest{Cursor: "!!"}, "cursor"},
		{"CursorNotAName", ListRequest{Cursor: encodeCursor("a/b")}, "cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{}
			_, err := newTestService(db).List(context.Background(), tc.req, Budget{})
			var verr *ValidationError
			if !errors.As(err, &verr) || verr.Fields[0].Field != tc.field {
				t.Fatalf("got %v, want a validation error on %s", err, tc.field)
			}
			if len(db.Scans()) != 0 {
				t.Errorf("an invalid listing reached the store")
			}
		})
	}
}

// TestForceRelease: the outcomes of a force release, decided by its one
// write (and, without the old item, one read). What the write leaves in the
// table is tested against dynalite (internal/integration TestForceReleaseLockDelay).
func TestForceRelease(t *testing.T) {
	t.Parallel()
	live := item("w1", "arn:aws:iam::1:user/w", 7, t0.Add(time.Minute))
	live[AttrLockDelay] = num(30000)
	tomb := item("w1", "", 7, t0.Add(-time.Minute))
	tomb[AttrReleasedAt] = num(t0.Add(-time.Minute).UnixMilli())
	newer := item("w2", "", 8, t0.Add(time.Minute))
	newer[AttrAcquiredAt] = num(t0.Add(time.Second).UnixMilli())
	inDelay := item("w1", "", 7, t0.Add(-time.Second))
	inDelay[AttrFreeAt] = num(t0.Add(time.Minute).UnixMilli())
	seven, eight := int64(7), int64(8)
	for _, tc := range []struct {
		name      string
		oldItem   bool
		immediate bool
		token     *int64
		update    func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
		read      map[string]types.AttributeValue
		want      error
		current   int64 // the token of the lease a LeaseChangedError names
		freeAt    time.Time
		reads     int
	}{
		{name: "Ended", update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: live}, nil
		}, freeAt: t0.Add(30 * time.Second)},
		{name: "EndedImmediately", immediate: true, token: &seven, update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: live}, nil
		}, freeAt: t0},
		{name: "AbsentOldItem", oldItem: true, update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(nil)
		}, want: ErrNotFound},
		{name: "AbsentRead", update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(nil)
		}, want: ErrNotFound, reads: 1},
		{name: "Released", oldItem: true, update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(tomb)
		}, want: ErrNotFound},
		{name: "InLockDelayNotImmediate", oldItem: true, update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(inDelay)
		}, want: ErrNotFound},
		{name: "RetriedOwnTombstone", oldItem: true, immediate: true, update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			own := item("w1", "", 7, t0)
			own[AttrReleasedAt] = num(t0.UnixMilli())
			own[AttrReleaseID] = in.ExpressionAttributeValues[":ri"]
			own[AttrForcedOwner], own[AttrForcedToken] = &types.AttributeValueMemberS{Value: "w1"}, num(7)
			return nil, ccf(own)
		}, freeAt: t0},
		// The first attempt landed, then the lock went to w2 (token 8)
		// before the SDK's retry: the retry ends nothing more and reports
		// the lease its first attempt ended.
		{name: "RetriedAfterNextGrant", oldItem: true, immediate: true, update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			next := item("w2", "", 8, t0.Add(time.Minute))
			next[AttrReleaseID] = in.ExpressionAttributeValues[":ri"]
			next[AttrForcedOwner], next[AttrForcedToken] = &types.AttributeValueMemberS{Value: "w1"}, num(7)
			return nil, ccf(next)
		}, freeAt: t0},
		{name: "NewerLease", oldItem: true, update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(newer)
		}, want: ErrStaleToken, current: 8},
		{name: "OtherToken", oldItem: true, token: &eight, update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(live)
		}, want: ErrStaleToken, current: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{Update: tc.update, Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return &dynamodb.GetItemOutput{Item: tc.read}, nil
			}}
			s := New(db, Config{Table: "t", Now: func() time.Time { return t0 }, OldItemOnFailure: tc.oldItem})
			res, err := s.ForceRelease(context.Background(), ForceReleaseRequest{Resource: "r", Reason: " stuck job ",
				Immediate: tc.immediate, FencingToken: tc.token})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var changed *LeaseChangedError
			if errors.As(err, &changed) != (tc.current != 0) || (changed != nil && changed.Current.FencingToken != tc.current) {
				t.Errorf("got %v, want a LeaseChangedError naming token %d", err, tc.current)
			}
			if tc.want == nil && (res.Ended.Owner != "w1" || res.Ended.FencingToken != 7 || !res.FreeAt.Equal(tc.freeAt) || res.Immediate != tc.immediate) {
				t.Errorf("got %+v, want the ended lease of w1, token 7, free at %v", res, tc.freeAt)
			}
			if db.Gets() != tc.reads {
				t.Errorf("got %d reads, want %d", db.Gets(), tc.reads)
			}
		})
	}
	t.Run("ReasonRequired", func(t *testing.T) {
		db := &dynamofake.DB{}
		_, err := newTestService(db).ForceRelease(context.Background(), ForceReleaseRequest{Resource: "r", Reason: "  "})
		var verr *ValidationError
		if !errors.As(err, &verr) || verr.Fields[0].Field != "reason" || len(db.Updates()) != 0 {
			t.Errorf("got %v, want a validation error on reason and no write", err)
		}
		_, err = newTestService(db).ForceRelease(context.Background(), ForceReleaseRequest{Resource: "r", Reason: strings.Repeat("x", MaxReasonBytes+1)})
		if !errors.As(err, &verr) {
			t.Errorf("got %v for a reason over %d bytes, want a validation error", err, MaxReasonBytes)
		}
	})
}

// TestListQueue: a listed lock carries its queue's live places in queue
// order, with when each joined (none for an entry that did not record it),
// and without the lapsed ones.
func TestListQueue(t *testing.T) {
	t.Parallel()
	entry := func(id, owner string, joined, until time.Time) types.AttributeValue {
		m := map[string]types.AttributeValue{entryID: &types.AttributeValueMemberS{Value: id},
			AttrOwner: &types.AttributeValueMemberS{Value: owner}, entryUntil: num(until.UnixMilli())}
		if !joined.IsZero() {
			m[entryJoined] = num(joined.UnixMilli())
		}
		return &types.AttributeValueMemberM{Value: m}
	}
	it := item("holder", "", 1, t0.Add(time.Minute))
	it[AttrResource] = &types.AttributeValueMemberS{Value: "q"}
	it[AttrQueue] = &types.AttributeValueMemberL{Value: []types.AttributeValue{
		entry("a", "lapsed", t0.Add(-time.Minute), t0.Add(-time.Second)),
		entry("b", "first", t0.Add(-3*time.Second), t0.Add(20*time.Second)),
		entry("c", "older-service", time.Time{}, t0.Add(21*time.Second)),
	}}
	db := &dynamofake.DB{ScanFunc: func(*dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
		return &dynamodb.ScanOutput{Items: []map[string]types.AttributeValue{it}, Count: 1, ScannedCount: 1}, nil
	}}
	res, err := newTestService(db).List(context.Background(), ListRequest{}, Budget{})
	if err != nil || len(res.Locks) != 1 {
		t.Fatalf("got %+v, %v; want one lock", res, err)
	}
	want := []QueueEntry{
		{Owner: "first", JoinedAt: t0.Add(-3 * time.Second).UTC(), Until: t0.Add(20 * time.Second).UTC()},
		{Owner: "older-service", Until: t0.Add(21 * time.Second).UTC()},
	}
	if got := res.Locks[0].Queue; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("queue: got %v, want %v", got, want)
	}
}
