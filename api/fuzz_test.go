package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

// The fuzz targets of this file call the real handlers and the real body
// parser with events built from fuzzed input. Their property is the one the
// API promises to any client, however hostile: no panic, no 5xx, every 4xx an
// RFC 9457 problem, every 2xx the documented shape. The seed corpus is in
// testdata/fuzz/<FuzzName>/; `make fuzz` runs each target longer.

// fuzzT0 is the clock of the service and the handler under fuzzing.
var fuzzT0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// Store states the fake table of FuzzHandlers can be in. None of them is a
// store failure, so none may lead to a 5xx.
const (
	storeFree   = iota // writes succeed; a read finds a live lease of "holder"
	storeHeld          // writes fail their condition; the old item is a live lease of "holder"
	storeAbsent        // writes fail their condition; there is no item
	// storeQueued: the lock is held by "holder" and the queue's writes
	// succeed (a waiter joins and keeps its place, and answers its
	// queue_ticket); every other write fails its condition without the
	// old item (as dynalite), and a read finds the lease and the queue.
	storeQueued
	storeStates
)

// holderItem is the live lease the fake store reports in storeHeld (and on
// reads in storeFree).
func holderItem(resource types.AttributeValue) map[string]types.AttributeValue {
	n := func(t time.Time) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
	}
	return map[string]types.AttributeValue{
		locklogic.AttrResource:   resource,
		locklogic.AttrOwner:      &types.AttributeValueMemberS{Value: "holder"},
		locklogic.AttrToken:      &types.AttributeValueMemberN{Value: "5"},
		locklogic.AttrAcquiredAt: n(fuzzT0.Add(-time.Minute)),
		locklogic.AttrExpiresAt:  n(fuzzT0.Add(30 * time.Second)),
	}
}

// semHolderItem is the semaphore the fake store reports in storeHeld (and
// on reads in storeFree): one permit, held by "holder".
func semHolderItem(key types.AttributeValue) map[string]types.AttributeValue {
	n := func(t time.Time) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
	}
	return map[string]types.AttributeValue{
		locklogic.AttrResource: key,
		locklogic.AttrPermits:  &types.AttributeValueMemberN{Value: "1"},
		locklogic.AttrCounter:  &types.AttributeValueMemberN{Value: "5"},
		"o0":                   &types.AttributeValueMemberS{Value: "holder"},
		"t0":                   &types.AttributeValueMemberN{Value: "5"},
		"a0":                   n(fuzzT0.Add(-time.Minute)),
		"e0":                   n(fuzzT0.Add(30 * time.Second)),
	}
}

// isSemKey reports whether key is a semaphore's.
func isSemKey(key map[string]types.AttributeValue) bool {
	r, _ := key[locklogic.AttrResource].(*types.AttributeValueMemberS)
	return r != nil && strings.HasPrefix(r.Value, locklogic.SemaphorePrefix)
}

// heldItem is the item the fake store reports as held under key.
func heldItem(key map[string]types.AttributeValue) map[string]types.AttributeValue {
	if isSemKey(key) {
		return semHolderItem(key[locklogic.AttrResource])
	}
	return holderItem(key[locklogic.AttrResource])
}

