package rie_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/rie"
	"github.com/ft288/locks/local"
)

// rieCmd is the emulator's main package; go.mod lists it as a tool, so it
// builds at the version the module pins.
const rieCmd = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"

// table is the lock table the functions use in dynalite.
const table = "locks-rie"

var (
	// skipReason is set when node or dynalite is missing outside CI.
	skipReason string
	// functions holds one running emulator per api.Routes row, by name.
	functions = map[string]*function{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := local.FindRepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rie:", err)
		return 1
	}
	if reason := missingDeps(root); reason != "" {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "rie: %s (CI is set: failing instead of skipping)\n", reason)
			return 1
		}
		skipReason = reason
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "rie-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rie:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(ctx, root, dir); err != nil {
		fmt.Fprintln(os.Stderr, "rie:", err)
		return 1
	}
	d, err := local.StartDynalite(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rie:", err)
		return 1
	}
	defer d.Close()
	db := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("fake", "fake", ""),
		BaseEndpoint: aws.String(d.Endpoint),
	})
	if _, err := local.EnsureTable(ctx, db, table); err != nil {
		fmt.Fprintln(os.Stderr, "rie:", err)
		return 1
	}
	// Stop every emulator (and with it its bootstrap) however run ends.
	defer func() {
		for _, f := range functions {
			f.stop()
		}
	}()
	for _, r := range functionRoutes() {
		f, err := startFunction(ctx, dir, r, d.Endpoint)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rie:", err)
			return 1
		}
		functions[r.Name] = f
	}
	code := m.Run()
	if code != 0 {
		for name, f := range functions {
			fmt.Fprintf(os.Stderr, "--- emulator log of %s ---\n%s\n", name, f.Log())
		}
	}
	return code
}

// missingDeps says what is missing to run dynalite, or "".
func missingDeps(root string) string {
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not installed"
	}
	if _, err := os.Stat(filepath.Join(root, "node_modules", "dynalite", "package.json")); err != nil {
		return "dynalite is not in node_modules (run npm ci)"
	}
	return ""
}

// build compiles the emulator and, for the host, every function main as
// <dir>/<name>/bootstrap, the way `make build` does for Lambda.
func build(ctx context.Context, root, dir string) error {
	goBuild := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := goBuild("-trimpath", "-o", filepath.Join(dir, "aws-lambda-rie"), rieCmd); err != nil {
		return err
	}
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	args := []string{"-tags", "lambda.norpc", "-trimpath", "-o", bin}
	for _, r := range functionRoutes() {
		args = append(args, "./functions/"+r.Name)
	}
	if err := goBuild(args...); err != nil {
		return err
	}
	for _, r := range functionRoutes() {
		if err := os.MkdirAll(filepath.Join(dir, r.Name), 0o755); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(bin, r.Name), filepath.Join(dir, r.Name, "bootstrap")); err != nil {
			return err
		}
	}
	return nil
}

// function is one bootstrap running under its own emulator.
type function struct {
	route api.Route
	*rie.Emulator
}

// startFunction starts route's bootstrap under an emulator and makes one
// invocation of the function's own route without a body (status: 404; the
// others: 400 or 422), so the bootstrap has started, and reached dynalite,
// before any test runs.
func startFunction(ctx context.Context, dir string, route api.Route, endpoint string) (*function, error) {
	extra := []string{"MAX_TTL_SECONDS=86400", "TOMBSTONE_RETENTION_SECONDS=604800"}
	if route.Admin {
		// As the stack's -c admins: bob is the one administrator.
		extra = append(extra, api.AdminPrincipalsEnv+"="+bob.userArn)
	}
	env := rie.FunctionEnv(route.Name, table, endpoint, route.Timeout, extra...)
	emu, err := rie.Start(ctx, filepath.Join(dir, "aws-lambda-rie"), filepath.Join(dir, route.Name, "bootstrap"), env)
	if err != nil {
		return nil, err
	}
	f := &function{route: route, Emulator: emu}
	resp, raw, err := f.post(ctx, event(route, "rie-warmup", bob, ""))
	if err == nil && resp.StatusCode >= 500 {
		err = fmt.Errorf("got %s, want a 4xx answer", raw)
	}
	if err != nil {
		f.stop()
		return nil, fmt.Errorf("%s: warm-up invocation: %w\n%s", route.Name, err, emu.Log())
	}
	return f, nil
}

