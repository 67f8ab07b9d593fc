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
	s.validateWatch(req, v, ValidateRWName)
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
	return rwWatch.watch(ctx, s, req, b)
}

// rwWatch is a read/write lock's watch: its writer and reader slots are
// its leases (rwLeases).
var rwWatch = &leasesWatch[RWWatchResult]{
	op: "watch-rwlock", what: "read/write lock", key: (*Service).rwKey,
	read: (*Service).rwRead, peek: (*Service).rwPeek,
	leases: func(map[string]types.AttributeValue) []recorded { return rwLeases },
	answer: func(name string, item map[string]types.AttributeValue, now time.Time, index int64, changed bool, drop int64) RWWatchResult {
		res := RWWatchResult{Index: index, Changed: changed, Status: rwStatusOf(name, item, now, false)}
		if drop > 0 {
			dropEarliest(&res.Status, drop)
		}
		return res
	},
	reads: func(r *RWWatchResult) *int { return &r.Reads },
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
