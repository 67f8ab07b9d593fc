package chaos

// The lease step: the documented rules of one lease, written once, for the
// lock model (model.go: the lock item's lease) and the semaphore model
// (semmodel.go: each slot's permit). A lock and a slot differ only in what
// surrounds the lease (a slot has N, the counter and the owner markers
// beside it), never in the rules of the lease itself (README "One write
// decides every outcome", locklogic/doc.go "Late writes", docs/design.md
// "Lock-delay", "Force release", "Watch", "Fair waiting" and
// "Semaphores"). Each write is judged with its own :now, as the store
// judges it (model.go, "Time").
//
// Every rule has a name (leaseRule); leaseRules can leave one out, which
// only the mutation test does (TestLeaseStepMutations): with a rule left
// out, the history that breaks it passes, so each rule is shown to be the
// one that catches its breach.

// leaseState is one lease as a model holds it, and as the store returned
// it: who holds it, its fencing token, the :now of its grant and of its
// latest renewal, its expiry, its lock-delay and free_at (expires_at +
// lock_delay, or the release time; 0: the item has none), whether it was
// released, force released or its expiry recorded by a watch (expired_at,
// y<k>), and the grant id of the request that wrote it. The zero value is
// a lease never taken.
type leaseState struct {
	owner, gid                        string
	token, acquired, renewed, expires int64
	delay, freeAt                     int64
	released, forced, ended           bool
}

// taken reports whether the lease was ever granted.
func (l leaseState) taken() bool { return l.owner != "" }

// live reports whether the lease is live at now: taken, ended by no write
// and not expired.
func (l leaseState) live(now int64) bool {
	return l.taken() && !l.released && !l.forced && !l.ended && l.expires > now
}

// shown is the lease as a store's answer is compared with the model's:
// its holder, token, times and end. The grant id, lock-delay and free_at
// are judged through the outcomes of the writes they decide (a retry that
// finds its own grant, a grant refused inside a lock-delay), not by
// equality with every answer.
func (l leaseState) shown() leaseState {
	l.gid, l.delay, l.freeAt = "", 0, 0
	return l
}

// leaseRule names one rule of the lease step.
type leaseRule string

// The lease step's rules.
const (
	// A grant takes a free lease: never taken, released, or expired ...
	ruleFreeExpired leaseRule = "free: a lease keeps others out until it expires"
	// ... and past its lock-delay (free_at).
	ruleFreeLockDelay leaseRule = "free: an expired lease keeps others out until free_at"
	// A grant takes a free lease only while no live waiter is queued (the
	// head of the queue aside).
	ruleFreeQueue leaseRule = "free: no grant past a live place in the queue"
	// A same-owner re-acquire replaces only its owner's lease ...
	ruleOwnOwner leaseRule = "own: the owner's own lease"
	// ... granted and renewed no later than the request's issue time, or
	// written by this very request (its grant id) ...
	ruleOwnNotNewer leaseRule = "own: not newer than the request"
	// ... not force released ...
	ruleOwnNotForced leaseRule = "own: not force released"
	// ... and, while live waiters are queued, only its live lease, which
	// a recorded expiry ended.
	ruleOwnLive leaseRule = "own: past the queue only while live, expiry not recorded"
	// Every grant raises the token by exactly one.
	ruleTokenBump leaseRule = "grant: the token goes up by one"
	// Renew and release: the caller's lease ...
	ruleHolderOwner leaseRule = "holder: the caller's lease"
	// ... live by the write's :now, not released or force released ...
	ruleHolderLive leaseRule = "holder: live at the write's :now"
	// ... granted (for a renew: and renewed) no later than the write ...
	ruleHolderNotNewer leaseRule = "holder: not newer than the write"
	// ... with the token when one is given.
	ruleHolderToken leaseRule = "holder: the token given"
	// A renew does not revive a lease whose expiry a watch recorded.
	ruleRenewNotRecorded leaseRule = "renew: no revival after a recorded expiry"
	// A watch records the expiry of the lease it read (its token), expired
	// by its :now and ended by no write.
	ruleRecordExpired leaseRule = "record: the lease read, expired, not ended"
	// A force release ends a live lease (an immediate one, also one in its
	// lock-delay) not newer than itself, with the token when given.
	ruleForceLive leaseRule = "force: a live lease not newer than the write"
)

