package chaos

import (
	"fmt"
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
)

func (k storeKind) String() string {
	return [...]string{"acquire-write", "renew-write", "release-write", "read", "queue-join", "queue-keep", "queue-prune", "queue-leave", "expiry-record"}[k]
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
	// full says a read is strongly consistent and returns the whole item
	// (status, and the read that explains a refused renew or release).
	// A waiting acquire's peeks are neither: eventually consistent hints
	// of expires_at and released_at only, never an answer's evidence.
	full    bool
	outcome outcome
	// item is the store's item: what a committed acquire, renew or queue
	// write wrote (ReturnValues ALL_NEW), what a read found (nil: absent).
	item *storeItem

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
}

// storeItem is a lock item as the store returned it, with its queue
// (encoded: see qentry) and queue_until (0: none). The queue version is
// the model's alone: it only decides which queue writes may commit.
type storeItem struct {
	owner                                   string
	token, acquiredAt, renewedAt, expiresAt int64
	released                                bool
	ended                                   bool // expired_at: a watch recorded the expiry
	queue                                   string
	queueUntil                              int64
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
		if strings.HasPrefix(op.resource, locklogic.SemaphorePrefix) {
			if err := op.decodeSemaphore(c); err != nil {
				return nil, fmt.Errorf("record %d: %w", r.Seq, err)
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
		if c.Item != nil {
			it := &storeItem{
				owner:      c.Item[locklogic.AttrOwner],
				token:      num(c.Item[locklogic.AttrToken]),
				acquiredAt: num(c.Item[locklogic.AttrAcquiredAt]),
				renewedAt:  num(c.Item[locklogic.AttrRenewedAt]),
				expiresAt:  num(c.Item[locklogic.AttrExpiresAt]),
				queueUntil: num(c.Item[locklogic.AttrQueueUntil]),
			}
			_, it.released = c.Item[locklogic.AttrReleasedAt]
			_, it.ended = c.Item[locklogic.AttrExpiredAt]
			if l, ok := c.ItemLists[locklogic.AttrQueue]; ok {
				q := make([]qentry, len(l))
				for j, m := range l {
					q[j] = entryOf(m)
				}
				it.queue = encodeQueue(q)
			}
			op.item = it
		}
		out = append(out, op)
	}
	return out, nil
}

// writeKind tells the lock writes apart by what they set: only an
// acquire (a head's grant too) bumps the token, only a release sets
// released_at, only a watch's record of an expiry sets expired_at, only a
// join appends an entry (:qe), only a keep moves an entry's until (:qt),
// and a prune only removes entries (:q0 …).
func writeKind(c faultproxy.Call) storeKind {
	placeholder := func(attr string) string {
		for p, name := range c.Names {
			if name == attr {
				return p
			}
		}
		return "\x00"
	}
	set, _, _ := strings.Cut(c.UpdateExpression, " REMOVE ")
	_, join := c.ValueLists[":qe"]
	_, keep := c.Values[":qt"]
	_, prune := c.Values[":q0"]
	_, leave := c.Values[":tk"]
	switch {
	case strings.Contains(set, placeholder(locklogic.AttrToken)+" = "):
		return storeAcquire
	case strings.Contains(set, placeholder(locklogic.AttrReleasedAt)+" = "):
		return storeRelease
	case strings.Contains(set, placeholder(locklogic.AttrExpiredAt)+" = "):
		return storeSettle
	case join:
		return storeJoin
	case keep:
		return storeKeep
	case prune:
		return storePrune
	case leave:
		return storeLeave
	}
	return storeRenew
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
	case storeJoin:
		req = fmt.Sprintf("UpdateItem %s %s owner:%s ticket:%s until:%d at version %d :qu=%d", s.kind, s.resource, s.owner, s.entry.id, s.entry.until, s.qv, s.qu)
	case storeKeep:
		req = fmt.Sprintf("UpdateItem %s %s owner:%s :now=%d entry %d ticket:%s until:%d :qu=%d", s.kind, s.resource, s.owner, s.now, s.index, s.ticket, s.qt, s.qu)
	case storePrune:
		req = fmt.Sprintf("UpdateItem %s %s :now=%d tickets:%s", s.kind, s.resource, s.now, strings.Join(s.pruned, ","))
	case storeLeave:
		req = fmt.Sprintf("UpdateItem %s %s owner:%s entry %d ticket:%s", s.kind, s.resource, s.owner, s.index, s.ticket)
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

func (it *storeItem) String() string {
	s := fmt.Sprintf("{owner:%s token:%d acquired_at:%d renewed_at:%d expires_at:%d", it.owner, it.token, it.acquiredAt, it.renewedAt, it.expiresAt)
	if it.released {
		s += " released"
	}
	if it.queue != "" {
		s += fmt.Sprintf(" queue:%s queue_until:%d", queueString(it.queue), it.queueUntil)
	}
	return s + "}"
}
