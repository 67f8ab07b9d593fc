package locklogic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Lock sets: several lock names taken all or nothing
// (docs/design.md#lock-sets). A set is no new kind of item: each name is
// an ordinary lock, taken with the lock's own acquire write and released
// with the lock's own release, so every lease rule (late writes,
// lock-delay, fair queues, force release) applies to each name as it is.
// What is the set's own is the order of the writes and the rollback.

// Limits of a lock set.
const (
	// MaxSetNames bounds the names of one set: a try makes one write per
	// name and, refused on the last, a release per name it took, 2 ×
	// MaxSetNames writes within one request's budget.
	MaxSetNames = 25
	// SetRollbackBudget is the time a refused or failed try keeps for
	// releasing what it took: the try's own writes stop that long before
	// the request's deadline, and the releases run even when the try ran
	// out of time.
	SetRollbackBudget = 3 * time.Second
)

// setIDPrefix marks a set's grant id: a lock's own grant ids are base-36
// digits (newGrantID), so a name whose grant_id begins with it was taken
// by a set, and the grant id is the set's id.
const setIDPrefix = "set-"

// newSetID returns a random id for one set request: the grant id of every
// write of the request, its retries by the SDK and its later tries.
func newSetID() string { return setIDPrefix + newGrantID() }

// setIssued is the issue time every write of a set acts as of, for the
// lock's same-owner branch: the epoch, before any grant, so that branch
// (the late-write rule, notNewer) admits none of the owner's leases but
// the set request's own grant (#gi = :gid, an SDK retry or a later try).
// A set takes a name only when it is free for anyone, or already its own:
// it never re-acquires a lease its owner holds alone or in another set,
// which would raise that lease's token and, refused further on, release
// it in the rollback, ending a lease the set did not take.
var setIssued = time.UnixMilli(0)

// setIDOf returns the set id of the lease in item: its grant id when a
// set wrote it, else "". A later grant of the name writes its own grant
// id, so a lease is never shown in a set it no longer belongs to.
func setIDOf(grantID string) string {
	if strings.HasPrefix(grantID, setIDPrefix) {
		return grantID
	}
	return ""
}

// SetAcquireRequest asks for a lease of TTLSeconds on every one of Names,
// all or none, each name beginning with Prefix (the path's: IAM policies
// scoped by path prefix keep their meaning). With WaitSeconds above zero
// the request waits for the names (AcquireSet).
type SetAcquireRequest struct {
	Prefix           string
	Names            []string
	Caller           Caller
	TTLSeconds       int64
	LockDelaySeconds int64
	WaitSeconds      int64
	// Arrived is when the request reached the service, as for
	// AcquireRequest: every write of the request acts as of it.
	Arrived time.Time
	// QueueTicket is the place an earlier round of the same wait was
	// given in the queue of the name it waited on
	// (SetAcquireResult.QueueTicket): sent back, it keeps that place.
	QueueTicket string
}

// SetAcquireResult is the outcome of AcquireSet. Not acquired is an
// outcome, as for a lock: BlockedBy is the name whose acquire was refused,
// FreeAt when it comes free (zero when unknown).
type SetAcquireResult struct {
	Acquired bool
	// SetID is the request's set id, written as the grant id of every
	// name it took (the admin listing shows it).
	SetID string
	// Locks are the set's leases in name order (byte order), when
	// Acquired.
	Locks     []Lock
	BlockedBy string
	FreeAt    time.Time
	// Unreleased are the names a refused try took and could not release:
	// they stay held by the caller until their TTL (a waiting round's: at
	// most until WaitSeconds + TTLSeconds after Arrived). A name whose
	// lease was found gone (taken by another, force released) is not
	// among them.
	Unreleased []string
	// Waited is how long a waiting request waited after its first try.
	Waited time.Duration
	// QueueTicket is, for a waiting round that ended not granted, its
	// place in BlockedBy's queue, live until QueueGrace after the round:
	// the next round sends it back (SetAcquireRequest.QueueTicket). ""
	// when it has none.
	QueueTicket string
}

// SetRollbackError is a set request that failed (Err, an ErrUnavailable
// from the store) part-way and could not release every name it may have
// taken: Unreleased lapse at their TTL. It is Err.
type SetRollbackError struct {
	Err        error
	Unreleased []string
}

