package locklogic

import (
	"context"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// permitSpec is one slot of a test semaphore item.
type permitSpec struct {
	owner, principal string
	token            int64
	exp              time.Time
	acquired         time.Time // t0 − 1 min when zero
	released, forced bool
	free             time.Time // free_at, when set
	grant            string
}

// semItem returns a semaphore item of permits permits, counter and slots.
func semItem(permits, counter int64, slots map[int]permitSpec) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		AttrResource: &types.AttributeValueMemberS{Value: SemaphorePrefix + "s"},
		AttrPermits:  num(permits),
		AttrCounter:  num(counter),
	}
	for k, p := range slots {
		a := &slotNames[k]
		if p.acquired.IsZero() {
			p.acquired = t0.Add(-time.Minute)
		}
		it[a.owner] = &types.AttributeValueMemberS{Value: p.owner}
		it[a.token] = num(p.token)
		it[a.acquired] = num(p.acquired.UnixMilli())
		it[a.expires] = num(p.exp.UnixMilli())
		if p.principal != "" {
			it[a.principal] = &types.AttributeValueMemberS{Value: p.principal}
		}
		if p.released {
			it[a.released] = num(p.exp.UnixMilli())
		}
		if p.forced {
			it[a.forced] = num(p.exp.UnixMilli())
		}
		if !p.free.IsZero() {
			it[a.free] = num(p.free.UnixMilli())
		}
		if p.grant != "" {
			it[a.grant] = &types.AttributeValueMemberS{Value: p.grant}
		}
	}
	return it
}

func semReq(owner string, permits int64) SemaphoreAcquireRequest {
	return SemaphoreAcquireRequest{Name: "s", Caller: Caller{Owner: owner}, TTLSeconds: 30, Permits: permits}
}

func newSemService(db DynamoDBAPI, oldItem bool) *Service {
	return New(db, Config{Table: "t", Now: func() time.Time { return t0 }, OldItemOnFailure: oldItem})
}

// placeholders are the #names and :values an expression uses.
var placeholder = regexp.MustCompile(`[#:][A-Za-z0-9_]+`)

// checkPlaceholders fails unless in names and values exactly the
// placeholders its expressions use: DynamoDB refuses unused ones, and an
// undefined one.
func checkPlaceholders(tb testing.TB, in *dynamodb.UpdateItemInput) {
	tb.Helper()
	used := map[string]bool{}
	for _, e := range []*string{in.UpdateExpression, in.ConditionExpression} {
		if e != nil {
			for _, ph := range placeholder.FindAllString(*e, -1) {
				used[ph] = true
			}
		}
	}
	for ph := range used {
		_, n := in.ExpressionAttributeNames[ph]
		_, v := in.ExpressionAttributeValues[ph]
		if !n && !v {
			tb.Errorf("%s is used but not defined", ph)
		}
	}
	for ph := range in.ExpressionAttributeNames {
		if !used[ph] {
			tb.Errorf("name %s is defined but unused", ph)
		}
	}
	for ph := range in.ExpressionAttributeValues {
		if !used[ph] {
			tb.Errorf("value %s is defined but unused", ph)
		}
	}
}

