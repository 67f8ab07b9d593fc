package locklogic

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// WatchRequest asks for the state of Resource once it differs from the one
// the caller last saw, Index (0: it has seen nothing), waiting up to
// WaitSeconds inside the request for a change.
type WatchRequest struct {
	Resource    string
	Index       int64
	WaitSeconds int64
	// Arrived is when the request reached the service (zero: when Watch
	// starts); the wait is counted from it.
	Arrived time.Time
}

// WatchResult is the state of a lock as a watcher sees it.
type WatchResult struct {
	// Index identifies the state: 0 for a lock never taken, else 2 × the
	// latest fencing token, plus 1 once that lease has ended (released,
	// expired or force released). It only ever grows, and it changes
	// exactly when the lease does: a new grant or its end; a renewal
	// leaves it. An answer's Index is never below the request's: an
	// instance whose clock is behind the one that answered the caller
	// before may still see live a lease the other saw expired; it waits
	// for a later state instead of going back.
	Index int64
	// Changed says the state is later than the request's index.
	Changed bool
	// Lock is the live lease; nil when none.
	Lock *Lock
	// Token is the latest lease's fencing token, live or not (0: never
	// taken). Tokens grow by one per grant, so a watcher that saw token a
	// and now sees b missed b − a − 1 leases (unless garbage collection
	// restarted the counter, which makes it jump far).
	Token int64
	// BlockedUntil is when the lock comes free for others when no lease is
	// live but the last one's lock-delay still keeps them out (zero
	// otherwise). The end of a lock-delay is no change of the index; a
	// watcher that wants the lock free waits until then.
	BlockedUntil time.Time
	// Reads is how many eventually consistent reads the wait made.
	Reads int
}

// IndexOf returns the watch index of item at now (see WatchResult.Index).
func IndexOf(item map[string]types.AttributeValue, now time.Time) int64 {
	tok, ok := n(item, AttrToken)
	if !ok {
		return 0
	}
	if live(item, now) {
		return 2 * tok
	}
	return 2*tok + 1
}

// ValidateWatch checks req as ValidateAcquire does.
func (s *Service) ValidateWatch(req *WatchRequest, v *ValidationError) {
	s.validateWatch(req, v, ValidateResource)
}

// WatchPollInterval is the mean time between a watcher's eventually
// consistent reads (jittered ±50 %): under 7 a second, so that with the
// strongly consistent read that confirms each change a watcher of a busy
// lock stays under 10 reads a second.
const WatchPollInterval = 150 * time.Millisecond

// watchNames are the attributes a watcher's eventually consistent reads
// project: enough to compute the index.
var watchNames = map[string]string{"#t": AttrToken, "#e": AttrExpiresAt, "#x": AttrReleasedAt, "#fa": AttrForcedAt, "#xa": AttrExpiredAt}

// Watch answers the state of req.Resource as soon as its index is later
// than req.Index, or when req.WaitSeconds (counted from req.Arrived) have
// passed, with every store call bounded by b. Without a wait it answers one
// strongly consistent read. With one, it reads the item with an eventually
// consistent GetItem (half a read unit) every WatchPollInterval on average,
// the first anywhere within the first interval (jittered; backing off to MaxPollInterval
// while reads fail), waking at the live lease's expiry, which changes the
// index by the clock alone. A read that shows a later index is only a
// hint: one strongly consistent read confirms it before the answer, and
// the last answer of a wait that runs out comes from one too; an expiry it
// answers is recorded on the item first (settleExpiry), so no late renewal
// undoes it. A lease that begins
// and ends between two reads is missed; the index (and Token) tell the
// watcher how many.
func (s *Service) Watch(ctx context.Context, req WatchRequest, b Budget) (WatchResult, error) {
	var v ValidationError
	if s.ValidateWatch(&req, &v); v.Err() != nil {
		return WatchResult{}, &v
	}
	now := s.now()
	if req.Arrived.IsZero() || req.Arrived.After(now) {
		req.Arrived = now
	}
	if req.WaitSeconds == 0 {
		res, _, err := s.watchRead(ctx, req, b)
		return res, err
	}
	end := deadlineEnd(ctx, b, now, req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second))
	sctx, cancel := context.WithTimeout(ctx, max(end.Sub(now), 0))
	defer cancel()
	var res WatchResult
	peek := func() (int64, time.Time, error) {
		item, err := s.watchPeek(ctx, req.Resource, b)
		if err != nil {
			return 0, time.Time{}, err
		}
		at := s.now()
		return IndexOf(item, at), liveUntil(item, at), nil
	}
	confirm := func() (bool, time.Time, error) {
		var exp time.Time
		var err error
		res, exp, err = s.watchRead(ctx, req, b)
		return res.Changed, exp, err
	}
	reads, changed, err := s.pollWatch(sctx, end, WatchPollInterval, time.Time{}, req.Index, "watch", req.Resource, peek, confirm)
	if err != nil || changed {
		res.Reads = reads
		return res, err
	}
	// The wait ran out: the state now, from a consistent read.
	res, _, err = s.watchRead(ctx, req, b)
	res.Reads = reads
	return res, err
}

