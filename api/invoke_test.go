package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ft288/locks/locklogic"
)

var _ lambda.Handler = (*Invoker)(nil)

// TestEventSchema: the decoder knows every member type of the event as
// this aws-lambda-go defines it, and finds every member the handlers read;
// otherwise every event would take encoding/json's path, correct but slow.
func TestEventSchema(tt *testing.T) {
	if eventSchema == nil {
		tt.Fatal("got no event schema: a member of events.APIGatewayV2HTTPRequest has a type decodeEvent does not know, or a path of storedPaths is gone")
	}
	for path := range storedPaths {
		t := reflect.TypeFor[events.APIGatewayV2HTTPRequest]()
		for name := range strings.SplitSeq(path, ".") {
			if t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			f, ok := fieldByJSONName(t, name)
			if !ok {
				tt.Fatalf("storedPaths: %s is not a member of the event", path)
			}
			t = f.Type
		}
	}
}

// storedValue returns the member of ev at the JSON path: for a pointer
// only whether it is nil (decodeEvent does not fill the members it does not
// store); false when a pointer on the way is nil or the path is no member.
func storedValue(v reflect.Value, path string) (any, bool) {
	for name := range strings.SplitSeq(path, ".") {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return nil, false
			}
			v = v.Elem()
		}
		f, ok := fieldByJSONName(v.Type(), name)
		if !ok {
			return nil, false
		}
		v = v.FieldByIndex(f.Index)
	}
	if v.Kind() == reflect.Pointer {
		return v.IsNil(), true
	}
	return v.Interface(), true
}

func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// checkStored fails unless got and want agree in every member of
// storedPaths.
func checkStored(tb testing.TB, got, want *events.APIGatewayV2HTTPRequest) {
	tb.Helper()
	for path := range storedPaths {
		g, gok := storedValue(reflect.ValueOf(got).Elem(), path)
		w, wok := storedValue(reflect.ValueOf(want).Elem(), path)
		if gok != wok || !reflect.DeepEqual(g, w) {
			tb.Errorf("%s: got %#v (%v), want %#v (%v)", path, g, gok, w, wok)
		}
	}
}

// lambdaDecode decodes payload as aws-lambda-go does.
func lambdaDecode(payload []byte) (events.APIGatewayV2HTTPRequest, error) {
	var ev events.APIGatewayV2HTTPRequest
	err := json.NewDecoder(bytes.NewReader(payload)).Decode(&ev)
	return ev, err
}

// fastDecode is decodeEvent without its fallback: false for what it leaves
// to encoding/json.
func fastDecode(payload []byte, ev *events.APIGatewayV2HTTPRequest) bool {
	d := eventDecoder{b: payload, ev: ev}
	d.space()
	return d.peek() == '{' && d.object(eventSchema, 0)
}

// recordedEvents returns the recorded API Gateway events of testdata/.
func recordedEvents(tb testing.TB) map[string][]byte {
	tb.Helper()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		tb.Fatalf("recorded events: %v (%d files)", err, len(files))
	}
	evs := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		evs[strings.TrimSuffix(filepath.Base(f), ".json")] = b
	}
	return evs
}

// dispatch serves an event by its route key, as the function of its route
// would; an unknown route as the admin function answers it.
func dispatch(h *Handler) HandlerFunc {
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		for _, r := range Routes {
			if r.Key() == req.RouteKey {
				return r.Handle(h, ctx, req)
			}
		}
		return h.Admin(ctx, req)
	}
}

// invokeHandler is a handler over a fake store in state with a fixed clock,
// logging to log.
func invokeHandler(state int, log *slog.Logger) *Handler {
	db, _ := fuzzStore(state)
	clock := fuzzT0
	now := func() time.Time { return clock }
	sleep := func(_ context.Context, d time.Duration) error { clock = clock.Add(d); return nil }
	return NewHandler(locklogic.New(db, locklogic.Config{Table: "t", Now: now, Sleep: sleep}), log, now)
}