// TestSemaphoreExpressionsUseEveryPlaceholder: every form of a semaphore
// write — the guess, a later write away from home with stale markers to
// clean, a change of N, with and without a principal or a lock-delay, and
// renew, release, force release — defines exactly the names and values
// its expressions use.
func TestSemaphoreExpressionsUseEveryPlaceholder(t *testing.T) {
	id := identityOf(Caller{Owner: "w1"})
	other := identityOf(Caller{Owner: "w9"})
	s := newSemService(&dynamofake.DB{}, true)
	for _, tc := range []struct {
		name   string
		req    SemaphoreAcquireRequest
		w      semWrite
		ticket string
	}{
		{"Guess", semReq("w1", 3), semWrite{guess: true, slot: 1, home: 1}, ""},
		{"GuessPrincipalDelay", SemaphoreAcquireRequest{Name: "s", Caller: Caller{Owner: "w1", Principal: "arn:p"}, TTLSeconds: 30,
			Permits: 3, LockDelaySeconds: 5}, semWrite{guess: true, slot: 1, home: 1}, ""},
		{"AwayWithCleanup", semReq("w1", 3), semWrite{slot: 2, home: 1, markerSeen: true, markerValue: "g", markerSlot: 1,
			cleanup: []staleMarker{{name: other.marker, value: "x", slot: 0}, {name: "w0000000000000000", value: "y", slot: -1}}}, ""},
		{"AwayPrincipal", SemaphoreAcquireRequest{Name: "s", Caller: Caller{Owner: "w1", Principal: "arn:p"}, TTLSeconds: 30, Permits: 3},
			semWrite{slot: 2, home: 1}, ""},
		{"HomeAgain", semReq("w1", 3), semWrite{slot: 1, home: 1, markerSeen: true, markerValue: "g", markerSlot: 2}, ""},
		{"MarkerGrantGone", semReq("w1", 3), semWrite{slot: 1, home: 1, markerSeen: true, markerValue: "g", markerSlot: -1}, ""},
		{"Reset", semReq("w1", 2), semWrite{slot: 1, home: 1, reset: &semReset{permits: 4, counter: "17", expired: []int{2, 3},
			markers: []string{other.marker}}}, ""},
		{"ResetNoCounter", semReq("w1", 2), semWrite{slot: 1, home: 1, reset: &semReset{permits: 4}}, ""},
		{"Head", semReq("w1", 3), semWrite{slot: 1, home: 1}, "tk"},
		{"HeadAwayPrincipalDelay", SemaphoreAcquireRequest{Name: "s", Caller: Caller{Owner: "w1", Principal: "arn:p"}, TTLSeconds: 30,
			Permits: 3, LockDelaySeconds: 5}, semWrite{slot: 2, home: 1, markerSeen: true, markerValue: "g", markerSlot: -1,
			cleanup: []staleMarker{{name: other.marker, value: "x", slot: 0}}}, "tk"},
		{"HeadReset", semReq("w1", 2), semWrite{slot: 1, home: 1, reset: &semReset{permits: 4, counter: "17", expired: []int{2, 3}}}, "tk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := s.semAcquireInput(tc.req, t0, id, "gid", &tc.w, tc.ticket)
			checkPlaceholders(t, in)
			head := strings.Contains(*in.ConditionExpression, "#q[0].#qi = :tk") && strings.Contains(*in.UpdateExpression, "#q[0]")
			open := strings.Contains(*in.ConditionExpression, queueOpen(newExpr()))
			if head != (tc.ticket != "") || open == (tc.ticket != "") {
				t.Errorf("ticket %q: the head's place checked and removed %v, the queue open required %v: %s / %s", tc.ticket, head, open,
					*in.ConditionExpression, *in.UpdateExpression)
			}
		})
	}
	var got []*dynamodb.UpdateItemInput
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		got = append(got, in)
		return nil, errors.New("stop")
	}}
	s = newSemService(db, true)
	tok := aws.Int64(3)
	ctx := context.Background()
	_, _ = s.RenewSemaphore(ctx, SemaphoreRenewRequest{Name: "s", Caller: Caller{Owner: "w1"}, Slot: 2, TTLSeconds: 30})
	_, _ = s.RenewSemaphore(ctx, SemaphoreRenewRequest{Name: "s", Caller: Caller{Owner: "w1", Principal: "p"}, Slot: 2, TTLSeconds: 30, FencingToken: tok})
	_ = s.ReleaseSemaphore(ctx, SemaphoreReleaseRequest{Name: "s", Caller: Caller{Owner: "w1"}, Slot: 2, FencingToken: tok})
	_, _ = s.ForceReleaseSemaphore(ctx, SemaphoreForceReleaseRequest{Name: "s", Slot: 2, Reason: "r"})
	_, _ = s.ForceReleaseSemaphore(ctx, SemaphoreForceReleaseRequest{Name: "s", Slot: 2, Reason: "r", Immediate: true, FencingToken: tok})
	if len(got) != 5 {
		t.Fatalf("got %d writes, want 5", len(got))
	}
	for _, in := range got {
		checkPlaceholders(t, in)
		for ph, name := range in.ExpressionAttributeNames {
			if ph != "#pm" && ph != "#g" && !strings.HasSuffix(name, "2") && !(ph == "#w" && isMarker(name)) {
				t.Errorf("%s names %s, want slot 2's attribute", ph, name)
			}
		}
	}
}

