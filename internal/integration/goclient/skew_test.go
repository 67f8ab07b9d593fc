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
// (its …/wait cut off); how it reads the answer is unchanged since then.
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
			// The refusal, then one poll answered "held".
			for range 2 {
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
			if first := log[0]; first.path != try || !first.waits || first.status != 422 || !slices.Equal(first.fields, []string{"wait_seconds"}) {
				t.Errorf("first request %+v: want %s with wait_seconds answered 422 naming wait_seconds", first, try)
			}
			for _, e := range log[1:] {
				if e.path != try || e.waits || e.status != 200 {
					t.Errorf("poll %+v: want %s without wait_seconds, answered 200", e, try)
				}
			}
		})
	}
}

// TestNewClientOldStack is the second version skew: a new client against a
// stack from before the waiting routes (testenv.OldStack: API Gateway's 404
// on …/wait, a try-acquire with wait_seconds waits). It sends the round
// again to the try route with wait_seconds, waits at the service (one
// request, granted at the release) and never asks …/wait again.
func TestNewClientOldStack(t *testing.T) {
	t.Parallel()
	for _, k := range skewKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			store, reads := storeReads(t)
			srv := testenv.Start(t, testenv.Options{StoreEndpoint: store})
			old := testenv.StartOldStack(t, srv.URL)
			res := resourceName(t)
			release := k.hold(t, newClient(t, srv.URL), res)
			for len(reads) > 0 {
				<-reads
			}
			wire := newWireLog(false)
			c := newClient(t, old.URL, client.WithHTTPClient(&http.Client{Transport: wire}))
			ctx := testContext(t, 20*time.Second)
			done := make(chan error, 1)
			go func() { done <- k.wait(ctx, c, res) }()
			// The service reads the item only while a request waits.
			select {
			case <-reads:
			case err := <-done:
				t.Fatalf("acquire ended before waiting: %v (wire %+v)", err, wire.exchanges())
			}
			if err := release(ctx); err != nil {
				t.Fatalf("holder's release: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("acquire: %v", err)
			}
			try := k.path + res
			want := []string{"POST " + try + "/wait wait_seconds", "POST " + try + " wait_seconds"}
			if got := old.Acquires(); !slices.Equal(got, want) {
				t.Errorf("acquires at the old stack: got %q, want %q (one round, at the service)", got, want)
			}
			// Remembered: the next waiting acquire goes to the try route.
			res2 := resourceName(t)
			if err := k.wait(ctx, c, res2); err != nil {
				t.Fatalf("second acquire: %v", err)
			}
			if got := old.Acquires()[len(want):]; !slices.Equal(got, []string{"POST " + k.path + res2 + " wait_seconds"}) {
				t.Errorf("second acquire at the old stack: got %q, want one try with wait_seconds", got)
			}
		})
	}
}

// TestClientWaitsOnWaitRoute counts at the runner what every acquiring
// call of the Go client sends: each waiting acquire (Acquire, WithLock,
// AcquireSemaphore, WithSemaphore, Election.Campaign) one round on its
// …/wait route, here one per call (on a free lock, or released while the
// round waits); each try on the try route; and no wait_seconds on a try
// route.
func TestClientWaitsOnWaitRoute(t *testing.T) {
	t.Parallel()
	store, reads := storeReads(t)
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: store})
	c := newClient(t, srv.URL)
	ctx := testContext(t, 30*time.Second)
	drain := func() {
		for len(reads) > 0 {
			<-reads
		}
	}
	// waitOn runs wait while holder holds, and releases the holder once the
	// service is waiting (it reads the item only then).
	waitOn := func(release func(context.Context) error, wait func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- wait() }()
		select {
		case <-reads:
		case err := <-done:
			t.Fatalf("acquire ended before waiting: %v", err)
		}
		if err := release(ctx); err != nil {
			t.Fatalf("holder's release: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("acquire: %v", err)
		}
	}

	lock, sem := resourceName(t), resourceName(t)
	lockHolder := skewKinds[0].hold(t, c, lock) // try
	semHolder := skewKinds[1].hold(t, c, sem)   // semaphore try
	drain()
	waitOn(lockHolder, func() error { return skewKinds[0].wait(ctx, c, lock) }) // wait
	drain()
	waitOn(semHolder, func() error { return skewKinds[1].wait(ctx, c, sem) })                                           // semaphore wait
	if err := c.WithLock(ctx, resourceName(t), func(context.Context, *client.Lease) error { return nil }); err != nil { // wait
		t.Fatalf("WithLock: %v", err)
	}
	if err := c.WithSemaphore(ctx, resourceName(t), 2, func(context.Context, *client.Permit) error { return nil }); err != nil { // semaphore wait
		t.Fatalf("WithSemaphore: %v", err)
	}
	e := client.NewElection(c, resourceName(t))
	if _, err := e.Campaign(ctx); err != nil { // wait
		t.Fatalf("Campaign: %v", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if l, err := c.TryAcquire(ctx, resourceName(t), "", time.Minute); err != nil { // try
		t.Fatalf("TryAcquire: %v", err)
	} else {
		_ = l.Release(ctx)
	}
	if p, err := c.TryAcquireSemaphore(ctx, resourceName(t), 1, "", time.Minute); err != nil { // semaphore try
		t.Fatalf("TryAcquireSemaphore: %v", err)
	} else {
		_ = p.Release(ctx)
	}

	srv.CheckRoutes(t, map[string]int64{
		"POST /locks/{resource}":       2,
		"POST /locks/{resource}/wait":  3,
		"POST /semaphores/{name}":      2,
		"POST /semaphores/{name}/wait": 2,
	})
}
