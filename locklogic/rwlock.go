package locklogic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Read/write locks: a name held by up to MaxReaders readers or by one
// writer, one item keyed RWLockPrefix + name (docs/design.md, "Read/write
// locks"). The writer's lease is the lock's lease (lockLease's attribute
// names) and reader i's is slot i's (slotNames[i]); one fencing counter
// (AttrCounter) gives every grant, read or write, a token above every
// earlier one. Every condition takes its lease clauses from the one
// builder (leaseExpr); what is the read/write lock's own is how the
// writer and the readers exclude each other:
//
//   - a writer's grant requires every reader slot free by free_at alone
//     (readerFree: each reader write sets free_at, so one comparison a
//     slot);
//   - a reader's grant requires the writer's lease free (vacant or free);
//   - a late renewal cannot revive a lease another kind's grant ended: a
//     writer's renewal requires the counter still at its token (no grant
//     since), a reader's that the writer's latest token is below its own.

// Limits and names of read/write locks.
const (
	// MaxReaders is R, the most readers of one name: the writer's grant
	// names every reader slot (3 operators each: 192 of DynamoDB's 300 at
	// R = 64, TestDynamoDBLimits), and every write rewrites the item.
	MaxReaders = 64
	// RWLockPrefix prefixes a read/write lock's key. A lock name never
	// holds "/", so a read/write lock may share a name with a lock.
	RWLockPrefix = "rw/"
)

// RWMode is how a read/write lock's lease holds it.
type RWMode string

// The two modes.
const (
	Read  RWMode = "read"
	Write RWMode = "write"
)

// RWLease is one lease of a read/write lock: the writer's, or a reader's
// in Slot (Lock.Resource is the lock's name).
type RWLease struct {
	Lock
	Mode RWMode
	// Slot is a reader's slot (0 … MaxReaders−1); 0 for the writer.
	Slot int
}

// RWAcquireRequest asks for a lease of read/write lock Name in Mode. The
// other fields are as for SemaphoreAcquireRequest: with WaitSeconds above
// zero a held lock is waited for in its queue.
type RWAcquireRequest struct {
	Name             string
	Mode             RWMode
	Caller           Caller
	TTLSeconds       int64
	LockDelaySeconds int64
	WaitSeconds      int64
	Arrived          time.Time
	QueueTicket      string
}

// RWAcquireResult is the outcome of AcquireRW; a held lock is an outcome
// (Acquired false), as for a semaphore.
type RWAcquireResult struct {
	Acquired bool
	Lease    RWLease
	// FreeAt is, when not Acquired, when the lock comes free for this
	// mode as the request last saw it (zero: unknown, or queued waiters
	// come first).
	FreeAt      time.Time
	QueueTicket string
	Waited      time.Duration
	// Writes and Reads are the store calls the acquire made.
	Writes, Reads int
}

// RWLeaseRequest names one lease of read/write lock Name for a renewal
// (TTLSeconds) or a release: the caller's, in Mode, in Slot for a reader;
// with FencingToken set, only the lease with that token.
type RWLeaseRequest struct {
	Name         string
	Caller       Caller
	Mode         RWMode
	Slot         int64
	TTLSeconds   int64
	FencingToken *int64
}

// ValidateRWName checks a read/write lock's name as a semaphore's.
func ValidateRWName(name string, v *ValidationError) { ValidateSemaphoreName(name, v) }

// ValidateRWMode checks a mode: "read" or "write".
func ValidateRWMode(m RWMode, v *ValidationError) {
	if m != Read && m != Write {
		v.Add("mode", `must be "read" or "write"`)
	}
}

// ValidateReaderSlot checks a reader's slot: 0 ≤ slot < MaxReaders.
func ValidateReaderSlot(slot int64, v *ValidationError) {
	if slot < 0 || slot >= MaxReaders {
		v.Add("slot", "must be an integer from 0 to "+strconv.Itoa(MaxReaders-1)+" (the slot the read acquire answered)")
	}
}

