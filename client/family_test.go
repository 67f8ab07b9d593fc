package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// TestErrValidationIsErrInvalid: the old name stays the same value.
func TestErrValidationIsErrInvalid(t *testing.T) {
	t.Parallel()
	if client.ErrInvalid != client.ErrValidation {
		t.Fatal("ErrInvalid is not ErrValidation")
	}
}

// TestDefaultTTL: a ttl of 0 asks for WithTTL's, else DefaultTTL; an
// explicit ttl wins over WithTTL.
func TestDefaultTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ttl  time.Duration
		opts []client.AcquireOption
		want time.Duration
	}{
		{name: "Zero", want: client.DefaultTTL},
		{name: "ZeroWithTTL", opts: []client.AcquireOption{client.WithTTL(7 * time.Second)}, want: 7 * time.Second},
		{name: "ExplicitWins", ttl: 5 * time.Second, opts: []client.AcquireOption{client.WithTTL(7 * time.Second)}, want: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				c := newFakeClient(t, f, client.WithoutKeepAlive())
				for _, acquire := range []func() (*client.Lease, error){
					func() (*client.Lease, error) {
						return c.TryAcquire(context.Background(), "try", "", tt.ttl, tt.opts...)
					},
					func() (*client.Lease, error) { return c.Acquire(context.Background(), "wait", "", tt.ttl, tt.opts...) },
				} {
					l, err := acquire()
					if err != nil {
						t.Fatal(err)
					}
					if l.TTL() != tt.want {
						t.Errorf("%s: TTL: got %s, want %s", l.Resource(), l.TTL(), tt.want)
					}
					_ = l.Release(context.Background())
				}
				for _, c := range f.log("acquire") {
					if c.TTL != tt.want {
						t.Errorf("%s: ttl_seconds sent: got %s, want %s", c.Resource, c.TTL, tt.want)
					}
				}
				if _, err := c.Renew(context.Background(), "renew", "w1", 0, 0); !errors.Is(err, client.ErrNotFound) {
					t.Errorf("Renew with ttl 0: got %v, want ErrNotFound from the service", err)
				}
				if got := f.log("renew"); len(got) != 1 || got[0].TTL != client.DefaultTTL {
					t.Errorf("Renew with ttl 0 sent %v, want one renewal of DefaultTTL", got)
				}
			})
		})
	}
}

// TestWithOwner: an owner of "" takes WithOwner's; an explicit one wins.
func TestWithOwner(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := newFakeClient(t, newFakeAPI(), client.WithoutKeepAlive())
		l, err := c.TryAcquire(context.Background(), "a", "", 0, client.WithOwner("job@host-a"))
		if err != nil || l.Owner() != "job@host-a" {
			t.Fatalf("TryAcquire with WithOwner: got %v, %v; want owner job@host-a", l, err)
		}
		l, err = c.TryAcquire(context.Background(), "b", "mine", 0, client.WithOwner("job@host-a"))
		if err != nil || l.Owner() != "mine" {
			t.Fatalf("TryAcquire with an owner and WithOwner: got %v, %v; want owner mine", l, err)
		}
		for _, opt := range []client.AcquireOption{client.WithOwner(" "), client.WithTTL(1500 * time.Millisecond), client.WithWait(-time.Second)} {
			if _, err := c.TryAcquire(context.Background(), "c", "", 0, opt); !errors.Is(err, client.ErrValidation) {
				t.Errorf("invalid option: got %v, want ErrValidation", err)
			}
		}
	})
}

