//go:build unix

package console

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// TestRWLocksListing: a tab on view=rwlocks gets the read/write locks of
// /admin/rwlocks from the local runner: a lock's readers with their slots
// and its queued writer (kind and owner); the lock leaves the listing once
// its leases are released and its waiter gone.
func TestRWLocksListing(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("console-rw-%d", time.Now().UnixNano())
	r1, err := c.TryAcquireRead(ctx, name, "r1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.TryAcquireRead(ctx, name, "r2", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *client.RWLease
		err error
	}
	wctx, stopWriter := context.WithTimeout(ctx, time.Minute)
	defer stopWriter()
	writer := make(chan result, 1)
	go func() {
		l, err := c.AcquireWrite(wctx, name, "w1", 30*time.Second)
		writer <- result{l, err}
	}()

	s := startConsole(t, srv.URL, 50*time.Millisecond, time.Second)
	tab := openStream(t, s, session(t, s), "view=rwlocks")
	var got client.AdminRWLock
	for found := false; !found; {
		var snap snapshot
		if err := json.Unmarshal([]byte(tab.next(t, "listing").data), &snap); err != nil {
			t.Fatal(err)
		}
		if snap.Kind != kindRWLocks || snap.Problem != nil {
			t.Fatalf("listing: kind %q, problem %+v; want rwlocks without a problem", snap.Kind, snap.Problem)
		}
		for _, l := range snap.RWLocks {
			if l.Name == name && len(l.Queue) > 0 { // the writer has queued
				got, found = l, true
			}
		}
	}
	slots := map[string]int{}
	for _, r := range got.Readers {
		slots[r.Owner] = r.Slot
	}
	if got.Writer != nil || len(got.Readers) != 2 || slots["r1"] != r1.Slot() || slots["r2"] != r2.Slot() {
		t.Errorf("listed %+v, want no writer and readers r1 in slot %d, r2 in slot %d", got, r1.Slot(), r2.Slot())
	}
	if len(got.Queue) != 1 || got.Queue[0].Mode != client.WriteMode || got.Queue[0].Owner != "w1" {
		t.Errorf("queue %+v, want the writer w1", got.Queue)
	}
	if got.FencingToken != r2.FencingToken() {
		t.Errorf("fencing token %d, want the latest grant's %d", got.FencingToken, r2.FencingToken())
	}

	// The readers leave: the writer is granted, and the listing shows it.
	for _, r := range []*client.RWLease{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for found := false; !found; {
		var snap snapshot
		if err := json.Unmarshal([]byte(tab.next(t, "listing").data), &snap); err != nil {
			t.Fatal(err)
		}
		for _, l := range snap.RWLocks {
			if l.Name == name && l.Writer != nil {
				if l.Writer.Owner != "w1" || len(l.Readers) != 0 || len(l.Queue) != 0 {
					t.Errorf("after the readers left: %+v, want w1 the writer alone", l)
				}
				found = true
			}
		}
	}
	w := <-writer
	if w.err != nil {
		t.Fatalf("AcquireWrite: %v", w.err)
	}
	if err := w.l.Release(ctx); err != nil {
		t.Error(err)
	}
}
