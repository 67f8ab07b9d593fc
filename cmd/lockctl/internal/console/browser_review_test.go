//go:build unix

package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/console"
)

// TestBrowserSixTabs: an operator in an incident opens the console in a
// few tabs (one per name to watch). Each tab holds one event stream, a
// long-lived HTTP/1.1 connection, and Chromium allows six connections per
// host and port across all tabs; with six tabs open, a seventh request of
// any tab (a force release, a page) must still be answered.
func TestBrowserSixTabs(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"locks":[],"holders":[]}`)
	}))
	t.Cleanup(svc.Close)
	c, err := client.New(svc.URL)
	if err != nil {
		t.Fatal(err)
	}
	ui, err := console.Listen(console.Config{Client: c, Endpoint: svc.URL})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ui.Serve(sctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	ctx, _ := browser(t)
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 10*time.Second, "first listing", `document.getElementById("refresh").textContent.startsWith("refreshed")`)
	for i := 2; i <= 6; i++ {
		tab, cancel := chromedp.NewContext(ctx)
		t.Cleanup(cancel)
		if err := chromedp.Do(tab); err != nil { // open the tab now, without a deadline
			t.Fatal(err)
		}
		run(t, tab, 20*time.Second, fmt.Sprintf("open tab %d", i), chromedp.Navigate("http://"+ui.Addr()+"/"), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
		waitJS(t, tab, 10*time.Second, fmt.Sprintf("tab %d's listing", i), `document.getElementById("refresh").textContent.startsWith("refreshed")`)
	}
	// Six tabs, six streams: the first tab's force release.
	eval[bool](t, ctx, `window.__answer = undefined, window.__sent = performance.now(), fetch("/api/force-release", {method: "POST", headers: {"Content-Type": "application/json"},
		body: JSON.stringify({kind: "locks", name: "a", reason: "r", fencing_token: 7})}).then(r => { window.__answer = r.status, window.__ms = performance.now() - window.__sent }), true`)
	waitJS(t, ctx, 5*time.Second, "the force release is answered with six tabs open", `window.__answer !== undefined`)
	t.Logf("with six tabs open, the force release was answered (%d) in %.1f ms", eval[int](t, ctx, `window.__answer`), eval[float64](t, ctx, `window.__ms`))
}
