package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// The rules the checker enforces; a Violation names one.
const (
	// RuleMutualExclusion: no two owners hold overlapping leases.
	RuleMutualExclusion = "mutual-exclusion"
	// RuleFencing: tokens are unique and grow in real-time order of
	// grants, in the answers and in the committed writes.
	RuleFencing = "fencing"
	// RuleNoFalseGrant: every success is backed by a write or read the
	// store really made inside the request's window: a grant, a release
	// by its own committed write; a renew by its committed write or by a
	// consistent read of the lease a later renewal left; a status by a
	// consistent read.
	RuleNoFalseGrant = "no-false-grant"
	// RuleAnswers: only documented statuses and shapes; store trouble is
	// 503 with Retry-After and a problem body, in time, never a dropped
	// connection.
	RuleAnswers = "answers"
	// RuleRecovery: once the faults stop, requests succeed again and every
	// lock becomes free once its leases expire.
	RuleRecovery = "recovery"
	// RuleLinearizable: the store's history and the clients' status reads
	// are linearizable against the sequential model of one lock (model.go).
	RuleLinearizable = "linearizable"
	// RuleLateWrite: a grant never replaces a live lease of its own owner
	// that was granted after the request arrived, however late in a wait
	// its write came (see lateWrite). Judged from the grant answers and
	// the proxy's clock, not from the :iss the service sent.
	RuleLateWrite = "late-write"
	// RuleOneHolder: in the service's history — the writes the store
	// committed, from the proxy's records — no two leases of different
	// owners are live at once on the service's clock (leaders.go).
	// Clients' beliefs may overlap briefly; that is mutual exclusion's
	// business, with the clients' margin.
	RuleOneHolder = "one-holder"
	// RuleWatchOrder: every watcher sees the leases in the history's
	// order: each answer is a lease (or its end) the store committed, as
	// it was at some moment of the call, its index never below the one
	// asked with, and the leases it skipped are exactly those the history
	// has between two answers (leaders.go).
	RuleWatchOrder = "watch-order"
	// RuleFairness: waiters are served in arrival order. In the store's
	// history of each lock — the queue's writes and the grants, from the
	// proxy's records — no grant passes a place that joined the queue
	// before it and was still queued and live: a head's grant goes to the
	// earliest live place, and a plain acquire takes a free lock only
	// while no live place is queued, its owner's re-acquire of its own
	// live lease aside (fairness.go).
	RuleFairness = "fairness"
	// RuleSetHeld: a lock set answered granted held all its names from
	// the answer on, until its earliest end (sets.go).
	RuleSetHeld = "set-held"
	// RuleSetRollback: a lock set answered refused or failed holds none
	// of its names but those it lists unreleased (sets.go).
	RuleSetRollback = "set-rollback"
	// RuleSetProgress: every set owner that keeps asking is granted at
	// least once every Options.SetGap (sets.go).
	RuleSetProgress = "set-progress"
)

// Options configures Check. Zero values are the defaults.
type Options struct {
	// StoreBudget is the service's store budget (api.StoreBudget); an
	// answer may take it plus Slack (500 ms) at most.
	StoreBudget time.Duration
	Slack       time.Duration
	// Margin is the clients' safety margin for a ttl (ClientMargin).
	Margin func(ttl time.Duration) time.Duration
	// LinearizabilityTimeout bounds porcupine per resource (60 s); past
	// it the result is "unknown", reported but not a violation.
	LinearizabilityTimeout time.Duration
	// MaxPerRule is how many violations of one rule are kept in full (5);
	// the rest are only counted.
	MaxPerRule int
	// SetGap is the longest a set owner that keeps asking may go
	// without a grant (10 s; RuleSetProgress).
	SetGap time.Duration
	// Readers is R, the most readers of a read/write lock
	// (locklogic.MaxReaders; RuleRWReaders).
	Readers int
	// rules are the lease step's rules the models apply (all of them,
	// but in the mutation test).
	rules leaseRules
}

func (o Options) setGap() time.Duration {
	if o.SetGap > 0 {
		return o.SetGap
	}
	return 10 * time.Second
}

func (o Options) margin() func(time.Duration) time.Duration {
	if o.Margin != nil {
		return o.Margin
	}
	return ClientMargin
}

// Violation is one breach of a rule, with the excerpt of the history that
// reproduces it: the client operations (invoke..return, request, answer)
// and the store requests (as the proxy saw them, with the store's real
// answer) that show it.
type Violation struct {
	Rule     string
	Resource string
	Summary  string
	Excerpt  []string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: %s", v.Rule, v.Resource, v.Summary)
	for _, l := range v.Excerpt {
		b.WriteString("\n    ")
		b.WriteString(l)
	}
	return b.String()
}