func (f *function) stop() { f.Stop() }

func (f *function) post(ctx context.Context, ev []byte) (events.APIGatewayV2HTTPResponse, string, error) {
	return f.Invoke(ctx, ev)
}

// caller is the IAM identity API Gateway's IAM authorizer puts into
// requestContext.authorizer.iam.
type caller struct {
	accessKey, userArn, userID string
}

// Callers: two sessions of one assumed role, which are one principal, and
// an IAM user, who is another.
var (
	workerA1 = caller{"ASIAEXAMPLEWORKERA01", "arn:aws:sts::123456789012:assumed-role/worker-a/session1", "AROAEXAMPLEWORKERA001:session1"}
	workerA2 = caller{"ASIAEXAMPLEWORKERA02", "arn:aws:sts::123456789012:assumed-role/worker-a/session2", "AROAEXAMPLEWORKERA001:session2"}
	bob      = caller{"AKIAEXAMPLEBOB000001", "arn:aws:iam::123456789012:user/bob", "AIDAEXAMPLEBOB0000001"}
)

var requestSeq atomic.Int64

// event returns the API Gateway HTTP API (payload format 2.0) event for
// route on resource, signed by c, as API Gateway sends it (shape of
// aws-lambda-go's events/testdata/apigw-v2-request-iam.json). An empty body
// is left out, as API Gateway does.
func event(route api.Route, resource string, c caller, body string) []byte {
	param := "resource" // a semaphore route's is {name}
	if strings.Contains(route.Path, "{name}") {
		param = "name"
	}
	path := strings.Replace(route.Path, "{"+param+"}", url.PathEscape(resource), 1)
	now := time.Now()
	reqID := fmt.Sprintf("rie-%d", requestSeq.Add(1))
	ev := map[string]any{
		"version":        "2.0",
		"routeKey":       route.Key(),
		"rawPath":        path,
		"rawQueryString": "",
		"headers": map[string]any{
			"content-type":      "application/json",
			"host":              "abc123.execute-api.us-east-1.amazonaws.com",
			"user-agent":        "curl/8.5.0",
			"x-amz-date":        now.UTC().Format("20060102T150405Z"),
			"x-amzn-trace-id":   "Root=1-00000000-000000000000000000000000",
			"x-forwarded-for":   "192.0.2.10",
			"x-forwarded-port":  "443",
			"x-forwarded-proto": "https",
		},
		"pathParameters": map[string]any{param: resource},
		"requestContext": map[string]any{
			"accountId": "123456789012",
			"apiId":     "abc123",
			"authorizer": map[string]any{
				"iam": map[string]any{
					"accessKey":       c.accessKey,
					"accountId":       "123456789012",
					"callerId":        c.userID,
					"cognitoIdentity": nil,
					"principalOrgId":  "o-exampleorgid",
					"userArn":         c.userArn,
					"userId":          c.userID,
				},
			},
			"domainName":   "abc123.execute-api.us-east-1.amazonaws.com",
			"domainPrefix": "abc123",
			"http": map[string]any{
				"method":    route.Method,
				"path":      path,
				"protocol":  "HTTP/1.1",
				"sourceIp":  "192.0.2.10",
				"userAgent": "curl/8.5.0",
			},
			"requestId": reqID,
			"routeKey":  route.Key(),
			"stage":     "$default",
			"time":      now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			"timeEpoch": now.UnixMilli(),
		},
		"isBase64Encoded": false,
	}
	if body != "" {
		ev["body"] = body
	}
	b, err := json.Marshal(ev)
	if err != nil {
		panic(err) // a map of plain values always marshals
	}
	return b
}