// ValidateRWAcquire checks req as ValidateAcquire does.
func (s *Service) ValidateRWAcquire(req *RWAcquireRequest, v *ValidationError) {
	ValidateRWName(req.Name, v)
	if !v.Has("mode") {
		ValidateRWMode(req.Mode, v)
	}
	if !v.Has("owner") {
		req.Caller.Owner = NormalizeOwner(req.Caller.Owner, v)
	}
	if !v.Has("ttl_seconds") {
		ValidateTTL(req.TTLSeconds, s.maxTTL, v)
	}
	if !v.Has("lock_delay_seconds") {
		ValidateLockDelay(req.LockDelaySeconds, s.maxDelay, v)
	}
	if !v.Has("wait_seconds") {
		ValidateWait(req.WaitSeconds, s.maxWait, v)
	}
	if !v.Has("queue_ticket") {
		ValidateQueueTicket(req.QueueTicket, v)
	}
}

// ValidateRWLease checks a renewal (renew true) or a release.
func (s *Service) ValidateRWLease(req *RWLeaseRequest, renew bool, v *ValidationError) {
	ValidateRWName(req.Name, v)
	if !v.Has("owner") {
		req.Caller.Owner = NormalizeOwner(req.Caller.Owner, v)
	}
	if !v.Has("mode") {
		ValidateRWMode(req.Mode, v)
	}
	if req.Mode == Read && !v.Has("slot") {
		ValidateReaderSlot(req.Slot, v)
	}
	if req.Mode == Write {
		req.Slot = 0
	}
	if renew && !v.Has("ttl_seconds") {
		ValidateTTL(req.TTLSeconds, s.maxTTL, v)
	}
	if !v.Has("fencing_token") {
		ValidateFencingToken(req.FencingToken, v)
	}
}

// rwKey is the key of read/write lock name.
func (s *Service) rwKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrResource: &types.AttributeValueMemberS{Value: RWLockPrefix + name}}
}

// rwNames returns the lease names of mode's lease in slot k.
func rwNames(mode RWMode, k int) *leaseNames {
	if mode == Write {
		return &lockLease
	}
	return &slotNames[k]
}

// rwWrite is one acquire write: the reader slot it takes (a reader's), and
// for a queued waiter its ticket and the view it planned from.
type rwWrite struct {
	slot   int
	ticket string
	queued *view
}

// AcquireRW takes a lease of req.Name in req.Mode: a writer's when no lease
// blocks (the writer's, or any reader's, live or in its lock-delay), a
// reader's when the writer's lease does not block and a reader slot is
// free; a plain acquire only while no live waiter is queued. An
// uncontended acquire is one conditional write (a reader's guesses a
// random slot; when another took it, the failed write's old item or a read
// picks again, up to MaxSemaphoreWrites writes). With req.WaitSeconds above
// zero a held lock is waited for in the lock's queue, writers and readers
// in one arrival order, readers ahead of the first writer granted together
// (docs/design.md#read-write-locks).
func (s *Service) AcquireRW(ctx context.Context, req RWAcquireRequest, b Budget) (RWAcquireResult, error) {
	var v ValidationError
	if s.ValidateRWAcquire(&req, &v); v.Err() != nil {
		return RWAcquireResult{}, &v
	}
	now := s.now()
	if req.Arrived.IsZero() || req.Arrived.After(now) {
		req.Arrived = now
	}
	gid := newGrantID()
	var end time.Time
	if req.WaitSeconds > 0 {
		end = req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second - GrantGuard)
		if !now.Before(end) {
			return RWAcquireResult{}, fmt.Errorf("acquire-rwlock %q: %w", req.Name, ErrWaitElapsed)
		}
		end = deadlineEnd(ctx, b, now, end)
	}
	t := &rwTarget{s: s, req: req, gid: gid}
	res, item, err := t.attempt(ctx, b, end)
	if err != nil || res.Acquired || req.WaitSeconds == 0 {
		return res, err
	}
	w := &waiter{key: s.rwKey(req.Name), op: "acquire-rwlock", name: req.Name, caller: req.Caller, arrived: req.Arrived,
		waitSeconds: req.WaitSeconds, ticket: req.QueueTicket, writer: req.Mode == Write}
	out, err := s.waitFair(ctx, w, t, b, newView(item, true), res.FreeAt, true, end)
	res.Writes += out.writes
	res.Reads += out.reads
	res.Waited = out.waited
	if err != nil {
		return res, err
	}
	if out.granted {
		res.Acquired, res.Lease, res.FreeAt = true, t.lease, time.Time{}
		return res, nil
	}
	res.FreeAt, res.QueueTicket = out.freeAt, out.ticket
	return res, nil
}

