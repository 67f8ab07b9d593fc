package local

import (
	"encoding/base64"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ft288/locks/api"
)

// TestEventShape checks the runner builds the event API Gateway would:
// decoded path parameters, lower-case headers, cookies apart, base64 for
// binary bodies, the request context filled.
func TestEventShape(t *testing.T) {
	cases := []struct {
		name, method, target, contentType, body string
		wantRoute, wantResource                 string
		wantBase64                              bool
	}{
		{"AcquireDecodesPath", "POST", "/locks/payment%3A42%20x?a=1&a=2", "application/json", `{"owner":"w"}`, "POST /locks/{resource}", "payment:42 x", false},
		{"RenewRoute", "POST", "/locks/r/renew", "text/plain; charset=utf-8", `{}`, "POST /locks/{resource}/renew", "r", false},
		{"BinaryBodyIsBase64", "DELETE", "/locks/r", "application/octet-stream", `{"owner":"w"}`, "DELETE /locks/{resource}", "r", true},
		{"NoContentTypeIsBase64", "DELETE", "/locks/r", "", `{"owner":"w"}`, "DELETE /locks/{resource}", "r", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			r.Header.Set("X-Custom-Header", "v1")
			r.Header.Add("X-Custom-Header", "v2")
			r.Header.Set("Cookie", "a=1; b=2")
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			rt, params, ok := match(r.Method, r.URL.EscapedPath())
			if !ok || rt.Key() != tc.wantRoute || params["resource"] != tc.wantResource {
				t.Fatalf("match: got %q %v %v, want %q resource %q", rt.Key(), params, ok, tc.wantRoute, tc.wantResource)
			}
			ev := (&Runner{}).event(r, rt, params, []byte(tc.body))
			if ev.RouteKey != tc.wantRoute || ev.RequestContext.RouteKey != tc.wantRoute || ev.Version != "2.0" {
				t.Errorf("got route keys %q/%q version %q", ev.RouteKey, ev.RequestContext.RouteKey, ev.Version)
			}
			if ev.Headers["x-custom-header"] != "v1,v2" || ev.Headers["cookie"] != "" {
				t.Errorf("got headers %v, want lower-case names, joined values, no cookie header", ev.Headers)
			}
			if len(ev.Cookies) != 2 || ev.Cookies[0] != "a=1" {
				t.Errorf("got cookies %v, want [a=1 b=2]", ev.Cookies)
			}
			body := ev.Body
			if ev.IsBase64Encoded != tc.wantBase64 {
				t.Fatalf("got isBase64Encoded %v, want %v", ev.IsBase64Encoded, tc.wantBase64)
			}
			if tc.wantBase64 {
				b, _ := base64.StdEncoding.DecodeString(body)
				body = string(b)
			}
			if body != tc.body {
				t.Errorf("got body %q, want %q", body, tc.body)
			}
			c := ev.RequestContext
			if c.RequestID == "" || c.HTTP.Method != tc.method || c.Stage != "$default" || c.TimeEpoch == 0 || c.Authorizer != nil {
				t.Errorf("request context incomplete or carries an identity by default: %+v", c)
			}
		})
	}
}

func TestMatchEveryRoute(t *testing.T) {
	for _, rt := range api.Routes {
		path := strings.ReplaceAll(strings.ReplaceAll(rt.Path, "{resource}", "x"), "{name}", "y")
		got, params, ok := match(rt.Method, path)
		wantParam, wantName := "", ""
		if strings.Contains(rt.Path, "{resource}") {
			wantParam = "x"
		}
		if strings.Contains(rt.Path, "{name}") {
			wantName = "y" // a semaphore's
		}
		if !ok || got.Key() != rt.Key() || params["resource"] != wantParam || params["name"] != wantName {
			t.Errorf("%s %s: got %q %v %v, want route %q", rt.Method, path, got.Name, params, ok, rt.Name)
		}
	}
	if _, params, ok := match("GET", "/locks/%zz"); !ok || params != nil {
		t.Errorf("invalid escape: got %v %v, want a match with nil params (400)", params, ok)
	}
}
