package goclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// skewKind is a lock or a semaphore of one permit, for the version-skew
// tests that must hold for both.
type skewKind struct {
	name string
	path string // the try route of res, escaped
	// hold takes res for "holder" and returns its release.
	hold func(t *testing.T, c *client.Client, res string) func(context.Context) error
	// wait waits for res for a new owner until ctx ends.
	wait func(ctx context.Context, c *client.Client, res string) error
}

var skewKinds = []skewKind{
	{
		name: "Lock", path: "/locks/",
		hold: func(t *testing.T, c *client.Client, res string) func(context.Context) error {
			return acquire(t, c, res, "holder", 30*time.Second).Release
		},
		wait: func(ctx context.Context, c *client.Client, res string) error {
			l, err := c.Acquire(ctx, res, "", 30*time.Second)
			if err == nil {
				err = l.Release(context.Background())
			}
			return err
		},
	},
	{
		name: "Semaphore", path: "/semaphores/",
		hold: func(t *testing.T, c *client.Client, res string) func(context.Context) error {
			p, err := c.TryAcquireSemaphore(context.Background(), res, 1, "holder", 30*time.Second)
			if err != nil {
				t.Fatalf("TryAcquireSemaphore: %v", err)
			}
			t.Cleanup(func() { _ = p.Release(context.Background()) })
			return p.Release
		},
		wait: func(ctx context.Context, c *client.Client, res string) error {
			p, err := c.AcquireSemaphore(ctx, res, 1, "", 30*time.Second)
			if err == nil {
				err = p.Release(context.Background())
			}
			return err
		},
	},
}

// exchange is one acquire request as the wire saw it and its answer.
type exchange struct {
	path   string // escaped
	waits  bool   // carried wait_seconds
	status int
	fields []string // the errors[].field of a problem answer
}

// wireLog is an http.RoundTripper that logs the client's acquire requests
// and their answers, and reports each on a channel. With released set it
// sends each request as the released clients did: a waiting round to the
// try route (…/wait cut off), with its wait_seconds and queue_ticket.
type wireLog struct {
	released bool
	mu       sync.Mutex
	log      []exchange
	answered chan exchange
}

func newWireLog(released bool) *wireLog {
	return &wireLog{released: released, answered: make(chan exchange, 1000)}
}

func (w *wireLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || strings.HasSuffix(r.URL.Path, "/renew") {
		return http.DefaultTransport.RoundTrip(r)
	}
	if w.released {
		r = r.Clone(r.Context())
		r.URL.Path = strings.TrimSuffix(r.URL.Path, "/wait")
		r.URL.RawPath = strings.TrimSuffix(r.URL.RawPath, "/wait")
	}
	var body struct {
		Wait int64 `json:"wait_seconds"`
	}
	if r.GetBody != nil {
		rc, err := r.GetBody()
		if err == nil {
			_ = json.NewDecoder(rc).Decode(&body)
			rc.Close()
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	e := exchange{path: r.URL.EscapedPath(), waits: body.Wait > 0, status: resp.StatusCode}
	if resp.StatusCode >= 400 {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(data))
		var p struct {
			Errors []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		_ = json.Unmarshal(data, &p)
		for _, f := range p.Errors {
			e.fields = append(e.fields, f.Field)
		}
	}
	w.mu.Lock()
	w.log = append(w.log, e)
	w.mu.Unlock()
	w.answered <- e
	return resp, nil
}

func (w *wireLog) exchanges() []exchange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.log)
}