func (e *SetRollbackError) Error() string {
	return e.Err.Error() + " (not released, held until their TTL: " + strings.Join(e.Unreleased, ", ") + ")"
}

// Unwrap returns Err.
func (e *SetRollbackError) Unwrap() error { return e.Err }

// SetLock names one lease of a held set, for RenewSet and ReleaseSet.
type SetLock struct {
	Resource     string
	FencingToken int64
}

// SetRenewRequest asks to extend every lease of Locks to now + TTLSeconds.
type SetRenewRequest struct {
	Prefix     string
	Caller     Caller
	TTLSeconds int64
	Locks      []SetLock
}

// SetReleaseRequest asks to end every lease of Locks.
type SetReleaseRequest struct {
	Prefix string
	Caller Caller
	Locks  []SetLock
}

// SetItemResult is the outcome of one name of RenewSet or ReleaseSet: Err
// nil when it was done (Lock is then the renewed lease), else the lock's
// own outcome (ErrNotFound, ErrForbidden, ErrStaleToken, ErrUnavailable…).
type SetItemResult struct {
	Resource string
	Lock     Lock
	Err      error
}

// ValidateSetAcquire checks req as ValidateAcquire does for each name and
// normalizes it: the owner trimmed, Names sorted in byte order (the one
// global order in which every set takes its names). A field v already
// reports is not checked again.
func (s *Service) ValidateSetAcquire(req *SetAcquireRequest, v *ValidationError) {
	validateSetNames(req.Prefix, "names", len(req.Names), func(i int) string { return req.Names[i] }, v)
	s.validateSetCaller(&req.Caller, &req.TTLSeconds, v)
	if !v.Has("wait_seconds") {
		ValidateWait(req.WaitSeconds, s.maxWait, v)
	}
	if !v.Has("lock_delay_seconds") {
		ValidateLockDelay(req.LockDelaySeconds, s.maxDelay, v)
	}
	if !v.Has("queue_ticket") {
		ValidateQueueTicket(req.QueueTicket, v)
	}
	slices.Sort(req.Names)
}

// ValidateSetRenew checks req as ValidateSetAcquire does; every fencing
// token must be positive.
func (s *Service) ValidateSetRenew(req *SetRenewRequest, v *ValidationError) {
	validateSetLocks(req.Prefix, req.Locks, v)
	s.validateSetCaller(&req.Caller, &req.TTLSeconds, v)
}

// ValidateSetRelease checks req as ValidateSetRenew does.
func (s *Service) ValidateSetRelease(req *SetReleaseRequest, v *ValidationError) {
	validateSetLocks(req.Prefix, req.Locks, v)
	s.validateSetCaller(&req.Caller, nil, v)
}

func (s *Service) validateSetCaller(c *Caller, ttl *int64, v *ValidationError) {
	if !v.Has("owner") {
		c.Owner = NormalizeOwner(c.Owner, v)
	}
	if ttl != nil && !v.Has("ttl_seconds") {
		ValidateTTL(*ttl, s.maxTTL, v)
	}
}

func validateSetLocks(prefix string, locks []SetLock, v *ValidationError) {
	validateSetNames(prefix, "locks", len(locks), func(i int) string { return locks[i].Resource }, v)
	for i, l := range locks {
		if l.FencingToken < 1 && !v.Has(SetField("locks", i)) {
			v.Add(SetField("locks", i)+".fencing_token", "must be a positive integer")
		}
	}
}

// SetField is the field name of a set's i-th name in a validation error:
// member[i], e.g. names[2].
func SetField(member string, i int) string { return member + "[" + strconv.Itoa(i) + "]" }

