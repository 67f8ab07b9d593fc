package chaos

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// storeKind is what a store request does to a lock (or to a semaphore's
// slot: see semstore.go).
type storeKind int

const (
	// storeAcquire is a grant's write: a plain acquire, or, with a queue
	// ticket (storeOp.ticket), the head of the queue's grant, which also
	// removes its entry.
	storeAcquire storeKind = iota
	storeRenew
	storeRelease
	storeRead
	// The queue's own writes (fair waiting), which change no lease: a
	// waiter joins at the back, keeps its place (moves its until),
	// removes the lapsed entries at the front, or leaves (removes its own
	// entry when its wait ends without a grant and without a next round).
	storeJoin
	storeKeep
	storePrune
	storeLeave
	// storeSettle is a watch's record of an expiry it answers
	// (expired_at): the lease's token, expired by the watch's :now, ended
	// by no write. No renew touches the lease after it.
	storeSettle
	// storeForce is an operator's force release (the admin route): it
	// ends the lease whoever holds it, at once (immediate) or keeping its
	// lock-delay.
	storeForce
)

func (k storeKind) String() string {
	return [...]string{"acquire-write", "renew-write", "release-write", "read", "queue-join", "queue-keep", "queue-prune", "queue-leave", "expiry-record", "force-release"}[k]
}

// queueWrite reports whether k is one of the queue's own writes.
func (k storeKind) queueWrite() bool {
	return k == storeJoin || k == storeKeep || k == storePrune || k == storeLeave
}

// outcome is what became of a store request.
type outcome int

const (
	// notSent: the proxy answered for the store (a 5xx, throttling) or
	// held the request forever; the store never saw it.
	notSent outcome = iota
	// applied: the store answered 200 (a write committed, a read read).
	applied
	// refused: the condition failed (ConditionalCheckFailedException).
	refused
	// failedOther: any other store error; nothing changed.
	failedOther
	// unknownOutcome: the proxy could not read the store's answer.
	unknownOutcome
)

// storeOp is one proxy record read as a lock operation: which resource,
// with which :now, and whether and what the store committed.
type storeOp struct {
	rec      *faultproxy.Record
	kind     storeKind
	resource string
	owner    string // :o (writes)
	now      int64  // :now, epoch ms of the serving instance's clock
	iss      int64  // :iss (acquire): the request's issue time, for the same-owner branch; :now when absent
	gid      string // :gid (acquire): the request's grant id
	exp      int64  // :exp (acquire, renew)
	base     int64  // :base (acquire): the new counter's start when the item is absent
	tok      int64  // :tok, 0 when the write carries no token
	delay    int64  // :d (acquire): the lease's lock-delay in ms, 0 for none
	// immediate says a force release frees the lease at once (it sets
	// released_at too), not after its lock-delay.
	immediate bool
	// full says a read is strongly consistent and returns the whole item
	// (status, and the read that explains a refused renew or release).
	// A waiting acquire's peeks are neither: eventually consistent hints
	// of expires_at and released_at only, never an answer's evidence.
	full    bool
	outcome outcome
	// item is the store's item: what a committed acquire, renew or queue
	// write wrote (ReturnValues ALL_NEW), what a read found (nil: absent).
	item *storeItem
	// old is, in the old-item store mode, the item the store returned
	// with a refused write (faultproxy.Record.OldItem; nil: none). The
	// proxy reads it after the refusal, so it is not atomic with it: a
	// write landing in between shows. It is evidence as a consistent read
	// made during the call is, never the state the refusal met.
	old *storeItem

	// Fair waiting. ticket is the queue ticket (:tk) of a head's grant, a
	// keep or a leave; entry is the entry a join appends (:qe); index is
	// the entry a keep moves, to qt (:qt), or a leave removes; versioned
	// says the write is conditioned on the queue version qv (:qv; 0: none
	// yet), and then sets queue_until to qu (:qu); pruned are the
	// tickets of the entries a prune removes (:q0, :q1, …), front first.
	ticket    string
	entry     qentry
	versioned bool
	qv        int64
	index     int
	qt, qu    int64
	pruned    []string

	// sem is set for a semaphore's request (its key starts with
	// locklogic.SemaphorePrefix): what it does to which slot, and the
	// semaphore item the store returned (semstore.go). Such a request has
	// no item.
	sem *semOp
	// rw is set for a read/write lock's request (its key starts with
	// locklogic.RWLockPrefix): which lease it writes and the item the
	// store returned (rwstore.go). Such a request has no item.
	rw *rwOp
}

