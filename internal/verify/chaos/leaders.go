package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// The service's history of one lock, as the leader-election rules see it:
// its leases, from the writes the store committed (the proxy's records),
// in token order. Every grant bumps the token by one, so token order is
// the order in which the store granted them (the fencing and linearizable
// rules check that it is).
//
// A lease is live on the service's clock from its acquired_at (the :now
// of its acquire) until the first of:
//
//   - its expires_at as its latest committed write left it (the acquire,
//     or the renewal with the latest renewed_at: renewals commit in that
//     order, their condition says so);
//   - a release of it that may have landed: a release of its owner, with
//     no token or its token, stamped no earlier than its grant, sent to
//     the store before the next lease's acquire was answered and answered
//     after its own acquire was sent;
//   - the next lease's grant, when the next lease is its owner's (a
//     re-acquire replaces the lease), or when one of those releases may
//     have landed before it: the store saw the lock released then, whatever
//     the clocks of the instances that stamped the two writes say.

// lease is one lease of a lock's history.
type lease struct {
	token    int64
	owner    string
	acquire  *storeOp
	acquired int64
	// last is the item of its latest committed write (its acquire or a
	// renewal).
	last storeItem
	// exps are the expires_at values it may have had: its acquire's and
	// those of the renewals that committed or may have.
	exps []int64
	// releases are the releases that may have ended it.
	releases []*storeOp
	// records are the watches' records of its expiry (expired_at) that
	// committed or may have: each ended it on the clock of the instance
	// that sent it, which may be ahead of another's.
	records []*storeOp
}

// leaseHistory is one lock's leases in token order, and the acquires whose
// outcome nobody knows (the proxy could not read the store's answer): one
// of them may be a lease missing from the list.
type leaseHistory struct {
	leases  []*lease
	unknown []*storeOp
}

// history returns the leases of resource r.
func (c *checker) history(r string) *leaseHistory {
	if h, ok := c.leases[r]; ok {
		return h
	}
	h := buildHistory(c.byRes[r])
	c.leases[r] = h
	return h
}

// buildHistory returns the leases that the store requests ops (of one
// lock, or of one slot of a semaphore) show.
func buildHistory(ops []*storeOp) *leaseHistory {
	h := &leaseHistory{}
	byToken := map[int64]*lease{}
	for _, s := range ops {
		switch {
		case s.kind == storeAcquire && s.outcome == applied && s.item != nil:
			l := &lease{token: s.item.token, owner: s.item.owner, acquire: s, acquired: s.item.acquired, last: *s.item, exps: []int64{s.item.expires}}
			h.leases = append(h.leases, l)
			if byToken[l.token] == nil {
				byToken[l.token] = l
			}
		case s.kind == storeAcquire && s.outcome == unknownOutcome:
			h.unknown = append(h.unknown, s)
		}
	}
	sort.SliceStable(h.leases, func(i, j int) bool {
		a, b := h.leases[i], h.leases[j]
		if a.token != b.token {
			return a.token < b.token
		}
		return a.acquire.rec.Sent.Before(b.acquire.rec.Sent)
	})
	for _, s := range ops {
		switch {
		case s.kind == storeRenew && s.outcome == applied && s.item != nil:
			if l := byToken[s.item.token]; l != nil {
				l.exps = append(l.exps, s.item.expires)
				if s.item.renewed > l.last.renewed || (s.item.renewed == l.last.renewed && s.item.expires > l.last.expires) {
					l.last = *s.item
				}
			}
		case s.kind == storeRenew && s.outcome == unknownOutcome:
			// It may have landed on any lease of its owner it could
			// pass the condition of.
			for _, l := range h.leases {
				if l.owner == s.owner && l.acquired <= s.now && (s.tok == 0 || s.tok == l.token) {
					l.exps = append(l.exps, s.exp)
				}
			}
		case s.kind == storeRelease && (s.outcome == applied || s.outcome == unknownOutcome):
			for i, l := range h.leases {
				if l.owner != s.owner || (s.tok != 0 && s.tok != l.token) || s.now < l.acquired {
					continue
				}
				if s.outcome == applied && s.rec.Answered.Before(l.acquire.rec.Sent) {
					continue // landed before the lease was written
				}
				if i+1 < len(h.leases) && h.leases[i+1].acquire.rec.Answered.Before(s.rec.Sent) {
					continue // sent after the next lease was granted
				}
				l.releases = append(l.releases, s)
			}
		case s.kind == storeSettle && (s.outcome == applied || s.outcome == unknownOutcome):
			if l := byToken[s.tok]; l != nil {
				l.records = append(l.records, s)
			}
		}
	}
	return h
}

// next returns the lease after the i-th, or nil.
func (h *leaseHistory) next(i int) *lease {
	if i+1 < len(h.leases) {
		return h.leases[i+1]
	}
	return nil
}