// validateSetNames checks the prefix and the n names name(i) of a set,
// the body's member (names, or locks[i].resource): 1 to MaxSetNames of
// them, each a valid lock name that begins with prefix, none twice.
func validateSetNames(prefix, member string, n int, name func(int) string, v *ValidationError) {
	var pv ValidationError
	if ValidateResource(prefix, &pv); pv.Err() != nil {
		v.Add("prefix", pv.Fields[0].Detail)
	}
	if v.Has(member) {
		return
	}
	switch {
	case n == 0:
		v.Add(member, "must name at least one lock")
		return
	case n > MaxSetNames:
		v.Add(member, "must name at most "+strconv.Itoa(MaxSetNames)+" locks, got "+strconv.Itoa(n))
		return
	}
	first := make(map[string]int, n)
	for i := range n {
		field, nm := SetField(member, i), name(i)
		if member == "locks" {
			field += ".resource"
		}
		if v.Has(field) {
			continue
		}
		var nv ValidationError
		if ValidateResource(nm, &nv); nv.Err() != nil {
			v.Add(field, nv.Fields[0].Detail)
			continue
		}
		if !strings.HasPrefix(nm, prefix) && !v.Has("prefix") {
			v.Add(field, "must begin with the path's prefix "+strconv.Quote(prefix))
			continue
		}
		if j, dup := first[nm]; dup {
			v.Add(field, "repeats "+SetField(member, j)+": a set names each lock once")
			continue
		}
		first[nm] = i
	}
}

// AcquireSet takes every name of req, or none, with b bounding its store
// calls as AcquireWait's: b.PerCall is one try's (all its writes), and
// each refused try keeps SetRollbackBudget before the context's deadline
// minus b.Reserve to release what it took.
//
// Every write takes names in byte order, one lock acquire write each (the
// lock's condition, all of it: a held name, a live queue, a lock-delay
// refuse it), with the request's set id as its grant id, so that an SDK
// retry of a write that landed, or a later write of the same request,
// finds its own grant.
//
// A try (WaitSeconds 0) ends at the first refusal: the names it took are
// released (each by owner and fencing token, the lock's release) and the
// answer names the refused one. It holds nothing after it answers and
// joins no queue.
//
// A waiting request (WaitSeconds above zero) waits on a refused name in
// that name's fair queue, as a lock's waiting acquire does, holding the
// names before it (waitSetOrdered), until GrantGuard before Arrived +
// WaitSeconds. Every set and every lock takes names in the one byte
// order, and a lock holds one name, so no cycle of waits can form: sets
// cannot deadlock with each other or with single locks. On a service
// without FairWaiting it waits holding nothing instead (waitSet).
func (s *Service) AcquireSet(ctx context.Context, req SetAcquireRequest, b Budget) (SetAcquireResult, error) {
	var v ValidationError
	if s.ValidateSetAcquire(&req, &v); v.Err() != nil {
		return SetAcquireResult{}, &v
	}
	now := s.now()
	if req.Arrived.IsZero() || req.Arrived.After(now) {
		req.Arrived = now
	}
	setID := newSetID()
	// The try's writes stop SetRollbackBudget early: its rollback then
	// still has its time before the deadline.
	tb := b
	tb.Reserve += SetRollbackBudget
	if req.WaitSeconds == 0 {
		return s.trySet(ctx, req, tb, b, setID)
	}
	end := req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second - GrantGuard)
	if !now.Before(end) {
		return SetAcquireResult{}, fmt.Errorf("acquire set %q: %w", req.Prefix, ErrWaitElapsed)
	}
	end = deadlineEnd(ctx, tb, now, end)
	if s.fair {
		return s.waitSetOrdered(ctx, req, tb, b, setID, end)
	}
	res, err := s.trySet(ctx, req, tb, b, setID)
	if err != nil || res.Acquired {
		return res, err
	}
	return s.waitSet(ctx, req, tb, b, setID, res, end)
}