// rwTarget is a read/write lock's item as an acquire (plain, or waiting
// in waitFair) takes it.
type rwTarget struct {
	s     *Service
	req   RWAcquireRequest
	gid   string
	lease RWLease // the grant, once granted
}

// attempt is one plain acquire: the guess, then up to MaxSemaphoreWrites
// writes in all from the views its failed writes give it (no write but
// the first at or after end, when not zero). Not granted, it returns the
// last view of the item.
func (t *rwTarget) attempt(ctx context.Context, b Budget, end time.Time) (RWAcquireResult, map[string]types.AttributeValue, error) {
	w := &rwWrite{slot: rand.N(MaxReaders)}
	var res RWAcquireResult
	for {
		res.Writes++
		granted, old, err := t.write(ctx, b, w)
		if err != nil || granted {
			res.Acquired, res.Lease = granted, t.lease
			return res, nil, err
		}
		if old == nil && !t.s.oldItem {
			if old, err = t.s.rwRead(ctx, t.req.Name, b); err != nil {
				return RWAcquireResult{}, nil, storeErr("acquire-rwlock", t.req.Name, err)
			}
			res.Reads++
		}
		now := t.s.now()
		if t.own(old, now) {
			res.Acquired, res.Lease = true, t.lease
			return res, nil, nil
		}
		until, blocked, _, _ := t.judge(old, now)
		if blocked || !itemOpen(old, now.UnixMilli()) || res.Writes >= MaxSemaphoreWrites || !end.IsZero() && !now.Before(end) {
			if blocked {
				res.FreeAt = until
			}
			return res, old, nil
		}
		w = &rwWrite{slot: t.pick(old, now)}
	}
}

// pick returns a reader slot free at now, at random among the free ones
// (acquirers that saw the same item spread out); 0 when none is.
func (t *rwTarget) pick(item map[string]types.AttributeValue, now time.Time) int {
	var free []int
	for k := range MaxReaders {
		if _, b := slotNames[k].blockedUntil(item, now); !b {
			free = append(free, k)
		}
	}
	if len(free) == 0 {
		return 0
	}
	return free[rand.N(len(free))]
}

// judge says whether the caller's mode could take the item at now (queued
// waiters aside), and otherwise until when it stays blocked: the writer's
// lease blocks both modes; a writer is also blocked by every reader, a
// reader only when all MaxReaders slots are.
func (t *rwTarget) judge(item map[string]types.AttributeValue, now time.Time) (time.Time, bool, bool, error) {
	until, blocked := lockLease.blockedUntil(item, now)
	var first time.Time // a reader's: the earliest slot's end
	for k := range MaxReaders {
		u, b := slotNames[k].blockedUntil(item, now)
		switch {
		case !b && t.req.Mode == Read:
			return until, blocked, false, nil
		case !b:
		case t.req.Mode == Write:
			blocked = true
			if u.After(until) {
				until = u
			}
		case first.IsZero() || u.Before(first):
			first = u
		}
	}
	if t.req.Mode == Write {
		return until, blocked, false, nil
	}
	if first.After(until) {
		until = first
	}
	return until, true, false, nil
}

