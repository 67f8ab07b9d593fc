package locklogic

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic/dynamofake"
)

// The golden items in testdata/golden are items as the service wrote them
// before issue 23's lease engine (main at f991b07, on dynalite, read back
// with GetItem and stored in DynamoDB's wire JSON): a lock held with a
// lock-delay and two waiters queued, and a semaphore of 3 with an owner
// marker (a permit away from its home slot) and a permit whose expiry a
// watch recorded (y<k>). The item layout is a promise to every item in a
// table: the code of any later version must read these as that version
// did. Never regenerate them; add new ones beside them.

// goldenItem is one golden file: the item and the service clock when it
// was read.
type goldenItem struct {
	Note string                     `json:"note"`
	Now  int64                      `json:"now_ms"`
	Item map[string]json.RawMessage `json:"item"`
}

// loadGolden reads testdata/golden/name.
func loadGolden(tb testing.TB, name string) (map[string]types.AttributeValue, time.Time) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		tb.Fatal(err)
	}
	var g goldenItem
	if err := json.Unmarshal(b, &g); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	item := make(map[string]types.AttributeValue, len(g.Item))
	for k, raw := range g.Item {
		if item[k], err = wireValue(raw); err != nil {
			tb.Fatalf("%s: attribute %s: %v", name, k, err)
		}
	}
	return item, time.UnixMilli(g.Now)
}

// wireValue decodes one attribute value of DynamoDB's wire JSON ({"S":
// …}, {"N": …}, {"L": […]}, {"M": {…}}, {"BOOL": …}, {"NULL": true}).
func wireValue(raw json.RawMessage) (types.AttributeValue, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil || len(v) != 1 {
		return nil, fmt.Errorf("not one typed value: %s", raw)
	}
	for typ, body := range v {
		switch typ {
		case "S", "N":
			var s string
			if err := json.Unmarshal(body, &s); err != nil {
				return nil, err
			}
			if typ == "S" {
				return &types.AttributeValueMemberS{Value: s}, nil
			}
			return &types.AttributeValueMemberN{Value: s}, nil
		case "BOOL":
			var b bool
			err := json.Unmarshal(body, &b)
			return &types.AttributeValueMemberBOOL{Value: b}, err
		case "NULL":
			return &types.AttributeValueMemberNULL{Value: true}, nil
		case "L":
			var l []json.RawMessage
			if err := json.Unmarshal(body, &l); err != nil {
				return nil, err
			}
			out := &types.AttributeValueMemberL{Value: make([]types.AttributeValue, len(l))}
			for i, e := range l {
				var err error
				if out.Value[i], err = wireValue(e); err != nil {
					return nil, err
				}
			}
			return out, nil
		case "M":
			var m map[string]json.RawMessage
			if err := json.Unmarshal(body, &m); err != nil {
				return nil, err
			}
			out := &types.AttributeValueMemberM{Value: make(map[string]types.AttributeValue, len(m))}
			for k, e := range m {
				var err error
				if out.Value[k], err = wireValue(e); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
		return nil, fmt.Errorf("unknown type %q", typ)
	}
	panic("unreachable")
}

// goldenService serves item (read and scanned) at the clock *now.
func goldenService(item map[string]types.AttributeValue, now *time.Time) *Service {
	db := &dynamofake.DB{
		Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return &dynamodb.GetItemOutput{Item: item}, nil
		},
		ScanFunc: func(*dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
			return &dynamodb.ScanOutput{Items: []map[string]types.AttributeValue{item}, Count: 1, ScannedCount: 1}, nil
		},
	}
	return New(db, Config{Table: "t", Now: func() time.Time { return *now }})
}

// ms is epoch milliseconds as a UTC time.
func ms(v int64) time.Time { return time.UnixMilli(v).UTC() }

// TestGoldenLockItem: a lock held by "holder" (ttl 30, lock-delay 5 s)
// with waiter-1 and waiter-2 queued reads as that lease, blocks for its
// lock-delay after its expiry, and shows its queue.
func TestGoldenLockItem(t *testing.T) {
	item, now := loadGolden(t, "lock-delay-queue.json")
	s := goldenService(item, &now)
	ctx := context.Background()
	want := Lock{Resource: "orders-db", Owner: "holder", FencingToken: 1796523967946967, AcquiredAt: ms(1796523967946),
		ExpiresAt: ms(1796523997946), LockDelay: 5 * time.Second}

	got, err := s.Status(ctx, "orders-db")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Status: got %+v, %v; want %+v", got, err, want)
	}
	page, err := s.List(ctx, ListRequest{}, Budget{})
	if err != nil || len(page.Locks) != 1 {
		t.Fatalf("List: got %+v, %v; want one lock", page.Locks, err)
	}
	// The listing also shows the queue; these entries were written before
	// a place recorded when it joined, so JoinedAt is zero.
	listed := page.Locks[0]
	var owners []string
	for _, q := range listed.Queue {
		owners = append(owners, q.Owner)
		if !q.JoinedAt.IsZero() {
			t.Errorf("List: %s's JoinedAt %v, want zero (not recorded by the writer)", q.Owner, q.JoinedAt)
		}
	}
	if !reflect.DeepEqual(owners, []string{"waiter-1", "waiter-2"}) {
		t.Errorf("List: queue %v, want [waiter-1 waiter-2]", owners)
	}
	listed.Queue = nil
	if !reflect.DeepEqual(listed, want) {
		t.Errorf("List: got %+v; want %+v", listed, want)
	}
	if got, want := IndexOf(item, now), 2*want.FencingToken; got != want {
		t.Errorf("IndexOf: got %d, want %d (live)", got, want)
	}
	if got := want.FreeAt(); !got.Equal(ms(1796524002946)) {
		t.Errorf("FreeAt: got %v, want the stored free_at", got)
	}
	v := newView(item, true)
	wantQueue := []entry{{id: "1bv29gasijc07", owner: "waiter-1", until: 1796523970946}, {id: "3pvznn94zm38o", owner: "waiter-2", until: 1796523970946}}
	if fmt.Sprint(v.queue) != fmt.Sprint(wantQueue) || v.version() != 2 {
		t.Errorf("queue: got %+v version %d, want %+v version 2", v.queue, v.version(), wantQueue)
	}
	if v.open(now.UnixMilli()) {
		t.Error("the queue reads open while both waiters' places are live")
	}
	if i, tk := v.find([]string{"3pvznn94zm38o"}, Caller{Owner: "waiter-2"}, false, now.UnixMilli()); i != 1 || tk != "3pvznn94zm38o" {
		t.Errorf("waiter-2's place: got %d %q, want 1", i, tk)
	}

	// Expired, inside its lock-delay: no live lease, but listed as
	// blocking until free_at.
	now = ms(1796523997946 + 1000)
	if _, err := s.Status(ctx, "orders-db"); err != ErrNotFound {
		t.Errorf("Status after the expiry: got %v, want ErrNotFound", err)
	}
	if page, err := s.List(ctx, ListRequest{}, Budget{}); err != nil || len(page.Locks) != 1 {
		t.Errorf("List inside the lock-delay: got %+v, %v; want the lease", page.Locks, err)
	}
	if until, blocked := blockedUntil(item, now); !blocked || !until.Equal(ms(1796524002946)) {
		t.Errorf("blockedUntil inside the lock-delay: got %v %v, want free_at", until, blocked)
	}
}

