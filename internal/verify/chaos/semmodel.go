package chaos

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The sequential model of one semaphore, for porcupine: the partition of a
// semaphore holds its store requests (writes and consistent reads, from
// the proxy's records, windows and outcomes as for a lock: model.go) and
// the clients' status answers. The state is the semaphore item: N, the
// counter, each slot's permit (a lease: leasestep.go), the owner markers,
// and the semaphore's queue of waiters with its version.
//
// Each slot's permit follows the lease step, the same rules as a lock's
// lease (leasestep.go: free with lock-delay and the queue, the owner's
// re-acquire, the holder's renew and release, a watch's record of an
// expiry, force release). Around them, the semaphore's own rules (api.md,
// "Semaphores"; docs/design.md, "Semaphores"):
//
//   - an acquire of slot k needs N to agree (or the semaphore to have
//     none; or, for a change of N, the N and counter it saw, and the
//     slots beyond the new N still expired), and the slot's lease to let
//     it in; one permit per owner: the caller's marker as the write saw it
//     (absent, or naming the grant it saw), and, away from its home slot,
//     no live permit of the caller at home; and each stale marker it
//     removes unchanged, its grant's slot not live. It sets the slot's
//     permit, its token the counter + 1 (from :base without one), the
//     counter, N, and the caller's marker (away from home) or its removal
//     (home again). The head of the queue's grant (a queue ticket) needs
//     its place first and live and removes it, and may take its own
//     permit again as well as a free slot;
//   - a renew needs a slot below N, a force release too, and a renew the
//     owner's marker to allow the permit (markerAllows);
//   - a watch's record names each slot it records with the token it read;
//   - the queue's own writes are a lock's (queueState.step);
//   - a read returns the item; a status answer shows, for some :now of
//     the call (as for a lock), N and exactly the permits live then.

// semState is the model's state: the item, and the queue's version (the
// model's alone, as for a lock).
type semState struct {
	semItem
	version int64
}

func (s semState) String() string { return fmt.Sprintf("%s version:%d", s.semItem.String(), s.version) }

// queueState returns the item's queue.
func (s semState) queueState() queueState {
	return queueState{queue: s.queue, queueUntil: s.queueUntil, version: s.version}
}

// withQueue returns s with queue q.
func (s semState) withQueue(q queueState) semState {
	s.queue, s.queueUntil, s.version = q.queue, q.queueUntil, q.version
	return s
}

// semInput is a porcupine operation of a semaphore's partition.
type semInput struct {
	store        *storeOp
	status       *Op
	nowLo, nowHi int64
}

// semStep is the model: the states after in, from state s, under the
// lease step's rules rs.
func semStep(s semState, in semInput, rs leaseRules) []semState {
	if op := in.status; op != nil {
		if statusFits(s.semItem, op, in.nowLo, in.nowHi) {
			return []semState{s}
		}
		return nil
	}
	w, m := in.store, in.store.sem
	var (
		ok   bool
		next = s
	)
	switch w.kind {
	case storeRead:
		if w.outcome != applied {
			return []semState{s}
		}
		if (m.item == nil && !s.exists) || (m.item != nil && m.item.same(s.semItem)) {
			return []semState{s}
		}
		return nil
	case storeAcquire:
		ok, next = semAcquire(s, w, rs)
	case storeRenew:
		ok = s.exists && s.permits > int64(m.slot) && rs.holder(s.slots[m.slot], w, true) && s.markerAllows(w.owner, m.slot)
		next.slots[m.slot] = renew(s.slots[m.slot], w)
	case storeRelease:
		ok = s.exists && rs.holder(s.slots[m.slot], w, false)
		next.slots[m.slot] = release(s.slots[m.slot], w)
	case storeForce:
		ok = s.exists && s.permits > int64(m.slot) && rs.forceOK(s.slots[m.slot], w)
		next.slots[m.slot] = force(s.slots[m.slot], w)
	case storeSettle:
		ok = s.exists && len(m.settled) > 0
		for _, st := range m.settled {
			ok = ok && rs.record(s.slots[st.slot], st.tok, w.now)
			next.slots[st.slot].ended = true
		}
	case storeJoin, storeKeep, storePrune, storeLeave:
		var q queueState
		ok, q = s.queueState().step(w, s.exists)
		next = next.withQueue(q)
	}
	switch w.outcome {
	case applied:
		if !ok {
			return nil
		}
		if it := m.item; it != nil {
			// An acquire returns the attributes it updated (its slot, the
			// counter, N); the other writes the whole item.
			if m.partial {
				if it.slots[m.slot].shown() != next.slots[m.slot].shown() || it.counter != next.counter || it.permits != next.permits {
					return nil
				}
			} else if !it.same(next.semItem) {
				return nil
			}
		}
		return []semState{next}
	case refused:
		if ok {
			return nil
		}
		return []semState{s}
	case unknownOutcome:
		if ok {
			return []semState{s, next}
		}
		return []semState{s}
	}
	return []semState{s}
}

