package locklogic

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// RWForceReleaseRequest asks to end one holder of read/write lock Name
// whoever holds it, as ForceReleaseRequest does for a lock: the writer
// (Mode Write) or the reader in Slot (Mode Read); with FencingToken, only
// the lease with that token (the one the operator saw in the listing).
type RWForceReleaseRequest struct {
	Name         string
	Mode         RWMode
	Slot         int64
	Reason       string
	Immediate    bool
	FencingToken *int64
}

// RWForceReleaseResult is what a force release of a read/write lock's
// holder ended.
type RWForceReleaseResult = ForceReleaseOf[RWLease]

// RWLeaseChangedError is a force release of a read/write lock's holder
// refused because the lease that now holds the writer's place or the
// reader's slot is not the one the operator meant (see
// LeaseChangedError). It is an ErrStaleToken.
type RWLeaseChangedError = LeaseChangedOf[RWLease]

// ValidateRWForceRelease checks req as ValidateForceRelease does.
func (s *Service) ValidateRWForceRelease(req *RWForceReleaseRequest, v *ValidationError) {
	validateForce(v, "name", req.Name, ValidateRWName, func() {
		if !v.Has("mode") {
			ValidateRWMode(req.Mode, v)
		}
		if req.Mode == Read && !v.Has("slot") {
			ValidateReaderSlot(req.Slot, v)
		}
		if req.Mode == Write {
			req.Slot = 0
		}
	}, &req.Reason, req.FencingToken)
}

// ForceReleaseRW ends one holder of req.Name whoever holds it — the
// writer's lease, or reader req.Slot's — with one conditional UpdateItem:
// ForceRelease's rules (forceLease) on that lease alone. The others keep
// theirs; a reader's end frees its slot for the writer once every other
// reader's has ended too.
func (s *Service) ForceReleaseRW(ctx context.Context, req RWForceReleaseRequest) (RWForceReleaseResult, error) {
	var v ValidationError
	if s.ValidateRWForceRelease(&req, &v); v.Err() != nil {
		return RWForceReleaseResult{}, &v
	}
	k := int(req.Slot)
	now := s.now()
	ended, _, err := s.forceLease(ctx, forceTarget{
		op: "force-release-rwlock", name: req.Name, key: s.rwKey(req.Name), a: rwNames(req.Mode, k), gc: s.semGC(now.UnixMilli()),
		exists: func(x *expr) string { return "attribute_exists(" + x.n("#r", AttrResource) + ")" },
		read: func(ctx context.Context) (map[string]types.AttributeValue, error) {
			return s.rwRead(ctx, req.Name, Budget{})
		},
	}, now, req.Immediate, req.FencingToken)
	return forceOutcome(ended, err, now, req.Immediate, func(l Lock) RWLease { return RWLease{Lock: l, Mode: req.Mode, Slot: k} })
}

// RWListResult is one page of the read/write lock listing: one RWStatus per
// lock with a lease that keeps others out (live, or expired inside its
// lock-delay) or a live waiter, in the table's scan order. Cursor
// continues the listing ("" at its end).
type RWListResult struct {
	Locks   []RWStatus
	Cursor  string
	Scanned int
}

// ListRWLocks returns one page of the read/write locks whose name starts
// with req.Prefix, as ListSemaphores does: eventually consistent Scans
// (listScan) filtered on the server to read/write lock items (the writer
// and the reader slots are judged here), req.Limit locks a page at most.
func (s *Service) ListRWLocks(ctx context.Context, req ListRequest, b Budget) (RWListResult, error) {
	now := s.now()
	x := newExpr()
	filter := "begins_with(" + x.n("#r", AttrResource) + ", " + x.s(":pre", RWLockPrefix+req.Prefix) + ")"
	var res RWListResult
	cursor, scanned, err := s.listScan(ctx, "list-rwlocks", &req, b, x, filter, func(item map[string]types.AttributeValue) (int, string) {
		key := str(item, AttrResource)
		st := rwStatusOf(strings.TrimPrefix(key, RWLockPrefix), item, now, true)
		if st.Writer != nil || len(st.Readers) > 0 || len(st.Queue) > 0 {
			res.Locks = append(res.Locks, st)
		}
		return len(res.Locks), key
	})
	if err != nil {
		return RWListResult{}, err
	}
	res.Cursor, res.Scanned = cursor, scanned
	return res, nil
}
