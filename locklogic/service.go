package locklogic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// DynamoDBAPI is the part of the DynamoDB client the service calls, with the
// SDK's exact signatures so *dynamodb.Client satisfies it as is and tests can
// substitute a small fake for failure paths a real server cannot produce.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	// Scan is used by List only (the admin function's role alone may call it).
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ DynamoDBAPI = (*dynamodb.Client)(nil)

// Item attribute names. The partition key is AttrResource; AttrTTL is the
// attribute DynamoDB's TTL is configured on (garbage collection only).
const (
	AttrResource   = "resource"
	AttrOwner      = "owner"
	AttrPrincipal  = "principal"
	AttrToken      = "fencing_token"
	AttrAcquiredAt = "acquired_at" // epoch milliseconds: :now of the acquire that granted the lease
	AttrRenewedAt  = "renewed_at"  // epoch milliseconds: :now of the latest acquire or renew (the write that set expires_at)
	AttrExpiresAt  = "expires_at"  // epoch milliseconds; the lease is live while now < expires_at
	AttrReleasedAt = "released_at" // epoch milliseconds; present on a released record (tombstone)
	AttrReleaseID  = "release_id"  // random id of the release call that made the tombstone
	AttrLockDelay  = "lock_delay"  // milliseconds: the lease's lock-delay (0 when it has none)
	AttrFreeAt     = "free_at"     // epoch milliseconds: expires_at + lock_delay, or the release time
	AttrForcedAt   = "forced_at"   // epoch milliseconds: the force release that ended the lease (removed by the next grant)
	AttrExpiredAt  = "expired_at"  // epoch milliseconds: a watch answered this lease's expiry; no renew may revive it (removed by the next grant)
	AttrGrantID    = "grant_id"    // random id of the acquire request that wrote the lease (an SDK retry finds its own)
	// The lease a force release ended, kept so that an SDK retry of it can
	// say what it ended after a newer lease was granted.
	AttrForcedOwner    = "forced_owner"
	AttrForcedToken    = "forced_token"
	AttrForcedAcquired = "forced_acquired_at"
	AttrTTL            = "ttl" // epoch seconds: free_at (at most expires_at + max lock-delay) + retention
	// AttrQueue is the waiters of the lock in arrival order (fair waiting):
	// a list of maps {id, owner, principal, until}, see queue.go.
	AttrQueue = "queue"
	// AttrQueueUntil is at least the latest until of any entry of AttrQueue
	// (epoch ms): once it has passed, every entry has lapsed, and an
	// acquire may take a free lock over them in its one write. Every write
	// that sets it sets the latest until of the entries it leaves.
	AttrQueueUntil = "queue_until"
	// AttrQueueVersion grows by one with every write that adds an entry or
	// moves an until (join, keep), and never shrinks: a write conditioned
	// on the version it saw knows that no entry was added and no until
	// raised since (an SDK retry of a landed join cannot append twice, and
	// queue_until may be set from the entries it saw).
	AttrQueueVersion = "queue_version"
)

// DefaultRetention is how long an idle record (released or expired) is kept
// before DynamoDB's TTL may delete it.
const DefaultRetention = 7 * 24 * time.Hour