// functionRoutes returns the first api.Routes row of each function: one
// bootstrap serves every row with its name (the admin function serves two).
func functionRoutes() []api.Route {
	var out []api.Route
	seen := map[string]bool{}
	for _, r := range api.Routes {
		if !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r)
		}
	}
	return out
}

// routeNamed returns the first api.Routes row called name.
func routeNamed(tb testing.TB, name string) api.Route {
	tb.Helper()
	for _, r := range api.Routes {
		if r.Name == name {
			return r
		}
	}
	tb.Fatalf("no route %q in api.Routes", name)
	return api.Route{}
}

// invoke sends route's event through its emulator and fails tb on any
// transport or runtime failure.
func invoke(tb testing.TB, name, resource string, c caller, body string) events.APIGatewayV2HTTPResponse {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
	f, ok := functions[name]
	if !ok {
		tb.Fatalf("no emulator for %q", name)
	}
	resp, _, err := f.post(context.Background(), event(routeNamed(tb, name), resource, c, body))
	if err != nil {
		tb.Fatalf("%s %s: %v", name, resource, err)
	}
	return resp
}

// lockBody is the lock object in acquire, renew and status answers.
type lockBody struct {
	Resource     string `json:"resource"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencing_token"`
	AcquiredAt   string `json:"acquired_at"`
	ExpiresAt    string `json:"expires_at"`
}

// answer is the union of the JSON bodies the routes send.
type answer struct {
	Acquired *bool     `json:"acquired"`
	Renewed  *bool     `json:"renewed"`
	Lock     *lockBody `json:"lock"`
	lockBody           // status answers the lock itself
	Type     string    `json:"type"`
	Status   int       `json:"status"`
}

// step is one invocation in a scenario and what it must answer.
type step struct {
	name       string
	route      string
	caller     caller
	body       func(token int64) string // nil: no body
	wantStatus int
	check      func(tb testing.TB, a answer, token int64)
}

// runSteps plays steps in order against resource; the fencing token of the
// first successful acquire is handed to later bodies and checks.
func runSteps(t *testing.T, resource string, steps []step) {
	t.Helper()
	var token int64
	for i, s := range steps {
		body := ""
		if s.body != nil {
			body = s.body(token)
		}
		resp := invoke(t, s.route, resource, s.caller, body)
		if resp.StatusCode != s.wantStatus {
			t.Fatalf("step %d %s: got status %d, want %d; body %s", i, s.name, resp.StatusCode, s.wantStatus, resp.Body)
		}
		var a answer
		ct := resp.Headers["content-type"]
		switch {
		case s.wantStatus == http.StatusNoContent:
			if resp.Body != "" {
				t.Errorf("step %d %s: got body %q, want none", i, s.name, resp.Body)
			}
		case s.wantStatus >= 400:
			if ct != "application/problem+json" {
				t.Errorf("step %d %s: got content-type %q, want application/problem+json", i, s.name, ct)
			}
			if err := json.Unmarshal([]byte(resp.Body), &a); err != nil {
				t.Fatalf("step %d %s: body %q: %v", i, s.name, resp.Body, err)
			}
			if a.Status != s.wantStatus || !strings.HasPrefix(a.Type, api.ProblemTypeBase) {
				t.Errorf("step %d %s: got problem status %d type %q, want %d and a %s type", i, s.name, a.Status, a.Type, s.wantStatus, api.ProblemTypeBase)
			}
		default:
			if ct != "application/json" {
				t.Errorf("step %d %s: got content-type %q, want application/json", i, s.name, ct)
			}
			if err := json.Unmarshal([]byte(resp.Body), &a); err != nil {
				t.Fatalf("step %d %s: body %q: %v", i, s.name, resp.Body, err)
			}
		}
		if a.Acquired != nil && *a.Acquired && a.Lock != nil && token == 0 {
			token = a.Lock.FencingToken
		}
		if s.check != nil {
			s.check(t, a, token)
		}
	}
}