// TestReleasedClientPollsNewService is the first version skew: a released
// client sends a waiting round to the try route with wait_seconds. The
// service answers 422 naming wait_seconds, which the client reads as an
// older service (refusesWait): it polls with try-acquires and gets the
// lock when the holder lets go. The test client sends the released wire
// (its …/wait cut off) after its first try (released clients sent none);
// how it reads the answer is unchanged since then.
func TestReleasedClientPollsNewService(t *testing.T) {
	t.Parallel()
	for _, k := range skewKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			res := resourceName(t)
			release := k.hold(t, newClient(t, srv.URL), res)
			wire := newWireLog(true)
			c := newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: wire}))
			ctx := testContext(t, 20*time.Second)
			done := make(chan error, 1)
			go func() { done <- k.wait(ctx, c, res) }()
			// The try, the refusal, then one poll answered "held".
			for range 3 {
				select {
				case <-wire.answered:
				case err := <-done:
					t.Fatalf("acquire ended before polling: %v", err)
				}
			}
			if err := release(ctx); err != nil {
				t.Fatalf("holder's release: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("acquire: %v", err)
			}
			log := wire.exchanges()
			try := k.path + res
			if first := log[0]; first.path != try || first.waits || first.status != 200 {
				t.Errorf("first request %+v: want a try, %s without wait_seconds, answered 200", first, try)
			}
			if round := log[1]; round.path != try || !round.waits || round.status != 422 || !slices.Equal(round.fields, []string{"wait_seconds"}) {
				t.Errorf("second request %+v: want %s with wait_seconds answered 422 naming wait_seconds", round, try)
			}
			for _, e := range log[2:] {
				if e.path != try || e.waits || e.status != 200 {
					t.Errorf("poll %+v: want %s without wait_seconds, answered 200", e, try)
				}
			}
		})
	}
}

// TestNewClientOldStack is the second version skew: a new client against a
// stack from before the waiting routes (testenv.OldStack: API Gateway's 404
// on …/wait, a try-acquire with wait_seconds waits). Its try finds the lock
// held; it sends the round that …/wait refused again to the try route with
// wait_seconds, waits at the service (one round, granted at the release)
// and never asks …/wait again.
func TestNewClientOldStack(t *testing.T) {
	t.Parallel()
	for _, k := range skewKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			old := testenv.StartOldStack(t, srv.URL)
			waitKey := map[string]string{"/locks/": lockWait, "/semaphores/": semWait}[k.path]
			wire := newWireLog(false)
			c := newClient(t, old.URL, client.WithHTTPClient(&http.Client{Transport: wire}))
			ctx := testContext(t, 20*time.Second)
			// waitHeld waits for res while "holder" holds it, released once
			// the round reached the runner (the old stack sends a try with
			// wait_seconds to …/wait), and returns what the old stack saw.
			waitHeld := func(res string) []string {
				t.Helper()
				release := k.hold(t, newClient(t, srv.URL), res)
				n, before := len(old.Acquires()), srv.Counts().Requests[waitKey]
				done := make(chan error, 1)
				go func() { done <- k.wait(ctx, c, res) }()
				untilCounted(t, srv, waitKey, before, done)
				if err := release(ctx); err != nil {
					t.Fatalf("holder's release: %v", err)
				}
				if err := <-done; err != nil {
					t.Fatalf("acquire: %v (wire %+v)", err, wire.exchanges())
				}
				return old.Acquires()[n:]
			}
			res := resourceName(t)
			try := "POST " + k.path + res
			want := []string{try, try + "/wait wait_seconds", try + " wait_seconds"}
			if got := waitHeld(res); !slices.Equal(got, want) {
				t.Errorf("acquires at the old stack: got %q, want %q (a try, then one round at the service)", got, want)
			}
			// Remembered: the next acquire of a held lock waits on the try
			// route at once.
			res2 := resourceName(t)
			try2 := "POST " + k.path + res2
			if got := waitHeld(res2); !slices.Equal(got, []string{try2, try2 + " wait_seconds"}) {
				t.Errorf("second acquire at the old stack: got %q, want a try, then one with wait_seconds", got)
			}
		})
	}
}

// The acquire rows' route keys, as the runner counts them.
const (
	lockTry  = "POST /locks/{resource}"
	lockWait = "POST /locks/{resource}/wait"
	semTry   = "POST /semaphores/{name}"
	semWait  = "POST /semaphores/{name}/wait"
)

// untilCounted waits until the runner has counted more than n requests to
// key, or done delivers (an acquire that ended first: reported as an error).
func untilCounted(t *testing.T, srv *testenv.Server, key string, n int64, done <-chan error) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for srv.Counts().Requests[key] <= n {
		select {
		case err := <-done:
			t.Fatalf("acquire ended before it sent %s: %v", key, err)
		case <-tick.C:
		}
	}
}

