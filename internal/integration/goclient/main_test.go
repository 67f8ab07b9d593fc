// Package goclient_test runs the Go client (github.com/ft288/locks/client)
// against the real handlers: the local runner over the dynalite TestMain
// starts. The client module's own tests use an in-memory fake of the API.
package goclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/local"
	"github.com/ft288/locks/locklogic"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// runID keeps lock names of different test processes apart; they share
// nothing today, but -count=N runs share one dynalite.
var (
	runID = strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
	seq   atomic.Int64
)

// resourceName returns a new lock name, unique to the call, that names the
// test.
func resourceName(tb testing.TB) string {
	tb.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name())
	return fmt.Sprintf("client-%s-%s-%d", name, runID, seq.Add(1))
}

// newClient returns a client of url with fast retries, unless opts say
// otherwise.
func newClient(tb testing.TB, url string, opts ...client.Option) *client.Client {
	tb.Helper()
	opts = append([]client.Option{client.WithBackoff(10*time.Millisecond, 200*time.Millisecond)}, opts...)
	c, err := client.New(url, opts...)
	if err != nil {
		tb.Fatalf("client.New(%q): %v", url, err)
	}
	return c
}

// acquire takes resource for owner or fails the test.
func acquire(tb testing.TB, c *client.Client, resource, owner string, ttl time.Duration) *client.Lease {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.TryAcquire(ctx, resource, owner, ttl)
	if err != nil {
		tb.Fatalf("TryAcquire(%q, %q): %v", resource, owner, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Release(ctx) // stops the keep-alive; the lease may be gone already
	})
	return l
}

// waitDone waits up to limit for the lease to end and returns when it did.
func waitDone(tb testing.TB, l *client.Lease, limit time.Duration) time.Time {
	tb.Helper()
	select {
	case <-l.Done():
		return time.Now()
	case <-time.After(limit):
		tb.Fatalf("lease on %q still held after %s", l.Resource(), limit)
		return time.Time{}
	}
}

// storeReads returns a DynamoDB endpoint in front of the test dynalite
// (for testenv.Options.StoreEndpoint) and a channel that receives a value
// for each GetItem the handlers send through it: the service reads the
// item only while it waits for a held lock.
func storeReads(tb testing.TB) (endpoint string, reads <-chan struct{}) {
	tb.Helper()
	target, err := url.Parse(testenv.Endpoint())
	if err != nil {
		tb.Fatal(err)
	}
	ch := make(chan struct{}, 1000)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetItem") {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL, ch
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var example struct {
	once sync.Once
	url  string
}

// endpoint returns the URL of a lock service for the examples, which
// cannot take a testing.TB: the local runner over the real handlers and the
// dynalite TestMain started, shared by all examples.
func endpoint() string {
	example.once.Do(func() {
		db, err := api.NewDynamoDB(context.Background(), testenv.Endpoint())
		if err != nil {
			panic(fmt.Sprintf("example server: %v", err))
		}
		log := slog.New(slog.DiscardHandler)
		svc := locklogic.New(db, locklogic.Config{Table: testenv.Table})
		example.url = httptest.NewServer(local.NewRunner(api.NewHandler(svc, log, nil), log)).URL
	})
	return example.url
}

// startClient starts a server of the test's own (the local runner over
// the real handlers) and returns a client of it, as newClient with opts.
func startClient(tb testing.TB, opts ...client.Option) *client.Client {
	tb.Helper()
	return newClient(tb, testenv.Start(tb, testenv.Options{}).URL, opts...)
}

// testContext returns a context that ends after d, or when the test does.
func testContext(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