func acquireBody(owner string, ttl int) func(int64) string {
	return func(int64) string { return fmt.Sprintf(`{"owner":%q,"ttl_seconds":%d}`, owner, ttl) }
}

func waitBody(owner string, ttl, wait int) func(int64) string {
	return func(int64) string {
		return fmt.Sprintf(`{"owner":%q,"ttl_seconds":%d,"wait_seconds":%d}`, owner, ttl, wait)
	}
}

func renewBody(owner string, ttl int) func(int64) string {
	return func(tok int64) string {
		return fmt.Sprintf(`{"owner":%q,"ttl_seconds":%d,"fencing_token":%d}`, owner, ttl, tok)
	}
}

func releaseBody(owner string) func(int64) string {
	return func(tok int64) string { return fmt.Sprintf(`{"owner":%q,"fencing_token":%d}`, owner, tok) }
}

// wantLock checks a lock held by owner under the current token: the
// answer's "lock" member for acquire and renew (whose flag must equal the
// one given), the answer itself for status (both flags nil).
func wantLock(owner string, acquired *bool, renewed *bool) func(testing.TB, answer, int64) {
	return func(tb testing.TB, a answer, token int64) {
		tb.Helper()
		l := a.Lock
		if acquired == nil && renewed == nil {
			l = &a.lockBody
		}
		if acquired != nil && (a.Acquired == nil || *a.Acquired != *acquired) {
			tb.Errorf("got acquired %v, want %v", ptrStr(a.Acquired), *acquired)
		}
		if renewed != nil && (a.Renewed == nil || *a.Renewed != *renewed) {
			tb.Errorf("got renewed %v, want %v", ptrStr(a.Renewed), *renewed)
		}
		if l == nil {
			tb.Fatalf("got no lock in the answer, want one held by %q", owner)
		}
		if l.Owner != owner || l.FencingToken <= 0 || l.FencingToken != token {
			tb.Errorf("got lock owner %q token %d, want owner %q token %d (> 0)", l.Owner, l.FencingToken, owner, token)
		}
		acq, err1 := time.Parse(time.RFC3339, l.AcquiredAt)
		exp, err2 := time.Parse(time.RFC3339, l.ExpiresAt)
		if err1 != nil || err2 != nil || !exp.After(acq) {
			tb.Errorf("got acquired_at %q expires_at %q, want RFC 3339 times with expiry after acquisition", l.AcquiredAt, l.ExpiresAt)
		}
	}
}

func ptrStr(b *bool) string {
	if b == nil {
		return "absent"
	}
	return strconv.FormatBool(*b)
}

var yes = true

