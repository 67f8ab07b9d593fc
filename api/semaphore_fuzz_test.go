package api

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

// The semaphore routes under fuzzing: FuzzSemaphoreHandlers holds them to
// FuzzHandlers' promise (no panic, no 5xx, every 4xx an RFC 9457 problem,
// every 2xx the documented shape) with a fake table in one of the states
// a semaphore can be in.

// Semaphore store states. None of them is a store failure.
const (
	semFree   = iota // writes succeed; a read finds a semaphore of 3 with "holder" in slot 0
	semFull          // writes fail their condition; a read finds a semaphore of 2, both slots held ("h0", "h1")
	semAbsent        // writes fail their condition; there is no item
	semStates
)

// fuzzSemRoutes are the semaphore routes with a body, and status, by
// operation id.
var fuzzSemRoutes = []string{"acquireSemaphore", "semaphoreStatus", "releaseSemaphore", "renewSemaphore", "acquireSemaphoreWait"}

// semItem is a semaphore item of permits permits, counter 7, with a live
// permit of each owner in holders, slot by slot.
func semItem(key types.AttributeValue, permits int, holders ...string) map[string]types.AttributeValue {
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	item := map[string]types.AttributeValue{locklogic.AttrResource: key, locklogic.AttrPermits: n(int64(permits)), locklogic.AttrCounter: n(7)}
	for k, o := range holders {
		i := strconv.Itoa(k)
		item["o"+i] = &types.AttributeValueMemberS{Value: o}
		item["t"+i] = n(int64(5 + k))
		item["a"+i] = n(fuzzT0.Add(-time.Minute).UnixMilli())
		item["n"+i] = n(fuzzT0.Add(-time.Minute).UnixMilli())
		item["e"+i] = n(fuzzT0.Add(30 * time.Second).UnixMilli())
		item["g"+i] = &types.AttributeValueMemberS{Value: "g" + i}
	}
	return item
}

// fuzzSemStore returns a fake table in state that answers the semaphore
// calls as DynamoDB would for it (without the old item of a failed
// condition, as dynalite), and the keys of the items read.
func fuzzSemStore(state int) (*dynamofake.DB, *[]map[string]types.AttributeValue) {
	var reads []map[string]types.AttributeValue
	db := &dynamofake.DB{
		Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			if state != semFree {
				return nil, &types.ConditionalCheckFailedException{}
			}
			// The slot's attributes as written: an acquire's (its updated
			// attributes), a renew's (the whole item), none for a release.
			v := in.ExpressionAttributeValues
			slot := strings.TrimPrefix(in.ExpressionAttributeNames["#o"], "o")
			out := map[string]types.AttributeValue{}
			switch {
			case v[":base"] != nil:
				out["o"+slot], out["a"+slot], out["n"+slot], out["e"+slot], out["g"+slot] = v[":o"], v[":now"], v[":now"], v[":exp"], v[":gid"]
				out["t"+slot] = &types.AttributeValueMemberN{Value: "8"}
				out[locklogic.AttrCounter], out[locklogic.AttrPermits] = out["t"+slot], v[":n"]
			case v[":k"] != nil:
				out = semItem(in.Key[locklogic.AttrResource], 3)
				out["o"+slot], out["n"+slot], out["e"+slot] = v[":o"], v[":now"], v[":exp"]
				out["a"+slot] = &types.AttributeValueMemberN{Value: strconv.FormatInt(fuzzT0.Add(-time.Minute).UnixMilli(), 10)}
				out["t"+slot] = &types.AttributeValueMemberN{Value: "7"}
				if tok, ok := v[":tok"]; ok {
					out["t"+slot] = tok
				}
			}
			return &dynamodb.UpdateItemOutput{Attributes: out}, nil
		},
		Get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			reads = append(reads, in.Key)
			switch state {
			case semFree:
				return &dynamodb.GetItemOutput{Item: semItem(in.Key[locklogic.AttrResource], 3, "holder")}, nil
			case semFull:
				return &dynamodb.GetItemOutput{Item: semItem(in.Key[locklogic.AttrResource], 2, "h0", "h1")}, nil
			}
			return &dynamodb.GetItemOutput{}, nil
		},
	}
	return db, &reads
}

