package chaos

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The lock set workload (Config.SetClients): clients that take sets of 2
// to 4 of the workers' resources (at most Config.Resources) for an owner
// of their own (sk) and nothing else, as a transfer between accounts
// does. A set client that holds no set asks for one (askSet): for the
// same names until granted, a try and then (Config.SetWaits) waiting
// rounds, each bringing back the last round's ticket, as the clients'
// AcquireSet does. One that holds a set renews it, releases it, works
// under it a little, or stalls past it. Its belief
// about a held set is the Go client's: every name until the earliest
// deadline (invoke + ttl - margin of the grant or of the latest renewal),
// lost as soon as any name is.

// heldSet is a set client's belief about the set it holds.
type heldSet struct {
	names    []string
	tokens   []int64
	deadline time.Time
}

// setClients is the number of set clients of the run (0 with fewer than
// two resources: a set has two names at least).
func (c *Config) setClients() int {
	if c.Resources < 2 {
		return 0
	}
	return max(c.SetClients, 0)
}

// setBase is the index of the first set client: after the workers and
// the election's candidates and observers.
func (c *Config) setBase() int {
	n := c.Clients
	if c.Election.on() {
		n += c.Election.Candidates + c.Election.Observers
	}
	return n
}

// setPrefix is the path prefix of the sets' requests: every resource of
// the workers begins with it.
func (c *Config) setPrefix() string { return c.Name + "-r" }

// runSets runs a set client until the time is up.
func (c *client) runSets(ctx context.Context, phase Phase, until time.Time) {
	cfg := c.w.cfg
	for ctx.Err() == nil && time.Now().Before(until) {
		ttl := cfg.TTLs[c.rng.IntN(len(cfg.TTLs))]
		if s := c.set; s != nil && time.Now().Before(s.deadline) {
			switch x := c.rng.Float64(); {
			case x < cfg.Abandon:
				// A stalled holder: its leases end by expiry.
				sleepUntil(ctx, s.deadline.Add(time.Duration(c.rng.IntN(100))*time.Millisecond))
				c.set = nil
			case x < cfg.Abandon+0.1:
				sleepUntil(ctx, minTime(s.deadline, time.Now().Add(time.Duration(c.rng.IntN(200))*time.Millisecond)))
			case x < 0.6:
				c.setCall(ctx, phase, SetRenew, s.names, s.tokens, ttl, 0)
			default:
				c.setCall(ctx, phase, SetRelease, s.names, s.tokens, 0, 0)
			}
		} else {
			c.set = nil
			c.askSet(ctx, phase, until, ttl)
		}
		sleepUntil(ctx, time.Now().Add(time.Duration(c.rng.IntN(20))*time.Millisecond))
	}
}

// askSet asks for one set as the clients' AcquireSet does: the same
// names throughout, a try first, then (with SetWaits) waiting rounds of ⅔
// of the lease's local validity in whole seconds, each bringing back the
// ticket of the last round answered (a round answered 503 or not at all,
// which may still run at the service, leaves it as it was; a refusal
// without one clears it), until the set is granted or the time is up. A
// lease too short for a round of 1 s (1 s) is asked for 2 s: a client
// that waits chooses a lease it can wait for. Unlike the clients, it asks
// again within 50 ms after a 503 rather than after Retry-After: it asks
// more often than they do. Without waiting it polls (tries after a pause
// of up to 50 ms) for 1 to 3 s and gives up: no queue place is kept for a
// poll, so no progress is owed to it.
func (c *client) askSet(ctx context.Context, phase Phase, until time.Time, ttl int64) {
	cfg := c.w.cfg
	margin := cfg.Check.margin()
	round := func(ttl int64) int64 {
		lease := time.Duration(ttl) * time.Second
		return int64((lease - margin(lease)) * 2 / 3 / time.Second)
	}
	var wait int64
	giveUp := until
	if c.rng.Float64() < cfg.SetWaits {
		for wait = round(ttl); wait == 0; wait = round(ttl) {
			ttl++
		}
	} else {
		giveUp = minTime(until, time.Now().Add(time.Second+time.Duration(c.rng.IntN(2000))*time.Millisecond))
	}
	names := c.pickSet()
	c.asks++
	defer func() { c.ticket = "" }() // the place is this ask's
	for try := 0; ctx.Err() == nil && time.Now().Before(giveUp); try++ {
		w := wait
		if try == 0 {
			w = 0
		}
		op := c.setCall(ctx, phase, SetAcquire, names, nil, ttl, w)
		if op.Granted {
			return
		}
		if w > 0 && op.Status == 200 {
			if c.ticket = op.Ticket; c.ticket != "" {
				continue // at once, as the clients do after a round that waited
			}
		}
		sleepUntil(ctx, time.Now().Add(time.Duration(c.rng.IntN(50))*time.Millisecond))
	}
}

