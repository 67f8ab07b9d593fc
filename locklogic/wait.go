package locklogic

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Limits and pace of a waiting acquire.
const (
	// MaxWaitLimit bounds wait_seconds and Config.MaxWaitSeconds: a wait,
	// its last write (the store budget) and the function's start must fit
	// in API Gateway's 30 s integration timeout.
	MaxWaitLimit = 20
	// DefaultMaxWaitSeconds is the longest wait a caller may ask for unless
	// the service is configured lower.
	DefaultMaxWaitSeconds = MaxWaitLimit
	// PollInterval is the mean time between a waiter's reads of the item
	// (each one uniformly random within ±50 %, so that waiters spread out).
	PollInterval = 100 * time.Millisecond
	// MaxPollInterval caps the interval a waiter backs off to while its
	// reads fail (throttled by DynamoDB, or not answered).
	MaxPollInterval = time.Second
	// GrantGuard is how long before wait_seconds have passed a wait stops:
	// no grant is made in the last moments before a caller that waits
	// exactly wait_seconds gives up, so a grant nobody hears is rare.
	GrantGuard = 500 * time.Millisecond
)

// ValidateWait checks an acquire's wait in whole seconds: 0 ≤ wait ≤
// maxWait; with maxWait negative (waiting off) only 0.
func ValidateWait(waitSeconds, maxWait int64, v *ValidationError) {
	switch {
	case maxWait < 0:
		if waitSeconds != 0 {
			v.Add("wait_seconds", "must be 0: this service does not wait for held locks")
		}
	case waitSeconds < 0 || waitSeconds > maxWait:
		v.Add("wait_seconds", "must be an integer from 0 to "+strconv.FormatInt(maxWait, 10))
	}
}

// Budget bounds the store calls of one request: none runs past Deadline,
// the request's one store budget from its arrival (zero: none), nor past
// the request context's deadline minus Reserve, so a slow store still
// leaves time to answer; each call of a request that waits also gets
// PerCall at most (zero: no bound of its own), so that one slow read does
// not spend its wait. The HTTP layer sets it from its store budget and the
// Lambda deadline.
type Budget struct {
	Deadline time.Time
	PerCall  time.Duration
	Reserve  time.Duration
}

// Context derives the context of one store call starting now.
func (b Budget) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline := b.Deadline
	if b.PerCall > 0 {
		if d := time.Now().Add(b.PerCall); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Add(-b.Reserve).Before(deadline)) {
		deadline = d.Add(-b.Reserve)
	}
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
}

// AcquireWait is Acquire with every store call bounded by b. When the lock
// is held by someone else and req.WaitSeconds is above zero, it waits
// inside the request and takes the lock as soon as it is free:
//
//   - It wakes when the lock comes free when it knows that time — the
//     holder's expires_at, or free_at for a lease with a lock-delay — (from
//     the old item of a failed write, which DynamoDB returns and dynalite
//     does not, or from its own reads) and tries the write then.
//   - Meanwhile it watches the item for an early release with an
//     eventually consistent GetItem (half a read unit) every PollInterval
//     on average, jittered, backing off up to MaxPollInterval while reads
//     fail. A read is only a hint: it writes when the item looks free, and
//     the conditional write decides, as for every acquire.
//
// Every write of a wait acts under the late-write rule as of the request's
// issue time (req.Arrived), not of the write: a lease the same owner was
// granted after the request was issued is not replaced by it.
//
// No write starts in the last GrantGuard of WaitSeconds counted from
// req.Arrived (so a cold start's time counts), nor later than leaves the
// write b.PerCall before the context's deadline minus b.Reserve: the clock
// is checked before every write, the first included (a request that
// arrives with no time left to try is ErrWaitElapsed). When the wait runs
// out the answer is "held", with the holder's expiry when the store
// reports the holder with a failed write (DynamoDB does, dynalite does
// not), as for a single attempt. A write the store fails ends the wait
// with that error, as for a single acquire; a read that fails only delays
// the next one, unless the store refused it for good (a missing table or
// permission: an error).
func (s *Service) AcquireWait(ctx context.Context, req AcquireRequest, b Budget) (AcquireResult, error) {
	var v ValidationError
	if s.ValidateAcquire(&req, &v); v.Err() != nil {
		return AcquireResult{}, &v
	}
	now := s.now()
	if req.Arrived.IsZero() || req.Arrived.After(now) {
		req.Arrived = now
	}
	gid := newGrantID()
	if req.WaitSeconds == 0 {
		return s.attempt(ctx, req, b, gid)
	}
	end := req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second - GrantGuard)
	if !now.Before(end) {
		return AcquireResult{}, fmt.Errorf("acquire %q: %w", req.Resource, ErrWaitElapsed)
	}
	// The first write goes out whatever the deadline leaves (its budget
	// is cut to fit); the wait's writes only while a whole budget fits.
	if s.fair {
		cctx, cancel := b.Context(ctx)
		res, old, err := s.acquireWrite(cctx, req, req.Arrived, gid)
		cancel()
		if err != nil || res.Acquired {
			return res, err
		}
		return s.waitFairLock(ctx, req, b, res, old, deadlineEnd(ctx, b, now, end), gid)
	}
	res, err := s.attempt(ctx, req, b, gid)
	if err != nil || res.Acquired {
		return res, err
	}
	return s.wait(ctx, req, b, res, deadlineEnd(ctx, b, now, end), gid)
}

