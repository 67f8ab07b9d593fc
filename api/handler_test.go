package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func lockItem(owner string, token int64, exp time.Time) map[string]types.AttributeValue {
	n := func(i int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(i, 10)}
	}
	return map[string]types.AttributeValue{
		locklogic.AttrResource:   &types.AttributeValueMemberS{Value: "payment:42"},
		locklogic.AttrOwner:      &types.AttributeValueMemberS{Value: owner},
		locklogic.AttrToken:      n(token),
		locklogic.AttrAcquiredAt: n(t0.UnixMilli()),
		locklogic.AttrExpiresAt:  n(exp.UnixMilli()),
	}
}

func newTestHandler(db locklogic.DynamoDBAPI, logTo io.Writer) *Handler {
	now := func() time.Time { return t0 }
	return NewHandler(locklogic.New(db, locklogic.Config{Table: "secret-table-name", Now: now}), slog.New(slog.NewJSONHandler(logTo, nil)), now)
}

func loadEvent(tb testing.TB, name string) events.APIGatewayV2HTTPRequest {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(b, &ev); err != nil {
		tb.Fatal(err)
	}
	return ev
}

func decodeBody(tb testing.TB, resp events.APIGatewayV2HTTPResponse) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &m); err != nil {
		tb.Fatalf("body %q: %v", resp.Body, err)
	}
	return m
}

// TestAcquireEvent runs a real API Gateway v2 event with an IAM identity
// through Acquire and checks the write and the response.
func TestAcquireEvent(t *testing.T) {
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 1796212800000001, t0.Add(30*time.Second))}, nil
	}}
	var logs bytes.Buffer
	resp, err := newTestHandler(db, &logs).Acquire(context.Background(), loadEvent(t, "acquire-iam.json"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Headers["content-type"] != "application/json" {
		t.Fatalf("got %d %v, want 200 application/json", resp.StatusCode, resp.Headers)
	}
	want := `{"acquired":true,"lock":{"resource":"payment:42","owner":"w1","fencing_token":1796212800000001,"acquired_at":"2026-12-02T12:00:00.000Z","expires_at":"2026-12-02T12:00:30.000Z"}}`
	if resp.Body != want {
		t.Errorf("got body %s, want %s", resp.Body, want)
	}
	in := db.Updates()[0]
	if p := in.ExpressionAttributeValues[":p"].(*types.AttributeValueMemberS).Value; p != "arn:aws:sts::123456789012:assumed-role/worker" {
		t.Errorf("got principal %q, want the role without its session", p)
	}
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", logs.String(), err)
	}
	for k, v := range map[string]any{"request_id": "C3zNUjR9FiAEJxw=", "route": "POST /locks/{resource}", "resource": "payment:42", "outcome": "acquired", "status": 200.0} {
		if line[k] != v {
			t.Errorf("log %s: got %v, want %v", k, line[k], v)
		}
	}
	if _, ok := line["latency_ms"]; !ok {
		t.Errorf("log line lacks latency_ms: %s", logs.String())
	}
}

// TestReleaseBase64Event: API Gateway base64-encodes bodies of non-text
// content types.
func TestReleaseBase64Event(t *testing.T) {
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{}, nil
	}}
	resp, _ := newTestHandler(db, io.Discard).Release(context.Background(), loadEvent(t, "release-base64.json"))
	if resp.StatusCode != 204 || resp.Body != "" {
		t.Fatalf("got %d %q, want 204 and no body", resp.StatusCode, resp.Body)
	}
	if tok := db.Updates()[0].ExpressionAttributeValues[":tok"].(*types.AttributeValueMemberN).Value; tok != "7" {
		t.Errorf("got token condition %s, want 7", tok)
	}
	// That a request without IAM identity is bound to no principal is an
	// outcome: internal/integration TestPrincipalBinding and every
	// anonymous release there.
}