// TestRoutes drives every route through its real bootstrap.
func TestRoutes(t *testing.T) {
	t.Parallel()
	lockRoutes := 0
	for _, r := range api.Routes {
		// Lock sets and read/write locks: internal/integration's
		// lockset_test.go and rwlock_test.go, through the local runner.
		if !r.Admin && !r.Set && !strings.HasPrefix(r.Path, "/rwlocks/") {
			lockRoutes++
		}
	}
	if lockRoutes != 12 {
		t.Fatalf("got %d lock and semaphore routes, want the 12 this scenario and TestSemaphoreRoutes cover", lockRoutes)
	}
	// watch, without a query: the state at once (index 0 was never it).
	watched := func(held bool) func(testing.TB, answer, int64) {
		return func(tb testing.TB, a answer, token int64) {
			tb.Helper()
			if (a.Lock != nil) != held || (held && a.Lock.FencingToken != token) {
				tb.Errorf("got lock %+v, want held %v with token %d", a.Lock, held, token)
			}
		}
	}
	runSteps(t, "rie-lifecycle", []step{
		{name: "AcquireFree", route: "acquire", caller: workerA1, body: acquireBody("worker-1", 30), wantStatus: 200,
			check: wantLock("worker-1", &yes, nil)},
		{name: "StatusHeld", route: "status", caller: bob, wantStatus: 200, check: wantLock("worker-1", nil, nil)},
		// A try does not wait: the released clients' request shape is
		// refused with a 422 naming wait_seconds.
		{name: "TryRefusesWait", route: "acquire", caller: bob, body: waitBody("worker-2", 30, 1), wantStatus: 422},
		{name: "WaitHeld", route: "wait", caller: bob, body: waitBody("worker-2", 30, 1), wantStatus: 200,
			check: func(tb testing.TB, a answer, _ int64) {
				if a.Acquired == nil || *a.Acquired || a.Lock != nil {
					tb.Errorf("got acquired %s lock %+v, want held for the whole wait", ptrStr(a.Acquired), a.Lock)
				}
			}},
		{name: "WatchHeld", route: "watch", caller: bob, wantStatus: 200, check: watched(true)},
		{name: "Renew", route: "renew", caller: workerA1, body: renewBody("worker-1", 60), wantStatus: 200,
			check: wantLock("worker-1", nil, &yes)},
		{name: "Release", route: "release", caller: workerA1, body: releaseBody("worker-1"), wantStatus: 204},
		{name: "StatusReleased", route: "status", caller: workerA1, wantStatus: 404},
		{name: "WatchReleased", route: "watch", caller: workerA1, wantStatus: 200, check: watched(false)},
		{name: "WaitFree", route: "wait", caller: bob, body: waitBody("worker-2", 30, 2), wantStatus: 200,
			check: func(tb testing.TB, a answer, token int64) {
				if a.Acquired == nil || !*a.Acquired || a.Lock == nil || a.Lock.Owner != "worker-2" || a.Lock.FencingToken <= token {
					tb.Errorf("got acquired %s lock %+v, want worker-2's lease with a token above %d", ptrStr(a.Acquired), a.Lock, token)
				}
			}},
	})
}

// TestPrincipalBinding checks that the lock belongs to the IAM principal
// that took it, not only to the owner string, and that two sessions of one
// assumed role are one principal.
func TestPrincipalBinding(t *testing.T) {
	t.Parallel()
	runSteps(t, "rie-principal", []step{
		{name: "AcquireAsRoleSession1", route: "acquire", caller: workerA1, body: acquireBody("shared", 30), wantStatus: 200,
			check: wantLock("shared", &yes, nil)},
		{name: "ReleaseAsOtherPrincipal", route: "release", caller: bob, body: releaseBody("shared"), wantStatus: 403},
		{name: "RenewAsOtherPrincipal", route: "renew", caller: bob, body: renewBody("shared", 30), wantStatus: 403},
		{name: "AcquireAsOtherPrincipal", route: "acquire", caller: bob, body: acquireBody("shared", 30), wantStatus: 200,
			check: func(tb testing.TB, a answer, _ int64) {
				if a.Acquired == nil || *a.Acquired || a.Lock != nil {
					tb.Errorf("got acquired %s lock %+v, want acquired false and no lock", ptrStr(a.Acquired), a.Lock)
				}
			}},
		{name: "StatusStillFirstHolder", route: "status", caller: bob, wantStatus: 200, check: wantLock("shared", nil, nil)},
		{name: "RenewAsRoleSession2", route: "renew", caller: workerA2, body: renewBody("shared", 30), wantStatus: 200,
			check: wantLock("shared", nil, &yes)},
		{name: "ReleaseAsRoleSession2", route: "release", caller: workerA2, body: releaseBody("shared"), wantStatus: 204},
		{name: "StatusReleased", route: "status", caller: bob, wantStatus: 404},
	})
}