// TestAcquireWaitBound: Acquire waits until its context ends, and at most
// DefaultAcquireWait when the context has no deadline; WithWait sets
// another bound (0: one attempt), WithoutWaitLimit none. A wait that runs
// out is a *HeldError; it matches context.DeadlineExceeded only when the
// caller's context ended it.
func TestAcquireWaitBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ctx      time.Duration // the caller's deadline (0: none)
		opts     []client.AcquireOption
		release  time.Duration // the holder releases then (0: never)
		wantAt   time.Duration // when Acquire returns
		wantLock bool
		wantCtx  bool // the error matches context.DeadlineExceeded
		wantOne  bool // one request, without wait_seconds
	}{
		{name: "DefaultWithoutDeadline", wantAt: client.DefaultAcquireWait},
		{name: "CallerDeadline", ctx: sec(10), wantAt: sec(10), wantCtx: true},
		{name: "CallerDeadlineBeyondDefault", ctx: sec(45), wantAt: sec(45), wantCtx: true},
		{name: "WithWait", opts: []client.AcquireOption{client.WithWait(sec(5))}, wantAt: sec(5)},
		{name: "WithWaitBeforeDeadline", ctx: sec(60), opts: []client.AcquireOption{client.WithWait(sec(5))}, wantAt: sec(5)},
		{name: "DeadlineBeforeWithWait", ctx: sec(3), opts: []client.AcquireOption{client.WithWait(sec(5))}, wantAt: sec(3), wantCtx: true},
		{name: "WithWaitZeroTriesOnce", opts: []client.AcquireOption{client.WithWait(0)}, wantOne: true},
		// The release falls between two of the fake service's 10 ms polls of
		// the item, so the grant comes at the next one.
		{name: "WithoutWaitLimit", opts: []client.AcquireOption{client.WithoutWaitLimit()}, release: sec(100) + 5*time.Millisecond,
			wantAt: sec(100) + 10*time.Millisecond, wantLock: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: time.Hour})
				if tt.release > 0 {
					time.AfterFunc(tt.release, func() { f.serve(call{Op: "release", Resource: "r", Owner: "holder"}) })
				}
				c := newFakeClient(t, f, client.WithoutKeepAlive())
				ctx := context.Background()
				if tt.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.ctx)
					defer cancel()
				}
				l, err := c.Acquire(ctx, "r", "", time.Minute, tt.opts...)
				if got := at(time.Now()); got != tt.wantAt {
					t.Errorf("Acquire returned at %s, want %s", got, tt.wantAt)
				}
				if tt.wantLock {
					if err != nil {
						t.Fatalf("Acquire: %v", err)
					}
					_ = l.Release(context.Background())
					return
				}
				var held *client.HeldError
				if !errors.As(err, &held) || !errors.Is(err, client.ErrHeld) {
					t.Fatalf("Acquire: got %v, want a *HeldError", err)
				}
				if got := errors.Is(err, context.DeadlineExceeded); got != tt.wantCtx {
					t.Errorf("errors.Is(%v, context.DeadlineExceeded): got %t, want %t", err, got, tt.wantCtx)
				}
				acquires := f.log("acquire")
				if tt.wantOne && (len(acquires) != 1 || acquires[0].Wait != 0) {
					t.Errorf("requests: got %v, want one without wait_seconds", acquires)
				}
				if !tt.wantCtx && !tt.wantOne && !strings.Contains(err.Error(), "gave up after waiting") {
					t.Errorf("error %q does not say how long it waited", err)
				}
			})
		})
	}
}

// TestFromEnv is not parallel: it sets the environment.
func TestFromEnv(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string // LOCKS_ENDPOINT
		sigv4    string // LOCKS_SIGV4
		wantHost string // "": an error
	}{
		{name: "Default", wantHost: "127.0.0.1:8080"},
		{name: "Endpoint", endpoint: "http://locks.test:9000", wantHost: "locks.test:9000"},
		{name: "SigV4Off", endpoint: "http://locks.test", sigv4: "0", wantHost: "locks.test"},
		{name: "ErrSigV4", sigv4: "1"},
		{name: "ErrSigV4True", sigv4: "TRUE"},
		{name: "ErrEndpoint", endpoint: "locks.test:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("LOCKS_ENDPOINT", tt.endpoint)
			t.Setenv("LOCKS_SIGV4", tt.sigv4)
			var host string
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				host = r.URL.Host
				return problemResponse(404, "not-found"), nil
			})
			c, err := client.FromEnv(client.WithHTTPClient(&http.Client{Transport: rt}))
			if tt.wantHost == "" {
				if err == nil {
					t.Fatal("FromEnv: got no error")
				}
				if tt.sigv4 != "" && !strings.Contains(err.Error(), "awsauth.FromEnv(ctx, opts...)") {
					t.Errorf("FromEnv: got %q, want it to point to awsauth.FromEnv", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if _, err := c.Status(context.Background(), "r"); !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("Status: %v", err)
			}
			if host != tt.wantHost {
				t.Errorf("request sent to %q, want %q", host, tt.wantHost)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