// fuzzStore returns a fake table in state that answers every call as
// DynamoDB would for it, and the keys of the items read.
func fuzzStore(state int) (*dynamofake.DB, *[]map[string]types.AttributeValue) {
	var reads []map[string]types.AttributeValue
	var queue []types.AttributeValue // storeQueued: the waiters' entries
	queued := func(key types.AttributeValue) map[string]types.AttributeValue {
		item := holderItem(key)
		if queue != nil {
			item[locklogic.AttrQueue] = &types.AttributeValueMemberL{Value: slices.Clone(queue)}
			item[locklogic.AttrQueueUntil] = &types.AttributeValueMemberN{Value: strconv.FormatInt(fuzzT0.Add(time.Minute).UnixMilli(), 10)}
		}
		return item
	}
	db := &dynamofake.DB{
		Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			if state == storeQueued {
				v := in.ExpressionAttributeValues
				if qe, ok := v[":qe"].(*types.AttributeValueMemberL); ok {
					queue = append(queue, qe.Value...) // a join
				}
				_, keep := v[":qt"]
				_, prune := v[":q0"]
				if v[":qe"] == nil && !keep && !prune {
					return nil, &types.ConditionalCheckFailedException{}
				}
				return &dynamodb.UpdateItemOutput{Attributes: queued(in.Key[locklogic.AttrResource])}, nil
			}
			switch state {
			case storeHeld:
				return nil, &types.ConditionalCheckFailedException{Item: heldItem(in.Key)}
			case storeAbsent:
				return nil, &types.ConditionalCheckFailedException{}
			}
			// The item as written: an acquire sets owner, acquired_at and
			// expires_at; a renew sets expires_at and keeps the token it was
			// given, if any.
			v := in.ExpressionAttributeValues
			if isSemKey(in.Key) {
				// A permit's grant: the slot's attributes under the names
				// the write gives them.
				names := in.ExpressionAttributeNames
				return &dynamodb.UpdateItemOutput{Attributes: map[string]types.AttributeValue{
					names["#o"]: v[":o"], names["#t"]: &types.AttributeValueMemberN{Value: "7"}, names["#a"]: v[":now"],
					names["#e"]: v[":exp"], locklogic.AttrPermits: v[":n"],
				}}, nil
			}
			item := map[string]types.AttributeValue{
				locklogic.AttrResource:   in.Key[locklogic.AttrResource],
				locklogic.AttrOwner:      v[":o"],
				locklogic.AttrToken:      &types.AttributeValueMemberN{Value: "7"},
				locklogic.AttrAcquiredAt: v[":now"],
				locklogic.AttrExpiresAt:  v[":exp"],
			}
			if tok, ok := v[":tok"]; ok {
				item[locklogic.AttrToken] = tok
			}
			return &dynamodb.UpdateItemOutput{Attributes: item}, nil
		},
		Get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			reads = append(reads, in.Key)
			switch state {
			case storeAbsent:
				return &dynamodb.GetItemOutput{}, nil
			case storeQueued:
				return &dynamodb.GetItemOutput{Item: queued(in.Key[locklogic.AttrResource])}, nil
			}
			return &dynamodb.GetItemOutput{Item: heldItem(in.Key)}, nil
		},
	}
	return db, &reads
}

// fuzzRoutes are the routes FuzzHandlers picks from by index, by
// operation id.
var fuzzRoutes = []string{"acquire", "status", "release", "renew", "acquireSemaphore", "acquireWait", "acquireSemaphoreWait"}

func routeNamed(tb testing.TB, name string) Route {
	tb.Helper()
	for _, r := range Routes {
		if r.OperationID() == name {
			return r
		}
	}
	tb.Fatalf("no route %q", name)
	return Route{}
}