// trySet makes one try of the set: the writes under tb, the rollback of a
// refused or failed try under b (rollbackContext).
func (s *Service) trySet(ctx context.Context, req SetAcquireRequest, tb, b Budget, setID string) (SetAcquireResult, error) {
	cctx, cancel := tb.Context(ctx)
	defer cancel()
	held := make([]Lock, 0, len(req.Names))
	for _, name := range req.Names {
		ar := AcquireRequest{Resource: name, Caller: req.Caller, TTLSeconds: req.TTLSeconds,
			LockDelaySeconds: req.LockDelaySeconds, Arrived: req.Arrived}
		res, _, err := s.acquireWrite(cctx, ar, setIssued, setID)
		if err == nil && res.Acquired {
			held = append(held, res.Lock)
			continue
		}
		if err != nil {
			// The write's outcome is unknown: it may hold the name
			// (token 0: rollback releases it only if it finds the set's
			// own grant there).
			held = append(held, Lock{Resource: name})
		}
		unreleased := s.rollback(ctx, req.Caller, setID, held, b)
		if err != nil {
			err = fmt.Errorf("acquire set %q: %w", req.Prefix, err)
			if len(unreleased) > 0 {
				err = &SetRollbackError{Err: err, Unreleased: unreleased}
			}
			return SetAcquireResult{}, err
		}
		return SetAcquireResult{SetID: setID, BlockedBy: name, FreeAt: res.HolderExpiresAt, Unreleased: unreleased}, nil
	}
	return SetAcquireResult{Acquired: true, SetID: setID, Locks: held}, nil
}

// rollback releases locks, a refused try's, each with the lock's release
// by owner and fencing token, and returns the names it could not release.
// A lease found gone (leaseGone: lapsed, force released, taken by
// another) is no failure: the set holds nothing there, but for a newer
// lease of the owner that is the set's own grant (an attempt of its
// write that landed late), which it releases as releaseOwnGrant does.
//
// A token of 0 is a write whose outcome is unknown. Its name is released
// only when a strongly consistent read finds the set's own grant there
// (grant id setID), by that grant's token: a lease of the same owner that
// the set did not write (a single lease, another set's) is not the set's
// to end. Its name is unreleased whatever the read finds: the write (or
// an SDK attempt of it still in the network) may land after this
// rollback and hold the name until its TTL.
//
// The releases run under b from now on, with SetRollbackBudget, even when
// the try's context has ended.
func (s *Service) rollback(ctx context.Context, c Caller, setID string, locks []Lock, b Budget) []string {
	if len(locks) == 0 {
		return nil
	}
	rctx, cancel := rollbackContext(ctx, b)
	defer cancel()
	var unreleased []string
	for _, l := range locks {
		if l.FencingToken == 0 {
			s.releaseOwnGrant(rctx, c, setID, l.Resource)
			unreleased = append(unreleased, l.Resource)
			continue
		}
		tok := l.FencingToken
		err := s.Release(rctx, ReleaseRequest{Resource: l.Resource, Caller: c, FencingToken: &tok})
		if errors.Is(err, ErrStaleToken) && !s.releaseOwnGrant(rctx, c, setID, l.Resource) {
			// A newer lease of the owner: the set's own (an attempt of
			// its write that landed late) it must end too.
			err = ErrUnavailable
		}
		if err != nil && !leaseGone(err) {
			unreleased = append(unreleased, l.Resource)
		}
	}
	return unreleased
}

// leaseGone reports whether err, a renewal's or release's by owner and
// fencing token, says that lease is not held any more (expired, released,
// force released, taken by another, or replaced by a newer grant): its
// name is not the caller's to give back, nor unreleased.
func leaseGone(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrForbidden) || errors.Is(err, ErrStaleToken)
}

// rollbackContext is the context of a rollback's releases under b from
// now on, with SetRollbackBudget, even when ctx has ended.
func rollbackContext(ctx context.Context, b Budget) (context.Context, context.CancelFunc) {
	rb := Budget{Deadline: time.Now().Add(SetRollbackBudget), Reserve: b.Reserve}
	if d, ok := ctx.Deadline(); ok {
		// WithoutCancel drops the deadline too: keep the request's.
		if d.Add(-b.Reserve).Before(rb.Deadline) {
			rb.Deadline = d.Add(-b.Reserve)
		}
	}
	return rb.Context(context.WithoutCancel(ctx))
}

// releaseUnheard is releaseOwnGrant under b from now on, as a rollback's.
func (s *Service) releaseUnheard(ctx context.Context, c Caller, setID, resource string, b Budget) bool {
	rctx, cancel := rollbackContext(ctx, b)
	defer cancel()
	return s.releaseOwnGrant(rctx, c, setID, resource)
}

