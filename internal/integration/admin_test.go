package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/locklogic"
)

// logBuffer collects a server's log lines; safe for the handlers' writes
// and the test's reads at once.
type logBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{} // closed by the next write
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return l.b.Write(p)
}

// snapshot returns the log so far and a channel closed by the next write.
func (l *logBuffer) snapshot() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.b.String(), l.changed
}

// lines returns the JSON lines logged so far whose msg is msg.
func (l *logBuffer) lines(tb testing.TB, msg string) []map[string]any {
	tb.Helper()
	text, _ := l.snapshot()
	return parseLines(tb, text, msg)
}

// waitLines waits up to 10 s until n lines whose msg is msg have been
// logged, and returns them.
func (l *logBuffer) waitLines(tb testing.TB, msg string, n int) []map[string]any {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		text, changed := l.snapshot()
		if lines := parseLines(tb, text, msg); len(lines) >= n {
			return lines
		}
		select {
		case <-changed:
		case <-timeout:
			tb.Fatalf("got %d %q log lines after 10s, want %d:\n%s", len(parseLines(tb, text, msg)), msg, n, text)
		}
	}
}

// parseLines returns the JSON lines of text whose msg is msg.
func parseLines(tb testing.TB, text, msg string) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(text), "\n") {
		if s == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			tb.Fatalf("log line %q is not JSON: %v", s, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func adminPath(resource string) string { return "/admin/locks/" + url.PathEscape(resource) }

func reasonBody(reason string) string {
	b, _ := json.Marshal(map[string]string{"reason": reason})
	return string(b)
}

// acquireDelay takes resource for owner with a lock-delay and returns the
// lock.
func acquireDelay(tb testing.TB, srv *testenv.Server, resource, owner string, ttl, delay int) map[string]any {
	tb.Helper()
	b, _ := json.Marshal(map[string]any{"owner": owner, "ttl_seconds": ttl, "lock_delay_seconds": delay})
	r := call(tb, srv, "POST", lockPath(resource), string(b))
	if r.status != 200 || r.json["acquired"] != true {
		tb.Fatalf("acquire %q as %q with lock-delay %d: got %d %s, want granted", resource, owner, delay, r.status, r.raw)
	}
	return r.json["lock"].(map[string]any)
}

// wantAcquire asks for resource as owner and fails unless the answer is
// granted (want true) or held (want false).
func wantAcquire(tb testing.TB, srv *testenv.Server, resource, owner string, want bool) map[string]any {
	tb.Helper()
	r := call(tb, srv, "POST", lockPath(resource), acquireBody(owner, 30))
	if r.status != 200 || r.json["acquired"] != want {
		tb.Fatalf("acquire %q as %q: got %d %s, want acquired %v", resource, owner, r.status, r.raw, want)
	}
	if want {
		return r.json["lock"].(map[string]any)
	}
	return nil
}

// listAll follows the listing of prefix page by page (limit per page) and
// returns the names listed, in order, and the number of pages.
func listAll(tb testing.TB, srv *testenv.Server, prefix string, limit int) ([]string, int) {
	tb.Helper()
	var names []string
	cursor := ""
	for pages := 1; ; pages++ {
		q := url.Values{"prefix": {prefix}, "limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := call(tb, srv, "GET", "/admin/locks?"+q.Encode(), "")
		if r.status != 200 {
			tb.Fatalf("list page %d: got %d %s", pages, r.status, r.raw)
		}
		locks := r.json["locks"].([]any)
		if len(locks) > limit {
			tb.Fatalf("page %d: got %d locks, want at most %d", pages, len(locks), limit)
		}
		for _, l := range locks {
			names = append(names, l.(map[string]any)["resource"].(string))
		}
		next, _ := r.json["cursor"].(string)
		if next == "" {
			return names, pages
		}
		if pages > 1000 {
			tb.Fatalf("no end of the listing after %d pages", pages)
		}
		cursor = next
	}
}

// TestAdminList: GET /admin/locks lists exactly the leases under a prefix
// that keep others out — live ones and one inside its lock-delay; not the
// released, the expired, or another prefix's — across pages of a small
// limit, each once.
func TestAdminList(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	prefix := res(t) + ":"
	var want []string
	for i := range 7 {
		name := prefix + "live-" + strconv.Itoa(i)
		acquire(t, srv, name, "w"+strconv.Itoa(i), 60)
		want = append(want, name)
	}
	acquire(t, srv, prefix+"expired", "w", 1)
	acquireDelay(t, srv, prefix+"delayed", "w", 1, 30)
	want = append(want, prefix+"delayed")
	rel := acquire(t, srv, prefix+"released", "w", 60)
	if r := call(t, srv, "DELETE", lockPath(prefix+"released"), ownerBody("w", token(t, rel))); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	acquire(t, srv, res(t)+"-other-prefix", "w", 60)
	clock.Advance(2 * time.Second) // "expired" and "delayed" expire; "delayed" is in its lock-delay

	got, pages := listAll(t, srv, prefix, 2)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if pages < 4 {
		t.Errorf("got %d pages of at most 2, want at least 4 for %d leases", pages, len(want))
	}

	// One page with every lease: each with its owner and, for the one with
	// a lock-delay, the delay and an expiry in the past.
	r := call(t, srv, "GET", "/admin/locks?prefix="+url.QueryEscape(prefix)+"&limit=1000", "")
	for r.json["cursor"] != nil && len(r.json["locks"].([]any)) < len(want) {
		r = call(t, srv, "GET", "/admin/locks?prefix="+url.QueryEscape(prefix)+"&limit=1000&cursor="+url.QueryEscape(r.json["cursor"].(string)), "")
	}
	for _, l := range r.json["locks"].([]any) {
		lock := l.(map[string]any)
		if lock["resource"] == prefix+"delayed" && (lock["lock_delay_seconds"] != json.Number("30") || lock["owner"] != "w") {
			t.Errorf("got %v, want the delayed lease with its lock_delay_seconds", lock)
		}
		if lock["resource"] == prefix+"live-3" && lock["owner"] != "w3" {
			t.Errorf("got %v, want owner w3", lock)
		}
	}

	wantProblem(t, call(t, srv, "GET", "/admin/locks?limit=0", ""), 422, "validation-failed")
	wantProblem(t, call(t, srv, "GET", "/admin/locks?cursor=%25%25", ""), 422, "validation-failed")
	wantProblem(t, call(t, srv, "GET", "/admin/locks?prefx=a", ""), 422, "validation-failed")
}

// TestAdminForceRelease: DELETE /admin/locks/{resource} ends the lease
// whoever holds it and answers what it ended; the record stays a tombstone
// with its counter, so the next grant's token is larger; the ended holder's
// renew and release are 404; one audit line names caller, lease and
// reason.
func TestAdminForceRelease(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	srv := testenv.Start(t, testenv.Options{LogTo: logs, Identity: func(r *http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
		if strings.HasPrefix(r.URL.Path, "/admin/") {
			return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
				AccountID: "123456789012", UserARN: "arn:aws:sts::123456789012:assumed-role/oncall/alice"}
		}
		return nil
	}})
	r0 := res(t)
	tok := token(t, acquire(t, srv, r0, "w1", 3600))

	r := call(t, srv, "DELETE", adminPath(r0), reasonBody("  worker host is gone (INC-7)  "))
	if r.status != 200 {
		t.Fatalf("force release: got %d %s, want 200", r.status, r.raw)
	}
	ended := r.json["ended"].(map[string]any)
	if ended["owner"] != "w1" || token(t, ended) != tok || ended["resource"] != r0 || r.json["reason"] != "worker host is gone (INC-7)" {
		t.Errorf("got %s, want the ended lease of w1 with token %d and the trimmed reason", r.raw, tok)
	}
	wantProblem(t, call(t, srv, "GET", lockPath(r0), ""), 404, "not-found")
	for _, r := range []reply{
		call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 30, tok)),
		call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", tok)),
	} {
		wantProblem(t, r, 404, "not-found")
		if r.json["force_released"] != true {
			t.Errorf("the evicted holder is not told its lease was force released: %s", r.raw)
		}
	}

	// The record and its counter stay, marked as force released.
	out, err := srv.DB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(testenv.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: r0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{locklogic.AttrForcedAt, locklogic.AttrReleaseID, locklogic.AttrToken} {
		if _, ok := out.Item[a]; !ok {
			t.Errorf("the ended lease's record lacks %s: %v", a, out.Item)
		}
	}
	next := token(t, acquire(t, srv, r0, "w2", 30))
	if next <= tok {
		t.Errorf("got token %d after the force release, want more than %d", next, tok)
	}

	audits := logs.lines(t, "audit")
	if len(audits) != 1 {
		t.Fatalf("got %d audit lines, want 1", len(audits))
	}
	for k, v := range map[string]any{
		"action": "force-release", "outcome": "force-released", "principal": "arn:aws:sts::123456789012:assumed-role/oncall/alice",
		"resource": r0, "owner": "w1", "fencing_token": float64(tok), "reason": "worker host is gone (INC-7)", "immediate": false,
	} {
		if audits[0][k] != v {
			t.Errorf("audit %s: got %v, want %v", k, audits[0][k], v)
		}
	}

	// Nothing to end: 404, audited; a request without a valid reason never
	// reaches the store and is not.
	if _, err := srv.DB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(testenv.Table),
		Key: map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: r0 + "-absent"}}}); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, call(t, srv, "DELETE", adminPath(r0+"-absent"), reasonBody("x")), 404, "not-found")
	wantProblem(t, call(t, srv, "DELETE", adminPath(r0), `{}`), 422, "validation-failed")
	wantProblem(t, call(t, srv, "DELETE", adminPath(r0), `{"reason":"`+strings.Repeat("r", 501)+`"}`), 422, "validation-failed")
	if audits := logs.lines(t, "audit"); len(audits) != 2 || audits[1]["outcome"] != "not-found" {
		t.Errorf("got audit lines %v, want the refused attempt's (not-found) and none for invalid bodies", audits)
	}
}