// TestHeldRetryAfter: when DynamoDB returns the holder's item with the
// failed condition, the answer carries its expiry and Retry-After.
func TestHeldRetryAfter(t *testing.T) {
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, &types.ConditionalCheckFailedException{Item: lockItem("w1", 5, t0.Add(2500*time.Millisecond))}
	}}
	ev := loadEvent(t, "acquire-iam.json")
	resp, _ := newTestHandler(db, io.Discard).Acquire(context.Background(), ev)
	body := decodeBody(t, resp)
	if resp.StatusCode != 200 || body["acquired"] != false || body["resource"] != "payment:42" || body["expires_at"] != "2026-12-02T12:00:02.500Z" {
		t.Fatalf("got %d %s, want 200 acquired:false with the holder's expires_at", resp.StatusCode, resp.Body)
	}
	if ra := resp.Headers["retry-after"]; ra != "3" {
		t.Errorf("got Retry-After %q, want 3 (2.5 s rounded up)", ra)
	}
	if _, leaked := body["owner"]; leaked {
		t.Errorf("held answer leaks the holder's owner: %s", resp.Body)
	}
	if db.Gets() != 0 {
		t.Errorf("got %d reads, want none", db.Gets())
	}
}

// TestStoreFailuresHideInternals: 5xx answers carry no SDK text or table
// name, and 503 says when to retry.
func TestStoreFailuresHideInternals(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
	}{
		{"Throttled", &types.ProvisionedThroughputExceededException{Message: ptr("Throughput exceeds the current capacity of your table secret-table-name")}, 503},
		{"TableMissing", &types.ResourceNotFoundException{Message: ptr("Requested resource not found: Table: secret-table-name not found")}, 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, tc.err }}
			var logs bytes.Buffer
			resp, err := newTestHandler(db, &logs).Acquire(context.Background(), loadEvent(t, "acquire-iam.json"))
			if err != nil {
				t.Fatalf("handler returned error %v; it must answer instead", err)
			}
			if resp.StatusCode != tc.status || resp.Headers["content-type"] != "application/problem+json" {
				t.Fatalf("got %d %v, want %d problem+json", resp.StatusCode, resp.Headers, tc.status)
			}
			if strings.Contains(resp.Body, "secret-table-name") || strings.Contains(resp.Body, "Exception") || strings.Contains(resp.Body, `"acquired"`) {
				t.Errorf("body leaks internals or claims an outcome: %s", resp.Body)
			}
			if tc.status == 503 && resp.Headers["retry-after"] == "" {
				t.Errorf("503 without Retry-After")
			}
			if !strings.Contains(logs.String(), "secret-table-name") {
				t.Errorf("the cause should be logged for operators: %s", logs.String())
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestBadInputNeverReachesStore runs malformed bodies through every route
// and checks the problem answer and that DynamoDB was not called.
func TestBadInputNeverReachesStore(t *testing.T) {
	routes := map[string]HandlerFunc{}
	cases := []struct {
		name   string
		route  string
		body   string
		b64    bool
		status int
		slug   string
	}{
		{"ErrTTLString", "acquire", `{"owner":"w1","ttl_seconds":"3600"}`, false, 422, "validation-failed"},
		{"ErrTTLFloat", "acquire", `{"owner":"w1","ttl_seconds":60.5}`, false, 422, "validation-failed"},
		{"ErrTTLFloatZeroFraction", "renew", `{"owner":"w1","ttl_seconds":60.0}`, false, 422, "validation-failed"},
		{"ErrTTLBool", "acquire", `{"owner":"w1","ttl_seconds":true}`, false, 422, "validation-failed"},
		{"ErrTTLMissing", "renew", `{"owner":"w1"}`, false, 422, "validation-failed"},
		{"ErrOwnerBlank", "release", `{"owner":" "}`, false, 422, "validation-failed"},
		{"ErrOwnerNumber", "release", `{"owner":7}`, false, 422, "validation-failed"},
		{"ErrUnknownMember", "release", `{"owner":"w1","force":true}`, false, 422, "validation-failed"},
		{"ErrInvalidJSON", "acquire", `{"owner":"w1",}`, false, 400, "invalid-json"},
		{"ErrNotObject", "renew", `[]`, false, 400, "invalid-json"},
		{"ErrInvalidUTF8", "acquire", "{\"owner\":\"w\xff\",\"ttl_seconds\":1}", false, 400, "invalid-json"},
		{"ErrBadBase64", "acquire", `%%%`, true, 400, "invalid-json"},
		{"ErrTooLarge", "acquire", `{"owner":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, false, 413, "payload-too-large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{}
			h := newTestHandler(db, io.Discard)
			for _, rt := range Routes {
				routes[rt.Name] = func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
					return rt.Handle(h, ctx, req)
				}
			}
			ev := events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"resource": "r"}, Body: tc.body, IsBase64Encoded: tc.b64}
			resp, _ := routes[tc.route](context.Background(), ev)
			p := decodeBody(t, resp)
			if resp.StatusCode != tc.status || p["type"] != ProblemTypeBase+tc.slug || p["status"] != float64(tc.status) {
				t.Errorf("got %d %s, want %d %s", resp.StatusCode, resp.Body, tc.status, tc.slug)
			}
			if len(db.Updates()) != 0 || db.Gets() != 0 {
				t.Errorf("bad input reached DynamoDB")
			}
		})
	}
}

// TestErrorTable checks every domain outcome has its own status and slug.
func TestErrorTable(t *testing.T) {
	cases := []struct {
		err    error
		status int
		slug   string
	}{
		{locklogic.ErrNotFound, 404, "not-found"},
		{locklogic.ErrForbidden, 403, "forbidden"},
		{locklogic.ErrStaleToken, 409, "stale-token"},
		{locklogic.ErrUnavailable, 503, "service-unavailable"},
		{&locklogic.ValidationError{Fields: []locklogic.FieldError{{Field: "owner", Detail: "x"}}}, 422, "validation-failed"},
		{&bodyError{400, "x"}, 400, "invalid-json"},
		{&bodyError{413, "x"}, 413, "payload-too-large"},
		{errors.New("anything else"), 500, "internal"},
	}
	for _, tc := range cases {
		t.Run(tc.slug, func(t *testing.T) {
			p := problemFor(errors.Join(errors.New("context"), tc.err), "r")
			if p.Status != tc.status || p.Type != ProblemTypeBase+tc.slug || p.Title == "" || p.Detail == "" {
				t.Errorf("got %+v, want %d %s with title and detail", p, tc.status, tc.slug)
			}
		})
	}
}

func TestPrincipal(t *testing.T) {
	cases := []struct {
		name string
		iam  *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription
		want string
	}{
		{"NoIdentity", nil, ""},
		{"User", &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: "arn:aws:iam::123456789012:user/bob"}, "arn:aws:iam::123456789012:user/bob"},
		{"AssumedRoleDropsSession", &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: "arn:aws:sts::123456789012:assumed-role/worker/i-0abc"}, "arn:aws:sts::123456789012:assumed-role/worker"},
		{"AssumedRoleOtherPartition", &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: "arn:aws-cn:sts::123456789012:assumed-role/w/s"}, "arn:aws-cn:sts::123456789012:assumed-role/w"},
		{"NoARNUsesUserID", &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "1", UserID: "AROAX:sess"}, "account:1:id:AROAX"},
		{"Empty", &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var req events.APIGatewayV2HTTPRequest
			if tc.iam != nil {
				req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: tc.iam}
			}
			if got := principal(req); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cfg, err := ConfigFromEnv(env(map[string]string{"TABLE_NAME": "t", "MAX_TTL_SECONDS": "60", "TOMBSTONE_RETENTION_SECONDS": "3600", "LOG_LEVEL": "debug"}))
	if err != nil || cfg.Table != "t" || cfg.MaxTTLSeconds != 60 || cfg.Retention != time.Hour || cfg.LogLevel != slog.LevelDebug {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	if !cfg.OldItemOnFailure {
		t.Errorf("no endpoint override: got OldItemOnFailure false, want true (DynamoDB itself)")
	}
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"TABLE_NAME": "t", "DYNAMODB_ENDPOINT": "http://127.0.0.1:4567"}, false},
		{map[string]string{"TABLE_NAME": "t", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:4567"}, false},
		{map[string]string{"TABLE_NAME": "t", "AWS_ENDPOINT_URL": "http://127.0.0.1:4566"}, false},
		{map[string]string{"TABLE_NAME": "t", "DYNAMODB_ENDPOINT": "https://vpce-1.dynamodb.eu-west-1.vpce.amazonaws.com", "DYNAMODB_RETURNS_OLD_ITEM": "true"}, true},
		{map[string]string{"TABLE_NAME": "t", "DYNAMODB_RETURNS_OLD_ITEM": "false"}, false},
	} {
		if got, err := ConfigFromEnv(env(tc.env)); err != nil || got.OldItemOnFailure != tc.want {
			t.Errorf("%v: got OldItemOnFailure %v (%v), want %v", tc.env, got.OldItemOnFailure, err, tc.want)
		}
	}
	_, err = ConfigFromEnv(env(map[string]string{"MAX_TTL_SECONDS": "0", "LOG_LEVEL": "loud", "DYNAMODB_RETURNS_OLD_ITEM": "maybe"}))
	for _, want := range []string{"TABLE_NAME", "MAX_TTL_SECONDS", "LOG_LEVEL", "DYNAMODB_RETURNS_OLD_ITEM"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %s", err, want)
		}
	}
	// Absurd bounds are refused at start-up: 2^63-1 seconds would overflow
	// expires_at into the distant past and free every lock at once.
	for _, tc := range []struct{ name, value string }{
		{"MAX_TTL_SECONDS", "9223372036854775807"},
		{"MAX_TTL_SECONDS", "31536001"},
		{"TOMBSTONE_RETENTION_SECONDS", "9223372036854775807"},
		{"TOMBSTONE_RETENTION_SECONDS", "315360001"},
	} {
		if _, err := ConfigFromEnv(env(map[string]string{"TABLE_NAME": "t", tc.name: tc.value})); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%s: got %v, want an error naming %s", tc.name, tc.value, err, tc.name)
		}
	}
	if cfg, err := ConfigFromEnv(env(map[string]string{"TABLE_NAME": "t", "MAX_TTL_SECONDS": "31536000"})); err != nil || cfg.MaxTTLSeconds != MaxTTLLimit {
		t.Errorf("MAX_TTL_SECONDS at the limit: got %d, %v", cfg.MaxTTLSeconds, err)
	}
}

// TestConfigLockDelayAndMetrics: MAX_LOCK_DELAY_SECONDS (default 300, 0
// off) and METRICS_NAMESPACE (default LockService, a valid CloudWatch
// namespace).
func TestConfigLockDelayAndMetrics(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		m["TABLE_NAME"] = "t"
		return func(k string) string { return m[k] }
	}
	cfg, err := ConfigFromEnv(env(map[string]string{}))
	if err != nil || cfg.MaxLockDelaySeconds != 300 || cfg.MetricsNamespace != "LockService" || cfg.ServiceConfig().MaxLockDelaySeconds != 300 {
		t.Fatalf("defaults: got %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"MAX_LOCK_DELAY_SECONDS", "0", true},
		{"MAX_LOCK_DELAY_SECONDS", "86400", true},
		{"MAX_LOCK_DELAY_SECONDS", "86401", false},
		{"MAX_LOCK_DELAY_SECONDS", "-1", false},
		{"MAX_LOCK_DELAY_SECONDS", "5m", false},
		{"METRICS_NAMESPACE", "Locks/prod-eu", true},
		{"METRICS_NAMESPACE", "AWS/Lambda", false},
		{"METRICS_NAMESPACE", "Locks\"prod", false},
		{"METRICS_NAMESPACE", strings.Repeat("a", 256), false},
	} {
		cfg, err := ConfigFromEnv(env(map[string]string{tc.name: tc.value}))
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.name)) {
			t.Errorf("%s=%s: got %v, want ok %v", tc.name, tc.value, err, tc.ok)
		}
		if tc.name == "MAX_LOCK_DELAY_SECONDS" && tc.value == "0" && cfg.ServiceConfig().MaxLockDelaySeconds != -1 {
			t.Errorf("MAX_LOCK_DELAY_SECONDS=0 must turn lock-delay off")
		}
	}
}

// TestPanicBecomesProblem: a panic below the handler is a logged 500, not
// a crashed invocation.
func TestPanicBecomesProblem(t *testing.T) {
	db := &dynamofake.DB{Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { panic("boom") }}
	var logs bytes.Buffer
	resp, err := newTestHandler(db, &logs).Status(context.Background(), events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"resource": "r"}})
	if err != nil || resp.StatusCode != 500 || strings.Contains(resp.Body, "boom") {
		t.Fatalf("got %d %s %v, want a 500 problem without the panic text", resp.StatusCode, resp.Body, err)
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Errorf("panic not logged: %s", logs.String())
	}
}

// slowDB blocks every call until the caller's context ends, like a store
// that stopped answering.
type slowDB struct{}

func (slowDB) UpdateItem(ctx context.Context, _ *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (slowDB) GetItem(ctx context.Context, _ *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (slowDB) Scan(ctx context.Context, _ *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSlowStoreAnswersBeforeDeadline: a hanging store yields a 503 problem
// before the Lambda deadline, not a runtime timeout.
func TestSlowStoreAnswersBeforeDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deadlineReserve+200*time.Millisecond)
	defer cancel()
	resp, err := newTestHandler(slowDB{}, io.Discard).Acquire(ctx, loadEvent(t, "acquire-iam.json"))
	if err != nil || resp.StatusCode != 503 || resp.Headers["retry-after"] == "" {
		t.Fatalf("got %d %s %v, want 503 with Retry-After", resp.StatusCode, resp.Body, err)
	}
	if ctx.Err() != nil {
		t.Errorf("answered only after the invocation deadline")
	}
}

func TestLoneSurrogate(t *testing.T) {
	cases := []struct {
		raw  string
		want bool
	}{
		{`"plain"`, false},
		{`"\ud83d\ude00"`, false}, // a pair: 😀
		{`"\uD83D\uDE00x"`, false},
		{`"\ufffd"`, false},
		{`"\\ud800"`, false}, // an escaped backslash, then text
		{`"\ud800"`, true},
		{`"\udc00"`, true},
		{`"\ud800x"`, true},
		{`"\ud800\u0041"`, true},
		{`"\ufffd\ud800"`, true},
		{`"\\\ud800"`, true},
		{`"x\ude00\ud83d"`, true},
	}
	for _, tc := range cases {
		t.Run(tc.raw, func(t *testing.T) {
			if got := loneSurrogate([]byte(tc.raw)); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStoreBudget: without any invocation deadline, a store that hangs is
// given up after the handler's budget with a 503.
func TestStoreBudget(t *testing.T) {
	h := newTestHandler(slowDB{}, io.Discard)
	h.storeBudget = 50 * time.Millisecond
	done := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() {
		resp, _ := h.Status(context.Background(), events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"resource": "r"}})
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp.StatusCode != 503 {
			t.Fatalf("got %d %s, want 503", resp.StatusCode, resp.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler waited for the store without a budget")
	}
}

func TestCanonicalInstance(t *testing.T) {
	for raw, want := range map[string]string{
		"/locks/payment:42":       "/locks/payment:42",
		"/locks/a b/renew":        "/locks/a%20b/renew",
		"/locks/a%20b/renew":      "/locks/a%20b/renew",
		"/locks/100%":             "/locks/100%25",
		"/locks/zahlung-ä":        "/locks/zahlung-%C3%A4",
		"/locks/x%2Fy":            "/locks/x%2Fy",
		"/locks/x'; DROP TABLE t": "/locks/x%27%3B%20DROP%20TABLE%20t",
	} {
		if got := canonicalPath(raw); got != want {
			t.Errorf("canonicalPath(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for ep, want := range map[string]bool{
		"http://127.0.0.1:4567": true, "http://localhost:8000": true, "http://[::1]:8000": true,
		"https://dynamodb.eu-central-1.amazonaws.com": false, "": false, "http://10.0.0.5:8000": false,
	} {
		if got := isLoopback(ep); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", ep, got, want)
		}
	}
}

// TestQueueTicketProblem: a waiting acquire's 503 that may leave the
// waiter a place (locklogic.QueueTicketError) carries that place as
// queue_ticket, in the shape api/openapi.yaml documents; a plain 503 does
// not.
func TestQueueTicketProblem(t *testing.T) {
	doc := loadOpenAPI(t)
	schema := doc.Components.Schemas["ServiceUnavailableProblem"].Value
	unavailable := fmt.Errorf("acquire %q: %w: %w", "r", locklogic.ErrUnavailable, errors.New("500 from the store"))
	for _, tc := range []struct {
		name   string
		err    error
		ticket string
	}{
		{"WithTicket", &locklogic.QueueTicketError{Ticket: "3ryokmsrhxukz", Err: unavailable}, "3ryokmsrhxukz"},
		{"Plain", unavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := problemResponse(problemFor(tc.err, "r"))
			var body map[string]any
			if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
				t.Fatal(err)
			}
			got, _ := body["queue_ticket"].(string)
			if resp.StatusCode != 503 || got != tc.ticket {
				t.Errorf("got %d with queue_ticket %q, want 503 with %q: %s", resp.StatusCode, got, tc.ticket, resp.Body)
			}
			if err := schema.VisitJSON(body); err != nil {
				t.Errorf("the answer is not a ServiceUnavailableProblem: %v\n%s", err, resp.Body)
			}
		})
	}
}

// delayDB answers every call after d (or when the caller's context ends):
// writes refused without the old item, as dynalite refuses them, and
// reads with item.
type delayDB struct {
	d    time.Duration
	item map[string]types.AttributeValue
}

func (s delayDB) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.d):
		return nil
	}
}

func (s delayDB) UpdateItem(ctx context.Context, _ *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return nil, &types.ConditionalCheckFailedException{Message: aws.String("refused")}
}

func (s delayDB) GetItem(ctx context.Context, _ *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return &dynamodb.GetItemOutput{Item: s.item}, nil
}

func (s delayDB) Scan(ctx context.Context, _ *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return nil, errors.New("no scan")
}

// TestOneStoreBudgetPerRequest: a semaphore try-acquire may make up to 4
// writes and 3 reads, but all within one store budget from its arrival,
// not one each: with every store call taking 60 % of the budget, it
// answers 503 once the budget is spent (after its second call), where a
// budget per call let it make all seven.
func TestOneStoreBudgetPerRequest(t *testing.T) {
	const budget = 250 * time.Millisecond
	// Every slot free but refused on write: the acquire keeps planning.
	item := map[string]types.AttributeValue{"resource": &types.AttributeValueMemberS{Value: "sem/r"},
		"permits": &types.AttributeValueMemberN{Value: "3"}}
	h := newTestHandler(delayDB{d: budget * 6 / 10, item: item}, io.Discard)
	h.SetStoreBudget(budget)
	ev := events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"name": "r"}, RawPath: "/semaphores/r",
		RouteKey: rows[routeSemAcquire].key, Body: `{"owner":"w1","ttl_seconds":30,"permits":3}`}
	start := time.Now()
	resp, err := h.Acquire(context.Background(), ev)
	took := time.Since(start)
	t.Logf("answered %d in %v with every store call taking %v (budget %v)", resp.StatusCode, took.Round(time.Millisecond), budget*6/10, budget)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("got %d %s %v, want 503", resp.StatusCode, resp.Body, err)
	}
	if took > 2*budget {
		t.Errorf("answered in %v, want within the one store budget %v (+ %v)", took, budget, budget)
	}
}
