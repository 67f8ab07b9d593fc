package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

func acquireEvent(body string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		RouteKey:       "POST /locks/{resource}",
		RawPath:        "/locks/r",
		PathParameters: map[string]string{"resource": "r"},
		Body:           body,
	}
}

// waitEvent is a waiting acquire of lock r, on its own route.
func waitEvent(body string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		RouteKey:       "POST /locks/{resource}/wait",
		RawPath:        "/locks/r/wait",
		PathParameters: map[string]string{"resource": "r"},
		Body:           body,
	}
}

// TestAcquireWaitSeconds: on the try route wait_seconds is optional and
// only 0 (a released client's request shape); on the waiting route it is a
// required JSON integer from 1 to the configured maximum, and refused
// whatever it is when waiting is off. Anything else is one 422 naming it
// (which tells a client that this route or server does not wait so), whose
// detail names the other route, and never reaches the store.
func TestAcquireWaitSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		waits   bool  // the waiting route
		maxWait int64 // Config.MaxWaitSeconds of the service
		body    string
		want    int    // status; 422 names wait_seconds
		detail  string // in the 422's detail
	}{
		{"TryAbsent", false, 0, `{"owner":"w1","ttl_seconds":30}`, 200, ""},
		{"TryNull", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":null}`, 200, ""},
		{"TryZero", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":0}`, 200, ""},
		{"TryWaits", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":1}`, 422, "POST /locks/{resource}/wait"},
		{"TryMax", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":20}`, 422, "POST /locks/{resource}/wait"},
		{"TryOverMax", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":21}`, 422, "POST /locks/{resource}/wait"},
		{"TryNegative", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":-1}`, 422, "from 0 to"},
		{"TryString", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":"5"}`, 422, "JSON integer"},
		{"TryFraction", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":2.5}`, 422, "JSON integer"},
		{"TryDuplicate", false, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":0,"wait_seconds":0}`, 422, "more than once"},
		{"TryWaitingOff", false, -1, `{"owner":"w1","ttl_seconds":30,"wait_seconds":1}`, 422, "POST /locks/{resource}/wait"},
		{"TryWaitingOffZero", false, -1, `{"owner":"w1","ttl_seconds":30,"wait_seconds":0}`, 200, ""},
		{"WaitOne", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":1}`, 200, ""},
		{"WaitMax", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":20}`, 200, ""},
		{"WaitAbsent", true, 0, `{"owner":"w1","ttl_seconds":30}`, 422, "is required"},
		{"WaitNull", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":null}`, 422, "JSON integer"},
		{"WaitZero", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":0}`, 422, "POST /locks/{resource})"},
		{"WaitOverMax", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":21}`, 422, "from 1 to 20"},
		{"WaitNegative", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":-1}`, 422, "from 1 to 20"},
		{"WaitString", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":"5"}`, 422, "JSON integer"},
		{"WaitDuplicate", true, 0, `{"owner":"w1","ttl_seconds":30,"wait_seconds":1,"wait_seconds":2}`, 422, "more than once"},
		{"WaitOverConfigured", true, 5, `{"owner":"w1","ttl_seconds":30,"wait_seconds":6}`, 422, "from 1 to 5"},
		{"WaitWaitingOff", true, -1, `{"owner":"w1","ttl_seconds":30,"wait_seconds":1}`, 422, "MAX_WAIT_SECONDS=0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 8, t0.Add(30*time.Second))}, nil
			}}
			now := func() time.Time { return t0 }
			svc := locklogic.New(db, locklogic.Config{Table: "t", Now: now, MaxWaitSeconds: tt.maxWait})
			h := NewHandler(svc, slog.New(slog.DiscardHandler), now)
			serve, ev := h.Acquire, acquireEvent(tt.body)
			if tt.waits {
				serve, ev = h.AcquireWait, waitEvent(tt.body)
			}
			resp, _ := serve(context.Background(), ev)
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, resp.Body, tt.want)
			}
			if tt.want != 422 {
				return
			}
			var p Problem
			if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != "wait_seconds" ||
				!strings.Contains(p.Errors[0].Detail, tt.detail) {
				t.Errorf("got %s, want one error naming wait_seconds, its detail with %q", resp.Body, tt.detail)
			}
			if len(db.Updates()) != 0 {
				t.Errorf("an invalid request reached the store")
			}
		})
	}
}

// TestAcquireWaitCallBudget: a waiting acquire gives each store call its own
// store budget, so a wait longer than the budget is no 503, while every
// call stays bounded.
func TestAcquireWaitCallBudget(t *testing.T) {
	t.Parallel()
	start := time.Now()
	release := start.Add(800 * time.Millisecond)
	var mu sync.Mutex
	slowest := time.Duration(0)
	call := func(ctx context.Context) {
		d, _ := ctx.Deadline()
		mu.Lock()
		slowest = max(slowest, time.Until(d))
		mu.Unlock()
	}
	held := func() map[string]types.AttributeValue { return lockItem("holder", 7, time.Now().Add(time.Minute)) }
	db := &budgetDB{call: call, DB: dynamofake.DB{
		Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			if time.Now().Before(release) {
				return nil, &types.ConditionalCheckFailedException{}
			}
			return &dynamodb.UpdateItemOutput{Attributes: lockItem("w2", 8, time.Now().Add(30*time.Second))}, nil
		},
		Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			it := held()
			if !time.Now().Before(release) {
				it[locklogic.AttrReleasedAt] = &types.AttributeValueMemberN{Value: "1"}
			}
			return &dynamodb.GetItemOutput{Item: it}, nil
		},
	}}
	h := NewHandler(locklogic.New(db, locklogic.Config{Table: "t"}), slog.New(slog.DiscardHandler), nil)
	h.SetStoreBudget(300 * time.Millisecond)
	resp, _ := h.AcquireWait(context.Background(), waitEvent(`{"owner":"w2","ttl_seconds":30,"wait_seconds":5}`))
	if resp.StatusCode != 200 || !strings.Contains(resp.Body, `"acquired":true`) {
		t.Fatalf("got %d %s, want 200 acquired after the release", resp.StatusCode, resp.Body)
	}
	if took := time.Since(start); took < 800*time.Millisecond || took > 2*time.Second {
		t.Errorf("granted after %s, want soon after the release at 800ms", took)
	}
	if slowest > 300*time.Millisecond || slowest < 200*time.Millisecond {
		t.Errorf("store calls got up to %s, want each bounded by the 300ms store budget", slowest)
	}
}

// budgetDB records the deadline of every store call.
type budgetDB struct {
	dynamofake.DB
	call func(ctx context.Context)
}

func (b *budgetDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	b.call(ctx)
	return b.DB.UpdateItem(ctx, in, opts...)
}

func (b *budgetDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	b.call(ctx)
	return b.DB.GetItem(ctx, in, opts...)
}

// TestAcquireWaitDeadline: the invocation's deadline ends a wait early
// enough that the answer is the handler's own "held", not a timeout.
func TestAcquireWaitDeadline(t *testing.T) {
	t.Parallel()
	db := &dynamofake.DB{
		Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, &types.ConditionalCheckFailedException{}
		},
		Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return &dynamodb.GetItemOutput{Item: lockItem("holder", 7, time.Now().Add(time.Minute))}, nil
		},
	}
	h := NewHandler(locklogic.New(db, locklogic.Config{Table: "t"}), slog.New(slog.NewJSONHandler(io.Discard, nil)), nil)
	h.SetStoreBudget(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	resp, _ := h.AcquireWait(ctx, waitEvent(`{"owner":"w2","ttl_seconds":30,"wait_seconds":20}`))
	took := time.Since(start)
	if resp.StatusCode != 200 || !strings.Contains(resp.Body, `"acquired":false`) {
		t.Fatalf("got %d %s, want 200 acquired:false", resp.StatusCode, resp.Body)
	}
	// 1.5 s − 300 ms reserve − 200 ms for the last write: about 1 s.
	if took < 800*time.Millisecond || took > 1300*time.Millisecond {
		t.Errorf("answered after %s, want about 1s: before the deadline minus reserve and write budget", took)
	}
}

func TestConfigMaxWait(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			switch k {
			case "TABLE_NAME":
				return "t"
			case "MAX_WAIT_SECONDS":
				return v
			}
			return ""
		}
	}
	for _, tt := range []struct {
		value   string
		want    int64 // the service's MaxWaitSeconds
		wantErr bool
	}{
		{"", 20, false},
		{"20", 20, false},
		{"5", 5, false},
		{"0", 0, false}, // waiting off
		{"21", 0, true},
		{"-1", 0, true},
		{"5s", 0, true},
	} {
		cfg, err := ConfigFromEnv(env(tt.value))
		if tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), "MAX_WAIT_SECONDS") {
				t.Errorf("MAX_WAIT_SECONDS=%q: got %v, want an error naming it", tt.value, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("MAX_WAIT_SECONDS=%q: %v", tt.value, err)
		}
		if got := locklogic.New(nil, cfg.ServiceConfig()).MaxWaitSeconds(); got != tt.want {
			t.Errorf("MAX_WAIT_SECONDS=%q: service waits up to %d s, want %d", tt.value, got, tt.want)
		}
	}
}

// TestRouteTimeouts: every function's timeout leaves its work time to
// answer before its deadline (a round for the routes that wait), and ends
// before API Gateway stops waiting; the quick routes' is RouteTimeout.
func TestRouteTimeouts(t *testing.T) {
	t.Parallel()
	for _, r := range Routes {
		need := StoreBudget + deadlineReserve
		if r.Waits {
			need += locklogic.MaxWaitLimit * time.Second
		}
		if r.Quick() && r.Timeout != RouteTimeout {
			t.Errorf("%s: timeout %s, want RouteTimeout (%s): a quick route makes one store call", r.Key(), r.Timeout, RouteTimeout)
		}
		if r.Timeout < need || r.Timeout >= IntegrationTimeout {
			t.Errorf("%s: timeout %s, want from %s (its work) to below %s (API Gateway)", r.Name, r.Timeout, need, IntegrationTimeout)
		}
		if r.Timeout%time.Second != 0 {
			t.Errorf("%s: timeout %s, want whole seconds (Lambda's unit)", r.Name, r.Timeout)
		}
	}
}

// TestAcquireQueueTicket: on the waiting route queue_ticket is an optional
// string of 1 to 64 letters, digits, '-' or '_' (absent or null: none);
// anything else is a 422 naming it that never reaches the store. On the
// try route anything but absent or null is a 422 naming it (only waiters
// queue), in the same answer as every other bad member.
func TestAcquireQueueTicket(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, ticket string // the member's raw JSON; "" leaves it out
		want         int    // on the waiting route
		wantTry      int
	}{
		{"Absent", "", 200, 200},
		{"Null", `null`, 200, 200},
		{"Valid", `"3ryokmsrhxukz"`, 200, 422},
		{"MaxLength", `"` + strings.Repeat("a", 64) + `"`, 200, 422},
		{"Empty", `""`, 422, 422},
		{"TooLong", `"` + strings.Repeat("a", 65) + `"`, 422, 422},
		{"Space", `"a b"`, 422, 422},
		{"Unicode", `"\u00e9"`, 422, 422},
		{"Number", `12`, 422, 422},
		{"Object", `{"id":"a"}`, 422, 422},
	} {
		for _, waits := range []bool{true, false} {
			name, want, body := tt.name+"/Wait", tt.want, `{"owner":"w1","ttl_seconds":30,"wait_seconds":5`
			if !waits {
				name, want, body = tt.name+"/Try", tt.wantTry, `{"owner":"w1","ttl_seconds":30`
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
					return &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 8, t0.Add(30*time.Second))}, nil
				}}
				now := func() time.Time { return t0 }
				svc := locklogic.New(db, locklogic.Config{Table: "t", Now: now, FairWaiting: true})
				if tt.ticket != "" {
					body += `,"queue_ticket":` + tt.ticket
				}
				h := NewHandler(svc, slog.New(slog.DiscardHandler), now)
				serve, ev := h.Acquire, acquireEvent(body+"}")
				if waits {
					serve, ev = h.AcquireWait, waitEvent(body+"}")
				}
				resp, _ := serve(context.Background(), ev)
				if resp.StatusCode != want {
					t.Fatalf("got %d %s, want %d", resp.StatusCode, resp.Body, want)
				}
				if want != 422 {
					return
				}
				var p Problem
				if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != "queue_ticket" {
					t.Errorf("got %s, want one error naming queue_ticket", resp.Body)
				}
				if len(db.Updates()) != 0 {
					t.Errorf("an invalid request reached the store")
				}
			})
		}
	}
}