// end is when the i-th lease stopped being live on the service's clock
// (see the top of this file).
func (h *leaseHistory) end(i int) int64 {
	l, next := h.leases[i], h.next(i)
	e := l.last.expires
	for _, r := range l.releases {
		e = min(e, r.now)
	}
	if next != nil && (next.owner == l.owner || len(l.releases) > 0) {
		e = min(e, next.acquired)
	}
	return max(e, l.acquired)
}

// mayFill reports whether an acquire of unknown outcome may be a lease
// between a and b (whose tokens are not consecutive).
func (h *leaseHistory) mayFill(a, b *lease) bool {
	for _, u := range h.unknown {
		if !u.rec.Sent.After(b.acquire.rec.Answered) {
			return true
		}
	}
	return false
}

// byToken returns the index of the lease with token t, or -1.
func (h *leaseHistory) byToken(t int64) int {
	i := sort.Search(len(h.leases), func(i int) bool { return h.leases[i].token >= t })
	if i < len(h.leases) && h.leases[i].token == t {
		return i
	}
	return -1
}

// ms renders an epoch millisecond of the service's clock as seconds since
// the run's start.
func (c *checker) ms(t int64) string { return at(c.h.Start, time.UnixMilli(t)) }

// oneHolder checks RuleOneHolder: two leases of different owners one after
// the other in the history must not both be live at any moment of the
// service's clock. (A lease after them began after the later one's grant,
// which the store made only once the earlier one had ended.)
func (c *checker) oneHolder() {
	for _, r := range c.resources() {
		h := c.history(r)
		for i := 0; i+1 < len(h.leases); i++ {
			a, b := h.leases[i], h.leases[i+1]
			if a.owner == b.owner || (b.token != a.token+1 && h.mayFill(a, b)) {
				continue
			}
			aEnd, bEnd := h.end(i), h.end(i+1)
			from, to := max(a.acquired, b.acquired), min(aEnd, bEnd)
			if to <= from {
				continue
			}
			ex := []string{fmt.Sprintf("%s's lease (token %d) was live from %s to %s and %s's (token %d) from %s to %s, on the service's clock",
				a.owner, a.token, c.ms(a.acquired), c.ms(aEnd), b.owner, b.token, c.ms(b.acquired), c.ms(bEnd)),
				"the committed writes from the first grant to the second:"}
			first, last := a.acquire.rec, b.acquire.rec
			if last.Received.Before(first.Received) {
				first, last = last, first
			}
			ex = append(ex, c.storeLines(r, first.Received, last.Answered, true, 10)...)
			for _, rel := range a.releases {
				ex = append(ex, "a release of the first that may have landed: "+rel.format(c.h.Start))
			}
			ex = append(ex, c.offsetsLine())
			c.report(RuleOneHolder, r, fmt.Sprintf("%s was granted token %d while %s's lease (token %d) was live: both held the lock for %d ms",
				b.owner, b.token, a.owner, a.token, to-from), ex...)
		}
	}
}

// resources returns the resources of the store's history, sorted.
func (c *checker) resources() []string {
	rs := make([]string, 0, len(c.byRes))
	for r := range c.byRes {
		rs = append(rs, r)
	}
	sort.Strings(rs)
	return rs
}

// watchOrder checks RuleWatchOrder on every watcher's answers, in the
// order it got them:
//
//   - the index never goes below the one asked with (the index of the
//     watcher's previous answer): a watcher sees the leases in order;
//   - each answer is a state of the history: its token a lease the store
//     committed, its live lease that lease (owner, acquired_at, an
//     expires_at the lease had, live at some moment of the call), its
//     end one that may have happened by then (a release that may have
//     landed, or an expiry by the instance's clock);
//   - it was the lock's state at some moment of the call: the lease was
//     written before the call was answered, and the next one (or, for a
//     lock never taken, the first one) not answered before it was sent;
//   - between two answers with tokens a < b, the b − a − 1 leases a
//     watcher reports skipped are the leases the history has between them.
func (c *checker) watchOrder() {
	watched := map[string]bool{}
	byWatcher := map[int][]*Op{}
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		if op.Kind != Watch {
			continue
		}
		watched[op.Resource] = true
		if op.Status == 200 && op.Watched != nil {
			byWatcher[op.Client] = append(byWatcher[op.Client], op)
		}
	}
	for r := range watched {
		c.rep.WatchedLeases += len(c.history(r).leases)
	}
	ids := make([]int, 0, len(byWatcher))
	for id := range byWatcher {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		// prev is the watcher's previous answer, top the first that
		// showed the highest index it has seen.
		var prev, top *Op
		for _, op := range byWatcher[id] {
			c.rep.Watches++
			if op.Watched.Changed {
				c.rep.WatchChanged++
			}
			c.watchAnswer(op, prev, top)
			prev = op
			if top == nil || op.Watched.Index > top.Watched.Index {
				top = op
			}
		}
	}
}

// readEnded reports whether a consistent read of op's resource that the
// store answered during op found the lease of token with its expiry
// recorded (expired_at).
func (c *checker) readEnded(op *Op, token int64) bool {
	return c.anyDuring(op, func(s *storeOp) bool {
		return s.kind == storeRead && s.outcome == applied && s.full && s.item != nil && s.item.token == token && s.item.ended
	})
}

