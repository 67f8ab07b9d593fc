package integration_test

import (
	"bytes"
	"encoding/json"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(runHolder()) // holder A of TestFencingKleppmann, a process of its own
	}
	testenv.Main(m)
}

// steppingClock returns a service clock whose every reading is at least
// 1 ms after any reading that came before it: real time plus one more
// millisecond per reading. Servers that share it stamp requests in the
// order they happen even within one millisecond, as API Gateway's
// timeEpoch is always some ms before the Lambda's :now in AWS.
func steppingClock() func() time.Time {
	var steps atomic.Int64
	return func() time.Time { return time.Now().Add(time.Duration(steps.Add(1)) * time.Millisecond) }
}

// reply is one HTTP answer, decoded.
type reply struct {
	path   string // the escaped request path
	status int
	header http.Header
	raw    string
	json   map[string]any
}

// call sends method path with body (a JSON string or "") to srv and decodes
// the JSON answer, if any.
func call(tb testing.TB, srv *testenv.Server, method, path, body string) reply {
	tb.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return do(tb, req)
}

// do sends req and decodes the JSON answer, if any.
func do(tb testing.TB, req *http.Request) reply {
	tb.Helper()
	method, path := req.Method, req.URL.Path
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{path: req.URL.EscapedPath(), status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if len(b) > 0 {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&r.json); err != nil {
			tb.Fatalf("%s %s: answer is not a JSON object: %q", method, path, b)
		}
	}
	return r
}

func lockPath(resource string) string { return "/locks/" + url.PathEscape(resource) }

// waitPath is the waiting acquire's route of a lock.
func waitPath(resource string) string { return lockPath(resource) + "/wait" }

func acquireBody(owner string, ttl int) string {
	b, _ := json.Marshal(map[string]any{"owner": owner, "ttl_seconds": ttl})
	return string(b)
}

func ownerBody(owner string, token ...int64) string {
	m := map[string]any{"owner": owner}
	if len(token) > 0 {
		m["fencing_token"] = token[0]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func renewBody(owner string, ttl int, token ...int64) string {
	m := map[string]any{"owner": owner, "ttl_seconds": ttl}
	if len(token) > 0 {
		m["fencing_token"] = token[0]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// acquire takes resource for owner and fails the test unless it was granted;
// it returns the lock object.
func acquire(tb testing.TB, srv *testenv.Server, resource, owner string, ttl int) map[string]any {
	tb.Helper()
	r := call(tb, srv, "POST", lockPath(resource), acquireBody(owner, ttl))
	if r.status != 200 || r.json["acquired"] != true {
		tb.Fatalf("acquire %q as %q: got %d %s, want 200 acquired", resource, owner, r.status, r.raw)
	}
	return r.json["lock"].(map[string]any)
}

func token(tb testing.TB, lock map[string]any) int64 {
	tb.Helper()
	n, err := lock["fencing_token"].(json.Number).Int64()
	if err != nil {
		tb.Fatalf("fencing_token %v: %v", lock["fencing_token"], err)
	}
	return n
}

// wantProblem checks r is an RFC 9457 problem with status and type slug.
func wantProblem(tb testing.TB, r reply, status int, slug string) {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("got status %d %s, want %d %s", r.status, r.raw, status, slug)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Errorf("got content-type %q, want application/problem+json", ct)
	}
	if typ, _ := r.json["type"].(string); !strings.HasSuffix(typ, "/"+slug) {
		tb.Errorf("got type %q, want one ending in /%s", typ, slug)
	}
	if n, _ := r.json["status"].(json.Number).Int64(); n != int64(status) {
		tb.Errorf("got problem status %v, want %d", r.json["status"], status)
	}
	for _, k := range []string{"title", "detail"} {
		if s, _ := r.json[k].(string); s == "" {
			tb.Errorf("problem lacks %s: %s", k, r.raw)
		}
	}
	if r.json["instance"] != r.path {
		tb.Errorf("got instance %v, want the request path %q", r.json["instance"], r.path)
	}
}

// newProxy starts a fault proxy in front of the test dynalite, in the
// harness's store mode (testenv.DefaultStore, as a server started with
// default Options runs), closed when tb ends.
func newProxy(tb testing.TB) *faultproxy.Proxy {
	tb.Helper()
	return testenv.NewProxy(tb, testenv.StoreDefault, nil)
}
