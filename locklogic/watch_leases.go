package locklogic

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// leasesWatch is the watch of an item of several leases under one fencing
// counter — a semaphore's permits, a read/write lock's writer and readers
// — parameterised by its kind: WatchSemaphore and WatchRW are one loop
// (watch) and one consistent read (watchRead) over different items.
type leasesWatch[R any] struct {
	op   string // the operation a store error names ("watch-semaphore")
	what string // the kind, in the refusal of an index it never had ("semaphore")
	key  func(s *Service, name string) map[string]types.AttributeValue
	// read reads the item strongly consistently, peek eventually
	// consistently.
	read, peek func(s *Service, ctx context.Context, name string, b Budget) (map[string]types.AttributeValue, error)
	// leases are the item's leases the index counts and a record names.
	leases func(item map[string]types.AttributeValue) []recorded
	// answer is the kind's answer for name's item read at now: index,
	// changed, and the status without the drop leases that expire first
	// (the caller saw them end).
	answer func(name string, item map[string]types.AttributeValue, now time.Time, index int64, changed bool, drop int64) R
	// reads is the answer's count of eventually consistent reads.
	reads func(*R) *int
}

// validateWatch checks req as ValidateWatch does, its Resource by name.
func (s *Service) validateWatch(req *WatchRequest, v *ValidationError, name func(string, *ValidationError)) {
	name(req.Resource, v)
	if !v.Has("index") && req.Index < 0 {
		v.Add("index", "must be an integer from 0 (the index of the last answer, or 0 for none)")
	}
	if !v.Has("wait_seconds") {
		ValidateWait(req.WaitSeconds, s.maxWait, v)
	}
}

// watch answers the state of req.Resource as soon as its index is later
// than req.Index, or when req.WaitSeconds have passed (req validated): one
// strongly consistent read (watchRead), then eventually consistent reads
// every PollInterval on average while waiting (pollWatch), waking at the
// earliest live lease's expiry; a change is confirmed by watchRead.
func (w *leasesWatch[R]) watch(ctx context.Context, s *Service, req WatchRequest, b Budget) (R, error) {
	now := s.now()
	if req.Arrived.IsZero() || req.Arrived.After(now) {
		req.Arrived = now
	}
	res, changed, exp, err := w.watchRead(ctx, s, req, b)
	if err != nil || changed || req.WaitSeconds == 0 {
		return res, err
	}
	end := deadlineEnd(ctx, b, now, req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second))
	sctx, cancel := context.WithTimeout(ctx, max(end.Sub(now), 0))
	defer cancel()
	peek := func() (int64, time.Time, error) {
		item, err := w.peek(s, ctx, req.Resource, b)
		if err != nil {
			return 0, time.Time{}, err
		}
		at := s.now()
		return leasesIndex(item, at, w.leases(item)), leasesLiveUntil(item, at, w.leases(item)), nil
	}
	confirm := func() (bool, time.Time, error) {
		var err error
		res, changed, exp, err = w.watchRead(ctx, s, req, b)
		return changed, exp, err
	}
	reads, changed, err := s.pollWatch(sctx, end, PollInterval, exp, req.Index, w.op, req.Resource, peek, confirm)
	if err == nil && !changed {
		res, _, _, err = w.watchRead(ctx, s, req, b)
	}
	*w.reads(&res) = reads
	return res, err
}

// watchRead reads req.Resource strongly consistently: its answer, whether
// its index is later than req.Index, and the earliest live lease's
// expiry. It keeps to the lock watch's rules (watchRead): an expiry is
// recorded on the item before it is answered (settledRead, settleLeases),
// so no late renewal undoes it; Changed only for a later index; an
// earlier one answers the caller's index instead, without the leases the
// caller saw end; and an index above 2 × counter + 1 (the most the
// counter's states reach: every lease ended) is a *ValidationError, since
// no answer had it.
func (w *leasesWatch[R]) watchRead(ctx context.Context, s *Service, req WatchRequest, b Budget) (R, bool, time.Time, error) {
	var zero R
	index := func(item map[string]types.AttributeValue, now time.Time) int64 {
		return leasesIndex(item, now, w.leases(item))
	}
	read := func() (map[string]types.AttributeValue, error) { return w.read(s, ctx, req.Resource, b) }
	pending := func(item map[string]types.AttributeValue, now time.Time) bool {
		return len(unrecordedLeases(item, now, w.leases(item))) > 0
	}
	settle := func(item map[string]types.AttributeValue, now time.Time) (map[string]types.AttributeValue, bool, error) {
		// The item read, with the records: the index is the same.
		ok, err := s.settleLeases(ctx, w.key(s, req.Resource), item, unrecordedLeases(item, now, w.leases(item)), now, b)
		return item, ok, err
	}
	item, now, err := s.settledRead(req.Index, read, pending, index, settle)
	if err != nil {
		return zero, false, time.Time{}, storeErr(w.op, req.Resource, err)
	}
	got, answered, drop := index(item, now), index(item, now), int64(0)
	if got < req.Index {
		if counter, _ := n(item, AttrCounter); got != 0 && req.Index > 2*counter+1 {
			var v ValidationError
			v.Add("index", "is later than any state of this "+w.what+": use 0, or the index of an earlier answer")
			return zero, false, time.Time{}, &v
		}
		// The caller saw leases end that this instance sees live: its
		// clock is behind the one that answered before (the only way a
		// strong read can be behind an answer, but for a late renewal
		// that revived a lease), or garbage collection deleted the idle
		// item. Keep to what the caller saw, never back: its index, and
		// as many leases fewer as the index is higher (the earliest to
		// expire, which a clock ahead saw end first). The index counts
		// the live leases, so there are always that many.
		if got != 0 {
			drop = req.Index - got
		}
		answered = req.Index
	}
	changed := got > req.Index
	return w.answer(req.Resource, item, now, answered, changed, drop), changed, leasesLiveUntil(item, now, w.leases(item)), nil
}