// Report is what Check found.
type Report struct {
	// Violations holds up to Options.MaxPerRule violations of each rule;
	// Counts counts them all, by rule.
	Violations []Violation
	Counts     map[string]int
	// Ops counts the client operations by kind, Outcomes by what came
	// back ("granted", "held", "200", "404", "503", …).
	Ops      map[Kind]int
	Outcomes map[string]int
	// Waiting counts the acquires of a lock that asked the service to
	// wait, SemWaiting those of a permit, RWWaiting those of a read/write
	// lock's lease, LockDelays the acquires (of any) that asked for a
	// lock-delay.
	Waiting, SemWaiting, RWWaiting, LockDelays int
	// ExpiryRecords counts the watches' records of an expiry the store
	// committed (of a lock or of a semaphore's slots); SemQueueWrites
	// the semaphore queues' own writes it committed (joins, keeps,
	// prunes, leaves) and SemHeadGrants the grants to a semaphore
	// queue's head.
	ExpiryRecords, SemQueueWrites, SemHeadGrants int
	// Holds is how many leases clients believed they held, PermitHolds
	// how many semaphore permits.
	Holds, PermitHolds int
	// UnheardGrants counts committed acquires whose caller was not told
	// it was granted (a late write, a lost answer): not violations, but
	// each keeps the lock from others until its ttl.
	UnheardGrants int
	// LateWrites counts requests the proxy delivered after their caller
	// gave up (a Late fault, or a Delay that outlasted the caller), and
	// LateApplied the writes among them the store applied.
	LateWrites, LateApplied int
	// Linearizable is porcupine's verdict per resource ("ok", "illegal",
	// "unknown").
	Linearizable map[string]string
	// Watches counts the watch 200 answers, WatchChanged those with
	// changed:true, WatchSkipped the leases they reported skipped (the
	// token difference − 1 between two answers of a watcher), and
	// WatchedLeases the committed leases of the watched locks.
	Watches, WatchChanged, WatchSkipped, WatchedLeases int
	// CoOwnerWaits counts the waiting acquires during which another client
	// of the same owner was granted the lock (the situation the late-write
	// rule guards for waits), CoOwnerReplaced the grants that replaced a
	// live lease granted to another client of the same owner, as the rule
	// allows (that lease was granted before the request arrived).
	CoOwnerWaits, CoOwnerReplaced int
	// QueueJoins, QueueKeeps, QueuePrunes and HeadGrants count the
	// queue's committed writes (fair waiting). ContestedGrants counts the
	// grants to waiting acquires made while other waiting acquires of the
	// lock were in flight, LongestWaiterGrants those of them that went to
	// the longest waiter (whose rounds, each sending back its place,
	// began first).
	QueueJoins, QueueKeeps, QueuePrunes, HeadGrants int
	ContestedGrants, LongestWaiterGrants            int
	// ContestedReacquires counts the grants to waiting acquires, while
	// others waited, that re-acquired the grantee owner's own lease.
	ContestedReacquires int
	// SetGrants and SetRefusals count the lock sets answered granted and
	// refused, SetWaiting the set acquires that waited, SetLateGrants the
	// grants of a refused or failed set's request that landed after it
	// gave up (late writes: held until their TTL, as documented).
	SetGrants, SetRefusals, SetWaiting, SetLateGrants int
	// SetMaxWait is the longest a set owner asked before it was granted
	// (or until its last answer), SetMaxWaitOwner that owner.
	SetMaxWait      time.Duration
	SetMaxWaitOwner string
	// RWHolds counts the clients' holds of read/write locks' leases,
	// RWReadGrants and RWWriteGrants the readers' and writers' leases the
	// store committed, RWMaxReaders the most readers' holds at once.
	RWHolds, RWReadGrants, RWWriteGrants, RWMaxReaders int
	// RWWriterWaits are the waits of the writers that asked with waiting
	// rounds, from the first ask to the grant; RWWriterMaxWait the
	// longest.
	RWWriterWaits   []time.Duration
	RWWriterMaxWait time.Duration
}

// Total returns the number of violations of every rule.
func (r Report) Total() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// Has reports whether a violation of rule was found.
func (r Report) Has(rule string) bool { return r.Counts[rule] > 0 }

