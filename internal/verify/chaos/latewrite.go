package chaos

import (
	"fmt"
	"time"
)

// lateWrite checks the late-write rule for acquires (RuleLateWrite): a
// request may only act on the lease that existed when it arrived, so a
// grant may replace a live lease of its own owner only if that lease was
// granted (and renewed) no later than the request's arrival, however late
// in a wait the granting write comes. The service states the arrival in
// each write as :iss, which the model believes; this rule does not read
// :iss, so a service that stamps it wrong is caught here.
//
// For each grant answer W it takes:
//
//   - the write that replaced the lease before W's: the committed acquire
//     whose item W's answer shows, or, when an SDK retry of a write that
//     had landed found its own grant (the same grant id, :gid), the first
//     committed write of the request; it replaced the lease whose token is
//     one less (every acquire bumps the token by one);
//   - the grant answer P that showed that lease, if a client was told of
//     it, of the same owner (another owner's lease is mutual exclusion's);
//   - an upper bound of W's arrival on its instance's clock: the proxy's
//     receive time of the request's first store request (found by its
//     grant id; the granting write itself without one) plus the instance's
//     offset, truncated to the ms as the service truncates. The service
//     reads the arrival, then writes, so :iss is at most that.
//
// If P's acquired_at (its :now, from P's answer) is later than that bound,
// the same-owner branch could not have let W's write replace P's lease; the
// write was right only if the lease had ended by then, which is excused
// whenever the records leave it possible: a release by the owner that may
// have landed before the write (invoked before it landed, stamped no
// earlier than the grant, with no other token), or an expiry at or before
// the write's :now — P's own expires_at unless a renewal of that lease was
// answered before the write reached the proxy, and each renewal that may
// have landed, at its earliest (invoke time on its instance's clock plus
// its ttl, or what its answer showed).
func (c *checker) lateWrite() {
	type key struct {
		resource string
		token    int64
	}
	grants := map[key]*Op{}
	for i := range c.h.Ops {
		if op := &c.h.Ops[i]; op.Kind == Acquire && op.Granted && op.Lock != nil {
			grants[key{op.Resource, op.Lock.Token}] = op
		}
	}
	c.coOwnerWaits()
	for i := range c.h.Ops {
		w := &c.h.Ops[i]
		if w.Kind != Acquire || !w.Granted || w.Lock == nil {
			continue
		}
		rw, first := c.requestWrites(w)
		if rw == nil {
			continue // no write backs the grant: no-false-grant reports it
		}
		p := grants[key{w.Resource, rw.item.token - 1}]
		if p == nil || p == w || p.Owner != w.Owner || c.mayHaveEnded(p, rw) {
			continue
		}
		iss := first.Add(c.offset(w)).UnixMilli()
		if p.Lock.AcquiredAt <= iss {
			if p.Client != w.Client {
				c.rep.CoOwnerReplaced++
			}
			continue
		}
		ex := []string{c.opLine(w), c.opLine(p),
			fmt.Sprintf("the request had arrived by %s, when its first store request reached the proxy: at %d on i%d's clock at the latest; the replaced lease was granted at %d, %d ms later",
				at(c.h.Start, first), iss, w.Instance, p.Lock.AcquiredAt, p.Lock.AcquiredAt-iss),
			"the replacing write:", rw.format(c.h.Start), c.offsetsLine()}
		c.report(RuleLateWrite, w.Resource, fmt.Sprintf("%s was granted token %d by replacing its owner's live lease (token %d) granted after the request arrived",
			w.Owner, w.Lock.Token, p.Lock.Token), ex...)
	}
}

// requestWrites returns the committed write of w's request that replaced
// the lease before the request's own, and the earliest time the proxy
// received a store request of w's request (nil when no committed write
// shows w's lease).
func (c *checker) requestWrites(w *Op) (*storeOp, time.Time) {
	in := func(s *storeOp) bool {
		return s.kind == storeAcquire && s.owner == w.Owner && !s.rec.Received.Before(w.Invoke) && !s.rec.Received.After(w.Return)
	}
	var rw *storeOp
	for _, s := range c.byRes[w.Resource] {
		if in(s) && s.outcome == applied && s.item != nil && s.item.shows(w.Lock) {
			rw = s
			break
		}
	}
	if rw == nil {
		return nil, time.Time{}
	}
	first := rw.rec.Received
	if rw.gid == "" {
		return rw, first
	}
	gid := rw.gid
	for _, s := range c.byRes[w.Resource] {
		if !in(s) || s.gid != gid {
			continue
		}
		if s.rec.Received.Before(first) {
			first = s.rec.Received
		}
		if s.outcome == applied && s.item != nil && s.item.token < rw.item.token {
			rw = s
		}
	}
	return rw, first
}

// mayHaveEnded reports whether p's lease may have been released or
// expired when the write rw (which replaced it) was applied.
func (c *checker) mayHaveEnded(p *Op, rw *storeOp) bool {
	now := rw.item.acquired // rw's :now, as the store wrote it
	renewed := false        // a renewal of p's lease surely landed before rw
	ends := []int64{}
	for i := range c.h.Ops {
		x := &c.h.Ops[i]
		if x.Owner != p.Owner || x.Resource != p.Resource || (x.Kind != Renew && x.Kind != Release) {
			continue
		}
		if x.Token != 0 && x.Token != p.Lock.Token {
			continue // refused: another lease's token
		}
		if x.Return.Add(c.offset(x)).UnixMilli() < p.Lock.AcquiredAt || !x.Invoke.Before(rw.rec.Answered) {
			continue // issued before p's grant, or after rw landed
		}
		if x.Kind == Release {
			return true
		}
		e := x.Invoke.Add(c.offset(x)).UnixMilli() + x.TTL*1000
		if x.Status == 200 && x.Lock != nil {
			e = min(e, x.Lock.ExpiresAt)
			renewed = renewed || (x.Lock.Token == p.Lock.Token && x.Return.Before(rw.rec.Received))
		}
		ends = append(ends, e)
	}
	if !renewed {
		ends = append(ends, p.Lock.ExpiresAt)
	}
	for _, e := range ends {
		if e <= now {
			return true
		}
	}
	return false
}

// coOwnerWaits counts the waiting acquires during which another client
// of the same owner was granted the lock.
func (c *checker) coOwnerWaits() {
	for i := range c.h.Ops {
		w := &c.h.Ops[i]
		if w.Kind != Acquire || w.Wait == 0 {
			continue
		}
		for j := range c.h.Ops {
			p := &c.h.Ops[j]
			if p.Granted && p.Owner == w.Owner && p.Client != w.Client && p.Resource == w.Resource &&
				p.Invoke.Before(w.Return) && p.Return.After(w.Invoke) {
				c.rep.CoOwnerWaits++
				break
			}
		}
	}
}

// offset is the clock offset of the instance that served op.
func (c *checker) offset(op *Op) time.Duration {
	if op.Instance < len(c.h.Offsets) {
		return c.h.Offsets[op.Instance]
	}
	return 0
}