// TestGoldenSemaphoreItem: a semaphore of 3 where o-1 holds slot 0 (the
// home of c-1), c-1 holds slot 1 away from home with its marker, and
// e-4's permit in slot 2 (ttl 1) expired and a watch recorded it.
func TestGoldenSemaphoreItem(t *testing.T) {
	item, now := loadGolden(t, "semaphore-marker-expired.json")
	s := goldenService(item, &now)
	ctx := context.Background()
	p0 := Permit{Lock: Lock{Resource: "workers", Owner: "o-1", FencingToken: 1796523967946967, AcquiredAt: ms(1796523967946),
		ExpiresAt: ms(1796523997946)}, Slot: 0, Permits: 3}
	p1 := Permit{Lock: Lock{Resource: "workers", Owner: "c-1", FencingToken: 1796523967946968, AcquiredAt: ms(1796523967946),
		ExpiresAt: ms(1796523997946)}, Slot: 1, Permits: 3}

	st, err := s.SemaphoreStatus(ctx, "workers")
	if err != nil || st.Permits != 3 || st.Counter != 1796523967946969 || fmt.Sprint(st.Holders) != fmt.Sprint([]Permit{p0, p1}) {
		t.Errorf("SemaphoreStatus: got %+v, %v; want N 3, counter 1796523967946969, holders %+v", st, err, []Permit{p0, p1})
	}
	page, err := s.ListSemaphores(ctx, ListRequest{}, Budget{})
	if err != nil || fmt.Sprint(page.Permits) != fmt.Sprint([]Permit{p0, p1}) {
		t.Errorf("ListSemaphores: got %+v, %v; want %+v", page.Permits, err, []Permit{p0, p1})
	}
	if got, want := SemaphoreIndexOf(item, now), int64(2*1796523967946969+1-2); got != want {
		t.Errorf("SemaphoreIndexOf: got %d, want %d (two live permits)", got, want)
	}

	// c-1's marker names its permit in slot 1, away from its home slot 0:
	// its renewal there is allowed; its home would need no marker.
	c := identityOf(Caller{Owner: "c-1"})
	if HomeSlot(Caller{Owner: "c-1"}, 3) != 0 || str(item, c.marker) != str(item, "g1") {
		t.Fatalf("c-1: home %d, marker %q (want home 0, the marker naming slot 1's grant %q)", HomeSlot(Caller{Owner: "c-1"}, 3),
			str(item, c.marker), str(item, "g1"))
	}
	if !markerAllows(item, c, 1) || markerAllows(item, c, 0) {
		t.Errorf("c-1's marker: allows slot 1 %v (want true), slot 0 %v (want false)", markerAllows(item, c, 1), markerAllows(item, c, 0))
	}
	if o := identityOf(Caller{Owner: "o-1"}); !markerAllows(item, o, 0) {
		t.Error("o-1, without a marker, is not allowed its home slot 0")
	}

	// Slot 2's watched expiry (y2) keeps it ended whatever a clock says:
	// even before its expires_at it is not live.
	early := ms(1796523968946 - 500)
	if live(slotView(item, 2), early) {
		t.Error("slot 2, whose expiry a watch recorded, reads live before its expires_at")
	}
	if _, blocked := blockedUntil(slotView(item, 2), now); blocked {
		t.Error("slot 2 (expired, no lock-delay) blocks its slot")
	}
	if p, ok := decodePermit("workers", item, 2); !ok || p.Owner != "e-4" || p.FencingToken != 1796523967946969 {
		t.Errorf("slot 2's record: got %+v %v, want e-4's with token 1796523967946969", p, ok)
	}
}
