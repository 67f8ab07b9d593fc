//go:build unix

package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/cmd/lockctl/internal/console"
	"github.com/ft288/locks/internal/testenv"
)

// The browser tests drive Chromium headless with chromedp, which only these
// _test.go files import, so that lockctl itself builds for every platform.
const (
	// ChromiumEnv names the Chromium binary (default DefaultChromium).
	ChromiumEnv = "LOCKS_CHROMIUM"
	// DefaultChromium is Debian's Chromium (apt-get install chromium).
	DefaultChromium = "/usr/bin/chromium"
	// RequireBrowserEnv, set to 1 (as .ci/run does), makes a missing
	// Chromium fail the browser tests instead of skipping them.
	RequireBrowserEnv = "LOCKS_REQUIRE_BROWSER"
	// ScreenshotEnv, when set, is a path TestScreenshot copies its PNG to
	// (make screenshot: docs/console.png).
	ScreenshotEnv = "LOCKS_SCREENSHOT"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// browser starts a headless Chromium for tb and returns its context and
// the URLs of every request the page sent.
func browser(tb testing.TB) (context.Context, *requests) {
	tb.Helper()
	bin := os.Getenv(ChromiumEnv)
	if bin == "" {
		bin = DefaultChromium
	}
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv(RequireBrowserEnv) == "1" {
			tb.Fatalf("Chromium not found at %s (%s=1): apt-get install chromium, or set %s", bin, RequireBrowserEnv, ChromiumEnv)
		}
		tb.Skipf("Chromium not found at %s: apt-get install chromium, or set %s", bin, ChromiumEnv)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900), chromedp.UserDataDir(tb.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	reqs := &requests{}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			reqs.add(e.Request.URL)
		}
	}))
	tb.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil { // start it now, without a deadline
		tb.Fatalf("start Chromium: %v", err)
	}
	return ctx, reqs
}

// requests are the URLs a page requested.
type requests struct {
	mu   sync.Mutex
	urls []string
}

func (r *requests) add(u string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, u)
}

// outside returns the requests that went anywhere but origin.
func (r *requests) outside(origin string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range r.urls {
		if !strings.HasPrefix(u, origin+"/") {
			out = append(out, u)
		}
	}
	return out
}

// run runs actions within d.
func run(tb testing.TB, ctx context.Context, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](tb testing.TB, ctx context.Context, expr string) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits up to d for a JavaScript expression to be true.
func waitJS(tb testing.TB, ctx context.Context, d time.Duration, what, expr string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		tb.Fatalf("%s: %v (waited %v for %s)", what, err, d, expr)
	}
}

// lockctl runs lockctl's args against endpoint in-process, and returns its
// exit code and standard output.
func lockctl(tb testing.TB, endpoint string, args ...string) (int, string) {
	tb.Helper()
	var out, errs bytes.Buffer
	code := cli.Main(append(args, "--endpoint", endpoint), cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs,
		Getenv: func(string) string { return "" }})
	if errs.Len() > 0 {
		tb.Logf("lockctl %s: %s", strings.Join(args, " "), errs.String())
	}
	return code, out.String()
}

// take acquires name for owner with lockctl and returns the lease.
func take(tb testing.TB, endpoint, name, owner string, extra ...string) client.Lock {
	tb.Helper()
	code, out := lockctl(tb, endpoint, append([]string{"acquire", name, "--ttl", "120", "--owner", owner}, extra...)...)
	var l client.Lock
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
		tb.Fatalf("lockctl acquire %s: exit %d, %q", name, code, out)
	}
	return l
}

// startUI serves a console over the service at endpoint, and returns it.
// Its client's HTTP timeout of 7 s keeps the watches' rounds to 2 s: the
// runner finishes a round its caller left (as Lambda does), and the test
// server's Close waits for it.
func startUI(tb testing.TB, endpoint, prefix string) *console.Server {
	tb.Helper()
	c, err := client.New(endpoint, client.WithHTTPClient(&http.Client{Timeout: 7 * time.Second}))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := console.Listen(console.Config{Client: c, Endpoint: endpoint, Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return s
}

// auditLog collects the service's log lines.
type auditLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (a *auditLog) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.b.Write(p)
}

// forced returns the audit lines of force releases that ended a lease.
func (a *auditLog) forced() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(a.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "audit" && m["outcome"] == "force-released" {
			out = append(out, m)
		}
	}
	return out
}

