package goclient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// TestRWLocal runs the client's read/write lock calls against the real
// service (the local runner over dynalite).
func TestRWLocal(t *testing.T) {
	t.Parallel()
	c := startClient(t)

	t.Run("ReadersTogetherWriterExcludes", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 30*time.Second)
		name := resourceName(t)
		const readers = 5
		leases := make([]*client.RWLease, readers)
		var wg sync.WaitGroup
		for i := range readers {
			wg.Go(func() {
				l, err := c.AcquireRead(ctx, name, "", 30*time.Second, client.WithWait(10*time.Second))
				if err != nil {
					t.Errorf("reader %d: %v", i, err)
					return
				}
				leases[i] = l
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		slots, tokens := map[int]bool{}, map[int64]bool{}
		for _, l := range leases {
			slots[l.Slot()], tokens[l.FencingToken()] = true, true
			if l.Mode() != client.ReadMode || l.Check() != nil {
				t.Errorf("reader in slot %d: mode %q, Check %v", l.Slot(), l.Mode(), l.Check())
			}
		}
		if len(slots) != readers || len(tokens) != readers {
			t.Errorf("%d readers: %d slots and %d tokens, want %d of each", readers, len(slots), len(tokens), readers)
		}
		st, err := c.RWStatus(ctx, name)
		if err != nil || len(st.Readers) != readers || st.Writer != nil {
			t.Fatalf("status with %d readers: %+v, %v", readers, st, err)
		}
		var held *client.HeldError
		if _, err := c.TryAcquireWrite(ctx, name, "w", 30*time.Second); !errors.As(err, &held) {
			t.Errorf("writer while readers hold: got %v, want a *HeldError", err)
		}
		for _, l := range leases {
			if err := l.Release(ctx); err != nil {
				t.Errorf("release reader %d: %v", l.Slot(), err)
			}
		}
		w, err := c.TryAcquireWrite(ctx, name, "w", 30*time.Second)
		if err != nil {
			t.Fatalf("writer after the readers' release: %v", err)
		}
		defer w.Release(ctx)
		for tok := range tokens {
			if w.FencingToken() <= tok {
				t.Errorf("writer's token %d not above reader's %d", w.FencingToken(), tok)
			}
		}
		if w.Slot() != -1 || w.Mode() != client.WriteMode {
			t.Errorf("writer: slot %d, mode %q; want -1, write", w.Slot(), w.Mode())
		}
		if _, err := c.TryAcquireRead(ctx, name, "r", 30*time.Second); !errors.Is(err, client.ErrHeld) {
			t.Errorf("reader while the writer holds: got %v, want ErrHeld", err)
		}
		if _, err := c.TryAcquireWrite(ctx, name, "w2", 30*time.Second); !errors.Is(err, client.ErrHeld) {
			t.Errorf("second writer: got %v, want ErrHeld", err)
		}
	})

	t.Run("QueuedWriterBlocksLaterReader", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 40*time.Second)
		name := resourceName(t)
		r1, err := c.TryAcquireRead(ctx, name, "r1", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *client.RWLease
			err error
		}
		writer := make(chan result, 1)
		go func() {
			l, err := c.AcquireWrite(ctx, name, "w1", 30*time.Second, client.WithWait(30*time.Second))
			writer <- result{l, err}
		}()
		// The event: the writer's place in the queue.
		for queued := false; !queued; {
			st, err := c.RWStatus(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			queued = len(st.Queue) == 1 && st.Queue[0].Mode == client.WriteMode && st.Queue[0].Owner == "w1"
			if !queued {
				select {
				case <-ctx.Done():
					t.Fatalf("the writer never queued: %+v", st)
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		// A slot is free and no writer holds, but the queued writer keeps
		// the later reader out.
		if _, err := c.TryAcquireRead(ctx, name, "r2", 30*time.Second); !errors.Is(err, client.ErrHeld) {
			t.Errorf("reader behind a queued writer: got %v, want ErrHeld", err)
		}
		if err := r1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-writer
		if w.err != nil {
			t.Fatalf("queued writer: %v", w.err)
		}
		defer w.l.Release(ctx)
		if w.l.FencingToken() <= r1.FencingToken() {
			t.Errorf("writer's token %d not above the earlier reader's %d", w.l.FencingToken(), r1.FencingToken())
		}
	})

	t.Run("KeepAliveAndRelease", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 30*time.Second)
		name := resourceName(t)
		for _, mode := range []client.RWMode{client.ReadMode, client.WriteMode} {
			acquire := c.TryAcquireRead
			if mode == client.WriteMode {
				acquire = c.TryAcquireWrite
			}
			// A 3 s lease: its keep-alive renews every second, and a
			// renewal slowed by a loaded machine (race detector, 2 cores)
			// still lands well inside the local validity (a 1 s lease
			// lost it once in CI).
			l, err := acquire(ctx, name, "", 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// The keep-alive renews past the first expiry (by mode and slot).
			first := l.ExpiresAt()
			for l.ExpiresAt().Sub(first) < time.Second {
				select {
				case <-l.Done():
					t.Fatalf("%s lease lost while renewing: %v", mode, l.Check())
				case <-time.After(50 * time.Millisecond):
				}
			}
			if err := l.Check(); err != nil || l.Info().ExpiresAt != l.ExpiresAt() {
				t.Fatalf("%s lease after renewals past the TTL: %v, info %+v", mode, err, l.Info())
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release %s: %v", mode, err)
			}
			if !errors.Is(l.Check(), client.ErrReleased) {
				t.Errorf("Check after release: %v, want ErrReleased", l.Check())
			}
			st, err := c.RWStatus(ctx, name)
			if err != nil || st.Writer != nil || len(st.Readers) != 0 {
				t.Errorf("status after the %s lease's release: %+v, %v", mode, st, err)
			}
			if err := c.ReleaseRW(ctx, name, l.Owner(), mode, max(l.Slot(), 0), l.FencingToken()); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("second release of the %s lease: got %v, want ErrNotFound", mode, err)
			}
		}
	})

	t.Run("LossByTheClock", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 30*time.Second)
		name := resourceName(t)
		nc := startClient(t, client.WithoutKeepAlive())
		l, err := nc.TryAcquireRead(ctx, name, "", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Check(); err != nil {
			t.Fatalf("Check at the grant: %v", err)
		}
		time.Sleep(time.Until(l.Deadline())) // the event is the clock itself
		var lost *client.LeaseLostError
		if err := l.Check(); !errors.As(err, &lost) || !errors.Is(err, client.ErrLeaseExpired) || lost.Mode != client.ReadMode || lost.Slot != l.Slot() {
			t.Errorf("Check past the local deadline: got %v, want a read LeaseLostError of ErrLeaseExpired", err)
		}
		if l.Context().Err() == nil {
			t.Error("Context not ended past the local deadline")
		}
	})

	t.Run("ScopedHelpers", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 30*time.Second)
		name := resourceName(t)
		var last int64
		for _, with := range []func(context.Context, string, func(context.Context, *client.RWLease) error, ...client.AcquireOption) error{
			c.WithReadLock, c.WithWriteLock, c.WithReadLock,
		} {
			err := with(ctx, name, func(ctx context.Context, l *client.RWLease) error {
				if l.FencingToken() <= last {
					t.Errorf("token %d not above the previous %d", l.FencingToken(), last)
				}
				last = l.FencingToken()
				return l.Check()
			}, client.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
		}
		if st, err := c.RWStatus(ctx, name); err != nil || st.Writer != nil || len(st.Readers) != 0 || st.FencingToken != last {
			t.Errorf("status after the scoped calls: %+v, %v; want none held, token %d", st, err, last)
		}
	})
}
