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
// counter, each slot's permit (owner, token, acquired_at, renewed_at,
// expires_at, released, grant id) and the owner markers.
//
// The model is the documented rules of a permit (api.md, "Semaphores";
// docs/design.md, "Semaphores"), each write judged with its own :now as
// the store judges it:
//
//   - an acquire of slot k needs N to agree (or the semaphore to have
//     none; or, for a change of N, the N and counter it saw, and the
//     slots beyond the new N still expired), and the slot free (never
//     taken, released, or expired) or the caller's own permit not granted
//     or renewed after the request's issue time (:iss), or written by this
//     very request (its grant id); one permit per owner: the caller's
//     marker as the write saw it (absent, or naming the grant it saw),
//     and, away from its home slot, no live permit of the caller at home;
//     and each stale marker it removes unchanged, its grant's slot not
//     live. It sets the slot's permit, its token the counter + 1 (from
//     :base without one), the counter, N, and the caller's marker (away
//     from home) or its removal (home again);
//   - a renew and a release of slot k need the caller's live permit there
//     (owner, not released, expiry after :now, granted — and for a renew
//     renewed — no later than :now, the token when given), and a renew a
//     slot below N; a renew moves the expiry, a release ends the permit;
//   - a read returns the item; a status answer shows, for some :now of
//     the call (as for a lock), N and exactly the permits live then.

// semInput is a porcupine operation of a semaphore's partition.
type semInput struct {
	store        *storeOp
	status       *Op
	nowLo, nowHi int64
}

// semStep is the model: the states after in, from state s.
func semStep(s semItem, in semInput) []semItem {
	if op := in.status; op != nil {
		if statusFits(s, op, in.nowLo, in.nowHi) {
			return []semItem{s}
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
			return []semItem{s}
		}
		if (m.item == nil && !s.exists) || (m.item != nil && *m.item == s) {
			return []semItem{s}
		}
		return nil
	case storeAcquire:
		ok, next = semAcquire(s, w)
	case storeRenew:
		l := s.slots[m.slot]
		ok = s.exists && s.permits > int64(m.slot) && l.taken() && l.owner == w.owner && !l.forced && !l.released && l.expiresAt > w.now &&
			l.acquiredAt <= w.now && l.renewedAt <= w.now && (w.tok == 0 || l.token == w.tok)
		l.expiresAt, l.renewedAt = w.exp, w.now
		next.slots[m.slot] = l
	case storeRelease:
		l := s.slots[m.slot]
		ok = s.exists && l.taken() && l.owner == w.owner && !l.forced && !l.released && l.expiresAt > w.now && l.acquiredAt <= w.now &&
			(w.tok == 0 || l.token == w.tok)
		l.expiresAt, l.released = w.now, true
		next.slots[m.slot] = l
	}
	switch w.outcome {
	case applied:
		if !ok {
			return nil
		}
		if it := m.item; it != nil {
			// An acquire returns the attributes it updated (its slot, the
			// counter, N); a renew the whole item.
			if m.partial {
				if it.slots[m.slot] != next.slots[m.slot] || it.counter != next.counter || it.permits != next.permits {
					return nil
				}
			} else if *it != next {
				return nil
			}
		}
		return []semItem{next}
	case refused:
		if ok {
			return nil
		}
		return []semItem{s}
	case unknownOutcome:
		if ok {
			return []semItem{s, next}
		}
		return []semItem{s}
	}
	return []semItem{s}
}

// semAcquire is an acquire write's condition and update.
func semAcquire(s semItem, w *storeOp) (bool, semItem) {
	m := w.sem
	k := m.slot
	l := s.slots[k]
	ok := true
	if r := m.reset; r != nil {
		ok = s.exists && s.permits == r.permits && s.counter == r.counter
		for _, j := range r.expired {
			ok = ok && j >= 0 && j < maxSlots && s.slots[j].taken() && s.slots[j].expiresAt <= w.now
		}
	} else {
		ok = s.permits == 0 || s.permits == m.n
	}
	ok = ok && (!l.taken() || l.released || l.expiresAt <= w.now ||
		(l.owner == w.owner && !l.forced && ((l.acquiredAt <= w.iss && l.renewedAt <= w.iss) || (w.gid != "" && l.gid == w.gid))))
	markers := decodeMarkers(s.markers)
	mv, has := markers[m.marker]
	if m.markerSet {
		ok = ok && has && mv == m.markerIs
	} else {
		ok = ok && !has
	}
	if m.home >= 0 && m.home < maxSlots {
		h := s.slots[m.home]
		ok = ok && !(h.owner == w.owner && h.expiresAt > w.now && !h.released && !h.forced)
	}
	for _, cl := range m.cleanup {
		v, has := markers[cl.name]
		ok = ok && (!has || v == cl.value)
		if cl.slot >= 0 && cl.slot < maxSlots {
			g := s.slots[cl.slot]
			ok = ok && ((g.gid != "" && g.gid != cl.value) || (g.taken() && g.expiresAt <= w.now) || g.released || g.forced)
		}
	}
	next := s
	next.exists = true
	next.counter = w.base + 1
	if s.counter != 0 {
		next.counter = s.counter + 1
	}
	next.permits = m.n
	next.slots[k] = slotLease{owner: w.owner, token: next.counter, acquiredAt: w.now, renewedAt: w.now, expiresAt: w.exp, gid: w.gid}
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
		hi = min(hi, s.slots[p.Slot].expiresAt-1) // live: :now < expires_at
	}
	for k := 0; k < int(min(s.permits, maxSlots)); k++ {
		l := s.slots[k]
		if !listed[k] && l.taken() && !l.released && !l.forced {
			lo = max(lo, l.expiresAt) // not live: expires_at <= :now
		}
	}
	return lo <= hi
}

var semModel = (&porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{semItem{}} },
	Step: func(state, input, _ interface{}) []interface{} {
		var out []interface{}
		for _, s := range semStep(state.(semItem), input.(semInput)) {
			out = append(out, s)
		}
		return out
	},
	Hash: func(state interface{}) uint64 {
		h := fnv.New64a()
		fmt.Fprint(h, state.(semItem))
		return h.Sum64()
	},
	DescribeState: func(state interface{}) string { s := state.(semItem); return s.String() },
}).ToModel()

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
		if op.Kind != SemStatus || op.Err != "" || op.Status != 200 || op.Holders == nil {
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
		res, info := porcupine.CheckOperationsVerbose(semModel, parts[r], c.opt.LinearizabilityTimeout)
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
	states := []semItem{{}}
	for i, o := range longest {
		var next []semItem
		for _, s := range states {
			next = append(next, semStep(s, o.Input.(semInput))...)
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