// checker holds a history being checked.
type checker struct {
	h     *History
	opt   Options
	store []*storeOp
	byRes map[string][]*storeOp
	// bySem holds each semaphore's store requests, by its name; sems
	// says which names are semaphores'.
	bySem map[string][]*storeOp
	sems  map[string]bool
	// byRW holds each read/write lock's store requests, by its name; rws
	// says which names are read/write locks'.
	byRW map[string][]*storeOp
	rws  map[string]bool
	// holdsByRes caches the clients' holds; slotLeases each semaphore
	// slot's leases (semcheck.go).
	holdsByRes map[string][]Hold
	slotLeases map[string]*leaseHistory
	// leases caches each resource's leases (leaders.go).
	leases map[string]*leaseHistory
	rep    Report
}

// Check checks every rule on h.
func Check(h *History, opt Options) Report {
	if opt.StoreBudget <= 0 {
		opt.StoreBudget = api.StoreBudget
	}
	if opt.Slack <= 0 {
		opt.Slack = 500 * time.Millisecond
	}
	if opt.LinearizabilityTimeout <= 0 {
		opt.LinearizabilityTimeout = time.Minute
	}
	if opt.MaxPerRule <= 0 {
		opt.MaxPerRule = 5
	}
	c := &checker{h: h, opt: opt, byRes: map[string][]*storeOp{}, leases: map[string]*leaseHistory{}, slotLeases: map[string]*leaseHistory{}, rep: Report{
		Counts: map[string]int{}, Ops: map[Kind]int{}, Outcomes: map[string]int{}, Linearizable: map[string]string{},
	}}
	store, err := decodeRecords(h.Records)
	if err != nil {
		c.report(RuleNoFalseGrant, "", "a store request or answer could not be decoded: "+err.Error())
	}
	c.store = store
	c.bySem = map[string][]*storeOp{}
	c.byRW = map[string][]*storeOp{}
	for _, s := range store {
		if s.rw != nil {
			name := strings.TrimPrefix(s.resource, locklogic.RWLockPrefix)
			c.byRW[name] = append(c.byRW[name], s)
			continue
		}
		if s.sem == nil {
			c.byRes[s.resource] = append(c.byRes[s.resource], s)
		} else {
			name := strings.TrimPrefix(s.resource, locklogic.SemaphorePrefix)
			c.bySem[name] = append(c.bySem[name], s)
		}
	}
	for _, s := range c.store {
		if s.outcome != applied {
			continue
		}
		switch {
		case s.kind == storeSettle:
			c.rep.ExpiryRecords++
		case s.sem != nil && s.kind.queueWrite():
			c.rep.SemQueueWrites++
		case s.sem != nil && s.kind == storeAcquire && s.ticket != "":
			c.rep.SemHeadGrants++
		}
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Member {
			continue // its set call is counted
		}
		c.rep.Ops[op.Kind]++
		switch {
		case op.Kind == SetAcquire && op.Wait > 0:
			c.rep.SetWaiting++
		case op.Kind == Acquire && op.Wait > 0:
			c.rep.Waiting++
		case op.Kind == SemAcquire && op.Wait > 0:
			c.rep.SemWaiting++
		case op.Kind == RWAcquire && op.Wait > 0:
			c.rep.RWWaiting++
		}
		if op.LockDelay > 0 {
			c.rep.LockDelays++
		}
		c.rep.Outcomes[outcomeName(op)]++
	}
	c.answers()
	c.recovery()
	c.mutualExclusion()
	c.fencing()
	c.noFalseGrant()
	c.lateWrite()
	c.oneHolder()
	c.watchOrder()
	c.fairness()
	c.longestWaiter()
	c.semaphores()
	c.setHeld()
	c.setRollback()
	c.setProgress()
	c.rwLocks()
	c.linearizable()
	c.lateWrites()
	return c.rep
}

func outcomeName(op *Op) string {
	switch {
	case op.Err != "":
		return "no-answer"
	case op.Kind == Acquire && op.Status == 200 && op.Granted:
		return "granted"
	case op.Kind == Acquire && op.Status == 200:
		return "held"
	case op.Kind == SemAcquire && op.Status == 200 && op.Granted:
		return "permit"
	case op.Kind == SemAcquire && op.Status == 200:
		return "full"
	case op.Kind == SetAcquire && op.Status == 200 && op.Granted:
		return "set-granted"
	case op.Kind == SetAcquire && op.Status == 200:
		return "set-refused"
	case op.Kind == RWAcquire && op.Status == 200 && op.Granted:
		return op.Mode + "-granted"
	case op.Kind == RWAcquire && op.Status == 200:
		return op.Mode + "-held"
	}
	return fmt.Sprint(op.Status)
}