// deadlineEnd moves end, by the service clock at now, earlier when a write
// starting then would not have b.PerCall before ctx's deadline minus
// b.Reserve, or before b.Deadline.
func deadlineEnd(ctx context.Context, b Budget, now, end time.Time) time.Time {
	if d, ok := ctx.Deadline(); ok {
		if byDeadline := now.Add(time.Until(d) - b.Reserve - b.PerCall); byDeadline.Before(end) {
			end = byDeadline
		}
	}
	if !b.Deadline.IsZero() {
		if byBudget := now.Add(time.Until(b.Deadline) - b.PerCall); byBudget.Before(end) {
			end = byBudget
		}
	}
	return end
}

// attempt makes one acquire write under its own budget, as of req's issue
// time req.Arrived, with the request's grant id gid.
func (s *Service) attempt(ctx context.Context, req AcquireRequest, b Budget, gid string) (AcquireResult, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	return s.acquireOnce(cctx, req, req.Arrived, gid)
}

// newGrantID returns a random id for one acquire request's writes. It only
// has to differ from the ids of the same owner's other requests.
func newGrantID() string {
	return strconv.FormatUint(rand.Uint64(), 36)
}

// wait runs the watch of AcquireWait after a first attempt answered held,
// until end by the service clock.
func (s *Service) wait(ctx context.Context, req AcquireRequest, b Budget, held AcquireResult, end time.Time, gid string) (res AcquireResult, err error) {
	start := s.now()
	defer func() { res.Waited = max(s.now().Sub(start), 0) }()
	// Sleeps end with the wait by the real clock too, so a service whose
	// clock stands still (a test's) cannot wait for ever.
	sctx, cancel := context.WithTimeout(ctx, max(end.Sub(start), 0))
	defer cancel()

	exp := held.HolderExpiresAt
	reports := s.oldItem || !exp.IsZero() // the store reports holders with failed writes
	interval := PollInterval
	pause := randUpTo(interval) // the first read: anywhere in one interval
	for {
		now := s.now()
		if !now.Before(end) {
			break
		}
		wake, atExpiry := now.Add(pause), false
		if !exp.IsZero() && !exp.After(wake) {
			wake, atExpiry = exp, true
		}
		if wake.After(end) {
			wake, atExpiry = end, false
		}
		if err := s.sleep(sctx, wake.Sub(now)); err != nil || !wake.Before(end) {
			break
		}
		pause = interval/2 + randUpTo(interval)
		if !atExpiry {
			item, err := s.peek(ctx, req.Resource, b)
			if err != nil {
				if !transient(err) {
					return AcquireResult{}, storeErr("acquire", req.Resource, err)
				}
				interval = min(2*interval, MaxPollInterval)
				pause = interval/2 + randUpTo(interval)
				continue
			}
			interval = max(interval/2, PollInterval)
			if until, blocked := blockedUntil(item, s.now()); blocked {
				exp = until
				continue
			}
		}
		if !s.now().Before(end) {
			break // a slow read or a late wake-up took the last moments: no write now
		}
		res, err := s.attempt(ctx, req, b, gid)
		if err != nil || res.Acquired {
			return res, err
		}
		exp = res.HolderExpiresAt
		reports = reports || !exp.IsZero()
	}
	// The holder's expiry is reported where the store reports it with a
	// failed write (DynamoDB), as for a single acquire, and then the latest
	// the wait saw; on a store that does not (dynalite), never.
	held.HolderExpiresAt = time.Time{}
	if reports && exp.After(s.now()) {
		held.HolderExpiresAt = exp
	}
	return held, nil
}

// peekNames are the attributes a waiter reads: enough to tell whether the
// lock is blocked and until when.
var peekNames = map[string]string{"#e": AttrExpiresAt, "#x": AttrReleasedAt, "#f": AttrFreeAt}

// peek reads the lease state of resource with an eventually consistent
// GetItem (half the cost of a consistent one); the item may be a little
// stale, which only delays a waiter or costs it a failed write.
func (s *Service) peek(ctx context.Context, resource string, b Budget) (map[string]types.AttributeValue, error) {
	return s.project(ctx, resource, b, "#e, #x, #f", peekNames)
}

// project reads the attributes projection names of resource with an
// eventually consistent GetItem under its own budget.
func (s *Service) project(ctx context.Context, resource string, b Budget, projection string, names map[string]string) (map[string]types.AttributeValue, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.GetItem(cctx, &dynamodb.GetItemInput{
		TableName:                aws.String(s.table),
		Key:                      s.key(resource),
		ProjectionExpression:     aws.String(projection),
		ExpressionAttributeNames: names,
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// randUpTo returns a random duration in [0, d).
func randUpTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// sleep is the default Config.Sleep: a timer that ctx can cut short.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
