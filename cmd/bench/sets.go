package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
)

// Lock sets (issue 24): a set of 5 names against a single acquire in the
// same run, and the starvation the design states (docs/design.md, "Lock
// sets", "Starvation"): a set of 2 that holds nothing while it waits,
// against single-name waiters in one of its names' fair queue.

// goalSetRatio is issue 24's goal: a set of 5's p50 at most 6 × a single
// acquire's.
const goalSetRatio = 6.0

// setFigures are the lock set rows.
type setFigures struct {
	// n are the acquires of each kind; set and single their latencies
	// (one uncontended request each, interleaved); requests the DynamoDB
	// requests per set acquire and per single acquire.
	n                   int
	set, single         []time.Duration
	setReqs, singleReqs float64
	// The starvation run: grants per second to the set and to the single
	// waiters, the set's longest time without a grant, and the singles.
	starveFor              time.Duration
	singles                int
	setGrants, singleGrant int
	setLongest             time.Duration
}

// setBenchDo sends one JSON request to s and decodes a 200 answer into
// out.
func setBenchDo(s *service, method, path string, body any, out any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

type setLockJSON struct {
	Resource     string `json:"resource"`
	FencingToken int64  `json:"fencing_token"`
}

// measure runs n interleaved acquires of a fresh set of 5 and of a fresh
// single lock (each released at once, the release not timed), then the
// starvation run for starve.
func (f *setFigures) measure(ctx context.Context, endpoint string, n int, starve time.Duration) error {
	progress(fmt.Sprintf("lock sets: %d sets of 5 against %d single acquires, then a set of 2 against 4 fair-queue waiters for %s", n, n, starve))
	s, err := startService(ctx, endpoint, serviceOptions{fair: true})
	if err != nil {
		return err
	}
	defer s.close()
	f.n = n
	var setReqs, singleReqs int
	for i := range n + 5 { // the first 5 of each warm up
		prefix := resourceName("set")
		names := make([]string, 5)
		for j := range names {
			names[j] = fmt.Sprintf("%s-%d", prefix, j)
		}
		s.ddb.take()
		var ans struct {
			Acquired bool
			Locks    []setLockJSON
		}
		t0 := time.Now()
		err := setBenchDo(s, "POST", "/locksets/"+url.PathEscape(prefix), map[string]any{"owner": "bench", "ttl_seconds": 30, "names": names}, &ans)
		took := time.Since(t0)
		reqs := sum(s.ddb.take())
		if err != nil {
			return err
		}
		if !ans.Acquired {
			return fmt.Errorf("an uncontended set of 5 was refused")
		}
		if err := setBenchDo(s, "DELETE", "/locksets/"+url.PathEscape(prefix), map[string]any{"owner": "bench", "locks": ans.Locks}, nil); err != nil {
			return err
		}
		r := resourceName("single")
		s.ddb.take()
		t0 = time.Now()
		var one struct{ Acquired bool }
		err = setBenchDo(s, "POST", "/locks/"+url.PathEscape(r), map[string]any{"owner": "bench", "ttl_seconds": 30}, &one)
		tookOne := time.Since(t0)
		oneReqs := sum(s.ddb.take())
		if err != nil {
			return err
		}
		if err := setBenchDo(s, "DELETE", "/locks/"+url.PathEscape(r), map[string]any{"owner": "bench"}, nil); err != nil {
			return err
		}
		if i >= 5 {
			f.set, f.single = append(f.set, took), append(f.single, tookOne)
			setReqs, singleReqs = setReqs+reqs, singleReqs+oneReqs
		}
	}
	f.setReqs, f.singleReqs = float64(setReqs)/float64(n), float64(singleReqs)/float64(n)
	return f.starvation(ctx, s, starve)
}

// starvation runs a set of {a, b} (waiting rounds of 5 s at the service,
// each grant released at once) against 4 single clients that wait for a in
// its fair queue (client.Acquire), hold it 20 ms and release it, for dur.
func (f *setFigures) starvation(ctx context.Context, s *service, dur time.Duration) error {
	prefix := resourceName("starve")
	a, b := prefix+"-a", prefix+"-b"
	f.starveFor, f.singles = dur, 4
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var singles atomic.Int64
	var wg sync.WaitGroup
	for i := range f.singles {
		c := s.newClient(true)
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := c.Acquire(ctx, a, fmt.Sprintf("single-%d", i), 5*time.Second)
				if err != nil {
					continue
				}
				singles.Add(1)
				time.Sleep(20 * time.Millisecond) // the work under the lock
				_ = l.Release(context.Background())
			}
		})
	}
	last := time.Now()
	for ctx.Err() == nil {
		var ans struct {
			Acquired bool
			Locks    []setLockJSON
		}
		err := setBenchDo(s, "POST", "/locksets/"+url.PathEscape(prefix)+"/wait",
			map[string]any{"owner": "set", "ttl_seconds": 5, "names": []string{a, b}, "wait_seconds": 5}, &ans)
		if err != nil || !ans.Acquired {
			continue
		}
		f.setGrants++
		f.setLongest = max(f.setLongest, time.Since(last))
		last = time.Now()
		_ = setBenchDo(s, "DELETE", "/locksets/"+url.PathEscape(prefix), map[string]any{"owner": "set", "locks": ans.Locks}, nil)
	}
	f.setLongest = max(f.setLongest, time.Since(last))
	wg.Wait()
	f.singleGrant = int(singles.Load())
	return nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// ratio is the set of 5's p50 over the single acquire's.
