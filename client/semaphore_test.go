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

// newSemClient returns a client of f (semaphores) and, for the lock
// routes, of locks when not nil, with fast retries and opts.
func newSemClient(tb testing.TB, f *fakeSem, locks *fakeAPI, opts ...client.Option) *client.Client {
	tb.Helper()
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if locks != nil && strings.HasPrefix(r.URL.Path, "/locks/") {
			return locks.RoundTrip(r)
		}
		return f.RoundTrip(r)
	})
	opts = append([]client.Option{
		client.WithHTTPClient(&http.Client{Transport: rt}),
		client.WithBackoff(10*time.Millisecond, 200*time.Millisecond),
	}, opts...)
	c, err := client.New("http://lock.test", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestSemaphoreFullAndMismatch: N permits go to N owners in distinct slots
// with increasing tokens; the next is a *FullError (ErrFull and ErrHeld,
// with FreeAt); another N is ErrPermitsMismatch with the semaphore's N,
// and not "full".
func TestSemaphoreFullAndMismatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSem()
		c := newSemClient(t, f, nil, client.WithoutKeepAlive())
		ctx := context.Background()
		var last int64
		slots := map[int]bool{}
		for _, owner := range []string{"a", "b"} {
			p, err := c.TryAcquireSemaphore(ctx, "exports", 2, owner, 10*time.Second)
			if err != nil {
				t.Fatalf("TryAcquireSemaphore(%s): %v", owner, err)
			}
			if p.FencingToken() <= last || slots[p.Slot()] || p.Permits() != 2 || p.Name() != "exports" || p.Owner() != owner {
				t.Errorf("permit %+v (slot %d, N %d): want a new slot and a larger token than %d", p.Info(), p.Slot(), p.Permits(), last)
			}
			if p.Info().Slot != p.Slot() || p.Lock().Resource != "exports" {
				t.Errorf("Info %+v / Lock %+v: want the permit's slot and name", p.Info(), p.Lock())
			}
			last, slots[p.Slot()] = p.FencingToken(), true
		}
		_, err := c.TryAcquireSemaphore(ctx, "exports", 2, "c", 10*time.Second)
		var full *client.FullError
		if !errors.As(err, &full) || !errors.Is(err, client.ErrFull) || !errors.Is(err, client.ErrHeld) ||
			errors.Is(err, client.ErrPermitsMismatch) || full.FreeAt.IsZero() || full.Name != "exports" {
			t.Errorf("third acquire: got %v, want a *FullError with FreeAt matching ErrFull and ErrHeld", err)
		}
		_, err = c.TryAcquireSemaphore(ctx, "exports", 3, "c", 10*time.Second)
		var p *client.ProblemError
		if !errors.Is(err, client.ErrPermitsMismatch) || errors.Is(err, client.ErrFull) || errors.Is(err, client.ErrHeld) ||
			!errors.As(err, &p) || p.Permits != 2 {
			t.Errorf("acquire with 3 permits: got %v, want ErrPermitsMismatch naming 2 permits", err)
		}
		if _, err := c.TryAcquireSemaphore(ctx, "exports", 0, "c", 0); !errors.Is(err, client.ErrValidation) {
			t.Errorf("0 permits: got %v, want ErrValidation before sending", err)
		}
		if n := len(f.log("acquire")); n != 4 {
			t.Errorf("acquires sent: %d, want 4 (none for 0 permits)", n)
		}
	})
}

// TestPermitKeepAliveRenewRelease: a permit renews itself by slot and token
// while held, a renewal by hand too, and Release ends it by slot and token.
func TestPermitKeepAliveRenewRelease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSem()
		c := newSemClient(t, f, nil)
		ctx := context.Background()
		other, err := c.TryAcquireSemaphore(ctx, "s", 2, "other", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(ctx)
		p, err := c.TryAcquireSemaphore(ctx, "s", 2, "", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if err := p.Err(); err != nil {
			t.Fatalf("permit lost after 10s of keep-alive: %v", err)
		}
		var renewals []semCall
		for _, r := range f.log("renew") {
			if r.Owner == p.Owner() {
				renewals = append(renewals, r)
			}
		}
		if len(renewals) < 9 {
			t.Errorf("renewals in 10s of a 3s permit: %d, want one a second", len(renewals))
		}
		for _, r := range renewals {
			if r.Slot != p.Slot() || r.Token != p.FencingToken() || r.Owner != p.Owner() || r.TTL != 3*time.Second {
				t.Fatalf("renewal %+v: want slot %d, token %d, owner %s, ttl 3s", r, p.Slot(), p.FencingToken(), p.Owner())
			}
		}
		if err := p.Renew(ctx); err != nil || p.Info().ExpiresAt.Before(time.Now().Add(2*time.Second)) {
			t.Errorf("Renew: %v, info %+v", err, p.Info())
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		rel := f.log("release")
		if len(rel) != 1 || rel[0].Slot != p.Slot() || rel[0].Token != p.FencingToken() {
			t.Errorf("releases %+v: want one with slot %d and token %d", rel, p.Slot(), p.FencingToken())
		}
		if got := f.live("s"); len(got) != 1 || got[1-p.Slot()] != "other" {
			t.Errorf("live permits after release: %v, want only other's", got)
		}
		if !errors.Is(p.Err(), client.ErrReleased) {
			t.Errorf("Err after Release: %v", p.Err())
		}
		if err := c.ReleasePermit(ctx, "s", "other", 7, 0); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("ReleasePermit of an empty slot: %v, want ErrNotFound", err)
		}
	})
}

