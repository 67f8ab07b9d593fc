package locklogic

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// SemaphoreForceReleaseRequest asks to end the permit in Slot of semaphore
// Name whoever holds it, as ForceReleaseRequest does for a lock.
type SemaphoreForceReleaseRequest struct {
	Name         string
	Slot         int64
	Reason       string
	Immediate    bool
	FencingToken *int64
}

// SemaphoreForceReleaseResult is what a force release of a permit ended.
type SemaphoreForceReleaseResult = ForceReleaseOf[Permit]

// PermitChangedError is a force release of a permit refused because the
// permit that now blocks the slot is not the one the operator meant (see
// LeaseChangedError). It is an ErrStaleToken.
type PermitChangedError = LeaseChangedOf[Permit]

// ValidateSemaphoreForceRelease checks req as ValidateForceRelease does.
func (s *Service) ValidateSemaphoreForceRelease(req *SemaphoreForceReleaseRequest, v *ValidationError) {
	validateForce(v, "name", req.Name, ValidateSemaphoreName, func() {
		if !v.Has("slot") {
			ValidateSlot(req.Slot, v)
		}
	}, &req.Reason, req.FencingToken)
}

// ForceReleaseSemaphore ends the permit in req.Slot whoever holds it, with
// one conditional UpdateItem: ForceRelease's rules (lock-delay kept unless
// Immediate, the holder's renewals and releases answered
// ErrForceReleased, the late-write rule, an SDK retry answered with what
// the first attempt ended) on the slot, which must be below N.
func (s *Service) ForceReleaseSemaphore(ctx context.Context, req SemaphoreForceReleaseRequest) (SemaphoreForceReleaseResult, error) {
	var v ValidationError
	if s.ValidateSemaphoreForceRelease(&req, &v); v.Err() != nil {
		return SemaphoreForceReleaseResult{}, &v
	}
	k := int(req.Slot)
	now := s.now()
	below := func(item map[string]types.AttributeValue) bool {
		permits, ok := permitsOf(item)
		return ok && int64(k) < permits
	}
	ended, item, err := s.forceLease(ctx, forceTarget{
		op: "force-release-semaphore", name: req.Name, key: s.semKey(req.Name), a: &slotNames[k], gc: s.semGC(now.UnixMilli()),
		exists: func(x *expr) string { return x.n("#pm", AttrPermits) + " > " + x.v(":k", num(req.Slot)) },
		read: func(ctx context.Context) (map[string]types.AttributeValue, error) {
			return s.semRead(ctx, req.Name, Budget{})
		},
		below: below,
	}, now, req.Immediate, req.FencingToken)
	permits, _ := permitsOf(item)
	return forceOutcome(ended, err, now, req.Immediate, func(l Lock) Permit { return Permit{Lock: l, Slot: k, Permits: permits} })
}

// SemaphoreListResult is one page of the semaphore listing: one Permit per
// permit that keeps its slot from others (live, or expired inside its
// lock-delay), semaphore by semaphore in the table's scan order. Cursor
// continues the listing ("" at its end).
type SemaphoreListResult struct {
	Permits []Permit
	Cursor  string
	Scanned int
}

// ListSemaphores returns one page of the permits of the semaphores whose
// name starts with req.Prefix, as List does for locks: eventually
// consistent Scans, filtered on the server to semaphore items (the slots
// are judged here, since a filter cannot loop over them), page after page
// until the page holds req.Limit permits (a semaphore's permits are never
// split over two pages, so a page may hold up to MaxPermits − 1 more),
// the table ends, MaxScanPages were read, or the budget would run out.
func (s *Service) ListSemaphores(ctx context.Context, req ListRequest, b Budget) (SemaphoreListResult, error) {
	now := s.now()
	x := newExpr()
	filter := "begins_with(" + x.n("#r", AttrResource) + ", " + x.s(":pre", SemaphorePrefix+req.Prefix) + ")"
	var res SemaphoreListResult
	cursor, scanned, err := s.listScan(ctx, "list-semaphores", &req, b, x, filter, func(item map[string]types.AttributeValue) (int, string) {
		key := str(item, AttrResource)
		hs := holders(key[len(SemaphorePrefix):], item, now, true)
		if len(hs) > 0 {
			hs[0].Queue = queueEntries(item, now) // the semaphore's, on its first permit
		}
		res.Permits = append(res.Permits, hs...)
		return len(res.Permits), key
	})
	if err != nil {
		return SemaphoreListResult{}, err
	}
	res.Cursor, res.Scanned = cursor, scanned
	return res, nil
}

// SemaphoreWatchResult is the state of a semaphore as a watcher sees it.
type SemaphoreWatchResult struct {
	// Index identifies the state: 0 for a semaphore never taken, else 2 ×
	// the counter + 1 − the number of live permits. A grant adds 2 to the
	// counter's part and at most 1 live permit, and a permit's end
	// (release, expiry, force release) takes one: so the index grows by
	// at least 1 at every grant and every end, and a renewal leaves it.
	// As a lock's (WatchResult.Index), an answer's Index is never below
	// the request's: an instance whose clock is behind the one that
	// answered the caller before may still see live a permit the other
	// saw expired, and a late renewal may revive one; the watch then
	// keeps to the caller's index and waits for a later state.
	Index int64
	// Changed says Index is later than the request's.
	Changed bool
	// Status is the semaphore's state: N, the live permits, the counter.
	// An answer that keeps to the caller's index leaves out the permits
	// the caller saw end (as many as the index says, the first to expire),
	// as a lock's watch leaves out the lease.
	Status SemaphoreStatus
	// Reads is how many eventually consistent reads the wait made.
	Reads int
}

