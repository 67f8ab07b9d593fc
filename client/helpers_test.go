package client_test

import (
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

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

var example struct {
	once sync.Once
	url  string
}

// endpoint returns the URL of a lock service for the examples, which
// cannot take a testing.TB: the in-memory fake API served over HTTP on the
// real clock, shared by all examples. internal/integration/goclient runs
// the same examples against the real handlers.
func endpoint() string {
	example.once.Do(func() {
		// LOCKS_TEST_ENDPOINT points the examples at a real service: the
		// service module's goclient.TestClientExamples runs them against
		// the local runner that way.
		if u := os.Getenv("LOCKS_TEST_ENDPOINT"); u != "" {
			example.url = u
			return
		}
		example.url = httptest.NewServer(newFakeAPI()).URL
	})
	return example.url
}
