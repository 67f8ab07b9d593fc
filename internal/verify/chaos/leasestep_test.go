package chaos

import (
	"fmt"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/ft288/locks/internal/verify/faultproxy"
)

// mhist is a crafted store history of one lock, or of slot 0 of a
// semaphore of one permit: its writes one after another (each window
// apart from the next), as the models receive them from the proxy's
// records. Times are ms on the service's clock.
type mhist struct {
	sem bool
	ops []*storeOp
}

// add appends w, committed unless outcome says otherwise.
func (h *mhist) add(w *storeOp) *storeOp {
	w.rec = &faultproxy.Record{Seq: len(h.ops) + 1}
	if w.outcome == notSent {
		w.outcome = applied
	}
	w.resource = "r"
	if w.iss == 0 {
		w.iss = w.now
	}
	if h.sem {
		w.resource = "sem/r"
		m := &semOp{slot: 0, home: -1, n: 1}
		if w.kind == storeAcquire {
			m.dropMarker = true // the home slot of every owner among 1
		}
		if w.kind == storeSettle {
			m.slot, m.settled = -1, []semSettle{{slot: 0, tok: w.tok}}
		}
		if w.kind.queueWrite() {
			m.slot = -1
		}
		w.sem = m
	}
	h.ops = append(h.ops, w)
	return w
}

// acq is a plain acquire by owner at now, its lease to exp, with grant id
// gid and lock-delay delay (ms).
func (h *mhist) acq(owner string, now, exp, delay int64) *storeOp {
	return h.add(&storeOp{kind: storeAcquire, owner: owner, now: now, exp: exp, base: 100, delay: delay, gid: fmt.Sprintf("g%d", len(h.ops)+1)})
}

// legal reports whether the models find the history linearizable under
// the lease step's rules rs.
func (h *mhist) legal(rs leaseRules) bool {
	var ops []porcupine.Operation
	for i, w := range h.ops {
		var in any = linInput{store: w}
		if h.sem {
			in = semInput{store: w}
		}
		ops = append(ops, porcupine.Operation{Input: in, Call: int64(10 * i), Return: int64(10*i + 5)})
	}
	m := lockModel(rs)
	if h.sem {
		m = semModel(rs)
	}
	return porcupine.CheckOperations(m, ops)
}

// leaseMutations are, for each rule of the lease step, a history whose
// last write the store committed although that rule forbids it (a store
// or service without the rule). Each is written once and run for a lock
// and for a semaphore's slot.
var leaseMutations = []struct {
	rule  leaseRule
	build func(h *mhist)
}{
	{ruleFreeExpired, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.acq("B", 500, 1500, 0) // A's lease is live
	}},
	{ruleFreeLockDelay, func(h *mhist) {
		h.acq("A", 0, 1000, 1000) // free at 2000
		h.acq("B", 1500, 2500, 0)
	}},
	{ruleFreeQueue, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeJoin, owner: "C", entry: qentry{"t1", "C", 5000}, qu: 5000})
		h.acq("B", 1500, 2500, 0) // C waits, live, and B is no head
	}},
	{ruleOwnOwner, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeAcquire, owner: "B", now: 500, exp: 1500, base: 100, gid: "gb"}) // not B's lease
	}},
	{ruleOwnNotNewer, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.acq("A", 600, 1600, 0)
		h.add(&storeOp{kind: storeAcquire, owner: "A", now: 700, iss: 300, exp: 1700, base: 100, gid: "late"}) // issued before the lease at 600
	}},
	{ruleOwnNotForced, func(h *mhist) {
		h.acq("A", 0, 1000, 2000)
		h.add(&storeOp{kind: storeForce, now: 200}) // ends it, free at 2200
		h.acq("A", 300, 1300, 0)                    // A's own, but an operator ended it
	}},
	{ruleOwnLive, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeJoin, owner: "C", entry: qentry{"t1", "C", 5000}, qu: 5000})
		h.acq("A", 1500, 2500, 0) // A's own, but expired while C waits
	}},
	{ruleTokenBump, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		b := h.acq("B", 1500, 2500, 0)
		l := leaseState{owner: "B", token: 101, acquired: 1500, renewed: 1500, expires: 2500} // the token not raised
		if h.sem {
			it := &semItem{exists: true, permits: 1, counter: 101}
			it.slots[0] = l
			b.sem.item, b.sem.partial = it, true
		} else {
			b.item = &storeItem{leaseState: l}
		}
	}},
	{ruleHolderOwner, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeRenew, owner: "B", now: 500, exp: 1500})
	}},
	{ruleHolderLive, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeRenew, owner: "A", now: 1500, exp: 2500}) // expired at 1000
	}},
	{ruleHolderNotNewer, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.acq("A", 600, 1600, 0)
		h.add(&storeOp{kind: storeRenew, owner: "A", now: 300, exp: 1300}) // issued before the lease at 600
	}},
	{ruleHolderToken, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeRelease, owner: "A", now: 500, tok: 999})
	}},
	{ruleRenewNotRecorded, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeSettle, now: 1200, tok: 101})            // a watch told of its end
		h.add(&storeOp{kind: storeRenew, owner: "A", now: 900, exp: 1900}) // issued in time, landed late
	}},
	{ruleRecordExpired, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeSettle, now: 500, tok: 101}) // live at 500
	}},
	{ruleForceLive, func(h *mhist) {
		h.acq("A", 0, 1000, 0)
		h.add(&storeOp{kind: storeRelease, owner: "A", now: 500})
		h.add(&storeOp{kind: storeForce, now: 600}) // nothing live to end
	}},
}

// TestLeaseStepMutations shows that each rule of the lease step can fail:
// for each rule, a crafted history that breaks only it is not
// linearizable, for a lock and for a semaphore's slot alike, and with that
// one rule left out of the step (the mutation) the same history passes, so
// it is that rule which catches the breach. Every rule has its row.
func TestLeaseStepMutations(t *testing.T) {
	covered := map[leaseRule]bool{}
	for _, m := range leaseMutations {
		covered[m.rule] = true
		for _, kind := range []string{"Lock", "Slot"} {
			t.Run(kind+"/"+string(m.rule), func(t *testing.T) {
				h := &mhist{sem: kind == "Slot"}
				m.build(h)
				if h.legal(leaseRules{}) {
					t.Errorf("the history that breaks %q passed the full lease step", m.rule)
				}
				if !h.legal(leaseRules{off: m.rule}) {
					t.Errorf("without %q the history still fails: another rule catches it, so the row does not show this one", m.rule)
				}
				// Without the breaking write, the history is legal.
				h.ops = h.ops[:len(h.ops)-1]
				if !h.legal(leaseRules{}) {
					t.Errorf("the history before the breaking write fails the full lease step")
				}
			})
		}
	}
	for _, r := range leaseRuleList {
		if !covered[r] {
			t.Errorf("rule %q has no mutation row", r)
		}
	}
}
