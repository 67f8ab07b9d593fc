package integration_test

// What the writes leave in the table, read back from dynalite: the values
// the service stores, asserted on the items, not on the text of the
// expressions that wrote them.

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/locklogic"
)

// storedItem reads resource's item from srv's table (strongly consistent).
func storedItem(tb testing.TB, srv *testenv.Server, resource string) map[string]types.AttributeValue {
	tb.Helper()
	out, err := srv.DB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(testenv.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: resource}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	if out.Item == nil {
		tb.Fatalf("no item for %q", resource)
	}
	return out.Item
}

// wantNumbers checks that item holds each attribute of want with its number,
// and none of the attributes of absent.
func wantNumbers(tb testing.TB, step string, item map[string]types.AttributeValue, want map[string]int64, absent ...string) {
	tb.Helper()
	for name, w := range want {
		n, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			tb.Errorf("%s: %s is %v, want the number %d", step, name, item[name], w)
			continue
		}
		if got, err := strconv.ParseInt(n.Value, 10, 64); err != nil || got != w {
			tb.Errorf("%s: got %s %s, want %d", step, name, n.Value, w)
		}
	}
	for _, name := range absent {
		if v, ok := item[name]; ok {
			if n, isN := v.(*types.AttributeValueMemberN); isN {
				tb.Errorf("%s: got %s %s, want none", step, name, n.Value)
			} else {
				tb.Errorf("%s: got %s %v, want none", step, name, v)
			}
		}
	}
}

// TestStoredLockDelay: an acquire with a lock-delay stores lock_delay and
// free_at = expires_at + lock_delay; a renewal moves free_at with the
// expiry; an acquire without a delay removes an earlier lease's lock_delay
// and free_at; a release sets free_at (and expires_at) to its :now.
func TestStoredLockDelay(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	r0 := res(t)
	ms := func(d time.Duration) int64 { return clock.Now().Add(d).UnixMilli() }

	acquireDelay(t, srv, r0, "w1", 30, 10)
	wantNumbers(t, "acquire with a 10 s lock-delay", storedItem(t, srv, r0), map[string]int64{
		locklogic.AttrExpiresAt: ms(30 * time.Second), locklogic.AttrLockDelay: 10000, locklogic.AttrFreeAt: ms(40 * time.Second),
	})

	clock.Advance(5 * time.Second)
	if r := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 60)); r.status != 200 {
		t.Fatalf("renew: got %d %s", r.status, r.raw)
	}
	wantNumbers(t, "renew", storedItem(t, srv, r0), map[string]int64{
		locklogic.AttrExpiresAt: ms(60 * time.Second), locklogic.AttrLockDelay: 10000, locklogic.AttrFreeAt: ms(70 * time.Second),
	})

	clock.Advance(time.Second)
	acquire(t, srv, r0, "w1", 30) // the same owner again, without a delay
	wantNumbers(t, "acquire without a lock-delay after one with", storedItem(t, srv, r0), map[string]int64{
		locklogic.AttrExpiresAt: ms(30 * time.Second),
	}, locklogic.AttrLockDelay, locklogic.AttrFreeAt)

	clock.Advance(time.Second)
	tok := token(t, acquireDelay(t, srv, r0, "w1", 30, 20))
	clock.Advance(time.Second)
	if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", tok)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	wantNumbers(t, "release", storedItem(t, srv, r0), map[string]int64{
		locklogic.AttrExpiresAt: ms(0), locklogic.AttrReleasedAt: ms(0), locklogic.AttrFreeAt: ms(0),
	})
}

// TestStoredCounterAndGC: a resource's first grant starts its fencing
// counter at the clock in microseconds (above any token an older counter of
// the name could have reached), later grants count on from there, and every
// write stores the garbage-collection time (ttl, epoch seconds) as free_at,
// or expires_at plus the maximum lock-delay for a renewal, plus retention.
func TestStoredCounterAndGC(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	const retention = time.Hour
	srv := testenv.Start(t, testenv.Options{Now: clock.Now, Retention: retention})
	r0 := res(t)
	gc := func(atMs int64) int64 { return (atMs+999)/1000 + int64(retention/time.Second) }
	ms := func(d time.Duration) int64 { return clock.Now().Add(d).UnixMilli() }

	first := token(t, acquire(t, srv, r0, "w1", 30))
	if want := clock.Now().UnixMicro() + 1; first != want {
		t.Errorf("first grant's token: got %d, want the clock in µs + 1 = %d", first, want)
	}
	wantNumbers(t, "acquire", storedItem(t, srv, r0), map[string]int64{
		locklogic.AttrToken: first, locklogic.AttrTTL: gc(ms(30 * time.Second)),
	})

	clock.Advance(time.Second)
	if r := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 30)); r.status != 200 {
		t.Fatalf("renew: got %d %s", r.status, r.raw)
	}
	wantNumbers(t, "renew", storedItem(t, srv, r0), map[string]int64{
		locklogic.AttrTTL: gc(ms(30*time.Second) + locklogic.DefaultMaxLockDelaySeconds*1000),
	})

	clock.Advance(time.Second)
	if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", first)); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	wantNumbers(t, "release", storedItem(t, srv, r0), map[string]int64{locklogic.AttrTTL: gc(ms(0))})

	clock.Advance(time.Second)
	next := token(t, acquireDelay(t, srv, r0, "w2", 30, 10))
	if next != first+1 {
		t.Errorf("next grant's token: got %d, want %d (the counter goes on)", next, first+1)
	}
	wantNumbers(t, "acquire with a lock-delay", storedItem(t, srv, r0), map[string]int64{
		locklogic.AttrTTL: gc(ms(40 * time.Second)),
	})
}

// TestListWithoutPrefix: a listing without a prefix lists every blocking
// lease, whatever its name (followed page by page until this test's lease
// shows up).
func TestListWithoutPrefix(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	acquire(t, srv, r0, "w1", 60)
	cursor := ""
	for page := 1; ; page++ {
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := call(t, srv, "GET", "/admin/locks?"+q.Encode(), "")
		if r.status != 200 {
			t.Fatalf("list page %d without a prefix: got %d %s", page, r.status, r.raw)
		}
		for _, l := range r.json["locks"].([]any) {
			if l.(map[string]any)["resource"] == r0 {
				return
			}
		}
		cursor, _ = r.json["cursor"].(string)
		if cursor == "" || page > 100 {
			t.Fatalf("%q not listed after %d pages", r0, page)
		}
	}
}