func (c *checker) report(rule, resource, summary string, excerpt ...string) {
	c.rep.Counts[rule]++
	if c.rep.Counts[rule] <= c.opt.MaxPerRule {
		c.rep.Violations = append(c.rep.Violations, Violation{Rule: rule, Resource: resource, Summary: summary, Excerpt: excerpt})
	}
}

// opLine and storeLines render excerpt lines.
func (c *checker) opLine(op *Op) string { return op.format(c.h.Start) }

// storeLines renders the store requests on resource that reached the
// store (or, never sent, the proxy) from from to to, at most max of them
// (the last ones); only the committed writes when committedOnly is set. A
// late write is listed by when it landed, not when it was issued.
func (c *checker) storeLines(resource string, from, to time.Time, committedOnly bool, max int) []string {
	var lines []string
	ops := c.byRes[resource]
	switch {
	case c.isSem(resource):
		ops = c.bySem[resource]
	case c.isRW(resource):
		ops = c.byRW[resource]
	}
	for _, s := range ops {
		t := s.rec.Received
		if s.rec.Forwarded {
			t = s.rec.Sent
		}
		if t.Before(from) || t.After(to) {
			continue
		}
		if committedOnly && (s.kind == storeRead || s.outcome != applied) {
			continue
		}
		lines = append(lines, s.format(c.h.Start))
	}
	if len(lines) > max {
		lines = append([]string{fmt.Sprintf("(%d earlier store requests left out)", len(lines)-max)}, lines[len(lines)-max:]...)
	}
	return lines
}

// documented lists, per call, the statuses a well-formed request may get.
var documented = map[Kind][]int{
	Acquire:    {200, 503},
	Renew:      {200, 403, 404, 409, 503},
	Release:    {204, 403, 404, 409, 503},
	Status:     {200, 404, 503},
	Watch:      {200, 503},
	SemAcquire: {200, 409, 503},
	SemRenew:   {200, 403, 404, 409, 503},
	SemRelease: {204, 403, 404, 409, 503},
	SemStatus:  {200, 503},
	SemWatch:   {200, 503},
	SetAcquire: {200, 503},
	SetRenew:   {200, 503},
	SetRelease: {200, 204, 503},
	RWAcquire:  {200, 503},
	RWRenew:    {200, 403, 404, 409, 503},
	RWRelease:  {204, 403, 404, 409, 503},
	RWStatus:   {200, 503},
}

// slugs are the problem types of the error statuses.
var slugs = map[int]string{403: "forbidden", 404: "not-found", 409: "stale-token", 503: "service-unavailable"}

// slug is the problem type of status answering a call of kind k: a
// semaphore acquire's 409 is another N's.
func slug(k Kind, status int) string {
	if k == SemAcquire && status == 409 {
		return "permits-mismatch"
	}
	return slugs[status]
}

