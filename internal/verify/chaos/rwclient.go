package chaos

import (
	"context"
	"net/url"
	"time"
)

// The read/write lock workload (Config.RWClients): clients that take the
// readers' and the writer's leases of Config.RWLocks locks with owners of
// their own (qk) and nothing else. A client that does not hold a lease of
// the lock it picked wants one in a mode it keeps until granted (the
// writer's with Config.RWWrites), asking by tries or by waiting rounds
// (Config.RWWaits) that come back with their place, as the workers'
// waits do. One that holds one renews it, releases it, reads the status,
// works under it a little, or stalls past it (its lease lapses). Each
// client holds at most one lease of a lock, so its belief about it is a
// lock's (view): from the grant's answer to invoke + ttl - margin, moved
// by renewals, ended by its release.

// rwWant is what a client asks of one read/write lock until granted: the
// mode, and whether it waits at the service.
type rwWant struct {
	mode  string
	waits bool
	// held says it was granted: the client's lease is in this mode.
	held bool
}

// rwClients is the number of read/write lock clients of the run.
func (c *Config) rwClients() int { return max(c.RWClients, 0) }

// rwLocks is the number of read/write locks of the run (none without
// clients).
func (c *Config) rwLocks() int {
	if c.rwClients() == 0 {
		return 0
	}
	return c.RWLocks
}

// rwBase is the index of the first read/write lock client: after the set
// clients.
func (c *Config) rwBase() int { return c.setBase() + c.setClients() }

// runRW runs a read/write lock client until the time is up.
func (c *client) runRW(ctx context.Context, phase Phase, until time.Time) {
	cfg := c.w.cfg
	for ctx.Err() == nil && time.Now().Before(until) {
		name := c.w.rws[c.rng.IntN(len(c.w.rws))]
		v := c.view(name)
		ttl := cfg.TTLs[c.rng.IntN(len(cfg.TTLs))]
		tok := int64(0)
		if c.rng.IntN(2) == 0 {
			tok = v.token
		}
		x := c.rng.Float64()
		if v.live(time.Now()) {
			c.mode, c.slot = c.modeOf(name), int64(v.slot)
			switch {
			case x < cfg.Abandon:
				// A stalled holder: its lease ends by expiry.
				sleepUntil(ctx, v.deadline.Add(time.Duration(c.rng.IntN(100))*time.Millisecond))
				v.held = false
			case x < cfg.Abandon+0.15:
				sleepUntil(ctx, minTime(v.deadline, time.Now().Add(time.Duration(c.rng.IntN(300))*time.Millisecond)))
			case x < 0.5:
				c.call(ctx, phase, RWRenew, name, ttl, tok)
			case x < 0.9:
				c.call(ctx, phase, RWRelease, name, 0, tok)
			default:
				c.call(ctx, phase, RWStatus, name, 0, 0)
			}
		} else {
			want := c.rw[name]
			if want == nil || want.held {
				want = &rwWant{mode: "read", waits: c.rng.Float64() < cfg.RWWaits}
				if c.rng.Float64() < cfg.RWWrites {
					want.mode = "write"
				}
				c.rw[name] = want
			}
			c.mode = want.mode
			switch {
			case x < 0.1:
				c.call(ctx, phase, RWStatus, name, 0, 0)
			case want.waits:
				// Rounds of ⅔ of the lease's local validity, coming
				// back with the place, as the workers' waits.
				lease := time.Duration(ttl) * time.Second
				c.wait = max(int64((lease-cfg.Check.margin()(lease))*2/3/time.Second), 1)
				for round := 0; ; round++ {
					op := c.call(ctx, phase, RWAcquire, name, ttl, 0)
					c.ticket = ""
					if op.Ticket == "" || round == 3 || c.rng.Float64() >= cfg.Rounds || !time.Now().Before(until) {
						break
					}
					c.ticket = op.Ticket
				}
				c.wait = 0
			default:
				if op := c.call(ctx, phase, RWAcquire, name, ttl, 0); op.Status == 200 && !op.Granted {
					sleepUntil(ctx, time.Now().Add(time.Duration(c.rng.IntN(50))*time.Millisecond))
				}
			}
			// Granted, the lease is in this mode; the next want is
			// drawn afresh.
			want.held = v.live(time.Now())
		}
		sleepUntil(ctx, time.Now().Add(time.Duration(c.rng.IntN(20))*time.Millisecond))
	}
}

// rwRequest fills a read/write lock call's method, path and body (body
// holds the owner), and op's mode and slot from the client's.
func (c *client) rwRequest(op *Op, body map[string]any) (string, string, map[string]any) {
	path := "/rwlocks/" + url.PathEscape(op.Resource)
	op.Mode = c.mode
	switch op.Kind {
	case RWAcquire:
		path += "/" + c.mode
		body["ttl_seconds"] = op.TTL
		if c.wait > 0 {
			path += "/wait"
			body["wait_seconds"] = c.wait
			op.Wait = c.wait
		}
		return "POST", path, body
	case RWStatus:
		return "GET", path, nil
	}
	body["mode"] = c.mode
	if c.mode == "read" {
		body["slot"] = c.slot
		op.Slot = c.slot
	}
	if op.Kind == RWRenew {
		body["ttl_seconds"] = op.TTL
		return "POST", path + "/renew", body
	}
	return "DELETE", path, body
}

// modeOf is the mode of the client's lease of name.
func (c *client) modeOf(name string) string {
	if w := c.rw[name]; w != nil {
		return w.mode
	}
	return "read"
}

// releaseRW releases every read/write lock lease the client believes it
// holds.
func (c *client) releaseRW(ctx context.Context) {
	for _, name := range c.w.rws {
		if v := c.view(name); v.live(time.Now()) {
			c.mode, c.slot = c.modeOf(name), int64(v.slot)
			c.call(ctx, PhaseRecovery, RWRelease, name, 0, v.token)
		}
	}
}