// releaseOwnGrant releases the lease on resource if it is the set's own
// grant (grant id setID, live), by its token; anything else is left as
// it is. It reports whether the name is surely not held by the set's
// grant now.
func (s *Service) releaseOwnGrant(ctx context.Context, c Caller, setID, resource string) bool {
	item, err := s.get(ctx, resource)
	if err != nil {
		return false
	}
	if str(item, AttrGrantID) != setID || !live(item, s.now()) {
		return true
	}
	lock, ok := decode(resource, item)
	if !ok {
		return false
	}
	err = s.Release(ctx, ReleaseRequest{Resource: resource, Caller: c, FencingToken: &lock.FencingToken})
	return err == nil || errors.Is(err, ErrNotFound)
}

// waitSetOrdered is the waiting route of AcquireSet on a service with
// FairWaiting, until end (writes under tb, rollbacks under b). It takes
// the names in byte order, each with the lock's acquire write; a refused
// name it waits for in that name's queue, holding the names before it,
// with the lock's fair wait (waitFair: join or keep its place, the head's
// grant, the set id as grant id), then goes on to the next name.
//
//   - Leases outlive the wait: at the first refusal the names already
//     held are renewed to run until end + TTLSeconds, and every name
//     taken after it but the last is written so, its TTL reckoned as its
//     write is sent (however long it waited for it). At the grant of the
//     last name those leases are taken again as the set's own grant
//     (regrantHeld: now + TTLSeconds, a new token), so the answer's
//     leases are as a try's, and a name force released or lost during
//     the wait is found: its re-grant is refused, and the round gives
//     back what it holds and starts again from the first name while time
//     is left. A request that dies holds what it took until Arrived +
//     WaitSeconds + TTLSeconds at most (and under GrantGuard more: a
//     lease's TTL is whole seconds, rounded up).
//   - A round that ends before every name is taken gives back what it
//     holds (rollback) and answers the name it waited on, with its place
//     in that name's queue (QueueTicket): the next round takes the names
//     before it again and finds its place kept, as a lock's next round.
//
// An uncontended request is one write per name, as a try; a set that
// waits on k names makes, besides the lock's queue writes, a renewal of
// each name it held at the first wait and one of each name but the last
// at the grant.
func (s *Service) waitSetOrdered(ctx context.Context, req SetAcquireRequest, tb, b Budget, setID string, end time.Time) (out SetAcquireResult, err error) {
	start := s.now()
	defer func() { out.Waited = max(s.now().Sub(start), 0) }()
	var unreleased []string
	held := make([]Lock, 0, len(req.Names))
	// giveBack releases what the round holds.
	giveBack := func() {
		unreleased = append(unreleased, s.rollback(ctx, req.Caller, setID, held, b)...)
		held = held[:0]
	}
	// fail gives back what the round holds (and the name of a write whose
	// outcome is unknown) after an error.
	fail := func(err error, unknown string) (SetAcquireResult, error) {
		if unknown != "" {
			held = append(held, Lock{Resource: unknown})
		}
		giveBack()
		err = fmt.Errorf("acquire set %q: %w", req.Prefix, err)
		if len(unreleased) > 0 {
			err = &SetRollbackError{Err: err, Unreleased: unreleased}
		}
		return SetAcquireResult{}, err
	}
	// refused gives back what the round holds and answers that name
	// blocked it.
	refused := func(name string, freeAt time.Time, ticket string) (SetAcquireResult, error) {
		giveBack()
		return SetAcquireResult{SetID: setID, BlockedBy: name, FreeAt: freeAt, Unreleased: unreleased, QueueTicket: ticket}, nil
	}
round:
	for {
		waited := false // the held leases run until end + TTLSeconds
		for i, name := range req.Names {
			last := i == len(req.Names)-1
			ar := AcquireRequest{Resource: name, Caller: req.Caller, TTLSeconds: req.TTLSeconds, LockDelaySeconds: req.LockDelaySeconds,
				WaitSeconds: req.WaitSeconds, Arrived: req.Arrived, QueueTicket: req.QueueTicket}
			if waited && !last {
				ar.TTLSeconds = s.waitTTL(req.TTLSeconds, end)
			}
			cctx, cancel := tb.Context(ctx)
			res, old, err := s.acquireWrite(cctx, ar, setIssued, setID)
			cancel()
			if err != nil {
				return fail(err, name)
			}
			if res.Acquired {
				held = append(held, res.Lock)
				continue
			}
			if !s.now().Before(end) {
				return refused(name, res.HolderExpiresAt, "")
			}
			if !waited {
				waited = true
				if !last {
					ar.TTLSeconds = s.waitTTL(req.TTLSeconds, end)
				}
				if lost, err := s.renewHeld(ctx, req.Caller, held, s.waitTTL(req.TTLSeconds, end), tb); err != nil {
					return fail(err, "")
				} else if lost != "" {
					// A name it held is gone already (force released):
					// give back the rest and take them all again.
					giveBack()
					continue round
				}
			}
			w := &waiter{key: s.key(name), op: "acquire set", name: name, caller: req.Caller, arrived: req.Arrived,
				waitSeconds: req.WaitSeconds, ticket: req.QueueTicket}
			t := &lockTarget{s: s, req: ar, gid: setID, issued: setIssued}
			if !last {
				// Held through the rest of the wait: until end + TTL
				// from the grant, not from the wait's start.
				t.ttl = func() int64 { return s.waitTTL(req.TTLSeconds, end) }
			}
			var v *view
			if s.oldItem {
				v = newView(old, true)
			}
			exp := res.HolderExpiresAt
			fo, err := s.waitFair(ctx, w, t, tb, v, exp, s.oldItem || !exp.IsZero(), end)
			if err != nil {
				// The head's grant may have landed: the rollback releases
				// it only where it finds the set's own grant.
				return fail(err, name)
			}
			if !fo.granted {
				if t.took && !s.releaseUnheard(ctx, req.Caller, setID, name, b) {
					// A take whose grant went unheard may hold it.
					unreleased = append(unreleased, name)
				}
				return refused(name, fo.freeAt, fo.ticket)
			}
			held = append(held, t.res.Lock)
		}
		if !waited {
			return SetAcquireResult{Acquired: true, SetID: setID, Locks: held}, nil
		}
		// The leases written to outlive the wait are granted again from
		// now for TTLSeconds, as the answer says (the last name's already
		// is), each found still the set's own grant.
		lost, unknown, err := s.regrantHeld(ctx, req, held[:len(held)-1], setID, tb)
		if err != nil {
			return fail(err, unknown)
		}
		if lost == "" {
			return SetAcquireResult{Acquired: true, SetID: setID, Locks: held, Unreleased: unreleased}, nil
		}
		giveBack()
		if !s.now().Before(end) {
			return refused(lost, time.Time{}, "")
		}
	}
}

