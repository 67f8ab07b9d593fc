package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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

// semEvent is the acquire-iam.json event turned into one of a semaphore
// route (by operation id) on semaphore "exports" with body.
func semEvent(tb testing.TB, op, body string) events.APIGatewayV2HTTPRequest {
	tb.Helper()
	ev := loadEvent(tb, "acquire-iam.json")
	for _, r := range Routes {
		if r.OperationID() == op {
			ev.RouteKey, ev.RequestContext.RouteKey = r.Key(), r.Key()
			ev.RawPath = strings.Replace(r.Path, "{name}", "exports", 1)
			ev.RequestContext.HTTP.Method = r.Method
			ev.PathParameters = map[string]string{"name": "exports"}
			ev.Body = body
			return ev
		}
	}
	tb.Fatalf("no route %s", op)
	return ev
}

// permitItem is what a granted acquire's write returns (UPDATED_NEW) for
// slot k.
func permitItem(k int, owner string, token int64) map[string]types.AttributeValue {
	n := func(i int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: jsonInt(i)} }
	s := jsonInt(int64(k))
	return map[string]types.AttributeValue{
		"o" + s: &types.AttributeValueMemberS{Value: owner}, "t" + s: n(token), "a" + s: n(t0.UnixMilli()),
		"e" + s: n(t0.Add(30 * time.Second).UnixMilli()), locklogic.AttrPermits: n(3), locklogic.AttrCounter: n(token),
	}
}

func jsonInt(i int64) string { b, _ := json.Marshal(i); return string(b) }

// TestSemaphoreRowsShareFunctions: each semaphore row runs on the function
// of the same job as a lock row, and that function's entry point (the one
// its main hands to Lambda) serves the semaphore row by its route key.
func TestSemaphoreRowsShareFunctions(t *testing.T) {
	entry := map[string]func(*Handler, context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){
		"acquire": (*Handler).Acquire, "wait": (*Handler).AcquireWait, "status": (*Handler).Status, "release": (*Handler).Release,
		"renew": (*Handler).Renew, "watch": (*Handler).Watch, "admin": (*Handler).Admin,
	}
	bodies := map[string]string{
		"acquireSemaphore":      `{"owner":"w1","ttl_seconds":30,"permits":3}`,
		"acquireSemaphoreWait":  `{"owner":"w1","ttl_seconds":30,"permits":3,"wait_seconds":1}`,
		"renewSemaphore":        `{"owner":"w1","slot":1,"ttl_seconds":30}`,
		"releaseSemaphore":      `{"owner":"w1","slot":1}`,
		"forceReleaseSemaphore": `{"slot":1,"reason":"gone"}`,
	}
	sem := 0
	for _, r := range Routes {
		if !strings.HasPrefix(r.Path, "/semaphores/") && r.Path != "/admin/semaphores" && !strings.HasPrefix(r.Path, "/admin/semaphores/") {
			continue
		}
		sem++
		f, ok := entry[r.Name]
		if !ok {
			t.Errorf("%s: function %q is not one of the lock functions", r.Key(), r.Name)
			continue
		}
		var keys []string
		db := &dynamofake.DB{
			Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				keys = append(keys, in.Key[locklogic.AttrResource].(*types.AttributeValueMemberS).Value)
				return &dynamodb.UpdateItemOutput{Attributes: permitItem(1, "w1", 7)}, nil
			},
			Get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				keys = append(keys, in.Key[locklogic.AttrResource].(*types.AttributeValueMemberS).Value)
				return &dynamodb.GetItemOutput{Item: permitItem(1, "w1", 7)}, nil
			},
			ScanFunc: func(in *dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
				keys = append(keys, "scan "+in.ExpressionAttributeValues[":pre"].(*types.AttributeValueMemberS).Value)
				return &dynamodb.ScanOutput{}, nil
			},
		}
		resp, err := f(newTestHandler(db, io.Discard), context.Background(), semEvent(t, r.OperationID(), bodies[r.OperationID()]))
		if err != nil || resp.StatusCode >= 300 {
			t.Errorf("%s through the %s function: got %d %s %v", r.Key(), r.Name, resp.StatusCode, resp.Body, err)
			continue
		}
		want := "sem/exports"
		if r.OperationID() == "listSemaphores" {
			want = "scan sem/"
		}
		if len(keys) == 0 || keys[0] != want {
			t.Errorf("%s: store calls on %v, want %s", r.Key(), keys, want)
		}
	}
	if sem != 8 {
		t.Errorf("got %d semaphore rows, want 8", sem)
	}
}

