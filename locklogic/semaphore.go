package locklogic

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

// decodePermit reads slot k of item as a permit; ok is false when the
// slot holds no lease.
func decodePermit(name string, item map[string]types.AttributeValue, k int) (Permit, bool) {
	lock, ok := slotNames[k].decode(name, item)
	if !ok {
		return Permit{}, false
	}
	return Permit{Lock: lock, Slot: k}, true
}

// holders returns the permits of a semaphore item at now, by slot: the
// live ones, or with blocking those that keep their slot from others (live,
// or expired inside their lock-delay).
func holders(name string, item map[string]types.AttributeValue, now time.Time, blocking bool) []Permit {
	permits, ok := permitsOf(item)
	if !ok {
		return nil
	}
	var out []Permit
	for k := range int(permits) {
		a := &slotNames[k]
		if blocking {
			if _, b := a.blockedUntil(item, now); !b {
				continue
			}
		} else if !a.live(item, now) {
			continue
		}
		if p, ok := a.decode(name, item); ok {
			out = append(out, Permit{Lock: p, Slot: k, Permits: permits})
		}
	}
	return out
}

// identity is a caller as a semaphore sees it: the hash its home slot is
// taken from, and the name of its owner marker.
type identity struct {
	hash   uint64
	marker string
}

// markerPrefix starts every owner marker's attribute name.
const markerPrefix = "w"

// identityOf hashes a caller: owner and principal together, since the same
// owner string under another principal is another owner.
func identityOf(c Caller) identity {
	sum := sha256.Sum256([]byte(c.Principal + "\x00" + c.Owner))
	return identity{hash: binary.BigEndian.Uint64(sum[:8]), marker: markerPrefix + hex.EncodeToString(sum[8:16])}
}

// HomeSlot returns the slot an acquire by c of a semaphore of permits
// permits tries first (with one write, when it is free): the same for
// every acquire of that owner and principal.
func HomeSlot(c Caller, permits int64) int {
	if permits < 1 {
		return 0
	}
	return identityOf(Caller{Owner: strings.TrimSpace(c.Owner), Principal: c.Principal}).home(permits)
}

// home is the caller's guess among n slots.
func (id identity) home(n int64) int { return int(id.hash % uint64(n)) }

