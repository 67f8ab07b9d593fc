package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// TestWithLock: WithLock acquires, runs fn under the lease and releases it;
// fn's context ends when the lease may be lost, and WithLock reports the
// loss with fn's error.
func TestWithLock(t *testing.T) {
	t.Parallel()
	errWork := errors.New("work failed")
	tests := []struct {
		name string
		// fn is the work; f is the fake service, cancel the caller's.
		fn           func(ctx context.Context, l *client.Lease, f *fakeAPI, cancel context.CancelFunc) error
		opts         []client.AcquireOption
		wantIs       []error
		wantCalled   bool
		wantReleases int
	}{
		{
			name: "OK", wantCalled: true, wantReleases: 1,
			fn: func(ctx context.Context, l *client.Lease, _ *fakeAPI, _ context.CancelFunc) error {
				if ctx.Err() != nil || l.Err() != nil {
					return errors.New("lease not held inside fn")
				}
				time.Sleep(25 * time.Second) // renewed meanwhile
				return ctx.Err()
			},
		},
		{
			name: "FnError", wantCalled: true, wantReleases: 1, wantIs: []error{errWork},
			fn: func(context.Context, *client.Lease, *fakeAPI, context.CancelFunc) error { return errWork },
		},
		{
			// Force released: the renewal at ttl/3 = 10 s is refused, fn's
			// context ends with the loss, and fn returns its cause.
			name: "LostEndsFnContext", wantCalled: true, wantReleases: 1, wantIs: []error{client.ErrLeaseLost, client.ErrNotFound},
			fn: func(ctx context.Context, l *client.Lease, f *fakeAPI, _ context.CancelFunc) error {
				f.forceRelease(l.Resource())
				<-ctx.Done()
				if at(time.Now()) != 10*time.Second {
					return errors.New("fn's context ended at " + at(time.Now()).String() + ", want 10s")
				}
				return context.Cause(ctx)
			},
		},
		{
			// fn ignores its context: the loss is reported all the same.
			name: "LostReportedWithFnError", wantCalled: true, wantReleases: 1, wantIs: []error{client.ErrLeaseLost, errWork},
			fn: func(ctx context.Context, l *client.Lease, f *fakeAPI, _ context.CancelFunc) error {
				f.forceRelease(l.Resource())
				time.Sleep(15 * time.Second)
				return errWork
			},
		},
		{
			// Taken over between two renewals and done before the next:
			// the release is refused, and WithLock says the lease was lost.
			name: "TakenOverUnnoticed", wantCalled: true, wantReleases: 1, wantIs: []error{client.ErrLeaseLost, client.ErrForbidden},
			fn: func(ctx context.Context, l *client.Lease, f *fakeAPI, _ context.CancelFunc) error {
				f.expireAll()
				f.serve(call{Op: "acquire", Resource: l.Resource(), Owner: "other", TTL: time.Minute})
				return nil
			},
		},
		{
			// The caller gives up: fn's context ends, and the lease is
			// released all the same.
			name: "CallerCancels", wantCalled: true, wantReleases: 1, wantIs: []error{context.Canceled},
			fn: func(ctx context.Context, _ *client.Lease, _ *fakeAPI, cancel context.CancelFunc) error {
				cancel()
				<-ctx.Done()
				return context.Cause(ctx)
			},
		},
		{
			name: "HeldTriesOnce", opts: []client.AcquireOption{client.WithWait(0)}, wantIs: []error{client.ErrHeld},
			fn: func(context.Context, *client.Lease, *fakeAPI, context.CancelFunc) error { return nil },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				if tt.name == "HeldTriesOnce" {
					f.serve(call{Op: "acquire", Resource: "r", Owner: "holder", TTL: time.Hour})
				}
				c := newFakeClient(t, f)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				called := false
				err := c.WithLock(ctx, "r", func(ctx context.Context, l *client.Lease) error {
					called = true
					return tt.fn(ctx, l, f, cancel)
				}, tt.opts...)
				if called != tt.wantCalled {
					t.Errorf("fn called: got %t, want %t", called, tt.wantCalled)
				}
				if len(tt.wantIs) == 0 && err != nil {
					t.Errorf("WithLock: %v", err)
				}
				for _, want := range tt.wantIs {
					if !errors.Is(err, want) {
						t.Errorf("WithLock: got %v, want it to match %v", err, want)
					}
				}
				if got := len(f.log("release")); got != tt.wantReleases {
					t.Errorf("releases sent: got %d, want %d", got, tt.wantReleases)
				}
				if tt.wantReleases > 0 && tt.wantIs == nil {
					if _, _, held := f.holder("r"); held {
						t.Error("the lock is still held after WithLock")
					}
				}
			})
		})
	}
}

// TestWithLockPanic: a panicking fn still releases the lease.
func TestWithLockPanic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		c := newFakeClient(t, f)
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("recovered %v, want the fn's panic", r)
				}
			}()
			_ = c.WithLock(context.Background(), "r", func(context.Context, *client.Lease) error { panic("boom") })
		}()
		if _, _, held := f.holder("r"); held {
			t.Error("the lock is still held after fn panicked")
		}
	})
}