func (f *setFigures) ratio() float64 {
	return float64(quantile(f.set, 0.5)) / float64(quantile(f.single, 0.5))
}

// table prints the lock set rows and returns the goal missed, if any.
func (f *setFigures) table(p func(string, ...any)) []string {
	p("| lock sets (issue 24) | value |")
	p("|---|---|")
	p("| a set of 5 names, uncontended: p50 / p99 (DynamoDB requests per set) | %s / %s (%.1f) |", ms(quantile(f.set, 0.5)), ms(quantile(f.set, 0.99)), f.setReqs)
	p("| a single acquire, same run: p50 / p99 (DynamoDB requests) | %s / %s (%.1f) |", ms(quantile(f.single, 0.5)), ms(quantile(f.single, 0.99)), f.singleReqs)
	p("| set of 5 p50 ÷ single p50 (goal ≤ %.0f×), %d of each, interleaved | **%.2f×** |", goalSetRatio, f.n, f.ratio())
	secs := f.starveFor.Seconds()
	p("| starvation: a set of 2 (waiting at the service in order, holding the earlier name) against %d fair-queue waiters on one of its names, %.0f s: grants/s set / singles | %.2f / %.1f (set: %d grants, longest without one %s) |",
		f.singles, secs, float64(f.setGrants)/secs, float64(f.singleGrant)/secs, f.setGrants, ms(f.setLongest))
	if f.ratio() > goalSetRatio {
		return []string{fmt.Sprintf("set of 5 p50 ≤ %.0f× a single acquire's", goalSetRatio)}
	}
	return nil
}

// runSets is `bench -sets`: the lock set rows alone.
func runSets(quick bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, starve := 200, 10*time.Second
	if quick {
		n, starve = 20, 3*time.Second
	}
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
	var f setFigures
	if err := f.measure(ctx, d.Endpoint, n, starve); err != nil {
		return err
	}
	p := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	p("")
	p("Machine: %s.", machine())
	p("")
	missed := f.table(p)
	verdict := "goal met"
	if len(missed) > 0 {
		verdict = "goal missed: " + missed[0]
	}
	p("")
	p("bench: a set of 5 p50 %.2f× a single acquire's (%s); a set of 2 against 4 fair-queue waiters granted %.2f/s, the singles %.1f/s",
		f.ratio(), verdict, float64(f.setGrants)/f.starveFor.Seconds(), float64(f.singleGrant)/f.starveFor.Seconds())
	return nil
}