// TestLockDelay: a lease that expires unreleased keeps the lock from others
// until expires_at + lock_delay (renewals move it); a release frees it at
// once; a force release ends the delay; the same owner may take it back.
func TestLockDelay(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})

	t.Run("ExpiryBlocksUntilFreeAt", func(t *testing.T) {
		r0 := res(t)
		lock := acquireDelay(t, srv, r0, "w1", 1, 10)
		if lock["lock_delay_seconds"] != json.Number("10") {
			t.Errorf("got lease %v, want lock_delay_seconds 10", lock)
		}
		clock.Advance(2 * time.Second) // expired, 9 s of lock-delay left
		wantProblem(t, call(t, srv, "GET", lockPath(r0), ""), 404, "not-found")
		wantAcquire(t, srv, r0, "w2", false)
		clock.Advance(8 * time.Second) // free_at is 1 s away
		wantAcquire(t, srv, r0, "w2", false)
		clock.Advance(time.Second)
		if next := token(t, wantAcquire(t, srv, r0, "w2", true)); next <= token(t, lock) {
			t.Errorf("got token %d, want more than %d", next, token(t, lock))
		}
	})
	t.Run("ReleaseFreesAtOnce", func(t *testing.T) {
		r0 := res(t)
		lock := acquireDelay(t, srv, r0, "w1", 30, 300)
		if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", token(t, lock))); r.status != 204 {
			t.Fatalf("release: got %d %s", r.status, r.raw)
		}
		wantAcquire(t, srv, r0, "w2", true)
	})
	t.Run("RenewMovesFreeAt", func(t *testing.T) {
		r0 := res(t)
		acquireDelay(t, srv, r0, "w1", 1, 5) // free at +6 s
		if r := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 10)); r.status != 200 {
			t.Fatalf("renew: got %d %s", r.status, r.raw)
		}
		clock.Advance(12 * time.Second) // expired at +10 s, free at +15 s
		wantAcquire(t, srv, r0, "w2", false)
		clock.Advance(3 * time.Second)
		wantAcquire(t, srv, r0, "w2", true)
	})
	t.Run("WithoutDelayFreeAtExpiry", func(t *testing.T) {
		// A lease without a delay after one with: the earlier free_at does
		// not outlive its lease.
		r0 := res(t)
		acquireDelay(t, srv, r0, "w1", 1, 60)
		acquire(t, srv, r0, "w1", 1) // the same owner takes it back, no delay
		clock.Advance(2 * time.Second)
		wantAcquire(t, srv, r0, "w2", true)
	})
	t.Run("SameOwnerInDelay", func(t *testing.T) {
		r0 := res(t)
		acquireDelay(t, srv, r0, "w1", 1, 60)
		clock.Advance(2 * time.Second)
		wantAcquire(t, srv, r0, "w2", false)
		wantAcquire(t, srv, r0, "w1", true)
	})
	t.Run("ForceReleaseEndsDelayOnlyImmediately", func(t *testing.T) {
		r0 := res(t)
		acquireDelay(t, srv, r0, "w1", 1, 60)
		clock.Advance(2 * time.Second)
		wantProblem(t, call(t, srv, "DELETE", adminPath(r0), reasonBody("holder gone")), 404, "not-found")
		if r := call(t, srv, "DELETE", adminPath(r0), `{"reason":"holder gone","immediate":true}`); r.status != 200 {
			t.Fatalf("immediate force release in the lock-delay: got %d %s, want 200", r.status, r.raw)
		}
		wantAcquire(t, srv, r0, "w2", true)
	})
	t.Run("OutOfRange", func(t *testing.T) {
		r := call(t, srv, "POST", lockPath(res(t)), `{"owner":"w1","ttl_seconds":30,"lock_delay_seconds":301}`)
		wantProblem(t, r, 422, "validation-failed")
	})
}

