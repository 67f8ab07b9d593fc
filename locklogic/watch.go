package locklogic

import (
	"context"
	"time"

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
	ValidateResource(req.Resource, v)
	if !v.Has("index") && req.Index < 0 {
		v.Add("index", "must be an integer from 0 (the index of the last answer, or 0 for none)")
	}
	if !v.Has("wait_seconds") {
		ValidateWait(req.WaitSeconds, s.maxWait, v)
	}
}

// WatchPollInterval is the mean time between a watcher's eventually
// consistent reads (jittered ±50 %): under 7 a second, so that with the
// strongly consistent read that confirms each change a watcher of a busy
// lock stays under 10 reads a second.
const WatchPollInterval = 150 * time.Millisecond

// watchNames are the attributes a watcher's eventually consistent reads
// project: enough to compute the index.
var watchNames = map[string]string{"#t": AttrToken, "#e": AttrExpiresAt, "#x": AttrReleasedAt, "#fa": AttrForcedAt}

// Watch answers the state of req.Resource as soon as its index is later
// than req.Index, or when req.WaitSeconds (counted from req.Arrived) have
// passed, with every store call bounded by b. Without a wait it answers one
// strongly consistent read. With one, it reads the item with an eventually
// consistent GetItem (half a read unit) every WatchPollInterval on average,
// the first anywhere within the first interval (jittered; backing off to MaxPollInterval
// while reads fail), waking at the live lease's expiry, which changes the
// index without a write. A read that shows a later index is only a hint:
// one strongly consistent read confirms it before the answer, and the last
// answer of a wait that runs out comes from one too. A lease that begins
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
	var (
		res WatchResult
		exp time.Time
		err error
	)
	reads := 0
	interval := WatchPollInterval
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
			break
		}
		if err := s.sleep(sctx, wake.Sub(now)); err != nil {
			break
		}
		pause = interval/2 + randUpTo(interval)
		item, err := s.watchPeek(ctx, req.Resource, b)
		reads++
		if err != nil {
			if !transient(err) {
				return WatchResult{}, storeErr("watch", req.Resource, err)
			}
			interval = min(2*interval, MaxPollInterval)
			pause = interval/2 + randUpTo(interval)
			continue
		}
		interval = max(interval/2, WatchPollInterval)
		at := s.now()
		if IndexOf(item, at) <= req.Index {
			exp = liveUntil(item, at)
			continue
		}
		// A hint of a change: confirm it with a consistent read.
		res, exp, err = s.watchRead(ctx, req, b)
		if err != nil || res.Changed {
			res.Reads = reads
			return res, err
		}
	}
	// The wait ran out: the state now, from a consistent read.
	res, _, err = s.watchRead(ctx, req, b)
	res.Reads = reads
	return res, err
}

// watchRead reads req.Resource strongly consistently and returns its state
// and, for a live lease, when it expires (zero otherwise).
func (s *Service) watchRead(ctx context.Context, req WatchRequest, b Budget) (WatchResult, time.Time, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	item, err := s.get(cctx, req.Resource)
	if err != nil {
		return WatchResult{}, time.Time{}, storeErr("watch", req.Resource, err)
	}
	now := s.now()
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

// watchPeek reads the attributes of the index with an eventually
// consistent GetItem.
func (s *Service) watchPeek(ctx context.Context, resource string, b Budget) (map[string]types.AttributeValue, error) {
	return s.project(ctx, resource, b, "#t, #e, #x, #fa", watchNames)
}

// liveUntil returns the expiry of item's live lease at now, or zero.
func liveUntil(item map[string]types.AttributeValue, now time.Time) time.Time {
	if !live(item, now) {
		return time.Time{}
	}
	exp, _ := n(item, AttrExpiresAt)
	return time.UnixMilli(exp)
}
