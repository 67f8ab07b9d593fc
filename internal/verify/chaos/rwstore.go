package chaos

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// A read/write lock's store requests, read from the proxy's records. A
// read/write lock is one item (key locklogic.RWLockPrefix + name): the
// writer's lease in the lock's attributes (lockNames), reader k's in slot
// k's (slotNames(k)), one fencing counter for all of them (counter), and
// the waiters' queue, each entry with its kind (k = "w" for a writer).
// docs/design.md, "Read/write locks", has the layout; this file decodes
// it without the service's code, from the attribute names each request
// uses, and each lease is the one lease step's (leasestep.go).

// rwWriter is the slot number the checker gives the writer's lease; the
// readers' are 0 … locklogic.MaxReaders−1 (and beyond, when a broken
// service writes there).
const rwWriter = -1

// rwItem is a read/write lock item as the store returned it: the writer's
// lease, each reader slot's that the item has, the counter, and the queue
// with queue_until.
type rwItem struct {
	writer     leaseState
	readers    map[int]leaseState
	counter    int64
	queue      []rwEntry
	queueUntil int64
}

// rwEntry is one waiter's place in a read/write lock's queue.
type rwEntry struct {
	id, owner string
	until     int64
	writer    bool
}

// lease returns the lease in slot k (rwWriter: the writer's).
func (it *rwItem) lease(k int) leaseState {
	if k == rwWriter {
		return it.writer
	}
	return it.readers[k]
}

// rwOp is what one store request does to a read/write lock.
type rwOp struct {
	// slot is the lease an acquire, renew, release or force release
	// writes: rwWriter, or a reader's slot (rwNone for a read, a queue
	// write or a record).
	slot int
	// place is the queue entry a queued grant removes (its place; -1: a
	// plain acquire).
	place int
	// item is the item the store returned: a committed acquire's, renew's
	// or queue write's (ALL_NEW), a read's; nil when it returned none.
	item *rwItem
	// old is the item returned with a refused write in the old-item store
	// mode.
	old *rwItem
}

// rwNone is rwOp.slot for a request that writes no lease.
const rwNone = -2

// decodeRW fills s from the decoded call c of a read/write lock's key. A
// write is told by the lease attributes it sets, as a lock's (writeKind)
// and a semaphore's: the token (an acquire), forced_at (a force release;
// immediate when it sets released_at too), released_at (a release),
// expired_at (a watch's record), expires_at alone (a renew), the writer's
// or one reader slot's; a write that sets none is one of the queue's own.
func (s *storeOp) decodeRW(c faultproxy.Call) error {
	m := &rwOp{slot: rwNone, place: -1}
	s.rw = m
	if s.rec.Op == "GetItem" {
		s.kind = storeRead
		s.full = c.ConsistentRead && c.ProjectionExpression == ""
	} else {
		v := c.Values
		s.owner = v[":o"]
		s.now = num(v[":now"])
		s.iss = s.now
		if x, ok := v[":iss"]; ok {
			s.iss = num(x)
		}
		s.gid = v[":gid"]
		s.exp = num(v[":exp"])
		s.base = num(v[":base"])
		s.tok = num(v[":tok"])
		s.delay = num(v[":d"])
		set := setAttrs(c)
		// slots returns the leases whose attribute (the writer's w, a
		// reader's p<k>) the write sets.
		slots := func(w string, p byte) []int {
			var out []int
			if set[w] {
				out = append(out, rwWriter)
			}
			for name := range set {
				if k := slotOf(name, string(p)); k >= 0 {
					out = append(out, k)
				}
			}
			sort.Ints(out)
			return out
		}
		kinds := []struct {
			kind storeKind
			attr string
			p    byte
		}{{storeAcquire, locklogic.AttrToken, 't'}, {storeForce, locklogic.AttrForcedAt, 'z'}, {storeRelease, locklogic.AttrReleasedAt, 'x'},
			{storeSettle, locklogic.AttrExpiredAt, 'y'}, {storeRenew, locklogic.AttrExpiresAt, 'e'}}
		s.kind = -1
		for _, k := range kinds {
			ks := slots(k.attr, k.p)
			if len(ks) == 0 {
				continue
			}
			s.kind = k.kind
			if k.kind != storeSettle { // a record may name several leases
				if len(ks) != 1 {
					return fmt.Errorf("a read/write lock %s of %d leases: %s", k.kind, len(ks), c.UpdateExpression)
				}
				m.slot = ks[0]
			}
			break
		}
		if s.kind < 0 {
			if s.kind = queueKind(c); s.kind < 0 {
				return fmt.Errorf("a read/write lock write of no known kind: %s", c.UpdateExpression)
			}
		}
		s.immediate = s.kind == storeForce && len(slots(locklogic.AttrReleasedAt, 'x')) > 0
		decodeQueueFields(s, c)
		if s.kind == storeAcquire && s.ticket != "" {
			_, remove, _ := strings.Cut(c.UpdateExpression, " REMOVE ")
			if p := removedPlace.FindStringSubmatch(remove); p != nil {
				m.place, _ = strconv.Atoi(p[1])
			}
		}
	}
	if c.Item != nil && s.kind != storeForce { // a force release returns the old item
		m.item = rwItemOf(c.Item, c.ItemLists)
	}
	return nil
}