// TestSemaphoreAcquireOutcomes: what an acquire makes of the old item of
// its failed guess, as DynamoDB returns it (no read): a full semaphore,
// another N, the caller's own permit elsewhere, a free slot.
func TestSemaphoreAcquireOutcomes(t *testing.T) {
	const n = 3
	home := HomeSlot(Caller{Owner: "w1"}, n)
	away := (home + 1) % n
	live := t0.Add(20 * time.Second)
	fullItem := semItem(n, 9, map[int]permitSpec{
		0: {owner: "a", token: 7, exp: live},
		1: {owner: "b", token: 8, exp: t0.Add(5 * time.Second)},
		2: {owner: "c", token: 9, exp: t0.Add(-time.Second), free: t0.Add(3 * time.Second)}, // in its lock-delay
	})
	for _, tc := range []struct {
		name       string
		old        map[string]types.AttributeValue
		req        SemaphoreAcquireRequest
		wantErr    error
		wantWrites int
		wantFreeAt time.Time
		check      func(t *testing.T, second *dynamodb.UpdateItemInput)
	}{
		{name: "Full", old: fullItem, req: semReq("w1", n), wantWrites: 1, wantFreeAt: t0.Add(3 * time.Second)},
		{name: "PermitsMismatch", old: fullItem, req: semReq("w1", 2), wantErr: ErrPermitsMismatch, wantWrites: 1},
		{name: "OwnPermitAway", req: semReq("w1", n), wantWrites: 2,
			old: semItem(n, 9, map[int]permitSpec{home: {owner: "a", token: 8, exp: live}, away: {owner: "w1", token: 9, exp: live}}),
			check: func(t *testing.T, in *dynamodb.UpdateItemInput) {
				if k := in.ExpressionAttributeNames["#o"]; k != slotNames[away].owner {
					t.Errorf("second write takes %s, want the caller's own slot %d", k, away)
				}
				if !strings.Contains(*in.UpdateExpression, "#w = :gid") || !strings.Contains(*in.ConditionExpression, "NOT (#"+strconv.Itoa(home)+"o = :o") {
					t.Errorf("away from home: want the marker set and home checked: %s / %s", *in.UpdateExpression, *in.ConditionExpression)
				}
			}},
		{name: "OwnPermitNewerThanRequest", req: semReq("w1", n), wantWrites: 1, wantFreeAt: live,
			old: semItem(n, 9, map[int]permitSpec{home: {owner: "a", token: 8, exp: live},
				away: {owner: "w1", token: 9, exp: live, acquired: t0.Add(time.Millisecond)}})},
		{name: "FreeSlot", req: semReq("w1", n), wantWrites: 2,
			old: semItem(n, 9, map[int]permitSpec{home: {owner: "a", token: 8, exp: live}, away: {owner: "b", token: 9, exp: live}}),
			check: func(t *testing.T, in *dynamodb.UpdateItemInput) {
				if k := in.ExpressionAttributeNames["#o"]; k == slotNames[home].owner || k == slotNames[away].owner {
					t.Errorf("second write takes %s, want the free slot", k)
				}
			}},
		{name: "ChangeOfPermits", req: semReq("w1", 1), wantWrites: 2,
			old: semItem(n, 9, map[int]permitSpec{2: {owner: "c", token: 9, exp: t0.Add(-time.Second)}}),
			check: func(t *testing.T, in *dynamodb.UpdateItemInput) {
				for _, want := range []string{"#pm = :pm0", "#c = :c0", "#2e <= :now"} {
					if !strings.Contains(*in.ConditionExpression, want) {
						t.Errorf("change of N: condition lacks %q: %s", want, *in.ConditionExpression)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var writes []*dynamodb.UpdateItemInput
			db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				writes = append(writes, in)
				if len(writes) == 1 {
					return nil, ccf(tc.old)
				}
				k := 0
				for i := range MaxPermits {
					if in.ExpressionAttributeNames["#o"] == slotNames[i].owner {
						k = i
					}
				}
				return &dynamodb.UpdateItemOutput{Attributes: semItem(n, 10, map[int]permitSpec{k: {owner: "w1", token: 10, exp: live}})}, nil
			}}
			res, err := newSemService(db, true).AcquireSemaphore(context.Background(), tc.req, Budget{})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got error %v, want %v", err, tc.wantErr)
			}
			if len(writes) != tc.wantWrites || db.Gets() != 0 {
				t.Errorf("got %d writes and %d reads, want %d writes and none", len(writes), db.Gets(), tc.wantWrites)
			}
			if tc.wantErr == nil && tc.check == nil && (res.Acquired || !res.FreeAt.Equal(tc.wantFreeAt)) {
				t.Errorf("got %+v, want not acquired, free at %s", res, tc.wantFreeAt)
			}
			var mismatch *PermitsMismatchError
			if errors.As(err, &mismatch) && mismatch.Permits != n {
				t.Errorf("got permits %d, want %d", mismatch.Permits, n)
			}
			if tc.check != nil {
				if !res.Acquired || len(writes) < 2 {
					t.Fatalf("got %+v, want acquired by the second write", res)
				}
				tc.check(t, writes[1])
			}
		})
	}
}

