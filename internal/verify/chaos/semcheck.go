package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// The semaphore rules. A semaphore of N permits is N leases side by side,
// one per slot, each with the lock's rules, and one fencing counter for
// all of them (docs/design.md, "Semaphores"). Beside the rules a permit
// shares with a lease — answers, no false grant, recovery, fencing (its
// tokens unique and growing across all the permits), linearizable
// (semmodel.go) — the checker enforces:
//
//   - semaphore limit: the clients' holds of permits (from their grant
//     answers to their own deadlines, as for mutual exclusion, co-owners'
//     cuts included) never belong to more than N owners at once;
//   - semaphore holders: in the service's history — the permits the
//     store committed, per slot in token order as the one-holder rule
//     reads a lock's leases — no slot holds two owners' live permits at
//     once, and never are more than N owners' permits live at once on the
//     service's clock;
//   - semaphore slots: the slot a grant answered is the slot the store
//     wrote its token into, below N; a renewal answers the slot it named;
//     every committed grant's token is the semaphore's counter after it
//     (one counter feeds every slot); and no grant gives an owner a second
//     permit while its permit in another slot was surely live (one permit
//     per owner).

// The semaphore rules' names.
const (
	// RuleSemaphoreLimit: the clients' holds of a semaphore's permits
	// never belong to more than N owners at once.
	RuleSemaphoreLimit = "semaphore-limit"
	// RuleSemaphoreHolders: in the store's committed writes, a slot never
	// holds two owners' live permits at once, and never are more than N
	// owners' permits live at once.
	RuleSemaphoreHolders = "semaphore-holders"
	// RuleSemaphoreSlots: answers and committed writes agree on slots,
	// tokens come from the one counter, one permit per owner.
	RuleSemaphoreSlots = "semaphore-slots"
)

// isSem reports whether r is a semaphore's name (in this history).
func (c *checker) isSem(r string) bool {
	if c.sems == nil {
		c.sems = map[string]bool{}
		for i := range c.h.Ops {
			if op := &c.h.Ops[i]; op.Kind.Sem() {
				c.sems[op.Resource] = true
			}
		}
		for name := range c.bySem {
			c.sems[name] = true
		}
	}
	return c.sems[r]
}

// holds returns every client's holds, of leases and of permits, by
// resource (computed once).
func (c *checker) holds() map[string][]Hold {
	if c.holdsByRes == nil {
		c.holdsByRes = holds(c.h.Ops, c.opt.margin(), c.h.Offsets)
	}
	return c.holdsByRes
}

// semNames returns the semaphores of the history, sorted.
func (c *checker) semNames() []string {
	var names []string
	for name := range c.bySem {
		names = append(names, name)
	}
	for i := range c.h.Ops {
		if op := &c.h.Ops[i]; op.Kind.Sem() && !slices.Contains(names, op.Resource) {
			names = append(names, op.Resource)
		}
	}
	sort.Strings(names)
	return names
}

// permitsOf returns a semaphore's N: the largest any committed grant or
// acquire asked for (the workload's clients all ask for one N).
func (c *checker) permitsOf(name string) int64 {
	var n int64
	for _, s := range c.bySem[name] {
		if s.kind == storeAcquire && s.outcome == applied {
			n = max(n, s.sem.n)
		}
	}
	for i := range c.h.Ops {
		if op := &c.h.Ops[i]; op.Kind == SemAcquire && op.Resource == name {
			n = max(n, op.Permits)
		}
	}
	return n
}

// semaphores checks the semaphore rules, and a permit's share of
// fencing and no false grant.
func (c *checker) semaphores() {
	for _, name := range c.semNames() {
		n := c.permitsOf(name)
		c.semaphoreLimit(name, n)
		c.semaphoreHolders(name, n)
		c.semaphoreSlots(name)
		c.semFencing(name)
	}
	c.semNoFalseGrant()
}

