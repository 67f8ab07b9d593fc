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

// The sequential model of one lock, for porcupine.
//
// What is checked. The history is partitioned by resource (locks are
// independent), and each partition holds two kinds of operations:
//
//   - every write and every consistent read the store received (from the
//     proxy's records; a waiting acquire's eventually consistent peeks
//     are hints the service only acts on through a conditional write, so
//     they are left out), with
//     its window [sent to the store, answer read] and the store's real
//     answer: committed with the returned item, condition failed, or (the
//     proxy could not read the answer) unknown, which may or may not have
//     been applied and so gets a window open to the end of the history;
//   - every status answer (200 with a lease, or 404) a client got, with
//     its window [invoke, return] on the client's clock.
//
// The state is the lock item: whether it exists, its lease (owner,
// fencing token, acquired_at, renewed_at, expires_at, lock-delay and
// free_at, released, force released, expiry recorded: leasestep.go, whose
// rules the semaphore model applies to each slot as well), and the queue
// of waiters (fair waiting: each entry's ticket, owner and until) with
// queue_until. The model is the documented lock rules (README "One write
// decides every outcome", locklogic/doc.go "Late writes", docs/design.md
// "Fair waiting"), written independently of DynamoDB's condition language:
// an acquire takes a lock that is absent, or released or expired (past
// its lock-delay) while no
// live waiter is queued (the queue empty, or queue_until passed), or held
// by the same owner under a grant and a renewal not newer than the
// request's issue time (:iss, the request's arrival: every write of a wait
// carries the same one), or by the lease this very request wrote (its
// grant id :gid: an SDK retry of a write that landed) — while live waiters
// are queued, only its own live lease; it sets the lease and bumps the
// token by exactly one (from :base when the item is absent). The head of
// the queue's grant (an acquire with a ticket) takes a released or expired
// lock when the first entry is its live place, and removes that entry. A
// join appends an entry to the queue of the size the waiter saw, a keep
// moves the until of the caller's own live entry, a prune removes lapsed
// entries at the front by their tickets; none of them touches the lease.
// A watch's record of an expiry (expired_at) needs the lease it read (its
// token) expired by its :now and ended by no write, and ends it for good.
// A renew and a release need the owner, a live lease (by their :now), a
// grant not newer than the request (for a renew also a renewal not newer
// and no such record), and the token when one is given.
//
// The model believes the :iss and :gid each write carries: a service that
// sent a wrong issue time (a wait's :now, say) would be linearizable with
// it. The late-write rule (latewrite.go) checks the issue time without
// reading :iss, from the grant answers and the proxy's clock.
//
// Time. Expiry depends on time, and a linearization point is not a time
// the service ever looked at. So each write carries its own :now — the
// exact value the service put into its condition, read from the proxy's
// record of the request — and the model decides "expired" with that :now,
// not with the point where porcupine places the write. That is what the
// store does too: it compares expires_at with the request's :now, whenever
// the request lands (so a late write is judged by the time it was issued,
// which is what the late-write rule needs). A store read returns the item
// whatever the time. A client's status answer depends on the serving
// instance's clock at some moment of the call, which no record shows; the
// model allows any :now in [invoke, return] shifted by that instance's
// offset (one ms of slack each side for the service's millisecond
// truncation): a lease shown live must expire after the earliest such
// :now, and a 404 needs no lease, a released one, or one expired by the
// latest such :now.
//
// Together with the no-false-grant rule (every success a client got is
// one of these store requests), a linearizable store history means the
// clients saw the lock behave as one lock with the documented rules.

// lockState is the model's state: one lock item, its lease and its queue
// (fair waiting).
type lockState struct {
	exists bool
	leaseState
	queueState
}

func (s lockState) String() string {
	if !s.exists {
		return "{absent}"
	}
	r := ""
	if s.queue != "" {
		r = fmt.Sprintf(" queue:%s queue_until:%d version:%d", queueString(s.queue), s.queueUntil, s.version)
	}
	return "{" + s.leaseState.String() + r + "}"
}

func (s lockState) item() storeItem {
	return storeItem{leaseState: s.leaseState, queue: s.queue, queueUntil: s.queueUntil}
}

// linInput is a porcupine operation's input: a store request, or a client's
// status call.
type linInput struct {
	store *storeOp
	// status, for a client status call: the op and the range of the
	// serving instance's :now.
	status       *Op
	nowLo, nowHi int64
}