// TestLockDelayLateAcquire: an acquire issued before a lease with a
// lock-delay was granted, landing during that delay (an instance whose
// clock lags, as a late write does), is refused: its :now is before the
// lease's expiry.
func TestLockDelayLateAcquire(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})
	late := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(-3 * time.Second) }})
	r0 := res(t)
	acquireDelay(t, srv, r0, "w1", 1, 30)
	clock.Advance(2 * time.Second)
	wantAcquire(t, late, r0, "w2", false)
}

// TestLockDelayWait: a waiting acquire is granted when the lock-delay of a
// lease that expired unreleased ends, not at its expiry (real clock:
// dynalite returns no old item, so the waiter learns free_at from its
// reads).
func TestLockDelayWait(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	start := time.Now()
	acquireDelay(t, srv, r0, "w1", 1, 2) // free 3 s after the grant
	b, _ := json.Marshal(map[string]any{"owner": "w2", "ttl_seconds": 30, "wait_seconds": 8})
	r := call(t, srv, "POST", waitPath(r0), string(b))
	took := time.Since(start)
	if r.status != 200 || r.json["acquired"] != true {
		t.Fatalf("waiting acquire: got %d %s, want granted", r.status, r.raw)
	}
	if took < 3*time.Second || took > 6*time.Second {
		t.Errorf("granted %s after the first grant, want at its free_at (3 s), soon after", took)
	}
}