// semaphoreLimit checks RuleSemaphoreLimit: at each hold's start, the
// holds then active belong to at most N owners.
func (c *checker) semaphoreLimit(name string, n int64) {
	hs := slices.Clone(c.holds()[name])
	sort.Slice(hs, func(i, j int) bool { return hs[i].Start.Before(hs[j].Start) })
	byID := func(id int) *Op { return &c.h.Ops[id] }
	var active []Hold
	for _, h := range hs {
		keep := active[:0]
		for _, a := range active {
			if a.End.After(h.Start) {
				keep = append(keep, a)
			}
		}
		active = append(keep, h)
		owners := map[string]Hold{}
		for _, a := range active {
			if o, ok := owners[a.Owner]; !ok || a.Start.Before(o.Start) {
				owners[a.Owner] = a
			}
		}
		if int64(len(owners)) <= n {
			continue
		}
		var ex []string
		for _, a := range active {
			ex = append(ex, fmt.Sprintf("%s holds token %d from %s to %s", a.Owner, a.Token, at(c.h.Start, a.Start), at(c.h.Start, a.End)))
			for _, id := range a.Ops {
				ex = append(ex, "    "+c.opLine(byID(id)))
			}
		}
		ex = append(ex, "committed writes in between:")
		first := h.Start
		for _, a := range active {
			first = minTime(first, byID(a.Ops[0]).Invoke)
		}
		ex = append(ex, c.storeLines(name, first, h.Start, true, 8)...)
		ex = append(ex, c.offsetsLine())
		c.report(RuleSemaphoreLimit, name, fmt.Sprintf("%d owners held permits of a semaphore of %d at %s", len(owners), n, at(c.h.Start, h.Start)), ex...)
	}
}

// slotOps returns the requests of slot k of semaphore name as lock
// requests (the slot's lease as their item), for buildHistory.
func (c *checker) slotOps(name string, k int) []*storeOp {
	var out []*storeOp
	for _, s := range c.bySem[name] {
		if s.sem.slot != k || s.kind == storeRead {
			continue
		}
		l := *s
		l.sem = nil
		if it := s.sem.item; it != nil {
			l.item = &storeItem{leaseState: it.slots[k]}
		}
		out = append(out, &l)
	}
	return out
}

// slotHistory returns the leases of slot k of semaphore name.
func (c *checker) slotHistory(name string, k int) *leaseHistory {
	key := fmt.Sprint(name, "\x00", k)
	if h, ok := c.slotLeases[key]; ok {
		return h
	}
	h := buildHistory(c.slotOps(name, k))
	c.slotLeases[key] = h
	return h
}

// semaphoreHolders checks RuleSemaphoreHolders: per slot as the
// one-holder rule, then the live permits of all slots together. A slot's
// permit counts from its acquired_at (no earlier than the slot's previous
// permit's: a late grant stamped before it landed) to its end, or to the
// slot's next permit: the slot holds one at a time, so more than N live
// at once means a slot beyond N, or a change of N that left permits live
// (the overlaps within a slot are the first part's).
func (c *checker) semaphoreHolders(name string, n int64) {
	type span struct {
		slot     int
		l        *lease
		from, to int64
	}
	var spans []span
	for k := range maxSlots {
		h := c.slotHistory(name, k)
		var from int64
		for i, l := range h.leases {
			from = max(from, l.acquired)
			to := h.end(i)
			if next := h.next(i); next != nil {
				to = min(to, max(from, next.acquired))
			}
			if to > from {
				spans = append(spans, span{slot: k, l: l, from: from, to: to})
			}
			if i+1 == len(h.leases) {
				continue
			}
			// A slot's tokens are not consecutive (the other slots take
			// tokens too): an acquire of unknown outcome of the slot may
			// be a lease between any two.
			a, b := l, h.leases[i+1]
			if a.owner == b.owner || h.mayFill(a, b) {
				continue
			}
			aEnd, bEnd := h.end(i), h.end(i+1)
			lo, hi := max(a.acquired, b.acquired), min(aEnd, bEnd)
			if hi <= lo {
				continue
			}
			ex := []string{fmt.Sprintf("in slot %d, %s's permit (token %d) was live from %s to %s and %s's (token %d) from %s to %s, on the service's clock",
				k, a.owner, a.token, c.ms(a.acquired), c.ms(aEnd), b.owner, b.token, c.ms(b.acquired), c.ms(bEnd)),
				"the committed writes from the first grant to the second:"}
			ex = append(ex, c.storeLines(name, a.acquire.rec.Received, b.acquire.rec.Answered, true, 10)...)
			for _, rel := range a.releases {
				ex = append(ex, "a release of the first that may have landed: "+rel.format(c.h.Start))
			}
			ex = append(ex, c.offsetsLine())
			c.report(RuleSemaphoreHolders, name, fmt.Sprintf("%s was granted slot %d (token %d) while %s's permit there (token %d) was live: both held it for %d ms",
				b.owner, k, b.token, a.owner, a.token, hi-lo), ex...)
		}
	}
	// More than N owners live at once: at each permit's start, the
	// permits live then.
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	for i, s := range spans {
		owners := map[string]span{}
		for _, o := range spans[:i+1] {
			if o.from <= s.from && o.to > s.from {
				owners[o.l.owner] = o
			}
		}
		if int64(len(owners)) <= n {
			continue
		}
		ex := []string{fmt.Sprintf("live at %s on the service's clock:", c.ms(s.from))}
		for _, o := range owners {
			ex = append(ex, fmt.Sprintf("  slot %d: %s's permit (token %d) from %s to %s; its grant: %s", o.slot, o.l.owner, o.l.token, c.ms(o.from), c.ms(o.to), o.l.acquire.format(c.h.Start)))
		}
		ex = append(ex, c.offsetsLine())
		c.report(RuleSemaphoreHolders, name, fmt.Sprintf("%d owners' permits were live at once in a semaphore of %d", len(owners), n), ex...)
	}
}

