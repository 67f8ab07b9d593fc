package locklogic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// rwRenewInput builds the renewal of req's lease at now: the builder's
// holder and renewSet, and the clause that keeps a late renewal from
// reviving a lease another kind's grant ended (notEndedByGrant).
func (s *Service) rwRenewInput(req RWLeaseRequest, now time.Time) *dynamodb.UpdateItemInput {
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	l := x.lease(rwNames(req.Mode, int(req.Slot)), "")
	cond := l.holder(req.Caller, req.FencingToken, true) + " AND " + notEndedByGrant(x, l, req.Mode)
	x.v(":exp", num(now.UnixMilli()+req.TTLSeconds*1000))
	x.v(":zero", num(0))
	x.v(":gc", num(s.semGC(now.UnixMilli())))
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.rwKey(req.Name),
		UpdateExpression:                    aws.String("SET " + l.renewSet()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// notEndedByGrant is "no grant of the other kind came after this lease":
// the holder clause's expires_at > :now is judged at the renewal's :now,
// and a renewal that lands late (an SDK retry, a delayed packet) would
// otherwise revive a lease that a later grant judged ended. A writer's
// renewal requires the counter still at its token (any grant since moved
// it); a reader's, that the writer's latest token is below its own. One
// attribute comparison either way, whatever R.
func notEndedByGrant(x *expr, l *leaseExpr, mode RWMode) string {
	if mode == Write {
		return x.n("#c", AttrCounter) + " = " + l.n(pTok)
	}
	wt := x.lease(&lockLease, "w").n(pTok)
	return "(attribute_not_exists(" + wt + ") OR " + wt + " < " + l.n(pTok) + ")"
}

// RenewRW extends the caller's live lease of req.Name (req.Mode, req.Slot)
// to now + req.TTLSeconds, keeping its token, with one conditional write:
// Renew's rules on the lease, and no grant of the other kind since it
// (notEndedByGrant).
func (s *Service) RenewRW(ctx context.Context, req RWLeaseRequest) (RWLease, error) {
	var v ValidationError
	if s.ValidateRWLease(&req, true, &v); v.Err() != nil {
		return RWLease{}, &v
	}
	now := s.now()
	expMs := now.UnixMilli() + req.TTLSeconds*1000
	out, err := s.db.UpdateItem(ctx, s.rwRenewInput(req, now))
	a := rwNames(req.Mode, int(req.Slot))
	if err != nil {
		err = s.rwExplain(ctx, "renew-rwlock", req, now, "", err)
		var later *renewedSinceError
		if !errors.As(err, &later) {
			return RWLease{}, err
		}
		if later.lock.ExpiresAt.UnixMilli() >= expMs {
			later.lock.Resource = req.Name
			return RWLease{Lock: later.lock, Mode: req.Mode, Slot: int(req.Slot)}, nil
		}
		return RWLease{}, fmt.Errorf("renew-rwlock %q: %w", req.Name, ErrRenewRaced)
	}
	lock, ok := a.decode(req.Name, out.Attributes)
	if !ok {
		return RWLease{}, fmt.Errorf("renew-rwlock %q: store returned an incomplete item", req.Name)
	}
	return RWLease{Lock: lock, Mode: req.Mode, Slot: int(req.Slot)}, nil
}

// rwReleaseInput builds the release of req's lease at now with release id
// ri: the builder's holder and releaseSet. A late release needs no
// further clause: it ends nothing but its own lease, already ended.
func (s *Service) rwReleaseInput(req RWLeaseRequest, now time.Time, ri string) *dynamodb.UpdateItemInput {
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	l := x.lease(rwNames(req.Mode, int(req.Slot)), "")
	cond := l.holder(req.Caller, req.FencingToken, false)
	x.v(":gc", num(s.semGC(now.UnixMilli())))
	x.s(":ri", ri)
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.rwKey(req.Name),
		UpdateExpression:                    aws.String("SET " + l.releaseSet()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// ReleaseRW ends the caller's live lease of req.Name (req.Mode, req.Slot)
// with one conditional write, Release's rules: it frees at once and keeps
// its tombstone attributes; the counter survives.
func (s *Service) ReleaseRW(ctx context.Context, req RWLeaseRequest) error {
	var v ValidationError
	if s.ValidateRWLease(&req, false, &v); v.Err() != nil {
		return &v
	}
	now := s.now()
	ri := newReleaseID()
	if _, err := s.db.UpdateItem(ctx, s.rwReleaseInput(req, now, ri)); err != nil {
		return s.rwExplain(ctx, "release-rwlock", req, now, ri, err)
	}
	return nil
}

// rwExplain is explain for a read/write lock's lease.
func (s *Service) rwExplain(ctx context.Context, op string, req RWLeaseRequest, now time.Time, releaseID string, err error) error {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return storeErr(op, req.Name, err)
	}
	item := ccf.Item
	if item == nil {
		if s.oldItem {
			return ErrNotFound
		}
		var gerr error
		if item, gerr = s.rwRead(ctx, req.Name, Budget{}); gerr != nil {
			return storeErr(op, req.Name, gerr)
		}
	}
	a := rwNames(req.Mode, int(req.Slot))
	if releaseID != "" && str(item, a.release) == releaseID {
		return nil
	}
	err = a.classify(item, req.Caller, req.FencingToken, now, op == "renew-rwlock")
	var later *renewedSinceError
	if errors.As(err, &later) && !rwNotEnded(item, req.Mode, a) {
		return ErrNotFound // a grant of the other kind ended it
	}
	return err
}

// rwNotEnded reports what notEndedByGrant decides for lease a.
func rwNotEnded(item map[string]types.AttributeValue, mode RWMode, a *leaseNames) bool {
	tok, _ := n(item, a.token)
	if mode == Write {
		c, _ := n(item, AttrCounter)
		return c == tok
	}
	wt, ok := n(item, lockLease.token)
	return !ok || wt < tok
}

// RWStatus is a read/write lock as status shows it.
type RWStatus struct {
	Name string
	// Writer is the live writer's lease, nil when none.
	Writer *RWLease
	// Readers are the live readers' leases, by slot.
	Readers []RWLease
	// Queue is the live waiters in queue order.
	Queue []QueueEntry
	// Counter is the latest grant's fencing token (0: none).
	Counter int64
}

// RWLockStatus returns the live leases and the waiters of read/write lock
// name with one strongly consistent read.
func (s *Service) RWLockStatus(ctx context.Context, name string) (RWStatus, error) {
	var v ValidationError
	ValidateRWName(name, &v)
	if err := v.Err(); err != nil {
		return RWStatus{}, err
	}
	item, err := s.rwRead(ctx, name, Budget{})
	if err != nil {
		return RWStatus{}, storeErr("rwlock-status", name, err)
	}
	return rwStatusOf(name, item, s.now(), false), nil
}

// rwStatusOf reads item at now: the live leases, or with blocking those
// that keep others out (live, or inside their lock-delay).
func rwStatusOf(name string, item map[string]types.AttributeValue, now time.Time, blocking bool) RWStatus {
	st := RWStatus{Name: name, Queue: queueEntries(item, now)}
	st.Counter, _ = n(item, AttrCounter)
	keeps := func(a *leaseNames) bool {
		if blocking {
			_, b := a.blockedUntil(item, now)
			return b
		}
		return a.live(item, now)
	}
	if keeps(&lockLease) {
		if lock, ok := lockLease.decode(name, item); ok {
			st.Writer = &RWLease{Lock: lock, Mode: Write}
		}
	}
	for k := range MaxReaders {
		if a := &slotNames[k]; keeps(a) {
			if lock, ok := a.decode(name, item); ok {
				st.Readers = append(st.Readers, RWLease{Lock: lock, Mode: Read, Slot: k})
			}
		}
	}
	return st
}
