package locklogic

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Limits of a listing. The table has one item per lock name and no index
// on liveness, so List scans it with a filter: every item read costs, live
// or not, and the scan stops after MaxScanPages pages of ScanPageItems
// items per request whatever it found (a page of answers may then hold
// fewer than Limit locks, even none, and a cursor to go on from).
const (
	// DefaultListLimit is a listing's page size when the caller gives none.
	DefaultListLimit = 100
	// MaxListLimit bounds a listing's page size.
	MaxListLimit = 1000
	// ScanPageItems is the Limit of each Scan call: how many items
	// DynamoDB reads (and bills) before the filter drops the idle ones.
	ScanPageItems = 1000
	// MaxScanPages bounds the Scan calls of one listing request, so one
	// request reads at most MaxScanPages × ScanPageItems items.
	MaxScanPages = 5
)

// ListRequest asks for the locks whose name starts with Prefix (every lock
// when empty), at most Limit of them (DefaultListLimit when 0), from
// Cursor on (the Cursor of a previous ListResult; "" starts at the
// beginning).
type ListRequest struct {
	Prefix string
	Limit  int64
	Cursor string
}

// ListResult is one page of a listing: the leases that keep others from
// the lock — live ones, and expired ones still in their lock-delay (their
// ExpiresAt is past) — in the table's scan order, which is no order of
// names. Cursor continues the listing; "" when the table has been read to
// its end.
type ListResult struct {
	Locks  []Lock
	Cursor string
	// Scanned is how many items the store read for this page (what it
	// bills for), live or not.
	Scanned int
}

// List returns one page of the leases that block their lock (see
// ListResult), with eventually consistent Scans filtered on the server
// (begins_with on the name, and the lease blocking at now: leaseExpr's
// blocking), as listScan pages them.
func (s *Service) List(ctx context.Context, req ListRequest, b Budget) (ListResult, error) {
	now := s.now()
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	// A read/write lock's writer has the lock's attribute names: its item
	// is the read/write listing's (ListRWLocks), not a lock.
	filter := "NOT begins_with(" + x.n("#r", AttrResource) + ", " + x.s(":rwp", RWLockPrefix) + ") AND " + x.lease(&lockLease, "").blocking()
	if req.Prefix != "" {
		filter = "begins_with(#r, " + x.s(":pre", req.Prefix) + ") AND " + filter
	}
	var res ListResult
	cursor, scanned, err := s.listScan(ctx, "list", &req, b, x, filter, func(item map[string]types.AttributeValue) (int, string) {
		lock, ok := decode("", item)
		if !ok {
			return 0, ""
		}
		lock.Queue = queueEntries(item, now)
		res.Locks = append(res.Locks, lock)
		return len(res.Locks), lock.Resource
	})
	if err != nil {
		return ListResult{}, err
	}
	res.Cursor, res.Scanned = cursor, scanned
	return res, nil
}

// listScan is the one listing scan, of locks or semaphores: it validates
// req (its Limit defaulted), then reads the table with eventually
// consistent Scans of ScanPageItems items under filter (x's names and
// values), from req.Cursor on, handing every item that passes to add,
// which returns how many answers the page holds so far and the item's key.
// A Scan page may hold fewer matches than wanted, since the filter runs
// after the read: it scans on, page after page, until add has req.Limit
// answers, the table ends, MaxScanPages were read, or the request's store
// budget (b, and ctx's deadline) runs out — a page the budget cuts off
// after the first ends the listing with the cursor before it, not an
// error. It returns the cursor to go on from ("" at the table's end) and
// the items read. A listing is a snapshot of no single moment: each answer
// was true when its page was read.
func (s *Service) listScan(ctx context.Context, op string, req *ListRequest, b Budget, x *expr, filter string,
	add func(item map[string]types.AttributeValue) (int, string)) (string, int, error) {
	var v ValidationError
	ValidatePrefix(req.Prefix, &v)
	if req.Limit == 0 {
		req.Limit = DefaultListLimit
	}
	if req.Limit < 1 || req.Limit > MaxListLimit {
		v.Add("limit", "must be an integer from 1 to "+strconv.Itoa(MaxListLimit))
	}
	start, cerr := decodeCursor(req.Cursor)
	if cerr != nil {
		v.Add("cursor", "is not a cursor this service returned")
	}
	if err := v.Err(); err != nil {
		return "", 0, err
	}
	scanned := 0
	for page := 0; page < MaxScanPages; page++ {
		cctx, cancel := b.Context(ctx)
		out, err := s.db.Scan(cctx, &dynamodb.ScanInput{
			TableName:                 aws.String(s.table),
			Limit:                     aws.Int32(ScanPageItems),
			FilterExpression:          aws.String(filter),
			ExpressionAttributeNames:  x.names,
			ExpressionAttributeValues: x.values,
			ExclusiveStartKey:         start,
		})
		spent := cctx.Err() != nil
		cancel()
		if err != nil {
			if page > 0 && spent {
				break // the budget ran out: the pages read are the answer
			}
			return "", 0, storeErr(op, req.Prefix, err)
		}
		scanned += int(out.ScannedCount)
		for i, item := range out.Items {
			got, key := add(item)
			if int64(got) >= req.Limit {
				// Stop here; the rest of this page is read again by the
				// next request, which starts after this item's key.
				if i < len(out.Items)-1 || out.LastEvaluatedKey != nil {
					return encodeCursor(key), scanned, nil
				}
				return "", scanned, nil
			}
		}
		if out.LastEvaluatedKey == nil {
			return "", scanned, nil
		}
		start = out.LastEvaluatedKey
	}
	return encodeCursor(str(start, AttrResource)), scanned, nil
}