// TestPermitLost: a force released permit's context ends with a
// *LeaseLostError that names the slot and says so.
func TestPermitLost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSem()
		c := newSemClient(t, f, nil)
		p, err := c.TryAcquireSemaphore(context.Background(), "s", 3, "", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		f.forceRelease("s", p.Slot())
		<-p.Done()
		var lost *client.LeaseLostError
		if !errors.As(context.Cause(p.Context()), &lost) || !lost.Permit || lost.Slot != p.Slot() || !lost.ForceReleased ||
			!strings.Contains(lost.Error(), "permit in slot") {
			t.Errorf("cause: %v, want a *LeaseLostError of the permit's slot, force released", context.Cause(p.Context()))
		}
	})
}

// TestAcquireSemaphoreWaitsInRounds: a full semaphore is found full by a
// try, then waited for at the service, round after round, each sending
// back the last round's queue ticket, and granted when a holder releases.
func TestAcquireSemaphoreWaitsInRounds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSem()
		c := newSemClient(t, f, nil)
		ctx := context.Background()
		holder, err := c.TryAcquireSemaphore(ctx, "s", 1, "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(45 * time.Second)
			_ = holder.Release(ctx)
		}()
		start := time.Now()
		p, err := c.AcquireSemaphore(ctx, "s", 1, "", time.Minute, client.WithWait(time.Minute))
		if err != nil {
			t.Fatalf("AcquireSemaphore: %v", err)
		}
		defer p.Release(ctx)
		if took := time.Since(start); took < 45*time.Second || took > 46*time.Second {
			t.Errorf("granted after %s, want right after the release at 45s", took)
		}
		var rounds []semCall
		for _, a := range f.log("acquire") {
			if a.Owner == p.Owner() {
				rounds = append(rounds, a)
			}
		}
		if len(rounds) != 4 || rounds[0].Route != "try" || rounds[0].Wait != 0 || rounds[0].Ticket != "" {
			t.Fatalf("acquires: %d (%v), want a try, then 3 rounds of 20s", len(rounds), rounds)
		}
		for i, r := range rounds[1:] {
			if r.Route != "wait" {
				t.Errorf("round %d: route %q, want wait", i, r.Route)
			}
			if r.Wait != 20*time.Second || r.Permits != 1 {
				t.Errorf("round %d: wait %s, permits %d; want 20s and 1", i, r.Wait, r.Permits)
			}
			if want := map[bool]string{true: "", false: "st1"}[i == 0]; r.Ticket != want {
				t.Errorf("round %d: ticket %q, want %q (the first round's, sent back)", i, r.Ticket, want)
			}
		}
	})
}

// TestAcquireSemaphoreFullAfterWait: when the wait runs out the error is a
// *FullError, and a ctx ended mid-round leaves a late grant released with
// its slot and token.
func TestAcquireSemaphoreFullAfterWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSem()
		c := newSemClient(t, f, nil)
		bg := context.Background()
		holder, err := c.TryAcquireSemaphore(bg, "s", 1, "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.AcquireSemaphore(bg, "s", 1, "", time.Minute, client.WithWait(5*time.Second))
		if !errors.Is(err, client.ErrFull) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AcquireSemaphore after 5s: %v, want ErrFull", err)
		}

		// The holder releases at 3s, in the middle of a round the caller
		// gave up at 2s: the grant that round brings is released.
		go func() {
			time.Sleep(3 * time.Second)
			_ = holder.Release(bg)
		}()
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(2*time.Second, cancel)
		if _, err := c.AcquireSemaphore(ctx, "s", 1, "", time.Minute, client.WithoutWaitLimit()); !errors.Is(err, context.Canceled) {
			t.Errorf("AcquireSemaphore cancelled at 2s: %v, want context.Canceled", err)
		}
		if err := c.Drain(bg); err != nil {
			t.Fatal(err)
		}
		if live := f.live("s"); len(live) != 0 {
			t.Errorf("live permits after Drain: %v, want the late grant released", live)
		}
		rel := f.log("release")
		if last := rel[len(rel)-1]; last.Token == 0 || last.Owner == "holder" {
			t.Errorf("last release %+v: want the late grant's, with its token", last)
		}
	})
}

