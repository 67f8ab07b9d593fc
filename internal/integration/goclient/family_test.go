package goclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// TestFromEnvDefaults: a client from LOCKS_ENDPOINT, and a ttl of 0, which
// the service grants as DefaultTTL. Not parallel: it sets the environment.
func TestFromEnvDefaults(t *testing.T) {
	srv := testenv.Start(t, testenv.Options{})
	t.Setenv("LOCKS_ENDPOINT", srv.URL)
	t.Setenv("LOCKS_SIGV4", "")
	c, err := client.FromEnv(client.WithoutKeepAlive())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, resourceName(t), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	lock, err := c.Status(ctx, l.Resource())
	if err != nil {
		t.Fatal(err)
	}
	if got := lock.ExpiresAt.Sub(lock.AcquiredAt); got != client.DefaultTTL {
		t.Errorf("the service's lease lasts %s, want DefaultTTL %s", got, client.DefaultTTL)
	}
}

// TestAcquireWaitBoundLocal: WithWait bounds Acquire's wait at the real
// service; the error is a *HeldError, not the context's.
func TestAcquireWaitBoundLocal(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	res := resourceName(t)
	acquire(t, c, res, "holder", time.Minute)
	start := time.Now()
	_, err := c.Acquire(context.Background(), res, "", 0, client.WithWait(2*time.Second))
	took := time.Since(start)
	var held *client.HeldError
	if !errors.As(err, &held) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: got %v, want a *HeldError that is not context.DeadlineExceeded", err)
	}
	if took < 2*time.Second || took > 5*time.Second {
		t.Errorf("Acquire gave up after %s, want about WithWait's 2s", took)
	}
}

// TestWithLockLocal runs WithLock against the real service: the lease is
// held while fn runs and released after; a held lock with WithWait(0)
// does not call fn; a force release ends fn's context and is reported.
func TestWithLockLocal(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	ctx := context.Background()

	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		res := resourceName(t)
		err := c.WithLock(ctx, res, func(ctx context.Context, l *client.Lease) error {
			lock, err := c.Status(ctx, res)
			if err != nil || lock.FencingToken != l.FencingToken() || lock.Owner != l.Owner() {
				t.Errorf("status inside fn: got %+v, %v; want the lease %d of %s", lock, err, l.FencingToken(), l.Owner())
			}
			return nil
		})
		if err != nil {
			t.Fatalf("WithLock: %v", err)
		}
		if _, err := c.Status(ctx, res); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("status after WithLock: got %v, want ErrNotFound (released)", err)
		}
	})

	t.Run("HeldTriesOnce", func(t *testing.T) {
		t.Parallel()
		res := resourceName(t)
		acquire(t, c, res, "holder", time.Minute)
		called := false
		err := c.WithLock(ctx, res, func(context.Context, *client.Lease) error { called = true; return nil }, client.WithWait(0))
		if !errors.Is(err, client.ErrHeld) || called {
			t.Errorf("WithLock on a held lock: got %v, fn called %t; want ErrHeld without calling fn", err, called)
		}
	})

	t.Run("ForceReleased", func(t *testing.T) {
		t.Parallel()
		res := resourceName(t)
		err := c.WithLock(ctx, res, func(ctx context.Context, l *client.Lease) error {
			if _, err := c.ForceRelease(ctx, res, "test: holder is gone", client.ForceReleaseOptions{Immediate: true}); err != nil {
				return err
			}
			select { // the next renewal, 2 s after the grant, is refused
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * time.Second):
				return errors.New("fn's context still live 10s after a force release")
			}
		}, client.WithTTL(6*time.Second)) // not lost first by a renewal a loaded machine stalled
		var lost *client.LeaseLostError
		if !errors.As(err, &lost) || !lost.ForceReleased {
			t.Errorf("WithLock: got %v, want a *LeaseLostError saying an operator force released the lease", err)
		}
	})
}