// Config configures a Service. Zero values mean the defaults.
type Config struct {
	// Table is the DynamoDB table name (required; the caller checks it).
	Table string
	// MaxTTLSeconds caps ttl_seconds; DefaultMaxTTLSeconds when zero.
	MaxTTLSeconds int64
	// Retention is added to a lease's expiry to form the garbage-collection
	// time written to AttrTTL; DefaultRetention when zero.
	Retention time.Duration
	// Now is the clock; time.Now when nil. Tests swap it to move time.
	Now func() time.Time
	// OldItemOnFailure says the store returns the old item with every failed
	// condition on an existing item (ReturnValuesOnConditionCheckFailure),
	// as DynamoDB does, so a failure without one means the item is absent
	// and no read is needed to explain it. dynalite ignores the parameter:
	// leave this false there, and a failed renew or release spends one
	// consistent read to tell 404 from 403/409.
	OldItemOnFailure bool
	// MaxWaitSeconds caps an acquire's WaitSeconds: DefaultMaxWaitSeconds
	// when zero, at most MaxWaitLimit; negative turns waiting off (only 0
	// is accepted).
	MaxWaitSeconds int64
	// MaxLockDelaySeconds caps an acquire's LockDelaySeconds:
	// DefaultMaxLockDelaySeconds when zero, at most MaxLockDelayLimit;
	// negative turns lock-delay off (only 0 is accepted).
	MaxLockDelaySeconds int64
	// Sleep pauses a waiting acquire for d, or until ctx ends (then it
	// returns ctx's error); a timer when nil. Tests that swap Now swap it
	// too, so that a wait moves their clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// FairWaiting serves waiting acquires in arrival order: a waiter joins
	// the queue kept on the lock's item, and only the head of the queue
	// may take a free lock (docs/design.md#fair-waiting-a-queue-on-the-item).
	// Off, waiters watch the item at random and the first write after a
	// release wins, as before the queue existed. Whichever it is, an
	// acquire never takes a free lock past a live queued waiter, and a
	// waiting semaphore acquire always queues (semaphores never had the
	// random watch). The service's own setups (api.Config) turn it on.
	FairWaiting bool
}

// Service implements the lock rules over one DynamoDB table. It is safe for
// concurrent use and cheap to share: build one per process (cold start).
type Service struct {
	db        DynamoDBAPI
	table     string
	maxTTL    int64
	maxWait   int64 // -1: waiting is off
	maxDelay  int64 // -1: lock-delay is off
	retention time.Duration
	now       func() time.Time
	sleep     func(ctx context.Context, d time.Duration) error
	oldItem   bool
	fair      bool
}