// SemaphoreIndexOf returns the watch index of a semaphore item at now.
func SemaphoreIndexOf(item map[string]types.AttributeValue, now time.Time) int64 {
	return leasesIndex(item, now, semLeases(item))
}

// semLeases are the leases of a semaphore item a watch counts: its slots
// below N, each named in a record by its number.
func semLeases(item map[string]types.AttributeValue) []recorded {
	permits, _ := permitsOf(item)
	return slotLeases[:min(max(permits, 0), MaxPermits)]
}

// slotLeases are the slots' leases as a record names them, built once.
var slotLeases = func() []recorded {
	out := make([]recorded, MaxPermits)
	for k := range out {
		out[k] = recorded{&slotNames[k], strconv.Itoa(k)}
	}
	return out
}()

// leasesIndex is the watch index of an item of several leases, one
// fencing counter (a semaphore's, a read/write lock's) at now: 0 before
// the first grant, else 2 × the counter + 1 − the number of live leases. A
// grant adds 2 to the counter's part and at most 1 live lease, and a
// lease's end takes one: the index grows by at least 1 at every grant and
// every end, and a renewal leaves it.
func leasesIndex(item map[string]types.AttributeValue, now time.Time, leases []recorded) int64 {
	c, ok := n(item, AttrCounter)
	if !ok {
		return 0
	}
	liveN := int64(0)
	for _, r := range leases {
		if r.a.live(item, now) {
			liveN++
		}
	}
	return 2*c + 1 - liveN
}

// leasesLiveUntil returns the earliest expiry of the live leases of item
// at now, or zero.
func leasesLiveUntil(item map[string]types.AttributeValue, now time.Time, leases []recorded) time.Time {
	var first time.Time
	for _, r := range leases {
		if t := r.a.liveUntil(item, now); !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

// ValidateSemaphoreWatch checks req, whose Resource is a semaphore's name,
// as ValidateWatch does.
func (s *Service) ValidateSemaphoreWatch(req *WatchRequest, v *ValidationError) {
	s.validateWatch(req, v, ValidateSemaphoreName)
}

// WatchSemaphore answers the state of semaphore req.Resource as soon as
// its index is later than req.Index, or when req.WaitSeconds have passed,
// as Watch does for a lock: one strongly consistent read, then eventually
// consistent reads of the item every PollInterval on average while
// waiting (a read is billed by the item's size whatever it projects, so
// it reads the whole item), waking at the earliest live permit's expiry;
// a change is confirmed by a consistent read. An index no state of the
// semaphore could have is a *ValidationError (leasesWatch.watchRead).
func (s *Service) WatchSemaphore(ctx context.Context, req WatchRequest, b Budget) (SemaphoreWatchResult, error) {
	var v ValidationError
	if s.ValidateSemaphoreWatch(&req, &v); v.Err() != nil {
		return SemaphoreWatchResult{}, &v
	}
	return semWatch.watch(ctx, s, req, b)
}

// semWatch is a semaphore's watch: its permits below N are its leases.
var semWatch = &leasesWatch[SemaphoreWatchResult]{
	op: "watch-semaphore", what: "semaphore", key: (*Service).semKey,
	read: (*Service).semRead, peek: (*Service).semPeek, leases: semLeases,
	answer: func(name string, item map[string]types.AttributeValue, now time.Time, index int64, changed bool, drop int64) SemaphoreWatchResult {
		res := SemaphoreWatchResult{Index: index, Changed: changed, Status: statusOf(name, item, now)}
		if drop > 0 {
			h := slices.Clone(res.Status.Holders)
			slices.SortStableFunc(h, func(a, b Permit) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
			h = h[min(drop, int64(len(h))):]
			slices.SortFunc(h, func(a, b Permit) int { return a.Slot - b.Slot })
			res.Status.Holders = h
		}
		return res
	},
	reads: func(r *SemaphoreWatchResult) *int { return &r.Reads },
}

// unrecordedLeases returns those of leases whose latest grant has ended at
// now by the clock alone (unrecordedExpiry).
func unrecordedLeases(item map[string]types.AttributeValue, now time.Time, leases []recorded) []recorded {
	var out []recorded
	for _, r := range leases {
		if r.a.unrecordedExpiry(item, now) {
			out = append(out, r)
		}
	}
	return out
}

// maxSettleSlots bounds the slots one record write names: each adds ten
// operators to the condition (recordable), and an expression stays under
// DynamoDB's 300 operators and 4 KB.
const maxSettleSlots = 16

// settleLeases records the expiry of leases of the item at key (read at
// now) with the lock's record (recordExpiry), one write per
// maxSettleSlots leases. It reports false when a condition failed: the
// item changed meanwhile, and the caller reads it again.
func (s *Service) settleLeases(ctx context.Context, key map[string]types.AttributeValue, item map[string]types.AttributeValue, leases []recorded, now time.Time, b Budget) (bool, error) {
	for chunk := range slices.Chunk(leases, maxSettleSlots) {
		written, err := s.recordExpiry(ctx, key, item, chunk, now, b)
		if err != nil || written == nil {
			return false, err
		}
	}
	return true, nil
}

// semPeek reads the semaphore with an eventually consistent GetItem under
// b.
func (s *Service) semPeek(ctx context.Context, name string, b Budget) (map[string]types.AttributeValue, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: s.semKey(name)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}
