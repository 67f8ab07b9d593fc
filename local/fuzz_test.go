package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

// FuzzRunner sends fuzzed HTTP requests (method, request target, content
// type, body) through the local runner to the real handlers over a fake
// table whose writes succeed. The request is parsed by net/http from the
// wire form, so the runner sees what a real server would hand it. Property:
// no panic, no 5xx; API Gateway's own answers ({"message": …}) only for an
// unmatched route (404) or a path parameter that is not valid
// percent-encoding (400); every other answer is the handler's, and obeys the
// API's shapes. The seed corpus is in testdata/fuzz/FuzzRunner/.
func FuzzRunner(f *testing.F) {
	for _, s := range []struct{ method, target, contentType, body string }{
		{"POST", "/locks/payment:42", "application/json", `{"owner":"w1","ttl_seconds":30}`},
		{"POST", "/locks/payment%3A42/renew", "application/json; charset=utf-8", `{"owner":"w1","ttl_seconds":30,"fencing_token":7}`},
		{"DELETE", "/locks/job-7", "application/octet-stream", `{"owner":"w1","fencing_token":7}`},
		{"DELETE", "/locks/job-7", "", `{"owner":"w1"}`},
		{"GET", "/locks/payment:42", "", ""},
		{"GET", "/locks/a%2Fb", "", ""},
		{"POST", "/locks/a%2Fb/renew", "text/plain", `{"owner":"w1","ttl_seconds":30}`},
		{"GET", "/locks/%zz", "", ""},
		{"GET", "/locks/", "", ""},
		{"POST", "/locks//renew", "application/json", `{}`},
		{"PUT", "/locks/x", "application/json", `{"owner":"w1","ttl_seconds":30}`},
		{"post", "/locks/x", "application/json", `{"owner":"w1","ttl_seconds":30}`},
		{"GET", "http://elsewhere.test/locks/x?a=1&a=2", "", ""},
		{"POST", "/locks/%ED%A0%80", "application/json", `{"owner":"w1","ttl_seconds":30}`},
		{"POST", "/locks/a%00b", "application/json", `{"owner":"w1","ttl_seconds":30}`},
		{"POST", "/locks/" + strings.Repeat("a", 256), "application/json", `{"owner":"w1","ttl_seconds":30}`},
		{"POST", "/locks/x", "application/problem+json", `{"owner":"\ud800","ttl_seconds":30}`},
		{"POST", "/locks/x", "application/json", `{"owner":"w1","ttl_seconds":0}`},
		{"POST", "/locks/x", "application/json", `{"owner":" ","ttl_seconds":30}`},
		{"POST", "/locks/x", "application/json", `{"owner":"w1","ttl_seconds":"3600"}`},
		{"POST", "/locks/x", "application/json", `{"owner":"w1","ttl_seconds":30,"ttl_seconds":30}`},
		{"POST", "/locks/x", "application/json", "{\"owner\":\"\xff\",\"ttl_seconds\":30}"},
		{"POST", "/locks/x", "bogus;;;", `{"owner":"w1","ttl_seconds":30}`},
		{"POST", "/locks/x", "application/json", `{"owner":"` + strings.Repeat("a", api.MaxBodyBytes) + `","ttl_seconds":30}`},
	} {
		f.Add(s.method, s.target, s.contentType, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method, target, contentType string, body []byte) {
		if !validHeaderValue(contentType) {
			return // net/http answers 400 before any handler runs
		}
		var wire bytes.Buffer
		wire.WriteString(method + " " + target + " HTTP/1.1\r\nHost: locks.test\r\n")
		if contentType != "" {
			wire.WriteString("Content-Type: " + contentType + "\r\n")
		}
		wire.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
		wire.Write(body)
		r, err := http.ReadRequest(bufio.NewReader(&wire))
		if err != nil {
			return // net/http answers 400 before any handler runs
		}
		r.RemoteAddr = "192.0.2.1:1234"

		rec := httptest.NewRecorder()
		NewRunner(newFuzzHandler(), slog.New(slog.DiscardHandler)).ServeHTTP(rec, r)
		checkRunnerAnswer(t, r.Method, r.URL.EscapedPath(), rec.Result().StatusCode, rec.Header(), rec.Body.Bytes())
	})
}

