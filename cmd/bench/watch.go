package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
)

// goals of issue 17 for watchers.
const (
	goalWatchP99   = 300 * time.Millisecond // from a change to the answer that shows it
	goalWatchReads = 10.0                   // DynamoDB reads per watcher-second, about
)

// watchRow is what `watchers` watchers of one lock under churn saw.
type watchRow struct {
	watchers int
	// lat is, for every change a watcher was told of, the time from the
	// change (the store's answer to the write that made it, or the
	// lease's expires_at) to the watch answer that showed it.
	lat []time.Duration
	// changes is how many changes the churn made (a grant, a release
	// and an expiry are one each), leases how many leases.
	changes, leases int
	// skippedReported is the sum of the leases the watchers' answers
	// say they skipped (b − a − 1 between two answers with tokens a < b),
	// skippedReal the leases the churn granted between those two tokens.
	skippedReported, skippedReal int
	// secs is how long the watchers watched.
	secs float64
	// reads, strong and peeks are DynamoDB GetItems per watcher-second:
	// all, strongly consistent (a watch's first read and the one that
	// confirms a change) and eventually consistent (the polling).
	reads, strong, peeks float64
}

// change is one state of the lock's watch index, and when it began.
type change struct {
	index int64
	at    time.Time
}

// watchLatency runs `watchers` watchers on one lock whose lease a churn
// changes for dur on a service of its own over the dynalite at endpoint,
// and returns what they saw. The churn, one client, takes the lock with
// 1-2 s leases and ends each in one of three ways: released after 0-20 ms
// and the next lease taken at once (polling every ~100 ms misses some of
// these), released after 150-600 ms, or left to expire; the lock then
// stays free 50-300 ms.
// Each watcher long-polls GET /locks/{resource}/watch with the index of
// its last answer and wait_seconds=5, over plain HTTP.
func watchLatency(ctx context.Context, endpoint string, watchers int, dur time.Duration) (watchRow, error) {
	s, err := startService(ctx, endpoint, serviceOptions{fair: true})
	if err != nil {
		return watchRow{}, err
	}
	defer s.close()
	res := resourceName("watch")
	var (
		mu        sync.Mutex
		lastWrite time.Time // the store's answer to the latest committed write of res
	)
	s.hook = func(op string, req []byte, status int, at time.Time) {
		if op == "UpdateItem" && status == 200 && bytes.Contains(req, []byte(`"`+res+`"`)) {
			mu.Lock()
			lastWrite = at
			mu.Unlock()
		}
	}
	hc := &http.Client{Transport: clientTransport, Timeout: 30 * time.Second}
	base := s.url + "/locks/" + url.PathEscape(res)
	start := time.Now()
	stopAt := start.Add(dur)

	type answer struct {
		index int64
		at    time.Time
	}
	answers := make([][]answer, watchers)
	var wg sync.WaitGroup
	errs := make([]error, watchers+1)
	wctx, cancel := context.WithDeadline(ctx, stopAt)
	defer cancel()
	s.ddb.take()
	for w := range watchers {
		wg.Go(func() {
			var index int64
			for wctx.Err() == nil {
				var b struct{ Index int64 }
				if err := getJSON(wctx, hc, fmt.Sprintf("%s/watch?index=%d&wait_seconds=5", base, index), &b); err != nil {
					if wctx.Err() == nil {
						errs[w] = err
					}
					return
				}
				answers[w] = append(answers[w], answer{b.Index, time.Now()})
				index = b.Index
			}
		})
	}
	// The churn.
	var (
		changes []change
		tokens  []int64
	)
	note := func(index int64, at time.Time) { changes = append(changes, change{index, at}) }
	written := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return lastWrite
	}
	rng := rand.New(rand.NewPCG(uint64(watchers), 17))
churn:
	for n := 0; time.Now().Before(stopAt) && ctx.Err() == nil; n++ {
		owner := fmt.Sprintf("d%d", n%3)
		ttl := 1 + rng.IntN(2)
		var g struct {
			Acquired bool
			Lock     struct {
				Token     int64  `json:"fencing_token"`
				ExpiresAt string `json:"expires_at"`
			}
		}
		if err := postJSON(ctx, hc, "POST", base, fmt.Sprintf(`{"owner":%q,"ttl_seconds":%d}`, owner, ttl), &g); err != nil {
			errs[watchers] = err
			break churn
		}
		if !g.Acquired {
			errs[watchers] = errors.New("the churn's acquire was refused: is another client on the lock?")
			break churn
		}
		tok := g.Lock.Token
		tokens = append(tokens, tok)
		note(2*tok, written())
		gap := 50*time.Millisecond + time.Duration(rng.IntN(250))*time.Millisecond
		switch x := rng.Float64(); {
		case x < 0.7:
			hold := 150*time.Millisecond + time.Duration(rng.IntN(450))*time.Millisecond
			if x < 0.2 {
				// A lease of a few ms, and the next one at once: a
				// watcher polling every ~100 ms misses some.
				hold, gap = time.Duration(rng.IntN(20))*time.Millisecond, 0
			}
			time.Sleep(hold)
			if err := postJSON(ctx, hc, "DELETE", base, fmt.Sprintf(`{"owner":%q,"fencing_token":%d}`, owner, tok), nil); err != nil {
				errs[watchers] = err
				break churn
			}
			note(2*tok+1, written())
		default:
			exp, err := time.Parse(time.RFC3339Nano, g.Lock.ExpiresAt)
			if err != nil {
				errs[watchers] = err
				break churn
			}
			note(2*tok+1, exp)
			time.Sleep(time.Until(exp))
		}
		time.Sleep(gap)
	}
	cancel()
	wg.Wait()
	secs := time.Since(start).Seconds()
	ddb := s.ddb.take()
	if err := errors.Join(errs...); err != nil {
		return watchRow{}, err
	}

	row := watchRow{watchers: watchers, changes: len(changes), leases: len(tokens), secs: secs}
	at := map[int64]time.Time{}
	for _, c := range changes {
		at[c.index] = c.at
	}
	granted := map[int64]bool{}
	for _, t := range tokens {
		granted[t] = true
	}
	for _, as := range answers {
		// The first answer is the state the watcher found, not a change
		// it waited for.
		for i := 1; i < len(as); i++ {
			a, prev := as[i], as[i-1]
			if a.index == prev.index {
				continue // the wait ran out
			}
			if t, ok := at[a.index]; ok {
				row.lat = append(row.lat, a.at.Sub(t))
			}
			from, to := prev.index/2, a.index/2
			if prev.index == 0 || to <= from {
				continue
			}
			row.skippedReported += int(to - from - 1)
			for t := from + 1; t < to; t++ {
				if granted[t] {
					row.skippedReal++
				}
			}
		}
	}
	ws := float64(watchers) * secs
	row.strong = float64(ddb["GetItem/strong"]) / ws
	row.peeks = float64(ddb["GetItem/eventual"]) / ws
	row.reads = row.strong + row.peeks
	return row, nil
}