// FuzzHandlers sends one API Gateway v2 event to one of the seven handlers
// (the lock's try-acquire, status, release, renew and waiting acquire; a
// semaphore's try-acquire and waiting acquire):
// route × resource (the decoded path parameter) × body × body encoding
// (0 text, 1 base64, 2 flagged base64 but sent as is) × raw path delivered
// decoded or encoded × store state × IAM user ARN.
func FuzzHandlers(f *testing.F) {
	long := strings.Repeat("a", MaxBodyBytes-len(`{"owner":"","ttl_seconds":30}`))
	for _, s := range []struct {
		route, store uint8
		resource     string
		body         string
		encoding     uint8
		decodedPath  bool
		arn          string
	}{
		{0, storeFree, "payment:42", `{"owner":"w1","ttl_seconds":30}`, 0, false, ""},
		{0, storeHeld, "payment:42", `{"owner":"w2","ttl_seconds":30}`, 0, false, ""},
		{0, storeAbsent, "job 7", `{"owner":"w1","ttl_seconds":1}`, 1, true, "arn:aws:sts::123456789012:assumed-role/worker/i-0abc"},
		{0, storeFree, "r", `{"owner":"` + long + `","ttl_seconds":30}`, 0, false, ""},
		{0, storeFree, "r", `{"owner":"` + long + `x","ttl_seconds":30}`, 0, false, ""},
		{1, storeFree, "payment:42", ``, 0, false, ""},
		{1, storeAbsent, "a/b", ``, 0, true, ""},
		{2, storeFree, "job-7", `{"owner":"w1","fencing_token":7}`, 1, false, ""},
		{2, storeHeld, "job-7", `{"owner":"holder","fencing_token":6}`, 0, false, ""},
		{2, storeHeld, "job-7", `{"owner":"holder","fencing_token":5}`, 0, false, "arn:aws:iam::123456789012:user/alice"},
		{2, storeAbsent, "job-7", `{"owner":"w1","fencing_token":null}`, 2, false, ""},
		{3, storeFree, "payment:42", `{"owner":"w1","ttl_seconds":60,"fencing_token":1796217278318535}`, 0, false, ""},
		{3, storeHeld, "payment:42", `{"owner":" holder ","ttl_seconds":60}`, 0, false, ""},
		{3, storeAbsent, "payment:42", `{"owner":"w1","ttl_seconds":60}`, 0, false, ""},
		{5, storeHeld, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":20}`, 0, false, ""},
		{5, storeAbsent, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":2}`, 0, false, ""},
		{0, storeHeld, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":20}`, 0, false, ""},
		{5, storeFree, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":0}`, 0, false, ""},
		{0, storeFree, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":0}`, 0, false, ""},
		{5, storeHeld, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":21}`, 0, false, ""},
		{5, storeHeld, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":20,"queue_ticket":"3ryokmsrhxukz"}`, 0, false, ""},
		{0, storeHeld, "payment:42", `{"owner":"w2","ttl_seconds":30,"queue_ticket":"3ryokmsrhxukz"}`, 0, false, ""},
		{0, storeFree, "payment:42", `{"owner":"w2","ttl_seconds":30,"queue_ticket":null}`, 0, false, ""},
		{4, storeFree, "exports", `{"owner":"w1","ttl_seconds":30,"permits":3}`, 0, false, ""},
		{4, storeHeld, "exports", `{"owner":"w2","ttl_seconds":30,"permits":1}`, 0, false, ""},
		{4, storeHeld, "exports", `{"owner":"w2","ttl_seconds":30,"permits":2}`, 0, false, ""},
		{6, storeHeld, "exports", `{"owner":"w2","ttl_seconds":30,"permits":1,"wait_seconds":20}`, 0, false, ""},
		{6, storeAbsent, "exports", `{"owner":"w2","ttl_seconds":30,"permits":1,"wait_seconds":2,"queue_ticket":"3ryokmsrhxukz"}`, 0, false, ""},
		{6, storeFree, "exports", `{"owner":"w2","ttl_seconds":30,"permits":1,"wait_seconds":5,"queue_ticket":null}`, 1, false,
			"arn:aws:sts::123456789012:assumed-role/worker/i-0abc"},
		{6, storeHeld, "exports", `{"owner":"w2","ttl_seconds":30,"permits":1,"wait_seconds":21,"queue_ticket":"#q[0]"}`, 0, false, ""},
		{6, storeHeld, "exports", `{"owner":"w2","ttl_seconds":30,"permits":1,"wait_seconds":"5","queue_ticket":""}`, 0, false, ""},
		{6, storeHeld, "a/b", `{"owner":"w2","ttl_seconds":30,"permits":1,"wait_seconds":1}`, 0, true, ""},
		{4, storeHeld, "exports", `{"owner":"w2","ttl_seconds":30,"permits":1,"wait_seconds":1}`, 0, false, ""},
		{5, storeQueued, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":3}`, 0, false, ""},
		{5, storeQueued, "payment:42", `{"owner":"w2","ttl_seconds":30,"wait_seconds":20,"queue_ticket":"3ryokmsrhxukz"}`, 0, false, "arn:aws:iam::123456789012:user/alice"},
		{0, storeQueued, "payment:42", `{"owner":"w2","ttl_seconds":30}`, 0, false, ""},
		{1, storeQueued, "payment:42", ``, 0, false, ""},
		{2, storeQueued, "payment:42", `{"owner":"holder"}`, 0, false, ""},
		{3, storeQueued, "payment:42", `{"owner":"w1","ttl_seconds":5}`, 0, false, ""},
	} {
		f.Add(s.route, s.store, s.resource, []byte(s.body), s.encoding, s.decodedPath, s.arn)
	}
	f.Fuzz(func(t *testing.T, route, store uint8, resource string, body []byte, encoding uint8, decodedPath bool, arn string) {
		rt := routeNamed(t, fuzzRoutes[int(route)%len(fuzzRoutes)])
		state := int(store) % storeStates
		db, reads := fuzzStore(state)
		serveFuzzed(t, fuzzed{rt, resource, body, encoding, decodedPath, arn}, db, reads, func(resp events.APIGatewayV2HTTPResponse) {
			checkAnswer(t, rt.OperationID(), resource, state, resp)
		})
	})
}

// fuzzed is one fuzzed request: its route, the decoded path parameter, and
// how its body and path are delivered (see fuzzEvent).
type fuzzed struct {
	rt          Route
	value       string
	body        []byte
	encoding    uint8
	decodedPath bool
	arn         string
}

// serveFuzzed is the harness of both fuzz targets: it sends f to its
// route's handler over db, has check judge the answer, and holds the
// request to the API's promise: the handler returns no error, a try never
// waits, a client error (400, 413, 422) stays off the store, and every key
// and owner that reached the store is valid. reads are the keys db read.
func serveFuzzed(t *testing.T, f fuzzed, db *dynamofake.DB, reads *[]map[string]types.AttributeValue, check func(events.APIGatewayV2HTTPResponse)) {
	t.Helper()
	rt := f.rt
	param, key, validate := "resource", f.value, locklogic.ValidateResource
	if strings.HasPrefix(rt.Path, "/semaphores/") {
		param, key, validate = "name", locklogic.SemaphorePrefix+f.value, locklogic.ValidateSemaphoreName
	}
	req := fuzzEvent(rt, param, f.value, f.decodedPath, f.body, f.encoding, f.arn)
	resp, err := rt.Handle(fuzzHandler(db), context.Background(), req)
	if err != nil {
		t.Fatalf("%s: handler returned error %v, want nil (failures are problem answers)", rt.Key(), err)
	}
	check(resp)
	if op := rt.OperationID(); resp.StatusCode == 200 && (op == "acquire" || op == "acquireSemaphore") {
		// A try never waits: a body asking it to was refused. (Status
		// reads no body; renew and release have their own members.)
		var m map[string]json.RawMessage
		if json.Unmarshal(f.body, &m) == nil && integerLiteral(m["wait_seconds"]) && string(m["wait_seconds"]) != "0" &&
			!strings.HasPrefix(string(m["wait_seconds"]), "-") {
			t.Fatalf("%s: got 200 for a body with wait_seconds %s, want 422 naming it", rt.Key(), m["wait_seconds"])
		}
	}

	reached := len(db.Updates()) > 0 || db.Gets() > 0
	if c := resp.StatusCode; reached && (c == 400 || c == 413 || c == 422) {
		t.Errorf("%s: got %d after %d writes and %d reads, want a client error to stay off the store", rt.Key(), c, len(db.Updates()), db.Gets())
	}
	keys := *reads
	for _, in := range db.Updates() {
		keys = append(keys, in.Key)
		o, _ := in.ExpressionAttributeValues[":o"].(*types.AttributeValueMemberS)
		if qe, ok := in.ExpressionAttributeValues[":qe"].(*types.AttributeValueMemberL); ok && o == nil && len(qe.Value) == 1 {
			// A waiter's join: the owner is in its queue entry.
			if m, ok := qe.Value[0].(*types.AttributeValueMemberM); ok {
				o, _ = m.Value[locklogic.AttrOwner].(*types.AttributeValueMemberS)
			}
		}
		if o == nil {
			t.Fatalf("%s: write without an owner value: %s", rt.Key(), aws.ToString(in.UpdateExpression))
		}
		if !validOwner(o.Value) {
			t.Errorf("%s: owner %q reached the store; it is not a valid trimmed owner", rt.Key(), o.Value)
		}
	}
	for _, k := range keys {
		r, _ := k[locklogic.AttrResource].(*types.AttributeValueMemberS)
		if r == nil || r.Value != key {
			t.Fatalf("%s: store key %v, want %q", rt.Key(), k, key)
		}
		var v locklogic.ValidationError
		if validate(f.value, &v); v.Err() != nil {
			t.Errorf("%s: %s %q reached the store: %v", rt.Key(), param, f.value, v.Err())
		}
	}
}

// validOwner reports whether s is an owner as the service stores it: valid
// and already trimmed.
func validOwner(s string) bool {
	var v locklogic.ValidationError
	return locklogic.NormalizeOwner(s, &v) == s && v.Err() == nil
}

// okStatuses are the statuses each route may answer when the store works.
var okStatuses = map[string][]int{
	"acquire": {200, 400, 413, 422},
	"status":  {200, 404, 422},
	"release": {204, 400, 403, 404, 409, 413, 422},
	"renew":   {200, 400, 403, 404, 409, 413, 422},
	// 409: permits-mismatch (the held semaphore has 1 permit).
	"acquireSemaphore":     {200, 400, 409, 413, 422},
	"acquireWait":          {200, 400, 413, 422},
	"acquireSemaphoreWait": {200, 400, 409, 413, 422},
}

// checkAnswer checks resp, the answer of route to a request on resource with
// the fake store in state, against the API's documented shapes.
func checkAnswer(tb testing.TB, route, resource string, state int, resp events.APIGatewayV2HTTPResponse) {
	tb.Helper()
	m := answerBody(tb, route, okStatuses[route], resp)
	if m == nil {
		return
	}
	switch route {
	case "status":
		checkLock(tb, route, resource, m)
	case "renew":
		checkRenewed(tb, route, resource, m, lockShape)
	case "acquire", "acquireWait":
		// A waiter's place: only where the queue's writes succeed.
		checkAcquired(tb, route, resource, m, resp, lockShape, state == storeFree, state == storeHeld, state == storeQueued && route == "acquireWait")
	case "acquireSemaphore", "acquireSemaphoreWait":
		// The fake store refuses every write when held or absent, the
		// joins too: no place to answer.
		checkAcquired(tb, route, resource, m, resp, permitShape, state == storeFree, state == storeHeld, false)
	}
}

// leaseShape is how an answer shows a kind of lease: its member in an
// acquire's or a renewal's answer and its check, the member naming its lock
// or semaphore, and the one telling when the lease that blocks it ends.
type leaseShape struct {
	member, name, until string
	check               func(tb testing.TB, route, name string, m map[string]json.RawMessage)
}

var (
	lockShape   = leaseShape{member: "lock", name: "resource", until: "expires_at", check: checkLock}
	permitShape = leaseShape{member: "permit", name: "name", until: "free_at", check: checkPermit}
)

// checkAcquired checks m, the answer of an acquire on name: a grant when
// granted, else refused, saying when the blocking lease ends (and a
// Retry-After) when until is known, and with a valid queue_ticket only when
// ticketOK.
func checkAcquired(tb testing.TB, route, name string, m map[string]json.RawMessage, resp events.APIGatewayV2HTTPResponse, k leaseShape,
	granted, until, ticketOK bool) {
	tb.Helper()
	acquired := string(m["acquired"])
	if want := strconv.FormatBool(granted); acquired != want {
		tb.Fatalf("%s: got acquired %s, want %s: %s", route, acquired, want, resp.Body)
	}
	if granted {
		wantKeys(tb, route, m, "acquired", k.member)
		k.check(tb, route, name, jsonObject(tb, route, string(m[k.member])))
		return
	}
	keys := []string{"acquired", k.name}
	if t, ok := m["queue_ticket"]; ok {
		var v locklogic.ValidationError
		if locklogic.ValidateQueueTicket(jsonString(tb, route, t), &v); v.Err() != nil || jsonString(tb, route, t) == "" || !ticketOK {
			tb.Fatalf("%s: got queue_ticket %s, want one only from a waiting route where the queue's writes succeed", route, t)
		}
		keys = append(keys, "queue_ticket")
	}
	if until {
		keys = append(keys, k.until)
		checkTime(tb, route, k.until, m[k.until])
		if resp.Headers["retry-after"] == "" {
			tb.Errorf("%s: refused with a known %s but no Retry-After", route, k.until)
		}
	}
	wantKeys(tb, route, m, keys...)
	if got := jsonString(tb, route, m[k.name]); got != name {
		tb.Fatalf("%s: got %s %q, want %q", route, k.name, got, name)
	}
}

// checkRenewed checks m is a renewal's answer: renewed, and the lease.
func checkRenewed(tb testing.TB, route, name string, m map[string]json.RawMessage, k leaseShape) {
	tb.Helper()
	wantKeys(tb, route, m, "renewed", k.member)
	if string(m["renewed"]) != "true" {
		tb.Fatalf("%s: got renewed %s, want true", route, m["renewed"])
	}
	k.check(tb, route, name, jsonObject(tb, route, string(m[k.member])))
}

// answerBody checks what every answer of route shares: a status among ok,
// an RFC 9457 problem for a 4xx, no body with a 204, else a JSON object,
// which it returns (nil when there is no more to check).
func answerBody(tb testing.TB, route string, ok []int, resp events.APIGatewayV2HTTPResponse) map[string]json.RawMessage {
	tb.Helper()
	c := resp.StatusCode
	if !slices.Contains(ok, c) {
		tb.Fatalf("%s: got status %d (body %q), want one of %v", route, c, resp.Body, ok)
	}
	if c >= 400 {
		checkProblem(tb, route, resp)
		return nil
	}
	if c == 204 {
		if resp.Body != "" {
			tb.Fatalf("%s: got 204 with body %q, want none", route, resp.Body)
		}
		return nil
	}
	if ct := resp.Headers["content-type"]; ct != "application/json" {
		tb.Fatalf("%s: got 200 with content-type %q, want application/json", route, ct)
	}
	return jsonObject(tb, route, resp.Body)
}

// checkProblem checks that resp is an RFC 9457 problem of this API about
// route's resource (its instance under /locks/ or /semaphores/), with the
// members its type has: a permits-mismatch the semaphore's permits, a
// not-found perhaps force_released.
func checkProblem(tb testing.TB, route string, resp events.APIGatewayV2HTTPResponse) {
	tb.Helper()
	if ct := resp.Headers["content-type"]; ct != "application/problem+json" {
		tb.Fatalf("%s: got %d with content-type %q, want application/problem+json", route, resp.StatusCode, ct)
	}
	m := jsonObject(tb, route, resp.Body)
	keys := []string{"type", "title", "status", "detail", "instance"}
	typ := jsonString(tb, route, m["type"])
	switch {
	case resp.StatusCode == 422:
		keys = append(keys, "errors")
	case typ == ProblemTypeBase+"permits-mismatch":
		keys = append(keys, "permits")
		if p, err := strconv.Atoi(string(m["permits"])); err != nil || p < 1 || p > locklogic.MaxPermits {
			tb.Fatalf("%s: got permits %s in a permits-mismatch, want 1 to %d", route, m["permits"], locklogic.MaxPermits)
		}
	case resp.StatusCode == 404 && string(m["force_released"]) == "true":
		keys = append(keys, "force_released")
	}
	wantKeys(tb, route, m, keys...)
	if !strings.HasPrefix(typ, ProblemTypeBase) || len(typ) == len(ProblemTypeBase) {
		tb.Fatalf("%s: got problem type %q, want %s<slug>", route, typ, ProblemTypeBase)
	}
	if jsonString(tb, route, m["title"]) == "" || jsonString(tb, route, m["detail"]) == "" {
		tb.Fatalf("%s: problem with an empty title or detail: %s", route, resp.Body)
	}
	if s := string(m["status"]); s != strconv.Itoa(resp.StatusCode) {
		tb.Fatalf("%s: got problem status %s in a %d answer", route, s, resp.StatusCode)
	}
	inst := jsonString(tb, route, m["instance"])
	prefix := "/locks/"
	if strings.Contains(strings.ToLower(route), "semaphore") {
		prefix = "/semaphores/"
	}
	if !strings.HasPrefix(inst, prefix) || !isURIPath(inst) {
		tb.Fatalf("%s: got instance %q, want a percent-encoded path under %s", route, inst, prefix)
	}
	if resp.StatusCode == 422 {
		var errs []map[string]json.RawMessage
		if err := json.Unmarshal(m["errors"], &errs); err != nil || len(errs) == 0 {
			tb.Fatalf("%s: got 422 errors %s, want a non-empty list", route, m["errors"])
		}
		for _, e := range errs {
			// The field may be "": an unknown member can have an empty name.
			wantKeys(tb, route, e, "field", "detail")
			if jsonString(tb, route, e["field"]); jsonString(tb, route, e["detail"]) == "" {
				tb.Fatalf("%s: got field error %s, want a detail", route, m["errors"])
			}
		}
	}
}

// isURIPath reports whether s holds only characters a URI path may carry
// unescaped, and well-formed percent escapes.
func isURIPath(s string) bool {
	if _, err := url.PathUnescape(s); err != nil {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"<>\^`+"`{|}#?", c) >= 0 {
			return false
		}
	}
	return true
}

// checkLock checks m is a LOCK on resource.
func checkLock(tb testing.TB, route, resource string, m map[string]json.RawMessage) {
	tb.Helper()
	wantKeys(tb, route, m, "resource", "owner", "fencing_token", "acquired_at", "expires_at")
	if got := jsonString(tb, route, m["resource"]); got != resource {
		tb.Fatalf("%s: got lock resource %q, want %q", route, got, resource)
	}
	if o := jsonString(tb, route, m["owner"]); !validOwner(o) {
		tb.Fatalf("%s: got lock owner %q, want a valid trimmed owner", route, o)
	}
	if tok, err := strconv.ParseInt(string(m["fencing_token"]), 10, 64); err != nil || tok < 1 {
		tb.Fatalf("%s: got fencing_token %s, want a positive integer", route, m["fencing_token"])
	}
	acq, exp := checkTime(tb, route, "acquired_at", m["acquired_at"]), checkTime(tb, route, "expires_at", m["expires_at"])
	if !exp.After(acq) {
		tb.Fatalf("%s: lock expires at %v, not after it was acquired at %v", route, exp, acq)
	}
}

// checkTime checks raw is a JSON string in TimeFormat, UTC.
func checkTime(tb testing.TB, route, name string, raw json.RawMessage) time.Time {
	tb.Helper()
	s := jsonString(tb, route, raw)
	ts, err := time.Parse(TimeFormat, s)
	if err != nil || ts.UTC().Format(TimeFormat) != s {
		tb.Fatalf("%s: got %s %q, want RFC 3339 UTC with milliseconds", route, name, s)
	}
	return ts
}

func jsonObject(tb testing.TB, route, s string) map[string]json.RawMessage {
	tb.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		tb.Fatalf("%s: got body %q, want a JSON object", route, s)
	}
	return m
}

func jsonString(tb testing.TB, route string, raw json.RawMessage) string {
	tb.Helper()
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		tb.Fatalf("%s: got %s, want a JSON string", route, raw)
	}
	return s
}

// wantKeys checks m has exactly the members keys.
func wantKeys(tb testing.TB, route string, m map[string]json.RawMessage, keys ...string) {
	tb.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			tb.Fatalf("%s: got members %v, want %v", route, slices.Sorted(maps.Keys(m)), keys)
		}
	}
	if len(m) != len(keys) {
		tb.Fatalf("%s: got members %v, want %v", route, slices.Sorted(maps.Keys(m)), keys)
	}
}

// FuzzParseBody checks the body parser against encoding/json: it accepts
// exactly the bodies that are one JSON object of valid UTF-8 within
// MaxBodyBytes, and its typed members agree with what encoding/json reads,
// except where the API is stricter on purpose (no lone surrogate escapes, no
// number that is not an integer literal).
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{
		`{"owner":"w1","ttl_seconds":30}`,
		`{"owner":"w1","ttl_seconds":30,"fencing_token":7}`,
		`{"owner":"w1","ttl_seconds":"3600"}`,
		`{"owner":"w1","ttl_seconds":60.0}`,
		`{"owner":"w1","ttl_seconds":1e3}`,
		`{"owner":"w1","ttl_seconds":-0}`,
		`{"owner":"w1","ttl_seconds":9223372036854775808}`,
		`{"owner":"\ud800","ttl_seconds":30}`,
		`{"owner":"\ud83d\ude00","ttl_seconds":30}`,
		`{"owner":"\\ud800"}`,
		`{"owner":"a","owner":"b"}`,
		`{"owner":"w1"} {}`,
		`[{"owner":"w1"}]`,
		`null`,
		` `,
		"{\"owner\":\"\xff\"}",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"owner":"w1","ttl_seconds":30}`), true)
	f.Add([]byte(`eyJvd25lciI6IncxIiwiZmVuY2luZ190b2tlbiI6N30=`), false)
	f.Fuzz(func(t *testing.T, body []byte, encode bool) {
		req := events.APIGatewayV2HTTPRequest{Body: string(body)}
		if encode {
			req.Body, req.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
		b, err := parseBody(&req, "owner", "ttl_seconds", "fencing_token")
		trimmed := bytes.TrimSpace(body)
		wantOK := len(body) <= MaxBodyBytes && utf8.Valid(body) && len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(body)
		if err != nil {
			var berr *bodyError
			if !errors.As(err, &berr) || berr.detail == "" {
				t.Fatalf("got error %#v, want a *bodyError with a detail", err)
			}
			want := 400
			if len(body) > MaxBodyBytes {
				want = 413
			}
			if berr.status != want {
				t.Fatalf("got status %d for a body of %d bytes, want %d", berr.status, len(body), want)
			}
			if wantOK {
				t.Fatalf("rejected %q (%s), which encoding/json reads as one object", body, berr.detail)
			}
			return
		}
		if !wantOK {
			t.Fatalf("accepted %q, which is not one JSON object of valid UTF-8 within %d bytes", body, MaxBodyBytes)
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(body, &members); err != nil {
			t.Fatal(err)
		}

		n := len(b.errs.Fields)
		if s := b.str("owner"); len(b.errs.Fields) == n {
			var want string
			if err := json.Unmarshal(b.members["owner"], &want); err != nil || s != want {
				t.Fatalf("owner: got %q, want %q as encoding/json reads %s", s, want, b.members["owner"])
			}
			raw := string(b.members["owner"])
			replaced := strings.Count(raw, "\uFFFD") + strings.Count(strings.ToLower(raw), `\ufffd`)
			if strings.Count(s, "\uFFFD") > replaced {
				t.Fatalf("owner: %s was accepted as %q: a lone surrogate became U+FFFD", raw, s)
			}
		}
		for _, name := range []string{"ttl_seconds", "fencing_token"} {
			n := len(b.errs.Fields)
			v := b.int(name, false)
			raw, present := b.members[name]
			if len(b.errs.Fields) > n {
				// Rejected: fine for anything encoding/json would not read
				// into an int64 from an integer literal.
				var i int64
				if json.Unmarshal(raw, &i) == nil && !bytes.ContainsAny(raw, ".eE") && string(raw) != "null" {
					t.Fatalf("%s: rejected %s, an int64 integer literal", name, raw)
				}
				continue
			}
			if v == nil {
				if present && string(raw) != "null" {
					t.Fatalf("%s: got no value for %s, want a value or an error", name, raw)
				}
				continue
			}
			if got := strconv.FormatInt(*v, 10); got != string(raw) && string(raw) != "-0" {
				t.Fatalf("%s: got %d for %s, want only integer literals read exactly", name, *v, raw)
			}
		}
	})
}

// fuzzEvent is the API Gateway event of a fuzzed request to rt: the path
// parameter param set to value (escaped in the raw path unless
// decodedPath), body sent as is, base64-encoded, or flagged base64 without
// being so (encoding % 3), and an IAM caller when arn is set.
func fuzzEvent(rt Route, param, value string, decodedPath bool, body []byte, encoding uint8, arn string) events.APIGatewayV2HTTPRequest {
	path := url.PathEscape(value)
	if decodedPath {
		path = value
	}
	req := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       rt.Key(),
		RawPath:        strings.Replace(rt.Path, "{"+param+"}", path, 1),
		PathParameters: map[string]string{param: value},
		Headers:        map[string]string{"content-type": "application/json"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:  rt.Key(),
			RequestID: "fuzz",
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: rt.Method},
		},
	}
	if len(body) > 0 {
		switch encoding % 3 {
		case 0:
			req.Body = string(body)
		case 1:
			req.Body, req.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		case 2:
			req.Body, req.IsBase64Encoded = string(body), true
		}
	}
	if arn != "" {
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn},
		}
	}
	return req
}

// fuzzHandler is the handler over db, with fair waiting on as in the
// service's own setups (api.Config). Its clock moves only when a waiting
// acquire sleeps, so a wait of up to 20 s costs no real time.
func fuzzHandler(db *dynamofake.DB) *Handler {
	clock := fuzzT0
	now := func() time.Time { return clock }
	sleep := func(_ context.Context, d time.Duration) error { clock = clock.Add(d); return nil }
	return NewHandler(locklogic.New(db, locklogic.Config{Table: "t", Now: now, Sleep: sleep, FairWaiting: true}), slog.New(slog.DiscardHandler), now)
}
