package goclient_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// TestSetKeepAliveAndLoss: a set of 1 s leases is renewed with one call per
// renewal and outlives its TTL; an operator's force release of one name
// loses that lease at the next renewal, and with it the set (its Context
// ends, Check reports the loss); Release then ends the other name and
// reports the lost one.
func TestSetKeepAliveAndLoss(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	ctx := testContext(t, 30*time.Second)
	p := t.Name() + time.Now().Format(".150405.000000")
	// A 6 s set, renewed every 2 s: a machine that stalls the keep-alive
	// for seconds does not lose it.
	const ttl = 6 * time.Second
	set, err := c.TryAcquireSet(ctx, []string{p + ":b", p + ":a"}, "w1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Leases()[0].Resource(); got != p+":a" {
		t.Errorf("first lease: got %q, want %q (name order)", got, p+":a")
	}
	// Two renewals move both leases' expiries, past the first TTL.
	first := set.Leases()[1].ExpiresAt()
	for set.Leases()[1].ExpiresAt().Sub(first) < ttl {
		select {
		case <-set.Context().Done():
			t.Fatalf("set lost while renewing: %v", set.Check())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := set.Check(); err != nil {
		t.Fatalf("after renewals past the TTL: %v", err)
	}
	if _, err := c.ForceRelease(ctx, p+":b", "test", client.ForceReleaseOptions{Immediate: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-set.Context().Done():
	case <-ctx.Done():
		t.Fatal("the set was not lost after a force release of one name")
	}
	if err := set.Check(); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Check: got %v, want ErrLeaseLost", err)
	}
	var serr *client.SetError
	if err := set.Release(ctx); !errors.As(err, &serr) || serr.Failed[p+":b"] == nil || len(serr.Failed) != 1 {
		t.Errorf("Release: got %v, want a SetError naming %s only", err, p+":b")
	}
	if _, err := c.Status(ctx, p+":a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("%s after Release: got %v, want ErrNotFound", p+":a", err)
	}
}

// TestSetHeld: a set refused by a held name is a *SetHeldError matching
// ErrHeld that names it, and holds nothing.
func TestSetHeld(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	ctx := testContext(t, 30*time.Second)
	p := t.Name() + time.Now().Format(".150405.000000")
	lease, err := c.TryAcquire(ctx, p+":b", "w2", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	_, err = c.TryAcquireSet(ctx, []string{p + ":a", p + ":b"}, "w1", 10*time.Second)
	var held *client.SetHeldError
	if !errors.Is(err, client.ErrHeld) || !errors.As(err, &held) || held.BlockedBy != p+":b" {
		t.Fatalf("got %v, want a SetHeldError on %s", err, p+":b")
	}
	if _, err := c.Status(ctx, p+":a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("%s after the refused set: got %v, want ErrNotFound", p+":a", err)
	}
}