// markerAllows is a renewal's marker condition (locklogic's
// markerCondition): the owner's marker names the grant in slot k, or
// there is none and k is the owner's home under the item's N. A late
// renewal of a permit whose stale marker another acquire removed is
// refused, so it cannot revive a permit beside the owner's next one.
func (s semState) markerAllows(owner string, k int) bool {
	home, marker := identity(owner, s.permits)
	if v, has := decodeMarkers(s.markers)[marker]; has {
		return v == s.slots[k].gid
	}
	return home == k
}

// semAcquire is an acquire write's condition and update.
func semAcquire(s semState, w *storeOp, rs leaseRules) (bool, semState) {
	m := w.sem
	k := m.slot
	next := s
	ok := true
	if r := m.reset; r != nil {
		ok = s.exists && s.permits == r.permits && s.counter == r.counter
		for _, j := range r.expired {
			ok = ok && j >= 0 && j < maxSlots && s.slots[j].taken() && s.slots[j].expires <= w.now
		}
	} else {
		ok = s.permits == 0 || s.permits == m.n
	}
	if w.ticket != "" {
		took, q := s.queueState().headTake(w)
		ok = ok && s.exists && took && rs.acquire(s.slots[k], w, false, true, true)
		next = next.withQueue(q)
	} else {
		ok = ok && rs.acquire(s.slots[k], w, s.queueState().open(w.now), false, false)
	}
	markers := decodeMarkers(s.markers)
	mv, has := markers[m.marker]
	if m.markerSet {
		ok = ok && has && mv == m.markerIs
	} else {
		ok = ok && !has
	}
	if m.home >= 0 && m.home < maxSlots {
		h := s.slots[m.home]
		ok = ok && !(h.owner == w.owner && h.expires > w.now && !h.released && !h.forced)
	}
	for _, cl := range m.cleanup {
		v, has := markers[cl.name]
		ok = ok && (!has || v == cl.value)
		if cl.slot >= 0 && cl.slot < maxSlots {
			g := s.slots[cl.slot]
			ok = ok && ((g.gid != "" && g.gid != cl.value) || (g.taken() && g.expires <= w.now) || g.released || g.forced)
		}
	}
	next.exists = true
	next.counter = rs.nextToken(s.counter, w)
	next.permits = m.n
	next.slots[k] = grant(w, next.counter)
	if m.setMarker {
		markers[m.marker] = w.gid
	}
	if m.dropMarker {
		delete(markers, m.marker)
	}
	for _, cl := range m.cleanup {
		delete(markers, cl.name)
	}
	if m.reset != nil {
		for _, name := range m.reset.markers {
			delete(markers, name)
		}
	}
	next.markers = encodeMarkers(markers)
	return ok, next
}

// statusFits reports whether op's status answer is the state s at some
// :now in [lo, hi]: N, and exactly the permits live then.
func statusFits(s semItem, op *Op, lo, hi int64) bool {
	if !s.exists {
		return len(op.Holders) == 0 && op.SemPermits == 0
	}
	if s.permits != op.SemPermits {
		return false
	}
	listed := map[int]bool{}
	for i := range op.Holders {
		p := &op.Holders[i]
		if p.Slot < 0 || p.Slot >= maxSlots || int64(p.Slot) >= s.permits || listed[p.Slot] || !s.slots[p.Slot].shows(p) {
			return false
		}
		listed[p.Slot] = true
		hi = min(hi, s.slots[p.Slot].expires-1) // live: :now < expires_at
	}
	for k := 0; k < int(min(s.permits, maxSlots)); k++ {
		l := s.slots[k]
		if !listed[k] && l.taken() && !l.released && !l.forced && !l.ended {
			lo = max(lo, l.expires) // not live: expires_at <= :now
		}
	}
	return lo <= hi
}