// stableLog logs as JSON without the members that change from one run to
// the next (time and latency).
func stableLog(w *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey, "latency_ms", "Latency", "_aws":
			return slog.Attr{}
		}
		return a
	}}))
}

// TestInvoker: for every recorded event, the fast path decodes it (no
// fallback) to the members encoding/json gives, and the Invoker answers byte
// for byte what aws-lambda-go's reflection answers for the same handler, and
// logs the same lines.
func TestInvoker(t *testing.T) {
	for name, payload := range recordedEvents(t) {
		t.Run(name, func(t *testing.T) {
			want, err := lambdaDecode(payload)
			if err != nil {
				t.Fatal(err)
			}
			var got events.APIGatewayV2HTTPRequest
			if !fastDecode(payload, &got) {
				t.Fatal("got the encoding/json fallback, want the fast path")
			}
			checkStored(t, &got, &want)
			for state := range storeStates {
				var fastLog, slowLog bytes.Buffer
				fast := NewInvoker(dispatch(invokeHandler(state, stableLog(&fastLog))))
				slow := lambda.NewHandler(dispatch(invokeHandler(state, stableLog(&slowLog))))
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				gotResp, gotErr := fast.Invoke(ctx, payload)
				wantResp, wantErr := slow.Invoke(ctx, payload)
				cancel()
				if gotErr != nil || wantErr != nil {
					t.Fatalf("store state %d: got error %v, want %v (and none)", state, gotErr, wantErr)
				}
				if !bytes.Equal(gotResp, wantResp) {
					t.Errorf("store state %d:\ngot  %s\nwant %s", state, gotResp, wantResp)
				}
				if fastLog.String() != slowLog.String() {
					t.Errorf("store state %d: logged\n%s\nwant\n%s", state, &fastLog, &slowLog)
				}
			}
		})
	}
}

