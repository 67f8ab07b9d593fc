package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/ft288/locks/locklogic"
)

// The read/write lock rules. A read/write lock is the writer's lease and
// R reader slots' side by side, each a lease of the one lease step, with
// one fencing counter for all (docs/design.md, "Read/write locks"). Its
// calls share the answers and recovery rules, and the fencing rule on
// their answers (every grant of a name, read or write, in one real-time
// order); beside them the checker enforces:
//
//   - rw exclusive (RuleRWExclusive): no writer overlaps any other holder,
//     reader or writer — in the clients' holds (from the grant's answer to
//     invoke + ttl − margin, moved by renewals, ended by a release, as for
//     mutual exclusion), and in the service's history: the leases the
//     store committed (per lease, the writer's or a reader slot's, as the
//     one-holder rule reads a lock's), each live on the service's clock
//     from its acquired_at to its end, no two live at once when one is the
//     writer's. The one counter orders them: the later grant (the larger
//     token) must find the earlier lease ended, and a release of it that
//     may have landed before the later grant ends it there; a grant is
//     live no earlier than the grants committed before it (a write that
//     landed late is stamped before it landed);
//   - rw readers (RuleRWReaders): at most R (Options.Readers) readers'
//     leases are held at once, by the clients' holds and in the service's
//     history, and no reader's lease is in a slot at or beyond R;
//   - rw tokens (RuleRWTokens): every committed grant's token, the
//     writer's or a reader's, is the item's counter after it, no token is
//     committed twice, and a grant committed after another was answered
//     has the larger token;
//   - rw writer first (RuleRWWriterFirst): a queued writer is not passed
//     by later arrivals: no grant committed while a live writer's place
//     was queued, unless it is a queued reader ahead of every queued
//     writer (the head's batch) or the writer itself at the head. Read
//     from each committed grant's own item (ALL_NEW: the queue as the
//     grant left it, atomic with it). This is why a waiting writer does
//     not starve behind continuous readers; the report has the longest
//     wait of a waiting writer, from its first ask to its grant
//     (RWWriterMaxWait) in the queue, from its first round to its grant.

// The read/write lock rules' names.
const (
	// RuleRWExclusive: no writer's lease overlaps another holder's.
	RuleRWExclusive = "rw-exclusive"
	// RuleRWReaders: at most R readers at once, each in a slot below R.
	RuleRWReaders = "rw-readers"
	// RuleRWTokens: one counter, tokens unique and growing per name.
	RuleRWTokens = "rw-tokens"
	// RuleRWWriterFirst: no grant passes a live queued writer.
	RuleRWWriterFirst = "rw-writer-first"
)

// readers is R, the most readers of a name (locklogic.MaxReaders).
func (o Options) readers() int {
	if o.Readers > 0 {
		return o.Readers
	}
	return locklogic.MaxReaders
}

// isRW reports whether r is a read/write lock's name (in this history).
func (c *checker) isRW(r string) bool {
	if c.rws == nil {
		c.rws = map[string]bool{}
		for i := range c.h.Ops {
			if op := &c.h.Ops[i]; op.Kind.RW() {
				c.rws[op.Resource] = true
			}
		}
		for name := range c.byRW {
			c.rws[name] = true
		}
	}
	return c.rws[r]
}