// TestMetricsLines: the runner's log (the production logger, as `make run`
// writes it) has one line per request in CloudWatch's Embedded Metric
// Format — a valid directive whose metrics are top-level numbers and whose
// dimensions are top-level strings (never the resource) — with the route's
// name and the request's outcome, and WaitTime for a waiting acquire.
func TestMetricsLines(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	srv := testenv.Start(t, testenv.Options{LogTo: logs})
	r0 := res(t)
	tok := token(t, acquire(t, srv, r0, "w1", 30))                                         // acquire acquired
	wantAcquire(t, srv, r0, "w2", false)                                                   // acquire contended
	call(t, srv, "GET", lockPath(r0), "")                                                  // status found
	call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 30, tok))                  // renew renewed
	call(t, srv, "DELETE", lockPath(r0), ownerBody("w2"))                                  // release forbidden
	call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", tok+1))                           // release stale-token
	call(t, srv, "DELETE", lockPath(r0), ownerBody("w1", tok))                             // release released
	call(t, srv, "GET", lockPath(r0), "")                                                  // status not-found
	call(t, srv, "POST", lockPath(r0), `{"owner":"w1","ttl_seconds":"30"}`)                // acquire invalid
	call(t, srv, "POST", waitPath(r0), `{"owner":"w3","ttl_seconds":30,"wait_seconds":2}`) // wait acquired, waited
	call(t, srv, "GET", "/admin/locks?prefix="+url.QueryEscape(r0), "")                    // admin listed
	call(t, srv, "DELETE", adminPath(r0), reasonBody("test"))                              // admin force-released
	want := [][2]string{
		{"acquire", "acquired"}, {"acquire", "contended"}, {"status", "found"}, {"renew", "renewed"},
		{"release", "forbidden"}, {"release", "stale-token"}, {"release", "released"}, {"status", "not-found"},
		{"acquire", "invalid"}, {"wait", "acquired"}, {"admin", "listed"}, {"admin", "force-released"},
	}

	var got [][2]string
	for _, line := range logs.lines(t, "request") {
		got = append(got, [2]string{line["Route"].(string), line["Outcome"].(string)})
		metrics := checkEMF(t, line)
		wantMetrics := []string{"Requests", "Latency"}
		if len(got) == 10 {
			wantMetrics = append(wantMetrics, "WaitTime")
		}
		if !slices.Equal(metrics, wantMetrics) {
			t.Errorf("line %d (%v): got metrics %v, want %v", len(got), got[len(got)-1], metrics, wantMetrics)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("got (Route, Outcome) %v\nwant %v", got, want)
	}
}

