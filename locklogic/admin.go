package locklogic

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
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

// listNames are the attribute names of every listing's filter.
var listNames = map[string]string{"#x": AttrReleasedAt, "#e": AttrExpiresAt, "#f": AttrFreeAt, "#xa": AttrExpiredAt}

// List returns one page of the leases that block their lock (see
// ListResult), with eventually consistent Scans filtered on the server
// (begins_with on the name, not released, expires_at or free_at after
// now). A Scan page may hold fewer matches than wanted, since the filter
// runs after the read: List scans on, page after page, until it has Limit
// locks, the table ends, MaxScanPages were read, or the next Scan would
// not have b.PerCall before the context's deadline minus b.Reserve. Each
// Scan call runs under b. A listing is a snapshot of no single moment:
// each lease was blocking when its page was read.
func (s *Service) List(ctx context.Context, req ListRequest, b Budget) (ListResult, error) {
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
		return ListResult{}, err
	}

	now := s.now()
	values := map[string]types.AttributeValue{":now": num(now.UnixMilli())}
	// A lease without a lock-delay has free_at = expires_at once renewed
	// (renew writes it whatever the delay): only a free_at beyond
	// expires_at is a lock-delay that blocks after a recorded expiry.
	filter := "attribute_not_exists(#x) AND ((#e > :now AND attribute_not_exists(#xa)) OR (#f > :now AND #f > #e))"
	names := listNames
	if req.Prefix != "" {
		names = map[string]string{"#r": AttrResource}
		maps.Copy(names, listNames)
		values[":pre"] = &types.AttributeValueMemberS{Value: req.Prefix}
		filter = "begins_with(#r, :pre) AND " + filter
	}
	var res ListResult
	for page := 0; page < MaxScanPages; page++ {
		if page > 0 && !b.room(ctx) {
			break
		}
		in := &dynamodb.ScanInput{
			TableName:                 aws.String(s.table),
			Limit:                     aws.Int32(ScanPageItems),
			FilterExpression:          aws.String(filter),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			ExclusiveStartKey:         start,
		}
		out, err := s.scan(ctx, in, b)
		if err != nil {
			return ListResult{}, storeErr("list", req.Prefix, err)
		}
		res.Scanned += int(out.ScannedCount)
		for i, item := range out.Items {
			lock, ok := decode("", item)
			if !ok {
				continue
			}
			lock.Queue = queueEntries(item, now)
			res.Locks = append(res.Locks, lock)
			if int64(len(res.Locks)) == req.Limit {
				// Stop here; the rest of this page is read again by the
				// next request, which starts after this lock's key.
				if i < len(out.Items)-1 || out.LastEvaluatedKey != nil {
					res.Cursor = encodeCursor(lock.Resource)
				}
				return res, nil
			}
		}
		if out.LastEvaluatedKey == nil {
			return res, nil
		}
		start = out.LastEvaluatedKey
	}
	res.Cursor = encodeCursor(str(start, AttrResource))
	return res, nil
}

// scan makes one Scan call under its own budget.
func (s *Service) scan(ctx context.Context, in *dynamodb.ScanInput, b Budget) (*dynamodb.ScanOutput, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	return s.db.Scan(cctx, in)
}