// pollWatch is the wait of a watch (a lock's or a semaphore's), until end
// by the service clock: it peeks at the item (an eventually consistent
// read: the index it shows and the next expiry that changes it without a
// write) every interval on average, jittered, the first anywhere within
// one interval, backing off to MaxPollInterval while reads fail, and waking
// at that expiry; a peek above asked is only a hint, which confirm checks
// with a consistent read (true: a later state, answered). It returns the
// peeks made, whether confirm saw a change, and a store error that ends
// the wait (a peek's, as op's on resource; confirm's, as it returned it).
func (s *Service) pollWatch(sctx context.Context, end time.Time, base time.Duration, exp time.Time, asked int64, op, resource string,
	peek func() (int64, time.Time, error), confirm func() (bool, time.Time, error)) (reads int, changed bool, err error) {
	interval := base
	pause := randUpTo(interval) // the first read: anywhere in one interval
	for {
		now := s.now()
		wake := now.Add(pause)
		if !exp.IsZero() && exp.Before(wake) {
			wake = exp
		}
		if !wake.Before(end) {
			// The last moments: wait them out, then answer.
			_ = s.sleep(sctx, end.Sub(now))
			return reads, false, nil
		}
		if s.sleep(sctx, wake.Sub(now)) != nil {
			return reads, false, nil
		}
		pause = interval/2 + randUpTo(interval)
		index, until, err := peek()
		reads++
		if err != nil {
			if !transient(err) {
				return reads, false, storeErr(op, resource, err)
			}
			interval = min(2*interval, MaxPollInterval)
			pause = interval/2 + randUpTo(interval)
			continue
		}
		interval = max(interval/2, base)
		if index <= asked {
			exp = until
			continue
		}
		// A hint of a change: confirm it with a consistent read.
		if changed, exp, err = confirm(); err != nil || changed {
			return reads, changed, err
		}
	}
}

// settledRead is the consistent read of a watch's answer: read, and when
// the item shows an expiry no write recorded (pending) and the answer
// would report it (its index above asked, by index), the record of it
// (settle: the item as written, false when its condition failed) before
// the answer — up to maxSettleAttempts reads, since each failed record
// means a write landed between the read and it. It returns the item and
// the clock it was judged by, or the store's error.
func (s *Service) settledRead(asked int64, read func() (map[string]types.AttributeValue, error),
	pending func(map[string]types.AttributeValue, time.Time) bool, index func(map[string]types.AttributeValue, time.Time) int64,
	settle func(map[string]types.AttributeValue, time.Time) (map[string]types.AttributeValue, bool, error)) (map[string]types.AttributeValue, time.Time, error) {
	for attempt := 0; ; attempt++ {
		item, err := read()
		if err != nil {
			return nil, time.Time{}, err
		}
		now := s.now()
		if !pending(item, now) || index(item, now) <= asked {
			return item, now, nil
		}
		settled, ok, err := settle(item, now)
		if err != nil {
			return nil, time.Time{}, err
		}
		if ok {
			return settled, now, nil
		}
		if attempt == maxSettleAttempts-1 {
			// A write landed between every read and its record: give up
			// with a transient error (the caller retries) rather than
			// answer a state that may already be gone.
			return nil, time.Time{}, errSettleContended
		}
	}
}

