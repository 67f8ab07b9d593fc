package chaos

import (
	"context"
	"time"
)

// Election is the election workload: candidates campaign for one
// leadership lock (Config.LeaderResource) as the clients' elections do —
// a waiting acquire in rounds, then renewals with the lease's own ttl and
// token to keep leadership — and sometimes resign (a release with the
// token) or stall (stop renewing: the lease ends by expiry while they
// may still believe in it, which is what fences are for); observers
// long-poll the watch route with the index of their last answer. Every
// candidate has its own owner name. Zero values are the defaults.
type Election struct {
	// Candidates campaign (0: no election workload); Observers watch (2).
	Candidates int
	Observers  int
	// TTLs are the leases the candidates ask for ({2, 3} s); each
	// campaign round waits ⅔ × (ttl − margin) at the service, whole
	// seconds, as the clients ask.
	TTLs []int64
	// Resign and Stall are the chances, each time a renewal is due, that
	// the leader resigns (0.3) or stalls past its lease (0.1) instead.
	Resign, Stall float64
	// Waits are the observers' wait_seconds ({1, 2, 5}).
	Waits []int64
}

func (e *Election) defaults() {
	if e.Observers == 0 {
		e.Observers = 2
	}
	if len(e.TTLs) == 0 {
		e.TTLs = []int64{2, 3}
	}
	if e.Resign == 0 {
		e.Resign = 0.3
	}
	if e.Stall == 0 {
		e.Stall = 0.1
	}
	if len(e.Waits) == 0 {
		e.Waits = []int64{1, 2, 5}
	}
}

func (e *Election) on() bool { return e.Candidates > 0 }

// LeaderResource is the election's lock.
func (c *Config) LeaderResource() string { return c.Name + "-leader" }

// role is what a client of the run does.
type role int

const (
	roleWorker role = iota
	roleCandidate
	roleObserver
	// roleSet takes lock sets (setclient.go).
	roleSet
	// roleRW takes read/write locks (rwclient.go).
	roleRW
)

// role is client i's role: the workers come first, then the election's
// candidates, then its observers, then the set clients, then the read/write
// lock clients.
func (c *Config) role(i int) role {
	switch {
	case i >= c.rwBase():
		return roleRW
	case i >= c.setBase():
		return roleSet
	case i < c.Clients:
		return roleWorker
	case i < c.Clients+c.Election.Candidates:
		return roleCandidate
	}
	return roleObserver
}

// campaign runs one candidate until the time is up: campaign while not
// leader, keep leadership while leader.
func (c *client) campaign(ctx context.Context, phase Phase, until time.Time) {
	e, r := c.w.cfg.Election, c.w.leader
	margin := c.w.cfg.Check.margin()
	for ctx.Err() == nil && time.Now().Before(until) {
		v := c.view(r)
		if !v.live(time.Now()) {
			// Campaign: one round of a waiting acquire, as long as a
			// grant at its end still leaves a third of the lease.
			ttl := e.TTLs[c.rng.IntN(len(e.TTLs))]
			lease := time.Duration(ttl) * time.Second
			c.wait = int64((lease - margin(lease)) * 2 / 3 / time.Second)
			op := c.call(ctx, phase, Acquire, r, ttl, 0)
			// The next round keeps the place this one was given, as the
			// clients' elections do.
			c.wait, c.ticket = 0, op.Ticket
			switch {
			case op.Granted:
				c.leaseTTL, c.renewFrom = ttl, op.Invoke
			case op.Status != 200:
				// Store trouble: a short backoff, then the next round.
				sleepUntil(ctx, time.Now().Add(time.Duration(20+c.rng.IntN(80))*time.Millisecond))
			}
			continue
		}
		// Leader: the next renewal is due a third of the lease (at most
		// ⅔ of its local validity) after the request that last set its
		// expiry, as the clients' keep-alive.
		lease := time.Duration(c.leaseTTL) * time.Second
		interval := min(lease/3, (lease-margin(lease))*2/3)
		sleepUntil(ctx, minTime(v.deadline, c.renewFrom.Add(interval)))
		if !v.live(time.Now()) {
			continue // the deadline passed: leadership lost
		}
		switch x := c.rng.Float64(); {
		case x < e.Resign:
			c.call(ctx, phase, Release, r, 0, v.token)
			// Let another candidate win the next round.
			sleepUntil(ctx, time.Now().Add(time.Duration(c.rng.IntN(300))*time.Millisecond))
		case x < e.Resign+e.Stall:
			// A stalled leader: no renewal, no release; by the time it
			// looks again its lease has ended by expiry.
			sleepUntil(ctx, v.deadline.Add(time.Duration(c.rng.IntN(200))*time.Millisecond))
			v.held = false
		default:
			op := c.call(ctx, phase, Renew, r, c.leaseTTL, v.token)
			switch {
			case op.Status == 200:
				c.renewFrom = op.Invoke
			case op.Err != "" || op.Status >= 500:
				// Retry soon, until the deadline (the view ends the
				// leadership then); a refusal ended it already.
				sleepUntil(ctx, time.Now().Add(time.Duration(20+c.rng.IntN(30))*time.Millisecond))
			}
		}
	}
}

// observe runs one observer until the time is up: long-poll the watch
// route with the index of the last answer.
func (c *client) observe(ctx context.Context, phase Phase, until time.Time) {
	e, r := c.w.cfg.Election, c.w.leader
	for ctx.Err() == nil && time.Now().Before(until) {
		c.wait = e.Waits[c.rng.IntN(len(e.Waits))]
		op := c.call(ctx, phase, Watch, r, 0, 0)
		c.wait = 0
		if op.Status == 200 && op.Watched != nil && op.Watched.Index >= c.index {
			c.index = op.Watched.Index
			continue
		}
		// Store trouble, or an answer that went back to an earlier
		// state (a broken service: the checker reports it; a watcher
		// keeps the latest state it saw): back off a little.
		sleepUntil(ctx, time.Now().Add(time.Duration(50+c.rng.IntN(150))*time.Millisecond))
	}
}
