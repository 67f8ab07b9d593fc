package console

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ft288/locks/client"
)

// Kinds of listing: the page shows one at a time, and the server refreshes
// only the kinds some open page shows.
const (
	kindLocks      = "locks"
	kindSemaphores = "semaphores"
	// kindRWLocks is the read/write locks' listing: one row per lock (its
	// writer, readers and queue), shown but not watched or force released
	// from the page.
	kindRWLocks = "rwlocks"
)

// maxRows bounds the rows of one listing refresh (the page filters and
// pages through them): five full pages of the service's listing.
const maxRows = 5 * 1000

// snapshot is one refresh of a listing, shared by every tab that shows it.
type snapshot struct {
	Kind    string    `json:"kind"`
	Version int64     `json:"version"`
	At      time.Time `json:"at"`
	// Locks, Permits or RWLocks are the rows (one of them, by Kind).
	Locks   []client.AdminLock   `json:"locks,omitempty"`
	Permits []client.AdminPermit `json:"permits,omitempty"`
	RWLocks []client.AdminRWLock `json:"rwlocks,omitempty"`
	// Truncated is set when the listing went on past maxRows.
	Truncated bool `json:"truncated,omitempty"`
	// Problem is the refresh's failure; the rows are then the last good
	// refresh's.
	Problem *problem `json:"problem,omitempty"`
	// NextIn is the time until the next refresh, longer after a 429.
	NextInMillis int64 `json:"next_in_ms"`
}

// lister keeps one listing fresh while some tab shows it: at most one
// refresh per interval (the cap holds across tabs coming and going), the
// interval doubled after each 429 up to maxBackoff (or the answer's
// Retry-After), and none once no tab has polled it for linger.
type lister struct {
	kind       string
	fetch      func(context.Context) (snapshot, error)
	interval   time.Duration
	linger     time.Duration
	maxBackoff time.Duration

	mu       sync.Mutex
	polledAt time.Time // the latest poll of a tab showing the listing
	snap     snapshot
	wake     chan struct{} // signalled by a poll
	requests int64         // refreshes made
}

func newLister(kind string, interval, linger time.Duration, fetch func(context.Context) (snapshot, error)) *lister {
	return &lister{kind: kind, fetch: fetch, interval: interval, linger: linger, maxBackoff: 30 * interval,
		snap: snapshot{Kind: kind}, wake: make(chan struct{}, 1)}
}

// polled records a tab's poll, which keeps the listing refreshed for
// linger, and returns the latest snapshot (version 0: none yet).
func (l *lister) polled() snapshot {
	l.mu.Lock()
	l.polledAt = time.Now()
	snap := l.snap
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return snap
}

// current returns the latest snapshot.
func (l *lister) current() snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap
}

// refreshes returns the number of refreshes made.
func (l *lister) refreshes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.requests
}

// run refreshes the listing until ctx ends.
func (l *lister) run(ctx context.Context) {
	var last time.Time // the latest refresh's start
	interval := l.interval
	for {
		l.mu.Lock()
		idle := time.Since(l.polledAt) > l.linger
		l.mu.Unlock()
		if idle {
			select {
			case <-l.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if d := time.Until(last.Add(interval)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue // the tabs may have left meanwhile
		}
		last = time.Now()
		snap, err := l.fetch(ctx)
		if ctx.Err() != nil {
			return
		}
		next := l.interval
		var pe *client.ProblemError
		if errors.As(err, &pe) {
			switch pe.Status {
			case 429: // throttled: back off, as the answer says if it does
				next = min(max(2*interval, pe.RetryAfter), l.maxBackoff)
			case 401, 403, 404: // not an administrator, or no admin API: it will not change soon
				next = l.maxBackoff
			}
		}
		interval = next
		l.publish(snap, err, interval)
	}
}

// publish makes the refresh's result the current snapshot; a failed
// refresh keeps the previous rows.
func (l *lister) publish(snap snapshot, err error, next time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	if err != nil {
		snap.Locks, snap.Permits, snap.RWLocks, snap.Truncated = l.snap.Locks, l.snap.Permits, l.snap.RWLocks, l.snap.Truncated
		snap.Problem = toProblem(err)
	}
	snap.Kind, snap.Version, snap.At, snap.NextInMillis = l.kind, l.snap.Version+1, time.Now(), next.Milliseconds()
	l.snap = snap
}

// fetchLocks lists every lock under prefix, up to maxRows.
func fetchLocks(c *client.Client, prefix string) func(context.Context) (snapshot, error) {
	return func(ctx context.Context) (snapshot, error) {
		s := snapshot{Locks: []client.AdminLock{}}
		opt := client.ListOptions{Limit: 1000}
		for {
			page, err := c.List(ctx, prefix, opt)
			if err != nil {
				return s, err
			}
			s.Locks = append(s.Locks, page.Locks...)
			if page.Cursor == "" {
				return s, nil
			}
			if len(s.Locks) >= maxRows {
				s.Truncated = true
				return s, nil
			}
			opt.Cursor = page.Cursor
		}
	}
}

// fetchPermits lists every semaphore permit under prefix, up to maxRows.
func fetchPermits(c *client.Client, prefix string) func(context.Context) (snapshot, error) {
	return func(ctx context.Context) (snapshot, error) {
		s := snapshot{Permits: []client.AdminPermit{}}
		opt := client.ListOptions{Limit: 1000}
		for {
			page, err := c.ListSemaphores(ctx, prefix, opt)
			if err != nil {
				return s, err
			}
			s.Permits = append(s.Permits, page.Holders...)
			if page.Cursor == "" {
				return s, nil
			}
			if len(s.Permits) >= maxRows {
				s.Truncated = true
				return s, nil
			}
			opt.Cursor = page.Cursor
		}
	}
}

// fetchRWLocks lists every read/write lock under prefix, up to maxRows
// locks.
func fetchRWLocks(c *client.Client, prefix string) func(context.Context) (snapshot, error) {
	return func(ctx context.Context) (snapshot, error) {
		s := snapshot{RWLocks: []client.AdminRWLock{}}
		opt := client.ListOptions{Limit: 1000}
		for {
			page, err := c.ListRWLocks(ctx, prefix, opt)
			if err != nil {
				return s, err
			}
			s.RWLocks = append(s.RWLocks, page.RWLocks...)
			if page.Cursor == "" {
				return s, nil
			}
			if len(s.RWLocks) >= maxRows {
				s.Truncated = true
				return s, nil
			}
			opt.Cursor = page.Cursor
		}
	}
}