// FuzzSemaphoreHandlers sends one API Gateway v2 event to one of the
// semaphore routes (try-acquire, status, release, renew, waiting acquire): route × name (the
// decoded path parameter) × body × body encoding (as FuzzHandlers) × raw
// path delivered decoded or encoded × store state × IAM user ARN.
func FuzzSemaphoreHandlers(f *testing.F) {
	for _, s := range []struct {
		route, store uint8
		name         string
		body         string
		encoding     uint8
		decodedPath  bool
		arn          string
	}{
		{0, semFree, "api-quota", `{"owner":"w1","ttl_seconds":30,"permits":3}`, 0, false, ""},
		{0, semFull, "api-quota", `{"owner":"w2","ttl_seconds":30,"permits":2}`, 0, false, ""},
		{0, semFull, "api-quota", `{"owner":"w2","ttl_seconds":30,"permits":3}`, 0, false, ""},
		{0, semAbsent, "api quota", `{"owner":"w1","ttl_seconds":1,"permits":1}`, 1, true, "arn:aws:sts::123456789012:assumed-role/worker/i-0abc"},
		{0, semFree, "q", `{"owner":"w1","ttl_seconds":30,"permits":100,"lock_delay_seconds":5}`, 0, false, ""},
		{0, semFree, "q", `{"owner":"w1","ttl_seconds":30,"permits":101}`, 0, false, ""},
		{0, semFree, "q", `{"owner":"w1","ttl_seconds":30,"permits":0}`, 0, false, ""},
		{0, semFree, "q", `{"owner":"w1","ttl_seconds":30,"permits":"3"}`, 0, false, ""},
		{0, semFree, "q", `{"owner":"w1","ttl_seconds":30}`, 0, false, ""},
		{0, semFull, "q", `{"owner":"w1","ttl_seconds":30,"permits":2,"wait_seconds":5}`, 0, false, ""},
		{0, semFull, "q", `{"owner":"w1","ttl_seconds":30,"permits":2,"wait_seconds":0,"queue_ticket":"3ryokmsrhxukz"}`, 0, false, ""},
		{4, semFull, "q", `{"owner":"w1","ttl_seconds":30,"permits":2,"wait_seconds":5}`, 0, false, ""},
		{4, semFree, "q", `{"owner":"w1","ttl_seconds":30,"permits":2,"wait_seconds":1,"queue_ticket":"3ryokmsrhxukz"}`, 0, false, ""},
		{4, semFull, "q", `{"owner":"w1","ttl_seconds":30,"permits":2}`, 0, false, ""},
		{4, semAbsent, "q", `{"owner":"w1","ttl_seconds":30,"permits":3,"wait_seconds":2}`, 1, true, ""},
		{0, semFree, "a/b", `{"owner":"w1","ttl_seconds":30,"permits":2}`, 0, true, ""},
		{1, semFree, "api-quota", ``, 0, false, ""},
		{1, semFull, "api-quota", ``, 0, false, ""},
		{1, semAbsent, "api-quota", ``, 0, false, ""},
		{2, semFree, "api-quota", `{"owner":"w1","slot":0}`, 0, false, ""},
		{2, semFull, "api-quota", `{"owner":"h0","slot":0,"fencing_token":5}`, 0, false, ""},
		{2, semFull, "api-quota", `{"owner":"h0","slot":0,"fencing_token":6}`, 0, false, ""},
		{2, semFull, "api-quota", `{"owner":"w1","slot":1}`, 2, false, ""},
		{2, semAbsent, "api-quota", `{"owner":"w1","slot":0}`, 0, false, ""},
		{2, semFree, "api-quota", `{"owner":"w1","slot":100}`, 0, false, ""},
		{2, semFree, "api-quota", `{"owner":"w1","slot":-1}`, 0, false, ""},
		{2, semFree, "api-quota", `{"owner":"w1"}`, 0, false, ""},
		{3, semFree, "api-quota", `{"owner":"w1","slot":2,"ttl_seconds":60,"fencing_token":9}`, 0, false, ""},
		{3, semFull, "api-quota", `{"owner":"h1","slot":1,"ttl_seconds":60}`, 0, false, "arn:aws:iam::123456789012:user/alice"},
		{3, semFull, "api-quota", `{"owner":"h1","slot":3,"ttl_seconds":60}`, 0, false, ""},
		{3, semAbsent, "api-quota", `{"owner":"w1","slot":0,"ttl_seconds":60}`, 0, false, ""},
		{3, semFree, "api-quota", `{"owner":"w1","slot":0}`, 0, false, ""},
	} {
		f.Add(s.route, s.store, s.name, []byte(s.body), s.encoding, s.decodedPath, s.arn)
	}
	f.Fuzz(func(t *testing.T, route, store uint8, name string, body []byte, encoding uint8, decodedPath bool, arn string) {
		rt := routeNamed(t, fuzzSemRoutes[int(route)%len(fuzzSemRoutes)])
		state := int(store) % semStates
		db, reads := fuzzSemStore(state)
		serveFuzzed(t, fuzzed{rt, name, body, encoding, decodedPath, arn}, db, reads, func(resp events.APIGatewayV2HTTPResponse) {
			checkSemAnswer(t, rt.OperationID(), name, state, resp)
		})
	})
}