// answers checks every answer's status, shape and latency.
func (c *checker) answers() {
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		if op.Member {
			continue // its set call's answer is judged
		}
		bad := func(why string) { c.report(RuleAnswers, op.Resource, why, c.opLine(op)) }
		limit, what := c.opt.StoreBudget+c.opt.Slack, fmt.Sprintf("the %v store budget plus %v", c.opt.StoreBudget, c.opt.Slack)
		switch {
		case op.Kind.Set():
			limit, what = c.setLimit(op)
		case op.Kind.Lock() == Watch:
			// A watch (of a lock or a semaphore): a consistent read, the wait (its peeks and the
			// confirming read each under its own budget: the last peek
			// may start as the wait ends), then a consistent read
			// (locklogic.Service.Watch).
			limit = time.Duration(op.Wait)*time.Second + 2*c.opt.StoreBudget + c.opt.Slack
			what = fmt.Sprintf("its %d s wait plus two %v store budgets plus %v", op.Wait, c.opt.StoreBudget, c.opt.Slack)
		case (op.Kind == SemAcquire || op.Kind == RWAcquire) && op.Wait == 0:
			// A permit's acquire: up to MaxSemaphoreWrites writes, each
			// refused one explained by a read where the store returns no
			// old item (dynalite), every store call with its own budget
			// (locklogic.AcquireSemaphore).
			calls := time.Duration(2 * locklogic.MaxSemaphoreWrites)
			limit = calls*c.opt.StoreBudget + c.opt.Slack
			what = fmt.Sprintf("%d %v store budgets (its writes and reads) plus %v", calls, c.opt.StoreBudget, c.opt.Slack)
		case op.Wait > 0:
			// A waiting acquire: a first write, the wait (which stops
			// GrantGuard early), and at its end a read and a write,
			// each store call with its own budget (locklogic.AcquireWait).
			limit = time.Duration(op.Wait)*time.Second - locklogic.GrantGuard + 3*c.opt.StoreBudget + c.opt.Slack
			what = fmt.Sprintf("its %d s wait less %v plus three %v store budgets plus %v", op.Wait, locklogic.GrantGuard, c.opt.StoreBudget, c.opt.Slack)
		}
		if took := op.Return.Sub(op.Invoke); took > limit {
			bad(fmt.Sprintf("answered after %v, more than %s", took.Round(time.Millisecond), what))
		}
		if op.Err != "" {
			bad("no answer (dropped connection): " + op.Err)
			continue
		}
		ok := false
		for _, s := range documented[op.Kind] {
			ok = ok || s == op.Status
		}
		switch {
		case !ok:
			bad(fmt.Sprintf("%d is not a documented answer to a valid %s", op.Status, op.Kind))
		case op.Status >= 400 && (!op.ProblemOK || op.Slug != slug(op.Kind, op.Status)):
			bad(fmt.Sprintf("%d without a %s problem+json body", op.Status, slug(op.Kind, op.Status)))
		case op.Status == 503 && op.RetryAfter == "":
			bad("503 without Retry-After")
		case op.DecodeErr != "":
			bad("malformed answer: " + op.DecodeErr)
		case op.Lock != nil && op.Lock.Resource != op.Resource:
			bad(fmt.Sprintf("the lock names resource %q", op.Lock.Resource))
		case op.Lock != nil && op.Kind.Lock() != Status && op.Kind.Lock() != Watch && op.Lock.Owner != op.Owner:
			bad(fmt.Sprintf("the lock names owner %q", op.Lock.Owner))
		case op.Granted && op.Lock != nil && op.Lock.ExpiresAt-op.Lock.AcquiredAt != op.TTL*1000 && (op.Kind != Acquire || !c.renewedDuring(op)):
			bad(fmt.Sprintf("a grant of %d s lasts %d ms", op.TTL, op.Lock.ExpiresAt-op.Lock.AcquiredAt))
		case op.Kind.Lock() == Renew && op.Lock != nil && op.Token != 0 && op.Lock.Token != op.Token:
			bad(fmt.Sprintf("renewed with token %d, answered token %d", op.Token, op.Lock.Token))
		}
	}
}

// recovery checks that every request after the faults stopped succeeded
// and that the final owner got every resource.
func (c *checker) recovery() {
	if c.h.RecoveryFrom.IsZero() {
		return
	}
	finals := map[string]bool{}
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		if op.Invoke.Before(c.h.RecoveryFrom) || (op.Member && op.Err != "") {
			continue // a member without an answer: its set call is reported
		}
		if (op.Err != "" || op.Status >= 500) && !c.retryAfterSkew(op) {
			c.report(RuleRecovery, op.Resource, fmt.Sprintf("failed %v after the faults stopped", op.Invoke.Sub(c.h.RecoveryFrom).Round(time.Millisecond)), c.opLine(op))
		}
		if op.Phase == PhaseFinal && op.Kind.Lock() == Acquire {
			finals[op.Resource] = true
			if !op.Granted {
				ex := append([]string{c.opLine(op), "the last committed writes:"}, c.storeLines(op.Resource, c.h.Start, op.Return, true, 6)...)
				c.report(RuleRecovery, op.Resource, "still not free after every recorded lease expired", ex...)
			}
		}
	}
	for r := range c.byRes {
		if !finals[r] {
			c.report(RuleRecovery, r, "no final acquire was made (the run was cut short)")
		}
	}
	for r := range c.bySem {
		if !finals[r] {
			c.report(RuleRecovery, r, "no final acquire of a permit was made (the run was cut short)")
		}
	}
	for r := range c.byRW {
		if !finals[r] {
			c.report(RuleRecovery, r, "no final acquire of the writer's lease was made (the run was cut short)")
		}
	}
}

