package locklogic

import (
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// One lease, two layouts: a lock's lease is the lock item's top-level
// attributes (owner, expires_at, …), and slot k of a semaphore is the
// semaphore item's o<k>, e<k>, …. leaseNames is the table of one lease's
// attribute names; every rule that judges a lease is written once over it,
// in two forms that must agree: the condition clauses of leaseExpr (what
// the store checks) and the Go judges below (what the service concludes
// from an item it read). A lock is not a one-slot semaphore — each
// primitive keeps its own acquire algorithm — but both judge a lease with
// these.

// leaseNames are the attribute names of one lease.
type leaseNames struct {
	owner, principal, token, acquired, renewed, expires, delay, free, released, grant, release, forced,
	forcedOwner, forcedToken, forcedAcquired, expired string
}

// lockLease is the lock item's lease.
var lockLease = leaseNames{owner: AttrOwner, principal: AttrPrincipal, token: AttrToken, acquired: AttrAcquiredAt,
	renewed: AttrRenewedAt, expires: AttrExpiresAt, delay: AttrLockDelay, free: AttrFreeAt, released: AttrReleasedAt,
	grant: AttrGrantID, release: AttrReleaseID, forced: AttrForcedAt, forcedOwner: AttrForcedOwner,
	forcedToken: AttrForcedToken, forcedAcquired: AttrForcedAcquired, expired: AttrExpiredAt}

// slotNames are the leases of a semaphore's slots, built once: slot k's
// names are the lock's one-letter codes followed by k (o0, e0, …, y0 for
// expired_at; z0, zo0, zt0, za0 for the force release).
var slotNames = func() (s [MaxPermits]leaseNames) {
	for k := range s {
		i := strconv.Itoa(k)
		s[k] = leaseNames{owner: "o" + i, principal: "p" + i, token: "t" + i, acquired: "a" + i, renewed: "n" + i,
			expires: "e" + i, delay: "d" + i, free: "f" + i, released: "x" + i, grant: "g" + i, release: "r" + i,
			forced: "z" + i, forcedOwner: "zo" + i, forcedToken: "zt" + i, forcedAcquired: "za" + i, expired: "y" + i}
	}
	return s
}()

// The placeholder codes of a lease's attributes (leaseExpr.n): the lock's
// placeholders since before there were semaphores.
const (
	pOwner = "o"
	pPrin  = "p"
	pTok   = "t"
	pAcq   = "a"
	pRen   = "n"
	pExp   = "e"
	pDelay = "d"
	pFree  = "f"
	pRel   = "x"
	pGrant = "gi"
	pRelID = "ri"
	pForce = "fa"
	pFOwn  = "fo"
	pFTok  = "ft"
	pFAcq  = "fq"
	pRec   = "xa"
)

func (a *leaseNames) attr(code string) string {
	switch code {
	case pOwner:
		return a.owner
	case pPrin:
		return a.principal
	case pTok:
		return a.token
	case pAcq:
		return a.acquired
	case pRen:
		return a.renewed
	case pExp:
		return a.expires
	case pDelay:
		return a.delay
	case pFree:
		return a.free
	case pRel:
		return a.released
	case pGrant:
		return a.grant
	case pRelID:
		return a.release
	case pForce:
		return a.forced
	case pFOwn:
		return a.forcedOwner
	case pFTok:
		return a.forcedToken
	case pFAcq:
		return a.forcedAcquired
	case pRec:
		return a.expired
	}
	panic("locklogic: no lease attribute " + code)
}

// expr collects the names and values of one request's expressions as they
// are written, so that it sends exactly those it uses (DynamoDB refuses
// the others).
type expr struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func newExpr() *expr {
	return &expr{names: make(map[string]string, 24), values: make(map[string]types.AttributeValue, 16)}
}

// n names attribute attr as placeholder ph and returns ph.
func (x *expr) n(ph, attr string) string { x.names[ph] = attr; return ph }

// v gives placeholder ph the value val and returns ph.
func (x *expr) v(ph string, val types.AttributeValue) string { x.values[ph] = val; return ph }

// s gives placeholder ph the string val and returns ph.
func (x *expr) s(ph, val string) string { return x.v(ph, &types.AttributeValueMemberS{Value: val}) }

// leaseExpr is the predicate builder of one lease in one request: every
// condition that judges a lease takes its clauses from it. It names the
// lease's attributes in x as "#" + prefix + code: the lock's lease, and the
// one slot a semaphore write grants, renews or ends, with prefix "" (so
// that a lock's condition and its slot twin read alike); any other slot a
// write names with its number as prefix (#12e is e12), short because a
// change of N names up to MaxPermits slots in one condition. Every clause
// compares with :now, which the caller sets.
type leaseExpr struct {
	a      *leaseNames
	x      *expr
	prefix string
}

// lease returns the builder of lease a in x under prefix.
func (x *expr) lease(a *leaseNames, prefix string) *leaseExpr {
	return &leaseExpr{a: a, x: x, prefix: prefix}
}

// n names the lease's attribute code in the request and returns its
// placeholder.
func (l *leaseExpr) n(code string) string { return l.x.n("#"+l.prefix+code, l.a.attr(code)) }

// heldBy is "the lease is c's": its owner and principal (absent for a
// caller without one). It sets :o and :p.
func (l *leaseExpr) heldBy(c Caller) string {
	pc := "attribute_not_exists(" + l.n(pPrin) + ")"
	if c.Principal != "" {
		pc = l.n(pPrin) + " = " + l.x.s(":p", c.Principal)
	}
	return l.n(pOwner) + " = " + l.x.s(":o", c.Owner) + " AND " + pc
}

// holds is heldBy and not force released: an operator's force release
// ends the lease for its owner on any clock.
func (l *leaseExpr) holds(c Caller) string {
	return l.heldBy(c) + " AND attribute_not_exists(" + l.n(pForce) + ")"
}

// running is "live at :now" where the clause it joins already rules out
// a force release (holds): not expired by :now, not released, and no
// watch answered its expiry (a watcher was told it ended, so it stays
// ended whatever a late request's :now says).
func (l *leaseExpr) running() string {
	return l.n(pExp) + " > :now AND attribute_not_exists(" + l.n(pRel) + ") AND attribute_not_exists(" + l.n(pRec) + ")"
}

// live is "the lease is live at :now", as leaseNames.live judges it.
func (l *leaseExpr) live() string {
	return l.running() + " AND attribute_not_exists(" + l.n(pForce) + ")"
}

// ended is "the lease is not live at :now", live's negation written out
// (one level of parentheses).
func (l *leaseExpr) ended() string {
	return "(" + l.n(pExp) + " <= :now OR attribute_exists(" + l.n(pRel) + ") OR attribute_exists(" + l.n(pForce) +
		") OR attribute_exists(" + l.n(pRec) + "))"
}

// grantEnded is "the grant named v is not this lease's, or it is not
// live": a write that relies on a grant it saw ended requires it still so
// (a late renewal may revive it).
func (l *leaseExpr) grantEnded(v string) string {
	e := l.ended()
	return "(" + l.n(pGrant) + " <> " + v + " OR " + e[1:]
}

// grantIs is "the lease was written by the acquire with grant id v": an
// SDK retry of a write that landed finds its own grant.
func (l *leaseExpr) grantIs(v string) string { return l.n(pGrant) + " = " + v }

// released is "the lease was released": free whatever the clocks say.
func (l *leaseExpr) released() string { return "attribute_exists(" + l.n(pRel) + ")" }

// freeByClock says an unreleased lease no longer blocks others at :now:
// it has expired and its lock-delay has passed. free_at is expires_at +
// lock_delay (conditions cannot add), kept by every write that sets
// expires_at. Records written before free_at existed lack it and are free
// once expired. free_at never frees a lease that has not expired, so a
// stale one (left by a writer that did not know it) cannot end a live
// lease.
func (l *leaseExpr) freeByClock() string {
	return "(" + l.n(pExp) + " <= :now AND (attribute_not_exists(" + l.n(pFree) + ") OR " + l.n(pFree) + " <= :now))"
}

// free is "the lease keeps nobody out at :now": released, or expired past
// its lock-delay.
func (l *leaseExpr) free() string { return "(" + l.released() + " OR " + l.freeByClock() + ")" }

// vacant is "the lease was never written" (a slot never taken).
func (l *leaseExpr) vacant() string { return "attribute_not_exists(" + l.n(pExp) + ")" }

// stillExpired is the condition "the lease a view saw expired (and not
// released, force released or recorded expired by a watch) is still not
// live at :now": only a late renewal could revive it, and one that makes
// it live at :now sets expires_at after :now. It is the minimal form, one
// comparison, for conditions that name many slots at once (a change of
// N).
func (l *leaseExpr) stillExpired() string { return l.n(pExp) + " <= :now" }

// notNewer is the late-write rule: a request may act only on the lease that
// existed when it was issued. The stored grant time (and, for writes that
// set expires_at, the time of the latest renewal) must not be after the
// request's issue time, the value placeholder issued (:now for a single
// write), so a write delayed in flight fails once a newer grant (or
// renewal) has landed, instead of ending or shortening it. Records written
// before renewed_at existed lack it and pass on acquired_at alone.
func (l *leaseExpr) notNewer(issued string, extends bool) string {
	cond := l.n(pAcq) + " <= " + issued
	if extends {
		cond += " AND (attribute_not_exists(" + l.n(pRen) + ") OR " + l.n(pRen) + " <= " + issued + ")"
	}
	return cond
}

// tokenIs is "the lease has fencing token *token" ("" when token is nil);
// it sets :tok.
func (l *leaseExpr) tokenIs(token *int64) string {
	if token == nil {
		return ""
	}
	return " AND " + l.n(pTok) + " = " + l.x.v(":tok", num(*token))
}

// holder is "the caller holds a live lease (with this token) that is not
// newer than the request", the condition of a renew and a release.
// extends says the write sets expires_at (a renew): it must then also be
// newer than the latest renewal, so a late renew cannot shorten a lease
// that a later renew extended, and it must not revive a lease a watch
// answered expired (watchers were told it ended). A release issued in
// time still lands after that record — it revives nothing, the lease
// stays ended, and it frees the lease from its lock-delay — so it does not
// look at the record. A released or force-released lease stays so even
// for a request whose :now was taken before (a late or retried request,
// or a Lambda whose clock lags).
func (l *leaseExpr) holder(c Caller, token *int64, extends bool) string {
	cond := l.heldBy(c) + " AND " + l.n(pExp) + " > :now AND attribute_not_exists(" + l.n(pRel) + ") AND attribute_not_exists(" +
		l.n(pForce) + ") AND " + l.notNewer(":now", extends)
	if extends {
		cond += " AND attribute_not_exists(" + l.n(pRec) + ")"
	}
	return cond + l.tokenIs(token)
}

// recordable is "the lease read with token value tok has ended by the
// clock alone and no write says so": expired at :now, not released, force
// released or recorded. The record of a watched expiry requires it.
func (l *leaseExpr) recordable(tok string) string {
	return l.n(pTok) + " = " + tok + " AND " + l.n(pExp) + " <= :now AND attribute_not_exists(" + l.n(pRel) +
		") AND attribute_not_exists(" + l.n(pForce) + ") AND attribute_not_exists(" + l.n(pRec) + ")"
}

// forceable is the condition of a force release with release id :ri: the
// lease to end is live (immediate: or still in its lock-delay), not
// force released or recorded expired already unless ending that delay,
// not released, granted no later than the request (:now), with the token
// when given, and not ended by this very request (an SDK retry of a write
// that landed never applies again: the lease it would meet now may be a
// newer one, granted within the instances' clock skew).
func (l *leaseExpr) forceable(immediate bool, token *int64) string {
	cond := "attribute_not_exists(" + l.n(pRel) + ") AND " + l.notNewer(":now", false) +
		" AND (attribute_not_exists(" + l.n(pRelID) + ") OR " + l.n(pRelID) + " <> :ri)"
	if immediate {
		cond += " AND (" + l.n(pExp) + " > :now OR " + l.n(pFree) + " > :now)"
	} else {
		cond += " AND " + l.n(pExp) + " > :now AND attribute_not_exists(" + l.n(pForce) + ") AND attribute_not_exists(" + l.n(pRec) + ")"
	}
	return cond + l.tokenIs(token)
}

// blocking is "the lease keeps others out at :now" as a listing's filter
// has it: not released, and live or inside its lock-delay. A lease
// without a lock-delay has free_at = expires_at once renewed (renew
// writes it whatever the delay): only a free_at beyond expires_at is a
// lock-delay that blocks after a recorded expiry.
func (l *leaseExpr) blocking() string {
	e, f := l.n(pExp), l.n(pFree)
	return "attribute_not_exists(" + l.n(pRel) + ") AND ((" + e + " > :now AND attribute_not_exists(" + l.n(pRec) + ")) OR (" +
		f + " > :now AND " + f + " > " + e + "))"
}

// The lease's writes, the same for a lock and a slot (:exp, :now, :gc,
// :zero and :ri set by the caller; #g is the item's ttl).

// renewSet extends the lease to :exp. The lease keeps its lock-delay:
// free_at moves with expires_at.
func (l *leaseExpr) renewSet() string {
	return l.n(pExp) + " = :exp, " + l.n(pRen) + " = :now, " + l.x.n("#g", AttrTTL) + " = :gc, " + l.n(pFree) + " = :exp + if_not_exists(" + l.n(pDelay) + ", :zero)"
}

// releaseSet ends the lease now, freeing it at once, lock-delay or not.
func (l *leaseExpr) releaseSet() string {
	return l.n(pExp) + " = :now, " + l.n(pRel) + " = :now, " + l.n(pFree) + " = :now, " + l.n(pRelID) + " = :ri, " + l.x.n("#g", AttrTTL) + " = :gc"
}

// forceSet is a force release's update: immediate, a tombstone freed at
// once; otherwise the lease expires now and keeps its lock-delay, and
// renewed_at moves to now (a renewal issued before and landing after
// would otherwise find expires_at after its own :now; forced_at refuses
// it anyway, on any clock). The ended lease is kept beside the item, for
// an SDK retry's answer.
func (l *leaseExpr) forceSet(immediate bool) string {
	e, f, fa := l.n(pExp), l.n(pFree), l.n(pForce)
	set := "SET " + e + " = :now, "
	if immediate {
		set += l.n(pRel) + " = :now, " + f + " = :now, "
	} else {
		set += l.n(pRen) + " = :now, " + f + " = :now + if_not_exists(" + l.n(pDelay) + ", :zero), "
	}
	return set + fa + " = :now, " + l.n(pRelID) + " = :ri, " + l.x.n("#g", AttrTTL) + " = :gc, " + l.n(pFOwn) + " = " + l.n(pOwner) + ", " +
		l.n(pFTok) + " = " + l.n(pTok) + ", " + l.n(pFAcq) + " = " + l.n(pAcq)
}

// The Go judges: the same rules over an item read.

// live reports whether item holds the lease live at now: not released,
// not force released, not answered expired by a watch and not expired.
func (a *leaseNames) live(item map[string]types.AttributeValue, now time.Time) bool {
	for _, ended := range []string{a.released, a.forced, a.expired} {
		if _, ok := item[ended]; ok {
			return false
		}
	}
	exp, ok := n(item, a.expires)
	return ok && exp > now.UnixMilli()
}

// blockedUntil reports whether the lease keeps others out at now — live,
// or expired within its lock-delay — and until when: the later of
// expires_at and free_at, exactly as free decides.
func (a *leaseNames) blockedUntil(item map[string]types.AttributeValue, now time.Time) (time.Time, bool) {
	if _, released := item[a.released]; released || item == nil {
		return time.Time{}, false
	}
	until, ok := n(item, a.expires)
	if !ok {
		return time.Time{}, false
	}
	if f, ok := n(item, a.free); ok && f > until {
		until = f
	}
	if until <= now.UnixMilli() {
		return time.Time{}, false
	}
	return time.UnixMilli(until).UTC(), true
}

// liveUntil returns the expiry of the live lease at now, or zero.
func (a *leaseNames) liveUntil(item map[string]types.AttributeValue, now time.Time) time.Time {
	if !a.live(item, now) {
		return time.Time{}
	}
	exp, _ := n(item, a.expires)
	return time.UnixMilli(exp)
}

// unrecordedExpiry reports what recordable decides: the latest lease has
// ended at now by the clock alone, with no release, force release or
// recorded expiry on the item.
func (a *leaseNames) unrecordedExpiry(item map[string]types.AttributeValue, now time.Time) bool {
	if _, ok := n(item, a.token); !ok || a.live(item, now) {
		return false
	}
	return a.revivable(item)
}

// revivable reports whether the lease is one that a late renewal could
// make live again: written, and not released, force released or recorded
// expired (a renewal requires each absent). Only a grant, which moves the
// fencing counter, revives those.
func (a *leaseNames) revivable(item map[string]types.AttributeValue) bool {
	for _, name := range []string{a.released, a.forced, a.expired} {
		if _, ok := item[name]; ok {
			return false
		}
	}
	_, ok := item[a.expires]
	return ok
}

// isHeldBy reports what heldBy decides.
func (a *leaseNames) isHeldBy(item map[string]types.AttributeValue, c Caller) bool {
	return str(item, a.owner) == c.Owner && str(item, a.principal) == c.Principal
}

// issuedAfter is notNewer(iss, true) for a same-owner re-acquire issued at
// iss: whether the lease was granted and renewed no later.
func (a *leaseNames) issuedAfter(item map[string]types.AttributeValue, iss time.Time) bool {
	acq, _ := n(item, a.acquired)
	r, ok := n(item, a.renewed)
	return acq <= iss.UnixMilli() && (!ok || r <= iss.UnixMilli())
}

// ownGrant reports whether the lease is, live at now, the one the acquire
// with grant id gid wrote for c: grantIs, found by the service.
func (a *leaseNames) ownGrant(item map[string]types.AttributeValue, c Caller, gid string, now time.Time) bool {
	return str(item, a.grant) == gid && a.isHeldBy(item, c) && a.live(item, now)
}

// decode reads the lease as a Lock. ok is false when item is nil or lacks
// the lease's attributes. resource overrides the stored key when
// non-empty.
func (a *leaseNames) decode(resource string, item map[string]types.AttributeValue) (Lock, bool) {
	if item == nil {
		return Lock{}, false
	}
	tok, ok1 := n(item, a.token)
	acq, ok2 := n(item, a.acquired)
	exp, ok3 := n(item, a.expires)
	if !ok1 || !ok2 || !ok3 {
		return Lock{}, false
	}
	if resource == "" {
		resource = str(item, AttrResource)
	}
	delay, _ := n(item, a.delay)
	_, forced := item[a.forced]
	return Lock{
		ForceReleased: forced,
		Resource:      resource,
		Owner:         str(item, a.owner),
		FencingToken:  tok,
		AcquiredAt:    time.UnixMilli(acq).UTC(),
		ExpiresAt:     time.UnixMilli(exp).UTC(),
		LockDelay:     time.Duration(max(delay, 0)) * time.Millisecond,
		Principal:     str(item, a.principal),
		SetID:         setIDOf(str(item, a.grant)),
	}, true
}

// forcedEnded returns the lease a force release with release id releaseID
// ended, when the item shows that release (an SDK retry of a write that
// landed): kept beside the lease (a newer one may hold it by now), expired
// at the request's :now.
func (a *leaseNames) forcedEnded(resource string, item map[string]types.AttributeValue, releaseID string, now time.Time) (Lock, bool) {
	lock, ok := a.decode(resource, item)
	if !ok || str(item, a.release) != releaseID {
		return Lock{}, false
	}
	tok, _ := n(item, a.forcedToken)
	if lock.FencingToken == tok {
		return lock, true // still the record of the ended lease: all of it
	}
	acq, _ := n(item, a.forcedAcquired)
	return Lock{Resource: resource, Owner: str(item, a.forcedOwner), FencingToken: tok,
		AcquiredAt: time.UnixMilli(acq).UTC(), ExpiresAt: time.UnixMilli(now.UnixMilli()).UTC(), ForceReleased: true}, true
}

// classify says why the holder condition fails for the lease. For a renew
// (extends) that found its own live lease renewed by a later request, it
// is a *renewedSinceError. If the condition would hold now, the lease
// changed between the write and the read (for example it expired and the
// same owner took it again), so the caller's lease is gone: ErrNotFound.
func (a *leaseNames) classify(item map[string]types.AttributeValue, c Caller, token *int64, now time.Time, extends bool) error {
	lock, ok := a.decode("", item)
	_, forced := item[a.forced]
	if ok && forced && a.isHeldBy(item, c) && (token == nil || *token == lock.FencingToken) {
		return ErrForceReleased
	}
	if !ok || !a.live(item, now) {
		return ErrNotFound
	}
	if !a.isHeldBy(item, c) {
		return ErrForbidden
	}
	if token != nil && lock.FencingToken != *token {
		return ErrStaleToken
	}
	if renewed, ok := n(item, a.renewed); extends && ok && lock.AcquiredAt.UnixMilli() <= now.UnixMilli() && renewed > now.UnixMilli() {
		return &renewedSinceError{lock: lock}
	}
	return ErrNotFound
}

// live, blockedUntil and decode judge the lock's lease.
func live(item map[string]types.AttributeValue, now time.Time) bool { return lockLease.live(item, now) }

func blockedUntil(item map[string]types.AttributeValue, now time.Time) (time.Time, bool) {
	return lockLease.blockedUntil(item, now)
}

func decode(resource string, item map[string]types.AttributeValue) (Lock, bool) {
	return lockLease.decode(resource, item)
}
