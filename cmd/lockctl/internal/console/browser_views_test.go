package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// TestBrowserViews drives the listing's other controls in Chromium: paging
// through 60 locks (50 a page), the prefix filter, and the Semaphores tab
// with one row per held slot.
func TestBrowserViews(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	prefix := fmt.Sprintf("ui%d-views-", time.Now().UnixNano())
	c, _ := client.New(srv.URL)
	ctx0 := context.Background()
	for i := range 60 {
		group := "a"
		if i >= 55 {
			group = "b"
		}
		if _, err := c.TryAcquire(ctx0, fmt.Sprintf("%s%s%02d", prefix, group, i), "views", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	sem := prefix + "sem"
	var permits []*client.Permit
	for _, owner := range []string{"exporter-1", "exporter-2"} {
		p, err := c.TryAcquireSemaphore(ctx0, sem, 3, owner, 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	ui := startUI(t, srv.URL, prefix)
	ctx, reqs := browser(t)
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))
	waitJS(t, ctx, 10*time.Second, "60 locks listed", `document.getElementById("pageinfo").textContent === "rows 1–50 of 60"`)
	names := `Array.from(document.querySelectorAll("#body tr")).map(function (r) { return r.dataset.name; })`
	page := func(want int, first, last string) {
		t.Helper()
		got := eval[[]string](t, ctx, names)
		if len(got) != want || got[0] != first || got[len(got)-1] != last {
			t.Errorf("rows: got %d (%v…), want %d from %s to %s", len(got), got[:min(len(got), 3)], want, first, last)
		}
	}
	page(50, prefix+"a00", prefix+"a49")
	if !eval[bool](t, ctx, `document.getElementById("prev").disabled`) {
		t.Error("Previous page is enabled on the first page")
	}

	run(t, ctx, 5*time.Second, "next page", chromedp.Click(chromedp.CSS("#next")))
	waitJS(t, ctx, 5*time.Second, "the second page", `document.getElementById("pageinfo").textContent === "rows 51–60 of 60"`)
	page(10, prefix+"a50", prefix+"b59")
	if !eval[bool](t, ctx, `document.getElementById("next").disabled`) {
		t.Error("Next page is enabled on the last page")
	}

	run(t, ctx, 5*time.Second, "filter", chromedp.SendKeys(chromedp.CSS("#filter"), prefix+"b"))
	waitJS(t, ctx, 5*time.Second, "the filtered rows", `document.getElementById("pageinfo").textContent === "rows 1–5 of 5"`)
	page(5, prefix+"b55", prefix+"b59")

	// Clear the filter as a user does (an input event), then open the tab.
	eval[bool](t, ctx, `(function () { var f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); return true; })()`)
	waitJS(t, ctx, 5*time.Second, "the filter cleared", `document.getElementById("pageinfo").textContent === "rows 1–50 of 60"`)
	run(t, ctx, 5*time.Second, "open Semaphores", chromedp.Click(chromedp.CSS("#tab-semaphores")))
	for _, p := range permits {
		sel := row(sem, p.FencingToken())
		waitJS(t, ctx, 10*time.Second, fmt.Sprintf("slot %d listed", p.Slot()), fmt.Sprintf(`!!document.querySelector(%q)`, sel))
		cells := eval[[]string](t, ctx, fmt.Sprintf(`Array.from(document.querySelectorAll(%q + " td")).map(function (c) { return c.textContent; })`, sel))
		if len(cells) < 4 || cells[1] != fmt.Sprint(p.Slot()) || cells[2] != "3" || cells[3] != p.Info().Owner {
			t.Errorf("slot %d's row: %q, want the slot, 3 permits and %s", p.Slot(), cells, p.Info().Owner)
		}
	}
	if got := eval[[]string](t, ctx, names); len(got) != 2 {
		t.Errorf("Semaphores tab: %d rows %v, want the 2 held slots", len(got), got)
	}
	if sel := eval[string](t, ctx, `document.querySelector("[role=tab][aria-selected=true]").id`); sel != "tab-semaphores" {
		t.Errorf("selected tab: %q, want tab-semaphores", sel)
	}
	if out := reqs.outside("http://" + ui.Addr()); len(out) > 0 {
		t.Errorf("requests outside the local server: %q", strings.Join(out, " "))
	}
}

// TestBrowserLateForceAnswer: an operator confirms a force release, cancels
// before the service answers, and opens another lease's confirmation. The
// first answer, when it comes, goes to the result line: it neither closes
// nor writes into the confirmation open now, which stays usable.
func TestBrowserLateForceAnswer(t *testing.T) {
	t.Parallel()
	logs := &auditLog{}
	srv := testenv.Start(t, testenv.Options{LogTo: logs})
	prefix := fmt.Sprintf("ui%d-late-", time.Now().UnixNano())
	first, second := prefix+"a", prefix+"b"
	arrived, hold := make(chan struct{}, 1), make(chan struct{})
	gw := gateway(t, srv.URL, func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/"+url.PathEscape(first)) {
			arrived <- struct{}{}
			select { // held before it reaches the service, never cut off there
			case <-hold:
			case <-time.After(5 * time.Second):
			}
		}
		return false
	})
	a := take(t, gw.URL, first, "holder-a")
	b := take(t, gw.URL, second, "holder-b")
	ui := startUI(t, gw.URL, prefix)
	ctx, _ := browser(t)
	run(t, ctx, 20*time.Second, "open the page", chromedp.Navigate(ui.URL()), chromedp.WaitVisible(chromedp.CSS("#tab-locks")))

	openDetail(t, ctx, first, a.FencingToken)
	run(t, ctx, 10*time.Second, "confirm the first", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#detail-holders tr[data-token="%d"] button.force`, a.FencingToken))),
		chromedp.WaitVisible(chromedp.CSS("#confirm-reason")),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "first"),
		chromedp.Click(chromedp.CSS("#confirm-go")))
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first force release did not reach the service")
	}
	run(t, ctx, 5*time.Second, "cancel while it is under way", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	waitJS(t, ctx, 5*time.Second, "the confirmation closed", `!document.getElementById("confirm").open`)
	openDetail(t, ctx, second, b.FencingToken)
	run(t, ctx, 10*time.Second, "open the second", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#detail-holders tr[data-token="%d"] button.force`, b.FencingToken))),
		chromedp.WaitVisible(chromedp.CSS("#confirm-reason")))
	if eval[bool](t, ctx, `document.getElementById("confirm-go").disabled`) {
		t.Error("the second confirmation's button is disabled while the first's request is under way")
	}
	close(hold)
	waitJS(t, ctx, 10*time.Second, "the first answer on the result line",
		fmt.Sprintf(`document.getElementById("result").textContent.includes(%q)`, "Force released "+first))
	if !eval[bool](t, ctx, `document.getElementById("confirm").open && document.getElementById("confirm-problem").hidden`) {
		t.Error("the first answer closed or wrote into the second confirmation")
	}
	run(t, ctx, 10*time.Second, "confirm the second", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "second"),
		chromedp.Click(chromedp.CSS("#confirm-go")))
	waitJS(t, ctx, 10*time.Second, "the second answer", fmt.Sprintf(`document.getElementById("result").textContent.includes(%q)`, "Force released "+second))
	checkEnded(t, srv.URL, logs, first, "holder-a", a.FencingToken, "first")
	checkEnded(t, srv.URL, logs, second, "holder-b", b.FencingToken, "second")
}