// rwNames returns the read/write locks of the history, sorted.
func (c *checker) rwNames() []string {
	c.isRW("")
	names := make([]string, 0, len(c.rws))
	for name := range c.rws {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// rwLocks checks the read/write lock rules.
func (c *checker) rwLocks() {
	for _, name := range c.rwNames() {
		c.rwHolds(name)
		c.rwHistory(name)
		c.rwTokens(name)
		c.rwWriterFirst(name)
	}
	c.rwWriterWaits()
}

// rwMode is the mode of the hold h (its grant's).
func (c *checker) rwMode(h Hold) string { return c.h.Ops[h.Ops[0]].Mode }

// rwRole names a hold's lease by its mode.
func rwRole(mode string) string {
	if mode == "write" {
		return "the writer's"
	}
	return "a reader's"
}

// rwHolds checks RuleRWExclusive and RuleRWReaders on the clients' holds.
func (c *checker) rwHolds(name string) {
	hs := slices.Clone(c.holds()[name])
	c.rep.RWHolds += len(hs)
	sort.Slice(hs, func(i, j int) bool { return hs[i].Start.Before(hs[j].Start) })
	var active []Hold
	for _, h := range hs {
		keep := active[:0]
		for _, a := range active {
			if a.End.After(h.Start) {
				keep = append(keep, a)
			}
		}
		active = keep
		readers := 0
		if c.rwMode(h) == "read" {
			readers = 1
		}
		for _, a := range active {
			if c.rwMode(a) == "read" {
				readers++
			}
			if c.rwMode(a) != "write" && c.rwMode(h) != "write" {
				continue
			}
			ex := []string{fmt.Sprintf("%s holds %s lease (token %d) from %s to %s; %s holds %s lease (token %d) from %s to %s (client deadlines: invoke + ttl - margin)",
				a.Owner, rwRole(c.rwMode(a)), a.Token, at(c.h.Start, a.Start), at(c.h.Start, a.End), h.Owner, rwRole(c.rwMode(h)), h.Token, at(c.h.Start, h.Start), at(c.h.Start, h.End))}
			for _, id := range append(slices.Clone(a.Ops), h.Ops...) {
				ex = append(ex, c.opLine(&c.h.Ops[id]))
			}
			ex = append(ex, "committed writes in between:")
			ex = append(ex, c.storeLines(name, c.h.Ops[a.Ops[0]].Invoke, h.Start, true, 8)...)
			c.report(RuleRWExclusive, name, fmt.Sprintf("%s (%s) and %s (%s) held the read/write lock together for %v", a.Owner, c.rwMode(a), h.Owner, c.rwMode(h),
				(minTime(a.End, h.End).Sub(h.Start)).Round(time.Millisecond)), ex...)
		}
		c.rep.RWMaxReaders = max(c.rep.RWMaxReaders, readers)
		if readers > c.opt.readers() {
			c.report(RuleRWReaders, name, fmt.Sprintf("%d clients held readers' leases at once at %s, more than R = %d", readers, at(c.h.Start, h.Start), c.opt.readers()),
				c.opLine(&c.h.Ops[h.Ops[0]]))
		}
		active = append(active, h)
	}
}

// rwSlotOps returns the requests of lease k (rwWriter or a reader slot)
// of read/write lock name as lock requests (that lease as their item),
// for buildHistory.
func (c *checker) rwSlotOps(name string, k int) []*storeOp {
	var out []*storeOp
	for _, s := range c.byRW[name] {
		if s.rw.slot != k || s.kind == storeRead {
			continue
		}
		l := *s
		l.rw = nil
		if it := s.rw.item; it != nil {
			l.item = &storeItem{leaseState: it.lease(k)}
		}
		out = append(out, &l)
	}
	return out
}

// rwLease is one lease of a read/write lock's history: its slot and its
// place in that slot's history.
type rwLease struct {
	slot int
	h    *leaseHistory
	i    int
}

func (l rwLease) lease() *lease { return l.h.leases[l.i] }

// rwLeases returns every committed lease of name, the writer's and every
// reader slot's, in token order (the one counter's: the store's order of
// the grants).
func (c *checker) rwLeases(name string) []rwLease {
	slots := map[int]bool{rwWriter: true}
	for _, s := range c.byRW[name] {
		if s.rw.slot >= 0 {
			slots[s.rw.slot] = true
		}
	}
	var out []rwLease
	for k := range slots {
		h := buildHistory(c.rwSlotOps(name, k))
		for i := range h.leases {
			out = append(out, rwLease{slot: k, h: h, i: i})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lease().token < out[j].lease().token })
	return out
}

// rwEnd is when lease a stopped being live as the later grant b, live
// from from, sees it: its end (leaseHistory.end), or from when a release
// of a may have landed before b's grant (the store saw a released then,
// whatever the clocks of the instances that stamped the two writes say).
func rwEnd(a, b rwLease, from int64) int64 {
	e := a.h.end(a.i)
	for _, r := range a.lease().releases {
		if r.rec.Sent.Before(b.lease().acquire.rec.Answered) {
			e = min(e, from)
		}
	}
	return e
}

// rwHistory checks RuleRWExclusive and RuleRWReaders on the service's
// history: each lease against every earlier one.
func (c *checker) rwHistory(name string) {
	ls := c.rwLeases(name)
	var landed int64 // the latest acquired_at of the grants before b
	for j, b := range ls {
		bl := b.lease()
		// b is live from its acquired_at, but no earlier than the grants
		// the store committed before it: a grant whose write landed late
		// (a delay, an SDK retry) is stamped before it landed.
		from := max(bl.acquired, landed)
		landed = from
		if b.slot == rwWriter {
			c.rep.RWWriteGrants++
		} else {
			c.rep.RWReadGrants++
		}
		if b.slot >= c.opt.readers() {
			c.report(RuleRWReaders, name, fmt.Sprintf("%s's reader's lease (token %d) is in slot %d, beyond R = %d", bl.owner, bl.token, b.slot, c.opt.readers()),
				bl.acquire.format(c.h.Start))
		}
		readers := 0
		if b.slot != rwWriter {
			readers = 1
		}
		if b.h.end(b.i) <= from {
			continue // ended before it landed: nobody held it
		}
		for _, a := range ls[:j] {
			al := a.lease()
			end := rwEnd(a, b, from)
			if end <= from {
				continue
			}
			if a.slot != rwWriter {
				readers++
			}
			if a.slot != rwWriter && b.slot != rwWriter {
				continue
			}
			ex := []string{fmt.Sprintf("%s's lease of the %s (token %d) was live from %s to %s, and %s was granted the %s's lease (token %d) at %s, on the service's clock",
				al.owner, rwSlotName(a.slot), al.token, c.ms(al.acquired), c.ms(end), bl.owner, rwSlotName(b.slot), bl.token, c.ms(from)),
				"the committed writes from the first grant to the second:"}
			ex = append(ex, c.storeLines(name, al.acquire.rec.Received, bl.acquire.rec.Answered, true, 10)...)
			ex = append(ex, c.offsetsLine())
			c.report(RuleRWExclusive, name, fmt.Sprintf("the store granted %s the %s's lease (token %d) while %s's %s lease (token %d) was live for %d ms more",
				bl.owner, rwSlotName(b.slot), bl.token, al.owner, rwSlotName(a.slot), al.token, end-from), ex...)
		}
		if readers > c.opt.readers() {
			c.report(RuleRWReaders, name, fmt.Sprintf("%d readers' leases were live at once on the service's clock at %s, more than R = %d", readers, c.ms(from), c.opt.readers()),
				bl.acquire.format(c.h.Start))
		}
	}
}

// rwTokens checks RuleRWTokens on the committed grants.
func (c *checker) rwTokens(name string) {
	var acq []*storeOp
	for _, s := range c.byRW[name] {
		if s.kind == storeAcquire && s.outcome == applied && s.rw.item != nil {
			acq = append(acq, s)
		}
	}
	tok := func(s *storeOp) int64 { return s.rw.item.lease(s.rw.slot).token }
	seen := map[int64]*storeOp{}
	for _, s := range acq {
		t := tok(s)
		if prev, dup := seen[t]; dup {
			c.report(RuleRWTokens, name, fmt.Sprintf("the store committed token %d twice (%s and %s)", t, rwSlotName(prev.rw.slot), rwSlotName(s.rw.slot)),
				prev.format(c.h.Start), s.format(c.h.Start))
		}
		seen[t] = s
		if t != s.rw.item.counter {
			c.report(RuleRWTokens, name, fmt.Sprintf("the %s's grant committed token %d with the counter at %d", rwSlotName(s.rw.slot), t, s.rw.item.counter),
				s.format(c.h.Start))
		}
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
			c.report(RuleRWTokens, name, fmt.Sprintf("the store committed the %s's token %d after the %s's token %d", rwSlotName(s.rw.slot), tok(s), rwSlotName(maxS.rw.slot), tok(maxS)),
				maxS.format(c.h.Start), s.format(c.h.Start))
		}
	}
}

// rwWriterFirst checks RuleRWWriterFirst on each committed grant's item.
func (c *checker) rwWriterFirst(name string) {
	for _, s := range c.byRW[name] {
		if s.kind != storeAcquire || s.outcome != applied || s.rw.item == nil {
			continue
		}
		q := s.rw.item.queue
		ahead := q // a plain grant passes every place
		if s.rw.place >= 0 {
			ahead = q[:min(s.rw.place, len(q))] // a queued one those ahead of its own
		}
		for _, e := range ahead {
			if !e.writer || e.until <= s.now {
				continue
			}
			how := "a plain grant"
			if s.rw.place >= 0 {
				how = fmt.Sprintf("a queued grant at place %d", s.rw.place)
			}
			c.report(RuleRWWriterFirst, name, fmt.Sprintf("%s of the %s's lease to %s passed writer %s's live place (ticket %s, until %s)",
				how, rwSlotName(s.rw.slot), s.owner, e.owner, e.id, c.ms(e.until)), s.format(c.h.Start))
			break
		}
	}
}

// rwWriterWaits measures how long waiting writers waited in the queue:
// from the first round of a writer's wait (a waiting write acquire that
// sent no queue_ticket) through the rounds that came back with its place
// to the round that was granted.
func (c *checker) rwWriterWaits() {
	type key struct {
		client int
		name   string
	}
	first := map[key]*Op{}
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		if op.Kind != RWAcquire || op.Phase == PhaseFinal {
			continue
		}
		k := key{op.Client, op.Resource}
		switch {
		case op.Mode != "write" || op.Wait == 0:
			delete(first, k)
			continue
		case op.QueueTicket == "" || first[k] == nil:
			first[k] = op // a new wait (a round without the place starts over)
		}
		if op.Granted {
			c.rep.RWWriterWaits = append(c.rep.RWWriterWaits, op.Return.Sub(first[k].Invoke))
			delete(first, k)
		}
	}
	for _, w := range c.rep.RWWriterWaits {
		c.rep.RWWriterMaxWait = max(c.rep.RWWriterMaxWait, w)
	}
}