// TestSemaphoreAcquireStoreFailures: a store failure of a write or of the
// read that explains it is an error (503 when worth retrying); a
// semaphore whose free slots others keep taking ends after
// MaxSemaphoreWrites writes, not acquired and with no time to retry at.
func TestSemaphoreAcquireStoreFailures(t *testing.T) {
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "slow down"}
	t.Run("WriteThrottled", func(t *testing.T) {
		db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, throttled }}
		_, err := newSemService(db, true).AcquireSemaphore(context.Background(), semReq("w1", 2), Budget{})
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("got %v, want ErrUnavailable", err)
		}
	})
	t.Run("ReadThrottled", func(t *testing.T) {
		db := &dynamofake.DB{
			Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(nil) },
			Get:    func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return nil, throttled },
		}
		_, err := newSemService(db, false).AcquireSemaphore(context.Background(), semReq("w1", 2), Budget{})
		if !errors.Is(err, ErrUnavailable) || db.Gets() != 1 {
			t.Errorf("got %v after %d reads, want ErrUnavailable after one", err, db.Gets())
		}
	})
	t.Run("OthersKeepTakingTheFreeSlot", func(t *testing.T) {
		// Every view shows slot 1 free and home taken; every write fails.
		home := HomeSlot(Caller{Owner: "w1"}, 2)
		old := semItem(2, 5, map[int]permitSpec{home: {owner: "a", token: 5, exp: t0.Add(time.Minute)}})
		db := &dynamofake.DB{
			Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(nil) },
			Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return &dynamodb.GetItemOutput{Item: old}, nil
			},
		}
		res, err := newSemService(db, false).AcquireSemaphore(context.Background(), semReq("w1", 2), Budget{})
		if err != nil || res.Acquired || !res.FreeAt.IsZero() || res.Writes != MaxSemaphoreWrites || res.Reads != MaxSemaphoreWrites {
			t.Errorf("got %+v %v, want not acquired after %d writes and as many reads, no free_at", res, err, MaxSemaphoreWrites)
		}
	})
	t.Run("ItemGoneBetweenWrites", func(t *testing.T) {
		// DynamoDB returns no old item only for an absent item: the next
		// write takes the home slot of an empty semaphore.
		n := 0
		db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			if n++; n == 1 {
				return nil, ccf(nil)
			}
			return &dynamodb.UpdateItemOutput{Attributes: semItem(2, 1, map[int]permitSpec{HomeSlot(Caller{Owner: "w1"}, 2): {owner: "w1", token: 1,
				exp: t0.Add(30 * time.Second)}})}, nil
		}}
		res, err := newSemService(db, true).AcquireSemaphore(context.Background(), semReq("w1", 2), Budget{})
		if err != nil || !res.Acquired || res.Writes != 2 || db.Gets() != 0 {
			t.Errorf("got %+v %v, want acquired by a second write without a read", res, err)
		}
	})
}

