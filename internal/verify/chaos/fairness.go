package chaos

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Fair waiting, as the store saw it. The waiters of a lock queue on its
// item (docs/design.md, "Fair waiting"): a waiter's place is an entry
// {ticket, owner, until} that a committed join appended at the back; a
// keep moves its until; it leaves the queue by its own grant (the head's
// grant removes the first entry), or by a prune, which only removes
// lapsed entries at the front; and a place whose until has passed is
// dead even before anybody removes it. The fairness rule reads every
// place from the proxy's records of those writes, and checks each grant
// the store committed against the places queued then:
//
//   - a head's grant goes to the earliest live place: no place that
//     joined before it (the queue's order, as any item the store returned
//     shows it, else the joins' times) is still queued and live;
//   - a plain acquire takes the lock only while no live place is queued
//     (no barging), unless it is its owner's re-acquire of its own live
//     lease, which takes nothing a waiter could have had.
//
// A place counts as queued at a grant only when the store surely had it
// then: its join was answered before the grant was sent, no write that
// removed it (its head's grant, a prune naming it) may have landed before
// the grant, and its until was still ahead of the grant's :now whichever
// of its joins and keeps that may have landed before the grant was the
// last (a late keep of an earlier round may have moved it back).

// place is one waiter's entry in a lock's queue.
type place struct {
	entry qentry
	join  *storeOp
	// keeps are the keeps of it that may have landed; removals the
	// writes that may have removed it (its head's grant, prunes).
	keeps    []*storeOp
	removals []*storeOp
}

// answered is when the store surely had s: its answer, or never when the
// outcome is unknown (it may land at any time).
func answered(s *storeOp) time.Time {
	if s.outcome == unknownOutcome {
		return time.Unix(math.MaxInt32, 0)
	}
	return s.rec.Answered
}

// mayLand reports whether s may have been applied.
func mayLand(s *storeOp) bool { return s.outcome == applied || s.outcome == unknownOutcome }

// places returns the places of lock r by ticket, and the queues the store
// returned (each an order of tickets, front first).
func (c *checker) places(r string) (map[string]*place, [][]string) {
	ps := map[string]*place{}
	var orders [][]string
	for _, s := range c.byRes[r] {
		if s.kind == storeJoin && s.outcome == applied && s.entry.id != "" {
			if ps[s.entry.id] == nil {
				ps[s.entry.id] = &place{entry: s.entry, join: s}
			}
		}
		if s.outcome == applied && s.item != nil && s.item.queue != "" {
			q, _ := parseQueue(s.item.queue)
			if len(q) > 1 {
				ids := make([]string, len(q))
				for i, e := range q {
					ids[i] = e.id
				}
				orders = append(orders, ids)
			}
		}
	}
	for _, s := range c.byRes[r] {
		if !mayLand(s) {
			continue
		}
		switch {
		case s.kind == storeKeep:
			if p := ps[s.ticket]; p != nil {
				p.keeps = append(p.keeps, s)
			}
		case s.kind == storeAcquire && s.ticket != "", s.kind == storeLeave:
			if p := ps[s.ticket]; p != nil {
				p.removals = append(p.removals, s)
			}
		case s.kind == storePrune:
			for _, id := range s.pruned {
				if p := ps[id]; p != nil {
					p.removals = append(p.removals, s)
				}
			}
		}
	}
	return ps, orders
}