// TestAppendResponse: the response bytes are encoding/json's, as
// aws-lambda-go writes them, for every member set or not.
func TestAppendResponse(t *testing.T) {
	odd := `a"b\c<d>e&f` + "\u2028\u2029\x00\x1f\b\f\n\r\t\x7f\xff€😀"
	for name, r := range map[string]events.APIGatewayV2HTTPResponse{
		"Zero":    {},
		"Acquire": {StatusCode: 200, Headers: map[string]string{"content-type": "application/json", "cache-control": "no-store"}, Body: `{"acquired":true}`},
		"Empty":   {StatusCode: 204, Headers: map[string]string{}, MultiValueHeaders: map[string][]string{}, Cookies: []string{}},
		"Odd": {StatusCode: -1, Headers: map[string]string{odd: odd, "b": "", "a": "<>"}, Body: odd, IsBase64Encoded: true,
			MultiValueHeaders: map[string][]string{"x": {"1", odd}, "n": nil, "e": {}}, Cookies: []string{odd, ""}},
	} {
		t.Run(name, func(t *testing.T) {
			if got, want := appendResponse(nil, &r), lambdaEncode(t, r); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// lambdaEncode encodes r as aws-lambda-go does.
func lambdaEncode(tb testing.TB, r events.APIGatewayV2HTTPResponse) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		tb.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// FuzzInvoke holds the Invoker to aws-lambda-go's reflection path. For any
// payload: the fast decoder, when it does not defer to encoding/json,
// accepts only what encoding/json accepts and gives the same stored
// members; decodeEvent returns encoding/json's error; the Invoker answers
// (or fails) exactly as lambda.NewHandler does for the same handler; and
// the response encoding is encoding/json's for strings taken from payload.
// The seeds are the recorded events of testdata/ and variants of them.
func FuzzInvoke(f *testing.F) {
	recorded := recordedEvents(f)
	for _, ev := range recorded {
		f.Add(ev)
	}
	acquire := string(recorded["acquire-iam"])
	for _, r := range [][2]string{
		{`"routeKey"`, `"ROUTEKEY"`},
		{`"rawPath"`, `"raw\u0050ath"`},
		{`"version": "2.0",`, `"routeKey": "GET /locks/{resource}",`},
		{`"version": "2.0",`, `"pathParameters": {"resource": "x"},`},
		{`"version": "2.0",`, `"pathParameters": null,`},
		{`"version": "2.0",`, `"version": null, "cookies": ["a", null], "stageVariables": {"s": null}, "x": [1, -2.5e-3, {"y": [true, false, null]}],`},
		{`"version": "2.0"`, `"version": 2`},
		{`"accept": "*/*"`, `"accept": 1`},
		{`"resource": "payment:42"`, `"resource": "pay\u00e9\ud83d\ude00\/\b\f\n\r\t"`},
		{`"resource": "payment:42"`, `"resource": "pay\ud83d"`},
		{`"resource": "payment:42"`, "\"resource\": \"pay\xff\""},
		{`"resource": "payment:42"`, `"resource": null, "other": "\u0041"`},
		{`"timeEpoch": 1796212800000`, `"timeEpoch": 1796212800000.0`},
		{`"timeEpoch": 1796212800000`, `"timeEpoch": -0`},
		{`"timeEpoch": 1796212800000`, `"timeEpoch": 9223372036854775808`},
		{`"timeEpoch": 1796212800000`, `"timeEpoch": -9223372036854775808`},
		{`"timeEpoch": 1796212800000`, `"timeEpoch": "1796212800000"`},
		{`"cognitoIdentity": null`, `"cognitoIdentity": {"amr": ["a"], "identityId": "i"}`},
		{`"iam": {`, `"lambda": {"n": 1e400}, "iam": {`},
		{`"iam": {`, `"lambda": {"n": [1e300, {"s": "\ud800"}]}, "jwt": null, "iam": {`},
		{`"authorizer": {`, `"authorizer": null, "x": {`},
		{`"isBase64Encoded": false`, `"isBase64Encoded": true`},
		{`"isBase64Encoded": false`, `"isBase64Encoded": "false"`},
		{`"isBase64Encoded": false`, `"isBase64Encoded": false, "isBase64Encoded": true`},
		{`"body": "{`, `"body": "\u007b`},
	} {
		f.Add([]byte(strings.Replace(acquire, r[0], r[1], 1)))
	}
	for _, s := range []string{"", "null", "[]", "{}", " {} trailing", `{"routeKey":`, `{"a":[[[[[[[[[[]]]]]]]]]]}`,
		`{"requestContext":{"authorizer":{"iam":{"userArn":"arn:aws:iam::1:user/u"}}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		want, wantErr := lambdaDecode(payload)
		var fast events.APIGatewayV2HTTPRequest
		if fastDecode(payload, &fast) {
			if wantErr != nil {
				t.Fatalf("fast path accepted what encoding/json refuses: %v", wantErr)
			}
			checkStored(t, &fast, &want)
		}
		var got events.APIGatewayV2HTTPRequest
		if err := decodeEvent(payload, &got); (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("decodeEvent: got error %v, want %v", err, wantErr)
		}
		checkStored(t, &got, &want)

		h := invokeHandler(storeFree, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gotResp, gotErr := NewInvoker(dispatch(h)).Invoke(ctx, payload)
		wantResp, wantErr := lambda.NewHandler(dispatch(h)).Invoke(ctx, payload)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() || !bytes.Equal(gotResp, wantResp) {
			t.Fatalf("Invoke: got %s (%v), want %s (%v)", gotResp, gotErr, wantResp, wantErr)
		}

		s := string(payload)
		r := events.APIGatewayV2HTTPResponse{StatusCode: len(s), Headers: map[string]string{s: s, "content-type": s}, Body: s,
			IsBase64Encoded: len(s)%2 == 0, Cookies: []string{s}}
		if len(s)%3 == 0 {
			r.MultiValueHeaders = map[string][]string{s: {s, ""}, "": nil}
		}
		if got, want := appendResponse(nil, &r), lambdaEncode(t, r); !bytes.Equal(got, want) {
			t.Fatalf("appendResponse: got %s, want %s", got, want)
		}
	})
}