// TestSemaphoreRenewReleaseRefusals: a refused renew or release of a slot
// is explained from the old item (or one read on a store that does not
// return it), as for a lock, plus a slot beyond N.
func TestSemaphoreRenewReleaseRefusals(t *testing.T) {
	live := t0.Add(20 * time.Second)
	for _, tc := range []struct {
		name    string
		old     map[string]types.AttributeValue
		caller  Caller
		token   *int64
		slot    int64
		want    error
		oldItem bool
	}{
		{"Forbidden", semItem(2, 9, map[int]permitSpec{1: {owner: "a", token: 9, exp: live}}), Caller{Owner: "w1"}, nil, 1, ErrForbidden, true},
		{"OtherPrincipal", semItem(2, 9, map[int]permitSpec{1: {owner: "w1", principal: "p1", token: 9, exp: live}}),
			Caller{Owner: "w1", Principal: "p2"}, nil, 1, ErrForbidden, true},
		{"StaleToken", semItem(2, 9, map[int]permitSpec{1: {owner: "w1", token: 9, exp: live}}), Caller{Owner: "w1"}, aws.Int64(8), 1,
			ErrStaleToken, true},
		{"Expired", semItem(2, 9, map[int]permitSpec{1: {owner: "w1", token: 9, exp: t0}}), Caller{Owner: "w1"}, nil, 1, ErrNotFound, true},
		{"ForceReleased", semItem(2, 9, map[int]permitSpec{1: {owner: "w1", token: 9, exp: t0, forced: true}}), Caller{Owner: "w1"}, nil, 1,
			ErrForceReleased, true},
		{"BeyondPermits", semItem(1, 9, map[int]permitSpec{1: {owner: "w1", token: 9, exp: live}}), Caller{Owner: "w1"}, nil, 1, ErrNotFound, true},
		{"AbsentItem", nil, Caller{Owner: "w1"}, nil, 1, ErrNotFound, true},
		{"ReadToExplain", semItem(2, 9, map[int]permitSpec{1: {owner: "a", token: 9, exp: live}}), Caller{Owner: "w1"}, nil, 1, ErrForbidden, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{
				Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
					if tc.oldItem {
						return nil, ccf(tc.old)
					}
					return nil, ccf(nil)
				},
				Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
					return &dynamodb.GetItemOutput{Item: tc.old}, nil
				},
			}
			s := newSemService(db, tc.oldItem)
			_, rerr := s.RenewSemaphore(context.Background(), SemaphoreRenewRequest{Name: "s", Caller: tc.caller, Slot: tc.slot, TTLSeconds: 30,
				FencingToken: tc.token})
			lerr := s.ReleaseSemaphore(context.Background(), SemaphoreReleaseRequest{Name: "s", Caller: tc.caller, Slot: tc.slot,
				FencingToken: tc.token})
			if !errors.Is(rerr, tc.want) || !errors.Is(lerr, tc.want) {
				t.Errorf("renew: %v, release: %v; want %v", rerr, lerr, tc.want)
			}
			if wantGets := map[bool]int{true: 0, false: 2}[tc.oldItem]; db.Gets() != wantGets {
				t.Errorf("got %d reads, want %d", db.Gets(), wantGets)
			}
		})
	}
	t.Run("ReleaseRetryFindsItsOwnTombstone", func(t *testing.T) {
		db := &dynamofake.DB{}
		db.Update = func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			old := semItem(2, 9, map[int]permitSpec{1: {owner: "w1", token: 9, exp: t0, released: true}})
			old[slotNames[1].release] = in.ExpressionAttributeValues[":ri"]
			return nil, ccf(old)
		}
		if err := newSemService(db, true).ReleaseSemaphore(context.Background(), SemaphoreReleaseRequest{Name: "s", Caller: Caller{Owner: "w1"},
			Slot: 1}); err != nil {
			t.Errorf("got %v, want nil: the release happened", err)
		}
	})
}