// row is the CSS selector of the listing's row of a lease.
func row(name string, token int64) string {
	return fmt.Sprintf(`#body tr[data-name=%q][data-token="%d"]`, name, token)
}

// TestBrowser drives the page in Chromium against the local runner.
func TestBrowser(t *testing.T) {
	t.Parallel()
	start := time.Now()
	logs := &auditLog{}
	srv := testenv.Start(t, testenv.Options{LogTo: logs})
	prefix := fmt.Sprintf("ui%d-", time.Now().UnixNano())
	ui := startUI(t, srv.URL, prefix)
	ctx, reqs := browser(t)
	origin := "http://" + ui.Addr()
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 5*time.Second, "first listing", `document.getElementById("refresh").textContent.startsWith("refreshed")`)

	name := prefix + "a"
	t0 := time.Now()
	lease := take(t, srv.URL, name, "holder-a", "--lock-delay", "2")
	waitJS(t, ctx, 3*time.Second, "the lock appears", fmt.Sprintf(`!!document.querySelector(%q)`, row(name, lease.FencingToken)))
	appeared := time.Since(t0)
	if appeared > 3*time.Second {
		t.Errorf("the lock appeared after %v, want within one refresh interval (2 s) plus the refresh itself", appeared)
	}
	t.Logf("the lock appeared %v after lockctl acquire returned", appeared)

	t.Run("CountdownRuns", func(t *testing.T) {
		sel := row(name, lease.FencingToken) + " .countdown"
		first := eval[string](t, ctx, fmt.Sprintf(`document.querySelector(%q).textContent`, sel))
		if !strings.HasPrefix(first, "in ") {
			t.Errorf("countdown: got %q, want \"in …\"", first)
		}
		waitJS(t, ctx, 3*time.Second, "the countdown moves", fmt.Sprintf(`document.querySelector(%q).textContent !== %q`, sel, first))
	})

	t.Run("LockSetMarked", func(t *testing.T) {
		// A set taken by lockctl: each name is listed, marked as one set
		// of two with the set's id, and the detail view names the set.
		a, b := prefix+"set:a", prefix+"set:b"
		code, out := lockctl(t, srv.URL, "acquire", "--lock", a, "--lock", b, "--ttl", "120", "--owner", "holder-set")
		var set struct {
			SetID string        `json:"set_id"`
			Locks []client.Lock `json:"locks"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &set) != nil || set.SetID == "" || len(set.Locks) != 2 {
			t.Fatalf("lockctl acquire --lock %s --lock %s: exit %d, %q", a, b, code, out)
		}
		for _, l := range set.Locks {
			sel := row(l.Resource, l.FencingToken)
			waitJS(t, ctx, 5*time.Second, "the set's name "+l.Resource+" is listed", fmt.Sprintf(`!!document.querySelector(%q)`, sel))
			if got := eval[string](t, ctx, fmt.Sprintf(`document.querySelector(%q).dataset.set`, sel)); got != set.SetID {
				t.Errorf("%s: data-set %q, want the set's id %q", l.Resource, got, set.SetID)
			}
			mark := eval[[]string](t, ctx, fmt.Sprintf(`(function(){ var m = document.querySelector(%q + " .set"); return m ? [m.textContent, m.title] : []; })()`, sel))
			if len(mark) != 2 || mark[0] != "set of 2" || !strings.Contains(mark[1], set.SetID) {
				t.Errorf("%s: the set mark is %q, want \"set of 2\" with %q on hover", l.Resource, mark, set.SetID)
			}
		}
		if got := eval[string](t, ctx, fmt.Sprintf(`document.querySelector(%q).dataset.set`, row(name, lease.FencingToken))); got != "" {
			t.Errorf("the lone lock %s: data-set %q, want none", name, got)
		}
		openDetail(t, ctx, a, set.Locks[0].FencingToken)
		waitJS(t, ctx, 5*time.Second, "the detail view names the set", fmt.Sprintf(
			`!!document.querySelector('#detail-set [data-set=%q]') && document.getElementById("detail-set").textContent.includes(%q)`, set.SetID, b))
		run(t, ctx, 5*time.Second, "close the detail view", chromedp.Click(chromedp.CSS("#detail-close")))
	})

	t.Run("WaiterQueued", func(t *testing.T) {
		wname := prefix + "w"
		held := take(t, srv.URL, wname, "holder-w")
		waited := make(chan int, 1)
		go func() {
			code, _ := lockctl(t, srv.URL, "acquire", wname, "--wait", "15", "--ttl", "5", "--owner", "waiter-w")
			waited <- code
		}()
		sel := row(wname, held.FencingToken)
		waitJS(t, ctx, 5*time.Second, "the waiter is counted", fmt.Sprintf(`(document.querySelector(%q + " .waiting") || {}).textContent === "1"`, sel))
		openDetail(t, ctx, wname, held.FencingToken)
		waitJS(t, ctx, 5*time.Second, "the waiter in the queue", `document.getElementById("detail-queue").textContent.includes("waiter-w")`)
		if got := eval[string](t, ctx, `document.getElementById("detail-queue").textContent`); !strings.Contains(got, "waiting ") {
			t.Errorf("queue: got %q, want the waiter with how long it has waited", got)
		}
		run(t, ctx, 5*time.Second, "close the detail", chromedp.Click(chromedp.CSS("#detail-close")))
		if code, _ := lockctl(t, srv.URL, "release", wname, "--owner", "holder-w"); code != 0 {
			t.Errorf("release: exit %d", code)
		}
		if code := <-waited; code != 0 {
			t.Errorf("the waiter: exit %d, want 0 (it gets the lock after the release)", code)
		}
	})

	t.Run("StaleTokenRefused", func(t *testing.T) {
		// The confirmation shows lease; before it is confirmed, its holder
		// releases and another takes the lock.
		openDetail(t, ctx, name, lease.FencingToken)
		run(t, ctx, 10*time.Second, "open the confirmation", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#detail-holders tr[data-token="%d"] button.force`, lease.FencingToken))),
			chromedp.WaitVisible(chromedp.CSS("#confirm-reason")))
		if code, _ := lockctl(t, srv.URL, "release", name, "--owner", "holder-a", "--token", fmt.Sprint(lease.FencingToken)); code != 0 {
			t.Fatalf("release: exit %d", code)
		}
		now := take(t, srv.URL, name, "holder-b", "--lock-delay", "60") // ForceRelease ends it at once all the same
		run(t, ctx, 10*time.Second, "confirm", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "stale test"), chromedp.Click(chromedp.CSS("#confirm-go")))
		waitJS(t, ctx, 10*time.Second, "the refusal", `!document.getElementById("confirm-problem").hidden`)
		msg := eval[string](t, ctx, `document.getElementById("confirm-problem").textContent`)
		if !strings.Contains(msg, "Stale fencing token") || !strings.Contains(msg, "holder-b") || !strings.Contains(msg, fmt.Sprint(now.FencingToken)) {
			t.Errorf("refusal: got %q, want the problem title and holder-b's lease (token %d)", msg, now.FencingToken)
		}
		run(t, ctx, 5*time.Second, "cancel", chromedp.Click(chromedp.CSS("#confirm-cancel")))
		if code, _ := lockctl(t, srv.URL, "renew", name, "--owner", "holder-b", "--token", fmt.Sprint(now.FencingToken)); code != 0 {
			t.Errorf("holder-b's renew after the refused force release: exit %d, want 0", code)
		}
		lease = now
	})

	t.Run("ForceRelease", func(t *testing.T) {
		openDetail(t, ctx, name, lease.FencingToken)
		run(t, ctx, 10*time.Second, "force release", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#detail-holders tr[data-token="%d"] button.force`, lease.FencingToken))),
			chromedp.WaitVisible(chromedp.CSS("#confirm-reason")))
		if got := eval[string](t, ctx, `document.getElementById("confirm-lease").textContent`); !strings.Contains(got, "60s: default frees the name 60s after the release, immediate at once") {
			t.Errorf("the confirmation shows %q, want the lease's 60 s lock-delay and what each choice does with it", got)
		}
		run(t, ctx, 10*time.Second, "choose immediate and confirm",
			chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "holder-b is gone (INC-1)"),
			chromedp.Click(chromedp.CSS(`input[name=delay][value=immediate]`)),
			chromedp.Click(chromedp.CSS("#confirm-go")))
		waitJS(t, ctx, 10*time.Second, "the result", `!document.getElementById("result").hidden`)
		checkEnded(t, srv.URL, logs, name, "holder-b", lease.FencingToken, "holder-b is gone (INC-1)")
		// Immediate: holder-b's 60 s lock-delay does not keep the next owner out.
		c, _ := client.New(srv.URL)
		if next, err := c.TryAcquire(context.Background(), name, "holder-c", time.Minute); err != nil {
			t.Errorf("try-acquire after an immediate force release of a lease with a 60 s lock-delay: %v, want granted", err)
		} else {
			_ = next.Release(context.Background())
		}
	})

	t.Run("KeyboardOnly", func(t *testing.T) {
		kname := prefix + "k"
		k := take(t, srv.URL, kname, "holder-k", "--lock-delay", "60") // the default choice keeps it
		run(t, ctx, 10*time.Second, "close the detail", chromedp.Click(chromedp.CSS("#detail-close")))
		waitJS(t, ctx, 5*time.Second, "the lock is listed", fmt.Sprintf(`!!document.querySelector(%q)`, row(kname, k.FencingToken)))
		// From the top of the page, Tab to the lock's name and Enter; Tab
		// to its force release and Enter; type the reason and Enter.
		eval[bool](t, ctx, `document.activeElement.blur(), true`)
		tabTo(t, ctx, fmt.Sprintf(`document.activeElement.closest(%q) !== null && document.activeElement.tagName === "BUTTON"`, row(kname, k.FencingToken)))
		run(t, ctx, 5*time.Second, "Enter on the name", chromedp.KeyEvent(kb.Enter))
		waitJS(t, ctx, 10*time.Second, "the detail view", fmt.Sprintf(`!!document.querySelector('#detail-holders tr[data-token="%d"]')`, k.FencingToken))
		tabTo(t, ctx, `document.activeElement.classList.contains("force")`)
		run(t, ctx, 5*time.Second, "Enter on force release", chromedp.KeyEvent(kb.Enter))
		waitJS(t, ctx, 5*time.Second, "the confirmation has the focus", `document.activeElement.id === "confirm-reason"`)
		run(t, ctx, 5*time.Second, "type the reason and Enter", chromedp.KeyEvent("by keyboard"), chromedp.KeyEvent(kb.Enter))
		waitJS(t, ctx, 10*time.Second, "the result", `document.getElementById("result").textContent.includes("holder-k")`)
		checkEnded(t, srv.URL, logs, kname, "holder-k", k.FencingToken, "by keyboard")
		// The default choice: holder-k's 60 s lock-delay keeps the next owner out.
		c, _ := client.New(srv.URL)
		if _, err := c.TryAcquire(context.Background(), kname, "holder-l", time.Minute); !errors.Is(err, client.ErrHeld) {
			t.Errorf("try-acquire after a force release that keeps a 60 s lock-delay: %v, want held", err)
		}
	})

	if out := reqs.outside(origin); len(out) > 0 {
		t.Errorf("requests outside %s: %q", origin, out)
	}
	reqs.mu.Lock()
	t.Logf("%d requests, all to %s; the browser test took %v", len(reqs.urls), origin, time.Since(start))
	reqs.mu.Unlock()
}