// leaseRuleList is every rule, in the order above.
var leaseRuleList = []leaseRule{ruleFreeExpired, ruleFreeLockDelay, ruleFreeQueue, ruleOwnOwner, ruleOwnNotNewer, ruleOwnNotForced,
	ruleOwnLive, ruleTokenBump, ruleHolderOwner, ruleHolderLive, ruleHolderNotNewer, ruleHolderToken, ruleRenewNotRecorded,
	ruleRecordExpired, ruleForceLive}

// leaseRules is the lease step with every rule but off ("": all of them).
type leaseRules struct{ off leaseRule }

// has reports whether rule r is in force.
func (rs leaseRules) has(r leaseRule) bool { return rs.off != r }

// free reports whether the lease keeps nobody out at now: never taken,
// released, or expired with its lock-delay passed.
func (rs leaseRules) free(l leaseState, now int64) bool {
	if !l.taken() || l.released {
		return true
	}
	expired := l.expires <= now || !rs.has(ruleFreeExpired)
	delayed := l.freeAt > now && rs.has(ruleFreeLockDelay)
	return expired && !delayed
}

// own reports whether w may replace l as its owner's re-acquire: l is
// w's owner's, not force released, and granted and renewed no later than
// w's issue time, or written by w's own request.
func (rs leaseRules) own(l leaseState, w *storeOp) bool {
	return (l.owner == w.owner || !rs.has(ruleOwnOwner)) && (!l.forced || !rs.has(ruleOwnNotForced)) &&
		((l.acquired <= w.iss && l.renewed <= w.iss) || (w.gid != "" && l.gid == w.gid) || !rs.has(ruleOwnNotNewer))
}

// acquire reports whether the acquire w may take l: open says no live
// waiter is queued at w's :now. A plain acquire takes a free lease while
// the queue is open, or replaces its owner's (own) while the queue is open
// or that lease is live with no recorded expiry. The head of the queue
// (head, its place checked by the caller) takes a free lease, or with
// headOwn (a semaphore slot's head) its owner's as well.
func (rs leaseRules) acquire(l leaseState, w *storeOp, open, head, headOwn bool) bool {
	open = open || !rs.has(ruleFreeQueue)
	if head {
		return rs.free(l, w.now) || (headOwn && rs.own(l, w))
	}
	ownLive := (!l.released && !l.ended && l.expires > w.now) || !rs.has(ruleOwnLive)
	return (rs.free(l, w.now) && open) || (rs.own(l, w) && (open || ownLive))
}

// grant is the lease w writes, with token.
func grant(w *storeOp, token int64) leaseState {
	l := leaseState{owner: w.owner, gid: w.gid, token: token, acquired: w.now, renewed: w.now, expires: w.exp}
	if w.delay > 0 {
		l.delay, l.freeAt = w.delay, w.exp+w.delay
	}
	return l
}

// nextToken is the token a grant writes after prev (0: none yet, then
// the write's base + 1).
func (rs leaseRules) nextToken(prev int64, w *storeOp) int64 {
	if prev == 0 {
		return w.base + 1
	}
	if !rs.has(ruleTokenBump) {
		return prev // a broken store's: any token will do
	}
	return prev + 1
}

// holder reports whether the renew or release w acts on l: the caller's
// lease, live at w's :now, not newer than w (extends: a renew, whose
// renewal must not be newer either, and which revives no recorded
// expiry), with w's token if it gives one.
func (rs leaseRules) holder(l leaseState, w *storeOp, extends bool) bool {
	ok := l.taken() && (l.owner == w.owner || !rs.has(ruleHolderOwner)) &&
		((!l.released && !l.forced && l.expires > w.now) || !rs.has(ruleHolderLive)) &&
		((l.acquired <= w.now && (!extends || l.renewed <= w.now)) || !rs.has(ruleHolderNotNewer)) &&
		(w.tok == 0 || l.token == w.tok || !rs.has(ruleHolderToken))
	if extends {
		ok = ok && (!l.ended || !rs.has(ruleRenewNotRecorded))
	}
	return ok
}

// renew is l renewed by w: its expiry and free_at moved, its renewal
// stamped.
func renew(l leaseState, w *storeOp) leaseState {
	l.expires, l.renewed, l.freeAt = w.exp, w.now, w.exp+l.delay
	return l
}

// release is l released by w: it ends at w's :now and is free at once.
func release(l leaseState, w *storeOp) leaseState {
	l.expires, l.released, l.freeAt = w.now, true, w.now
	return l
}

// record reports whether a watch's write may record the expiry of l at
// now, having read token tok: l is that lease, expired, ended by no write.
func (rs leaseRules) record(l leaseState, tok, now int64) bool {
	return (l.taken() && l.token == tok && l.expires <= now && !l.released && !l.forced && !l.ended) || !rs.has(ruleRecordExpired)
}

