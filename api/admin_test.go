package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

// logLines splits a log into its JSON objects.
func logLines(tb testing.TB, logs *bytes.Buffer) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			tb.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestForceReleaseEvent: a real API Gateway event of an IAM-signed admin
// ends the lease, answers what it ended, and writes one audit line naming
// the caller (session included), the lease and the reason.
func TestForceReleaseEvent(t *testing.T) {
	ended := lockItem("w1", 1796212800000001, t0.Add(30*time.Second))
	ended[locklogic.AttrPrincipal] = &types.AttributeValueMemberS{Value: "arn:aws:sts::123456789012:assumed-role/worker"}
	db := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{Attributes: ended}, nil
	}}
	var logs bytes.Buffer
	h := newTestHandler(db, &logs)
	resp, err := h.Admin(context.Background(), loadEvent(t, "admin-force-release-iam.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ended":{"resource":"payment:42","owner":"w1","principal":"arn:aws:sts::123456789012:assumed-role/worker","fencing_token":1796212800000001,"acquired_at":"2026-12-02T12:00:00.000Z","expires_at":"2026-12-02T12:00:30.000Z"},"reason":"holder host i-0abc is gone (INC-123)","immediate":false,"free_at":"2026-12-02T12:00:00.000Z"}`
	if resp.StatusCode != 200 || resp.Body != want {
		t.Fatalf("got %d %s, want 200 %s", resp.StatusCode, resp.Body, want)
	}
	var audits []map[string]any
	for _, l := range logLines(t, &logs) {
		if l["msg"] == "audit" {
			audits = append(audits, l)
		}
	}
	if len(audits) != 1 {
		t.Fatalf("got %d audit lines, want 1: %s", len(audits), logs.String())
	}
	for k, v := range map[string]any{
		"action": "force-release", "outcome": "force-released", "principal": "arn:aws:sts::123456789012:assumed-role/admin/alice",
		"resource": "payment:42", "owner": "w1", "owner_principal": "arn:aws:sts::123456789012:assumed-role/worker",
		"fencing_token": 1796212800000001.0, "reason": "holder host i-0abc is gone (INC-123)", "request_id": "E5bPWlT1HkCGLzy=",
	} {
		if audits[0][k] != v {
			t.Errorf("audit %s: got %v, want %v", k, audits[0][k], v)
		}
	}

	// Nothing ended: the refused attempt is audited too.
	db.Update = func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, &types.ConditionalCheckFailedException{}
	}
	db.Get = func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return &dynamodb.GetItemOutput{}, nil }
	logs.Reset()
	resp, _ = h.Admin(context.Background(), loadEvent(t, "admin-force-release-iam.json"))
	if resp.StatusCode != 404 || !strings.Contains(logs.String(), `"msg":"audit","action":"force-release","outcome":"not-found"`) {
		t.Errorf("got %d %s and log %s, want 404 and an audit line of the refusal", resp.StatusCode, resp.Body, logs.String())
	}
}

// TestForceReleaseBody: the reason is required and checked like an owner;
// a bad body never reaches the store.
func TestForceReleaseBody(t *testing.T) {
	for _, tc := range []struct{ name, body, field string }{
		{"Missing", `{}`, "reason"},
		{"Blank", `{"reason":"  "}`, "reason"},
		{"NotAString", `{"reason":5}`, "reason"},
		{"TooLong", `{"reason":"` + strings.Repeat("x", locklogic.MaxReasonBytes+1) + `"}`, "reason"},
		{"Control", `{"reason":"a\u0000b"}`, "reason"},
		{"Unknown", `{"reason":"r","owner":"w1"}`, "owner"},
		{"ImmediateNotABool", `{"reason":"r","immediate":"yes"}`, "immediate"},
		{"TokenNotPositive", `{"reason":"r","fencing_token":0}`, "fencing_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{}
			ev := loadEvent(t, "admin-force-release-iam.json")
			ev.Body = tc.body
			resp, _ := newTestHandler(db, io.Discard).Admin(context.Background(), ev)
			want422(t, resp, tc.field)
			if len(db.Updates()) != 0 {
				t.Errorf("an invalid force release reached the store")
			}
		})
	}
}

// TestListEvent: the listing's page and cursor, and its query checked
// before any Scan.
func TestListEvent(t *testing.T) {
	live := lockItem("w1", 7, t0.Add(30*time.Second))
	live[locklogic.AttrLockDelay] = &types.AttributeValueMemberN{Value: "60000"}
	more := lockItem("w2", 8, t0.Add(30*time.Second))
	more[locklogic.AttrResource] = &types.AttributeValueMemberS{Value: "payment:43"}
	db := &dynamofake.DB{ScanFunc: func(in *dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
		return &dynamodb.ScanOutput{Items: []map[string]types.AttributeValue{live, more, more}, ScannedCount: 10}, nil
	}}
	var logs bytes.Buffer
	resp, _ := newTestHandler(db, &logs).Admin(context.Background(), loadEvent(t, "admin-list-iam.json"))
	want := `{"locks":[{"resource":"payment:42","owner":"w1","fencing_token":7,"acquired_at":"2026-12-02T12:00:00.000Z","expires_at":"2026-12-02T12:00:30.000Z","lock_delay_seconds":60},` +
		`{"resource":"payment:43","owner":"w2","fencing_token":8,"acquired_at":"2026-12-02T12:00:00.000Z","expires_at":"2026-12-02T12:00:30.000Z"}],"cursor":"cGF5bWVudDo0Mw"}`
	if resp.StatusCode != 200 || resp.Body != want {
		t.Fatalf("got %d %s\nwant 200 %s", resp.StatusCode, resp.Body, want)
	}
	if v := db.Scans()[0].ExpressionAttributeValues[":pre"].(*types.AttributeValueMemberS).Value; v != "payment:" {
		t.Errorf("got prefix %q, want payment:", v)
	}
	if line := logLines(t, &logs)[0]; line["outcome"] != "listed" || line["Route"] != "admin" {
		t.Errorf("got log line %v, want outcome listed on route admin", line)
	}

	for _, tc := range []struct {
		name  string
		query map[string]string
		field string
	}{
		{"Unknown", map[string]string{"limt": "5"}, "limt"},
		{"LimitNotInteger", map[string]string{"limit": "5.0"}, "limit"},
		{"LimitZero", map[string]string{"limit": "0"}, "limit"},
		{"LimitTooLarge", map[string]string{"limit": "1001"}, "limit"},
		{"LimitLeadingZero", map[string]string{"limit": "05"}, "limit"},
		{"BadCursor", map[string]string{"cursor": "%%%"}, "cursor"},
		{"PrefixSlash", map[string]string{"prefix": "a/"}, "prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &dynamofake.DB{}
			ev := loadEvent(t, "admin-list-iam.json")
			ev.QueryStringParameters = tc.query
			resp, _ := newTestHandler(db, io.Discard).Admin(context.Background(), ev)
			want422(t, resp, tc.field)
			if len(db.Scans()) != 0 {
				t.Errorf("an invalid listing reached the store")
			}
		})
	}
}

// TestAdminDispatch: the admin function serves exactly the Admin rows and
// answers any other route key as API Gateway answers an unknown route.
func TestAdminDispatch(t *testing.T) {
	var admin int
	for _, r := range Routes {
		if r.Admin {
			admin++
			if !strings.HasPrefix(r.Path, "/admin/") || r.Name != "admin" || r.Timeout != AdminTimeout {
				t.Errorf("%s: an admin row must be the admin function's, under /admin/, with AdminTimeout", r.Key())
			}
		} else if strings.HasPrefix(r.Path, "/admin/") {
			t.Errorf("%s: under /admin/ but not marked Admin", r.Key())
		}
	}
	if admin != 6 {
		t.Errorf("got %d admin rows, want 6 (list and force release, of locks, of semaphores and of read/write locks)", admin)
	}
	ev := loadEvent(t, "acquire-iam.json")
	db := &dynamofake.DB{}
	resp, _ := newTestHandler(db, io.Discard).Admin(context.Background(), ev)
	if resp.StatusCode != 404 || len(db.Updates()) != 0 {
		t.Errorf("admin function given an acquire event: got %d %s, want 404 and no write", resp.StatusCode, resp.Body)
	}
}

// TestAcquireLockDelay: lock_delay_seconds reaches the store and comes back
// in the lease; anything but an integer in range is 422.
func TestAcquireLockDelay(t *testing.T) {
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		it := lockItem("w1", 7, t0.Add(30*time.Second))
		it[locklogic.AttrLockDelay] = in.ExpressionAttributeValues[":d"]
		return &dynamodb.UpdateItemOutput{Attributes: it}, nil
	}}
	ev := loadEvent(t, "acquire-iam.json")
	ev.Body = `{"owner":"w1","ttl_seconds":30,"lock_delay_seconds":45}`
	resp, _ := newTestHandler(db, io.Discard).Acquire(context.Background(), ev)
	if lock, _ := decodeBody(t, resp)["lock"].(map[string]any); resp.StatusCode != 200 || lock["lock_delay_seconds"] != 45.0 {
		t.Fatalf("got %d %s, want the lease with lock_delay_seconds 45", resp.StatusCode, resp.Body)
	}
	for _, body := range []string{
		`{"owner":"w1","ttl_seconds":30,"lock_delay_seconds":"45"}`,
		`{"owner":"w1","ttl_seconds":30,"lock_delay_seconds":301}`,
		`{"owner":"w1","ttl_seconds":30,"lock_delay_seconds":-1}`,
		`{"owner":"w1","ttl_seconds":30,"lock_delay_seconds":1.5}`,
	} {
		ev.Body = body
		resp, _ := newTestHandler(db, io.Discard).Acquire(context.Background(), ev)
		if resp.StatusCode != 422 || !strings.Contains(resp.Body, `"field":"lock_delay_seconds"`) {
			t.Errorf("%s: got %d %s, want 422 naming lock_delay_seconds", body, resp.StatusCode, resp.Body)
		}
	}
}

// checkEMF fails unless line is a valid CloudWatch Embedded Metric Format
// record: an "_aws" directive with a millisecond timestamp and one metric
// set of a namespace, every metric it names a number at the top level and
// every dimension a string there. It returns the directive's metric names.
func checkEMF(tb testing.TB, line map[string]any) []string {
	tb.Helper()
	aws, ok := line["_aws"].(map[string]any)
	if !ok {
		tb.Fatalf("no _aws object: %v", line)
	}
	if ts, ok := aws["Timestamp"].(float64); !ok || ts < 1e12 || ts != float64(int64(ts)) {
		tb.Errorf("_aws.Timestamp %v: want epoch milliseconds", aws["Timestamp"])
	}
	sets, _ := aws["CloudWatchMetrics"].([]any)
	if len(sets) != 1 {
		tb.Fatalf("_aws.CloudWatchMetrics %v: want one metric set", aws["CloudWatchMetrics"])
	}
	set := sets[0].(map[string]any)
	if ns, _ := set["Namespace"].(string); ns == "" {
		tb.Errorf("no Namespace: %v", set)
	}
	dims, _ := set["Dimensions"].([]any)
	if len(dims) == 0 {
		tb.Errorf("no Dimensions: %v", set)
	}
	for _, d := range dims {
		for _, name := range d.([]any) {
			if _, ok := line[name.(string)].(string); !ok || name == "resource" {
				tb.Errorf("dimension %v: want a top-level string, never the resource", name)
			}
		}
	}
	var names []string
	for _, m := range set["Metrics"].([]any) {
		name := m.(map[string]any)["Name"].(string)
		if _, ok := line[name].(float64); !ok {
			tb.Errorf("metric %s: got %v at the top level, want a number", name, line[name])
		}
		names = append(names, name)
	}
	return names
}

// TestMetrics: every request line carries its route's metrics — the
// outcome as a dimension, WaitTime only for a waiting acquire (the wait
// function's) — through the fast logger and through any slog handler alike.
func TestMetrics(t *testing.T) {
	held := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, &types.ConditionalCheckFailedException{Item: lockItem("w9", 5, t0.Add(time.Hour))}
	}, Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
		return &dynamodb.GetItemOutput{Item: lockItem("w9", 5, t0.Add(time.Hour))}, nil
	}}
	granted := &dynamofake.DB{Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 5, t0.Add(time.Hour))}, nil
	}}
	for _, tc := range []struct {
		name        string
		db          locklogic.DynamoDBAPI
		event, body string
		route       func(*Handler, context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
		wantRoute   string
		wantOutcome string
		wantWait    bool
	}{
		{"Acquired", granted, "acquire-iam.json", "", (*Handler).Acquire, "acquire", "acquired", false},
		{"AcquiredAfterWaitAsked", granted, "acquire-iam.json", `{"owner":"w1","ttl_seconds":30,"wait_seconds":1}`, (*Handler).AcquireWait, "wait", "acquired", true},
		{"Contended", held, "acquire-iam.json", "", (*Handler).Acquire, "acquire", "contended", false},
		{"ContendedAfterWait", held, "acquire-iam.json", `{"owner":"w1","ttl_seconds":30,"wait_seconds":1}`, (*Handler).AcquireWait, "wait", "contended", true},
		{"TryRefusesWait", held, "acquire-iam.json", `{"owner":"w1","ttl_seconds":30,"wait_seconds":1}`, (*Handler).Acquire, "acquire", "invalid", false},
		{"Invalid", held, "acquire-iam.json", `{"owner":"w1"}`, (*Handler).Acquire, "acquire", "invalid", false},
		{"InvalidJSON", held, "acquire-iam.json", `{`, (*Handler).Acquire, "acquire", "invalid", false},
		{"Forbidden", held, "release-base64.json", "", (*Handler).Release, "release", "forbidden", false},
		{"Unavailable", slowDB{}, "acquire-iam.json", "", (*Handler).Acquire, "acquire", "unavailable", false},
		{"ForceReleased", granted, "admin-force-release-iam.json", "", (*Handler).Admin, "admin", "force-released", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fast := range []bool{true, false} {
				var logs bytes.Buffer
				log := NewLoggerTo(&logs, slog.LevelInfo)
				if !fast {
					log = slog.New(slog.NewJSONHandler(&logs, nil))
				}
				now := func() time.Time { return t0 }
				h := NewHandler(locklogic.New(tc.db, locklogic.Config{Table: "t", Now: now,
					Sleep: func(context.Context, time.Duration) error { return context.Canceled }}), log, now)
				h.SetStoreBudget(50 * time.Millisecond)
				h.SetMetricsNamespace("Locks/Test")
				ev := loadEvent(t, tc.event)
				if tc.body != "" {
					ev.Body = tc.body
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, _ = tc.route(h, ctx, ev)
				cancel()
				var line map[string]any
				for _, l := range logLines(t, &logs) {
					if l["msg"] == "request" {
						line = l
					}
				}
				names := checkEMF(t, line)
				if line["Route"] != tc.wantRoute || line["Outcome"] != tc.wantOutcome || line["Requests"] != 1.0 {
					t.Errorf("fast %v: got Route %v, Outcome %v, Requests %v; want %s, %s, 1", fast, line["Route"], line["Outcome"], line["Requests"], tc.wantRoute, tc.wantOutcome)
				}
				if ns := line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Namespace"]; ns != "Locks/Test" {
					t.Errorf("got namespace %v, want Locks/Test", ns)
				}
				_, hasWait := line["WaitTime"]
				if want := []string{"Requests", "Latency"}; tc.wantWait {
					want = append(want, "WaitTime")
					if strings.Join(names, ",") != strings.Join(want, ",") || !hasWait {
						t.Errorf("fast %v: got metrics %v, want %v", fast, names, want)
					}
				} else if strings.Join(names, ",") != strings.Join(want, ",") || hasWait {
					t.Errorf("fast %v: got metrics %v (WaitTime member %v), want %v", fast, names, hasWait, want)
				}
			}
		})
	}
}

// TestMetricOutcomes: every outcome a request line can carry maps to one
// of the Outcome dimension's values.
func TestMetricOutcomes(t *testing.T) {
	allowed := map[string]bool{}
	for _, o := range MetricOutcomes {
		allowed[o] = true
	}
	outcomes := []string{"acquired", "held", "released", "renewed", "found", "listed", "force-released", "full",
		"changed", "unchanged", kindPermitsMismatch.slug, kindValidation.slug, kindInvalidJSON.slug, kindTooLarge.slug, kindInternal.slug}
	for _, row := range errorTable {
		outcomes = append(outcomes, row.kind.slug)
	}
	for _, o := range outcomes {
		if m := metricOutcome(o); !allowed[m] {
			t.Errorf("outcome %q: got Outcome %q, not one of %v", o, m, MetricOutcomes)
		}
	}
}

// want422 checks resp is a 422 whose first field error names field.
func want422(tb testing.TB, resp events.APIGatewayV2HTTPResponse, field string) {
	tb.Helper()
	errs, _ := decodeBody(tb, resp)["errors"].([]any)
	if resp.StatusCode != 422 || len(errs) == 0 || errs[0].(map[string]any)["field"] != field {
		tb.Fatalf("got %d %s, want 422 naming %s", resp.StatusCode, resp.Body, field)
	}
}