// room reports whether one more store call still has its full PerCall
// before ctx's deadline minus Reserve, and before Deadline.
func (b Budget) room(ctx context.Context) bool {
	if !b.Deadline.IsZero() && time.Until(b.Deadline) < b.PerCall {
		return false
	}
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) >= b.PerCall+b.Reserve
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
	// The table holds semaphores too (SemaphorePrefix + name): a Scan may
	// stop at one whichever listing it serves.
	if name, ok := strings.CutPrefix(string(b), SemaphorePrefix); ok {
		ValidateSemaphoreName(name, &v)
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

// ForceReleaseResult is what a force release ended.
type ForceReleaseResult struct {
	// Ended is the lease as it was before the write (after an SDK retry
	// of a write that landed, as the write left it).
	Ended Lock
	// FreeAt is when others may take the lock: now, or the end of the
	// lease's lock-delay unless Immediate.
	FreeAt time.Time
	// Immediate says the lock was freed at once.
	Immediate bool
}

// ValidateForceRelease checks req as ValidateAcquire does, normalizing its
// reason.
func (s *Service) ValidateForceRelease(req *ForceReleaseRequest, v *ValidationError) {
	if !v.Has("resource") {
		ValidateResource(req.Resource, v)
	}
	if !v.Has("reason") {
		req.Reason = NormalizeReason(req.Reason, v)
	}
	if !v.Has("fencing_token") {
		ValidateFencingToken(req.FencingToken, v)
	}
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
	nowMs := now.UnixMilli()
	releaseID := newReleaseID()
	values := map[string]types.AttributeValue{":now": num(nowMs), ":ri": &types.AttributeValueMemberS{Value: releaseID}}
	// DynamoDB refuses a name or value the expressions do not use, so
	// each mode names its own.
	names := map[string]string{"#r": AttrResource, "#e": AttrExpiresAt, "#x": AttrReleasedAt, "#f": AttrFreeAt,
		"#ri": AttrReleaseID, "#g": AttrTTL, "#a": AttrAcquiredAt, "#fa": AttrForcedAt,
		"#o": AttrOwner, "#t": AttrToken, "#fo": AttrForcedOwner, "#ft": AttrForcedToken, "#fq": AttrForcedAcquired}
	// The lease to end: live (or, immediately, still in its lock-delay),
	// not force released already unless ending that delay, granted no
	// later than this request was issued, with the token when given. An
	// SDK retry of this very write (its release_id is on the item: the
	// first attempt landed) never applies again: the lease it would meet
	// now may be a newer one, granted within the instances' clock skew.
	cond := "attribute_exists(#r) AND attribute_not_exists(#x) AND " + notNewer(":now", false) +
		" AND (attribute_not_exists(#ri) OR #ri <> :ri)"
	// The ended lease is kept beside the item, for such a retry's answer.
	const keep = ", #fo = #o, #ft = #t, #fq = #a"
	var update string
	if req.Immediate {
		cond += " AND (#e > :now OR #f > :now)"
		update = "SET #e = :now, #x = :now, #f = :now, #fa = :now, #ri = :ri, #g = :gc" + keep
		values[":gc"] = num(s.gcAt(nowMs))
	} else {
		// renewed_at moves to now: a renewal issued before this write and
		// landing after it would otherwise find expires_at (= now) after
		// its own :now. forced_at refuses it anyway, on any clock.
		cond += " AND #e > :now AND attribute_not_exists(#fa) AND attribute_not_exists(#xa)"
		update = "SET #e = :now, #n = :now, #f = :now + if_not_exists(#d, :zero), #fa = :now, #ri = :ri, #g = :gc" + keep
		names["#n"], names["#d"], names["#xa"] = AttrRenewedAt, AttrLockDelay, AttrExpiredAt
		values[":zero"] = num(0)
		values[":gc"] = num(s.gcAt(nowMs + max(s.maxDelay, 0)*1000))
	}
	if req.FencingToken != nil {
		cond += " AND #t = :tok"
		values[":tok"] = num(*req.FencingToken)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.key(req.Resource),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		lock, ok := decode(req.Resource, out.Attributes)
		if !ok {
			return ForceReleaseResult{}, fmt.Errorf("force-release %q: store returned an incomplete item", req.Resource)
		}
		return forceResult(lock, now, req.Immediate), nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return ForceReleaseResult{}, forceErr(req.Resource, err)
	}
	item := ccf.Item
	if item == nil {
		if s.oldItem {
			return ForceReleaseResult{}, ErrNothingToForce
		}
		var gerr error
		if item, gerr = s.get(ctx, req.Resource); gerr != nil {
			return ForceReleaseResult{}, forceErr(req.Resource, gerr)
		}
	}
	lock, ok := decode(req.Resource, item)
	if str(item, AttrReleaseID) == releaseID && ok {
		// The SDK retried a write whose first attempt landed: the release
		// happened. The lease it ended is kept beside the item (a newer
		// one may hold the lock by now); it expired at this request's :now.
		tok, _ := n(item, AttrForcedToken)
		acq, _ := n(item, AttrForcedAcquired)
		ended := Lock{Resource: req.Resource, Owner: str(item, AttrForcedOwner), FencingToken: tok,
			AcquiredAt: time.UnixMilli(acq).UTC(), ExpiresAt: time.UnixMilli(nowMs).UTC(), ForceReleased: true}
		if lock.FencingToken == tok {
			ended = lock // still the record of the ended lease: all of it
		}
		return forceResult(ended, now, req.Immediate), nil
	}
	switch {
	case !ok:
		return ForceReleaseResult{}, ErrNothingToForce
	case !req.Immediate && (lock.ForceReleased || !live(item, now)):
		// Already ended (by expiry, release or another force release):
		// nothing live to end; a lock-delay is ended only immediately.
		return ForceReleaseResult{}, ErrNothingToForce
	}
	if _, blocked := blockedUntil(item, now); !blocked {
		return ForceReleaseResult{}, ErrNothingToForce
	}
	// A lease blocks the lock, but not the one this request may end: a
	// lease granted after it was issued (or between the write and the
	// read), or another token than the one given.
	return ForceReleaseResult{}, &LeaseChangedError{Current: lock}
}

// forceErr wraps a store failure of a force release: when it may have
// been applied, ErrForceUnknown (never a plain "retry").
func forceErr(resource string, err error) error {
	err = storeErr("force-release", resource, err)
	if errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("force-release %q: %w: %w", resource, ErrForceUnknown, err)
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