// queuedAt reports whether p was surely a live place in the queue when
// the grant g was applied, and its until then at the earliest.
func (p *place) queuedAt(g *storeOp) (bool, int64) {
	if !p.join.rec.Answered.Before(g.rec.Sent) {
		return false, 0
	}
	for _, rm := range p.removals {
		if rm != g && rm.rec.Sent.Before(answered(g)) {
			return false, 0
		}
	}
	// The writes that set its until and may have landed before g, less
	// those surely followed by another that surely landed before g.
	type set struct {
		s     *storeOp
		until int64
	}
	cands := []set{{p.join, p.entry.until}}
	for _, k := range p.keeps {
		if k.rec.Sent.Before(answered(g)) {
			cands = append(cands, set{k, k.qt})
		}
	}
	until := int64(math.MaxInt64)
	for _, a := range cands {
		superseded := false
		for _, b := range cands {
			if b.s != a.s && b.s.outcome == applied && b.s.rec.Answered.Before(g.rec.Sent) && answered(a.s).Before(b.s.rec.Sent) {
				superseded = true
				break
			}
		}
		if !superseded {
			until = min(until, a.until)
		}
	}
	return until > g.now, until
}

// ahead reports whether place a was ahead of place b in the queue: some
// queue the store returned holds both, a first; else a's join was
// answered before b's was sent.
func ahead(a, b *place, orders [][]string) bool {
	for _, o := range orders {
		i, j := slices.Index(o, a.entry.id), slices.Index(o, b.entry.id)
		if i >= 0 && j >= 0 {
			return i < j
		}
	}
	return a.join.rec.Answered.Before(b.join.rec.Sent)
}

// fairness checks RuleFairness on every lock, and counts the queue's
// writes.
func (c *checker) fairness() {
	for _, r := range c.resources() {
		ps, orders := c.places(r)
		h := c.history(r)
		for _, s := range c.byRes[r] {
			if s.outcome == applied {
				switch {
				case s.kind == storeJoin:
					c.rep.QueueJoins++
				case s.kind == storeKeep:
					c.rep.QueueKeeps++
				case s.kind == storePrune:
					c.rep.QueuePrunes++
				case s.kind == storeAcquire && s.ticket != "":
					c.rep.HeadGrants++
				}
			}
			if s.kind != storeAcquire || s.outcome != applied || s.item == nil || len(ps) == 0 {
				continue
			}
			c.fairGrant(r, s, ps, orders, h)
		}
	}
}

// fairGrant checks one committed grant g of lock r.
func (c *checker) fairGrant(r string, g *storeOp, ps map[string]*place, orders [][]string, h *leaseHistory) {
	own := ps[g.ticket] // nil for a plain acquire
	if own == nil && g.ticket == "" {
		// Its owner's re-acquire of its own lease, which may have been
		// live (not expired by g's :now, no release of it surely landed
		// before g), is no barge; its owner's acquire of its released or
		// expired lease queues like any other.
		i := h.byToken(g.item.token - 1)
		if i < 0 {
			return // the lease it replaced is unknown
		}
		if l := h.leases[i]; l.owner == g.owner && slices.Max(l.exps) > g.now {
			released := false
			for _, r := range l.releases {
				released = released || (r.outcome == applied && r.rec.Answered.Before(g.rec.Sent))
			}
			if !released {
				return
			}
		}
	}
	var passed *place
	var passedUntil int64
	for _, p := range ps {
		if p == own {
			continue
		}
		live, until := p.queuedAt(g)
		if !live || (own != nil && !ahead(p, own, orders)) {
			continue
		}
		if passed == nil || p.join.rec.Answered.Before(passed.join.rec.Answered) {
			passed, passedUntil = p, until
		}
	}
	if passed == nil {
		return
	}
	what := fmt.Sprintf("%s took the lock (token %d) with a plain acquire", g.owner, g.item.token)
	if own != nil {
		what = fmt.Sprintf("%s's place (ticket %s) was granted the lock (token %d)", g.owner, g.ticket, g.item.token)
	}
	ex := []string{"the grant: " + g.format(c.h.Start),
		"the passed place's join: " + passed.join.format(c.h.Start)}
	if own != nil {
		ex = append(ex, "the granted place's join: "+own.join.format(c.h.Start))
	}
	for i, k := range passed.keeps {
		if i >= len(passed.keeps)-2 {
			ex = append(ex, "a keep of the passed place: "+k.format(c.h.Start))
		}
	}
	ex = append(ex, "the committed writes from the passed place's join to the grant:")
	ex = append(ex, c.storeLines(r, passed.join.rec.Received, g.rec.Answered, true, 10)...)
	c.report(RuleFairness, r, fmt.Sprintf("%s while %s's place (ticket %s), queued ahead since %s, was live until %s at the earliest (the grant's :now %s)",
		what, passed.entry.owner, passed.entry.id, at(c.h.Start, passed.join.rec.Answered), c.ms(passedUntil), c.ms(g.now)), ex...)
}