// openDetail opens the detail view of name from the listing, and waits for
// the lease of token in it.
func openDetail(tb testing.TB, ctx context.Context, name string, token int64) {
	tb.Helper()
	waitJS(tb, ctx, 5*time.Second, "the lease is listed", fmt.Sprintf(`!!document.querySelector(%q)`, row(name, token)))
	run(tb, ctx, 10*time.Second, "open the detail view", chromedp.Click(chromedp.CSS(row(name, token)+" button")))
	waitJS(tb, ctx, 10*time.Second, "the detail view shows the lease", fmt.Sprintf(`!!document.querySelector('#detail-holders tr[data-token="%d"]')`, token))
}

// tabTo presses Tab until expr is true, at most 60 times.
func tabTo(tb testing.TB, ctx context.Context, expr string) {
	tb.Helper()
	for range 60 {
		if eval[bool](tb, ctx, expr) {
			return
		}
		run(tb, ctx, 5*time.Second, "Tab", chromedp.KeyEvent(kb.Tab))
	}
	tb.Fatalf("60 Tabs did not reach %s", expr)
}

// checkEnded checks that the lease of owner with token on name was force
// released: its holder's next renew is refused, and one audit line says so
// with reason.
func checkEnded(tb testing.TB, endpoint string, logs *auditLog, name, owner string, token int64, reason string) {
	tb.Helper()
	c, _ := client.New(endpoint)
	_, err := c.Renew(context.Background(), name, owner, 30*time.Second, token)
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &pe) || !pe.ForceReleased {
		tb.Errorf("%s's renew after the force release: got %v, want not-found with force_released", owner, err)
	}
	n := 0
	for _, a := range logs.forced() {
		if a["resource"] == name && a["owner"] == owner && a["fencing_token"] == float64(token) && a["reason"] == reason {
			n++
		}
	}
	if n != 1 {
		tb.Errorf("audit lines of the force release of %s's token %d: got %d, want 1 (all: %v)", owner, token, n, logs.forced())
	}
}

