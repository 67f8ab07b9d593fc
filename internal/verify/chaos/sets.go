package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// The lock sets' own rules. Every name of a set is a lock, judged by the
// lock rules through the set calls' members (setops.go); these judge a
// set call as a whole:
//
//   - set held (RuleSetHeld): a set answered granted held all its names
//     from the answer on, until its earliest end: for each name, no write
//     that ended the lease the answer lists (a release of it, the next
//     grant of the name) surely landed before the set's end, which is the
//     earliest end of its names' holds (holds: invoke + ttl - margin of
//     the grant, moved by renewals, ended by a refused renewal or the
//     release). A set that answers granted after giving a name back, or
//     before it took one, breaks it;
//   - set rollback (RuleSetRollback): a set answered refused (or failed,
//     503) holds nothing but the names it says it could not release
//     (unreleased): every lease an acquire write of its request committed
//     on a name ended within the request: it expired before the answer on
//     every instance's clock, or was released (or found expired by its
//     release's :now, or replaced by a newer grant that committed before
//     its release was sent, which the store then refused), or was taken
//     again by a later try of the same request, whose lease is judged in
//     turn. A write the proxy held past its caller (a late write) is the
//     documented window of a request that died part-way, and is counted,
//     not judged;
//   - set progress (RuleSetProgress): every set owner that keeps asking is
//     granted at least once every Options.SetGap (10 s): from the first
//     acquire of an ask (Op.Ask: one set of names, from its try on) to the
//     answer that grants it (or to the ask's last answer when none does,
//     if it asked that long). Only asks that wait at the service are
//     judged: a poll keeps no place in any queue, and a fair queue owes it
//     nothing, as it owes a lock's try nothing. The report has the longest
//     such wait (SetMaxWait).

// setCalls returns the set calls of the history (not their members).
func (c *checker) setCalls() []*Op {
	var out []*Op
	for i := range c.h.Ops {
		if op := &c.h.Ops[i]; op.Kind.Set() {
			out = append(out, op)
		}
	}
	return out
}

// setLimit is how long a set call may take: a try's writes and its
// rollback within api.LockSetBudget, after a waiting round's wait, plus the
// rollback's own locklogic.SetRollbackBudget and the slack.
func (c *checker) setLimit(op *Op) (time.Duration, string) {
	limit := api.LockSetBudget + c.opt.Slack
	what := fmt.Sprintf("the %v lock set budget plus %v", api.LockSetBudget, c.opt.Slack)
	if op.Kind == SetAcquire {
		limit = time.Duration(op.Wait)*time.Second + api.LockSetBudget + locklogic.SetRollbackBudget + c.opt.Slack
		what = fmt.Sprintf("its %d s wait plus the %v lock set budget and the %v rollback budget plus %v", op.Wait, api.LockSetBudget, locklogic.SetRollbackBudget, c.opt.Slack)
	}
	return limit, what
}

// setHeld checks RuleSetHeld.
func (c *checker) setHeld() {
	// The holds each granted name started: its member's.
	holdOf := map[int]Hold{}
	for _, hs := range c.holds() {
		for _, h := range hs {
			holdOf[h.Ops[0]] = h
		}
	}
	members := map[int][]*Op{}
	for i := range c.h.Ops {
		if m := &c.h.Ops[i]; m.Member && m.Kind == Acquire {
			members[m.Call] = append(members[m.Call], m)
		}
	}
	for _, op := range c.setCalls() {
		if op.Kind != SetAcquire || !op.Granted {
			continue
		}
		c.rep.SetGrants++
		end := op.Return.Add(time.Duration(op.TTL) * time.Second) // later than any hold's end
		ms := members[op.Call]
		for _, m := range ms {
			h, ok := holdOf[m.ID]
			if !ok {
				end = op.Return // the name's hold was empty: nothing relied on
				break
			}
			end = minTime(end, h.End)
		}
		if !end.After(op.Return) || len(ms) == 0 {
			continue
		}
		for _, m := range ms {
			h := c.history(m.Resource)
			i := h.byToken(m.Lock.Token)
			if i < 0 {
				continue // no write shows the lease: no-false-grant reports it
			}
			l := h.leases[i]
			var ender *storeOp
			for _, r := range l.releases {
				if r.outcome == applied && r.rec.Answered.Before(end) {
					ender = r
				}
			}
			if n := h.next(i); ender == nil && n != nil && n.acquire.rec.Answered.Before(end) {
				ender = n.acquire
			}
			if ender == nil {
				continue
			}
			ex := []string{c.opLine(op), fmt.Sprintf("the set's end (the earliest of its names' holds): %s", at(c.h.Start, end)),
				"the write that ended its lease of " + m.Resource + ":", ender.format(c.h.Start),
				"the committed writes on " + m.Resource + " during the call and after:"}
			ex = append(ex, c.storeLines(m.Resource, op.Invoke, end, true, 8)...)
			c.report(RuleSetHeld, m.Resource, fmt.Sprintf("%s's set %q was answered granted, but its lease of %s (token %d) ended at %s, before the set's end %s",
				op.Owner, op.Names, m.Resource, m.Lock.Token, at(c.h.Start, ender.rec.Answered), at(c.h.Start, end)), ex...)
		}
	}
}