// New returns a Service over db. It does not touch the network.
func New(db DynamoDBAPI, cfg Config) *Service {
	s := &Service{db: db, table: cfg.Table, maxTTL: cfg.MaxTTLSeconds, maxWait: cfg.MaxWaitSeconds,
		maxDelay: cfg.MaxLockDelaySeconds, retention: cfg.Retention, now: cfg.Now, sleep: cfg.Sleep,
		oldItem: cfg.OldItemOnFailure, fair: cfg.FairWaiting}
	if s.maxTTL <= 0 {
		s.maxTTL = DefaultMaxTTLSeconds
	}
	switch {
	case s.maxWait == 0:
		s.maxWait = DefaultMaxWaitSeconds
	case s.maxWait < 0:
		s.maxWait = -1
	case s.maxWait > MaxWaitLimit:
		s.maxWait = MaxWaitLimit
	}
	switch {
	case s.maxDelay == 0:
		s.maxDelay = DefaultMaxLockDelaySeconds
	case s.maxDelay < 0:
		s.maxDelay = -1
	case s.maxDelay > MaxLockDelayLimit:
		s.maxDelay = MaxLockDelayLimit
	}
	if s.sleep == nil {
		s.sleep = sleep
	}
	if s.retention <= 0 {
		s.retention = DefaultRetention
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// MaxTTLSeconds returns the longest lease the service grants.
func (s *Service) MaxTTLSeconds() int64 { return s.maxTTL }

// MaxWaitSeconds returns the longest wait an acquire may ask for; 0 when
// waiting is off.
func (s *Service) MaxWaitSeconds() int64 { return max(s.maxWait, 0) }

// MaxLockDelaySeconds returns the longest lock-delay an acquire may ask
// for; 0 when lock-delay is off.
func (s *Service) MaxLockDelaySeconds() int64 { return max(s.maxDelay, 0) }

// Lock is a live lease.
type Lock struct {
	Resource string
	Owner    string
	// FencingToken grows with every successful acquire of Resource; a
	// protected system rejects writes carrying a smaller token than it saw.
	FencingToken int64
	AcquiredAt   time.Time
	ExpiresAt    time.Time
	// LockDelay is how long after ExpiresAt the lock stays blocked for
	// others when the lease expires without a release (zero: none).
	LockDelay time.Duration
	// Principal is the IAM principal bound to the lease, "" when none. Only
	// the admin answers show it.
	Principal string
	// ForceReleased says an operator ended the lease (ForceRelease); it is
	// then expired, and may still block the lock for its lock-delay.
	ForceReleased bool
	// Queue is the lock's waiters in queue order, in the admin listings
	// only (a semaphore's: on its first permit listed).
	Queue []QueueEntry
	// SetID is the id of the lock set whose request granted the lease,
	// "" for a lease of its own (docs/design.md#lock-sets).
	SetID string
}

// FreeAt is when the lock comes free for others if the lease is not
// released: ExpiresAt plus LockDelay.
func (l Lock) FreeAt() time.Time { return l.ExpiresAt.Add(l.LockDelay) }

// Caller identifies who asks: the owner string from the request body and,
// when the request was authenticated, the caller's principal. A lease taken
// with a principal answers only to that principal and owner together.
type Caller struct {
	Owner     string
	Principal string
}

// AcquireRequest asks for a lease of TTLSeconds on Resource. With
// WaitSeconds above zero, an acquire that finds the lock held by someone
// else waits up to that long for it to come free (see AcquireWait). With
// LockDelaySeconds above zero, the lease has a lock-delay: if it expires
// without a release, nobody else may take the lock until that long after
// its expiry (a release frees it at once).
type AcquireRequest struct {
	Resource         string
	Caller           Caller
	TTLSeconds       int64
	WaitSeconds      int64
	LockDelaySeconds int64
	// Arrived is when the request reached the service (API Gateway's
	// requestContext.timeEpoch); zero means when AcquireWait starts. It is
	// the request's issue time for the late-write rule of every write of a
	// wait, and a wait ends GrantGuard before Arrived + WaitSeconds.
	Arrived time.Time
	// QueueTicket is the place in the lock's queue that an earlier round of
	// the same wait was given (AcquireResult.QueueTicket): a waiting
	// acquire that sends it back keeps that place. Only waiting acquires
	// of a service with FairWaiting use it; "" for none.
	QueueTicket string
}

// AcquireResult is the outcome of Acquire. A lock held by someone else is an
// outcome (Acquired false), not an error: the caller should try again later.
type AcquireResult struct {
	Acquired bool
	// Lock is the new lease when Acquired.
	Lock Lock
	// HolderExpiresAt is when the lock comes free for others: the other
	// holder's expiry plus its lock-delay, when the store reported the item
	// with the failed condition (or a waiting acquire read it); zero when
	// unknown.
	HolderExpiresAt time.Time
	// Waited is how long a waiting acquire (WaitSeconds above zero) spent
	// waiting after its first attempt found the lock held.
	Waited time.Duration
	// QueueTicket is, for a waiting acquire that ended held, its place in
	// the lock's queue, live until QueueGrace after the round: the caller's
	// next round sends it back (AcquireRequest.QueueTicket) to keep the
	// place. "" when the waiter has none (the queue was full, or
	// FairWaiting is off).
	QueueTicket string
}

// RenewRequest asks to extend a live lease to now + TTLSeconds. With
// FencingToken set, the live lease must carry exactly that token.
type RenewRequest struct {
	Resource     string
	Caller       Caller
	TTLSeconds   int64
	FencingToken *int64
}

// ReleaseRequest asks to end a live lease. With FencingToken set, the live
// lease must carry exactly that token.
type ReleaseRequest struct {
	Resource     string
	Caller       Caller
	FencingToken *int64
}

// ValidateAcquire checks req against the service's limits and normalizes
// its owner, adding every invalid field to v. A field v already reports
// (one the caller could not read) is not checked again, so one answer can
// name every problem of a request.
func (s *Service) ValidateAcquire(req *AcquireRequest, v *ValidationError) {
	s.validate(req.Resource, &req.Caller, &req.TTLSeconds, nil, v)
	if !v.Has("wait_seconds") {
		ValidateWait(req.WaitSeconds, s.maxWait, v)
	}
	if !v.Has("lock_delay_seconds") {
		ValidateLockDelay(req.LockDelaySeconds, s.maxDelay, v)
	}
	if !v.Has("queue_ticket") {
		ValidateQueueTicket(req.QueueTicket, v)
	}
}

// ValidateRenew checks req as ValidateAcquire does.
func (s *Service) ValidateRenew(req *RenewRequest, v *ValidationError) {
	s.validate(req.Resource, &req.Caller, &req.TTLSeconds, req.FencingToken, v)
}

// ValidateRelease checks req as ValidateAcquire does.
func (s *Service) ValidateRelease(req *ReleaseRequest, v *ValidationError) {
	s.validate(req.Resource, &req.Caller, nil, req.FencingToken, v)
}

func (s *Service) validate(resource string, c *Caller, ttl *int64, token *int64, v *ValidationError) {
	// The path's resource is always checked: a body member of that name
	// (unknown there) must not hide a bad name.
	ValidateResource(resource, v)
	if !v.Has("owner") {
		c.Owner = NormalizeOwner(c.Owner, v)
	}
	if ttl != nil && !v.Has("ttl_seconds") {
		ValidateTTL(*ttl, s.maxTTL, v)
	}
	if !v.Has("fencing_token") {
		ValidateFencingToken(token, v)
	}
}

// Acquire takes the lease on req.Resource when it is free, expired, or
// already held by the same caller (a re-acquire restarts the lease), with one
// conditional UpdateItem. Every success returns a fencing token greater than
// any issued before for the resource. With req.WaitSeconds above zero it
// waits for a held lock as AcquireWait does, every store call under ctx.
func (s *Service) Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error) {
	return s.AcquireWait(ctx, req, Budget{})
}

// acquireOnce makes one conditional write for a validated req. issued is
// the request's issue time: a lease of the same owner granted or renewed
// after it is not replaced (the late-write rule), however late in a wait
// the write comes; :now, later, decides expiry and stamps the grant. gid
// is the request's grant id: an SDK retry of a write whose first attempt
// landed finds it and succeeds again, though its own grant is newer than
// its issue time.
func (s *Service) acquireOnce(ctx context.Context, req AcquireRequest, issued time.Time, gid string) (AcquireResult, error) {
	res, _, err := s.acquireWrite(ctx, req, issued, gid)
	return res, err
}

// acquireWrite is acquireOnce that also returns, when the lock was not
// granted, the old item the store returned with the failed condition (nil
// when it returned none: dynalite, or no item).
func (s *Service) acquireWrite(ctx context.Context, req AcquireRequest, issued time.Time, gid string) (AcquireResult, map[string]types.AttributeValue, error) {
	now := s.now()
	nowMs := now.UnixMilli()
	expMs := nowMs + req.TTLSeconds*1000
	delayMs := req.LockDelaySeconds * 1000

	// At most 8 values in the common case (no lock-delay): a map hinted
	// for more costs another allocation on every acquire.
	values := make(map[string]types.AttributeValue, 8)
	values[":o"] = &types.AttributeValueMemberS{Value: req.Caller.Owner}
	values[":now"] = num(nowMs)
	values[":iss"] = num(min(issued.UnixMilli(), nowMs))
	values[":exp"] = num(expMs)
	values[":gc"] = num(s.gcAt(expMs + delayMs))
	values[":base"] = num(now.UnixMicro())
	values[":one"] = one
	values[":gid"] = &types.AttributeValueMemberS{Value: gid}
	variant := 0
	if req.Caller.Principal != "" {
		variant |= 1
		values[":p"] = &types.AttributeValueMemberS{Value: req.Caller.Principal}
	}
	if delayMs > 0 {
		variant |= 2
		values[":d"] = num(delayMs)
		values[":f"] = num(expMs + delayMs)
	}
	expr := &acquireExpr[variant] // shared, read only

	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.table,
		Key:                                 s.key(req.Resource),
		UpdateExpression:                    &expr.update,
		ConditionExpression:                 &expr.cond,
		ExpressionAttributeNames:            expr.names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			res := AcquireResult{}
			if until, ok := blockedUntil(ccf.Item, now); ok {
				res.HolderExpiresAt = until
			}
			return res, ccf.Item, nil
		}
		return AcquireResult{}, nil, storeErr("acquire", req.Resource, err)
	}
	lock, ok := decode(req.Resource, out.Attributes)
	if !ok {
		return AcquireResult{}, nil, fmt.Errorf("acquire %q: store returned an incomplete item", req.Resource)
	}
	return AcquireResult{Acquired: true, Lock: lock}, nil, nil
}