// validHeaderValue reports whether net/http's server accepts v as a header
// value: no control characters but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// newFuzzHandler returns the real handlers over a fake table in which every
// write succeeds and every read finds a live lease of "holder".
func newFuzzHandler() *api.Handler {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ms := func(t time.Time) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
	}
	db := &dynamofake.DB{
		Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			v := in.ExpressionAttributeValues
			return &dynamodb.UpdateItemOutput{Attributes: map[string]types.AttributeValue{
				locklogic.AttrResource:   in.Key[locklogic.AttrResource],
				locklogic.AttrOwner:      v[":o"],
				locklogic.AttrToken:      &types.AttributeValueMemberN{Value: "7"},
				locklogic.AttrAcquiredAt: v[":now"],
				locklogic.AttrExpiresAt:  v[":exp"],
			}}, nil
		},
		Get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return &dynamodb.GetItemOutput{Item: map[string]types.AttributeValue{
				locklogic.AttrResource:   in.Key[locklogic.AttrResource],
				locklogic.AttrOwner:      &types.AttributeValueMemberS{Value: "holder"},
				locklogic.AttrToken:      &types.AttributeValueMemberN{Value: "5"},
				locklogic.AttrAcquiredAt: ms(t0.Add(-time.Minute)),
				locklogic.AttrExpiresAt:  ms(t0.Add(30 * time.Second)),
			}}, nil
		},
	}
	now := func() time.Time { return t0 }
	return api.NewHandler(locklogic.New(db, locklogic.Config{Table: "t", Now: now}), slog.New(slog.DiscardHandler), now)
}

// fuzzRoute names the route of method and escapedPath as the README's route
// table states it, and returns the raw path parameter.
func fuzzRoute(method, escapedPath string) (route, rawResource string) {
	segs := strings.Split(escapedPath, "/")
	if len(segs) < 3 || segs[0] != "" || segs[1] != "locks" || segs[2] == "" {
		return "", ""
	}
	switch {
	case len(segs) == 3 && method == "POST":
		return "acquire", segs[2]
	case len(segs) == 3 && method == "GET":
		return "status", segs[2]
	case len(segs) == 3 && method == "DELETE":
		return "release", segs[2]
	case len(segs) == 4 && segs[3] == "renew" && method == "POST":
		return "renew", segs[2]
	}
	return "", ""
}

// runnerStatuses are the statuses each route's handler may answer when the
// store's writes succeed.
var runnerStatuses = map[string][]int{
	"acquire": {200, 400, 413, 422},
	"status":  {200, 422},
	"release": {204, 400, 413, 422},
	"renew":   {200, 400, 413, 422},
}