// regrantHeld takes each of locks again with the lock's acquire write
// under tb, as the set's own grant (grant id setID): a lease that runs
// from now for req.TTLSeconds with a new fencing token, in place. lost
// names the first that was not the set's any more (force released,
// expired and taken): it stops there. An error is the store's, for the
// name unknown, whose outcome is unknown.
func (s *Service) regrantHeld(ctx context.Context, req SetAcquireRequest, locks []Lock, setID string, tb Budget) (lost, unknown string, err error) {
	for j, l := range locks {
		ar := AcquireRequest{Resource: l.Resource, Caller: req.Caller, TTLSeconds: req.TTLSeconds, LockDelaySeconds: req.LockDelaySeconds, Arrived: req.Arrived}
		cctx, cancel := tb.Context(ctx)
		res, _, err := s.acquireWrite(cctx, ar, setIssued, setID)
		cancel()
		switch {
		case err != nil:
			return "", l.Resource, err
		case !res.Acquired:
			return l.Resource, "", nil
		}
		locks[j] = res.Lock
	}
	return "", "", nil
}

// waitTTL is the TTL, in whole seconds, of a lease that a waiting set
// holds while it waits: one that runs until end + ttl.
func (s *Service) waitTTL(ttl int64, end time.Time) int64 {
	return ttl + int64(math.Ceil(max(end.Sub(s.now()), 0).Seconds()))
}

