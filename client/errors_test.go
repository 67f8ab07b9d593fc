package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// sentinels are the errors every mapped answer is checked against.
var sentinels = map[string]error{
	"ErrHeld": client.ErrHeld, "ErrNotFound": client.ErrNotFound, "ErrForbidden": client.ErrForbidden,
	"ErrStaleToken": client.ErrStaleToken, "ErrValidation": client.ErrValidation, "ErrUnavailable": client.ErrUnavailable,
	"ErrLeaseLost": client.ErrLeaseLost,
}

// answer serves one canned response to every request.
func answer(tb testing.TB, status int, header map[string]string, body string) string {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	problemJSON := map[string]string{"Content-Type": "application/problem+json"}
	tests := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   client.ProblemError
		is     []string // the sentinels the error must match; it must match no other
		// noRoute: the answer is API Gateway's 404 for a route it does
		// not have, a stack without the waiting routes.
		noRoute bool
	}{
		{
			name: "NotFound", status: 404, header: problemJSON,
			body: `{"type":"https://ft288.dev/problems/not-found","title":"Lock not found","status":404,"detail":"There is no live lock on \"r\".","instance":"/locks/r"}`,
			want: client.ProblemError{Status: 404, Type: "https://ft288.dev/problems/not-found", Title: "Lock not found", Detail: `There is no live lock on "r".`, Instance: "/locks/r"},
			is:   []string{"ErrNotFound"},
		},
		{
			name: "Forbidden", status: 403, header: problemJSON,
			body: `{"type":"https://ft288.dev/problems/forbidden","title":"Lock held by another owner","status":403,"detail":"d","instance":"/locks/r"}`,
			want: client.ProblemError{Status: 403, Type: "https://ft288.dev/problems/forbidden", Title: "Lock held by another owner", Detail: "d", Instance: "/locks/r"},
			is:   []string{"ErrForbidden"},
		},
		{
			name: "StaleToken", status: 409, header: problemJSON,
			body: `{"type":"https://ft288.dev/problems/stale-token","title":"Stale fencing token","status":409,"detail":"d","instance":"/locks/r"}`,
			want: client.ProblemError{Status: 409, Type: "https://ft288.dev/problems/stale-token", Title: "Stale fencing token", Detail: "d", Instance: "/locks/r"},
			is:   []string{"ErrStaleToken"},
		},
		{
			name: "ValidationFailed", status: 422, header: problemJSON,
			body: `{"type":"https://ft288.dev/problems/validation-failed","title":"Request validation failed","status":422,"detail":"see errors","instance":"/locks/r","errors":[{"field":"owner","detail":"must not be empty"},{"field":"ttl_seconds","detail":"is required"}]}`,
			want: client.ProblemError{Status: 422, Type: "https://ft288.dev/problems/validation-failed", Title: "Request validation failed", Detail: "see errors", Instance: "/locks/r",
				Errors: []client.FieldError{{Field: "owner", Detail: "must not be empty"}, {Field: "ttl_seconds", Detail: "is required"}}},
			is: []string{"ErrValidation"},
		},
		{
			name: "InvalidJSON", status: 400, header: problemJSON,
			body: `{"type":"https://ft288.dev/problems/invalid-json","title":"Malformed request body","status":400,"detail":"d"}`,
			want: client.ProblemError{Status: 400, Type: "https://ft288.dev/problems/invalid-json", Title: "Malformed request body", Detail: "d"},
			is:   []string{"ErrValidation"},
		},
		{
			name: "ServiceUnavailable", status: 503, header: map[string]string{"Content-Type": "application/problem+json", "Retry-After": "1"},
			body: `{"type":"https://ft288.dev/problems/service-unavailable","title":"Lock store unavailable","status":503,"detail":"d","instance":"/locks/r"}`,
			want: client.ProblemError{Status: 503, Type: "https://ft288.dev/problems/service-unavailable", Title: "Lock store unavailable", Detail: "d", Instance: "/locks/r", RetryAfter: time.Second},
			is:   []string{"ErrUnavailable"},
		},
		{
			name: "Internal", status: 500, header: problemJSON,
			body: `{"type":"https://ft288.dev/problems/internal","title":"Internal error","status":500,"detail":"logged"}`,
			want: client.ProblemError{Status: 500, Type: "https://ft288.dev/problems/internal", Title: "Internal error", Detail: "logged"},
		},
		{
			name: "NotFoundForceReleased", status: 404, header: problemJSON,
			body: `{"type":"https://ft288.dev/problems/not-found","title":"Lock not found","status":404,"detail":"d","instance":"/locks/r","force_released":true}`,
			want: client.ProblemError{Status: 404, Type: "https://ft288.dev/problems/not-found", Title: "Lock not found", Detail: "d", Instance: "/locks/r", ForceReleased: true},
			is:   []string{"ErrNotFound"},
		},
		{
			// API Gateway's answer for a throttled route.
			name: "GatewayRouteThrottle", status: 429, header: map[string]string{"Content-Type": "application/json"},
			body: `{"message":"Too Many Requests"}`,
			want: client.ProblemError{Status: 429, Title: "Too Many Requests"},
			is:   []string{"ErrUnavailable"},
		},
		{
			// API Gateway's answer for a throttled function.
			name: "GatewayLambdaThrottle", status: 500, header: map[string]string{"Content-Type": "application/json"},
			body: `{"message":"Internal Server Error"}`,
			want: client.ProblemError{Status: 500, Title: "Internal Server Error"},
			is:   []string{"ErrUnavailable"},
		},
		{
			name: "GatewayNotFound", status: 404, header: map[string]string{"Content-Type": "application/json"},
			body:    `{"message":"Not Found"}`,
			want:    client.ProblemError{Status: 404, Title: "Not Found"},
			noRoute: true,
		},
		{
			// Not API Gateway's own answer: not the sign of a stack
			// without the waiting routes.
			name: "NotFoundNotJSON", status: 404, body: "<html>not found</html>",
			want: client.ProblemError{Status: 404, Title: "Not Found"},
		},
		{
			name: "GatewayForbidden", status: 403, header: map[string]string{"Content-Type": "application/json"},
			body: `{"message":"The security token included in the request is invalid."}`,
			want: client.ProblemError{Status: 403, Title: "The security token included in the request is invalid."},
		},
		{
			name: "GatewayTimeout", status: 504, header: map[string]string{"Content-Type": "application/json"},
			body: `{"message":"Endpoint request timed out"}`,
			want: client.ProblemError{Status: 504, Title: "Endpoint request timed out"},
			is:   []string{"ErrUnavailable"},
		},
		{
			name: "NotJSON", status: 502, body: "<html>bad gateway</html>",
			want: client.ProblemError{Status: 502, Title: "Bad Gateway"},
			is:   []string{"ErrUnavailable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, answer(t, tt.status, tt.header, tt.body))
			err := c.Release(context.Background(), "r", "w1", 7)
			var p *client.ProblemError
			if !errors.As(err, &p) {
				t.Fatalf("Release: got %v (%T), want a *client.ProblemError", err, err)
			}
			if got := client.WithoutGatewayMark(*p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problem: got %+v, want %+v", got, tt.want)
			}
			if got := client.NoWaitRoute(err); got != tt.noRoute {
				t.Errorf("a stack without the waiting routes: got %t, want %t", got, tt.noRoute)
			}
			for name, sentinel := range sentinels {
				want := false
				for _, s := range tt.is {
					want = want || s == name
				}
				if got := errors.Is(err, sentinel); got != want {
					t.Errorf("errors.Is(%v, %s): got %t, want %t", err, name, got, want)
				}
			}
		})
	}
}

