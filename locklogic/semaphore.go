package locklogic

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Semaphores: a named semaphore with N permits is one item, keyed
// SemaphorePrefix + name, with one set of top-level attributes per slot
// (0 … N−1) and one fencing counter for all of them (docs/design.md,
// "Semaphores"). Each permit is a lease with the lock rules — owner,
// principal, TTL, lock-delay, the late-write rule, force release — kept in
// its slot's attributes: slotView maps them onto a lock item's, so the
// lock's helpers (live, blockedUntil, decode, classify) judge a slot as
// they judge a lock.

// Limits and names of semaphores.
const (
	// MaxPermits bounds a semaphore's N: every write of any permit
	// rewrites the whole item, and writes are billed by item size, so N
	// holders renewing cost ~N² write units (docs/design.md, "The bound
	// on N").
	MaxPermits = 100
	// SemaphorePrefix prefixes a semaphore's key. A lock name never holds
	// "/", so a semaphore and a lock may share a name.
	SemaphorePrefix = "sem/"
	// AttrPermits is the semaphore's N, set by the first acquire.
	AttrPermits = "permits"
	// AttrCounter is the fencing counter of all the semaphore's permits.
	AttrCounter = "counter"
	// MaxSemaphoreWrites bounds the conditional writes of one acquire:
	// its guess, then one per view of the item (a failed write's old
	// item, or a read) while other acquirers take the slots it picked.
	MaxSemaphoreWrites = 4
	// maxMarkerCleanup bounds the stale owner markers one write removes.
	maxMarkerCleanup = 2
	// maxResetCleanup bounds the owner markers a change of N removes.
	maxResetCleanup = 20
)

// ErrPermitsMismatch means an acquire asked for another number of permits
// than the semaphore has while some of its permits are live (or inside
// their lock-delay). The error is a *PermitsMismatchError.
var ErrPermitsMismatch = errors.New("the semaphore has another number of permits")

// PermitsMismatchError is ErrPermitsMismatch with the semaphore's N.
type PermitsMismatchError struct {
	Name    string
	Permits int64
}

func (e *PermitsMismatchError) Error() string {
	return fmt.Sprintf("semaphore %q has %d permits, some of them held", e.Name, e.Permits)
}

// Is makes a PermitsMismatchError an ErrPermitsMismatch.
func (e *PermitsMismatchError) Is(target error) bool { return target == ErrPermitsMismatch }

// Permit is one permit of a semaphore: a lease (Lock, whose Resource is
// the semaphore's name) in slot Slot of a semaphore of Permits permits.
type Permit struct {
	Lock
	Slot int
	// Permits is the semaphore's N when the answer knows it (status,
	// listing), else 0.
	Permits int64
}

// semKey is the key of semaphore name.
func (s *Service) semKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrResource: &types.AttributeValueMemberS{Value: SemaphorePrefix + name}}
}

// semGC is the garbage-collection time of a write at nowMs: a write of
// one slot does not know when the others end, but each ended by its last
// write plus the longest TTL and lock-delay, and no write was later than
// this one.
func (s *Service) semGC(nowMs int64) int64 {
	return s.gcAt(nowMs + (s.maxTTL+max(s.maxDelay, 0))*1000)
}

// permitsOf returns the semaphore's N and whether the item has one.
func permitsOf(item map[string]types.AttributeValue) (int64, bool) {
	p, ok := n(item, AttrPermits)
	if !ok || p < 1 {
		return 0, false
	}
	return min(p, MaxPermits), true
}

// SemaphoreAcquireRequest asks for a permit of semaphore Name, which has
// Permits permits, for TTLSeconds. LockDelaySeconds, WaitSeconds, Arrived
// and QueueTicket are as for AcquireRequest: with WaitSeconds above zero a
// full semaphore is waited for in the semaphore's queue (whatever
// Config.FairWaiting says: semaphores have no other way of waiting).
type SemaphoreAcquireRequest struct {
	Name             string
	Caller           Caller
	TTLSeconds       int64
	Permits          int64
	LockDelaySeconds int64
	WaitSeconds      int64
	Arrived          time.Time
	QueueTicket      string
}

// SemaphoreAcquireResult is the outcome of AcquireSemaphore. A full
// semaphore is an outcome (Acquired false), not an error.
type SemaphoreAcquireResult struct {
	Acquired bool
	// Permit is the new permit when Acquired.
	Permit Permit
	// FreeAt is, when not Acquired, the earliest time a permit comes free
	// as the request last saw the item; zero when the permits it saw free
	// were taken by others between its writes (retry at once).
	FreeAt time.Time
	// QueueTicket is, for a waiting acquire that ended without a permit,
	// its place in the semaphore's queue (AcquireResult.QueueTicket).
	QueueTicket string
	// Waited is how long a waiting acquire spent waiting after its first
	// attempt found no permit for it.
	Waited time.Duration
	// Writes and Reads are the store calls the acquire made, its wait's
	// included.
	Writes, Reads int
}