// pickSet draws 2 to 4 of the workers' resources (at most all of them),
// in random order: the service sorts them.
func (c *client) pickSet() []string {
	rs := slices.Clone(c.w.resources)
	c.rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	return rs[:2+c.rng.IntN(min(4, len(rs))-1)]
}

// setCall sends one set call, records it and its members (setMembers),
// and updates the client's belief about its set.
func (c *client) setCall(ctx context.Context, phase Phase, kind Kind, names []string, tokens []int64, ttl, wait int64) Op {
	w := c.w
	op := Op{Client: c.id, Owner: c.owner, Kind: kind, Resource: w.cfg.setPrefix(), TTL: ttl, Wait: wait, Phase: phase,
		Names: slices.Clone(names), Tokens: slices.Clone(tokens), Instance: c.rng.IntN(len(w.urls))}
	if kind == SetAcquire {
		op.Ask = c.asks
	}
	if kind == SetAcquire && phase != PhaseFinal && w.cfg.LockDelays > 0 && c.rng.Float64() < w.cfg.LockDelays {
		op.LockDelay = 1
	}
	method, path := "POST", "/locksets/"+url.PathEscape(op.Resource)
	switch {
	case kind == SetAcquire && wait > 0:
		path += "/wait"
	case kind == SetRenew:
		path += "/renew"
	case kind == SetRelease:
		method = "DELETE"
	}
	if kind == SetAcquire && wait > 0 {
		op.QueueTicket = c.ticket
	}
	b, _ := json.Marshal(setBody(&op))
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, w.urls[op.Instance]+path, strings.NewReader(string(b)))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	op.Invoke = time.Now()
	resp, err := w.http.Do(req)
	if err == nil {
		op.Body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		op.Status = resp.StatusCode
		op.ContentType = resp.Header.Get("Content-Type")
		op.RetryAfter = resp.Header.Get("Retry-After")
	}
	op.Return = time.Now()
	if err != nil {
		op.Err, op.Status = err.Error(), 0
	}
	op.decode()
	w.mu.Lock()
	w.calls++
	op.Call = w.calls
	w.mu.Unlock()
	w.record(op)
	for _, m := range setMembers(op) {
		w.record(m)
	}

	lease := time.Duration(ttl) * time.Second
	deadline := op.Invoke.Add(lease - w.cfg.Check.margin()(lease))
	switch {
	case kind == SetAcquire && op.Granted:
		s := &heldSet{deadline: deadline}
		for _, l := range op.SetLocks {
			s.names, s.tokens = append(s.names, l.Resource), append(s.tokens, l.Token)
		}
		c.set = s
	case kind == SetRenew && c.set != nil:
		lost := false
		for _, it := range op.Items {
			lost = lost || it.Status == 403 || it.Status == 404 || it.Status == 409
		}
		switch {
		case lost:
			c.set = nil
		case op.Status == 200 && op.DecodeErr == "" && slices.IndexFunc(op.Items, func(it SetItem) bool { return !it.OK }) < 0:
			c.set.deadline = deadline
		default:
			// Not answered for every name: the renewal may have shortened
			// the leases it reached.
			c.set.deadline = minTime(c.set.deadline, deadline)
		}
	case kind == SetRelease:
		c.set = nil
	}
	return op
}

// releaseSet releases the set the client believes it holds.
func (c *client) releaseSet(ctx context.Context) {
	if s := c.set; s != nil && time.Now().Before(s.deadline) {
		c.setCall(ctx, PhaseRecovery, SetRelease, s.names, s.tokens, 0, 0)
	}
}