// TestBadRequests checks that malformed bodies are problems, not crashes,
// on the real runtime path.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		route      string
		body       string
		wantStatus int
	}{
		{name: "ErrTTLNotInteger", route: "acquire", body: `{"owner":"w","ttl_seconds":"30"}`, wantStatus: 422},
		{name: "ErrOwnerMissing", route: "acquire", body: `{"ttl_seconds":30}`, wantStatus: 422},
		{name: "ErrUnknownMember", route: "renew", body: `{"owner":"w","ttl_seconds":30,"force":true}`, wantStatus: 422},
		{name: "ErrNotJSON", route: "release", body: `owner=w`, wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, "rie-bad-"+tt.name, []step{{
				name: tt.name, route: tt.route, caller: workerA1, body: func(int64) string { return tt.body },
				wantStatus: tt.wantStatus,
			}})
		})
	}
}

// TestAdminForceRelease drives the admin function's force release through
// its real bootstrap: a caller outside ADMIN_PRINCIPALS is refused 403
// not-an-administrator and ends nothing, an administrator ends another
// principal's live lease.
func TestAdminForceRelease(t *testing.T) {
	t.Parallel()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	const res = "rie-admin"
	if r := invoke(t, "acquire", res, workerA1, acquireBody("worker-1", 30)(0)); r.StatusCode != 200 {
		t.Fatalf("acquire: got %d %s", r.StatusCode, r.Body)
	}
	var force api.Route
	for _, r := range api.Routes {
		if r.Admin && r.Method == "DELETE" && strings.Contains(r.Path, "{resource}") { // a lock's, not a semaphore's
			force = r
		}
	}
	resp, _, err := functions["admin"].post(context.Background(), event(force, res, workerA2, `{"reason":"holder is gone"}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 || !strings.Contains(resp.Body, "not-an-administrator") {
		t.Fatalf("force release by a non-administrator: got %d %s, want 403 not-an-administrator", resp.StatusCode, resp.Body)
	}
	if r := invoke(t, "status", res, bob, ""); r.StatusCode != 200 {
		t.Fatalf("status after a refused force release: got %d %s, want 200 (the lease is intact)", r.StatusCode, r.Body)
	}
	resp, _, err = functions["admin"].post(context.Background(), event(force, res, bob, `{"reason":"holder is gone"}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.Contains(resp.Body, `"owner":"worker-1"`) {
		t.Fatalf("force release: got %d %s, want 200 naming the lease it ended", resp.StatusCode, resp.Body)
	}
	if r := invoke(t, "status", res, bob, ""); r.StatusCode != 404 {
		t.Errorf("status after force release: got %d %s, want 404", r.StatusCode, r.Body)
	}
}

// routeOp returns the api.Routes row of operation op.
func routeOp(tb testing.TB, op string) api.Route {
	tb.Helper()
	for _, r := range api.Routes {
		if r.OperationID() == op {
			return r
		}
	}
	tb.Fatalf("no operation %q in api.Routes", op)
	return api.Route{}
}

// invokeOp sends the event of operation op through the emulator of its
// function (a semaphore row runs on the lock function of its job).
func invokeOp(tb testing.TB, op, name string, c caller, body string) (events.APIGatewayV2HTTPResponse, map[string]any) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
	r := routeOp(tb, op)
	resp, _, err := functions[r.Name].post(context.Background(), event(r, name, c, body))
	if err != nil {
		tb.Fatalf("%s %s: %v", op, name, err)
	}
	var m map[string]any
	if resp.Body != "" {
		if err := json.Unmarshal([]byte(resp.Body), &m); err != nil {
			tb.Fatalf("%s: body %q: %v", op, resp.Body, err)
		}
	}
	return resp, m
}

// TestSemaphoreRoutes drives every semaphore row through the real
// bootstrap of the function it shares with a lock row, which tells them
// apart by the route key.
func TestSemaphoreRoutes(t *testing.T) {
	t.Parallel()
	const name = "rie-semaphore"
	want := func(op string, resp events.APIGatewayV2HTTPResponse, status int) {
		t.Helper()
		if resp.StatusCode != status {
			t.Fatalf("%s: got %d %s, want %d", op, resp.StatusCode, resp.Body, status)
		}
	}
	resp, a := invokeOp(t, "acquireSemaphore", name, workerA1, `{"owner":"w1","ttl_seconds":30,"permits":2}`)
	want("acquireSemaphore", resp, 200)
	permit, _ := a["permit"].(map[string]any)
	if a["acquired"] != true || permit == nil {
		t.Fatalf("acquire: got %v, want a permit", a)
	}
	slot, tok := int64(permit["slot"].(float64)), int64(permit["fencing_token"].(float64))
	resp, a = invokeOp(t, "acquireSemaphoreWait", name, bob, `{"owner":"w2","ttl_seconds":30,"permits":3,"wait_seconds":1}`)
	want("acquireSemaphoreWait (another N, answered at once)", resp, 409)
	resp, a = invokeOp(t, "acquireSemaphore", name, bob, `{"owner":"w2","ttl_seconds":30,"permits":3}`)
	want("acquireSemaphore (another N)", resp, 409)
	if a["permits"] != 2.0 {
		t.Errorf("permits-mismatch: got %v, want permits 2", a)
	}
	resp, a = invokeOp(t, "semaphoreStatus", name, bob, "")
	want("semaphoreStatus", resp, 200)
	if h, _ := a["holders"].([]any); len(h) != 1 || a["permits"] != 2.0 {
		t.Errorf("status: got %v, want one holder of 2 permits", a)
	}
	resp, a = invokeOp(t, "watchSemaphore", name, bob, "")
	want("watchSemaphore", resp, 200)
	if a["fencing_token"] != float64(tok) {
		t.Errorf("watch: got %v, want fencing_token %v", a, tok)
	}
	resp, _ = invokeOp(t, "renewSemaphore", name, bob, fmt.Sprintf(`{"owner":"w1","slot":%v,"ttl_seconds":30}`, slot))
	want("renewSemaphore (another principal)", resp, 403)
	resp, a = invokeOp(t, "renewSemaphore", name, workerA2, fmt.Sprintf(`{"owner":"w1","slot":%v,"ttl_seconds":60,"fencing_token":%v}`, slot, tok))
	want("renewSemaphore", resp, 200)
	if a["renewed"] != true {
		t.Errorf("renew: got %v", a)
	}
	resp, a = invokeOp(t, "listSemaphores", "", bob, "")
	want("listSemaphores", resp, 200)
	resp, _ = invokeOp(t, "forceReleaseSemaphore", name, workerA1, fmt.Sprintf(`{"slot":%v,"reason":"test"}`, slot))
	want("forceReleaseSemaphore (not an administrator)", resp, 403)
	resp, _ = invokeOp(t, "releaseSemaphore", name, workerA1, fmt.Sprintf(`{"owner":"w1","slot":%v}`, slot))
	want("releaseSemaphore", resp, 204)
	resp, _ = invokeOp(t, "forceReleaseSemaphore", name, bob, fmt.Sprintf(`{"slot":%v,"reason":"test"}`, slot))
	want("forceReleaseSemaphore (nothing live)", resp, 404)
	resp, a = invokeOp(t, "acquireSemaphoreWait", name, bob, `{"owner":"w2","ttl_seconds":30,"permits":2,"wait_seconds":1}`)
	want("acquireSemaphoreWait", resp, 200)
	if p, _ := a["permit"].(map[string]any); a["acquired"] != true || p == nil || p["fencing_token"].(float64) <= float64(tok) {
		t.Errorf("waiting acquire of a free semaphore: got %v, want a permit with a token above %d", a, tok)
	}
}