// ValidateSemaphoreName checks a semaphore's name under the rules of
// ValidateResource, as the field "name".
func ValidateSemaphoreName(name string, v *ValidationError) {
	if detail := checkName(name, MaxResourceBytes); detail != "" {
		v.Add("name", detail)
		return
	}
	if strings.Contains(name, "/") {
		v.Add("name", `must not contain "/"`)
	}
}

// ValidatePermits checks a semaphore's N: 1 ≤ permits ≤ MaxPermits.
func ValidatePermits(permits int64, v *ValidationError) {
	if permits < 1 || permits > MaxPermits {
		v.Add("permits", "must be an integer from 1 to "+strconv.Itoa(MaxPermits))
	}
}

// ValidateSlot checks a permit's slot: 0 ≤ slot < MaxPermits.
func ValidateSlot(slot int64, v *ValidationError) {
	if slot < 0 || slot >= MaxPermits {
		v.Add("slot", "must be an integer from 0 to "+strconv.Itoa(MaxPermits-1)+" (the slot the acquire answered)")
	}
}

// ValidateSemaphoreAcquire checks req as ValidateAcquire does.
func (s *Service) ValidateSemaphoreAcquire(req *SemaphoreAcquireRequest, v *ValidationError) {
	ValidateSemaphoreName(req.Name, v)
	if !v.Has("owner") {
		req.Caller.Owner = NormalizeOwner(req.Caller.Owner, v)
	}
	if !v.Has("ttl_seconds") {
		ValidateTTL(req.TTLSeconds, s.maxTTL, v)
	}
	if !v.Has("permits") {
		ValidatePermits(req.Permits, v)
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

// AcquireSemaphore takes a permit of req.Name when one is free, or
// re-acquires the caller's own (one permit per owner): first with one
// conditional write of the caller's home slot, then, when that fails,
// from the failed write's old item (DynamoDB returns it; elsewhere one
// consistent read) one more write of the slot it picks, up to
// MaxSemaphoreWrites writes while others take the slots it picks. A full
// semaphore answers Acquired false with the earliest time a permit comes
// free. Another N than the semaphore's is a *PermitsMismatchError while a
// permit is live or inside its lock-delay; otherwise the acquire sets the
// new N. No acquire takes a free slot while a live waiter is queued (its
// own live permit aside). Each store call runs under b.
//
// With req.WaitSeconds above zero, a semaphore found full (or with
// waiters queued) is waited for in the semaphore's queue, as AcquireWait
// waits for a lock with FairWaiting: the head of the queue takes any free
// slot with the removal of its entry in one write, under the same clock
// rules (no write in the last GrantGuard of the wait counted from
// req.Arrived, nor past the deadline's budget).
func (s *Service) AcquireSemaphore(ctx context.Context, req SemaphoreAcquireRequest, b Budget) (SemaphoreAcquireResult, error) {
	var v ValidationError
	if s.ValidateSemaphoreAcquire(&req, &v); v.Err() != nil {
		return SemaphoreAcquireResult{}, &v
	}
	now := s.now()
	if req.Arrived.IsZero() || req.Arrived.After(now) {
		req.Arrived = now
	}
	id := identityOf(req.Caller)
	gid := newGrantID()
	var end time.Time
	if req.WaitSeconds > 0 {
		end = req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second - GrantGuard)
		if !now.Before(end) {
			return SemaphoreAcquireResult{}, fmt.Errorf("acquire-semaphore %q: %w", req.Name, ErrWaitElapsed)
		}
		end = deadlineEnd(ctx, b, now, end)
	}
	res, item, err := s.semAttempt(ctx, req, b, id, gid, end)
	if err != nil || res.Acquired || req.WaitSeconds == 0 {
		return res, err
	}
	w := &waiter{key: s.semKey(req.Name), op: "acquire-semaphore", name: req.Name, caller: req.Caller, arrived: req.Arrived,
		waitSeconds: req.WaitSeconds, ticket: req.QueueTicket}
	t := &semTarget{s: s, req: req, id: id, gid: gid}
	// The attempt's last view is the item as a failed write met it, or a
	// consistent read: a view a join may rely on.
	out, err := s.waitFair(ctx, w, t, b, newView(item, true), res.FreeAt, true, end)
	res.Writes += out.writes
	res.Reads += out.reads
	res.Waited = out.waited
	if err != nil {
		return res, err
	}
	if out.granted {
		res.Acquired, res.Permit, res.FreeAt = true, t.permit, time.Time{}
		return res, nil
	}
	res.FreeAt, res.QueueTicket = out.freeAt, out.ticket
	return res, nil
}

// semAttempt is one acquire of a permit, as a plain acquire: the guess,
// then up to MaxSemaphoreWrites writes in all from the views of the item
// its failed writes give it, no write but the first at or after end (when
// not zero). Not granted, it returns the last view of the item (the old
// item of a failed write, or a consistent read).
func (s *Service) semAttempt(ctx context.Context, req SemaphoreAcquireRequest, b Budget, id identity, gid string, end time.Time) (SemaphoreAcquireResult, map[string]types.AttributeValue, error) {
	w := semWrite{slot: id.home(req.Permits), home: id.home(req.Permits), guess: true}
	var res SemaphoreAcquireResult
	for {
		permit, old, err := s.semAcquireWrite(ctx, req, b, id, gid, &w, "")
		res.Writes++
		if err != nil {
			return SemaphoreAcquireResult{}, nil, err
		}
		if permit != nil {
			res.Acquired, res.Permit = true, *permit
			return res, nil, nil
		}
		if old == nil && !s.oldItem {
			if old, err = s.semRead(ctx, req.Name, b); err != nil {
				return SemaphoreAcquireResult{}, nil, storeErr("acquire-semaphore", req.Name, err)
			}
			res.Reads++
		}
		// A write of this request that landed (its answer lost, the SDK's
		// retry refused) is its grant, whatever the wait's clock says: a
		// lock acquire answers it too (#gi = :gid).
		if p, ok := ownPermit(req, old, gid, s.now()); ok {
			res.Acquired, res.Permit = true, p
			return res, nil, nil
		}
		next, freeAt, _, err := planSemaphore(req, old, s.now(), id, gid, false)
		if err != nil {
			return SemaphoreAcquireResult{}, nil, err
		}
		if next == nil || res.Writes >= MaxSemaphoreWrites || !end.IsZero() && !s.now().Before(end) {
			res.FreeAt = freeAt
			return res, old, nil
		}
		w = *next
	}
}

// semTarget is a semaphore's item as waitFair queues on it: free when
// planSemaphore finds a slot for the caller, and taken by the write it
// plans (the head's with its place, a plain acquire's behind no live
// waiter).
type semTarget struct {
	s      *Service
	req    SemaphoreAcquireRequest
	id     identity
	gid    string
	permit Permit // the grant, once granted
}

func (t *semTarget) judge(item map[string]types.AttributeValue, now time.Time) (time.Time, bool, bool, error) {
	next, freeAt, own, err := planSemaphore(t.req, item, now, t.id, t.gid, true)
	if err != nil {
		return time.Time{}, false, false, err
	}
	return freeAt, next == nil, own, nil
}

func (t *semTarget) take(ctx context.Context, b Budget, v *view, ticket string) (bool, *view, error) {
	next, _, _, err := planSemaphore(t.req, v.item, t.s.now(), t.id, t.gid, true)
	if err != nil || next == nil {
		// Nothing to write (judge is monotone in time: not after it found
		// the item free): read it again.
		return false, nil, err
	}
	if ticket != "" {
		next.queued = v
	}
	permit, old, err := t.s.semAcquireWrite(ctx, t.req, b, t.id, t.gid, next, ticket)
	if err != nil {
		return false, nil, err
	}
	if permit != nil {
		t.permit = *permit
		return true, nil, nil
	}
	if t.s.oldItem {
		return false, newView(old, true), nil
	}
	return false, nil, nil
}

func (t *semTarget) own(item map[string]types.AttributeValue, now time.Time) bool {
	p, ok := ownPermit(t.req, item, t.gid, now)
	if ok {
		t.permit = p
	}
	return ok
}

// ownPermit finds the permit this request's grant id gid wrote for the
// caller, live at now, in any slot below N: the grant of a write whose
// first attempt landed though its answer was lost.
func ownPermit(req SemaphoreAcquireRequest, item map[string]types.AttributeValue, gid string, now time.Time) (Permit, bool) {
	permits, _ := permitsOf(item)
	for k := range int(permits) {
		if !slotNames[k].ownGrant(item, req.Caller, gid, now) {
			continue
		}
		if p, ok := decodePermit(req.Name, item, k); ok {
			p.Permits = permits
			return p, true
		}
	}
	return Permit{}, false
}

// peek reads the whole item (a read is billed by the item's size whatever
// it projects, and the head plans its write from every slot).
func (t *semTarget) peek(ctx context.Context, b Budget) (*view, error) {
	item, err := t.s.semPeek(ctx, t.req.Name, b)
	if err != nil {
		return nil, err
	}
	return newView(item, false), nil
}

func (t *semTarget) front(_ *view, i int) bool { return i == 0 }

// semRead reads semaphore name with one strongly consistent GetItem under
// b.
func (s *Service) semRead(ctx context.Context, name string, b Budget) (map[string]types.AttributeValue, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.GetItem(cctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            s.semKey(name),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}