// TestSemaphoreAnswers: the acquire's answers — a permit with its slot, a
// full semaphore with free_at and Retry-After, a permits mismatch naming
// N — and their metric outcomes.
func TestSemaphoreAnswers(t *testing.T) {
	const live = 20 * time.Second
	home := locklogic.HomeSlot(locklogic.Caller{Owner: "w1", Principal: "arn:aws:sts::123456789012:assumed-role/worker"}, 3)
	full := map[string]types.AttributeValue{
		locklogic.AttrPermits: &types.AttributeValueMemberN{Value: "1"},
		locklogic.AttrCounter: &types.AttributeValueMemberN{Value: "7"},
		"o0":                  &types.AttributeValueMemberS{Value: "other"},
		"t0":                  &types.AttributeValueMemberN{Value: "7"},
		"a0":                  &types.AttributeValueMemberN{Value: jsonInt(t0.UnixMilli())},
		"e0":                  &types.AttributeValueMemberN{Value: jsonInt(t0.Add(live).UnixMilli())},
	}
	for _, tc := range []struct {
		name, body, want, outcome string
		status                    int
		update                    func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
		header                    string
	}{
		{name: "Granted", body: `{"owner":"w1","ttl_seconds":30,"permits":3}`, status: 200, outcome: "acquired",
			want: `{"acquired":true,"permit":{"name":"exports","slot":` + jsonInt(int64(home)) + `,"owner":"w1","fencing_token":7,"acquired_at":"2026-12-02T12:00:00.000Z","expires_at":"2026-12-02T12:00:30.000Z"}}`,
			update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return &dynamodb.UpdateItemOutput{Attributes: permitItem(home, "w1", 7)}, nil
			}},
		{name: "Full", body: `{"owner":"w1","ttl_seconds":30,"permits":1}`, status: 200, outcome: "full", header: "20",
			want: `{"acquired":false,"name":"exports","free_at":"2026-12-02T12:00:20.000Z"}`,
			update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return nil, &types.ConditionalCheckFailedException{Item: full}
			}},
		{name: "PermitsMismatch", body: `{"owner":"w1","ttl_seconds":30,"permits":2}`, status: 409, outcome: "permits-mismatch",
			update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return nil, &types.ConditionalCheckFailedException{Item: full}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			db := &dynamofake.DB{Update: tc.update}
			h := newTestHandler(db, &logs)
			h.svc = locklogic.New(db, locklogic.Config{Table: "t", Now: func() time.Time { return t0 }, OldItemOnFailure: true})
			resp, _ := h.Acquire(context.Background(), semEvent(t, "acquireSemaphore", tc.body))
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, resp.Body, tc.status)
			}
			if tc.want != "" {
				var got, want any
				_ = json.Unmarshal([]byte(resp.Body), &got)
				_ = json.Unmarshal([]byte(tc.want), &want)
				if g, _ := json.Marshal(got); string(g) != mustJSON(want) {
					t.Errorf("got %s, want %s", resp.Body, tc.want)
				}
			}
			if resp.Headers["retry-after"] != tc.header {
				t.Errorf("got Retry-After %q, want %q", resp.Headers["retry-after"], tc.header)
			}
			if tc.status == 409 {
				p := decodeBody(t, resp)
				if p["type"] != ProblemTypeBase+"permits-mismatch" || p["permits"] != 1.0 || !strings.Contains(p["detail"].(string), `"exports"`) {
					t.Errorf("got %s, want permits-mismatch naming 1 permit", resp.Body)
				}
			}
			if !strings.Contains(logs.String(), `"Outcome":"`+tc.outcome+`"`) {
				t.Errorf("log %s lacks outcome %s", logs.String(), tc.outcome)
			}
		})
	}
}