// TestSemaphoreRenewMarker: a renewal may extend or revive the caller's
// permit only as markerCondition allows — at home without a marker, away
// with the marker naming the permit's grant — and a refused renewal that
// found its permit renewed by a later request is 404, not that lease,
// when the marker no longer allows the permit (it was judged ended).
func TestSemaphoreRenewMarker(t *testing.T) {
	const permits = 3
	w1 := Caller{Owner: "w1"}
	id := identityOf(w1)
	home := id.home(permits)
	away := (home + 1) % permits
	live := t0.Add(20 * time.Second)
	marked := func(k int, marker string) map[string]types.AttributeValue {
		it := semItem(permits, 9, map[int]permitSpec{k: {owner: "w1", token: 9, exp: live, grant: "g9"}})
		if marker != "" {
			it[id.marker] = &types.AttributeValueMemberS{Value: marker}
		}
		return it
	}
	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
		k    int
		want bool
	}{
		{"HomeNoMarker", marked(home, ""), home, true},
		{"HomeMarked", marked(home, "g1"), home, false},
		{"AwayMarked", marked(away, "g9"), away, true},
		{"AwayMarkerMoved", marked(away, "g1"), away, false},
		{"AwayNoMarker", marked(away, ""), away, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := markerAllows(tc.item, id, tc.k); got != tc.want {
				t.Errorf("markerAllows: got %v, want %v", got, tc.want)
			}
			// The condition's home branch lists exactly the Ns whose home
			// for the caller is k.
			x := newExpr()
			markerCondition(id, tc.k, x)
			values := x.values
			for n := int64(tc.k + 1); n <= MaxPermits; n++ {
				if _, listed := values[":h"+strconv.FormatInt(n, 10)]; listed != (id.home(n) == tc.k) {
					t.Errorf("N = %d: listed %v, home %d", n, listed, id.home(n))
				}
			}
		})
	}
	t.Run("RenewedSinceWithoutMarker", func(t *testing.T) {
		for _, marker := range []string{"g9", ""} {
			old := marked(away, marker)
			old[slotNames[away].renewed] = num(t0.Add(time.Second).UnixMilli()) // a renewal stamped after this one
			old[slotNames[away].expires] = num(t0.Add(time.Hour).UnixMilli())
			db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(old) }}
			p, err := newSemService(db, true).RenewSemaphore(context.Background(), SemaphoreRenewRequest{Name: "s", Caller: w1,
				Slot: int64(away), TTLSeconds: 30})
			switch {
			case marker != "" && (err != nil || p.FencingToken != 9):
				t.Errorf("marked: got %+v, %v; want the later renewal's permit", p, err)
			case marker == "" && !errors.Is(err, ErrNotFound):
				t.Errorf("marker gone: got %+v, %v; want ErrNotFound", p, err)
			}
		}
	})
}

// TestSemaphoreForceReleaseRefusals: a force release of a slot refused for
// another token names the permit that stayed; nothing live is
// ErrNothingToForce.
func TestSemaphoreForceReleaseRefusals(t *testing.T) {
	live := t0.Add(20 * time.Second)
	old := semItem(2, 9, map[int]permitSpec{1: {owner: "a", token: 9, exp: live}})
	db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(old) }}
	_, err := newSemService(db, true).ForceReleaseSemaphore(context.Background(), SemaphoreForceReleaseRequest{Name: "s", Slot: 1,
		Reason: "r", FencingToken: aws.Int64(8)})
	var changed *PermitChangedError
	if !errors.As(err, &changed) || changed.Current.FencingToken != 9 || changed.Current.Slot != 1 || changed.Current.Permits != 2 ||
		!errors.Is(err, ErrStaleToken) {
		t.Errorf("got %v, want a PermitChangedError naming token 9 in slot 1", err)
	}
	_, err = newSemService(db, true).ForceReleaseSemaphore(context.Background(), SemaphoreForceReleaseRequest{Name: "s", Slot: 0, Reason: "r"})
	if !errors.Is(err, ErrNothingToForce) {
		t.Errorf("empty slot: got %v, want ErrNothingToForce", err)
	}
}

