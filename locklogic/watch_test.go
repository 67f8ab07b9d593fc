package locklogic

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// watchScript is the history of a lock item over the fake clock: the lease
// of token 7 ends at exp, is renewed to renewTo at renewAt, released at
// releaseAt, and token 8 is granted at grantAt (zero times: never).
// lateRenewTo, when set, is a late renewal that lands just before the
// watch's first write to record the expiry.
type watchScript struct {
	exp, renewAt, renewTo time.Time
	releaseAt, grantAt    time.Time
	lateRenewTo           time.Time
}

// watchStore serves a watchScript, applies the watch's writes that record
// an expiry (expired_at, under their condition) and counts the calls.
type watchStore struct {
	watchScript
	clock                    *fakeClock
	mu                       sync.Mutex
	strong, eventual, writes int
	expiredAt                time.Time // the recorded expiry (zero: none)
}

func (w *watchStore) item(now time.Time) map[string]types.AttributeValue {
	it := w.scripted(now)
	if !w.expiredAt.IsZero() && str(it, AttrOwner) == "w1" {
		it[AttrExpiredAt] = num(w.expiredAt.UnixMilli())
	}
	return it
}

func (w *watchStore) scripted(now time.Time) map[string]types.AttributeValue {
	switch {
	case !w.grantAt.IsZero() && !now.Before(w.grantAt):
		return item("w2", "", 8, w.grantAt.Add(time.Minute))
	case !w.releaseAt.IsZero() && !now.Before(w.releaseAt):
		it := item("w1", "", 7, w.releaseAt)
		it[AttrReleasedAt] = num(w.releaseAt.UnixMilli())
		return it
	case !w.renewAt.IsZero() && !now.Before(w.renewAt):
		return item("w1", "", 7, w.renewTo)
	}
	return item("w1", "", 7, w.exp)
}

func (w *watchStore) db() *dynamofake.DB {
	return &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.writes++
		now := w.clock.Now()
		if !w.lateRenewTo.IsZero() && w.writes == 1 {
			w.renewAt, w.renewTo = now, w.lateRenewTo
		}
		it := w.item(now)
		v := in.ExpressionAttributeValues
		tok, _ := n(it, AttrToken)
		exp, _ := n(it, AttrExpiresAt)
		want, _ := n(map[string]types.AttributeValue{"v": v[":tok"]}, "v")
		at, _ := n(map[string]types.AttributeValue{"v": v[":now"]}, "v")
		_, released := it[AttrReleasedAt]
		_, recorded := it[AttrExpiredAt]
		if aws.ToString(in.ConditionExpression) != newExpr().lease(&lockLease, "").recordable(":tok") || want != tok || exp > at || released || recorded {
			return nil, &types.ConditionalCheckFailedException{}
		}
		w.expiredAt = now
		return &dynamodb.UpdateItemOutput{Attributes: w.item(now)}, nil
	}, Get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
		w.mu.Lock()
		if in.ConsistentRead != nil && *in.ConsistentRead {
			w.strong++
		} else {
			w.eventual++
		}
		w.mu.Unlock()
		return &dynamodb.GetItemOutput{Item: w.item(w.clock.Now())}, nil
	}}
}