// forceOK reports whether the force release w may end l: not released,
// not newer than w, with w's token if given; an immediate one while l is
// live or in its lock-delay, a plain one while l is live and was not
// force released (nor its expiry recorded).
func (rs leaseRules) forceOK(l leaseState, w *storeOp) bool {
	if !rs.has(ruleForceLive) {
		return l.taken()
	}
	ok := l.taken() && !l.released && l.acquired <= w.now && (w.tok == 0 || l.token == w.tok)
	if w.immediate {
		return ok && (l.expires > w.now || l.freeAt > w.now)
	}
	return ok && l.expires > w.now && !l.forced && !l.ended
}

// force is l force released by w: it ends at w's :now; an immediate one
// frees it at once, a plain one keeps its lock-delay.
func force(l leaseState, w *storeOp) leaseState {
	l.forced, l.expires = true, w.now
	if w.immediate {
		l.released, l.freeAt = true, w.now
	} else {
		l.renewed, l.freeAt = w.now, w.now+l.delay
	}
	return l
}

// queueState is the queue of waiters on an item (fair waiting): its
// entries (encoded as in storeItem), queue_until (0: none) and the
// queue's version (0 before the first join), which only decides which
// queue writes may commit.
type queueState struct {
	queue      string
	queueUntil int64
	version    int64
}

// open reports whether no live waiter is queued at now: the queue is
// empty, or every place has lapsed by queue_until (which is at least every
// entry's until). A lapsed place still in the list does not keep a plain
// acquire out.
func (q queueState) open(now int64) bool {
	es, _ := parseQueue(q.queue)
	return len(es) == 0 || (q.queueUntil != 0 && q.queueUntil <= now)
}

// lowered applies the lowering of queue_until a write that removes
// entries may carry: conditioned on the version it saw, it sets
// queue_until. It reports whether that condition holds.
func (q queueState) lowered(w *storeOp, next *queueState) bool {
	if !w.versioned {
		return true
	}
	next.queueUntil = w.qu
	return q.version == w.qv
}

// headTake reports whether the head's grant w finds its place first and
// live, and returns the queue without it.
func (q queueState) headTake(w *storeOp) (bool, queueState) {
	es, _ := parseQueue(q.queue)
	ok := len(es) > 0 && es[0].id == w.ticket && es[0].owner == w.owner && es[0].until > w.now
	next := q
	if ok {
		next.queue = encodeQueue(es[1:])
	}
	return ok && q.lowered(w, &next), next
}

// step applies one of the queue's own writes (join, keep, prune, leave),
// which change no lease; exists says the item exists.
func (q queueState) step(w *storeOp, exists bool) (bool, queueState) {
	es, _ := parseQueue(q.queue)
	next := q
	ok := false
	switch w.kind {
	case storeJoin:
		// A waiter joins at the back of the queue it saw (its version),
		// and sets queue_until and the next version.
		ok = exists && q.version == w.qv
		next.queue, next.queueUntil, next.version = encodeQueue(append(es[:len(es):len(es)], w.entry)), w.qu, q.version+1
	case storeKeep:
		// A waiter's next round moves the until of its own live place.
		i := w.index
		ok = exists && i >= 0 && i < len(es) && es[i].id == w.ticket && es[i].owner == w.owner && es[i].until > w.now && q.version == w.qv
		if ok {
			es = append([]qentry(nil), es...)
			es[i].until = w.qt
			next.queue, next.queueUntil, next.version = encodeQueue(es), w.qu, q.version+1
		}
	case storePrune:
		// The lapsed places at the front, each by its ticket, go.
		ok = exists && len(w.pruned) > 0 && len(w.pruned) <= len(es)
		for j := 0; ok && j < len(w.pruned); j++ {
			ok = es[j].id == w.pruned[j] && es[j].until <= w.now
		}
		if ok {
			next.queue = encodeQueue(es[len(w.pruned):])
		}
		ok = ok && q.lowered(w, &next)
	case storeLeave:
		// A waiter whose wait ended without a grant removes its own place.
		i := w.index
		ok = exists && i >= 0 && i < len(es) && es[i].id == w.ticket && es[i].owner == w.owner
		if ok {
			next.queue = encodeQueue(append(es[:i:i], es[i+1:]...))
		}
		ok = ok && q.lowered(w, &next)
	}
	return ok, next
}