// semaphoreSlots checks RuleSemaphoreSlots.
func (c *checker) semaphoreSlots(name string) {
	writes := c.bySem[name]
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		if op.Resource != name || op.Lock == nil {
			continue
		}
		switch {
		case op.Kind == SemAcquire && op.Granted:
			if int64(op.Lock.Slot) >= op.Permits {
				c.report(RuleSemaphoreSlots, name, fmt.Sprintf("granted slot %d of a semaphore of %d", op.Lock.Slot, op.Permits), c.opLine(op))
			}
			// The committed write of this grant: its token, in the call.
			for _, s := range writes {
				if s.kind != storeAcquire || s.outcome != applied || s.sem.item == nil || s.owner != op.Owner ||
					!s.during(op) || s.sem.item.slots[s.sem.slot].token != op.Lock.Token {
					continue
				}
				if s.sem.slot != op.Lock.Slot {
					c.report(RuleSemaphoreSlots, name, fmt.Sprintf("%s was answered slot %d for token %d, which the store wrote into slot %d", op.Owner, op.Lock.Slot, op.Lock.Token, s.sem.slot),
						c.opLine(op), s.format(c.h.Start))
				}
				break
			}
		case op.Kind == SemRenew && op.Status == 200 && int64(op.Lock.Slot) != op.Slot:
			c.report(RuleSemaphoreSlots, name, fmt.Sprintf("a renewal of slot %d answered a permit in slot %d", op.Slot, op.Lock.Slot), c.opLine(op))
		}
	}
	for _, s := range writes {
		if s.kind != storeAcquire || s.outcome != applied || s.sem.item == nil {
			continue
		}
		it := s.sem.item
		switch {
		case it.slots[s.sem.slot].token != it.counter:
			c.report(RuleSemaphoreSlots, name, fmt.Sprintf("the store committed token %d into slot %d with the counter at %d: not the one counter's",
				it.slots[s.sem.slot].token, s.sem.slot, it.counter), s.format(c.h.Start))
		case int64(s.sem.slot) >= s.sem.n:
			c.report(RuleSemaphoreSlots, name, fmt.Sprintf("the store committed a permit in slot %d of a semaphore of %d", s.sem.slot, s.sem.n), s.format(c.h.Start))
		}
		c.onePermit(name, s)
	}
}