// one is the constant 1 of every acquire's token increment (read only).
var one = num(1)

// acquireExpr are the update, condition and names of an acquire, built
// once, by variant: 1 with a principal, 2 with a lock-delay, 3 with both.
// The SDK only reads the names map, so one serves all requests.
var acquireExpr = [4]struct {
	update, cond string
	names        map[string]string
}{
	acquireExpression(false, false), acquireExpression(true, false),
	acquireExpression(false, true), acquireExpression(true, true),
}

// acquireSet is the update of a lock acquire (the lease as it grants it)
// in x, by variant.
func acquireSet(l *leaseExpr, withPrincipal, withDelay bool) string {
	update := "SET " + l.n(pOwner) + " = :o, " + l.n(pAcq) + " = :now, " + l.n(pRen) + " = :now, " + l.n(pExp) + " = :exp, " +
		l.x.n("#g", AttrTTL) + " = :gc, " + l.n(pGrant) + " = :gid, " + l.n(pTok) + " = if_not_exists(" + l.n(pTok) + ", :base) + :one"
	// release_id stays: a release retried by the SDK after this acquire must
	// still find its own id and report the release it did make. A new
	// lease was not force released, nor recorded expired.
	remove := " REMOVE " + l.n(pRel)
	// A lease without a lock-delay has neither lock_delay nor free_at (an
	// earlier lease's are removed): it is free once expired.
	if withDelay {
		update += ", " + l.n(pDelay) + " = :d, " + l.n(pFree) + " = :f"
	} else {
		remove += ", " + l.n(pDelay) + ", " + l.n(pFree)
	}
	if withPrincipal {
		update += ", " + l.n(pPrin) + " = :p"
	} else {
		remove += ", " + l.n(pPrin)
	}
	return update + remove + ", " + l.n(pForce) + ", " + l.n(pRec)
}