// TestBrowserNotAdmin: a caller outside the admins allowlist gets 403 on
// the listings; the page explains and still shows a name typed in.
func TestBrowserNotAdmin(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Admins: []string{"arn:aws:iam::123456789012:role/oncall"},
		Identity: func(*http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
			return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:iam::123456789012:user/intern"}
		}})
	name := fmt.Sprintf("ui%d-na", time.Now().UnixNano())
	lease := take(t, srv.URL, name, "holder-n")
	ui := startUI(t, srv.URL, "")
	ctx, _ := browser(t)
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 10*time.Second, "the explanation", `document.getElementById("notice").textContent.includes("not an administrator")`)
	if got := eval[string](t, ctx, `document.getElementById("notice").textContent`); !strings.Contains(got, "Not an administrator") {
		t.Errorf("notice: got %q, want the problem's title", got)
	}
	run(t, ctx, 10*time.Second, "look up the name", chromedp.SendKeys(chromedp.CSS("#lookup-name"), name), chromedp.Click(chromedp.CSS("#lookup-go")))
	waitJS(t, ctx, 10*time.Second, "the detail view shows the lease", fmt.Sprintf(`!!document.querySelector('#detail-holders tr[data-token="%d"]')`, lease.FencingToken))
}

// gateway serves the service at endpoint through a front the test shapes:
// answer has the first word on each request, and returns true when it
// answered it itself; every other request goes on to the service.
func gateway(tb testing.TB, endpoint string, answer func(http.ResponseWriter, *http.Request) bool) *httptest.Server {
	tb.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		tb.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !answer(w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	tb.Cleanup(gw.Close)
	return gw
}

// TestBrowserNoAdminAPI: a stack deployed without -c admins has no /admin
// routes (API Gateway answers 404 {"message":"Not Found"}); the page says
// there is no admin API and still shows a name typed in.
func TestBrowserNoAdminAPI(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	gw := gateway(t, srv.URL, func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasPrefix(r.URL.Path, "/admin/") {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
		return true
	})
	name := fmt.Sprintf("ui%d-nr", time.Now().UnixNano())
	lease := take(t, gw.URL, name, "holder-r")
	ui := startUI(t, gw.URL, "")
	ctx, _ := browser(t)
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 10*time.Second, "the explanation", `document.getElementById("notice").textContent.includes("no admin API")`)
	run(t, ctx, 10*time.Second, "look up the name", chromedp.SendKeys(chromedp.CSS("#lookup-name"), name), chromedp.Click(chromedp.CSS("#lookup-go")))
	waitJS(t, ctx, 10*time.Second, "the detail view shows the lease", fmt.Sprintf(`!!document.querySelector('#detail-holders tr[data-token="%d"]')`, lease.FencingToken))
}