// onePermit checks that the committed grant g did not give its owner a
// second permit: no other slot held a permit of that owner that was
// surely live when g was applied (granted before, not possibly released
// or replaced before, and its expiry, whichever of its writes that may
// have landed before g was the last, after g's :now).
func (c *checker) onePermit(name string, g *storeOp) {
	for k := range maxSlots {
		if k == g.sem.slot {
			continue
		}
		h := c.slotHistory(name, k)
		for i, l := range h.leases {
			if l.owner != g.owner || !l.acquire.rec.Answered.Before(g.rec.Sent) {
				continue
			}
			if next := h.next(i); next != nil && next.acquire.rec.Sent.Before(answered(g)) {
				continue // replaced by then, perhaps
			}
			ended := false
			for _, r := range l.releases {
				ended = ended || r.rec.Sent.Before(answered(g))
			}
			if ended {
				continue
			}
			if exp := c.leastExpiry(name, k, l, g); exp > g.now {
				c.report(RuleSemaphoreSlots, name, fmt.Sprintf("%s was granted slot %d (token %d) while its permit in slot %d (token %d) was live until %s at the earliest: two permits of one owner",
					g.owner, g.sem.slot, g.sem.item.slots[g.sem.slot].token, k, l.token, c.ms(exp)),
					"the grant: "+g.format(c.h.Start), "the live permit's grant: "+l.acquire.format(c.h.Start))
			}
		}
	}
}

// leastExpiry is the earliest expires_at lease l of slot k may have had
// when g was applied: over its grant and the renewals that may have
// landed before g, less those surely followed by another that surely
// landed before g.
func (c *checker) leastExpiry(name string, k int, l *lease, g *storeOp) int64 {
	type set struct {
		s   *storeOp
		exp int64
	}
	cands := []set{{l.acquire, l.acquire.item.expires}}
	for _, s := range c.bySem[name] {
		if s.kind == storeRenew && s.sem.slot == k && mayLand(s) && s.owner == l.owner && s.now >= l.acquired &&
			(s.tok == 0 || s.tok == l.token) && s.rec.Sent.Before(answered(g)) {
			cands = append(cands, set{s, s.exp})
		}
	}
	least := int64(math.MaxInt64)
	for _, a := range cands {
		superseded := false
		for _, b := range cands {
			if b.s != a.s && b.s.outcome == applied && b.s.rec.Answered.Before(g.rec.Sent) && answered(a.s).Before(b.s.rec.Sent) {
				superseded = true
				break
			}
		}
		if !superseded {
			least = min(least, a.exp)
		}
	}
	return least
}

// semFencing checks the fencing rule on a semaphore's committed grants:
// tokens unique, and growing in real-time order across all its slots.
// (The grant answers are checked with the locks', by name.)
func (c *checker) semFencing(name string) {
	var acq []*storeOp
	for _, s := range c.bySem[name] {
		if s.kind == storeAcquire && s.outcome == applied && s.sem.item != nil {
			acq = append(acq, s)
		}
	}
	tok := func(s *storeOp) int64 { return s.sem.item.slots[s.sem.slot].token }
	seen := map[int64]*storeOp{}
	for _, s := range acq {
		if prev, dup := seen[tok(s)]; dup {
			c.report(RuleFencing, name, fmt.Sprintf("the store committed token %d twice (slots %d and %d)", tok(s), prev.sem.slot, s.sem.slot), prev.format(c.h.Start), s.format(c.h.Start))
		}
		seen[tok(s)] = s
	}
	sort.Slice(acq, func(i, j int) bool { return acq[i].rec.Sent.Before(acq[j].rec.Sent) })
	byAnswer := slices.Clone(acq)
	sort.Slice(byAnswer, func(i, j int) bool { return byAnswer[i].rec.Answered.Before(byAnswer[j].rec.Answered) })
	var maxS *storeOp
	k := 0
	for _, s := range acq {
		for ; k < len(byAnswer) && byAnswer[k].rec.Answered.Before(s.rec.Sent); k++ {
			if maxS == nil || tok(byAnswer[k]) > tok(maxS) {
				maxS = byAnswer[k]
			}
		}
		if maxS != nil && tok(s) <= tok(maxS) {
			c.report(RuleFencing, name, fmt.Sprintf("the store committed token %d (slot %d) after token %d (slot %d)", tok(s), s.sem.slot, tok(maxS), maxS.sem.slot),
				maxS.format(c.h.Start), s.format(c.h.Start))
		}
	}
}