// retryAfterSkew reports whether op is a renew answered 503 because the
// store refused it only for the late-write rule: the owner's own lease,
// live, renewed by a request stamped after this one's :now — an earlier
// renewal served by an instance whose clock is ahead (skew). The service
// tells such a renew to retry (locklogic.Service.Renew); the records show
// it: the refused write with its :now, then the consistent read that
// explained it, or (old-item store mode) the item returned with the
// refusal. One rule for a lock's lease, a permit's slot and a read/write
// lock's writer or reader slot; only where the renewed lease sits in the
// item differs.
func (c *checker) retryAfterSkew(op *Op) bool {
	if op.Status != 503 {
		return false
	}
	var (
		ops []*storeOp
		// ours says a refused renewal renewed op's lease; lease returns
		// that lease from the item returned with it (old) or from a
		// read's item, nil without one.
		ours  func(s *storeOp) bool
		lease func(s *storeOp, old bool) *leaseState
	)
	switch op.Kind {
	case Renew:
		ops, ours = c.byRes[op.Resource], func(*storeOp) bool { return true }
		lease = func(s *storeOp, old bool) *leaseState {
			if it := either(s.item, s.old, old); it != nil {
				return &it.leaseState
			}
			return nil
		}
	case SemRenew:
		if op.Slot < 0 || op.Slot >= maxSlots {
			return false
		}
		ops, ours = c.bySem[op.Resource], func(s *storeOp) bool { return int64(s.sem.slot) == op.Slot }
		lease = func(s *storeOp, old bool) *leaseState {
			if it := either(s.sem.item, s.sem.old, old); it != nil {
				return &it.slots[op.Slot]
			}
			return nil
		}
	case RWRenew:
		k := rwWriter
		if op.Mode == "read" {
			k = int(op.Slot)
		}
		ops, ours = c.byRW[op.Resource], func(s *storeOp) bool { return s.rw.slot == k }
		lease = func(s *storeOp, old bool) *leaseState {
			if it := either(s.rw.item, s.rw.old, old); it != nil {
				l := it.lease(k)
				return &l
			}
			return nil
		}
	default:
		return false
	}
	explains := func(l leaseState, now int64) bool {
		return l.owner == op.Owner && l.live(now) && l.acquired <= now && l.renewed > now
	}
	// Clients sharing the owner may have renewals refused in the same
	// window: any of them may be the one a read explains.
	var nows []int64
	for _, s := range ops {
		if s.rec.Received.Before(op.Invoke) || s.rec.Received.After(op.Return) {
			continue
		}
		switch {
		case s.kind == storeRenew && s.owner == op.Owner && s.outcome == refused && ours(s):
			nows = append(nows, s.now)
			if l := lease(s, true); l != nil && explains(*l, s.now) {
				return true
			}
		case s.kind == storeRead && s.full && s.outcome == applied:
			if l := lease(s, false); l != nil && slices.ContainsFunc(nows, func(now int64) bool { return explains(*l, now) }) {
				return true
			}
		}
	}
	return false
}

// either returns old when useOld, else item.
func either[T any](item, old *T, useOld bool) *T {
	if useOld {
		return old
	}
	return item
}

// mutualExclusion checks that no two owners' holds overlap.
func (c *checker) mutualExclusion() {
	byID := func(id int) *Op { return &c.h.Ops[id] }
	for r, hs := range c.holds() {
		if c.isSem(r) {
			c.rep.PermitHolds += len(hs)
			continue // semaphoreLimit
		}
		if c.isRW(r) {
			continue // rwHolds
		}
		c.rep.Holds += len(hs)
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
			for _, a := range active {
				if a.Owner == h.Owner {
					continue
				}
				overlap := minTime(a.End, h.End).Sub(h.Start)
				ex := []string{fmt.Sprintf("%s holds token %d from %s to %s; %s holds token %d from %s to %s (client deadlines: invoke + ttl - margin)",
					a.Owner, a.Token, at(c.h.Start, a.Start), at(c.h.Start, a.End), h.Owner, h.Token, at(c.h.Start, h.Start), at(c.h.Start, h.End))}
				for _, id := range a.Ops {
					ex = append(ex, c.opLine(byID(id)))
				}
				for _, id := range h.Ops {
					ex = append(ex, c.opLine(byID(id)))
				}
				ex = append(ex, "committed writes in between:")
				ex = append(ex, c.storeLines(r, byID(a.Ops[0]).Invoke, h.Start, true, 8)...)
				ex = append(ex, c.offsetsLine())
				c.report(RuleMutualExclusion, r, fmt.Sprintf("%s and %s both held the lock for %v", a.Owner, h.Owner, overlap.Round(time.Millisecond)), ex...)
			}
			active = append(active, h)
		}
	}
}