func getJSON(ctx context.Context, hc *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	return do(hc, req, v)
}

func postJSON(ctx context.Context, hc *http.Client, method, u, body string, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(hc, req, v)
}

func do(hc *http.Client, req *http.Request, v any) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, b)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}

// watchRows measures 1, 4 and 16 watchers, each for dur.
func watchRows(ctx context.Context, endpoint string, dur time.Duration) ([]watchRow, error) {
	var rows []watchRow
	for _, n := range []int{1, 4, 16} {
		progress(fmt.Sprintf("%d watcher%s of one lock under churn, for %s", n, plural(n), dur))
		row, err := watchLatency(ctx, endpoint, n, dur)
		if err != nil {
			return nil, fmt.Errorf("%d watchers: %w", n, err)
		}
		if len(row.lat) == 0 {
			return nil, fmt.Errorf("%d watchers saw no change in %s", n, dur)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// watchSummary is what the summary line says of the watchers.
type watchSummary struct {
	lat    []string      // "N: p50 / p99" by number of watchers
	p99    time.Duration // the largest p99
	reads  float64       // the most reads per watcher-second
	skipOK bool
}

func (w watchSummary) skipText() string {
	if w.skipOK {
		return "the leases they skipped reported exactly"
	}
	return "the leases they skipped misreported"
}

func (w watchSummary) missed() []string {
	var m []string
	if w.p99 > goalWatchP99 {
		m = append(m, fmt.Sprintf("a watcher's p99 ≤ %s", ms(goalWatchP99)))
	}
	if !w.skipOK {
		m = append(m, "skipped leases reported exactly")
	}
	if w.reads > goalWatchReads*1.1 {
		m = append(m, fmt.Sprintf("about %.0f reads per watcher-second", goalWatchReads))
	}
	return m
}

// watchTable prints the watchers' table and returns its summary.
func watchTable(p func(string, ...any), rows []watchRow) watchSummary {
	ws := watchSummary{skipOK: true}
	p("| watchers of one lock under churn | changes seen: p50 / p99 after the change | leases skipped: reported / real | DynamoDB reads per watcher per second (polling + consistent) |")
	p("|---|---|---|---|")
	for _, r := range rows {
		p50, p99 := quantile(r.lat, .5), quantile(r.lat, .99)
		ws.p99, ws.reads = max(ws.p99, p99), max(ws.reads, r.reads)
		ws.skipOK = ws.skipOK && r.skippedReported == r.skippedReal
		ws.lat = append(ws.lat, fmt.Sprintf("%d: %s / %s", r.watchers, ms(p50), ms(p99)))
		p("| %d (%d changes of %d leases, %.1f/s) | %s / %s (n=%d) | %d / %d | %.1f (%.1f + %.1f) |", r.watchers, r.changes, r.leases,
			float64(r.changes)/r.secs, ms(p50), ms(p99), len(r.lat), r.skippedReported, r.skippedReal, r.reads, r.peeks, r.strong)
	}
	return ws
}

// runWatch is bench -watch: the watchers alone, on a dynalite of their
// own.
func runWatch(quick bool) error {
	dur := 12 * time.Second
	if quick {
		dur = 3 * time.Second
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := local.StartDynalite(ctx)
	if err != nil {
		return err
	}
	defer d.Close()
	db, err := api.NewDynamoDB(ctx, d.Endpoint)
	if err != nil {
		return err
	}
	if _, err := local.EnsureTable(ctx, db, table); err != nil {
		return err
	}
	rows, err := watchRows(ctx, d.Endpoint, dur)
	if err != nil {
		return err
	}
	p := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	p("")
	ws := watchTable(p, rows)
	p("")
	verdict := "all goals met"
	if m := ws.missed(); len(m) > 0 {
		verdict = "goals missed: " + strings.Join(m, "; ")
	}
	p("bench: watchers see a change in p50 / p99 %s, %s, at most %.1f reads/s each; %s", strings.Join(ws.lat, ", "), ws.skipText(), ws.reads, verdict)
	return nil
}
