package locklogic

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// TestRWWatchNeverBack is TestSemaphoreWatchNeverBack for a read/write
// lock, whose watch shares the semaphore's (leasesWatch): a reader the
// caller saw end but this instance sees live is no change, the answer
// keeps to the caller's index without that reader, an index above 2 ×
// counter + 1 is refused with the read/write lock's own words, and one
// seen before garbage collection is echoed.
func TestRWWatchNeverBack(t *testing.T) {
	t.Parallel()
	// Counter 11: reader a ends at t0 + 1 s, reader b in an hour, reader c
	// released; no writer. Index at t0: 2 × 11 + 1 − 2 = 21.
	held := semItem(3, 11, map[int]permitSpec{0: {owner: "a", token: 10, exp: t0.Add(time.Second)},
		1: {owner: "b", token: 11, exp: t0.Add(time.Hour)}, 2: {owner: "c", token: 9, exp: t0.Add(-time.Second), released: true}})
	held[AttrResource] = &types.AttributeValueMemberS{Value: RWLockPrefix + "s"}
	delete(held, AttrPermits)
	for _, tc := range []struct {
		name        string
		item        map[string]types.AttributeValue
		index, wait int64
		want        int64
		changed     bool
		readers     []string
		at          time.Duration
		refused     bool
	}{
		{name: "Later", item: held, index: 20, want: 21, changed: true, readers: []string{"a", "b"}},
		{name: "Same", item: held, index: 21, want: 21, readers: []string{"a", "b"}},
		{name: "BehindNoWait", item: held, index: 22, want: 22, readers: []string{"b"}},
		{name: "BehindWaits", item: held, index: 22, wait: 5, want: 22, readers: []string{"b"}, at: 5 * time.Second},
		{name: "EveryLeaseEnded", item: held, index: 23, want: 23},
		{name: "MadeUp", item: held, index: 24, refused: true},
		{name: "GarbageCollected", item: nil, index: 23, want: 23},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: t0}
			var strong atomic.Int32
			db := &dynamofake.DB{Get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				if aws.ToBool(in.ConsistentRead) {
					strong.Add(1)
				}
				return &dynamodb.GetItemOutput{Item: tc.item}, nil
			}}
			res, err := newWaitService(db, clock, Config{}).WatchRW(context.Background(),
				WatchRequest{Resource: "s", Index: tc.index, WaitSeconds: tc.wait}, Budget{})
			var v *ValidationError
			if tc.refused {
				if !errors.As(err, &v) || !v.Has("index") {
					t.Fatalf("got %+v, %v; want index refused", res, err)
				}
				if msg := v.Error(); !strings.Contains(msg, "any state of this read/write lock") {
					t.Errorf("refusal %q does not name a read/write lock", msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var owners []string
			for _, r := range res.Status.Readers {
				owners = append(owners, r.Owner)
			}
			if res.Index != tc.want || res.Changed != tc.changed || !slices.Equal(owners, tc.readers) || res.Status.Writer != nil {
				t.Errorf("got index %d changed %v readers %v writer %v, want %d %v %v none", res.Index, res.Changed, owners,
					res.Status.Writer, tc.want, tc.changed, tc.readers)
			}
			if took := clock.Now().Sub(t0); took != tc.at {
				t.Errorf("answered %s after the start, want %s", took, tc.at)
			}
			if want := int32(1 + min(tc.wait, 1)); strong.Load() != want {
				t.Errorf("got %d consistent reads, want %d", strong.Load(), want)
			}
		})
	}
}