// checkRunnerAnswer checks one answer of the runner to method escapedPath.
func checkRunnerAnswer(tb testing.TB, method, escapedPath string, status int, h http.Header, body []byte) {
	tb.Helper()
	where := method + " " + escapedPath
	if status >= 500 {
		tb.Fatalf("%s: got %d %q, want no 5xx", where, status, body)
	}
	route, rawResource := fuzzRoute(method, escapedPath)
	resource, perr := url.PathUnescape(rawResource)
	if route == "" || perr != nil {
		want, msg := 404, "Not Found"
		if route != "" {
			want, msg = 400, "Bad Request"
		}
		var m map[string]any
		if status != want || h.Get("Content-Type") != "application/json" || json.Unmarshal(body, &m) != nil || len(m) != 1 || m["message"] != msg {
			tb.Fatalf("%s: got %d %s %q, want API Gateway's %d {\"message\":%q}", where, status, h.Get("Content-Type"), body, want, msg)
		}
		return
	}
	if !slices.Contains(runnerStatuses[route], status) {
		tb.Fatalf("%s: got %d %q from %s, want one of %v", where, status, body, route, runnerStatuses[route])
	}
	var m map[string]json.RawMessage
	if status != 204 && (json.Unmarshal(body, &m) != nil || m == nil) {
		tb.Fatalf("%s: got %d %q, want a JSON object", where, status, body)
	}
	switch {
	case status >= 400:
		if ct := h.Get("Content-Type"); ct != "application/problem+json" {
			tb.Fatalf("%s: got %d with content-type %q, want application/problem+json", where, status, ct)
		}
		keys := []string{"type", "title", "status", "detail", "instance"}
		if status == 422 {
			keys = append(keys, "errors")
		}
		wantMembers(tb, where, m, keys...)
		var p api.Problem
		if err := json.Unmarshal(body, &p); err != nil {
			tb.Fatalf("%s: problem %q: %v", where, body, err)
		}
		wantInstance := "/locks/" + url.PathEscape(resource)
		if route == "renew" {
			wantInstance += "/renew"
		}
		switch {
		case !strings.HasPrefix(p.Type, api.ProblemTypeBase) || len(p.Type) == len(api.ProblemTypeBase):
			tb.Fatalf("%s: got problem type %q, want %s<slug>", where, p.Type, api.ProblemTypeBase)
		case p.Title == "" || p.Detail == "":
			tb.Fatalf("%s: problem with an empty title or detail: %s", where, body)
		case p.Status != status:
			tb.Fatalf("%s: got problem status %d in a %d answer", where, p.Status, status)
		case p.Instance != wantInstance:
			tb.Fatalf("%s: got instance %q, want %q", where, p.Instance, wantInstance)
		case status == 422 && len(p.Errors) == 0:
			tb.Fatalf("%s: got 422 without field errors: %s", where, body)
		}
		for _, fe := range p.Errors {
			if fe.Detail == "" { // the field may be "", the name of an unknown member
				tb.Fatalf("%s: got field error %+v, want a detail", where, fe)
			}
		}
	case status == 204:
		if len(body) != 0 {
			tb.Fatalf("%s: got 204 with body %q, want none", where, body)
		}
	default:
		if ct := h.Get("Content-Type"); ct != "application/json" {
			tb.Fatalf("%s: got 200 with content-type %q, want application/json", where, ct)
		}
		lock := m
		switch route {
		case "acquire":
			wantMembers(tb, where, m, "acquired", "lock")
			if string(m["acquired"]) != "true" {
				tb.Fatalf("%s: got %s from a store whose writes succeed, want acquired", where, body)
			}
			lock = jsonMembers(tb, where, m["lock"])
		case "renew":
			wantMembers(tb, where, m, "renewed", "lock")
			if string(m["renewed"]) != "true" {
				tb.Fatalf("%s: got %s, want renewed true", where, body)
			}
			lock = jsonMembers(tb, where, m["lock"])
		}
		wantMembers(tb, where, lock, "resource", "owner", "fencing_token", "acquired_at", "expires_at")
		var l api.LockJSON
		if b, _ := json.Marshal(lock); json.Unmarshal(b, &l) != nil {
			tb.Fatalf("%s: got lock %s, want LOCK", where, b)
		}
		var v locklogic.ValidationError
		if owner := locklogic.NormalizeOwner(l.Owner, &v); l.Resource != resource || owner != l.Owner || v.Err() != nil || l.FencingToken < 1 {
			tb.Fatalf("%s: got lock %+v, want resource %q, a valid owner, a positive token", where, l, resource)
		}
		for _, ts := range []string{l.AcquiredAt, l.ExpiresAt} {
			if pt, err := time.Parse(api.TimeFormat, ts); err != nil || pt.UTC().Format(api.TimeFormat) != ts {
				tb.Fatalf("%s: got time %q, want RFC 3339 UTC with milliseconds", where, ts)
			}
		}
	}
}

func jsonMembers(tb testing.TB, where string, raw json.RawMessage) map[string]json.RawMessage {
	tb.Helper()
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		tb.Fatalf("%s: got %s, want a JSON object", where, raw)
	}
	return m
}

// wantMembers checks m has exactly the members keys.
func wantMembers(tb testing.TB, where string, m map[string]json.RawMessage, keys ...string) {
	tb.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok || len(m) != len(keys) {
			b, _ := json.Marshal(m)
			tb.Fatalf("%s: got %s, want exactly the members %v", where, b, keys)
		}
	}
}