func (c *checker) offsetsLine() string {
	parts := make([]string, len(c.h.Offsets))
	for i, o := range c.h.Offsets {
		parts[i] = fmt.Sprintf("i%d: %v", i, o)
	}
	return "instance clock offsets: " + strings.Join(parts, " ")
}

// fencing checks tokens in grant answers and in committed acquires.
func (c *checker) fencing() {
	grants := map[string][]*Op{}
	for i := range c.h.Ops {
		if op := &c.h.Ops[i]; op.Granted && op.Lock != nil {
			grants[op.Resource] = append(grants[op.Resource], op)
		}
	}
	for r, gs := range grants {
		seen := map[int64]*Op{}
		for _, g := range gs {
			if prev, dup := seen[g.Lock.Token]; dup {
				c.report(RuleFencing, r, fmt.Sprintf("token %d granted twice", g.Lock.Token), c.opLine(prev), c.opLine(g))
			}
			seen[g.Lock.Token] = g
		}
		// gs is in invoke order; byReturn in return order. A grant must
		// carry a larger token than every grant answered before it was
		// invoked.
		byReturn := append([]*Op(nil), gs...)
		sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return.Before(byReturn[j].Return) })
		var maxOp *Op
		k := 0
		for _, g := range gs {
			for ; k < len(byReturn) && byReturn[k].Return.Before(g.Invoke); k++ {
				if maxOp == nil || byReturn[k].Lock.Token > maxOp.Lock.Token {
					maxOp = byReturn[k]
				}
			}
			if maxOp != nil && g.Lock.Token <= maxOp.Lock.Token {
				c.report(RuleFencing, r, fmt.Sprintf("token %d granted after token %d was", g.Lock.Token, maxOp.Lock.Token), c.opLine(maxOp), c.opLine(g))
			}
		}
	}
	for r, ss := range c.byRes {
		var acq []*storeOp
		for _, s := range ss {
			if s.kind == storeAcquire && s.outcome == applied && s.item != nil {
				acq = append(acq, s)
			}
		}
		seen := map[int64]*storeOp{}
		for _, s := range acq {
			if prev, dup := seen[s.item.token]; dup {
				c.report(RuleFencing, r, fmt.Sprintf("the store committed token %d twice", s.item.token), prev.format(c.h.Start), s.format(c.h.Start))
			}
			seen[s.item.token] = s
		}
		sort.Slice(acq, func(i, j int) bool { return acq[i].rec.Sent.Before(acq[j].rec.Sent) })
		byAnswer := append([]*storeOp(nil), acq...)
		sort.Slice(byAnswer, func(i, j int) bool { return byAnswer[i].rec.Answered.Before(byAnswer[j].rec.Answered) })
		var maxS *storeOp
		k := 0
		for _, s := range acq {
			for ; k < len(byAnswer) && byAnswer[k].rec.Answered.Before(s.rec.Sent); k++ {
				if maxS == nil || byAnswer[k].item.token > maxS.item.token {
					maxS = byAnswer[k]
				}
			}
			if maxS != nil && s.item.token <= maxS.item.token {
				c.report(RuleFencing, r, fmt.Sprintf("the store committed token %d after token %d", s.item.token, maxS.item.token), maxS.format(c.h.Start), s.format(c.h.Start))
			}
		}
	}
}