// checkEMF fails unless line is a valid CloudWatch Embedded Metric Format
// record, and returns the names of its metrics: "_aws" holds a Timestamp
// in epoch milliseconds and CloudWatchMetrics, each directive with a
// Namespace, Dimensions (sets of names, each a top-level string member, at
// most 30 per set) and Metrics (each a top-level number member, with a
// unit CloudWatch knows).
func checkEMF(tb testing.TB, line map[string]any) []string {
	tb.Helper()
	aws, ok := line["_aws"].(map[string]any)
	if !ok {
		tb.Fatalf("no _aws member: %v", line)
	}
	ts, ok := aws["Timestamp"].(float64)
	if !ok || ts != float64(int64(ts)) || time.Since(time.UnixMilli(int64(ts))).Abs() > time.Hour {
		tb.Errorf("_aws.Timestamp %v: want epoch milliseconds of now", aws["Timestamp"])
	}
	directives, _ := aws["CloudWatchMetrics"].([]any)
	if len(directives) == 0 {
		tb.Fatalf("no _aws.CloudWatchMetrics: %v", aws)
	}
	var names []string
	for _, d := range directives {
		dir := d.(map[string]any)
		if ns, _ := dir["Namespace"].(string); ns != "LockService" {
			tb.Errorf("got Namespace %q, want the default LockService", ns)
		}
		dims, _ := dir["Dimensions"].([]any)
		if len(dims) == 0 {
			tb.Errorf("no Dimensions: %v", dir)
		}
		for _, set := range dims {
			set, _ := set.([]any)
			if len(set) == 0 || len(set) > 30 {
				tb.Errorf("dimension set %v: want 1 to 30 names", set)
			}
			for _, name := range set {
				n, _ := name.(string)
				if _, ok := line[n].(string); !ok || strings.EqualFold(n, "resource") {
					tb.Errorf("dimension %q: got %v, want a top-level string that is not the resource", n, line[n])
				}
			}
		}
		metrics, _ := dir["Metrics"].([]any)
		if len(metrics) == 0 {
			tb.Errorf("no Metrics: %v", dir)
		}
		for _, m := range metrics {
			m := m.(map[string]any)
			n, _ := m["Name"].(string)
			if _, ok := line[n].(float64); !ok {
				tb.Errorf("metric %q: got %v, want a top-level number", n, line[n])
			}
			if u := m["Unit"]; u != "Count" && u != "Milliseconds" {
				tb.Errorf("metric %q: unit %v", n, u)
			}
			names = append(names, n)
		}
	}
	return names
}