func (t *rwTarget) take(ctx context.Context, b Budget, v *view, ticket string) (bool, *view, error) {
	now := t.s.now()
	if _, blocked, _, _ := t.judge(v.item, now); blocked {
		return false, nil, nil // judge is monotone: read it again
	}
	granted, old, err := t.write(ctx, b, &rwWrite{slot: t.pick(v.item, now), ticket: ticket, queued: v})
	if err != nil || granted {
		return granted, nil, err
	}
	if t.s.oldItem {
		return false, newView(old, true), nil
	}
	return false, nil, nil
}

func (t *rwTarget) own(item map[string]types.AttributeValue, now time.Time) bool {
	for k := range MaxReaders {
		if t.req.Mode == Write && k > 0 {
			break
		}
		a := rwNames(t.req.Mode, k)
		if !a.ownGrant(item, t.req.Caller, t.gid, now) {
			continue
		}
		if lock, ok := a.decode(t.req.Name, item); ok {
			t.lease = RWLease{Lock: lock, Mode: t.req.Mode, Slot: k}
			return true
		}
	}
	return false
}

func (t *rwTarget) peek(ctx context.Context, b Budget) (*view, error) {
	item, err := t.s.rwPeek(ctx, t.req.Name, b)
	if err != nil {
		return nil, err
	}
	return newView(item, false), nil
}

// front: the head, and a reader every entry ahead of which is a reader's.
func (t *rwTarget) front(v *view, i int) bool {
	if t.req.Mode == Write || i == 0 {
		return i == 0
	}
	for _, e := range v.queue[:i] {
		if e.writer {
			return false
		}
	}
	return true
}

// write makes one acquire write w. Granted, t.lease is the lease;
// otherwise it returns the old item of the failed condition (nil when
// the store did not return it).
func (t *rwTarget) write(ctx context.Context, b Budget, w *rwWrite) (bool, map[string]types.AttributeValue, error) {
	in := t.s.rwAcquireInput(t.req, t.s.now(), t.gid, w)
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := t.s.db.UpdateItem(cctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return false, ccf.Item, nil
		}
		return false, nil, storeErr("acquire-rwlock", t.req.Name, err)
	}
	lock, ok := rwNames(t.req.Mode, w.slot).decode(t.req.Name, out.Attributes)
	if !ok {
		return false, nil, fmt.Errorf("acquire-rwlock %q: store returned an incomplete item", t.req.Name)
	}
	t.lease = RWLease{Lock: lock, Mode: t.req.Mode, Slot: w.slot}
	if t.req.Mode == Write {
		t.lease.Slot = 0
	}
	return true, nil, nil
}

