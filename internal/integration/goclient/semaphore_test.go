package goclient_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// TestSemaphoreLocal runs the client's semaphore API against the real
// service: WithSemaphore from six goroutines never has more than N permits
// at once (and has N), every permit a token of its own; full and another N
// are told apart; a permit keeps itself alive by slot, renews and releases
// by slot; a force release ends its context.
func TestSemaphoreLocal(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	ctx := context.Background()

	t.Run("AtMostN", func(t *testing.T) {
		t.Parallel()
		name := resourceName(t)
		const permits = 2
		var running, most atomic.Int32
		var mu sync.Mutex
		tokens := map[int64]bool{}
		// N reached is an event, not a race against the clock: the first
		// holder keeps its permit until a second one is held too (with a
		// fixed hold, grants 200 ms or more apart, as on a loaded machine,
		// never overlapped). Every holder then holds 200 ms, the window in
		// which a third grant would show.
		pair := make(chan struct{})
		var pairOnce sync.Once
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				err := c.WithSemaphore(ctx, name, permits, func(ctx context.Context, p *client.Permit) error {
					n := running.Add(1)
					defer running.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if n == permits {
						pairOnce.Do(func() { close(pair) })
					}
					mu.Lock()
					tokens[p.FencingToken()] = true
					mu.Unlock()
					select {
					case <-pair:
					case <-ctx.Done(): // the permit lost: reported below
					case <-time.After(20 * time.Second): // no second holder: most stays 1, reported below
					}
					time.Sleep(200 * time.Millisecond)
					return ctx.Err()
				}, client.WithTTL(5*time.Second), client.WithWait(20*time.Second))
				if err != nil {
					t.Errorf("WithSemaphore: %v", err)
				}
			})
		}
		wg.Wait()
		if most.Load() != permits || len(tokens) != 6 {
			t.Errorf("at most %d at once, %d distinct tokens; want %d and 6", most.Load(), len(tokens), permits)
		}
	})

	t.Run("FullAndMismatch", func(t *testing.T) {
		t.Parallel()
		name := resourceName(t)
		for _, owner := range []string{"a", "b"} {
			p, err := c.TryAcquireSemaphore(ctx, name, 2, owner, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Release(context.Background()) })
		}
		_, err := c.TryAcquireSemaphore(ctx, name, 2, "c", time.Minute)
		var full *client.FullError
		if !errors.As(err, &full) || errors.Is(err, client.ErrPermitsMismatch) {
			t.Errorf("full: got %v, want a *FullError", err)
		}
		_, err = c.TryAcquireSemaphore(ctx, name, 5, "c", time.Minute)
		var p *client.ProblemError
		if !errors.Is(err, client.ErrPermitsMismatch) || errors.Is(err, client.ErrFull) || !errors.As(err, &p) || p.Permits != 2 {
			t.Errorf("another N: got %v, want ErrPermitsMismatch with the semaphore's 2", err)
		}
	})

	t.Run("KeepAliveRenewReleaseBySlot", func(t *testing.T) {
		t.Parallel()
		name := resourceName(t)
		// A 6 s permit, renewed every 2 s: a machine that stalls the
		// keep-alive for seconds does not lose it (a 2 s one was lost).
		const ttl = 6 * time.Second
		p, err := c.TryAcquireSemaphore(ctx, name, 3, "", ttl)
		if err != nil {
			t.Fatal(err)
		}
		// Renewed past the TTL: its expiry moved by a whole TTL.
		first := p.ExpiresAt()
		for deadline := time.Now().Add(20 * time.Second); p.ExpiresAt().Sub(first) < ttl; time.Sleep(50 * time.Millisecond) {
			if p.Err() != nil || time.Now().After(deadline) {
				t.Fatalf("permit not renewed past its TTL within 20s: expiry moved %v; lease: %v", p.ExpiresAt().Sub(first), p.Err())
			}
		}
		st, err := c.SemaphoreStatus(ctx, name)
		if err != nil || p.Err() != nil || len(st.Holders) != 1 || st.Holders[0].Slot != p.Slot() || st.Holders[0].FencingToken != p.FencingToken() {
			t.Fatalf("status after renewals past the TTL: %+v, %v; lease: %v", st, err, p.Err())
		}
		if err := p.Renew(ctx); err != nil {
			t.Errorf("Renew: %v", err)
		}
		if err := c.ReleasePermit(ctx, name, p.Owner(), (p.Slot()+1)%3, 0); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("release of another slot: %v, want ErrNotFound", err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if st, err := c.SemaphoreStatus(ctx, name); err != nil || len(st.Holders) != 0 || st.Permits != 3 {
			t.Errorf("status after release: %+v, %v", st, err)
		}
	})

	t.Run("ForceReleased", func(t *testing.T) {
		t.Parallel()
		name := resourceName(t)
		// Its next renewal, 2 s after the grant, is refused as force
		// released; a 6 s lease is not lost first by a stalled renewal.
		p, err := c.TryAcquireSemaphore(ctx, name, 2, "", 6*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		all, err := c.ListAllSemaphores(ctx, name)
		if err != nil || len(all) != 1 || all[0].Slot != p.Slot() {
			t.Fatalf("ListAllSemaphores: %+v, %v", all, err)
		}
		if _, err := c.ForceReleasePermit(ctx, name, p.Slot(), "test: holder is gone", client.ForceReleaseOptions{Immediate: true}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("permit still held 10s after a force release")
		}
		var lost *client.LeaseLostError
		if !errors.As(p.Err(), &lost) || !lost.ForceReleased || lost.Slot != p.Slot() {
			t.Errorf("Err: %v, want a force released *LeaseLostError of slot %d", p.Err(), p.Slot())
		}
	})
}
