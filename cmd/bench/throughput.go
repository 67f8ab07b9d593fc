package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/ft288/locks/locklogic"
)

// tryClients is how many clients the try-acquire throughput row runs.
const tryClients = 16

// tryResult is what tryClients clients got from the local runner in one
// run of the try-acquire throughput row, each try-acquiring a name of its
// own after each answer.
type tryResult struct {
	capacity                                         local.CapacityMode
	requests, granted, throttled, unavailable, other int
	took                                             time.Duration
	latencies                                        []time.Duration
}

// rate returns the grants per second.
func (r tryResult) rate() float64 { return float64(r.granted) / r.took.Seconds() }

// tryThroughput runs tryClients clients for dur against a runner over the
// dynalite at endpoint, each sending POST /locks/{resource} with a name of
// its own, one request at a time, without pausing: with capacity off the
// store is the limit (dynalite's one Node.js thread); with the default
// stack's model (local.StackCapacity) the route's throttle, 1,000/s after
// a burst of 1,000, answers the rest 429.
func tryThroughput(ctx context.Context, endpoint string, capacity local.Capacity, dur time.Duration) (tryResult, error) {
	db, err := api.NewDynamoDB(ctx, endpoint)
	if err != nil {
		return tryResult{}, err
	}
	log := slog.New(slog.DiscardHandler)
	h := api.NewHandler(locklogic.New(db, locklogic.Config{Table: table, FairWaiting: true}), log, nil)
	runner := local.NewRunner(h, log)
	if err := runner.SetCapacity(capacity); err != nil {
		return tryResult{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return tryResult{}, err
	}
	srv := &http.Server{Handler: runner}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String() + "/locks/"
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = tryClients
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var (
		mu  sync.Mutex
		res = tryResult{capacity: capacity.Mode}
		wg  sync.WaitGroup
	)
	prefix := resourceName("try")
	start := time.Now()
	end := start.Add(dur)
	for c := range tryClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				name := fmt.Sprintf("%s-%d-%d", prefix, c, i)
				t0 := time.Now()
				resp, err := hc.Post(base+url.PathEscape(name), "application/json", strings.NewReader(`{"owner":"bench","ttl_seconds":30}`))
				took := time.Since(t0)
				status, granted := 0, false
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					status, granted = resp.StatusCode, strings.Contains(string(b), `"acquired":true`)
				}
				mu.Lock()
				res.requests++
				res.latencies = append(res.latencies, took)
				switch {
				case status == 200 && granted:
					res.granted++
				case status == http.StatusTooManyRequests:
					res.throttled++
				case status == http.StatusServiceUnavailable:
					res.unavailable++
				default:
					res.other++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.took = time.Since(start)
	if res.requests == 0 {
		return res, fmt.Errorf("try-acquire throughput: no request answered")
	}
	return res, nil
}

// runTries is bench -tries: the try-acquire throughput row alone.
func runTries(quick bool) error {
	dur := 5 * time.Second
	if quick {
		dur = 2 * time.Second
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
	rows, err := tryRows(ctx, d.Endpoint, dur)
	if err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Println(r.String())
	}
	return nil
}

// tryRows runs the try-acquire throughput with the capacity model off
// (dynalite's limit), then on (the stack's throttle's).
func tryRows(ctx context.Context, endpoint string, dur time.Duration) ([]tryResult, error) {
	var rows []tryResult
	for _, c := range []local.Capacity{{}, local.StackCapacity()} {
		r, err := tryThroughput(ctx, endpoint, c, dur)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// String renders r as the bench's table row.
func (r tryResult) String() string {
	what := "capacity model off: dynalite (one Node.js thread) is the local limit"
	if r.capacity != local.CapacityOff {
		what = "the stack's capacity model on: its 1,000/s route throttle (burst 1,000) is the limit"
	}
	return fmt.Sprintf("| try-acquires, %d clients on names of their own, no pause, %s | **%.0f grants/s** (%d requests in %s: %d granted, "+
		"%d answered 429, %d answered 503, %d other; p50 / p99 %s / %s) |", tryClients, what, r.rate(), r.requests,
		r.took.Round(100*time.Millisecond), r.granted, r.throttled, r.unavailable, r.other, ms(quantile(r.latencies, 0.5)), ms(quantile(r.latencies, 0.99)))
}