// TestSemaphoreIndex: the watch index grows at every grant and every end
// of a permit, and stays on a renewal.
func TestSemaphoreIndex(t *testing.T) {
	live := t0.Add(20 * time.Second)
	states := []struct {
		name string
		item map[string]types.AttributeValue
		at   time.Time
	}{
		{"never", nil, t0},
		{"one grant", semItem(3, 10, map[int]permitSpec{0: {owner: "a", token: 10, exp: live}}), t0},
		{"two grants", semItem(3, 11, map[int]permitSpec{0: {owner: "a", token: 10, exp: live}, 1: {owner: "b", token: 11, exp: live}}), t0},
		{"one ended", semItem(3, 11, map[int]permitSpec{0: {owner: "a", token: 10, exp: live}, 1: {owner: "b", token: 11, exp: t0, released: true}}), t0},
		{"both expired", semItem(3, 11, map[int]permitSpec{0: {owner: "a", token: 10, exp: live}, 1: {owner: "b", token: 11, exp: t0, released: true}}), live},
		{"a takeover", semItem(3, 12, map[int]permitSpec{0: {owner: "c", token: 12, exp: live.Add(time.Minute)}, 1: {owner: "b", token: 11, exp: t0, released: true}}), live},
	}
	var last int64 = -1
	for _, s := range states {
		i := SemaphoreIndexOf(s.item, s.at)
		if i <= last {
			t.Errorf("%s: index %d after %d, want it to grow", s.name, i, last)
		}
		last = i
	}
	// A renewal moves expires_at only: the index stays.
	a := semItem(3, 10, map[int]permitSpec{0: {owner: "a", token: 10, exp: live}})
	b := semItem(3, 10, map[int]permitSpec{0: {owner: "a", token: 10, exp: live.Add(time.Hour)}})
	if SemaphoreIndexOf(a, t0) != SemaphoreIndexOf(b, t0) {
		t.Errorf("a renewal changed the index")
	}
}