func acquireExpression(withPrincipal, withDelay bool) (e struct {
	update, cond string
	names        map[string]string
}) {
	x := newExpr()
	l := x.lease(&lockLease, "")
	c := Caller{Owner: "o"}
	if withPrincipal {
		c.Principal = "p"
	}
	e.update = acquireSet(l, withPrincipal, withDelay)
	// A released record is free whatever the clocks say; an expired one
	// is free by the server's clock once its lock-delay has passed too
	// (free). A same-owner re-acquire replaces a live lease (or one in its
	// lock-delay), so it must not be newer than the request's issue time
	// :iss (notNewer, the late-write rule), and a lease an operator force
	// released stays blocked for its owner too until free_at (holds);
	// taking a free lock ends nobody's lease, late or not. A lease this
	// very request wrote (its grant id: an SDK retry of a write that
	// landed) is its own.
	//
	// Queued waiters (fair waiting) come first: a free lock is taken only
	// when no live waiter is queued (queueOpen) — the head of the queue
	// takes it with its own write (headGrantExpression). A same-owner
	// re-acquire of its own live lease is no barge: it takes nothing a
	// waiter could have had; a lease a watch saw expire is not live for
	// it either, whatever that request's clock says (running).
	e.cond = "attribute_not_exists(" + x.n("#r", AttrResource) + ") OR (" + l.free() + " AND " + queueOpen(x) + ") OR (" +
		l.holds(c) + " AND (" + l.notNewer(":iss", true) + " OR " + l.grantIs(":gid") + ") AND (" + queueOpen(x) +
		" OR (" + l.running() + ")))"
	e.names = x.names
	return e
}