// removedPlace matches the queue entry a queued grant's REMOVE clause
// removes.
var removedPlace = regexp.MustCompile(`#q\[([0-9]+)\]`)

// rwItemOf decodes a read/write lock item's attributes and its queue.
func rwItemOf(item map[string]string, lists map[string][]map[string]string) *rwItem {
	it := &rwItem{writer: leaseOf(item, lockNames), readers: map[int]leaseState{}, counter: num(item[locklogic.AttrCounter]),
		queueUntil: num(item[locklogic.AttrQueueUntil])}
	for name := range item {
		if k := slotOf(name, "o"); k >= 0 {
			it.readers[k] = leaseOf(item, slotNames(k))
		}
	}
	for _, e := range lists[locklogic.AttrQueue] {
		it.queue = append(it.queue, rwEntry{id: e["id"], owner: e[locklogic.AttrOwner], until: num(e["until"]), writer: e["k"] == "w"})
	}
	return it
}

func (it *rwItem) String() string {
	if it == nil {
		return "{absent}"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "{counter:%d", it.counter)
	if it.writer.taken() {
		fmt.Fprintf(&b, " writer:%s", it.writer)
	}
	ks := make([]int, 0, len(it.readers))
	for k := range it.readers {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for _, k := range ks {
		fmt.Fprintf(&b, " reader%d:%s", k, it.readers[k])
	}
	if len(it.queue) > 0 {
		parts := make([]string, len(it.queue))
		for i, e := range it.queue {
			mode := "r"
			if e.writer {
				mode = "w"
			}
			parts[i] = fmt.Sprintf("%s:%s:%s<%d", mode, e.id, e.owner, e.until)
		}
		fmt.Fprintf(&b, " queue:[%s] queue_until:%d", strings.Join(parts, " "), it.queueUntil)
	}
	return b.String() + "}"
}

// slotName renders a read/write lock's lease slot for an excerpt.
func rwSlotName(k int) string {
	switch k {
	case rwWriter:
		return "writer"
	case rwNone:
		return "-"
	}
	return "reader " + strconv.Itoa(k)
}

// format renders a read/write lock request for an excerpt (the part
// before the answer).
func (m *rwOp) format(s *storeOp) string {
	switch s.kind {
	case storeRead:
		if s.full {
			return "GetItem " + s.resource
		}
		return "GetItem (eventually consistent) " + s.resource
	case storeJoin, storeKeep, storePrune, storeLeave:
		return s.queueFormat()
	}
	r := fmt.Sprintf("UpdateItem rw-%s %s %s owner:%s :now=%d", s.kind, s.resource, rwSlotName(m.slot), s.owner, s.now)
	if s.exp != 0 {
		r += fmt.Sprintf(" :exp=%d", s.exp)
	}
	r += tokenArg(s.tok)
	if s.ticket != "" {
		r += fmt.Sprintf(" (a queued grant, ticket %s, place %d)", s.ticket, m.place)
	}
	return r
}

// answer renders what the store returned for an applied request.
func (m *rwOp) answer(s *storeOp) string {
	switch {
	case m.item == nil && s.kind == storeRead:
		return "no item"
	case m.item == nil:
		return "committed"
	case s.kind == storeRead:
		return m.item.String()
	}
	return "committed " + m.item.String()
}
