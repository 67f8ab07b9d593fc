package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		opts    []client.Option
		wantErr bool
	}{
		{name: "OK", url: "http://127.0.0.1:8080"},
		{name: "OKStagePath", url: "https://abc.execute-api.eu-west-1.amazonaws.com/prod/"},
		{name: "ErrNoScheme", url: "127.0.0.1:8080", wantErr: true},
		{name: "ErrFTP", url: "ftp://example.com", wantErr: true},
		{name: "ErrQuery", url: "http://example.com/?a=b", wantErr: true},
		{name: "ErrBackoff", url: "http://example.com", opts: []client.Option{client.WithBackoff(time.Second, time.Millisecond)}, wantErr: true},
		{name: "ErrSigV4NoRegion", url: "http://example.com", opts: []client.Option{client.WithSigV4("", nil)}, wantErr: true},
		{name: "ErrNilHTTPClient", url: "http://example.com", opts: []client.Option{client.WithHTTPClient(nil)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := client.New(tt.url, tt.opts...)
			if got := err != nil; got != tt.wantErr {
				t.Errorf("New(%q): got error %v, want error %t", tt.url, err, tt.wantErr)
			}
		})
	}
}

func TestTryAcquireRejectsArgsBeforeSending(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	tests := []struct {
		name     string
		resource string
		owner    string
		ttl      time.Duration
	}{
		{"ErrTTLFraction", "r", "w1", 1500 * time.Millisecond},
		{"ErrTTLZero", "r", "w1", 0},
		{"ErrTTLNegative", "r", "w1", -time.Second},
		{"ErrTTLSubSecond", "r", "w1", 999 * time.Millisecond},
		{"ErrOwnerBlank", "r", "  ", time.Second},
		{"ErrResourceEmpty", "", "w1", time.Second},
		{"ErrResourceSlash", "a/b", "w1", time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, call := range []func() error{
				func() error { _, err := c.TryAcquire(context.Background(), tt.resource, tt.owner, tt.ttl); return err },
				func() error { _, err := c.Acquire(context.Background(), tt.resource, tt.owner, tt.ttl); return err },
				func() error {
					_, err := c.Renew(context.Background(), tt.resource, tt.owner, tt.ttl, 0)
					return err
				},
			} {
				if err := call(); !errors.Is(err, client.ErrInvalid) {
					t.Errorf("got %v, want an error matching ErrInvalid", err)
				}
			}
			if tt.resource != "r" {
				if _, err := c.Status(context.Background(), tt.resource); !errors.Is(err, client.ErrInvalid) {
					t.Errorf("status: got %v, want ErrInvalid", err)
				}
				if err := c.Release(context.Background(), tt.resource, "w1", 0); !errors.Is(err, client.ErrInvalid) {
					t.Errorf("release: got %v, want ErrInvalid", err)
				}
			}
		})
	}
	if got := calls.Load(); got != 0 {
		t.Errorf("requests sent: got %d, want 0", got)
	}
}

func TestTryAcquire(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c := newClient(t, srv.URL)
	res := resourceName(t) + " odd:chars?&%é"
	ctx := context.Background()

	l := acquire(t, c, res, " w1 ", 30*time.Second)
	if l.Resource() != res || l.Owner() != "w1" || l.FencingToken() <= 0 || l.TTL() != 30*time.Second {
		t.Errorf("lease: got (%q, %q, %d, %s), want (%q, %q, >0, 30s)", l.Resource(), l.Owner(), l.FencingToken(), l.TTL(), res, "w1")
	}
	if got, err := c.Status(ctx, res); err != nil || got.Owner != "w1" || got.FencingToken != l.FencingToken() {
		t.Errorf("Status: got %+v, %v, want owner w1 with token %d", got, err, l.FencingToken())
	}

	_, err := c.TryAcquire(ctx, res, "w2", 30*time.Second)
	var held *client.HeldError
	if !errors.As(err, &held) || !errors.Is(err, client.ErrHeld) {
		t.Fatalf("TryAcquire by another owner: got %v, want a *HeldError matching ErrHeld", err)
	}
	if held.Resource != res {
		t.Errorf("HeldError.Resource: got %q, want %q", held.Resource, res)
	}

	again := acquire(t, c, res, "w1", 30*time.Second)
	if again.FencingToken() <= l.FencingToken() {
		t.Errorf("re-acquire by the holder: got token %d, want more than %d", again.FencingToken(), l.FencingToken())
	}
	if err := again.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := c.Status(ctx, res); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Status after Release: got %v, want ErrNotFound", err)
	}
	if err := again.Release(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("second Release: got %v, want ErrNotFound", err)
	}
	if !errors.Is(again.Err(), client.ErrReleased) {
		t.Errorf("Err after Release: got %v, want ErrReleased", again.Err())
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []client.Option
		// settled: the waiter is waiting once this many acquire requests
		// were answered (polling) or sent (waiting at the service).
		sent, answered int
		within         time.Duration
		maxRequests    int64 // acquire requests in all; 0: any number
	}{
		// The service holds the one request and grants it at its next read
		// of the item, ~100 ms apart.
		{name: "AtTheService", sent: 1, within: 500 * time.Millisecond, maxRequests: 1},
		{name: "Polling", opts: []client.Option{client.WithoutServerWait()}, answered: 2, within: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			res := resourceName(t)
			holder := acquire(t, newClient(t, srv.URL), res, "holder", 30*time.Second)

			// The waiter's transport reports each acquire request and answer,
			// so the test knows the waiter is waiting before the holder lets go.
			sent, answers := make(chan struct{}, 100), make(chan struct{}, 100)
			var requests atomic.Int64
			waiter := newClient(t, srv.URL, append(tt.opts, client.WithHTTPClient(&http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				requests.Add(1)
				sent <- struct{}{}
				resp, err := http.DefaultTransport.RoundTrip(r)
				answers <- struct{}{}
				return resp, err
			})}))...)
			type result struct {
				l   *client.Lease
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			go func() {
				l, err := waiter.Acquire(ctx, res, "waiter", 30*time.Second)
				got <- result{l, err, time.Now()}
			}()
			for range tt.sent {
				<-sent
			}
			for range tt.answered {
				<-answers
			}
			time.Sleep(300 * time.Millisecond) // the service is inside its wait
			released := time.Now()
			if err := holder.Release(ctx); err != nil {
				t.Fatalf("holder Release: %v", err)
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("Acquire: %v", r.err)
			}
			defer r.l.Release(context.Background())
			if wait := r.at.Sub(released); wait > tt.within {
				t.Errorf("Acquire got the lock %s after the release, want within %s", wait, tt.within)
			}
			if r.l.FencingToken() <= holder.FencingToken() {
				t.Errorf("waiter's token: got %d, want more than the holder's %d", r.l.FencingToken(), holder.FencingToken())
			}
			if n := requests.Load(); tt.maxRequests > 0 && n > tt.maxRequests {
				t.Errorf("the waiter sent %d requests, want %d", n, tt.maxRequests)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
