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
	var recorded []string // the change of N's record of the leases it judged ended
	if r := w.reset; r != nil {
		for i, m := range r.markers {
			remove = append(remove, x.n("#rm"+strconv.Itoa(i), m))
		}
		// Every lease it judged ended stays ended: its expiry recorded
		// as a watch records one (expired_at), which every renewal
		// refuses. A renewal delayed across this change of N and a
		// later one that grows N back (which conditions nothing above
		// its old N) would otherwise revive a permit this one ended. The
		// slot this write grants is overwritten anyway.
		for _, k := range r.expired {
			if k != w.slot {
				recorded = append(recorded, other(k).n(pRec)+" = :now")
			}
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
	if len(recorded) > 0 {
		update += ", " + strings.Join(recorded, ", ")
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
