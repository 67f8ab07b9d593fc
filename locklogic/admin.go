package locklogic

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strconv"
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
var listNames = map[string]string{"#x": AttrReleasedAt, "#e": AttrExpiresAt, "#f": AttrFreeAt}

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
	filter := "attribute_not_exists(#x) AND (#e > :now OR #f > :now)"
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
// before ctx's deadline minus Reserve.
func (b Budget) room(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) >= b.PerCall+b.Reserve
}

// A cursor is the key a listing goes on after — the table's key is the
// lock name alone — base64url-encoded: opaque to callers, and any value
// that decodes to a valid name is a valid place to start.
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
	ValidateResource(string(b), &v)
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
}

// ForceRelease ends the lease that blocks Resource — a live lease, or an
// expired one still in its lock-delay — whoever holds it, with one
// conditional UpdateItem, and returns the lease it ended (as it was before
// the write). It is Release without the owner check: the record stays a
// tombstone (released_at, release_id, free_at now), so the fencing counter
// survives and the next grant gets a larger token; the ended holder's
// renewals and releases then answer ErrNotFound. No blocking lease is
// ErrNotFound. The late-write rule holds: a force release issued before
// the lease was granted (a write that lands late, or an instance whose
// clock lags) does not end it, and answers ErrUnavailable (retry to end
// the newer lease, if that is still wanted).
func (s *Service) ForceRelease(ctx context.Context, req ForceReleaseRequest) (Lock, error) {
	var v ValidationError
	ValidateResource(req.Resource, &v)
	req.Reason = NormalizeReason(req.Reason, &v)
	if err := v.Err(); err != nil {
		return Lock{}, err
	}
	now := s.now()
	nowMs := now.UnixMilli()
	releaseID := newReleaseID()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              s.key(req.Resource),
		UpdateExpression: aws.String("SET #e = :now, #x = :now, #f = :now, #ri = :ri, #g = :gc"),
		ConditionExpression: aws.String("attribute_exists(#r) AND attribute_not_exists(#x) AND " +
			"(#e > :now OR #f > :now) AND " + notNewer(false)),
		ExpressionAttributeNames: map[string]string{"#r": AttrResource, "#e": AttrExpiresAt, "#x": AttrReleasedAt,
			"#f": AttrFreeAt, "#ri": AttrReleaseID, "#g": AttrTTL, "#a": AttrAcquiredAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": num(nowMs), ":ri": &types.AttributeValueMemberS{Value: releaseID}, ":gc": num(s.gcAt(nowMs)),
		},
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		lock, ok := decode(req.Resource, out.Attributes)
		if !ok {
			return Lock{}, fmt.Errorf("force-release %q: store returned an incomplete item", req.Resource)
		}
		return lock, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return Lock{}, storeErr("force-release", req.Resource, err)
	}
	item := ccf.Item
	if item == nil {
		if s.oldItem {
			return Lock{}, ErrNotFound
		}
		var gerr error
		if item, gerr = s.get(ctx, req.Resource); gerr != nil {
			return Lock{}, storeErr("force-release", req.Resource, gerr)
		}
	}
	if str(item, AttrReleaseID) == releaseID {
		// The SDK retried a write whose first attempt landed: the release
		// happened; the tombstone still names the lease it ended (its
		// expiry is now the release time).
		lock, _ := decode(req.Resource, item)
		return lock, nil
	}
	if _, blocked := blockedUntil(item, now); blocked {
		// A lease granted after this request was issued (the late-write
		// rule), or one granted between the failed write and the read.
		return Lock{}, fmt.Errorf("force-release %q: the lease was granted after this request was issued: %w", req.Resource, ErrUnavailable)
	}
	return Lock{}, ErrNotFound
}