// rwAcquireInput builds the UpdateItem of acquire write w at now: a plain
// acquire's (w.ticket ""), taking the lock only while no live waiter is
// queued, or a queued waiter's, which requires its place (the head, or a
// reader behind readers only) and removes it.
func (s *Service) rwAcquireInput(req RWAcquireRequest, now time.Time, gid string, w *rwWrite) *dynamodb.UpdateItemInput {
	x := newExpr()
	nowMs := now.UnixMilli()
	x.v(":now", num(nowMs))
	expMs := nowMs + req.TTLSeconds*1000
	delayMs := req.LockDelaySeconds * 1000
	c := req.Caller
	writer := x.lease(&lockLease, "w")
	var l *leaseExpr // the lease this write grants
	// The writer's lease keeps out both modes while it blocks (free: the
	// builder's, lock-delay included); never written, it keeps out nobody.
	cond := "(" + writer.vacant() + " OR " + writer.free() + ")"
	if req.Mode == Write {
		l = x.lease(&lockLease, "")
		// Every reader slot is free: free_at (which every reader write
		// sets: expires_at + lock-delay, or the release's or force
		// release's time) not after :now. A slot never written has no
		// free_at, and a comparison with an absent attribute is false.
		cond += readersFree(x)
	} else {
		l = x.lease(&slotNames[w.slot], "")
		cond += " AND (" + l.vacant() + " OR " + l.free() + ")"
	}
	var remove []string
	lower := ""
	if w.ticket == "" {
		cond += " AND " + queueOpen(x)
	} else {
		x.n("#q", AttrQueue)
		x.n("#qi", entryID)
		x.n("#qt", entryUntil)
		x.n("#qo", AttrOwner)
		x.n("#qp", AttrPrincipal)
		i, _ := w.queued.find([]string{w.ticket}, c, req.Mode == Write, nowMs)
		i = max(i, 0)
		cond += " AND " + entryCond(i, c, w.ticket, x.values, "#qo", "#qp")
		// A reader behind the head: every entry ahead of it a reader's
		// (the head's batch; a writer's entry would be ahead of it).
		for j := range i {
			cond += " AND attribute_not_exists(#q[" + strconv.Itoa(j) + "]." + x.n("#qk", entryKind) + ")"
		}
		remove = append(remove, "#q["+strconv.Itoa(i)+"]")
		if v := w.queued; len(v.queue) > i {
			left := append(append([]entry{}, v.queue[:i]...), v.queue[i+1:]...)
			if set, vc := lowerUntil(v, left, x.names, x.values); set != "" {
				lower, cond = set, cond+" AND "+vc
			}
		}
	}

	// The grant: the lease, a token from the one counter (both read the
	// old counter), and free_at always (readerFree relies on it).
	x.s(":o", c.Owner)
	update := "SET " + l.n(pOwner) + " = :o, " + l.n(pAcq) + " = :now, " + l.n(pRen) + " = :now, " + l.n(pExp) + " = " +
		x.v(":exp", num(expMs)) + ", " + l.n(pGrant) + " = " + x.s(":gid", gid) + ", " + l.n(pTok) + " = if_not_exists(" +
		x.n("#c", AttrCounter) + ", " + x.v(":base", num(now.UnixMicro())) + ") + " + x.v(":one", one) +
		", #c = if_not_exists(#c, :base) + :one, " + x.n("#g", AttrTTL) + " = " + x.v(":gc", num(s.semGC(nowMs))) + ", " +
		l.n(pFree) + " = " + x.v(":f", num(expMs+delayMs))
	remove = append([]string{l.n(pRel), l.n(pForce), l.n(pRec)}, remove...)
	if delayMs > 0 {
		update += ", " + l.n(pDelay) + " = " + x.v(":d", num(delayMs))
	} else {
		remove = append(remove, l.n(pDelay))
	}
	if c.Principal != "" {
		update += ", " + l.n(pPrin) + " = " + x.s(":p", c.Principal)
	} else {
		remove = append(remove, l.n(pPrin))
	}
	if lower != "" {
		update += ", " + lower
	}
	update += " REMOVE " + strings.Join(remove, ", ")
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.rwKey(req.Name),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// readersFree is the writer's clause on the readers: " AND NOT #<k>f >
// :now" for every reader slot k, 3 operators a slot (the minimal form: a
// reader's free_at is at least its expires_at, and every write that ends
// a reader's lease sets it to when the slot comes free).
func readersFree(x *expr) string {
	var b strings.Builder
	for k := range MaxReaders {
		b.WriteString(" AND NOT " + x.lease(&slotNames[k], strconv.Itoa(k)).n(pFree) + " > :now")
	}
	return b.String()
}

// rwRead reads read/write lock name with one strongly consistent GetItem
// under b.
func (s *Service) rwRead(ctx context.Context, name string, b Budget) (map[string]types.AttributeValue, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.GetItem(cctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            s.rwKey(name),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// rwPeek reads read/write lock name with one eventually consistent GetItem
// under b (half the read units of rwRead): a waiter's and a watcher's
// reads.
func (s *Service) rwPeek(ctx context.Context, name string, b Budget) (map[string]types.AttributeValue, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: s.rwKey(name)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}