// setRollback checks RuleSetRollback.
func (c *checker) setRollback() {
	for _, op := range c.setCalls() {
		if op.Kind != SetAcquire || op.Err != "" || op.Granted || (op.Status != 200 && op.Status != 503) {
			continue
		}
		if op.Status == 200 {
			c.rep.SetRefusals++
		}
		for _, name := range op.Names {
			if slices.Contains(op.Unreleased, name) {
				continue
			}
			h := c.history(name)
			for i, l := range h.leases {
				a := l.acquire
				if a.owner != op.Owner || a.rec.Received.Before(op.Invoke) || a.rec.Received.After(op.Return) {
					continue
				}
				if a.rec.Fault == faultproxy.Late || (a.rec.Fault == faultproxy.Delay && a.rec.CallerStatus == 0) {
					c.rep.SetLateGrants++
					continue
				}
				if c.rolledBack(op, h, i) {
					continue
				}
				ex := []string{c.opLine(op), "its grant of " + name + ":", a.format(c.h.Start), "the store requests on " + name + " during the call and after:"}
				ex = append(ex, c.storeLines(name, op.Invoke, op.Return.Add(time.Second), false, 10)...)
				c.report(RuleSetRollback, name, fmt.Sprintf("%s's set %q was answered %s, but its lease of %s (token %d) was not released within the request, nor listed unreleased",
					op.Owner, op.Names, outcomeName(op), name, l.token), ex...)
			}
		}
	}
}

// rolledBack reports whether the i-th lease of h, granted by the set call
// op, ended within the call: it expired before the answer (a lease held
// while waiting whose TTL ran out while the round's store calls were
// slow), a release of it that may have landed was sent during the call,
// or its owner's release found it expired or replaced by a newer grant,
// or a later write of the same request took it again.
func (c *checker) rolledBack(op *Op, h *leaseHistory, i int) bool {
	l := h.leases[i]
	in := func(s *storeOp) bool { return !s.rec.Received.Before(op.Invoke) && !s.rec.Received.After(op.Return) }
	for _, r := range l.releases {
		if in(r) {
			return true
		}
	}
	if slices.Max(l.exps) <= op.Return.Add(c.slowestOffset()).UnixMilli() {
		return true // expired before the answer, on every instance's clock
	}
	n := h.next(i)
	if n != nil && n.owner == op.Owner && n.acquire.gid == l.acquire.gid && in(n.acquire) {
		return true // a later try (or an SDK retry) of the request: judged in turn
	}
	for _, s := range c.byRes[l.acquire.resource] {
		if s.kind != storeRelease || s.owner != op.Owner || !in(s) || !s.rec.Sent.After(l.acquire.rec.Answered) {
			continue
		}
		if slices.Max(l.exps) <= s.now {
			return true // expired by the time the rollback reached it
		}
		if s.outcome == refused && s.tok == l.token && n != nil && n.acquire.rec.Answered.Before(s.rec.Sent) {
			// Replaced before the rollback was sent: the next grant
			// committed first (expired on the clock of the instance
			// that granted it, 80 ms ahead, or the release was held in
			// flight), and the release was refused for it.
			return true
		}
	}
	return false
}

// slowestOffset is the smallest of the instances' clock offsets: a lease
// has ended on every instance's clock by real time t when it expires by
// t plus it.
func (c *checker) slowestOffset() time.Duration {
	if len(c.h.Offsets) == 0 {
		return 0
	}
	return slices.Min(c.h.Offsets)
}

// setAskPause is the longest pause between a set owner's answer and its
// next acquire of the same ask in which it still keeps asking: a set
// client asks again at once or after at most 50 ms (setclient.go); a
// longer pause is the run's own, between phases (the clients stopped
// while the proxy settled), and ends the wait.
const setAskPause = time.Second

// setProgress checks RuleSetProgress and measures the longest wait: from
// an ask's first acquire to its grant, over acquires each sent within
// setAskPause of the previous one's answer, for asks that wait at the
// service.
func (c *checker) setProgress() {
	byOwner := map[string][]*Op{}
	for _, op := range c.setCalls() {
		if op.Phase != PhaseFinal && op.Kind == SetAcquire {
			byOwner[op.Owner] = append(byOwner[op.Owner], op)
		}
	}
	owners := make([]string, 0, len(byOwner))
	for o := range byOwner {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	gap := c.opt.setGap()
	for _, o := range owners {
		var first *Op // the first acquire of the current wait (nil: none)
		var last *Op  // the latest acquire of it
		waits := false
		judge := func(until time.Time, granted *Op) {
			if first == nil || !waits {
				return
			}
			w := until.Sub(first.Invoke)
			if w > c.rep.SetMaxWait {
				c.rep.SetMaxWait, c.rep.SetMaxWaitOwner = w, o
			}
			if w > gap {
				what := "was still not granted at its last answer"
				if granted != nil {
					what = "was granted only then"
				}
				ex := []string{"its first ask: " + c.opLine(first)}
				if granted != nil {
					ex = append(ex, "the grant: "+c.opLine(granted))
				} else {
					ex = append(ex, "its last ask: "+c.opLine(last))
				}
				c.report(RuleSetProgress, c.setsResource(), fmt.Sprintf("set owner %s asked from %s and %s, %v later (more than %v)",
					o, at(c.h.Start, first.Invoke), what, w.Round(time.Millisecond), gap), ex...)
			}
		}
		for _, op := range byOwner[o] {
			if first != nil && (op.Ask != first.Ask || op.Invoke.Sub(last.Return) > setAskPause) {
				// Another ask, or the owner stopped asking (the run
				// between its phases): the wait so far is judged, and a
				// new one begins.
				judge(last.Return, nil)
				first = nil
			}
			if first == nil {
				first, waits = op, false
			}
			last = op
			waits = waits || op.Wait > 0
			if op.Granted {
				judge(op.Return, op)
				first = nil
			}
		}
		if last != nil && first != nil {
			judge(last.Return, nil)
		}
	}
}

// setsResource names the resources a set rule's report is about: the sets' prefix.
func (c *checker) setsResource() string {
	for _, op := range c.setCalls() {
		return op.Resource
	}
	return ""
}
