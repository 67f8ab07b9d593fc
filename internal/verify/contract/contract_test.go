package contract

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ft288/locks/api"
)

func load(tb testing.TB) *Document {
	tb.Helper()
	d, err := Load()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

const (
	lockJSON     = `{"resource":"payment:42","owner":"w1","fencing_token":1796217278318535,"acquired_at":"2026-12-02T13:14:38.318Z","expires_at":"2026-12-02T13:15:08.318Z"}`
	problemJSON  = "application/problem+json"
	notFoundBody = `{"type":"https://ft288.dev/problems/not-found","title":"Lock not found","status":404,"detail":"There is no live lock on \"x\".","instance":"/locks/x"}`
)

// hdr builds a response header from name, value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// service is the header the handlers send with a JSON body of type ct.
func service(ct string, kv ...string) http.Header {
	return hdr(append([]string{"Content-Type", ct, "Cache-Control", "no-store"}, kv...)...)
}

func problem(slug string, status int, extra string) string {
	return `{"type":"https://ft288.dev/problems/` + slug + `","title":"T","status":` + itoa(status) + `,"detail":"D","instance":"/locks/x"` + extra + `}`
}

func itoa(n int) string {
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

// TestCheck holds answers the document describes and answers it does not
// to the document: the first kind must pass, every one of the second must
// be reported, so the check cannot pass silently.
func TestCheck(t *testing.T) {
	d := load(t)
	cases := []struct {
		name         string
		method, path string
		status       int
		header       http.Header
		body         string
		wantErr      string // "" when the answer is documented
	}{
		// Documented answers.
		{"Acquired", "POST", "/locks/payment:42", 200, service("application/json"), `{"acquired":true,"lock":` + lockJSON + `}`, ""},
		{"Held", "POST", "/locks/payment:42", 200, service("application/json"), `{"acquired":false,"resource":"payment:42"}`, ""},
		{"HeldUntil", "POST", "/locks/payment:42", 200, service("application/json", "Retry-After", "12"), `{"acquired":false,"resource":"payment:42","expires_at":"2026-12-02T13:15:08.318Z"}`, ""},
		{"Status", "GET", "/locks/payment%3A42", 200, service("application/json"), lockJSON, ""},
		{"Renewed", "POST", "/locks/x/renew", 200, service("application/json"), `{"renewed":true,"lock":` + lockJSON + `}`, ""},
		{"Released", "DELETE", "/locks/x", 204, hdr("Cache-Control", "no-store"), "", ""},
		{"NotFound", "GET", "/locks/x", 404, service(problemJSON), notFoundBody, ""},
		{"EncodedSlashIsOneSegment", "GET", "/locks/a%2Fb", 422, service(problemJSON), problem("validation-failed", 422, `,"errors":[{"field":"resource","detail":"must not contain \"/\""}]`), ""},
		{"Forbidden", "DELETE", "/locks/x", 403, service(problemJSON), problem("forbidden", 403, ""), ""},
		{"StaleToken", "POST", "/locks/x/renew", 409, service(problemJSON), problem("stale-token", 409, ""), ""},
		{"InvalidJSON", "POST", "/locks/x", 400, service(problemJSON), problem("invalid-json", 400, ""), ""},
		{"TooLarge", "POST", "/locks/x", 413, service(problemJSON), problem("payload-too-large", 413, ""), ""},
		{"Unavailable", "DELETE", "/locks/x", 503, service(problemJSON, "Retry-After", "1"), problem("service-unavailable", 503, ""), ""},
		{"Internal", "GET", "/locks/x", 500, service(problemJSON), problem("internal", 500, ""), ""},
		{"GatewayUnsigned", "POST", "/locks/x", 403, hdr("Content-Type", "application/json"), `{"message":"Forbidden"}`, ""},
		{"GatewayBadEscape", "GET", "/locks/%zz", 400, hdr("Content-Type", "application/json"), `{"message":"Bad Request"}`, ""},
		{"GatewayThrottled", "GET", "/locks/x", 429, hdr("Content-Type", "application/json"), `{"message":"Too Many Requests"}`, ""},
		{"NoRoute", "PUT", "/locks/x", 404, hdr("Content-Type", "application/json"), `{"message":"Not Found"}`, ""},
		{"NoRouteHead", "HEAD", "/locks/x", 404, hdr("Content-Type", "application/json"), `{"message":"Not Found"}`, ""},
		{"NoRouteEmptyResource", "GET", "/locks/", 404, hdr("Content-Type", "application/json"), `{"message":"Not Found"}`, ""},
		{"NoRouteStatusOfRenew", "GET", "/locks/x/renew", 404, hdr("Content-Type", "application/json"), `{"message":"Not Found"}`, ""},
		{"WaitAcquired", "POST", "/locks/x/wait", 200, service("application/json"), `{"acquired":true,"lock":` + lockJSON + `}`, ""},
		{"WaitHeldQueued", "POST", "/locks/x/wait", 200, service("application/json"), `{"acquired":false,"resource":"x","queue_ticket":"3ryokmsrhxukz"}`, ""},
		{"WaitRefused", "POST", "/locks/x/wait", 422, service(problemJSON), problem("validation-failed", 422, `,"errors":[{"field":"wait_seconds","detail":"is required"}]`), ""},
		{"WaitThrottled", "POST", "/locks/x/wait", 429, hdr("Content-Type", "application/json"), `{"message":"Too Many Requests"}`, ""},
		{"SemaphoreWaitFullQueued", "POST", "/semaphores/s/wait", 200, service("application/json"), `{"acquired":false,"name":"s","queue_ticket":"3ryokmsrhxukz"}`, ""},
		{"SemaphoreWaitMismatch", "POST", "/semaphores/s/wait", 409, service(problemJSON), problem("permits-mismatch", 409, `,"permits":3`), ""},
		{"NoRouteStatusOfWait", "GET", "/locks/x/wait", 404, hdr("Content-Type", "application/json"), `{"message":"Not Found"}`, ""},

		// Answers the document does not describe.
		{"Teapot", "POST", "/locks/x", 418, service("application/json"), `{}`, "status 418 is not documented"},
		{"RedirectIsNotSkipped", "GET", "/locks/x", 307, hdr("Location", "/elsewhere"), "", "status 307 is not documented"},
		{"ExtraMember", "POST", "/locks/x", 200, service("application/json"), `{"acquired":true,"lock":` + lockJSON + `,"note":"hi"}`, "doesn't match schema"},
		{"HeldShowsOwner", "POST", "/locks/x", 200, service("application/json"), `{"acquired":false,"resource":"x","owner":"w1"}`, "doesn't match schema"},
		{"WaitHeldShowsOwner", "POST", "/locks/x/wait", 200, service("application/json"), `{"acquired":false,"resource":"x","owner":"w1"}`, "doesn't match schema"},
		{"WaitForbiddenIsNotAnAnswer", "POST", "/locks/x/wait", 403, service(problemJSON), problem("forbidden", 403, ""), "Content-Type"},
		{"AcquiredWithoutLock", "POST", "/locks/x", 200, service("application/json"), `{"acquired":true}`, "doesn't match schema"},
		{"LockLacksToken", "GET", "/locks/x", 200, service("application/json"), strings.Replace(lockJSON, `"fencing_token":1796217278318535,`, "", 1), "doesn't match schema"},
		{"TokenAsString", "GET", "/locks/x", 200, service("application/json"), strings.Replace(lockJSON, `1796217278318535`, `"1796217278318535"`, 1), "doesn't match schema"},
		{"TimeWithoutMillis", "GET", "/locks/x", 200, service("application/json"), strings.Replace(lockJSON, `13:15:08.318Z`, `13:15:08Z`, 1), "doesn't match schema"},
		{"RenewedFalse", "POST", "/locks/x/renew", 200, service("application/json"), `{"renewed":false,"lock":` + lockJSON + `}`, "doesn't match schema"},
		{"MissingCacheControl", "GET", "/locks/x", 200, hdr("Content-Type", "application/json"), lockJSON, `"Cache-Control" missing`},
		{"CacheableProblem", "GET", "/locks/x", 404, service(problemJSON, "Cache-Control", "max-age=60"), notFoundBody, `"Cache-Control" doesn't match`},
		{"UnavailableWithoutRetryAfter", "GET", "/locks/x", 503, service(problemJSON), problem("service-unavailable", 503, ""), `"Retry-After" missing`},
		{"RetryAfterDate", "POST", "/locks/x", 200, service("application/json", "Retry-After", "Wed, 02 Dec 2026 13:15:08 GMT"), `{"acquired":false,"resource":"x"}`, `"Retry-After"`},
		{"ReleasedWithBody", "DELETE", "/locks/x", 204, service("application/json"), `{}`, "documented without a body"},
		{"WrongSlugForStatus", "GET", "/locks/x", 404, service(problemJSON), problem("forbidden", 404, ""), "doesn't match schema"},
		{"StatusMemberDisagrees", "GET", "/locks/x", 404, service(problemJSON), problem("not-found", 400, ""), "doesn't match schema"},
		{"UnknownSlug", "POST", "/locks/x", 422, service(problemJSON), problem("oops", 422, `,"errors":[{"field":"x","detail":"y"}]`), "doesn't match schema"},
		{"ValidationWithoutErrors", "POST", "/locks/x", 422, service(problemJSON), problem("validation-failed", 422, ""), "doesn't match schema"},
		{"ErrorsOnAnotherProblem", "DELETE", "/locks/x", 403, service(problemJSON), problem("forbidden", 403, `,"errors":[{"field":"x","detail":"y"}]`), "doesn't match schema"},
		{"ProblemAsPlainJSON", "GET", "/locks/x", 404, service("application/json"), notFoundBody, "Content-Type"},
		{"ProblemForbiddenOnAcquire", "POST", "/locks/x", 403, service(problemJSON), problem("forbidden", 403, ""), "Content-Type"},
		{"NoContentType", "GET", "/locks/x", 200, hdr("Cache-Control", "no-store"), lockJSON, "Content-Type"},
		{"EmptyBody", "GET", "/locks/x", 200, service("application/json"), "", "decode"},
		{"NoRouteOtherMessage", "PUT", "/locks/x", 404, hdr("Content-Type", "application/json"), `{"message":"Nope"}`, "doesn't match schema"},
		{"NoRouteServiceAnswer", "GET", "/locks/x/renew", 200, service("application/json"), lockJSON, "status 200 is not documented"},
		{"NoRouteProblem", "PATCH", "/locks/x", 404, service(problemJSON), notFoundBody, "Content-Type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := d.Check(tc.method, tc.path, tc.status, tc.header, []byte(tc.body))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want the answer documented", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("got no error, want one containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
			var m *Mismatch
			if err != nil && (!errors.As(err, &m) || m.Status != tc.status || m.Method != tc.method || m.Path != tc.path || string(m.Body) != tc.body) {
				t.Errorf("got %#v, want a *Mismatch naming %s %s %d and the body", err, tc.method, tc.path, tc.status)
			}
		})
	}
}

// TestMiddleware serves documented and undocumented answers through
// Middleware: each undocumented one is reported with its route, status and
// body before the client has it, each answer reaches the client unchanged,
// and each one is counted.
func TestMiddleware(t *testing.T) {
	d := load(t)
	answers := map[string]func(w http.ResponseWriter){
		"/locks/teapot": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, `{"tea":true}`)
		},
		"/locks/extra": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, `{"acquired":false,"resource":"extra","holder":"w1"}`) // implicit 200
		},
		"/locks/late-header": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Header().Set("Cache-Control", "no-store") // too late: not on the wire
			_, _ = io.WriteString(w, `{"acquired":false,"resource":"late-header"}`)
		},
		"/locks/good": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, `{"acquired":false,"resource":"good"}`)
		},
	}
	var (
		mu       sync.Mutex
		reported []*Mismatch
	)
	done := map[string]bool{} // the paths whose answer the handler has returned
	srv := httptest.NewServer(d.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answers[r.URL.Path](w)
	}), func(m *Mismatch) {
		mu.Lock()
		defer mu.Unlock()
		if done[m.Path] {
			t.Errorf("%s reported after the client had the answer", m.Path)
		}
		reported = append(reported, m)
	}))
	defer srv.Close()

	before := Checked()
	for _, path := range []string{"/locks/teapot", "/locks/extra", "/locks/late-header", "/locks/good"} {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{"owner":"w1","ttl_seconds":30}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		done[path] = true
		mu.Unlock()
		rec := httptest.NewRecorder()
		answers[path](rec)
		if resp.StatusCode != rec.Code || string(body) != rec.Body.String() || resp.Header.Get("Cache-Control") != rec.Result().Header.Get("Cache-Control") {
			t.Errorf("%s: the client got %d %q cache-control %q, want the handler's %d %q %q", path, resp.StatusCode, body,
				resp.Header.Get("Cache-Control"), rec.Code, rec.Body.String(), rec.Result().Header.Get("Cache-Control"))
		}
	}
	if got := Checked() - before; got != 4 {
		t.Errorf("got %d answers checked, want 4", got)
	}
	want := []struct {
		path   string
		status int
		body   string
	}{
		{"/locks/teapot", 418, `{"tea":true}`},
		{"/locks/extra", 200, `{"acquired":false,"resource":"extra","holder":"w1"}`},
		{"/locks/late-header", 200, `{"acquired":false,"resource":"late-header"}`},
	}
	if len(reported) != len(want) {
		t.Fatalf("got %d reports %v, want %d (every undocumented answer, and only those)", len(reported), reported, len(want))
	}
	for i, w := range want {
		m := reported[i]
		if m.Path != w.path || m.Method != "POST" || m.Route != "POST /locks/{resource}" || m.Status != w.status || string(m.Body) != w.body {
			t.Errorf("report %d: got %s %s route %q %d %q, want POST %s route \"POST /locks/{resource}\" %d %q", i, m.Method, m.Path, m.Route, m.Status, m.Body, w.path, w.status, w.body)
		}
		if msg := m.Error(); !strings.Contains(msg, w.path) || !strings.Contains(msg, itoa(w.status)) {
			t.Errorf("report %d: message %q names neither the request nor the status", i, msg)
		}
	}
}