// longestWaiter counts, for the summary, the grants to waiting acquires
// made while other waiters of the lock waited, and how many of them went
// to the longest waiter. A waiter is a round of a waiting acquire in
// flight at the grant that holds a place in the queue (the place it ended
// with: its answer's queue_ticket, or the head's grant that granted it),
// and the longest waiter is the one whose place joined the queue first
// (a place lives across rounds that send back its ticket, and across a
// round of its owner that takes it over). A round granted by a plain
// acquire holds the place it brought (queue_ticket), if any: its owner's
// re-acquire of its own live lease. Waiters whose place is unknown
// (a round answered 503) are left out, and so are places whose client
// left: nobody waits on them. A correct queue gives every such grant to
// the longest waiter, but for a place that lapsed while its round was
// slow to come; a grant by a plain acquire to a waiter while others wait
// is not to the longest waiter. Its owner's re-acquire of its own lease
// while others wait (which the queue lets pass: it takes nothing a waiter
// could have had) is counted apart.
func (c *checker) longestWaiter() {
	type round struct {
		op    *Op
		grant *storeOp // the write that granted it (granted rounds)
		place *place
	}
	byRes := map[string][]round{}
	for r := range c.byRes {
		ps, _ := c.places(r)
		for i := range c.h.Ops {
			op := &c.h.Ops[i]
			if op.Kind != Acquire || op.Wait == 0 || op.Resource != r || op.Status != 200 {
				continue
			}
			rd := round{op: op}
			switch {
			case op.Granted && op.Lock != nil:
				for _, s := range c.byRes[r] {
					if s.kind == storeAcquire && s.outcome == applied && s.item != nil && s.owner == op.Owner && s.item.shows(op.Lock) && s.during(op) {
						// A plain grant to a round that brought its place:
						// that place is the round's.
						rd.grant, rd.place = s, ps[s.ticket]
						if s.ticket == "" {
							rd.place = ps[op.QueueTicket]
						}
						break
					}
				}
			case op.Ticket != "":
				rd.place = ps[op.Ticket]
			}
			byRes[r] = append(byRes[r], rd)
		}
	}
	for r, rounds := range byRes {
		_, orders := c.places(r)
		for _, w := range rounds {
			g := w.grant
			if g == nil {
				continue
			}
			others, longest := 0, true
			seen := map[*place]bool{w.place: true}
			for _, o := range rounds {
				if o.op == w.op || o.place == nil || seen[o.place] || !o.op.Invoke.Before(g.rec.Sent) || !o.op.Return.After(g.rec.Answered) ||
					!o.place.join.rec.Answered.Before(g.rec.Sent) {
					continue
				}
				seen[o.place] = true
				others++
				if w.place == nil || ahead(o.place, w.place, orders) {
					longest = false
				}
			}
			switch {
			case others == 0:
			case g.ticket == "" && c.reacquire(r, g):
				// Its owner's re-acquire of its own lease, which the queue
				// lets pass (no barge): a holder that keeps its lock.
				c.rep.ContestedReacquires++
			default:
				c.rep.ContestedGrants++
				if longest {
					c.rep.LongestWaiterGrants++
				}
			}
		}
	}
}

// reacquire reports whether the grant g replaced a lease of its own owner.
func (c *checker) reacquire(r string, g *storeOp) bool {
	h := c.history(r)
	i := h.byToken(g.item.token - 1)
	return i >= 0 && h.leases[i].owner == g.owner
}