// A cursor is the key a listing goes on after — the table's key is the
// lock name alone, or a semaphore's SemaphorePrefix + name —
// base64url-encoded: opaque to callers, and any value that decodes to a
// valid key is a valid place to start.
func encodeCursor(resource string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(resource))
}

func decodeCursor(cursor string) (map[string]types.AttributeValue, error) {
	if cursor == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, err
	}
	var v ValidationError
	// The table holds semaphores and read/write locks too
	// (SemaphorePrefix or RWLockPrefix + name): a Scan may stop at one
	// whichever listing it serves.
	if name, ok := strings.CutPrefix(string(b), SemaphorePrefix); ok {
		ValidateSemaphoreName(name, &v)
	} else if name, ok := strings.CutPrefix(string(b), RWLockPrefix); ok {
		ValidateRWName(name, &v)
	} else {
		ValidateResource(string(b), &v)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return map[string]types.AttributeValue{AttrResource: &types.AttributeValueMemberS{Value: string(b)}}, nil
}

// ForceReleaseRequest asks to end the lease on Resource whoever holds it.
// Reason says why (required; the caller writes it to its audit log).
type ForceReleaseRequest struct {
	Resource string
	Reason   string
	// Immediate frees the lock at once, ending a lock-delay too: for an
	// operator who knows the holder is gone. Without it the lease expires
	// now and keeps its lock-delay.
	Immediate bool
	// FencingToken, when set, ends only the lease with this token: the one
	// the operator saw.
	FencingToken *int64
}

// ForceReleaseResult is what a force release of a lock ended.
type ForceReleaseResult = ForceReleaseOf[Lock]

// ValidateForceRelease checks req as ValidateAcquire does, normalizing its
// reason.
func (s *Service) ValidateForceRelease(req *ForceReleaseRequest, v *ValidationError) {
	validateForce(v, "resource", req.Resource, ValidateResource, nil, &req.Reason, req.FencingToken)
}

// ForceRelease ends the lease on Resource whoever holds it, with one
// conditional UpdateItem, and returns the lease it ended. It is Release
// without the owner check, with two differences:
//
//   - By default the lease expires now and keeps its lock-delay, as if its
//     holder had died: nobody, its owner included, may take the lock before
//     FreeAt (a holder that is slow rather than gone may still be writing).
//     Only a live lease can be ended so; no live lease is ErrNotFound.
//     With Immediate the record becomes a tombstone freed at once, ending
//     a live lease or one still in its lock-delay.
//   - The ended holder's renewals and releases answer ErrForceReleased.
//
// The fencing counter survives either way, so the next grant gets a larger
// token. The late-write rule holds: a force release issued before the
// current lease was granted does not end it, nor one whose token is not
// req.FencingToken; both are *LeaseChangedError naming that lease.
func (s *Service) ForceRelease(ctx context.Context, req ForceReleaseRequest) (ForceReleaseResult, error) {
	var v ValidationError
	if s.ValidateForceRelease(&req, &v); v.Err() != nil {
		return ForceReleaseResult{}, &v
	}
	now := s.now()
	gc := s.gcAt(now.UnixMilli() + max(s.maxDelay, 0)*1000) // the lock-delay runs on: the longest
	if req.Immediate {
		gc = s.gcAt(now.UnixMilli())
	}
	ended, _, err := s.forceLease(ctx, forceTarget{
		op: "force-release", name: req.Resource, key: s.key(req.Resource), a: &lockLease, gc: gc,
		exists: func(x *expr) string { return "attribute_exists(" + x.n("#r", AttrResource) + ")" },
		read:   func(ctx context.Context) (map[string]types.AttributeValue, error) { return s.get(ctx, req.Resource) },
	}, now, req.Immediate, req.FencingToken)
	return forceOutcome(ended, err, now, req.Immediate, Lock.lockOf)
}