// step is the model: the states the lock may be in after in produced out
// from state s (none when it cannot), under the lease step's rules rs.
func step(s lockState, in linInput, rs leaseRules) []lockState {
	if op := in.status; op != nil {
		switch {
		case op.Status == 200:
			l := op.Lock
			if s.exists && s.live(in.nowLo) && s.owner == l.Owner && s.token == l.Token && s.acquired == l.AcquiredAt && s.expires == l.ExpiresAt {
				return []lockState{s}
			}
		case !s.exists || s.released || s.forced || s.ended || s.expires <= in.nowHi:
			return []lockState{s}
		}
		return nil
	}
	w := in.store
	var (
		ok   bool
		next = s
	)
	switch w.kind {
	case storeRead:
		if w.outcome != applied {
			return []lockState{s}
		}
		if (w.item == nil && !s.exists) || (w.item != nil && s.exists && w.item.same(s.item())) {
			return []lockState{s}
		}
		return nil
	case storeAcquire:
		if w.ticket != "" {
			// The head of the queue takes a free lock, its entry (its
			// ticket, its owner) first and live, and leaves the queue.
			var took bool
			took, next.queueState = s.queueState.headTake(w)
			ok = s.exists && took && rs.acquire(s.leaseState, w, false, true, false)
		} else {
			ok = !s.exists || rs.acquire(s.leaseState, w, s.open(w.now), false, false)
		}
		var prev int64
		if s.exists {
			prev = s.token
		}
		next.exists, next.leaseState = true, grant(w, rs.nextToken(prev, w))
	case storeJoin, storeKeep, storePrune, storeLeave:
		ok, next.queueState = s.queueState.step(w, s.exists)
	case storeSettle:
		ok = s.exists && rs.record(s.leaseState, w.tok, w.now)
		next.ended = true
	case storeRenew:
		ok = s.exists && rs.holder(s.leaseState, w, true)
		next.leaseState = renew(s.leaseState, w)
	case storeRelease:
		ok = s.exists && rs.holder(s.leaseState, w, false)
		next.leaseState = release(s.leaseState, w)
	case storeForce:
		ok = s.exists && rs.forceOK(s.leaseState, w)
		next.leaseState = force(s.leaseState, w)
	}
	switch w.outcome {
	case applied:
		// A committed acquire, renew or queue write returns the new item
		// (ALL_NEW); it must be exactly the model's.
		if !ok || (w.item != nil && !w.item.same(next.item())) {
			return nil
		}
		return []lockState{next}
	case refused:
		if ok {
			return nil
		}
		return []lockState{s}
	case unknownOutcome:
		if ok {
			return []lockState{s, next}
		}
		return []lockState{s}
	}
	return []lockState{s} // notSent, failedOther: nothing changed
}

// lockModel is the porcupine model of one lock under the lease step's
// rules rs.
func lockModel(rs leaseRules) porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{lockState{}} },
		Step: func(state, input, _ interface{}) []interface{} {
			var out []interface{}
			for _, s := range step(state.(lockState), input.(linInput), rs) {
				out = append(out, s)
			}
			return out
		},
		Hash: func(state interface{}) uint64 {
			h := fnv.New64a()
			fmt.Fprint(h, state.(lockState))
			return h.Sum64()
		},
		DescribeState: func(state interface{}) string { return state.(lockState).String() },
	}).ToModel()
}

// linearizable checks each resource's partition with porcupine.
func (c *checker) linearizable() {
	ns := func(t time.Time) int64 { return int64(t.Sub(c.h.Start)) }
	parts := map[string][]porcupine.Operation{}
	for _, s := range c.store {
		if s.outcome == notSent || s.outcome == failedOther || s.sem != nil || s.rw != nil {
			continue // the store never changed for it; semaphores: semmodel.go; read/write locks: rwcheck.go
		}
		if s.kind == storeRead && !s.full {
			continue // a waiter's eventually consistent peek: a hint, no evidence
		}
		ret := ns(s.rec.Answered)
		if s.outcome == unknownOutcome {
			ret = math.MaxInt64 / 2
		}
		parts[s.resource] = append(parts[s.resource], porcupine.Operation{Input: linInput{store: s}, Call: ns(s.rec.Sent), Return: ret})
	}
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		if op.Kind != Status || op.Err != "" || (op.Status != 200 && op.Status != 404) || (op.Status == 200 && op.Lock == nil) {
			continue
		}
		var off time.Duration
		if op.Instance < len(c.h.Offsets) {
			off = c.h.Offsets[op.Instance]
		}
		in := linInput{status: op, nowLo: op.Invoke.Add(off).UnixMilli() - 1, nowHi: op.Return.Add(off).UnixMilli() + 1}
		parts[op.Resource] = append(parts[op.Resource], porcupine.Operation{Input: in, Call: ns(op.Invoke), Return: ns(op.Return)})
	}
	names := make([]string, 0, len(parts))
	for r := range parts {
		names = append(names, r)
	}
	sort.Strings(names)
	defer c.semLinearizable()
	for _, r := range names {
		res, info := porcupine.CheckOperationsVerbose(lockModel(c.opt.rules), parts[r], c.opt.LinearizabilityTimeout)
		c.rep.Linearizable[r] = verdicts[res]
		if res == porcupine.Illegal {
			c.report(RuleLinearizable, r, "the store's history and the status answers are not linearizable against the one-lock model", c.linExcerpt(parts[r], info)...)
		}
	}
}

// linExcerpt explains an illegal partition: the end of the longest
// sequence porcupine could linearize, the state it reached, and the
// operations that could not follow it.
func (c *checker) linExcerpt(ops []porcupine.Operation, info porcupine.LinearizationInfo) []string {
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
		in := o.Input.(linInput)
		if in.status != nil {
			return c.opLine(in.status) + fmt.Sprintf(" (its :now in [%d, %d])", in.nowLo, in.nowHi)
		}
		return in.store.format(c.h.Start)
	}
	var ex []string
	states := []lockState{{}}
	for i, o := range longest {
		var next []lockState
		for _, s := range states {
			next = append(next, step(s, o.Input.(linInput), c.opt.rules)...)
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
	done := map[linInput]bool{}
	for _, o := range longest {
		done[o.Input.(linInput)] = true
	}
	var rest []porcupine.Operation
	for _, o := range ops {
		if !done[o.Input.(linInput)] {
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