// TestIdleRate measures, counted at the runner, what an idle page costs the
// service: 100 locks listed, one detail view open. The goal is at most one
// listing request per 2 s plus one watch per open detail view (a round of
// up to 20 s); docs/console.md reports the figures.
func TestIdleRate(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	prefix := fmt.Sprintf("ui%d-idle-", time.Now().UnixNano())
	c, _ := client.New(srv.URL)
	for i := range 100 {
		if _, err := c.TryAcquire(context.Background(), fmt.Sprintf("%s%03d", prefix, i), "idle", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// The console as lockctl ui runs it: the default client, whose
	// watches wait 20 s at the service.
	uc, _ := client.New(srv.URL)
	ui, err := console.Listen(console.Config{Client: uc, Endpoint: srv.URL, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ui.Serve(sctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	ctx, _ := browser(t)
	watched := prefix + "000"
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 10*time.Second, "100 locks listed", `document.getElementById("pageinfo").textContent.endsWith("of 100")`)
	run(t, ctx, 10*time.Second, "open a detail view", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#body tr[data-name=%q] button`, watched))))
	waitJS(t, ctx, 10*time.Second, "the detail view", `document.querySelectorAll("#detail-events tr").length > 0`)

	// The window opens just after a listing request reaches the runner:
	// refreshes start at least console.DefaultInterval apart, so 10 s then
	// hold at most 5 more, 0.5 a second, whatever the phase of the timer.
	const window = 10 * time.Second
	first := srv.Counts().Requests["GET /admin/locks"]
	deadline := time.Now().Add(3 * console.DefaultInterval)
	for srv.Counts().Requests["GET /admin/locks"] == first {
		if time.Now().After(deadline) {
			t.Fatalf("no listing request in %v", 3*console.DefaultInterval)
		}
		time.Sleep(2 * time.Millisecond)
	}
	before, _ := srv.Counts().Requests, srv.Ops.Take()
	begin := time.Now()
	time.Sleep(window) // the measurement: an idle page, over a span of real time
	elapsed := time.Since(begin)
	after, scans := srv.Counts().Requests, srv.Ops.Take()
	lists := after["GET /admin/locks"] - before["GET /admin/locks"]
	watches := after["GET /locks/{resource}/watch"] - before["GET /locks/{resource}/watch"]
	other := int64(0)
	for k, n := range after {
		if k != "GET /admin/locks" && k != "GET /locks/{resource}/watch" {
			other += n - before[k]
		}
	}
	rate := float64(lists) / elapsed.Seconds()
	t.Logf("idle, 100 locks, one detail view, %v: %d listing requests (%.2f/s), %d watch requests, %d others; store calls %v",
		elapsed.Round(time.Millisecond), lists, rate, watches, other, scans)
	if max := int64(elapsed / console.DefaultInterval); lists > max {
		t.Errorf("listing requests: got %d in %v (%.2f/s), want at most %d (0.5/s)", lists, elapsed, rate, max)
	}
	if watches > 2 {
		t.Errorf("watch requests: got %d in %v, want at most 2 (rounds of 20 s)", watches, elapsed)
	}
	if other != 0 {
		t.Errorf("other requests: got %d, want none", other)
	}
	// End the watch's round at once (the runner finishes a round its
	// caller left, and the test server's Close waits for it).
	if err := c.Release(context.Background(), watched, "idle", 0); err != nil {
		t.Fatal(err)
	}
}

// TestScreenshot takes a screenshot of the page with a few locks and a
// detail view into the test's temporary folder, and copies it to
// $LOCKS_SCREENSHOT when set (make screenshot: docs/console.png).
func TestScreenshot(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Identity: func(r *http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
		return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012",
			UserARN: "arn:aws:sts::123456789012:assumed-role/batch/" + r.Header.Get("X-Test-Session")}
	}})
	prefix := fmt.Sprintf("s%d-", time.Now().UnixNano()%1e6)
	for i, l := range []struct{ name, owner, delay string }{
		{"payment:42", "worker-7:4121:f3a9", "10"}, {"payment:43", "worker-2:881:09bc", "0"},
		{"nightly-report", "cron-host:77:aa01", "30"}, {"invoice:2026-11", "api-1:19:77e2", "0"},
	} {
		_ = i
		take(t, srv.URL, prefix+l.name, l.owner, "--lock-delay", l.delay)
	}
	ui := startUI(t, srv.URL, prefix)
	ctx, _ := browser(t)
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 10*time.Second, "the locks listed", `document.getElementById("pageinfo").textContent.endsWith("of 4")`)
	run(t, ctx, 10*time.Second, "open a detail view", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#body tr[data-name=%q] button`, prefix+"payment:42"))))
	waitJS(t, ctx, 10*time.Second, "the detail view", `document.querySelectorAll("#detail-events tr").length > 0`)
	ctx2, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx2, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10000 {
		t.Fatalf("screenshot: got %d bytes, want a PNG", len(png))
	}
	path := t.TempDir() + "/console.png"
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := os.Getenv(ScreenshotEnv); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, len(png))
	}
}