// storeItem is a lock item as the store returned it: its lease, its
// queue (encoded: see qentry) and queue_until (0: none). The queue
// version is the model's alone: it only decides which queue writes may
// commit.
type storeItem struct {
	leaseState
	queue      string
	queueUntil int64
}

// same reports whether two lock items agree as answers are compared
// (leaseState.shown).
func (it storeItem) same(o storeItem) bool {
	it.leaseState, o.leaseState = it.shown(), o.shown()
	return it == o
}

// qentry is one waiter's place in a lock's queue.
type qentry struct {
	id, owner string
	until     int64
}

// A queue is kept in the model's state and in storeItem as a string, so
// that both stay comparable: "" for no queue attribute, else "[" and the
// entries, each id, owner and until separated by \x1f, entries by \x1e,
// then "]" (an empty list is "[]", which the join condition tells from no
// attribute).
func encodeQueue(q []qentry) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range q {
		if i > 0 {
			b.WriteByte('\x1e')
		}
		b.WriteString(e.id)
		b.WriteByte('\x1f')
		b.WriteString(e.owner)
		b.WriteByte('\x1f')
		b.WriteString(strconv.FormatInt(e.until, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// parseQueue decodes encodeQueue's string; present is false for "".
func parseQueue(s string) (q []qentry, present bool) {
	if len(s) < 2 {
		return nil, false
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return nil, true
	}
	for _, e := range strings.Split(body, "\x1e") {
		f := strings.Split(e, "\x1f")
		if len(f) != 3 {
			continue
		}
		q = append(q, qentry{id: f[0], owner: f[1], until: num(f[2])})
	}
	return q, true
}

// queueString renders an encoded queue for excerpts.
func queueString(s string) string {
	q, present := parseQueue(s)
	if !present {
		return ""
	}
	parts := make([]string, len(q))
	for i, e := range q {
		parts[i] = fmt.Sprintf("%s:%s<%d", e.id, e.owner, e.until)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func entryOf(m map[string]string) qentry {
	return qentry{id: m["id"], owner: m[locklogic.AttrOwner], until: num(m["until"])}
}

// decodeRecords reads every lock and semaphore request among recs;
// requests the service never makes (table setup) are skipped.
func decodeRecords(recs []faultproxy.Record) ([]*storeOp, error) {
	var out []*storeOp
	for i := range recs {
		r := &recs[i]
		if r.Op != "UpdateItem" && r.Op != "GetItem" {
			continue
		}
		c, err := r.Decode()
		if err != nil {
			return nil, err
		}
		op := &storeOp{rec: r, resource: c.Key[locklogic.AttrResource]}
		switch {
		case !r.Forwarded:
			op.outcome = notSent
		case r.ForwardErr != "":
			op.outcome = unknownOutcome
		case r.StoreStatus == 200:
			op.outcome = applied
		case c.ErrorType == "ConditionalCheckFailedException":
			op.outcome = refused
		default:
			op.outcome = failedOther
		}
		old, oldLists, err := oldItemOf(r)
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(op.resource, locklogic.RWLockPrefix) {
			if err := op.decodeRW(c); err != nil {
				return nil, fmt.Errorf("record %d: %w", r.Seq, err)
			}
			if old != nil {
				op.rw.old = rwItemOf(old, oldLists)
			}
			out = append(out, op)
			continue
		}
		if strings.HasPrefix(op.resource, locklogic.SemaphorePrefix) {
			if err := op.decodeSemaphore(c); err != nil {
				return nil, fmt.Errorf("record %d: %w", r.Seq, err)
			}
			if old != nil {
				op.sem.old = semItemOf(old, oldLists)
			}
			out = append(out, op)
			continue
		}
		if r.Op == "GetItem" {
			op.kind = storeRead
			op.full = c.ConsistentRead && c.ProjectionExpression == ""
		} else {
			op.kind = writeKind(c)
			op.owner = c.Values[":o"]
			op.now = num(c.Values[":now"])
			op.iss = op.now
			if v, ok := c.Values[":iss"]; ok {
				op.iss = num(v)
			}
			op.gid = c.Values[":gid"]
			op.exp = num(c.Values[":exp"])
			op.base = num(c.Values[":base"])
			op.tok = num(c.Values[":tok"])
			op.delay = num(c.Values[":d"])
			op.immediate = op.kind == storeForce && setsAttr(c, locklogic.AttrReleasedAt)
			decodeQueueFields(op, c)
		}
		if c.Item != nil && op.kind != storeForce { // a force release returns the old item
			op.item = lockItemOf(c.Item, c.ItemLists)
		}
		if old != nil {
			op.old = lockItemOf(old, oldLists)
		}
		out = append(out, op)
	}
	return out, nil
}

// lockItemOf decodes a lock item's attributes and its queue.
func lockItemOf(item map[string]string, lists map[string][]map[string]string) *storeItem {
	it := &storeItem{leaseState: leaseOf(item, lockNames), queueUntil: num(item[locklogic.AttrQueueUntil])}
	if l, ok := lists[locklogic.AttrQueue]; ok {
		q := make([]qentry, len(l))
		for j, m := range l {
			q[j] = entryOf(m)
		}
		it.queue = encodeQueue(q)
	}
	return it
}

// oldItemOf decodes the old item the proxy added to a refused write in
// the old-item store mode (nil: none), as faultproxy decodes a store's
// item.
func oldItemOf(r *faultproxy.Record) (map[string]string, map[string][]map[string]string, error) {
	if len(r.OldItem) == 0 {
		return nil, nil, nil
	}
	body, err := json.Marshal(map[string]json.RawMessage{"Item": r.OldItem})
	if err != nil {
		return nil, nil, err
	}
	c, err := faultproxy.Record{Seq: r.Seq, Body: []byte("{}"), Forwarded: true, StoreStatus: 200, StoreBody: body}.Decode()
	if err != nil {
		return nil, nil, fmt.Errorf("record %d: old item: %w", r.Seq, err)
	}
	return c.Item, c.ItemLists, nil
}

// writeKind tells the lock writes apart by the attributes they set: only
// an acquire (a head's grant too) sets the token, only a force release
// forced_at, only a release released_at (an immediate force release sets
// both), only a watch's record of an expiry expired_at; a renew sets
// expires_at alone of the lease's; the queue's own writes set none of
// them: a join appends an entry (:qe), a keep moves an entry's until
// (:qt), a prune only removes entries (:q0 …), a leave removes its own
// (:tk).
func writeKind(c faultproxy.Call) storeKind {
	switch {
	case setsAttr(c, locklogic.AttrToken):
		return storeAcquire
	case setsAttr(c, locklogic.AttrForcedAt):
		return storeForce
	case setsAttr(c, locklogic.AttrReleasedAt):
		return storeRelease
	case setsAttr(c, locklogic.AttrExpiredAt):
		return storeSettle
	case setsAttr(c, locklogic.AttrExpiresAt):
		return storeRenew
	}
	if k := queueKind(c); k >= 0 {
		return k
	}
	return storeRenew
}

// queueKind tells the queue's own writes apart (-1: none of them): a
// join appends an entry (:qe), a keep moves an entry's until (:qt), a
// prune removes lapsed entries by their tickets (:q0 …), a leave its own
// (:tk).
func queueKind(c faultproxy.Call) storeKind {
	_, join := c.ValueLists[":qe"]
	_, keep := c.Values[":qt"]
	_, prune := c.Values[":q0"]
	_, leave := c.Values[":tk"]
	switch {
	case join:
		return storeJoin
	case keep:
		return storeKeep
	case prune:
		return storePrune
	case leave:
		return storeLeave
	}
	return -1
}

// decodeQueueFields reads what a write does to its item's queue: the
// ticket of a head's grant, a keep or a leave, the entry a join appends,
// the entry a keep moves or a leave removes and its new until, the
// tickets a prune removes, and the queue version and queue_until a write
// is conditioned on and sets.
func decodeQueueFields(op *storeOp, c faultproxy.Call) {
	op.ticket = c.Values[":tk"]
	op.qu = num(c.Values[":qu"])
	op.qv = num(c.Values[":qv"])
	for p, name := range c.Names {
		if name == locklogic.AttrQueueVersion && strings.Contains(c.ConditionExpression, p) {
			op.versioned = true
		}
	}
	switch op.kind {
	case storeJoin:
		if qe := c.ValueLists[":qe"]; len(qe) == 1 {
			op.entry = entryOf(qe[0])
		}
		op.owner = op.entry.owner
	case storeKeep, storeLeave:
		op.qt = num(c.Values[":qt"])
		op.index = listIndex(c.UpdateExpression)
	case storePrune:
		for j := 0; ; j++ {
			id, ok := c.Values[":q"+strconv.Itoa(j)]
			if !ok {
				break
			}
			op.pruned = append(op.pruned, id)
		}
	}
}

// setAttrs returns the attribute names the SET clause of c's update
// assigns (a list element's member, such as queue[2].until, by the
// list's name).
func setAttrs(c faultproxy.Call) map[string]bool {
	set, _, _ := strings.Cut(c.UpdateExpression, " REMOVE ")
	out := map[string]bool{}
	for _, m := range assigned.FindAllStringSubmatch(set, -1) {
		if name, ok := c.Names[m[1]]; ok {
			out[name] = true
		}
	}
	return out
}

// assigned matches the target of one assignment of a SET clause: a
// placeholder, perhaps with a list index and a member, before " = ".
var assigned = regexp.MustCompile(`(?:^SET |, )(#[A-Za-z0-9_]+)(?:\[[0-9]+\])?(?:\.#[A-Za-z0-9_]+)? = `)

// setsAttr reports whether c's update sets attribute attr.
func setsAttr(c faultproxy.Call, attr string) bool { return setAttrs(c)[attr] }

// lockNames are a lock item's lease attributes, by leaseOf's order.
var lockNames = leaseNames{owner: locklogic.AttrOwner, gid: locklogic.AttrGrantID, token: locklogic.AttrToken,
	acquired: locklogic.AttrAcquiredAt, renewed: locklogic.AttrRenewedAt, expires: locklogic.AttrExpiresAt,
	delay: locklogic.AttrLockDelay, freeAt: locklogic.AttrFreeAt, released: locklogic.AttrReleasedAt,
	forced: locklogic.AttrForcedAt, ended: locklogic.AttrExpiredAt}

// leaseNames are the attribute names of one lease: a lock's, or slot k's
// (slotNames).
type leaseNames struct {
	owner, gid, token, acquired, renewed, expires, delay, freeAt, released, forced, ended string
}

// slotNames returns slot k's attribute names (docs/design.md,
// "Semaphores").
func slotNames(k int) leaseNames {
	i := strconv.Itoa(k)
	return leaseNames{owner: "o" + i, gid: "g" + i, token: "t" + i, acquired: "a" + i, renewed: "n" + i, expires: "e" + i,
		delay: "d" + i, freeAt: "f" + i, released: "x" + i, forced: "z" + i, ended: "y" + i}
}

// leaseOf decodes the lease of an item by its attribute names.
func leaseOf(item map[string]string, n leaseNames) leaseState {
	l := leaseState{owner: item[n.owner], gid: item[n.gid], token: num(item[n.token]), acquired: num(item[n.acquired]),
		renewed: num(item[n.renewed]), expires: num(item[n.expires]), delay: num(item[n.delay]), freeAt: num(item[n.freeAt])}
	_, l.released = item[n.released]
	_, l.forced = item[n.forced]
	_, l.ended = item[n.ended]
	return l
}

// listIndex returns the first list index ([i]) of an expression, -1 for
// none.
func listIndex(expr string) int {
	i := strings.IndexByte(expr, '[')
	j := strings.IndexByte(expr, ']')
	if i < 0 || j < i {
		return -1
	}
	k, err := strconv.Atoi(expr[i+1 : j])
	if err != nil {
		return -1
	}
	return k
}

func num(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// format renders the store request as one excerpt line.
func (s *storeOp) format(start time.Time) string {
	r := s.rec
	var req string
	switch s.kind {
	case storeRead:
		req = "GetItem " + s.resource
		if !s.full {
			req = "GetItem (eventually consistent peek) " + s.resource
		}
	case storeJoin, storeKeep, storePrune, storeLeave:
		req = s.queueFormat()
	default:
		req = fmt.Sprintf("UpdateItem %s %s owner:%s :now=%d", s.kind, s.resource, s.owner, s.now)
		if s.exp != 0 {
			req += fmt.Sprintf(" :exp=%d", s.exp)
		}
		if s.tok != 0 {
			req += fmt.Sprintf(" :tok=%d", s.tok)
		}
		if s.ticket != "" {
			req += " (the head's grant, ticket " + s.ticket + ")"
		}
	}
	if s.sem != nil {
		req = s.sem.format(s)
	}
	if s.rw != nil {
		req = s.rw.format(s)
	}
	var ans string
	switch s.outcome {
	case notSent:
		ans = "not sent to the store"
	case unknownOutcome:
		ans = "store unreachable: " + r.ForwardErr
	case refused:
		ans = "store: condition failed"
	case failedOther:
		ans = fmt.Sprintf("store: %d %s", r.StoreStatus, r.StoreBody)
	case applied:
		switch {
		case s.sem != nil:
			ans = "store: " + s.sem.answer(s)
		case s.rw != nil:
			ans = "store: " + s.rw.answer(s)
		case s.item == nil && s.kind == storeRead:
			ans = "store: no item"
		case s.item == nil:
			ans = "store: committed"
		default:
			ans = "store: " + map[bool]string{true: "committed ", false: ""}[s.kind != storeRead] + s.item.String()
		}
	}
	caller := "caller got no answer"
	if r.CallerStatus != 0 {
		caller = fmt.Sprintf("caller got %d", r.CallerStatus)
	}
	fault := r.Fault.String()
	return fmt.Sprintf("%s..%s  store#%d [%s, %s] %s → %s", at(start, r.Received), at(start, r.Answered), r.Seq, fault, caller, req, ans)
}

// queueFormat renders one of the queue's own writes for an excerpt.
func (s *storeOp) queueFormat() string {
	switch s.kind {
	case storeJoin:
		return fmt.Sprintf("UpdateItem %s %s owner:%s ticket:%s until:%d at version %d :qu=%d", s.kind, s.resource, s.owner, s.entry.id, s.entry.until, s.qv, s.qu)
	case storeKeep:
		return fmt.Sprintf("UpdateItem %s %s owner:%s :now=%d entry %d ticket:%s until:%d :qu=%d", s.kind, s.resource, s.owner, s.now, s.index, s.ticket, s.qt, s.qu)
	case storePrune:
		return fmt.Sprintf("UpdateItem %s %s :now=%d tickets:%s", s.kind, s.resource, s.now, strings.Join(s.pruned, ","))
	}
	return fmt.Sprintf("UpdateItem %s %s owner:%s entry %d ticket:%s", s.kind, s.resource, s.owner, s.index, s.ticket)
}

func (it *storeItem) String() string {
	s := "{" + it.leaseState.String()
	if it.queue != "" {
		s += fmt.Sprintf(" queue:%s queue_until:%d", queueString(it.queue), it.queueUntil)
	}
	return s + "}"
}

// String renders a lease for excerpts.
func (l leaseState) String() string {
	if !l.taken() {
		return "-"
	}
	s := fmt.Sprintf("owner:%s token:%d acquired_at:%d renewed_at:%d expires_at:%d grant:%s", l.owner, l.token, l.acquired, l.renewed, l.expires, l.gid)
	if l.delay != 0 || l.freeAt != 0 {
		s += fmt.Sprintf(" lock_delay:%d free_at:%d", l.delay, l.freeAt)
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{l.released, "released"}, {l.forced, "force-released"}, {l.ended, "expiry-recorded"}} {
		if f.on {
			s += " " + f.name
		}
	}
	return s
}