// queueOpen says no live waiter is queued at :now: the queue is absent or
// empty, or every entry has lapsed (queue_until, at least the latest
// until of any entry, has passed). Lapsed entries are left for a waiter
// to remove (queuePrune).
func queueOpen(x *expr) string {
	return "(attribute_not_exists(" + x.n("#q", AttrQueue) + "[0]) OR " + x.n("#qu", AttrQueueUntil) + " <= :now)"
}

// Renew extends the caller's live lease to now + req.TTLSeconds, keeping its
// fencing token. An expired lease cannot be renewed (ErrNotFound): take it
// again with Acquire.
func (s *Service) Renew(ctx context.Context, req RenewRequest) (Lock, error) {
	var v ValidationError
	if s.ValidateRenew(&req, &v); v.Err() != nil {
		return Lock{}, &v
	}
	return s.renew(ctx, req)
}

// renew is Renew for a validated req; a set's wait also renews with a TTL
// above the service's limit (waitSetOrdered).
func (s *Service) renew(ctx context.Context, req RenewRequest) (Lock, error) {
	now := s.now()
	expMs := now.UnixMilli() + req.TTLSeconds*1000
	x := newExpr()
	x.v(":now", num(now.UnixMilli()))
	l := x.lease(&lockLease, "")
	cond := l.holder(req.Caller, req.FencingToken, true)
	x.v(":exp", num(expMs))
	x.v(":zero", num(0))
	// The renewal does not know the lease's lock-delay, so the
	// garbage-collection time allows for the longest one.
	x.v(":gc", num(s.gcAt(expMs+max(s.maxDelay, 0)*1000)))

	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.key(req.Resource),
		UpdateExpression:                    aws.String("SET " + l.renewSet()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		err = s.explain(ctx, "renew", req.Resource, req.Caller, req.FencingToken, now, "", err)
		var later *renewedSinceError
		if !errors.As(err, &later) {
			return Lock{}, err
		}
		// This lease was renewed by a request stamped after this one (two
		// renewals in flight, landing out of order). If that renewal runs
		// at least as far as this one asked, this one is already done.
		if later.lock.ExpiresAt.UnixMilli() >= expMs {
			later.lock.Resource = req.Resource
			return later.lock, nil
		}
		return Lock{}, fmt.Errorf("renew %q: %w", req.Resource, ErrRenewRaced)
	}
	lock, ok := decode(req.Resource, out.Attributes)
	if !ok {
		return Lock{}, fmt.Errorf("renew %q: store returned an incomplete item", req.Resource)
	}
	return lock, nil
}

// Release ends the caller's live lease. The record stays as a tombstone
// (expired, with released_at set) so the fencing counter survives; DynamoDB's
// TTL removes it after the retention period.
func (s *Service) Release(ctx context.Context, req ReleaseRequest) error {
	var v ValidationError
	if s.ValidateRelease(&req, &v); v.Err() != nil {
		return &v
	}
	now := s.now()
	nowMs := now.UnixMilli()
	x := newExpr()
	x.v(":now", num(nowMs))
	l := x.lease(&lockLease, "")
	cond := l.holder(req.Caller, req.FencingToken, false)
	x.v(":gc", num(s.gcAt(nowMs)))
	releaseID := newReleaseID()
	x.s(":ri", releaseID)

	// A release frees the lock at once, lock-delay or not: free_at = now.
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.key(req.Resource),
		UpdateExpression:                    aws.String("SET " + l.releaseSet()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            x.names,
		ExpressionAttributeValues:           x.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		return s.explain(ctx, "release", req.Resource, req.Caller, req.FencingToken, now, releaseID, err)
	}
	return nil
}