// semModel is the porcupine model of one semaphore under the lease
// step's rules rs.
func semModel(rs leaseRules) porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{semState{}} },
		Step: func(state, input, _ interface{}) []interface{} {
			var out []interface{}
			for _, s := range semStep(state.(semState), input.(semInput), rs) {
				out = append(out, s)
			}
			return out
		},
		Hash: func(state interface{}) uint64 {
			h := fnv.New64a()
			fmt.Fprint(h, state.(semState))
			return h.Sum64()
		},
		DescribeState: func(state interface{}) string { return state.(semState).String() },
	}).ToModel()
}

// semLinearizable checks each semaphore's partition with porcupine.
func (c *checker) semLinearizable() {
	ns := func(t time.Time) int64 { return int64(t.Sub(c.h.Start)) }
	parts := map[string][]porcupine.Operation{}
	for name, ss := range c.bySem {
		for _, s := range ss {
			if s.outcome == notSent || s.outcome == failedOther || (s.kind == storeRead && !s.full) {
				continue
			}
			ret := ns(s.rec.Answered)
			if s.outcome == unknownOutcome {
				ret = math.MaxInt64 / 2
			}
			parts[name] = append(parts[name], porcupine.Operation{Input: semInput{store: s}, Call: ns(s.rec.Sent), Return: ret})
		}
	}
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		if (op.Kind != SemStatus && op.Kind != SemWatch) || op.Err != "" || op.Status != 200 || op.Holders == nil {
			continue
		}
		if op.Kind == SemWatch && (op.Watched == nil || !op.Watched.Changed) {
			// An unchanged answer may echo the index the watcher asked
			// with, less the permits it saw end (api.md): no state of the
			// item. A changed one is the status a consistent read found.
			continue
		}
		off := c.offset(op)
		in := semInput{status: op, nowLo: op.Invoke.Add(off).UnixMilli() - 1, nowHi: op.Return.Add(off).UnixMilli() + 1}
		parts[op.Resource] = append(parts[op.Resource], porcupine.Operation{Input: in, Call: ns(op.Invoke), Return: ns(op.Return)})
	}
	names := make([]string, 0, len(parts))
	for r := range parts {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		res, info := porcupine.CheckOperationsVerbose(semModel(c.opt.rules), parts[r], c.opt.LinearizabilityTimeout)
		c.rep.Linearizable[r] = verdicts[res]
		if res == porcupine.Illegal {
			c.report(RuleLinearizable, r, "the store's history and the status answers are not linearizable against the model of one semaphore", c.semLinExcerpt(parts[r], info)...)
		}
	}
}

// semLinExcerpt is linExcerpt for a semaphore's partition.
func (c *checker) semLinExcerpt(ops []porcupine.Operation, info porcupine.LinearizationInfo) []string {
	partials := info.PartialLinearizationsOperations()
	if len(partials) == 0 || len(partials[0]) == 0 {
		return nil
	}
	longest := partials[0][0]
	for _, p := range partials[0][1:] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	line := func(o porcupine.Operation) string {
		in := o.Input.(semInput)
		if in.status != nil {
			return c.opLine(in.status) + fmt.Sprintf(" (its :now in [%d, %d])", in.nowLo, in.nowHi)
		}
		return in.store.format(c.h.Start)
	}
	var ex []string
	states := []semState{{}}
	for i, o := range longest {
		var next []semState
		for _, s := range states {
			next = append(next, semStep(s, o.Input.(semInput), c.opt.rules)...)
		}
		states = next
		if i >= len(longest)-6 {
			ex = append(ex, "ok   "+line(o))
		}
	}
	desc := make([]string, len(states))
	for i, s := range states {
		desc[i] = s.String()
	}
	ex = append(ex, "model state then: "+strings.Join(desc, " or "))
	done := map[semInput]bool{}
	for _, o := range longest {
		done[o.Input.(semInput)] = true
	}
	var rest []porcupine.Operation
	for _, o := range ops {
		if !done[o.Input.(semInput)] {
			rest = append(rest, o)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	if len(rest) > 0 {
		ex = append(ex, "no order of these (and the rest) can follow from there:")
	}
	for i, o := range rest {
		if i == 4 {
			break
		}
		ex = append(ex, "     "+line(o))
	}
	return ex
}