// watchRead reads req.Resource strongly consistently and returns its state
// and, for a live lease, when it expires (zero otherwise). An expiry no
// write has recorded is recorded before it is answered (settleExpiry), so
// that no late renewal can undo an end a watcher was told of.
func (s *Service) watchRead(ctx context.Context, req WatchRequest, b Budget) (WatchResult, time.Time, error) {
	read := func() (map[string]types.AttributeValue, error) {
		cctx, cancel := b.Context(ctx)
		defer cancel()
		return s.get(cctx, req.Resource)
	}
	settle := func(item map[string]types.AttributeValue, now time.Time) (map[string]types.AttributeValue, bool, error) {
		written, err := s.settleExpiry(ctx, req.Resource, item, now, b)
		return written, written != nil, err
	}
	item, now, err := s.settledRead(req.Index, read, unrecordedExpiry, IndexOf, settle)
	if err != nil {
		return WatchResult{}, time.Time{}, storeErr("watch", req.Resource, err)
	}
	res := WatchResult{Index: IndexOf(item, now)}
	res.Changed = res.Index > req.Index
	res.Token, _ = n(item, AttrToken)
	if lock, ok := decode(req.Resource, item); ok && live(item, now) {
		res.Lock = &lock
	}
	if res.Lock == nil {
		res.BlockedUntil, _ = blockedUntil(item, now)
	}
	if res.Index < req.Index {
		if res.Index != 0 && (res.Index%2 != 0 || req.Index != res.Index+1) {
			// No answer of this service had that index: a made-up one.
			var v ValidationError
			v.Add("index", "is later than any state of this lock: use 0, or the index of an earlier answer")
			return WatchResult{}, time.Time{}, &v
		}
		// The caller saw this lease end through an instance whose clock
		// is ahead of this one's (the only way a strong read can be
		// behind an answer), or garbage collection deleted the idle item
		// (the next grant starts a counter above the old one): keep to
		// what it saw, never back.
		res.Index, res.Lock = req.Index, nil
		res.BlockedUntil, _ = blockedUntil(item, now)
	}
	return res, liveUntil(item, now), nil
}

// maxSettleAttempts bounds the reads and writes of one answer that meets
// an unrecorded expiry: each failed write means a write landed between the
// read and it, so a third is rare.
const maxSettleAttempts = 3

// errSettleContended is the cause of a watch answer given up after
// maxSettleAttempts lost races with other writes (a transient error: the
// caller retries).
var errSettleContended = errors.New("the lease changed under every attempt to record its expiry")

// unrecordedExpiry is leaseNames.unrecordedExpiry for the lock.
func unrecordedExpiry(item map[string]types.AttributeValue, now time.Time) bool {
	return lockLease.unrecordedExpiry(item, now)
}

// settleExpiry records that the lease on item (read at now) has expired
// (recordExpiry). A renewal issued before the expiry may still land after
// it — the late-write rule lets a renew revive its own lease within its
// retry window — and would bring back a lease a watcher was told had
// ended; the renew condition refuses a lease with expired_at, so whichever
// of the two writes lands first decides, and the watcher's answer agrees
// with it. (A release issued in time still lands: it revives nothing and
// frees the lock from its lock-delay.) It returns the item as written, or
// nil when the condition failed (the lease was renewed, released, replaced
// or recorded meanwhile).
func (s *Service) settleExpiry(ctx context.Context, resource string, item map[string]types.AttributeValue, now time.Time, b Budget) (map[string]types.AttributeValue, error) {
	return s.recordExpiry(ctx, s.key(resource), item, []recorded{{&lockLease, ""}}, now, b)
}

// recorded is a lease an expiry record names, with its placeholder
// prefix (leaseExpr).
type recorded struct {
	a      *leaseNames
	prefix string
}

// recordExpiry is the one record of watched expiries: with one conditional
// write of the item at key, expired_at set on each of leases, each
// conditioned on recordable with the token item shows (read at now): the
// same lease, expired by this clock, not ended by any write. It returns
// the item as written, or nil when a condition failed (the caller reads
// again).
func (s *Service) recordExpiry(ctx context.Context, key map[string]types.AttributeValue, item map[string]types.AttributeValue, leases []recorded, now time.Time, b Budget) (map[string]types.AttributeValue, error) {
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	var set, cond []string
	for _, r := range leases {
		l := x.lease(r.a, r.prefix)
		set = append(set, l.n(pRec)+" = :now")
		cond = append(cond, l.recordable(x.v(":"+r.prefix+"tok", item[r.a.token])))
	}
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key,
		UpdateExpression:          aws.String("SET " + strings.Join(set, ", ")),
		ConditionExpression:       aws.String(strings.Join(cond, " AND ")),
		ExpressionAttributeNames:  x.names,
		ExpressionAttributeValues: x.values,
		ReturnValues:              types.ReturnValueAllNew,
		// On failure the caller reads the item again, consistently:
		// dynalite would not return it anyway.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureNone,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}

// watchPeek reads the attributes of the index with an eventually
// consistent GetItem.
func (s *Service) watchPeek(ctx context.Context, resource string, b Budget) (map[string]types.AttributeValue, error) {
	return s.project(ctx, resource, b, "#t, #e, #x, #fa, #xa", watchNames)
}

// liveUntil returns the expiry of the lock's live lease at now, or zero.
func liveUntil(item map[string]types.AttributeValue, now time.Time) time.Time {
	return lockLease.liveUntil(item, now)
}