// renewHeld renews each of locks, in place, to now + ttl with the lock's
// renew (by owner and fencing token), under tb. lost names the first
// lease that was not the caller's any more (expired, force released,
// taken): the renewal stops there. An error is the store's: the outcome
// of that renewal is unknown.
func (s *Service) renewHeld(ctx context.Context, c Caller, locks []Lock, ttl int64, tb Budget) (lost string, err error) {
	for j, l := range locks {
		tok := l.FencingToken
		cctx, cancel := tb.Context(ctx)
		lock, err := s.renew(cctx, RenewRequest{Resource: l.Resource, Caller: c, TTLSeconds: ttl, FencingToken: &tok})
		cancel()
		switch {
		case err == nil:
			locks[j] = lock
		case leaseGone(err):
			return l.Resource, nil
		default:
			return "", err
		}
	}
	return "", nil
}

// waitSet waits after a refused try, holding nothing, until end: it
// watches the name that refused the try (an eventually consistent read
// every PollInterval, jittered, or its free_at when known) and tries the
// whole set again when that name looks free. A try refused by a name that
// looked free (a live queue, or another caller first) doubles the pause,
// up to MaxPollInterval, so a queued lock does not cost a try every poll.
func (s *Service) waitSet(ctx context.Context, req SetAcquireRequest, tb, b Budget, setID string, res SetAcquireResult, end time.Time) (out SetAcquireResult, err error) {
	start := s.now()
	defer func() { out.Waited = max(s.now().Sub(start), 0) }()
	sctx, cancel := context.WithTimeout(ctx, max(end.Sub(start), 0))
	defer cancel()
	interval := PollInterval
	for {
		now := s.now()
		if !now.Before(end) {
			return res, nil
		}
		wake := now.Add(interval/2 + randUpTo(interval))
		if !res.FreeAt.IsZero() && res.FreeAt.Before(wake) && res.FreeAt.After(now) {
			wake = res.FreeAt
		}
		if wake.After(end) {
			return res, nil
		}
		if err := s.sleep(sctx, wake.Sub(now)); err != nil {
			return res, nil
		}
		item, err := s.peek(ctx, res.BlockedBy, tb)
		if err != nil {
			if !transient(err) {
				return SetAcquireResult{}, storeErr("acquire set", res.BlockedBy, err)
			}
			interval = min(2*interval, MaxPollInterval)
			continue
		}
		if until, blocked := blockedUntil(item, s.now()); blocked {
			res.FreeAt = until
			interval = PollInterval
			continue
		}
		if !s.now().Before(end) {
			return res, nil
		}
		next, err := s.trySet(ctx, req, tb, b, setID)
		if err != nil || next.Acquired {
			return next, err
		}
		if next.BlockedBy == res.BlockedBy {
			interval = min(2*interval, MaxPollInterval)
		} else {
			interval = PollInterval
		}
		next.Unreleased = append(res.Unreleased, next.Unreleased...)
		res = next
	}
}

// RenewSet renews every lease of req with the lock's renew, one write per
// name, and answers each name's outcome in req's order. Its error is a
// validation error only: a name that cannot be renewed says why in its
// result, and the others are renewed still.
func (s *Service) RenewSet(ctx context.Context, req SetRenewRequest) ([]SetItemResult, error) {
	var v ValidationError
	if s.ValidateSetRenew(&req, &v); v.Err() != nil {
		return nil, &v
	}
	out := make([]SetItemResult, len(req.Locks))
	for i, l := range req.Locks {
		tok := l.FencingToken
		lock, err := s.Renew(ctx, RenewRequest{Resource: l.Resource, Caller: req.Caller, TTLSeconds: req.TTLSeconds, FencingToken: &tok})
		out[i] = SetItemResult{Resource: l.Resource, Lock: lock, Err: err}
	}
	return out, nil
}

// ReleaseSet releases every lease of req with the lock's release, one
// write per name, and answers each name's outcome in req's order, as
// RenewSet does. A name that could not be released stays held until its
// TTL.
func (s *Service) ReleaseSet(ctx context.Context, req SetReleaseRequest) ([]SetItemResult, error) {
	var v ValidationError
	if s.ValidateSetRelease(&req, &v); v.Err() != nil {
		return nil, &v
	}
	out := make([]SetItemResult, len(req.Locks))
	for i, l := range req.Locks {
		tok := l.FencingToken
		err := s.Release(ctx, ReleaseRequest{Resource: l.Resource, Caller: req.Caller, FencingToken: &tok})
		out[i] = SetItemResult{Resource: l.Resource, Err: err}
	}
	return out, nil
}