func TestAcquireRetries(t *testing.T) {
	t.Parallel()
	acquired := `{"acquired":true,"lock":{"resource":"r","owner":"w1","fencing_token":1796217633748613,"acquired_at":"2026-12-02T13:20:33.748Z","expires_at":"2026-12-02T13:21:03.748Z"}}`
	tests := []struct {
		name      string
		failures  int    // answers before the successful one
		status    int    // of the failures
		body      string // of the failures
		wantErr   error  // nil: the lease is had
		wantCalls int32
	}{
		{"RetriesUnavailable", 2, 503, `{"type":"https://ft288.dev/problems/service-unavailable","title":"t","status":503}`, nil, 3},
		{"RetriesGatewayRouteThrottle", 2, 429, `{"message":"Too Many Requests"}`, nil, 3},
		{"RetriesGatewayLambdaThrottle", 2, 500, `{"message":"Internal Server Error"}`, nil, 3},
		{"StopsOnInternal", 5, 500, `{"type":"https://ft288.dev/problems/internal","title":"t","status":500}`, &client.ProblemError{}, 1},
		{"StopsOnInvalid", 5, 422, `{"type":"https://ft288.dev/problems/validation-failed","title":"t","status":422}`, client.ErrValidation, 1},
		{"StopsOnGatewayForbidden", 5, 403, `{"message":"Missing Authentication Token"}`, &client.ProblemError{}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) <= int32(tt.failures) {
					w.WriteHeader(tt.status)
					fmt.Fprint(w, tt.body)
					return
				}
				fmt.Fprint(w, acquired)
			}))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			l, err := newClient(t, srv.URL).Acquire(ctx, "r", "w1", 30*time.Second)
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("requests: got %d, want %d", got, tt.wantCalls)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Acquire: got %v, want a lease", err)
				}
				defer l.Release(context.Background())
				if got, want := l.FencingToken(), int64(1796217633748613); got != want {
					t.Errorf("FencingToken: got %d, want %d", got, want)
				}
				return
			}
			var p *client.ProblemError
			if errors.As(tt.wantErr, &p) {
				if !errors.As(err, &p) {
					t.Errorf("Acquire: got %v, want a *client.ProblemError", err)
				}
			} else if !errors.Is(err, tt.wantErr) {
				t.Errorf("Acquire: got %v, want %v", err, tt.wantErr)
			}
			if ctx.Err() != nil {
				t.Errorf("Acquire waited for the context to end; want it to stop at once")
			}
		})
	}
}
