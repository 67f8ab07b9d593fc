package locklogic

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// semWrite is one acquire write: the slot it takes and what it knows of
// the item (nothing for the guess; a view of it afterwards).
type semWrite struct {
	slot int
	// guess is the first write: the caller's home slot, with no owner
	// marker of the caller on the item.
	guess bool
	// The caller's marker as the view showed it, and the slot whose
	// grant it names (-1: none). A write elsewhere requires that grant
	// still not live: a late renewal may have revived it since the view.
	markerSeen  bool
	markerValue string
	markerSlot  int
	// home is the caller's home slot; a write of another slot sets the
	// caller's marker and requires home not to be the caller's live
	// permit.
	home int
	// cleanup are other callers' markers the view showed stale.
	cleanup []staleMarker
	// reset changes N: the view showed no permit blocking.
	reset *semReset
	// queued is, for the head's grant, the view it was planned from: the
	// grant lowers queue_until to the entries behind the head when the
	// view shows it later than all of them (lowerUntil).
	queued *view
}

// semReset is what a change of N conditions on: the view's N and counter
// (no grant since), and every slot of the view's N whose ended lease a
// late renewal could revive (revivable: still not live).
type semReset struct {
	permits int64
	counter string
	expired []int
	markers []string
}

// planSemaphore decides the next write of an acquire from a view of the
// item at now (nil: the item is absent): the caller's own permit, a free
// slot, a change of N, or none (full, with the earliest time a permit
// comes free; waiters queued for the free slots, without a time; or a
// mismatch of N). own says that none is planned because the caller holds
// a permit granted or renewed after the request was issued (one permit
// per owner, and the late-write rule keeps it): freeAt is its end. A plain acquire (head false) takes no free slot while a
// live waiter is queued, nor its own permit unless live; the head of the
// queue (head) is the one waiter that may.
func planSemaphore(req SemaphoreAcquireRequest, item map[string]types.AttributeValue, now time.Time, id identity, gid string, head bool) (next *semWrite, freeAt time.Time, own bool, err error) {
	w := &semWrite{home: id.home(req.Permits), markerSlot: -1}
	open := head || itemOpen(item, now.UnixMilli())
	if v, ok := item[id.marker].(*types.AttributeValueMemberS); ok {
		w.markerSeen, w.markerValue = true, v.Value
		permits, _ := permitsOf(item)
		for k := range int(permits) {
			if str(item, slotNames[k].grant) == v.Value {
				w.markerSlot = k
				break
			}
		}
	}
	if permits, ok := permitsOf(item); ok && permits != req.Permits {
		if anySlot(permits, func(a *leaseNames) bool { _, b := a.blockedUntil(item, now); return b }) {
			return nil, time.Time{}, false, &PermitsMismatchError{Name: req.Name, Permits: permits}
		}
		if !open {
			return nil, time.Time{}, false, nil // the queue's first
		}
		// No permit blocks: this acquire sets the new N, on condition
		// that nothing was granted since the view and that every lease
		// it judged ended is still not live. Below the new N as above
		// it: a late renewal that revived a slot below it would leave a
		// permit where, under the new N, its owner's home or marker no
		// longer says it is (two permits for one owner); one above it
		// could never be renewed or released again.
		r := &semReset{permits: permits, counter: numString(item, AttrCounter)}
		for k := range int(max(permits, req.Permits)) {
			// Above the old N, a lease left from before an earlier change
			// of N: ended unless its clock says live (a growing change of
			// N, or its renewal, could otherwise bring it back).
			if a := &slotNames[k]; a.revivable(item) && (k < int(permits) || !a.live(item, now)) {
				r.expired = append(r.expired, k)
			}
		}
		for name := range item {
			if isMarker(name) && name != id.marker && len(r.markers) < maxResetCleanup {
				r.markers = append(r.markers, name)
			}
		}
		slices.Sort(r.markers)
		w.slot, w.reset = w.home, r
		return w, time.Time{}, false, nil
	}
	n := int(req.Permits)
	// The caller's own permit (live, or inside its lock-delay): take it
	// again, as a lock's owner does.
	for k := range n {
		a := &slotNames[k]
		if !a.isHeldBy(item, req.Caller) {
			continue
		}
		_, released := item[a.released]
		_, forced := item[a.forced]
		until, blocked := a.blockedUntil(item, now)
		if released || forced || !blocked {
			continue
		}
		if str(item, a.grant) != gid && !a.issuedAfter(item, req.Arrived) {
			// Granted or renewed after this request was issued: the
			// late-write rule keeps it, and the caller holds it.
			return nil, until, true, nil
		}
		if !open && !a.live(item, now) {
			// Its permit is in its lock-delay: the queue comes first, as
			// for a lock's owner.
			return nil, time.Time{}, false, nil
		}
		w.slot = k
		w.cleanup = staleMarkers(item, n, now, id.marker)
		return w, time.Time{}, false, nil
	}
	var free []int
	var earliest time.Time
	for k := range n {
		until, blocked := slotNames[k].blockedUntil(item, now)
		if !blocked {
			free = append(free, k)
		} else if earliest.IsZero() || until.Before(earliest) {
			earliest = until
		}
	}
	if len(free) == 0 {
		return nil, earliest, false, nil
	}
	if !open {
		return nil, time.Time{}, false, nil // the free slots are the queued waiters'
	}
	// Home when free; else any free slot, at random, so that acquirers
	// that saw the same item spread out.
	w.slot = free[rand.N(len(free))]
	if slices.Contains(free, w.home) {
		w.slot = w.home
	}
	w.cleanup = staleMarkers(item, n, now, id.marker)
	return w, time.Time{}, false, nil
}

// anySlot reports whether some slot below permits satisfies f.
func anySlot(permits int64, f func(*leaseNames) bool) bool {
	for k := range int(permits) {
		if f(&slotNames[k]) {
			return true
		}
	}
	return false
}

// numString returns the number attribute name of item as stored, "" when
// absent.
func numString(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}
