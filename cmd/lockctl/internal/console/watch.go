package console

import (
	"context"
	"sync"
	"time"

	"github.com/ft288/locks/client"
)

// maxEvents bounds the events a watch keeps for the tabs that open its
// detail view later.
const maxEvents = 500

// holder is a lease as the watch stream shows it.
type holder struct {
	Slot         *int      `json:"slot,omitempty"`
	Owner        string    `json:"owner"`
	FencingToken int64     `json:"fencing_token"`
	AcquiredAt   time.Time `json:"acquired_at"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// event is one answer of the watch that changed the state, or its failure.
type event struct {
	Seq          int64     `json:"seq"`
	At           time.Time `json:"at"`
	Index        int64     `json:"index"`
	FencingToken int64     `json:"fencing_token"`
	Permits      int       `json:"permits,omitempty"`
	// Holders are the live leases: at most one for a lock.
	Holders []holder `json:"holders"`
	// Skipped counts the leases that began and ended unseen since the
	// event before.
	Skipped int      `json:"skipped"`
	Problem *problem `json:"problem,omitempty"`
}

// watchKey names a watched lock or semaphore.
type watchKey struct{ kind, name string }

// watch follows one name for the tabs whose detail view shows it, and
// stops once no tab has polled it for linger.
type watch struct {
	id     int64
	cancel context.CancelFunc
	// polledAt is the latest poll of a tab showing the name; guarded by
	// watches.mu.
	polledAt time.Time

	mu     sync.Mutex
	events []event
	seq    int64
}

// watches are the server's watches by name.
type watches struct {
	c      *client.Client
	linger time.Duration
	// base is the Server's context: a watch outlives the poll that
	// started it while tabs poll its name, not the Server.
	base context.Context
	mu   sync.Mutex
	m    map[watchKey]*watch
	// started counts the watches started (and numbers them).
	started int64
}

// polled records a tab's poll of key, starting its watch if none runs, and
// returns the watch. The watch runs on until no tab has polled key for
// linger.
func (ws *watches) polled(key watchKey) *watch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[key]
	if w == nil {
		wctx, cancel := context.WithCancel(ws.base)
		ws.started++
		w = &watch{id: ws.started, cancel: cancel}
		ws.m[key] = w
		if key.kind == kindSemaphores {
			go w.followSemaphore(wctx, ws.c, key.name)
		} else {
			go w.followLock(wctx, ws.c, key.name)
		}
		go ws.expire(wctx, key, w)
	}
	w.polledAt = time.Now()
	return w
}

// expire stops w, and forgets it, once no tab has polled it for linger
// (or when ctx ends).
func (ws *watches) expire(ctx context.Context, key watchKey, w *watch) {
	t := time.NewTimer(ws.linger)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-t.C:
			ws.mu.Lock()
			left := ws.linger - time.Since(w.polledAt)
			ws.mu.Unlock()
			if left > 0 {
				t.Reset(left)
				continue
			}
		}
		ws.mu.Lock()
		w.cancel()
		if ws.m[key] == w {
			delete(ws.m, key)
		}
		ws.mu.Unlock()
		return
	}
}

// since returns the events after seq.
func (w *watch) since(seq int64) []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := []event{}
	for _, e := range w.events {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}

// add appends e to the stream.
func (w *watch) add(e event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	e.Seq, e.At = w.seq, time.Now()
	if e.Holders == nil {
		e.Holders = []holder{}
	}
	w.events = append(w.events, e)
	if len(w.events) > maxEvents {
		w.events = w.events[len(w.events)-maxEvents:]
	}
}

// followLock streams the lock's changes: a first look, so that a refusal
// (a wrong name, no permission) shows, then Election.Observe, which counts
// the skipped leases.
func (w *watch) followLock(ctx context.Context, c *client.Client, name string) {
	if _, err := c.Watch(ctx, name, 0, 0); err != nil {
		if ctx.Err() == nil {
			w.add(event{Problem: toProblem(err)})
		}
		return
	}
	for o := range client.NewElection(c, name).Observe(ctx) {
		e := event{Index: o.Index, FencingToken: o.Index / 2, Skipped: o.Skipped}
		if l := o.Leader; l != nil {
			e.Holders = []holder{{Owner: l.Owner, FencingToken: l.FencingToken, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}}
		}
		w.add(e)
	}
}

// followSemaphore streams the semaphore's changes. A permit granted and
// ended between two answers is counted as skipped: a token issued since the
// previous answer that no live permit carries.
func (w *watch) followSemaphore(ctx context.Context, c *client.Client, name string) {
	var (
		index, token int64
		first        = true
		failures     int
	)
	for {
		wait := client.MaxServerWait
		if first {
			wait = 0
		}
		r, err := c.WatchSemaphore(ctx, name, index, wait)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.add(event{Index: index, Problem: toProblem(err)})
			if first {
				return
			}
			failures++
			if !sleep(ctx, min(time.Duration(failures)*time.Second, 20*time.Second)) {
				return
			}
			continue
		}
		failures = 0
		if !first && !r.Changed {
			continue
		}
		e := event{Index: r.Index, FencingToken: r.FencingToken, Permits: r.Permits}
		seen := 0
		for _, p := range r.Holders {
			slot := p.Slot
			e.Holders = append(e.Holders, holder{Slot: &slot, Owner: p.Owner, FencingToken: p.FencingToken, AcquiredAt: p.AcquiredAt, ExpiresAt: p.ExpiresAt})
			if p.FencingToken > token {
				seen++
			}
		}
		if !first && r.FencingToken > token {
			e.Skipped = int(r.FencingToken-token) - seen
		}
		w.add(e)
		index, token, first = r.Index, r.FencingToken, false
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
