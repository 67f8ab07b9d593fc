package goclient_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// TestListAndForceRelease: List pages through the leases under a prefix,
// ListAll follows the cursor to the end, and ForceRelease ends a lease
// whoever holds it: its holder's lease is lost at its next renewal, the
// next grant has a larger token, a second force release is ErrNotFound.
func TestListAndForceRelease(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	ctx := context.Background()
	prefix := resourceName(t) + ":"
	var want []string
	var victim *client.Lease
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		l := acquire(t, c, prefix+n, "", 6*time.Second) // kept alive through a stall of seconds
		want = append(want, l.Resource())
		if n == "c" {
			victim = l
		}
	}

	var paged []string
	opt := client.ListOptions{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("the listing does not end")
		}
		page, err := c.List(ctx, prefix, opt)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Locks) > 2 {
			t.Fatalf("got %d locks, want at most 2", len(page.Locks))
		}
		for _, l := range page.Locks {
			paged = append(paged, l.Resource)
		}
		if page.Cursor == "" {
			break
		}
		opt.Cursor = page.Cursor
	}
	all, err := c.ListAll(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range all {
		names = append(names, l.Resource)
		if l.Resource == victim.Resource() && (l.Owner != victim.Owner() || l.FencingToken != victim.FencingToken()) {
			t.Errorf("listed %+v, want the victim's owner and token", l)
		}
	}
	slices.Sort(paged)
	slices.Sort(names)
	if !slices.Equal(paged, want) || !slices.Equal(names, want) {
		t.Errorf("got pages %v and ListAll %v, want %v", paged, names, want)
	}

	ended, err := c.ForceRelease(ctx, victim.Resource(), "test: holder is gone")
	if err != nil {
		t.Fatal(err)
	}
	if ended.Owner != victim.Owner() || ended.FencingToken != victim.FencingToken() {
		t.Errorf("ended %+v, want the victim's lease", ended)
	}
	waitDone(t, victim, 10*time.Second) // its next renewal, 2 s after the grant, is refused
	if err := victim.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrNotFound) {
		t.Errorf("victim's lease: got %v, want lost with ErrNotFound", err)
	}
	next := acquire(t, c, victim.Resource(), "", 3*time.Second)
	if next.FencingToken() <= ended.FencingToken {
		t.Errorf("got token %d after the force release, want more than %d", next.FencingToken(), ended.FencingToken)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, victim.Resource(), "again"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("force release of a free lock: got %v, want ErrNotFound", err)
	}
}