// forceTarget is the lease a force release ends: the lock's, or a slot's.
type forceTarget struct {
	op, name string
	key      map[string]types.AttributeValue
	a        *leaseNames
	gc       int64 // the write's ttl
	// exists is the item's own clause in x: the lock item exists, or the
	// slot is below the semaphore's N.
	exists func(x *expr) string
	// read reads the item consistently (dynalite returns no old item).
	read func(ctx context.Context) (map[string]types.AttributeValue, error)
	// below reports whether the item has the lease (a slot: below N);
	// nil for always.
	below func(item map[string]types.AttributeValue) bool
}

// forceLease is the one force release, of a lock's lease or a slot's
// (ForceRelease has the rules), at now: one conditional UpdateItem. It
// returns the lease it ended and the item (before the write, or as a
// failed write met it), or ErrNothingToForce, a *LeaseChangedError naming
// the lease that now blocks, or the store's error (forceErr).
func (s *Service) forceLease(ctx context.Context, t forceTarget, now time.Time, immediate bool, token *int64) (Lock, map[string]types.AttributeValue, error) {
	releaseID := newReleaseID()
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	x.s(":ri", releaseID)
	x.v(":gc", num(t.gc))
	if !immediate {
		x.v(":zero", num(0))
	}
	x.n("#g", AttrTTL)
	l := x.lease(t.a, "")
	cond := t.exists(x) + " AND " + l.forceable(immediate, token)
	update := l.forceSet(immediate)
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 t.key,
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		lock, ok := t.a.decode(t.name, out.Attributes)
		if !ok {
			return Lock{}, nil, fmt.Errorf("%s %q: store returned an incomplete item", t.op, t.name)
		}
		return lock, out.Attributes, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return Lock{}, nil, forceErr(t.op, t.name, err)
	}
	item := ccf.Item
	if item == nil {
		if s.oldItem {
			return Lock{}, nil, ErrNothingToForce
		}
		var gerr error
		if item, gerr = t.read(ctx); gerr != nil {
			return Lock{}, nil, forceErr(t.op, t.name, gerr)
		}
	}
	if ended, ok := t.a.forcedEnded(t.name, item, releaseID, now); ok {
		// The SDK retried a write whose first attempt landed: the release
		// happened.
		return ended, item, nil
	}
	lock, ok := t.a.decode(t.name, item)
	switch {
	case !ok || t.below != nil && !t.below(item):
		return Lock{}, item, ErrNothingToForce
	case !immediate && (lock.ForceReleased || !t.a.live(item, now)):
		// Already ended (by expiry, release or another force release):
		// nothing live to end; a lock-delay is ended only immediately.
		return Lock{}, item, ErrNothingToForce
	}
	if _, blocked := t.a.blockedUntil(item, now); !blocked {
		return Lock{}, item, ErrNothingToForce
	}
	// A lease blocks, but not the one this request may end: a lease
	// granted after it was issued (or between the write and the read), or
	// another token than the one given.
	return Lock{}, item, &LeaseChangedError{Current: lock}
}

// forceErr wraps a store failure of a force release: when it may have
// been applied, ErrForceUnknown (never a plain "retry").
func forceErr(op, resource string, err error) error {
	err = storeErr(op, resource, err)
	if errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%s %q: %w: %w", op, resource, ErrForceUnknown, err)
	}
	return err
}

// forceResult is the result of a force release at now that ended lock.
func forceResult(lock Lock, now time.Time, immediate bool) ForceReleaseResult {
	res := ForceReleaseResult{Ended: lock, FreeAt: now.UTC().Truncate(time.Millisecond), Immediate: immediate}
	if !immediate {
		res.FreeAt = res.FreeAt.Add(lock.LockDelay)
	}
	return res
}