// Status returns the live lease on resource with one strongly consistent
// read, or ErrNotFound when there is none (absent, released or expired —
// never stale data).
func (s *Service) Status(ctx context.Context, resource string) (Lock, error) {
	var v ValidationError
	ValidateResource(resource, &v)
	if err := v.Err(); err != nil {
		return Lock{}, err
	}
	now := s.now()
	item, err := s.get(ctx, resource)
	if err != nil {
		return Lock{}, storeErr("status", resource, err)
	}
	lock, ok := decode(resource, item)
	if !ok || !live(item, now) {
		return Lock{}, ErrNotFound
	}
	return lock, nil
}

// explain turns a failed Renew or Release write into its outcome. When the
// store returned the old item with the failed condition (DynamoDB does for
// an existing item) no further request is made; a failure without it means
// the item is absent when the store is known to return it
// (Config.OldItemOnFailure), and otherwise one strongly consistent read
// tells ErrNotFound from ErrForbidden and ErrStaleToken.
//
// releaseID is the id a release wrote: finding it on the tombstone means the
// SDK retried a write whose first attempt succeeded but whose answer was
// lost, so the release did happen (nil).
func (s *Service) explain(ctx context.Context, op, resource string, c Caller, token *int64, now time.Time, releaseID string, err error) error {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return storeErr(op, resource, err)
	}
	item := ccf.Item
	if item == nil {
		if s.oldItem {
			return ErrNotFound
		}
		var gerr error
		if item, gerr = s.get(ctx, resource); gerr != nil {
			return storeErr(op, resource, gerr)
		}
	}
	if releaseID != "" && str(item, AttrReleaseID) == releaseID {
		return nil
	}
	return lockLease.classify(item, c, token, now, op == "renew")
}

// renewedSinceError is classify's answer for a renew that found the very
// lease it asked for, live, but renewed by a request stamped after it.
type renewedSinceError struct{ lock Lock }

func (e *renewedSinceError) Error() string { return "lease renewed by a later request" }

// newReleaseID returns a random id that tells this release's tombstone from
// any other.
func newReleaseID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Service) get(ctx context.Context, resource string) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            s.key(resource),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

func (s *Service) key(resource string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrResource: &types.AttributeValueMemberS{Value: resource}}
}

// gcAt is the epoch second after which DynamoDB may delete a record whose
// lease ends at expMs.
func (s *Service) gcAt(expMs int64) int64 {
	return (expMs+999)/1000 + int64(s.retention/time.Second)
}

func str(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func n(item map[string]types.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(v.Value, 10, 64)
	return i, err == nil
}

func num(i int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(i, 10)}
}

// storeErr wraps a store failure. A failure whose outcome is unknown or
// worth retrying becomes ErrUnavailable (503); the rest stay internal (500).
// The SDK's own error text is kept for logs only.
func storeErr(op, resource string, err error) error {
	if transient(err) {
		return fmt.Errorf("%s %q: %w: %w", op, resource, ErrUnavailable, err)
	}
	return fmt.Errorf("%s %q: %w", op, resource, err)
}

// transient reports whether err leaves the outcome unknown or may pass on a
// retry: throttling and 5xx answers, the budget running out, and every
// failure to send the request or to read and decode the answer (a reset or
// cut-off reply: the write may have been applied). Only a definitive answer
// from the store (a 4xx such as ResourceNotFoundException or
// AccessDeniedException: misconfiguration) or a request the SDK refused to
// build is not transient.
func transient(err error) bool {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"InternalServerError", "ServiceUnavailable", "LimitExceededException",
			"ReplicatedWriteConflictException", "TransactionConflictException":
			return true
		}
		var respErr *smithyhttp.ResponseError
		return errors.As(err, &respErr) && respErr.HTTPStatusCode() >= 500
	}
	var (
		params *smithy.InvalidParamsError
		ser    *smithy.SerializationError
		dns    *net.DNSError
	)
	if errors.As(err, &dns) && dns.IsNotFound {
		return false // a misspelt endpoint, not an outage: retrying cannot help
	}
	return !errors.As(err, &params) && !errors.As(err, &ser)
}