// noFalseGrant checks that every success is backed by a store request of
// the same request (same resource, same owner for writes) that the store
// answered inside the request's window, with exactly the answered lease.
func (c *checker) noFalseGrant() {
	for i := range c.h.Ops {
		op := &c.h.Ops[i]
		var want storeKind
		switch {
		case op.Kind == Acquire && op.Granted:
			want = storeAcquire
		case op.Kind == Renew && op.Status == 200:
			want = storeRenew
		case op.Kind == Release && op.Status == 204:
			want = storeRelease
		case op.Kind == Status && op.Status == 200:
			want = storeRead
		default:
			continue
		}
		if op.Lock == nil && want != storeRelease {
			continue // malformed: reported by answers
		}
		backed := false
		for _, s := range c.byRes[op.Resource] {
			if (s.outcome != applied && s.old == nil) || !s.during(op) {
				continue
			}
			switch {
			case s.outcome != applied:
			case s.kind == want && want == storeRead:
				backed = s.full && s.item != nil && s.item.shows(op.Lock)
			case s.kind == want:
				backed = s.owner == op.Owner && (want == storeRelease || (s.item != nil && s.item.shows(op.Lock)))
			case want == storeRenew && s.kind == storeRead:
				// A renew refused because a renewal stamped after it
				// landed first answers with the lease that one left,
				// read by the service to explain the refusal.
				backed = s.full && s.item != nil && s.item.shows(op.Lock)
			}
			if !backed && want == storeRenew && s.kind == storeRenew && s.outcome == refused && s.owner == op.Owner && s.old != nil {
				// The same, in the old-item store mode: the item returned
				// with the refusal explains it.
				backed = s.old.shows(op.Lock)
			}
			if !backed && want == storeAcquire {
				// A grant whose answer was lost (the SDK's retry refused
				// by the grant itself) is found by its grant id, in a
				// consistent read or the item returned with the refusal,
				// and answered as found: a co-owner's renewal that landed
				// meanwhile may have moved its expiry.
				switch {
				case s.kind == storeRead && s.outcome == applied && s.full && s.item != nil:
					backed = c.foundOwnGrant(op, s.item)
				case s.kind == storeAcquire && s.outcome == refused && s.owner == op.Owner && s.old != nil:
					backed = c.foundOwnGrant(op, s.old)
				}
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
	// Unheard grants: committed acquires no grant answer reports.
	answered := map[string]bool{}
	for i := range c.h.Ops {
		if op := &c.h.Ops[i]; op.Granted && op.Lock != nil {
			answered[fmt.Sprint(op.Resource, "\x00", op.Lock.Token)] = true
		}
	}
	for _, s := range c.store {
		if s.kind == storeAcquire && s.outcome == applied && s.item != nil && !answered[fmt.Sprint(s.resource, "\x00", s.item.token)] {
			c.rep.UnheardGrants++
		}
	}
}

// during reports whether the store received s and answered it within
// op's call.
func (s *storeOp) during(op *Op) bool {
	return !s.rec.Received.Before(op.Invoke) && !s.rec.Answered.After(op.Return)
}

// anyDuring reports whether a store request on op's lock that the store
// received and answered within op's call meets p.
func (c *checker) anyDuring(op *Op, p func(s *storeOp) bool) bool {
	return slices.ContainsFunc(c.byRes[op.Resource], func(s *storeOp) bool { return s.during(op) && p(s) })
}

// foundOwnGrant reports whether item, found during op, shows op's answered
// lease as the service's ownGrant takes it: live (not released, force
// released or recorded expired), and written by an acquire-write of op's
// owner that the store committed during op and whose answer the service
// did not get (its token, acquired_at and grant id). The records do not
// say which call sent a write, so a co-owner's grant made inside op's
// window with its answer lost would pass too; the fencing rule catches it
// once that co-owner is told of it as well.
func (c *checker) foundOwnGrant(op *Op, item *storeItem) bool {
	if !item.shows(op.Lock) || item.forced || item.ended {
		return false
	}
	return c.anyDuring(op, func(s *storeOp) bool {
		return s.kind == storeAcquire && s.outcome == applied && s.owner == op.Owner && s.item != nil && s.rec.CallerStatus != 200 &&
			s.item.token == item.token && s.item.acquired == item.acquired && s.item.gid == item.gid
	})
}

// renewedDuring reports whether a renewal of op's owner that the store
// committed during op left the lease op answered (its token and
// expires_at): a co-owner's, which moved the expiry of a grant op then
// found by its grant id (noFalseGrant).
func (c *checker) renewedDuring(op *Op) bool {
	return c.anyDuring(op, func(s *storeOp) bool {
		return s.kind == storeRenew && s.outcome == applied && s.owner == op.Owner && s.item != nil &&
			s.item.token == op.Lock.Token && s.item.expires == op.Lock.ExpiresAt
	})
}

// shows reports whether the stored item is the lease l shows.
func (it *storeItem) shows(l *Lock) bool {
	return it.owner == l.Owner && it.token == l.Token && it.acquired == l.AcquiredAt && it.expires == l.ExpiresAt && !it.released
}

func (c *checker) lateWrites() {
	for _, s := range c.store {
		late := s.rec.Fault == faultproxy.Late || (s.rec.Fault == faultproxy.Delay && s.rec.CallerStatus == 0)
		if late && s.rec.Forwarded {
			c.rep.LateWrites++
			if s.outcome == applied && s.kind != storeRead {
				c.rep.LateApplied++
			}
		}
	}
}

// keep porcupine's result names in one place.
var verdicts = map[porcupine.CheckResult]string{porcupine.Ok: "ok", porcupine.Illegal: "illegal", porcupine.Unknown: "unknown"}