// TestWatch: a watch answers as soon as the index differs — at once when
// it already does, at the first read after a release or a new grant, at
// the lease's expiry without any write (recording it first, with one
// write) — and not for a renewal, even one that lands after the expiry
// before the watch records it; a wait that runs out answers the same
// index from a consistent read.
func TestWatch(t *testing.T) {
	t.Parallel()
	live7 := 2 * int64(7)
	// The longest pause between two reads: interval/2 + up to interval.
	const maxPause = 3 * WatchPollInterval / 2
	for _, tc := range []struct {
		name    string
		index   int64
		wait    int64
		st      watchScript
		want    int64 // the index answered
		changed bool
		at      [2]time.Duration // answered within, on the service clock
		held    bool
		writes  int // the writes that record an expiry
	}{
		// Already changed: seen at the first read, within one interval.
		{name: "DiffersAtOnce", index: 0, wait: 10, st: watchScript{exp: t0.Add(time.Minute)},
			want: live7, changed: true, held: true, at: [2]time.Duration{0, WatchPollInterval}},
		{name: "NoWait", index: live7, wait: 0, st: watchScript{exp: t0.Add(time.Minute)},
			want: live7, held: true},
		{name: "Release", index: live7, wait: 10, st: watchScript{exp: t0.Add(time.Minute), releaseAt: t0.Add(2 * time.Second)},
			want: live7 + 1, changed: true, at: [2]time.Duration{2 * time.Second, 2*time.Second + maxPause}},
		{name: "ExpiryWithoutWrite", index: live7, wait: 10, st: watchScript{exp: t0.Add(3 * time.Second)},
			want: live7 + 1, changed: true, at: [2]time.Duration{3 * time.Second, 3 * time.Second}, writes: 1},
		{name: "NoWaitExpiry", index: 0, wait: 0, st: watchScript{exp: t0.Add(-time.Second)},
			want: live7 + 1, changed: true, writes: 1},
		{name: "LateRenewalFirst", index: live7, wait: 5, st: watchScript{exp: t0.Add(3 * time.Second), lateRenewTo: t0.Add(time.Minute)},
			want: live7, held: true, at: [2]time.Duration{5 * time.Second, 5 * time.Second}, writes: 1},
		{name: "NewGrant", index: live7 + 1, wait: 10, st: watchScript{exp: t0.Add(-time.Second), grantAt: t0.Add(time.Second)},
			want: 16, changed: true, held: true, at: [2]time.Duration{time.Second, time.Second + maxPause}},
		// The caller saw the lease expired through an instance whose clock
		// is ahead; this one still sees it live: no change, and the index
		// answered is not the earlier one.
		{name: "NeverBack", index: live7 + 1, wait: 2, st: watchScript{exp: t0.Add(time.Hour)},
			want: live7 + 1, at: [2]time.Duration{2 * time.Second, 2 * time.Second}},
		{name: "RenewalIsNoChange", index: live7, wait: 5, st: watchScript{exp: t0.Add(2 * time.Second), renewAt: t0.Add(time.Second), renewTo: t0.Add(time.Minute)},
			want: live7, held: true, at: [2]time.Duration{5 * time.Second, 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			st := &watchStore{watchScript: tc.st, clock: clock}
			s := newWaitService(st.db(), clock, Config{})
			res, err := s.Watch(context.Background(), WatchRequest{Resource: "r", Index: tc.index, WaitSeconds: tc.wait}, Budget{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Index != tc.want || res.Changed != tc.changed || (res.Lock != nil) != tc.held {
				t.Errorf("got index %d changed %v lock %v, want %d %v held %v", res.Index, res.Changed, res.Lock, tc.want, tc.changed, tc.held)
			}
			if took := clock.Now().Sub(t0); took < tc.at[0] || took > tc.at[1] {
				t.Errorf("answered %s after the start, want within %v", took, tc.at)
			}
			if res.Token != res.Index/2 {
				t.Errorf("got token %d for index %d", res.Token, res.Index)
			}
			if st.writes != tc.writes {
				t.Errorf("got %d writes, want %d", st.writes, tc.writes)
			}
		})
	}
}

// TestWatchLoad: a watcher of an unchanging lock reads about once per
// WatchPollInterval (eventually consistent) and makes one consistent read
// per wait, the last.
func TestWatchLoad(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	st := &watchStore{clock: clock, watchScript: watchScript{exp: t0.Add(time.Hour)}}
	res, err := newWaitService(st.db(), clock, Config{}).Watch(context.Background(), WatchRequest{Resource: "r", Index: 14, WaitSeconds: 20}, Budget{})
	if err != nil || res.Changed {
		t.Fatalf("got %+v, %v; want no change", res, err)
	}
	if st.strong != 1 || st.eventual < 110 || st.eventual > 160 || res.Reads != st.eventual {
		t.Errorf("got %d consistent and %d eventual reads (Reads %d) in 20 s, want 1 and about 133", st.strong, st.eventual, res.Reads)
	}
}

// TestWatchValidation: the index and the wait are checked together, and a
// bad request reaches no store.
func TestWatchValidation(t *testing.T) {
	t.Parallel()
	db := &dynamofake.DB{}
	_, err := newTestService(db).Watch(context.Background(), WatchRequest{Resource: "a/b", Index: -1, WaitSeconds: 21}, Budget{})
	var v *ValidationError
	if !errors.As(err, &v) || len(v.Fields) != 3 || db.Gets() != 0 {
		t.Errorf("got %v, want resource, index and wait_seconds refused without a read", err)
	}
}