// slotShows reports whether slot l is the permit p shows, live.
func (l leaseState) shows(p *Lock) bool {
	return l.owner == p.Owner && l.token == p.Token && l.acquired == p.AcquiredAt && l.expires == p.ExpiresAt && !l.released && !l.forced && !l.ended
}

// semNoFalseGrant checks the no-false-grant rule for semaphore answers:
// a permit granted, renewed or released, and a status, are backed by a
// store request of that call that the store answered inside it.
func (c *checker) semNoFalseGrant() {
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		var want storeKind
		switch {
		case op.Kind == SemAcquire && op.Granted:
			want = storeAcquire
		case op.Kind == SemRenew && op.Status == 200:
			want = storeRenew
		case op.Kind == SemRelease && op.Status == 204:
			want = storeRelease
		case op.Kind == SemStatus && op.Status == 200:
			want = storeRead
		default:
			continue
		}
		if (op.Lock == nil && (want == storeAcquire || want == storeRenew)) || (want == storeRead && op.Holders == nil) {
			continue // malformed: reported by answers
		}
		backed := false
		for _, s := range c.bySem[op.Resource] {
			if !s.during(op) {
				continue
			}
			if s.outcome != applied {
				// The old-item store mode: a renew refused because a
				// renewal stamped after it landed first, explained by the
				// item returned with the refusal.
				if o := s.sem.old; want == storeRenew && s.kind == storeRenew && s.outcome == refused && s.owner == op.Owner && o != nil &&
					op.Lock.Slot < maxSlots && o.slots[op.Lock.Slot].shows(op.Lock) {
					backed = true
					break
				}
				continue
			}
			it := s.sem.item
			switch {
			case want == storeRead && s.kind == storeRead:
				backed = s.full && it.showsStatus(op)
			case s.kind == want && want == storeRelease:
				backed = s.owner == op.Owner && int64(s.sem.slot) == op.Slot
			case s.kind == want:
				backed = s.owner == op.Owner && it != nil && it.slots[s.sem.slot].shows(op.Lock)
			case want == storeRenew && s.kind == storeRead:
				// Refused because a renewal stamped after it landed first:
				// answered with the permit that one left, read to explain.
				backed = s.full && it != nil && op.Lock.Slot < maxSlots && it.slots[op.Lock.Slot].shows(op.Lock)
			}
			if backed {
				break
			}
		}
		if !backed {
			ex := append([]string{c.opLine(op), "store requests on it during the call:"}, c.storeLines(op.Resource, op.Invoke, op.Return, false, 10)...)
			c.report(RuleNoFalseGrant, op.Resource, fmt.Sprintf("%s %s answered %d with no matching %s the store made during the call", op.Owner, op.Kind, op.Status, want), ex...)
		}
	}
	for name, ss := range c.bySem {
		answered := map[int64]bool{}
		for i := range c.h.Ops {
			if op := &c.h.Ops[i]; op.Kind == SemAcquire && op.Granted && op.Lock != nil && op.Resource == name {
				answered[op.Lock.Token] = true
			}
		}
		for _, s := range ss {
			if s.kind == storeAcquire && s.outcome == applied && s.sem.item != nil && !answered[s.sem.item.slots[s.sem.slot].token] {
				c.rep.UnheardGrants++
			}
		}
	}
}

// showsStatus reports whether the item a read returned (nil: none) holds
// every permit op's status listed, in its slot, and its N.
func (it *semItem) showsStatus(op *Op) bool {
	if it == nil {
		return len(op.Holders) == 0 && op.SemPermits == 0
	}
	if it.permits != op.SemPermits {
		return false
	}
	for i := range op.Holders {
		p := &op.Holders[i]
		if p.Slot >= maxSlots || !it.slots[p.Slot].shows(p) {
			return false
		}
	}
	return true
}
