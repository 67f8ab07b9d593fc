package goclient_test

import (
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// TestResignAfterForceRelease (found by review): Election.Resign is a no-op
// when the Election does not lead, also when its leadership was force
// released or taken over, as in the TypeScript and Python clients.
func TestResignAfterForceRelease(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	ctx := testContext(t, 30*time.Second)
	name := resourceName(t)
	e := client.NewElection(c, name)
	lease, err := e.Campaign(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, name, "review"); err != nil {
		t.Fatal(err)
	}
	// The leader learns of it at its next renewal, or at once by hand.
	_ = lease.Renew(ctx)
	if lease.Err() == nil {
		t.Fatal("the lease is still held after a force release")
	}
	if err := e.Resign(ctx); err != nil {
		t.Errorf("Resign of a deposed leader: got %v, want nil (no-op: it does not lead)", err)
	}
}
