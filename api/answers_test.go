package api

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

// TestEveryFieldErrorAtOnce: one 422 names every invalid field of a
// request, those the body parser rejects (unknown, wrong type) and those
// the service's rules reject (range, blank owner) together.
func TestEveryFieldErrorAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, route, body string
		fields            []string
	}{
		{"AcquireUnknownBlankZero", "acquire", `{"owner":"","ttl_seconds":0,"wait":5}`, []string{"wait", "owner", "ttl_seconds"}},
		{"AcquireRanges", "acquire", `{"owner":"w1","ttl_seconds":0,"wait_seconds":99,"lock_delay_seconds":-1}`,
			[]string{"ttl_seconds", "wait_seconds", "lock_delay_seconds"}},
		{"AcquireTypeAndRange", "acquire", `{"owner":" ","ttl_seconds":"30","wait_seconds":21}`, []string{"ttl_seconds", "owner", "wait_seconds"}},
		// A try that waits and queues: both named with the rest.
		{"TryWaitsAndQueues", "acquire", `{"owner":"","ttl_seconds":30,"wait_seconds":5,"queue_ticket":"3ryokmsrhxukz","lock_delay_seconds":-1}`,
			[]string{"owner", "wait_seconds", "queue_ticket", "lock_delay_seconds"}},
		{"WaitMissing", "wait", `{"owner":"w1","ttl_seconds":0,"lock_delay_seconds":-1}`, []string{"ttl_seconds", "wait_seconds", "lock_delay_seconds"}},
		{"WaitRangesAndTicket", "wait", `{"owner":"w1","ttl_seconds":30,"wait_seconds":0,"queue_ticket":"a b"}`, []string{"wait_seconds", "queue_ticket"}},
		{"RenewMissingAndToken", "renew", `{"owner":"","fencing_token":0}`, []string{"owner", "ttl_seconds", "fencing_token"}},
		{"ReleaseBlankAndToken", "release", `{"owner":" ","fencing_token":-3}`, []string{"owner", "fencing_token"}},
		{"ForceReleaseAll", "admin", `{"reason":"","immediate":1,"fencing_token":0,"x":1}`, []string{"x", "reason", "immediate", "fencing_token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{}
			resp := serveRoute(t, newTestHandler(db, io.Discard), tc.route, tc.body)
			p := decodeBody(t, resp)
			var got []string
			errs, _ := p["errors"].([]any)
			for _, e := range errs {
				got = append(got, e.(map[string]any)["field"].(string))
			}
			if resp.StatusCode != 422 || strings.Join(sorted(got), ",") != strings.Join(sorted(tc.fields), ",") {
				t.Errorf("got %d with fields %v, want 422 naming %v: %s", resp.StatusCode, got, tc.fields, resp.Body)
			}
			if len(db.Updates()) != 0 || db.Gets() != 0 {
				t.Errorf("an invalid request reached the store")
			}
		})
	}
}

// TestEmptyBodyHints: the 400 for an empty body shows the route's own body.
func TestEmptyBodyHints(t *testing.T) {
	for route, want := range map[string]string{
		"acquire": exampleLease, "wait": exampleLeaseWait, "renew": exampleLease, "release": exampleRelease, "admin": exampleForceRelease,
	} {
		resp := serveRoute(t, newTestHandler(&dynamofake.DB{}, io.Discard), route, " ")
		if p := decodeBody(t, resp); resp.StatusCode != 400 || !strings.Contains(p["detail"].(string), want) {
			t.Errorf("%s: got %d %s, want 400 with the hint %s", route, resp.StatusCode, resp.Body, want)
		}
	}
}

// TestWaitCountsFromArrival: a wait's end is counted from API Gateway's
// timeEpoch, so a request that spent 1.8 s of a 2 s wait before the
// handler ran (a cold start) is answered 503 without a write; the same
// request on time writes. An event too old to be this invocation's (a
// recorded one) counts from the handler's start.
func TestWaitCountsFromArrival(t *testing.T) {
	for _, tc := range []struct {
		name   string
		age    time.Duration
		status int
		writes int
	}{
		{"ColdStartAteTheWait", 1800 * time.Millisecond, 503, 0},
		{"OnTime", 10 * time.Millisecond, 200, 1},
		{"RecordedEvent", time.Hour, 200, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 5, t0.Add(30*time.Second))}, nil
			}}
			ev := waitEvent(`{"owner":"w1","ttl_seconds":30,"wait_seconds":2}`)
			ev.RequestContext.TimeEpoch = t0.Add(-tc.age).UnixMilli()
			resp, _ := newTestHandler(db, io.Discard).AcquireWait(context.Background(), ev)
			if resp.StatusCode != tc.status || len(db.Updates()) != tc.writes {
				t.Errorf("got %d %s after %d writes, want %d after %d", resp.StatusCode, resp.Body, len(db.Updates()), tc.status, tc.writes)
			}
			if tc.status == 503 && !strings.Contains(resp.Body, "wait_seconds") {
				t.Errorf("the 503 does not say why: %s", resp.Body)
			}
		})
	}
}

// TestForceReleaseAnswers: the problems of a force release and of the
// holder it evicted carry what the caller needs: the lease that stayed
// (409, current) and that the lease was force released (404).
func TestForceReleaseAnswers(t *testing.T) {
	newer := lockItem("w2", 9, t0.Add(time.Minute))
	newer[locklogic.AttrAcquiredAt] = &types.AttributeValueMemberN{Value: "1796212801000"} // t0 + 1 s
	db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, &types.ConditionalCheckFailedException{}
	}, Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
		return &dynamodb.GetItemOutput{Item: newer}, nil
	}}
	resp := serveRoute(t, newTestHandler(db, io.Discard), "admin", `{"reason":"stuck","fencing_token":8}`)
	p := decodeBody(t, resp)
	cur, _ := p["current"].(map[string]any)
	if resp.StatusCode != 409 || p["type"] != ProblemTypeBase+"stale-token" || cur["fencing_token"] != 9.0 || cur["owner"] != "w2" {
		t.Errorf("got %d %s, want 409 stale-token with the current lease (w2, 9)", resp.StatusCode, resp.Body)
	}

	forced := lockItem("w1", 8, t0)
	forced[locklogic.AttrForcedAt] = &types.AttributeValueMemberN{Value: "1796212800000"}
	db.Get = func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
		return &dynamodb.GetItemOutput{Item: forced}, nil
	}
	for route, body := range map[string]string{"renew": `{"owner":"w1","ttl_seconds":30}`, "release": `{"owner":"w1"}`} {
		resp := serveRoute(t, newTestHandler(db, io.Discard), route, body)
		p := decodeBody(t, resp)
		if resp.StatusCode != 404 || p["type"] != ProblemTypeBase+"not-found" || p["force_released"] != true {
			t.Errorf("%s: got %d %s, want 404 not-found with force_released", route, resp.StatusCode, resp.Body)
		}
	}
}

// serveRoute serves body on the route named route (the admin function:
// its force release) for resource "r".
func serveRoute(tb testing.TB, h *Handler, route, body string) events.APIGatewayV2HTTPResponse {
	tb.Helper()
	ev := events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"resource": "r"}, RawPath: "/locks/r", Body: body}
	for _, rt := range Routes {
		if rt.Name == route && (route != "admin" || rt.Method == "DELETE") {
			ev.RouteKey = rt.Key()
			resp, err := rt.Handle(h, context.Background(), ev)
			if err != nil {
				tb.Fatal(err)
			}
			return resp
		}
	}
	tb.Fatalf("no route %s", route)
	return events.APIGatewayV2HTTPResponse{}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