// isMarker reports whether an attribute name is an owner marker's.
func isMarker(name string) bool {
	if len(name) != 1+16 || !strings.HasPrefix(name, markerPrefix) {
		return false
	}
	_, err := hex.DecodeString(name[1:])
	return err == nil
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

// semWrite is one acquire write: the slot it takes and what it knows of
// the item (nothing for the guess; a view of it afterwards).
type semWrite struct {
	slot int
	// guess is the first write: the caller's home slot, with no owner
	// marker of the caller on the item.
	guess bool
	// The caller's marker as the view showed it, and the slot whose
	// grant it names (-1: none). A write elsewhere requires that grant
	// still not live: a late renewal may have revived it since the view.
	markerSeen  bool
	markerValue string
	markerSlot  int
	// home is the caller's home slot; a write of another slot sets the
	// caller's marker and requires home not to be the caller's live
	// permit.
	home int
	// cleanup are other callers' markers the view showed stale.
	cleanup []staleMarker
	// reset changes N: the view showed no permit blocking.
	reset *semReset
	// queued is, for the head's grant, the view it was planned from: the
	// grant lowers queue_until to the entries behind the head when the
	// view shows it later than all of them (lowerUntil).
	queued *view
}

// staleMarker is another caller's marker whose grant holds no live permit.
type staleMarker struct {
	name, value string
	slot        int // the slot of its grant, -1 when no slot holds it
}

// semReset is what a change of N conditions on: the view's N and counter
// (no grant since), and every slot of the view's N whose ended lease a
// late renewal could revive (revivable: still not live).
type semReset struct {
	permits int64
	counter string
	expired []int
	markers []string
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

// planSemaphore decides the next write of an acquire from a view of the
// item at now (nil: the item is absent): the caller's own permit, a free
// slot, a change of N, or none (full, with the earliest time a permit
// comes free; waiters queued for the free slots, without a time; or a
// mismatch of N). own says that none is planned because the caller holds
// a permit granted or renewed after the request was issued (one permit
// per owner, and the late-write rule keeps it): freeAt is its end. A plain acquire (head false) takes no free slot while a
// live waiter is queued, nor its own permit unless live; the head of the
// queue (head) is the one waiter that may.
func planSemaphore(req SemaphoreAcquireRequest, item map[string]types.AttributeValue, now time.Time, id identity, gid string, head bool) (next *semWrite, freeAt time.Time, own bool, err error) {
	w := &semWrite{home: id.home(req.Permits), markerSlot: -1}
	open := head || itemOpen(item, now.UnixMilli())
	if v, ok := item[id.marker].(*types.AttributeValueMemberS); ok {
		w.markerSeen, w.markerValue = true, v.Value
		permits, _ := permitsOf(item)
		for k := range int(permits) {
			if str(item, slotNames[k].grant) == v.Value {
				w.markerSlot = k
				break
			}
		}
	}
	if permits, ok := permitsOf(item); ok && permits != req.Permits {
		if anySlot(permits, func(a *leaseNames) bool { _, b := a.blockedUntil(item, now); return b }) {
			return nil, time.Time{}, false, &PermitsMismatchError{Name: req.Name, Permits: permits}
		}
		if !open {
			return nil, time.Time{}, false, nil // the queue's first
		}
		// No permit blocks: this acquire sets the new N, on condition
		// that nothing was granted since the view and that every lease
		// it judged ended is still not live. Below the new N as above
		// it: a late renewal that revived a slot below it would leave a
		// permit where, under the new N, its owner's home or marker no
		// longer says it is (two permits for one owner); one above it
		// could never be renewed or released again.
		r := &semReset{permits: permits, counter: numString(item, AttrCounter)}
		for k := range int(permits) {
			if slotNames[k].revivable(item) {
				r.expired = append(r.expired, k)
			}
		}
		for name := range item {
			if isMarker(name) && name != id.marker && len(r.markers) < maxResetCleanup {
				r.markers = append(r.markers, name)
			}
		}
		slices.Sort(r.markers)
		w.slot, w.reset = w.home, r
		return w, time.Time{}, false, nil
	}
	n := int(req.Permits)
	// The caller's own permit (live, or inside its lock-delay): take it
	// again, as a lock's owner does.
	for k := range n {
		a := &slotNames[k]
		if !a.isHeldBy(item, req.Caller) {
			continue
		}
		_, released := item[a.released]
		_, forced := item[a.forced]
		until, blocked := a.blockedUntil(item, now)
		if released || forced || !blocked {
			continue
		}
		if str(item, a.grant) != gid && !a.issuedAfter(item, req.Arrived) {
			// Granted or renewed after this request was issued: the
			// late-write rule keeps it, and the caller holds it.
			return nil, until, true, nil
		}
		if !open && !a.live(item, now) {
			// Its permit is in its lock-delay: the queue comes first, as
			// for a lock's owner.
			return nil, time.Time{}, false, nil
		}
		w.slot = k
		w.cleanup = staleMarkers(item, n, now, id.marker)
		return w, time.Time{}, false, nil
	}
	var free []int
	var earliest time.Time
	for k := range n {
		until, blocked := slotNames[k].blockedUntil(item, now)
		if !blocked {
			free = append(free, k)
		} else if earliest.IsZero() || until.Before(earliest) {
			earliest = until
		}
	}
	if len(free) == 0 {
		return nil, earliest, false, nil
	}
	if !open {
		return nil, time.Time{}, false, nil // the free slots are the queued waiters'
	}
	// Home when free; else any free slot, at random, so that acquirers
	// that saw the same item spread out.
	w.slot = free[rand.N(len(free))]
	if slices.Contains(free, w.home) {
		w.slot = w.home
	}
	w.cleanup = staleMarkers(item, n, now, id.marker)
	return w, time.Time{}, false, nil
}

// anySlot reports whether some slot below permits satisfies f.
func anySlot(permits int64, f func(*leaseNames) bool) bool {
	for k := range int(permits) {
		if f(&slotNames[k]) {
			return true
		}
	}
	return false
}

// staleMarkers returns up to maxMarkerCleanup markers of other callers on
// item whose grant holds no live permit among its n slots, in name order.
func staleMarkers(item map[string]types.AttributeValue, n int, now time.Time, own string) []staleMarker {
	var names []string
	for name := range item {
		if isMarker(name) && name != own {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []staleMarker
	for _, name := range names {
		gid := str(item, name)
		m := staleMarker{name: name, value: gid, slot: -1}
		for k := range n {
			if str(item, slotNames[k].grant) == gid {
				m.slot = k
				break
			}
		}
		if m.slot >= 0 && slotNames[m.slot].live(item, now) {
			continue
		}
		if out = append(out, m); len(out) == maxMarkerCleanup {
			break
		}
	}
	return out
}

// numString returns the number attribute name of item as stored, "" when
// absent.
func numString(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

// semAcquireWrite makes one acquire write w under b: a plain acquire's
// (ticket ""), or the head's of the queue with ticket. It returns the new
// permit, or the old item of a failed condition (nil when the store did
// not return it).
func (s *Service) semAcquireWrite(ctx context.Context, req SemaphoreAcquireRequest, b Budget, id identity, gid string, w *semWrite, ticket string) (*Permit, map[string]types.AttributeValue, error) {
	in := s.semAcquireInput(req, s.now(), id, gid, w, ticket)
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.UpdateItem(cctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return nil, ccf.Item, nil
		}
		return nil, nil, storeErr("acquire-semaphore", req.Name, err)
	}
	p, ok := decodePermit(req.Name, out.Attributes, w.slot)
	if !ok {
		return nil, nil, fmt.Errorf("acquire-semaphore %q: store returned an incomplete item", req.Name)
	}
	p.Permits = req.Permits
	return &p, nil, nil
}

// semAcquireInput builds the UpdateItem of acquire write w at now: a plain
// acquire's (ticket ""), which takes a free slot only while no live waiter
// is queued, or the head's of the queue with ticket, which requires its
// place at the head and removes it.
func (s *Service) semAcquireInput(req SemaphoreAcquireRequest, now time.Time, id identity, gid string, w *semWrite, ticket string) *dynamodb.UpdateItemInput {
	x := newExpr()
	nowMs := now.UnixMilli()
	x.v(":now", num(nowMs))
	l := x.lease(&slotNames[w.slot], "")
	expMs := nowMs + req.TTLSeconds*1000
	delayMs := req.LockDelaySeconds * 1000
	c := req.Caller
	// other is the builder of another slot this write names.
	other := func(k int) *leaseExpr { return x.lease(&slotNames[k], strconv.Itoa(k)) }

	// N: as asked (or none yet); a change of N, as the view showed it and
	// with no grant since.
	var cond string
	if r := w.reset; r != nil {
		cond = x.n("#pm", AttrPermits) + " = " + x.v(":pm0", num(r.permits))
		if r.counter == "" {
			cond += " AND attribute_not_exists(" + x.n("#c", AttrCounter) + ")"
		} else {
			cond += " AND " + x.n("#c", AttrCounter) + " = " + x.v(":c0", &types.AttributeValueMemberN{Value: r.counter})
		}
		// Every lease the view judged ended that a late renewal could
		// revive is still not live (stillExpired: one comparison a slot,
		// so a change of N from MaxPermits stays within DynamoDB's 300
		// operators). The others stay ended but by a grant, which the
		// counter excludes. This also conditions the removal of the
		// markers below: every grant a marker can name is in one of
		// these slots (or ended for good), and no marker moves but with
		// a grant.
		for _, k := range r.expired {
			cond += " AND " + other(k).stillExpired()
		}
	} else {
		cond = "(attribute_not_exists(" + x.n("#pm", AttrPermits) + ") OR #pm = " + x.v(":n", num(req.Permits)) + ")"
	}
	// The slot: free (never taken, released, or expired with its
	// lock-delay passed), or the caller's own lease not newer than the
	// request (or written by this very request: an SDK retry). A plain
	// acquire takes a free slot only while no live waiter is queued, and
	// its own permit then only when live (queueOpen and running, as for a
	// lock); the head of the queue takes it when its place is the head.
	free := "(" + l.vacant() + " OR " + l.released() + " OR " + l.freeByClock() + ")"
	own := "(" + l.holds(c) + " AND (" + l.notNewer(x.v(":iss", num(min(req.Arrived.UnixMilli(), nowMs))), true) + " OR " +
		l.grantIs(x.s(":gid", gid)) + "))"
	var remove []string
	lower := "" // the head's grant: queue_until lowered to the entries behind it
	if ticket == "" {
		cond += " AND ((" + free + " AND " + queueOpen(x) + ") OR (" + own + " AND (" + queueOpen(x) + " OR (" + l.running() + "))))"
	} else {
		x.n("#q", AttrQueue)
		x.n("#qi", entryID)
		x.n("#qt", entryUntil)
		x.n("#qo", AttrOwner)
		x.n("#qp", AttrPrincipal)
		cond += " AND " + entryCond(0, c, ticket, x.values, "#qo", "#qp") + " AND (" + free + " OR " + own + ")"
		remove = append(remove, "#q[0]")
		if v := w.queued; v != nil && len(v.queue) > 0 {
			if set, vc := lowerUntil(v, v.queue[1:], x.names, x.values); set != "" {
				lower, cond = set, cond+" AND "+vc
			}
		}
	}
	// One permit per owner. The guess needs no marker of the caller (a
	// caller whose permit is not in its home slot has one); later writes
	// need the marker as they saw it and, away from home, home not the
	// caller's live permit.
	switch {
	case w.guess:
		cond += " AND attribute_not_exists(" + x.n("#w", id.marker) + ")"
	case w.markerSeen:
		cond += " AND " + x.n("#w", id.marker) + " = " + x.s(":wv", w.markerValue)
		if m := w.markerSlot; m >= 0 && m != w.slot {
			// The permit the marker names was not live in the view; a
			// late renewal may revive it before this write lands (it
			// still finds the marker, unchanged), and then the caller
			// would hold two: this write requires it still not live.
			cond += " AND " + other(m).grantEnded(":wv")
		}
	default:
		cond += " AND attribute_not_exists(" + x.n("#w", id.marker) + ")"
	}
	if w.slot != w.home {
		h := other(w.home)
		cond += " AND NOT (" + h.heldBy(c) + " AND " + h.live() + ")"
	}
	// Other callers' stale markers: unchanged, and their grant still not
	// live (a late renewal may have revived it).
	for i, m := range w.cleanup {
		ph, vph := "#m"+strconv.Itoa(i), ":m"+strconv.Itoa(i)
		cond += " AND (attribute_not_exists(" + x.n(ph, m.name) + ") OR " + ph + " = " + x.s(vph, m.value) + ")"
		if m.slot >= 0 {
			cond += " AND " + other(m.slot).grantEnded(vph)
		}
		remove = append(remove, ph)
	}
	if r := w.reset; r != nil {
		for i, m := range r.markers {
			remove = append(remove, x.n("#rm"+strconv.Itoa(i), m))
		}
	}

	// The grant: the slot's lease, a token from the one counter (both
	// read the old counter), N.
	update := "SET " + l.n(pOwner) + " = :o, " + l.n(pAcq) + " = :now, " + l.n(pRen) + " = :now, " + l.n(pExp) + " = " +
		x.v(":exp", num(expMs)) + ", " + l.n(pGrant) + " = :gid, " + l.n(pTok) + " = if_not_exists(" + x.n("#c", AttrCounter) + ", " +
		x.v(":base", num(now.UnixMicro())) + ") + " + x.v(":one", one) + ", #c = if_not_exists(#c, :base) + :one, " +
		x.n("#pm", AttrPermits) + " = " + x.v(":n", num(req.Permits)) + ", " + x.n("#g", AttrTTL) + " = " + x.v(":gc", num(s.semGC(nowMs)))
	remove = append([]string{l.n(pRel), l.n(pForce), l.n(pRec)}, remove...)
	if delayMs > 0 {
		update += ", " + l.n(pDelay) + " = " + x.v(":d", num(delayMs)) + ", " + l.n(pFree) + " = " + x.v(":f", num(expMs+delayMs))
	} else {
		remove = append(remove, l.n(pDelay), l.n(pFree))
	}
	if c.Principal != "" {
		update += ", " + l.n(pPrin) + " = :p"
	} else {
		remove = append(remove, l.n(pPrin))
	}
	switch {
	case w.slot != w.home:
		update += ", #w = :gid" // away from home: the caller's marker names this grant
	case w.markerSeen && !w.guess:
		remove = append(remove, "#w") // home again: the marker goes
	}
	if lower != "" {
		update += ", " + lower
	}
	update += " REMOVE " + strings.Join(remove, ", ")

	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.semKey(req.Name),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// SemaphoreRenewRequest asks to extend the caller's live permit in Slot to
// now + TTLSeconds; with FencingToken set, only the permit with that token.
type SemaphoreRenewRequest struct {
	Name         string
	Caller       Caller
	Slot         int64
	TTLSeconds   int64
	FencingToken *int64
}

// SemaphoreReleaseRequest asks to end the caller's live permit in Slot;
// with FencingToken set, only the permit with that token.
type SemaphoreReleaseRequest struct {
	Name         string
	Caller       Caller
	Slot         int64
	FencingToken *int64
}

// ValidateSemaphoreRenew checks req as ValidateAcquire does.
func (s *Service) ValidateSemaphoreRenew(req *SemaphoreRenewRequest, v *ValidationError) {
	s.validateSlotRequest(req.Name, &req.Caller, req.Slot, &req.TTLSeconds, req.FencingToken, v)
}

// ValidateSemaphoreRelease checks req as ValidateAcquire does.
func (s *Service) ValidateSemaphoreRelease(req *SemaphoreReleaseRequest, v *ValidationError) {
	s.validateSlotRequest(req.Name, &req.Caller, req.Slot, nil, req.FencingToken, v)
}

func (s *Service) validateSlotRequest(name string, c *Caller, slot int64, ttl, token *int64, v *ValidationError) {
	ValidateSemaphoreName(name, v)
	if !v.Has("owner") {
		c.Owner = NormalizeOwner(c.Owner, v)
	}
	if !v.Has("slot") {
		ValidateSlot(slot, v)
	}
	if ttl != nil && !v.Has("ttl_seconds") {
		ValidateTTL(*ttl, s.maxTTL, v)
	}
	if !v.Has("fencing_token") {
		ValidateFencingToken(token, v)
	}
}

// RenewSemaphore extends the caller's live permit in req.Slot, keeping its
// token, with one conditional UpdateItem: Renew's rules, on the slot, and
// the slot must be below the semaphore's N and the caller's marker must
// allow the permit (markerCondition): a renewal that lands late may
// revive a permit that had expired, and one permit per owner holds only
// while every permit of the caller away from home is the one its marker
// names.
func (s *Service) RenewSemaphore(ctx context.Context, req SemaphoreRenewRequest) (Permit, error) {
	var v ValidationError
	if s.ValidateSemaphoreRenew(&req, &v); v.Err() != nil {
		return Permit{}, &v
	}
	k := int(req.Slot)
	now := s.now()
	expMs := now.UnixMilli() + req.TTLSeconds*1000
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	l := x.lease(&slotNames[k], "")
	cond := x.n("#pm", AttrPermits) + " > " + x.v(":k", num(req.Slot)) + " AND " + l.holder(req.Caller, req.FencingToken, true) +
		" AND " + markerCondition(identityOf(req.Caller), k, x)
	x.v(":exp", num(expMs))
	x.v(":zero", num(0))
	x.v(":gc", num(s.semGC(now.UnixMilli())))
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.semKey(req.Name),
		UpdateExpression:                    aws.String("SET " + l.renewSet()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		err = s.semExplain(ctx, "renew-semaphore", req.Name, k, req.Caller, req.FencingToken, now, "", err)
		var later *renewedSinceError
		if !errors.As(err, &later) {
			return Permit{}, err
		}
		if later.lock.ExpiresAt.UnixMilli() >= expMs {
			later.lock.Resource = req.Name
			return Permit{Lock: later.lock, Slot: k}, nil
		}
		return Permit{}, fmt.Errorf("renew-semaphore %q: %w", req.Name, ErrRenewRaced)
	}
	p, ok := decodePermit(req.Name, out.Attributes, k)
	if !ok {
		return Permit{}, fmt.Errorf("renew-semaphore %q: store returned an incomplete item", req.Name)
	}
	p.Permits, _ = permitsOf(out.Attributes)
	return p, nil
}

// markerCondition is the condition under which a write may extend or
// revive the caller's (id's) permit in slot k: the caller's marker names
// that permit's grant (k away from home), or the caller has no marker and k
// is its home under the item's N (permits one of the Ns whose home for id
// is k, at most MaxPermits values: a condition cannot take a hash modulo
// N). It adds its names and values.
//
// One permit per owner rests on the marker: an acquire's guess of its home
// slot requires no marker, so a caller's permit away from home must keep
// its marker while live. An expired permit may come back, though: a
// renewal's :now is taken once per request, and one that lands late (an
// SDK retry, a delayed packet) revives the permit it renews if its :now
// was before the permit's end. Meanwhile another acquire may have judged
// the permit ended and removed its marker (staleMarkers), or the caller
// may have taken another permit (moving its marker, or removing it at
// home). No timing rule tells when a revival can no longer come (a request
// may land at any time); a condition on the renewal does: once the marker
// is gone or moved, the old permit stays ended (the renewal is 404), and a
// write that relies on a marked permit staying ended requires it still not
// live (semAcquireInput). A permit at home needs the marker absent: the
// caller holds no permit away from home.
func markerCondition(id identity, k int, x *expr) string {
	cond := x.n("#w", id.marker) + " = " + x.lease(&slotNames[k], "").n(pGrant)
	var homes []string
	for n := k + 1; n <= MaxPermits; n++ {
		if id.home(int64(n)) == k {
			homes = append(homes, x.v(":h"+strconv.Itoa(n), num(int64(n))))
		}
	}
	if len(homes) > 0 {
		cond = "((#pm IN (" + strings.Join(homes, ", ") + ") AND attribute_not_exists(#w)) OR " + cond + ")"
	}
	return cond
}

// markerAllows reports whether item meets markerCondition for id and k.
func markerAllows(item map[string]types.AttributeValue, id identity, k int) bool {
	if _, ok := item[id.marker]; ok {
		return str(item, id.marker) == str(item, slotNames[k].grant)
	}
	permits, ok := permitsOf(item)
	return ok && id.home(permits) == k
}

// ReleaseSemaphore ends the caller's live permit in req.Slot with one
// conditional UpdateItem, Release's rules on the slot: the slot frees at
// once and keeps its tombstone attributes; the counter survives.
func (s *Service) ReleaseSemaphore(ctx context.Context, req SemaphoreReleaseRequest) error {
	var v ValidationError
	if s.ValidateSemaphoreRelease(&req, &v); v.Err() != nil {
		return &v
	}
	k := int(req.Slot)
	now := s.now()
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	l := x.lease(&slotNames[k], "")
	cond := l.holder(req.Caller, req.FencingToken, false)
	x.v(":gc", num(s.semGC(now.UnixMilli())))
	releaseID := newReleaseID()
	x.s(":ri", releaseID)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.semKey(req.Name),
		UpdateExpression:                    aws.String("SET " + l.releaseSet()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		return s.semExplain(ctx, "release-semaphore", req.Name, k, req.Caller, req.FencingToken, now, releaseID, err)
	}
	return nil
}

// semExplain is explain for slot k of a semaphore.
func (s *Service) semExplain(ctx context.Context, op, name string, k int, c Caller, token *int64, now time.Time, releaseID string, err error) error {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return storeErr(op, name, err)
	}
	item := ccf.Item
	if item == nil {
		if s.oldItem {
			return ErrNotFound
		}
		var gerr error
		if item, gerr = s.semRead(ctx, name, Budget{}); gerr != nil {
			return storeErr(op, name, gerr)
		}
	}
	a := &slotNames[k]
	if releaseID != "" && str(item, a.release) == releaseID {
		return nil
	}
	if permits, ok := permitsOf(item); !ok || int64(k) >= permits {
		return ErrNotFound
	}
	err = a.classify(item, c, token, now, op == "renew-semaphore")
	var later *renewedSinceError
	if errors.As(err, &later) && !markerAllows(item, identityOf(c), k) {
		// The permit's marker is gone or moved: it was judged ended, or
		// the caller took another (markerCondition).
		return ErrNotFound
	}
	return err
}

// SemaphoreStatus is a semaphore as status shows it.
type SemaphoreStatus struct {
	Name string
	// Permits is N; 0 when the semaphore has no record (never taken, or
	// garbage collected).
	Permits int64
	// Holders are the live permits, by slot.
	Holders []Permit
	// Counter is the latest permit's fencing token (0: none).
	Counter int64
}

// SemaphoreStatus returns the live permits of semaphore name with one
// strongly consistent read.
func (s *Service) SemaphoreStatus(ctx context.Context, name string) (SemaphoreStatus, error) {
	var v ValidationError
	ValidateSemaphoreName(name, &v)
	if err := v.Err(); err != nil {
		return SemaphoreStatus{}, err
	}
	item, err := s.semRead(ctx, name, Budget{})
	if err != nil {
		return SemaphoreStatus{}, storeErr("semaphore-status", name, err)
	}
	return statusOf(name, item, s.now()), nil
}

func statusOf(name string, item map[string]types.AttributeValue, now time.Time) SemaphoreStatus {
	st := SemaphoreStatus{Name: name, Holders: holders(name, item, now, false)}
	st.Permits, _ = permitsOf(item)
	st.Counter, _ = n(item, AttrCounter)
	return st
}