// watchAnswer checks one watch answer, prev being the watcher's previous
// one and top the first that showed the highest index it had seen (nil
// for its first).
func (c *checker) watchAnswer(op, prev, top *Op) {
	a, h := op.Watched, c.history(op.Resource)
	bad := func(why string, extra ...string) {
		ex := []string{c.opLine(op)}
		if prev != nil {
			ex = append(ex, "the watcher's previous answer: "+c.opLine(prev))
		}
		ex = append(ex, extra...)
		c.report(RuleWatchOrder, op.Resource, why, ex...)
	}
	leaseLine := func(l *lease) string { return "its grant: " + l.acquire.format(c.h.Start) }
	if a.Index < op.Index {
		bad(fmt.Sprintf("answered index %d to a watcher that had seen %d: back to an earlier state", a.Index, op.Index))
	}
	off := c.offset(op)
	inv, ret := op.Invoke.Add(off).UnixMilli()-1, op.Return.Add(off).UnixMilli()+1
	if a.Index == 0 {
		if len(h.leases) > 0 && h.leases[0].acquire.rec.Answered.Before(op.Invoke) {
			bad("answered a lock never taken after its first lease was granted", leaseLine(h.leases[0]))
		}
	} else if i := h.byToken(a.Token); i < 0 {
		if len(h.unknown) == 0 {
			bad(fmt.Sprintf("answered token %d, which the store never granted", a.Token))
		}
	} else {
		l, next := h.leases[i], h.next(i)
		switch {
		case l.acquire.rec.Sent.After(op.Return):
			bad(fmt.Sprintf("answered token %d before its grant reached the store", l.token), leaseLine(l))
		case next != nil && next.acquire.rec.Answered.Before(op.Invoke):
			bad(fmt.Sprintf("answered token %d (%s) after token %d (%s) had replaced it: a stale state", l.token, l.owner, next.token, next.owner),
				leaseLine(l), "the next grant: "+next.acquire.format(c.h.Start))
		}
		if k := op.Lock; k != nil {
			hadExp := false
			for _, e := range l.exps {
				hadExp = hadExp || e == k.ExpiresAt
			}
			switch {
			case k.Owner != l.owner || k.AcquiredAt != l.acquired || !hadExp:
				bad(fmt.Sprintf("answered a lease of token %d the store never wrote (owner %s, acquired_at %d, expires_at %d)", l.token, k.Owner, k.AcquiredAt, k.ExpiresAt), leaseLine(l))
			case k.ExpiresAt <= inv:
				bad(fmt.Sprintf("answered token %d as live though it expired at %s, before the call", l.token, c.ms(k.ExpiresAt)), leaseLine(l))
			}
		} else {
			exp := slicesMinInt(l.exps)
			ended := exp <= ret
			for _, r := range l.releases {
				ended = ended || !r.rec.Sent.After(op.Return)
			}
			// A watch answers the expiry another watch recorded (design.md,
			// "A watched expiry is final"), perhaps on an instance whose
			// clock is behind the recorder's: a record stamped at or after
			// the lease's expiry ended it, if the watch's consistent read
			// during the call found it there.
			if !ended && slices.ContainsFunc(l.records, func(r *storeOp) bool { return r.now >= exp }) {
				ended = c.readEnded(op, l.token)
			}
			// An unchanged answer that echoes the ended state the watcher
			// asked with only says "nothing later": an instance whose clock
			// is behind the one that answered the end keeps to it rather
			// than go back (api.md#watch). Whether something later existed
			// is checked with the next grant above.
			echo := !a.Changed && a.Index == op.Index
			if !ended && !echo {
				ex := []string{leaseLine(l)}
				for _, r := range l.records {
					ex = append(ex, "an expiry record of it: "+r.format(c.h.Start))
				}
				bad(fmt.Sprintf("answered that the lease of token %d had ended, but no release of it had been sent, no read during the call found its expiry recorded, and it was live on i%d's clock until %s",
					l.token, op.Instance, c.ms(exp)), ex...)
			}
		}
	}
	// Skipped leases: between two answers with tokens a < b the watcher
	// missed b − a − 1 leases, and so must the history have.
	if prev == nil || prev.Watched.Token == 0 || a.Token <= prev.Watched.Token {
		return
	}
	from, to := prev.Watched.Token, a.Token
	reported := int(to - from - 1)
	c.rep.WatchSkipped += reported
	between := 0
	for _, l := range h.leases {
		if l.token > from && l.token < to {
			between++
		}
	}
	unknown := 0
	for _, u := range h.unknown {
		if !u.rec.Sent.After(op.Return) {
			unknown++
		}
	}
	if between > reported || between+unknown < reported {
		bad(fmt.Sprintf("from token %d to token %d the watcher reports %d leases skipped; the history has %d between them", from, to, reported, between))
	}
}

func slicesMinInt(xs []int64) int64 {
	m := int64(math.MaxInt64)
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}