func TestFind(t *testing.T) {
	d := load(t)
	cases := []struct {
		method, path string
		wantID       string // "" for no route
	}{
		{"POST", "/locks/x", "acquire"},
		{"GET", "/locks/x", "status"},
		{"DELETE", "/locks/x", "release"},
		{"POST", "/locks/x/renew", "renew"},
		{"POST", "/locks/a%2Fb/renew", "renew"},
		{"POST", "/locks/renew", "acquire"},
		{"GET", "/locks/x/renew", ""},
		{"PUT", "/locks/x", ""},
		{"post", "/locks/x", ""},
		{"GET", "/locks/", ""},
		{"POST", "/locks//renew", ""},
		{"GET", "/locks/x/", ""},
		{"GET", "/LOCKS/x", ""},
		{"GET", "*", ""},
	}
	for _, tc := range cases {
		op, ok := d.Find(tc.method, tc.path)
		if ok != (tc.wantID != "") || op.ID != tc.wantID {
			t.Errorf("%s %s: got %q %v, want %q", tc.method, tc.path, op.ID, ok, tc.wantID)
		}
	}
}

// TestParse checks that a broken document is refused, not half used.
func TestParse(t *testing.T) {
	doc := string(api.OpenAPI)
	cases := []struct {
		name, old, new, wantErr string
	}{
		{"NoRouteNotFound", "    RouteNotFound:\n", "    RouteMissing:\n", "RouteNotFound"},
		{"OpenAPI30", "openapi: 3.1.0\n", "openapi: 3.0.3\n", "want 3.1"},
		{"ExampleOffSchema", "value: {acquired: false, resource: payment:42}", "value: {acquired: false, resource: payment:42, owner: w1}", "invalid"},
		{"DanglingRef", "$ref: '#/components/schemas/RenewResponse'", "$ref: '#/components/schemas/Nothing'", "Nothing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(doc, tc.old) {
				t.Fatalf("the document no longer contains %q; update the test", tc.old)
			}
			_, err := Parse([]byte(strings.Replace(doc, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