// TestAcquireSemaphorePollsUntilServed: a service that refuses wait_seconds
// for permits (422) makes semaphore acquires poll from then on, while lock
// acquires still wait at the service (after their try found the lock
// held).
func TestAcquireSemaphorePollsUntilServed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f, locks := newFakeSem(), newFakeAPI()
		f.refuseWait = true
		c := newSemClient(t, f, locks)
		bg := context.Background()
		holder, err := c.TryAcquireSemaphore(bg, "s", 1, "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(3 * time.Second)
			_ = holder.Release(bg)
		}()
		locks.serve(call{Op: "acquire", Resource: "lock", Owner: "holder", TTL: time.Minute})
		time.AfterFunc(5*time.Second, func() { locks.serve(call{Op: "release", Resource: "lock", Owner: "holder"}) })
		p, err := c.AcquireSemaphore(bg, "s", 1, "", time.Minute)
		if err != nil {
			t.Fatalf("AcquireSemaphore: %v", err)
		}
		defer p.Release(bg)
		var waited, polled int
		for _, a := range f.log("acquire") {
			if a.Owner != p.Owner() {
				continue
			}
			if a.Wait > 0 {
				waited++
			} else {
				polled++
			}
		}
		if waited != 1 || polled < 3 {
			t.Errorf("acquires: %d with wait_seconds, %d without; want 1 (refused), then polls", waited, polled)
		}
		lease, err := c.Acquire(bg, "lock", "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(bg)
		if got := locks.log("acquire"); len(got) != 2 || got[0].Route != "try" || got[1].Route != "wait" || got[1].Wait == 0 {
			t.Errorf("lock acquire %v: want a try, then one round still waiting at the service", got)
		}
	})
}

// TestWithSemaphore: fn runs under a permit, which is released after; a
// loss ends fn's ctx and is reported.
func TestWithSemaphore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSem()
		c := newSemClient(t, f, nil)
		ctx := context.Background()
		err := c.WithSemaphore(ctx, "s", 2, func(ctx context.Context, p *client.Permit) error {
			if got := f.live("s"); got[p.Slot()] != p.Owner() {
				t.Errorf("live inside fn: %v, want slot %d held by %s", got, p.Slot(), p.Owner())
			}
			return nil
		}, client.WithTTL(5*time.Second))
		if err != nil || len(f.live("s")) != 0 {
			t.Errorf("WithSemaphore: %v, live after: %v", err, f.live("s"))
		}
		err = c.WithSemaphore(ctx, "s", 2, func(ctx context.Context, p *client.Permit) error {
			f.forceRelease("s", p.Slot())
			<-ctx.Done()
			return context.Cause(ctx)
		}, client.WithTTL(3*time.Second))
		var lost *client.LeaseLostError
		if !errors.As(err, &lost) || !lost.Permit {
			t.Errorf("WithSemaphore with a force release: %v, want a *LeaseLostError of the permit", err)
		}
	})
}

// TestSemaphoreStatusWatchAdmin: status, watch, the admin listing and force
// release decode the service's answers.
func TestSemaphoreStatusWatchAdmin(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSem()
		c := newSemClient(t, f, nil, client.WithoutKeepAlive())
		ctx := context.Background()
		st, err := c.SemaphoreStatus(ctx, "s")
		if err != nil || st.Permits != 0 || len(st.Holders) != 0 || st.Holders == nil {
			t.Fatalf("status of a new semaphore: %+v, %v", st, err)
		}
		w, err := c.WatchSemaphore(ctx, "s", 0, 0)
		if err != nil || w.Index != 0 {
			t.Fatalf("watch: %+v, %v", w, err)
		}
		p, err := c.TryAcquireSemaphore(ctx, "s", 2, "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		w, err = c.WatchSemaphore(ctx, "s", w.Index, 5*time.Second)
		if err != nil || !w.Changed || w.FencingToken != p.FencingToken() || len(w.Holders) != 1 || w.Permits != 2 {
			t.Errorf("watch after a grant: %+v, %v", w, err)
		}
		st, err = c.SemaphoreStatus(ctx, "s")
		if err != nil || st.Permits != 2 || len(st.Holders) != 1 || st.Holders[0].Slot != p.Slot() {
			t.Errorf("status: %+v, %v", st, err)
		}
		all, err := c.ListAllSemaphores(ctx, "")
		if err != nil || len(all) != 1 || all[0].Permits != 2 || all[0].FencingToken != p.FencingToken() {
			t.Errorf("ListAllSemaphores: %+v, %v", all, err)
		}
		_, err = c.ForceReleasePermit(ctx, "s", p.Slot(), "test", client.ForceReleaseOptions{FencingToken: p.FencingToken() + 1})
		var pe *client.ProblemError
		if !errors.Is(err, client.ErrStaleToken) || !errors.As(err, &pe) || pe.CurrentPermit == nil ||
			pe.CurrentPermit.FencingToken != p.FencingToken() || pe.Current != nil {
			t.Errorf("ForceReleasePermit with another token: %v, want ErrStaleToken with CurrentPermit", err)
		}
		ended, err := c.ForceReleasePermit(ctx, "s", p.Slot(), "test")
		if err != nil || ended.FencingToken != p.FencingToken() || ended.Slot != p.Slot() || ended.Reason != "test" {
			t.Errorf("ForceReleasePermit: %+v, %v", ended, err)
		}
		if got := f.log("force"); got[len(got)-1].Slot != p.Slot() {
			t.Errorf("force release sent %+v, want slot %d", got, p.Slot())
		}
	})
}