// TestClientWaitsOnWaitRoute counts at the runner what every acquiring
// call of the Go client sends. A waiting acquire (Acquire, WithLock,
// AcquireSemaphore, WithSemaphore, Election.Campaign) tries first: of a
// free lock that one try is all, and nothing reaches …/wait; of a held one
// the try is followed by a round on …/wait (here one: the holder lets go
// once it arrived). A try is one request on the try route, and no
// wait_seconds ever reaches a try route.
func TestClientWaitsOnWaitRoute(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c := newClient(t, srv.URL)
	ctx := testContext(t, 30*time.Second)
	const n = 10 // uncontended acquires of each kind
	acquireFree := func(res string) error {
		l, err := c.Acquire(ctx, res, "", 30*time.Second)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	}
	acquireSemFree := func(res string) error {
		p, err := c.AcquireSemaphore(ctx, res, 2, "", 30*time.Second)
		if err == nil {
			err = p.Release(ctx)
		}
		return err
	}
	campaign := func(res string) error {
		e := client.NewElection(c, res)
		if _, err := e.Campaign(ctx); err != nil {
			return err
		}
		return e.Resign(ctx)
	}
	tests := []struct {
		name string
		hold *skewKind // holds the name first (not counted), released once the round on …/wait arrived
		wait string    // that round's route key
		run  func(res string) error
		want map[string]int64
	}{
		{name: "AcquireFree", run: func(string) error {
			for range n {
				if err := acquireFree(resourceName(t)); err != nil {
					return err
				}
			}
			return nil
		}, want: map[string]int64{lockTry: n}},
		{name: "AcquireSemaphoreFree", run: func(string) error {
			for range n {
				if err := acquireSemFree(resourceName(t)); err != nil {
					return err
				}
			}
			return nil
		}, want: map[string]int64{semTry: n}},
		{name: "WithLockFree", run: func(res string) error {
			return c.WithLock(ctx, res, func(context.Context, *client.Lease) error { return nil })
		}, want: map[string]int64{lockTry: 1}},
		{name: "WithSemaphoreFree", run: func(res string) error {
			return c.WithSemaphore(ctx, res, 2, func(context.Context, *client.Permit) error { return nil })
		}, want: map[string]int64{semTry: 1}},
		{name: "CampaignFree", run: campaign, want: map[string]int64{lockTry: 1}},
		{name: "TryAcquire", run: func(res string) error {
			l, err := c.TryAcquire(ctx, res, "", time.Minute)
			if err == nil {
				err = l.Release(ctx)
			}
			return err
		}, want: map[string]int64{lockTry: 1}},
		{name: "TryAcquireSemaphore", run: func(res string) error {
			p, err := c.TryAcquireSemaphore(ctx, res, 1, "", time.Minute)
			if err == nil {
				err = p.Release(ctx)
			}
			return err
		}, want: map[string]int64{semTry: 1}},
		{name: "AcquireHeld", hold: &skewKinds[0], wait: lockWait, run: func(res string) error { return skewKinds[0].wait(ctx, c, res) },
			want: map[string]int64{lockTry: 1, lockWait: 1}},
		{name: "AcquireSemaphoreHeld", hold: &skewKinds[1], wait: semWait, run: func(res string) error { return skewKinds[1].wait(ctx, c, res) },
			want: map[string]int64{semTry: 1, semWait: 1}},
		{name: "CampaignHeld", hold: &skewKinds[0], wait: lockWait, run: campaign, want: map[string]int64{lockTry: 1, lockWait: 1}},
	}
	// One after another: each reads the counts' change its calls made.
	for _, tt := range tests {
		res := resourceName(t)
		var release func(context.Context) error
		if tt.hold != nil {
			release = tt.hold.hold(t, c, res)
		}
		before := srv.Counts().Requests
		done := make(chan error, 1)
		go func() { done <- tt.run(res) }()
		if release != nil {
			untilCounted(t, srv, tt.wait, before[tt.wait], done)
			if err := release(ctx); err != nil {
				t.Fatalf("%s: holder's release: %v", tt.name, err)
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		after := srv.Counts().Requests
		for _, key := range []string{lockTry, lockWait, semTry, semWait} {
			if got := after[key] - before[key]; got != tt.want[key] {
				t.Errorf("%s: %s: got %d requests, want %d", tt.name, key, got, tt.want[key])
			}
		}
	}
	// The per-call counts are checked above; here the whole run's: no
	// wait_seconds reached a try route.
	srv.CheckRoutes(t, nil)
}