// TestForceReleaseLockDelay: a force release honours the lease's
// lock-delay unless immediate. The lease ends now; nobody, the evicted
// owner included, takes the lock before free_at; a waiter is granted at
// free_at; an immediate force release frees it at once; a fencing token
// other than the lease's is refused with the lease that stayed (409), as
// is a force release issued before the lease was granted.
func TestForceReleaseLockDelay(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock()
	srv := testenv.Start(t, testenv.Options{Now: clock.Now})

	t.Run("DelayKept", func(t *testing.T) {
		r0 := res(t)
		tok := token(t, acquireDelay(t, srv, r0, "w1", 3600, 120))
		r := call(t, srv, "DELETE", adminPath(r0), reasonBody("slow holder"))
		if r.status != 200 || r.json["immediate"] != false {
			t.Fatalf("force release: got %d %s", r.status, r.raw)
		}
		freeAt, err := time.Parse(time.RFC3339, r.json["free_at"].(string))
		if err != nil || freeAt.Sub(clock.Now().Truncate(time.Millisecond)) != 120*time.Second {
			t.Errorf("got free_at %v, want the force release's time + 120 s (%v)", r.json["free_at"], clock.Now().Add(120*time.Second))
		}
		wantAcquire(t, srv, r0, "w2", false)
		wantAcquire(t, srv, r0, "w1", false) // the evicted owner too
		wantProblem(t, call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w1", 30)), 404, "not-found")
		clock.Advance(119 * time.Second)
		wantAcquire(t, srv, r0, "w2", false)
		clock.Advance(time.Second)
		if next := token(t, wantAcquire(t, srv, r0, "w2", true)); next <= tok {
			t.Errorf("got token %d, want more than %d", next, tok)
		}
		// The new lease is an ordinary one: its holder renews and releases.
		if r := call(t, srv, "POST", lockPath(r0)+"/renew", renewBody("w2", 30)); r.status != 200 {
			t.Errorf("renew of the next lease: got %d %s", r.status, r.raw)
		}
	})
	t.Run("Immediate", func(t *testing.T) {
		r0 := res(t)
		tok := token(t, acquireDelay(t, srv, r0, "w1", 3600, 120))
		body := fmt.Sprintf(`{"reason":"host terminated","immediate":true,"fencing_token":%d}`, tok)
		if r := call(t, srv, "DELETE", adminPath(r0), body); r.status != 200 || r.json["immediate"] != true {
			t.Fatalf("immediate force release: got %d %s", r.status, r.raw)
		}
		wantAcquire(t, srv, r0, "w2", true)
	})
	t.Run("OtherToken", func(t *testing.T) {
		r0 := res(t)
		tok := token(t, acquire(t, srv, r0, "w1", 3600))
		r := call(t, srv, "DELETE", adminPath(r0), fmt.Sprintf(`{"reason":"x","fencing_token":%d}`, tok-1))
		wantProblem(t, r, 409, "stale-token")
		if cur, _ := r.json["current"].(map[string]any); cur == nil || token(t, cur) != tok || cur["owner"] != "w1" {
			t.Errorf("got %s, want the current lease (w1, %d)", r.raw, tok)
		}
		wantAcquire(t, srv, r0, "w2", false) // still held
	})
	t.Run("IssuedBeforeTheLease", func(t *testing.T) {
		// An instance whose clock is 2 s behind serves a force release
		// issued, by its clock, before the lease was granted: refused, 409
		// with the lease (not 503: a retry would end a lease the operator
		// never saw).
		late := testenv.Start(t, testenv.Options{Now: func() time.Time { return clock.Now().Add(-2 * time.Second) }})
		r0 := res(t)
		tok := token(t, acquire(t, srv, r0, "w1", 3600))
		r := call(t, late, "DELETE", adminPath(r0), reasonBody("late"))
		wantProblem(t, r, 409, "stale-token")
		if cur, _ := r.json["current"].(map[string]any); cur == nil || token(t, cur) != tok {
			t.Errorf("got %s, want the current lease %d", r.raw, tok)
		}
	})
	t.Run("WaiterWakesAtFreeAt", func(t *testing.T) {
		// Real time: a waiter (its reads tell it free_at) is granted when
		// the kept delay ends, not before.
		rt := testenv.Start(t, testenv.Options{})
		r0 := res(t)
		acquireDelay(t, rt, r0, "w1", 3600, 2)
		start := time.Now()
		if r := call(t, rt, "DELETE", adminPath(r0), reasonBody("slow holder")); r.status != 200 {
			t.Fatalf("force release: got %d %s", r.status, r.raw)
		}
		b, _ := json.Marshal(map[string]any{"owner": "w2", "ttl_seconds": 30, "wait_seconds": 6})
		r := call(t, rt, "POST", waitPath(r0), string(b))
		if took := time.Since(start); r.json["acquired"] != true || took < 2*time.Second {
			t.Errorf("got %s %s after the force release, want a grant at its free_at (2 s)", r.raw, took)
		}
	})
}
