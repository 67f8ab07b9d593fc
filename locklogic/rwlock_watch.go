package locklogic

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// rwLeases are a read/write lock's leases as its watch counts them and its
// expiry record names them: the writer's (lockLease, placeholders "#w…")
// and every reader slot's (slotNames[k], "#<k>…").
var rwLeases = func() []recorded {
	out := []recorded{{&lockLease, "w"}}
	for k := range MaxReaders {
		out = append(out, recorded{&slotNames[k], strconv.Itoa(k)})
	}
	return out
}()

// RWWatchResult is the state of a read/write lock as a watcher sees it.
type RWWatchResult struct {
	// Index identifies the state as a semaphore's does
	// (SemaphoreWatchResult.Index), over the writer and the readers: 0
	// for a lock never taken, else 2 × the counter + 1 − the number of
	// live leases. Every grant (read or write) and every end of a lease
	// (release, expiry, force release) raises it; a renewal leaves it.
	// An answer's Index is never below the request's.
	Index int64
	// Changed says Index is later than the request's.
	Changed bool
	// Status is the lock's state: the live writer or readers, the waiters,
	// the counter. An answer that keeps to the caller's index leaves out
	// the leases the caller saw end (as many as the index says, the first
	// to expire).
	Status RWStatus
	// Reads is how many eventually consistent reads the wait made.
	Reads int
}

// RWIndexOf returns the watch index of a read/write lock item at now.
func RWIndexOf(item map[string]types.AttributeValue, now time.Time) int64 {
	return leasesIndex(item, now, rwLeases)
}

// ValidateRWWatch checks req, whose Resource is a read/write lock's name,
// as ValidateWatch does.
func (s *Service) ValidateRWWatch(req *WatchRequest, v *ValidationError) {
	ValidateRWName(req.Resource, v)
	if !v.Has("index") && req.Index < 0 {
		v.Add("index", "must be an integer from 0 (the index of the last answer, or 0 for none)")
	}
	if !v.Has("wait_seconds") {
		ValidateWait(req.WaitSeconds, s.maxWait, v)
	}
}

// WatchRW answers the state of read/write lock req.Resource as soon as its
// index is later than req.Index, or when req.WaitSeconds have passed, as
// WatchSemaphore does: one strongly consistent read, then eventually
// consistent reads of the item every PollInterval on average while
// waiting, waking at the earliest live lease's expiry; a change is
// confirmed by a consistent read, and an expiry it answers is recorded on
// the item first (recordExpiry), so no late renewal undoes it.
func (s *Service) WatchRW(ctx context.Context, req WatchRequest, b Budget) (RWWatchResult, error) {
	var v ValidationError
	if s.ValidateRWWatch(&req, &v); v.Err() != nil {
		return RWWatchResult{}, &v
	}
	now := s.now()
	if req.Arrived.IsZero() || req.Arrived.After(now) {
		req.Arrived = now
	}
	res, exp, err := s.rwWatchRead(ctx, req, b)
	if err != nil || res.Changed || req.WaitSeconds == 0 {
		return res, err
	}
	end := deadlineEnd(ctx, b, now, req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second))
	sctx, cancel := context.WithTimeout(ctx, max(end.Sub(now), 0))
	defer cancel()
	peek := func() (int64, time.Time, error) {
		item, err := s.rwPeek(ctx, req.Resource, b)
		if err != nil {
			return 0, time.Time{}, err
		}
		at := s.now()
		return RWIndexOf(item, at), leasesLiveUntil(item, at, rwLeases), nil
	}
	confirm := func() (bool, time.Time, error) {
		var err error
		res, exp, err = s.rwWatchRead(ctx, req, b)
		return res.Changed, exp, err
	}
	reads, changed, err := s.pollWatch(sctx, end, PollInterval, exp, req.Index, "watch-rwlock", req.Resource, peek, confirm)
	if err != nil || changed {
		res.Reads = reads
		return res, err
	}
	res, _, err = s.rwWatchRead(ctx, req, b)
	res.Reads = reads
	return res, err
}

// rwWatchRead reads the lock strongly consistently: its state and the
// earliest live lease's expiry, under semWatchRead's rules (an expiry
// recorded before it is answered; an earlier index answers the caller's,
// without the leases it saw end; one above 2 × counter + 1 is a
// *ValidationError).
func (s *Service) rwWatchRead(ctx context.Context, req WatchRequest, b Budget) (RWWatchResult, time.Time, error) {
	read := func() (map[string]types.AttributeValue, error) { return s.rwRead(ctx, req.Resource, b) }
	pending := func(item map[string]types.AttributeValue, now time.Time) bool {
		return len(unrecordedLeases(item, now, rwLeases)) > 0
	}
	settle := func(item map[string]types.AttributeValue, now time.Time) (map[string]types.AttributeValue, bool, error) {
		ok, err := s.settleLeases(ctx, s.rwKey(req.Resource), item, unrecordedLeases(item, now, rwLeases), now, b)
		return item, ok, err
	}
	item, now, err := s.settledRead(req.Index, read, pending, RWIndexOf, settle)
	if err != nil {
		return RWWatchResult{}, time.Time{}, storeErr("watch-rwlock", req.Resource, err)
	}
	res := RWWatchResult{Index: RWIndexOf(item, now), Status: rwStatusOf(req.Resource, item, now, false)}
	res.Changed = res.Index > req.Index
	if res.Index < req.Index {
		if res.Index != 0 && req.Index > 2*res.Status.Counter+1 {
			var v ValidationError
			v.Add("index", "is later than any state of this read/write lock: use 0, or the index of an earlier answer")
			return RWWatchResult{}, time.Time{}, &v
		}
		// As semWatchRead: a clock behind the one that answered before, a
		// late renewal, or garbage collection; keep to the caller's index
		// and leave out as many leases as it is higher, the first to
		// expire.
		if res.Index != 0 {
			dropEarliest(&res.Status, req.Index-res.Index)
		}
		res.Index = req.Index
	}
	return res, leasesLiveUntil(item, now, rwLeases), nil
}

// dropEarliest leaves out of st the k leases that expire first.
func dropEarliest(st *RWStatus, k int64) {
	all := slices.Clone(st.Readers)
	if st.Writer != nil {
		all = append(all, *st.Writer)
	}
	slices.SortStableFunc(all, func(a, b RWLease) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
	all = all[min(k, int64(len(all))):]
	st.Writer, st.Readers = nil, nil
	for _, l := range all {
		if l.Mode == Write {
			w := l
			st.Writer = &w
		} else {
			st.Readers = append(st.Readers, l)
		}
	}
	slices.SortFunc(st.Readers, func(a, b RWLease) int { return a.Slot - b.Slot })
}
