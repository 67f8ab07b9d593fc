//go:build unix

package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/console"
)

// serveUI serves a console with cfg over c until the returned stop is
// called.
func serveUI(tb testing.TB, cfg console.Config) (*console.Server, func()) {
	tb.Helper()
	ui, err := console.Listen(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ui.Serve(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	tb.Cleanup(stop)
	return ui, stop
}

// TestBrowserLauncher: Chromium opens the file `lockctl ui --open` writes
// (a navigation from file:, another site), which leads through the token
// exchange to the page with its session: the listing shows.
func TestBrowserLauncher(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"locks":[{"resource":"a","owner":"o","fencing_token":7,"acquired_at":"2026-01-01T00:00:00Z","expires_at":"2099-01-01T00:00:00Z"}]}`)
	}))
	t.Cleanup(svc.Close)
	c, err := client.New(svc.URL)
	if err != nil {
		t.Fatal(err)
	}
	ui, _ := serveUI(t, console.Config{Client: c, Endpoint: svc.URL})
	path, remove, err := console.WriteLauncher(ui.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	ctx, _ := browser(t)
	run(t, ctx, 20*time.Second, "open the launcher file", chromedp.Navigate("file://"+path))
	waitAcross(t, ctx, 10*time.Second, "the listing, through the launcher", `location.href === "http://`+ui.Addr()+`/" && !!document.querySelector('#body tr[data-name="a"]')`)
	select {
	case <-ui.Exchanged():
	default:
		t.Error("the token was not exchanged")
	}
}

// waitAcross waits up to d for a JavaScript expression to be true, across
// navigations (an evaluation in a page the browser leaves fails, and is
// tried again in the next).
func waitAcross(tb testing.TB, ctx context.Context, d time.Duration, what, expr string) {
	tb.Helper()
	deadline := time.Now().Add(d)
	var last any
	for time.Now().Before(deadline) {
		ectx, cancel := context.WithTimeout(ctx, time.Second)
		ok, err := chromedp.Run(ectx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond) // polling a condition, not ordering events
	}
	href, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " " + document.body.innerText.slice(0, 200)`))
	tb.Fatalf("%s: waited %v for %s (last error %v; the page: %q)", what, d, expr, last, href)
}

// TestBrowserRestarted: the reason box holds a reason to the service's
// bound in bytes, not characters; and a tab whose lockctl ui stopped, with
// another one started on its port (whose session it does not have), says
// to open the new URL instead of reconnecting forever.
func TestBrowserRestarted(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"locks":[]}`)
	}))
	t.Cleanup(svc.Close)
	c, err := client.New(svc.URL)
	if err != nil {
		t.Fatal(err)
	}
	ui, stop := serveUI(t, console.Config{Client: c, Endpoint: svc.URL})
	ctx, _ := browser(t)
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 10*time.Second, "first listing", `document.getElementById("refresh").textContent.startsWith("refreshed")`)

	valid := func(reason string) bool {
		return eval[bool](t, ctx, fmt.Sprintf(`(() => { const r = document.getElementById("confirm-reason");
			r.value = %q; r.dispatchEvent(new Event("input")); return r.validity.valid; })()`, reason))
	}
	if !valid(strings.Repeat("€", 166)) { // 498 bytes
		t.Error("a reason of 498 bytes (166 €) is refused, want it taken")
	}
	if valid(strings.Repeat("€", 167)) { // 501 bytes in 167 characters
		t.Error("a reason of 501 bytes (167 €) is taken, want it refused: the service's bound is 500 bytes")
	}

	addr := ui.Addr()
	stop()
	waitJS(t, ctx, 10*time.Second, "the page notices", `document.getElementById("refresh").textContent.includes("reconnecting")`)
	serveUI(t, console.Config{Client: c, Endpoint: svc.URL, Addr: addr})
	waitJS(t, ctx, 10*time.Second, "the page says lockctl ui was restarted",
		`document.getElementById("refresh").textContent === "lockctl ui was restarted: open the new URL it printed"`)
}