// TestSemaphoreWaitAnswers: a waiting acquire of a full semaphore (one
// permit, held) joins the queue; held for the whole wait it answers full
// with free_at, Retry-After and its queue_ticket; the holder gone, the
// head's grant answers the permit. Both log the WaitTime metric.
func TestSemaphoreWaitAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hold    time.Duration
		granted bool
	}{
		{"HeldForTheWholeWait", 30 * time.Second, false},
		{"GrantedToTheHead", 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			clock := t0
			now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
			sleep := func(_ context.Context, d time.Duration) error {
				mu.Lock()
				defer mu.Unlock()
				clock = clock.Add(d)
				return nil
			}
			var queue []types.AttributeValue
			item := func() map[string]types.AttributeValue {
				it := map[string]types.AttributeValue{
					locklogic.AttrResource: &types.AttributeValueMemberS{Value: locklogic.SemaphorePrefix + "exports"},
					locklogic.AttrPermits:  &types.AttributeValueMemberN{Value: "1"},
					locklogic.AttrCounter:  &types.AttributeValueMemberN{Value: "7"},
					"o0":                   &types.AttributeValueMemberS{Value: "other"},
					"t0":                   &types.AttributeValueMemberN{Value: "7"},
					"a0":                   &types.AttributeValueMemberN{Value: jsonInt(t0.UnixMilli())},
					"e0":                   &types.AttributeValueMemberN{Value: jsonInt(t0.Add(tc.hold).UnixMilli())},
				}
				if len(queue) > 0 {
					it[locklogic.AttrQueue] = &types.AttributeValueMemberL{Value: queue}
					it[locklogic.AttrQueueUntil] = &types.AttributeValueMemberN{Value: jsonInt(t0.Add(time.Minute).UnixMilli())}
				}
				return it
			}
			db := &dynamofake.DB{
				Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
					u := *in.UpdateExpression
					switch {
					case strings.Contains(u, "list_append"):
						queue = append(queue, in.ExpressionAttributeValues[":qe"].(*types.AttributeValueMemberL).Value...)
						return &dynamodb.UpdateItemOutput{Attributes: item()}, nil
					case strings.Contains(u, "#q[0]") && !now().Before(t0.Add(tc.hold)):
						queue = queue[1:]
						return &dynamodb.UpdateItemOutput{Attributes: permitItem(0, "w1", 8)}, nil
					}
					return nil, &types.ConditionalCheckFailedException{Item: item()}
				},
				Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
					return &dynamodb.GetItemOutput{Item: item()}, nil
				},
			}
			var logs bytes.Buffer
			h := newTestHandler(db, &logs)
			h.svc = locklogic.New(db, locklogic.Config{Table: "t", Now: now, Sleep: sleep, OldItemOnFailure: true})
			h.now = now
			resp, _ := h.AcquireWait(context.Background(), semEvent(t, "acquireSemaphoreWait", `{"owner":"w1","ttl_seconds":30,"permits":1,"wait_seconds":5}`))
			body := decodeBody(t, resp)
			if resp.StatusCode != 200 || body["acquired"] != tc.granted {
				t.Fatalf("got %d %s, want acquired %v", resp.StatusCode, resp.Body, tc.granted)
			}
			if tc.granted {
				if p, _ := body["permit"].(map[string]any); p == nil || p["fencing_token"] != 8.0 || body["queue_ticket"] != nil {
					t.Errorf("got %s, want the permit the head's grant wrote", resp.Body)
				}
			} else {
				ticket, _ := body["queue_ticket"].(string)
				if ticket == "" || len(queue) != 1 || body["free_at"] != "2026-12-02T12:00:30.000Z" || resp.Headers["retry-after"] == "" {
					t.Errorf("got %s %v with queue %v, want full with free_at, Retry-After and the waiter's place", resp.Body, resp.Headers, queue)
				}
			}
			if !strings.Contains(logs.String(), `"WaitTime"`) {
				t.Errorf("log %s lacks WaitTime", logs.String())
			}
		})
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestSemaphoreFieldErrorsAtOnce: one 422 names every invalid field of a
// semaphore request, before any store call.
func TestSemaphoreFieldErrorsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		op, body string
		fields   []string
	}{
		{"acquireSemaphoreWait", `{"owner":"","ttl_seconds":0,"permits":0,"wait_seconds":21,"queue_ticket":"a b","wait":5}`,
			[]string{"wait", "owner", "ttl_seconds", "permits", "wait_seconds", "queue_ticket"}},
		{"acquireSemaphoreWait", `{"owner":"w1","ttl_seconds":30,"permits":3,"wait_seconds":-1,"queue_ticket":7}`, []string{"wait_seconds", "queue_ticket"}},
		{"acquireSemaphoreWait", `{"owner":"w1","ttl_seconds":30,"permits":3}`, []string{"wait_seconds"}},
		// A try that waits and queues: one answer names both, with the rest.
		{"acquireSemaphore", `{"owner":"","ttl_seconds":30,"permits":0,"wait_seconds":5,"queue_ticket":"3ryokmsrhxukz"}`,
			[]string{"owner", "permits", "wait_seconds", "queue_ticket"}},
		{"acquireSemaphore", `{"owner":"w1","ttl_seconds":30,"permits":"3","lock_delay_seconds":-1}`, []string{"permits", "lock_delay_seconds"}},
		{"renewSemaphore", `{"owner":"w1","slot":"1","fencing_token":0}`, []string{"slot", "ttl_seconds", "fencing_token"}},
		{"releaseSemaphore", `{"owner":" ","slot":100}`, []string{"owner", "slot"}},
		{"forceReleaseSemaphore", `{"reason":"","immediate":1,"fencing_token":0}`, []string{"slot", "reason", "immediate", "fencing_token"}},
	} {
		db := &dynamofake.DB{}
		h := newTestHandler(db, io.Discard)
		ev := semEvent(t, tc.op, tc.body)
		var resp events.APIGatewayV2HTTPResponse
		for _, r := range Routes {
			if r.OperationID() == tc.op {
				resp, _ = r.Handle(h, context.Background(), ev)
			}
		}
		var got []string
		for _, e := range decodeBody(t, resp)["errors"].([]any) {
			got = append(got, e.(map[string]any)["field"].(string))
		}
		if resp.StatusCode != 422 || strings.Join(sorted(got), ",") != strings.Join(sorted(tc.fields), ",") {
			t.Errorf("%s %s: got %d with fields %v, want 422 naming %v", tc.op, tc.body, resp.StatusCode, got, tc.fields)
		}
		if len(db.Updates()) != 0 || db.Gets() != 0 {
			t.Errorf("%s: an invalid request reached the store", tc.op)
		}
	}
}

// TestSemaphoreAdminRoutesNeedAnAdministrator: the semaphore admin rows
// are refused to callers outside ADMIN_PRINCIPALS, as the lock ones.
func TestSemaphoreAdminRoutesNeedAnAdministrator(t *testing.T) {
	for _, op := range []string{"listSemaphores", "forceReleaseSemaphore"} {
		db := &dynamofake.DB{}
		h := newTestHandler(db, io.Discard)
		h.SetAdmins([]string{"arn:aws:iam::123456789012:user/admin"})
		resp, _ := h.Admin(context.Background(), semEvent(t, op, `{"slot":0,"reason":"x"}`))
		if p := decodeBody(t, resp); resp.StatusCode != 403 || p["type"] != ProblemTypeBase+"not-an-administrator" || len(db.Updates()) != 0 {
			t.Errorf("%s: got %d %s, want 403 not-an-administrator and no store call", op, resp.StatusCode, resp.Body)
		}
	}
}