// TestHomeSlot: an owner's home slot is stable and within N; owner and
// principal together make the caller.
func TestHomeSlot(t *testing.T) {
	spread := map[int]int{}
	for i := range 400 {
		c := Caller{Owner: "worker-" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
		h := HomeSlot(c, 4)
		if h < 0 || h >= 4 || h != HomeSlot(c, 4) || h != HomeSlot(Caller{Owner: "  " + c.Owner + " "}, 4) {
			t.Fatalf("%v: home %d", c, h)
		}
		spread[h]++
	}
	for k := range 4 {
		if spread[k] < 50 {
			t.Errorf("slot %d is home to %d of 400 owners, want about 100", k, spread[k])
		}
	}
	if identityOf(Caller{Owner: "w1"}).marker == identityOf(Caller{Owner: "w1", Principal: "p"}).marker {
		t.Error("the same owner string under another principal has the same marker")
	}
	if !isMarker(identityOf(Caller{Owner: "w1"}).marker) || isMarker("o1") || isMarker(AttrPermits) {
		t.Error("isMarker")
	}
}

// TestSemaphoreWatchNeverBack: the semaphore watch, and the read/write
// lock's that shares it (leasesWatch), keep the lock watch's index rules.
// A permit (a reader) the caller saw end (through an instance whose clock
// is ahead) but this instance still sees live is no change: the answer
// keeps to the caller's index, without that lease, and a wait runs on for
// a later state; an index above 2 × counter + 1 is refused, in the kind's
// own words; one seen before garbage collection deleted the item is
// echoed.
func TestSemaphoreWatchNeverBack(t *testing.T) {
	t.Parallel()
	// N = 3, counter 11: a's permit ends at t0 + 1 s, b's in an hour, slot
	// 2 released. Index at t0: 2 × 11 + 1 − 2 = 21; after a's end, 22.
	sem := semItem(3, 11, map[int]permitSpec{0: {owner: "a", token: 10, exp: t0.Add(time.Second)},
		1: {owner: "b", token: 11, exp: t0.Add(time.Hour)}, 2: {owner: "c", token: 9, exp: t0.Add(-time.Second), released: true}})
	// The same leases as a read/write lock's readers, no writer.
	rw := maps.Clone(sem)
	rw[AttrResource] = &types.AttributeValueMemberS{Value: RWLockPrefix + "s"}
	delete(rw, AttrPermits)
	// watch runs one kind's watch, returning the index, whether it
	// changed and the owners of the live leases (the writer's first).
	type watch func(s *Service, req WatchRequest) (index int64, changed bool, owners []string, err error)
	kinds := []struct {
		name    string
		held    map[string]types.AttributeValue
		watch   watch
		refusal string // in the refused index's message
	}{
		{"Semaphore", sem, func(s *Service, req WatchRequest) (int64, bool, []string, error) {
			res, err := s.WatchSemaphore(context.Background(), req, Budget{})
			var owners []string
			for _, h := range res.Status.Holders {
				owners = append(owners, h.Owner)
			}
			return res.Index, res.Changed, owners, err
		}, "semaphore"},
		{"RWLock", rw, func(s *Service, req WatchRequest) (int64, bool, []string, error) {
			res, err := s.WatchRW(context.Background(), req, Budget{})
			var owners []string
			if w := res.Status.Writer; w != nil {
				owners = append(owners, "writer "+w.Owner)
			}
			for _, r := range res.Status.Readers {
				owners = append(owners, r.Owner)
			}
			return res.Index, res.Changed, owners, err
		}, "any state of this read/write lock"},
	}
	for _, kind := range kinds {
		held := kind.held
		for _, tc := range []struct {
			name        string
			item        map[string]types.AttributeValue
			index, wait int64
			want        int64
			changed     bool
			holders     []string // owners, by slot
			at          time.Duration
			refused     bool
		}{
			{name: "Later", item: held, index: 20, want: 21, changed: true, holders: []string{"a", "b"}},
			{name: "Same", item: held, index: 21, want: 21, holders: []string{"a", "b"}},
			{name: "BehindNoWait", item: held, index: 22, want: 22, holders: []string{"b"}},
			// a's expiry brings this instance to the caller's index, no
			// later: the wait runs out.
			{name: "BehindWaits", item: held, index: 22, wait: 5, want: 22, holders: []string{"b"}, at: 5 * time.Second},
			{name: "EveryLeaseEnded", item: held, index: 23, want: 23},
			{name: "MadeUp", item: held, index: 24, refused: true},
			{name: "GarbageCollected", item: nil, index: 23, want: 23},
		} {
			t.Run(kind.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				clock := &fakeClock{t: t0}
				var strong atomic.Int32
				db := &dynamofake.DB{Get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
					if aws.ToBool(in.ConsistentRead) {
						strong.Add(1)
					}
					return &dynamodb.GetItemOutput{Item: tc.item}, nil
				}}
				index, changed, owners, err := kind.watch(newWaitService(db, clock, Config{}),
					WatchRequest{Resource: "s", Index: tc.index, WaitSeconds: tc.wait})
				var v *ValidationError
				if tc.refused {
					if !errors.As(err, &v) || !v.Has("index") {
						t.Fatalf("got index %d, %v; want index refused", index, err)
					}
					if msg := v.Error(); !strings.Contains(msg, kind.refusal) {
						t.Errorf("refusal %q does not contain %q", msg, kind.refusal)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if index != tc.want || changed != tc.changed || !slices.Equal(owners, tc.holders) {
					t.Errorf("got index %d changed %v holders %v, want %d %v %v", index, changed, owners, tc.want, tc.changed, tc.holders)
				}
				if took := clock.Now().Sub(t0); took != tc.at {
					t.Errorf("answered %s after the start, want %s", took, tc.at)
				}
				// A read no later than the caller's index is no hint of a
				// change: no consistent read confirms it. One read answers
				// a watch without a wait; one more ends a wait that runs
				// out.
				if want := int32(1 + min(tc.wait, 1)); strong.Load() != want {
					t.Errorf("got %d consistent reads, want %d", strong.Load(), want)
				}
			})
		}
	}
}