// TestAcquireQueueTicketRoundTrip: the ticket a request sends reaches the
// write that keeps the waiter's place, and a round that ends held answers
// the place it holds.
func TestAcquireQueueTicketRoundTrip(t *testing.T) {
	t.Parallel()
	const ticket = "3ryokmsrhxukz"
	clock := t0
	now := func() time.Time { return clock }
	sleep := func(_ context.Context, d time.Duration) error { clock = clock.Add(d); return nil }
	var mu sync.Mutex
	until := t0.Add(time.Second).UnixMilli() // the place the last round left
	// The lock stays held; the queue holds the caller's place, which the
	// store moves when a write keeps it.
	item := func() map[string]types.AttributeValue {
		it := lockItem("holder", 7, t0.Add(time.Hour))
		it[locklogic.AttrQueue] = &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: ticket}, "owner": &types.AttributeValueMemberS{Value: "w1"},
			"until": &types.AttributeValueMemberN{Value: strconv.FormatInt(until, 10)},
		}}}}
		it[locklogic.AttrQueueUntil] = &types.AttributeValueMemberN{Value: strconv.FormatInt(until, 10)}
		return it
	}
	var kept []string
	db := &dynamofake.DB{
		Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			mu.Lock()
			defer mu.Unlock()
			if tk, ok := in.ExpressionAttributeValues[":tk"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(*in.UpdateExpression, "SET #q[0].#qt") {
				kept = append(kept, tk.Value)
				until, _ = strconv.ParseInt(in.ExpressionAttributeValues[":qt"].(*types.AttributeValueMemberN).Value, 10, 64)
				return &dynamodb.UpdateItemOutput{Attributes: item()}, nil
			}
			return nil, &types.ConditionalCheckFailedException{Item: item()}
		},
		Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			mu.Lock()
			defer mu.Unlock()
			return &dynamodb.GetItemOutput{Item: item()}, nil
		},
	}
	svc := locklogic.New(db, locklogic.Config{Table: "t", Now: now, Sleep: sleep, FairWaiting: true, OldItemOnFailure: true})
	resp, _ := NewHandler(svc, slog.New(slog.DiscardHandler), now).AcquireWait(context.Background(),
		waitEvent(`{"owner":"w1","ttl_seconds":30,"wait_seconds":5,"queue_ticket":"`+ticket+`"}`))
	var got AcquireResponse
	if err := json.Unmarshal([]byte(resp.Body), &got); err != nil || resp.StatusCode != 200 || got.Acquired || got.QueueTicket != ticket {
		t.Fatalf("got %d %s, want held with queue_ticket %q", resp.StatusCode, resp.Body, ticket)
	}
	if len(kept) != 1 || kept[0] != ticket {
		t.Errorf("writes that kept a place: %v, want one, for the ticket sent", kept)
	}
	if want := t0.Add(5*time.Second + locklogic.QueueGrace).UnixMilli(); until != want {
		t.Errorf("the place lapses at %d, want the round's end plus QueueGrace, %d", until, want)
	}
}