// okSemStatuses are the statuses each semaphore route may answer when the
// store works.
var okSemStatuses = map[string][]int{
	"acquireSemaphore":     {200, 400, 409, 413, 422},
	"semaphoreStatus":      {200, 422},
	"releaseSemaphore":     {204, 400, 403, 404, 409, 413, 422},
	"renewSemaphore":       {200, 400, 403, 404, 409, 413, 422},
	"acquireSemaphoreWait": {200, 400, 409, 413, 422},
}

// checkSemAnswer checks resp, the answer of route to a request on
// semaphore name with the fake store in state, against the documented
// shapes (api.md, "Semaphores").
func checkSemAnswer(tb testing.TB, route, name string, state int, resp events.APIGatewayV2HTTPResponse) {
	tb.Helper()
	m := answerBody(tb, route, okSemStatuses[route], resp)
	if m == nil {
		return
	}
	switch route {
	case "semaphoreStatus":
		if state == semAbsent {
			wantKeys(tb, route, m, "name", "holders")
		} else {
			wantKeys(tb, route, m, "name", "permits", "holders")
		}
		if got := jsonString(tb, route, m["name"]); got != name {
			tb.Fatalf("%s: got name %q, want %q", route, got, name)
		}
		var holders []map[string]json.RawMessage
		if err := json.Unmarshal(m["holders"], &holders); err != nil || holders == nil {
			tb.Fatalf("%s: got holders %s, want a list", route, m["holders"])
		}
		for _, p := range holders {
			checkPermit(tb, route, name, p)
		}
	case "renewSemaphore":
		checkRenewed(tb, route, name, m, permitShape)
	case "acquireSemaphore", "acquireSemaphoreWait":
		// Full, with when a permit comes free.
		checkAcquired(tb, route, name, m, resp, permitShape, state == semFree, state == semFull, route == "acquireSemaphoreWait")
	}
}

// checkPermit checks m is a PERMIT of semaphore name.
func checkPermit(tb testing.TB, route, name string, m map[string]json.RawMessage) {
	tb.Helper()
	keys := []string{"name", "slot", "owner", "fencing_token", "acquired_at", "expires_at"}
	if _, ok := m["lock_delay_seconds"]; ok {
		keys = append(keys, "lock_delay_seconds")
	}
	wantKeys(tb, route, m, keys...)
	if got := jsonString(tb, route, m["name"]); got != name {
		tb.Fatalf("%s: got permit name %q, want %q", route, got, name)
	}
	if slot, err := strconv.Atoi(string(m["slot"])); err != nil || slot < 0 || slot >= locklogic.MaxPermits {
		tb.Fatalf("%s: got slot %s, want 0 to %d", route, m["slot"], locklogic.MaxPermits-1)
	}
	if o := jsonString(tb, route, m["owner"]); !validOwner(o) {
		tb.Fatalf("%s: got permit owner %q, want a valid trimmed owner", route, o)
	}
	if tok, err := strconv.ParseInt(string(m["fencing_token"]), 10, 64); err != nil || tok < 1 {
		tb.Fatalf("%s: got fencing_token %s, want a positive integer", route, m["fencing_token"])
	}
	acq, exp := checkTime(tb, route, "acquired_at", m["acquired_at"]), checkTime(tb, route, "expires_at", m["expires_at"])
	if !exp.After(acq) {
		tb.Fatalf("%s: permit expires at %v, not after it was acquired at %v", route, exp, acq)
	}
}
