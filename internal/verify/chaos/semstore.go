package chaos

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// A semaphore's store requests, read from the proxy's records. A
// semaphore is one item (key locklogic.SemaphorePrefix + name) with one
// set of top-level attributes per slot — o<k> owner, t<k> token, a<k>
// acquired_at, n<k> renewed_at, e<k> expires_at, x<k> released_at, g<k>
// grant id, z<k> forced_at, … — one fencing counter for every slot
// (counter), the number of permits (permits), and owner markers
// (w<hash>: the grant id of an owner's permit held away from its home
// slot). docs/design.md, "Semaphores", and locklogic/semaphore.go have the
// layout; this file decodes it without the service's code, from the
// attribute names each request uses.

// maxSlots bounds the slots the checker follows: the workload's
// semaphores have a few permits (Config.Semaphores); a write of a slot
// beyond it is reported as undecodable.
const maxSlots = 8

// semItem is a semaphore item as the store returned it, or as the model
// holds it: N, the counter, each slot's permit (a lease: leasestep.go),
// the owner markers (encoded: encodeMarkers), and the semaphore's queue
// of waiters (encoded as a lock's) with queue_until.
type semItem struct {
	exists           bool
	permits, counter int64
	slots            [maxSlots]leaseState
	markers          string
	queue            string
	queueUntil       int64
}

// same reports whether two semaphore items agree as answers are
// compared (leaseState.shown).
func (it semItem) same(o semItem) bool {
	for k := range it.slots {
		it.slots[k], o.slots[k] = it.slots[k].shown(), o.slots[k].shown()
	}
	return it == o
}

// semOp is what one store request does to a semaphore.
type semOp struct {
	// slot is the slot an acquire, renew, release or force release
	// writes (-1 for a read, a queue write or a record).
	slot int
	// settled are the slots whose expiry a watch's record (storeSettle)
	// writes, each with the token it read.
	settled []semSettle
	// n is the permits an acquire asks for (:n).
	n int64
	// An acquire's conditions and updates beyond the slot's own (one
	// permit per owner, a change of N, markers): marker is the caller's
	// marker's name; markerIs its value the write needs (markerSet false:
	// it must be absent); setMarker writes the grant id there, dropMarker
	// removes it; home is the caller's home slot that must not hold the
	// caller's live permit (-1: the write is of home); cleanup are other
	// callers' stale markers it removes, each unchanged and its grant's
	// slot not live; reset is a change of N.
	marker     string
	markerIs   string
	markerSet  bool
	setMarker  bool
	dropMarker bool
	home       int
	cleanup    []semCleanup
	reset      *semReset
	// item is the semaphore item the store returned: an acquire's
	// updated attributes (partial: only the slot's and counter, permits),
	// a renew's whole item, a read's. nil when it returned none.
	item    *semItem
	partial bool
	// old is the item returned with a refused write in the old-item
	// store mode (storeOp.old).
	old *semItem
}

type semSettle struct {
	slot int
	tok  int64
}

type semCleanup struct {
	name, value string
	slot        int // -1: no slot holds its grant
}

type semReset struct {
	permits int64
	counter int64 // 0: the counter must be absent
	expired []int
	markers []string
}

// slotOf reads k from an attribute name such as "o3" with the prefix
// given; -1 when it is not one.
func slotOf(name, prefix string) int {
	if !strings.HasPrefix(name, prefix) {
		return -1
	}
	k, err := strconv.Atoi(name[len(prefix):])
	if err != nil || k < 0 {
		return -1
	}
	return k
}

// decodeSemaphore fills s from the decoded call c of a semaphore's key.
// A write is told by the attributes it sets (setAttrs), as a lock's
// (writeKind): a slot's token (an acquire, the head's grant with a queue
// ticket), its forced_at z<k> (a force release; immediate when it sets
// released_at x<k> too), released_at (a release), expired_at y<k> (a
// watch's record of the expiries of one or more slots), expires_at
// alone (a renew); a write that sets none of a slot's is one of the
// queue's own.
func (s *storeOp) decodeSemaphore(c faultproxy.Call) error {
	m := &semOp{slot: -1, home: -1}
	s.sem = m
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
		slots := map[byte][]int{}
		for name := range setAttrs(c) {
			for _, p := range []byte{'t', 'z', 'x', 'y', 'e'} {
				if k := slotOf(name, string(p)); k >= 0 {
					slots[p] = append(slots[p], k)
				}
			}
		}
		one := func(p byte) (int, error) {
			if len(slots[p]) != 1 {
				return -1, fmt.Errorf("a semaphore write of %d slots' %c<k>: %s", len(slots[p]), p, c.UpdateExpression)
			}
			return slots[p][0], nil
		}
		var err error
		switch {
		case len(slots['t']) > 0:
			s.kind = storeAcquire
			m.slot, err = one('t')
		case len(slots['z']) > 0:
			s.kind = storeForce
			m.slot, err = one('z')
			s.immediate = len(slots['x']) > 0
		case len(slots['x']) > 0:
			s.kind = storeRelease
			m.slot, err = one('x')
		case len(slots['y']) > 0:
			s.kind = storeSettle
			sort.Ints(slots['y'])
			for _, k := range slots['y'] {
				if k >= maxSlots {
					return fmt.Errorf("a semaphore record of slot %d, beyond the %d slots the checker follows", k, maxSlots)
				}
				// The token read, :<k>tok (the one expiry record's
				// placeholder, locklogic.recordExpiry; :t<k> before it).
				tok, ok := v[":"+strconv.Itoa(k)+"tok"]
				if !ok {
					tok = v[":t"+strconv.Itoa(k)]
				}
				m.settled = append(m.settled, semSettle{slot: k, tok: num(tok)})
			}
		case len(slots['e']) > 0:
			s.kind = storeRenew
			m.slot, err = one('e')
		default:
			s.kind = queueKind(c)
			if s.kind < 0 {
				return fmt.Errorf("a semaphore write of no known kind: %s", c.UpdateExpression)
			}
		}
		if err != nil {
			return err
		}
		if m.slot >= maxSlots {
			return fmt.Errorf("a semaphore write of slot %d, beyond the %d slots the checker follows", m.slot, maxSlots)
		}
		decodeQueueFields(s, c)
		if s.kind == storeAcquire {
			decodeSemAcquire(m, s, c)
		}
	}
	if c.Item != nil && s.kind != storeForce { // a force release returns the old item
		m.item = semItemOf(c.Item, c.ItemLists)
		m.partial = s.kind == storeAcquire
	}
	return nil
}

// identity is an owner's home slot among n and the name of its marker, by
// the layout (docs/design.md, "One permit per owner"; locklogic's
// identityOf): SHA-256 of principal, a zero byte and owner; the home is
// its first 8 bytes (big-endian) modulo n, the marker "w" and the hex of
// the next 8. The workload has no principals.
func identity(owner string, n int64) (home int, marker string) {
	sum := sha256.Sum256([]byte("\x00" + owner))
	if n > 0 {
		home = int(binary.BigEndian.Uint64(sum[:8]) % uint64(n))
	}
	return home, "w" + hex.EncodeToString(sum[8:16])
}

// decodeSemAcquire reads an acquire's conditions and updates beyond its
// slot. One permit per owner is the layout's, whatever the write's text
// says: the caller's marker (by its name from the owner) must be as the
// write saw it (:wv) or absent; a write away from the caller's home slot
// needs no live permit of the caller at home and sets the marker to its
// grant id, a write home removes it. The stale markers it removes and a
// change of N come from the placeholders it uses
// (locklogic.semAcquireInput).
func decodeSemAcquire(m *semOp, s *storeOp, c faultproxy.Call) {
	v := c.Values
	m.n = num(v[":n"])
	m.home, m.marker = identity(s.owner, m.n)
	m.markerIs, m.markerSet = v[":wv"]
	m.setMarker = m.slot != m.home
	m.dropMarker = m.slot == m.home
	if m.slot == m.home {
		m.home = -1 // no condition on home
	}
	for i := 0; ; i++ {
		name, ok := c.Names["#m"+strconv.Itoa(i)]
		if !ok {
			break
		}
		cl := semCleanup{name: name, value: v[":m"+strconv.Itoa(i)], slot: -1}
		if g, ok := c.Names["#m"+strconv.Itoa(i)+"g"]; ok {
			cl.slot = slotOf(g, "g")
		}
		m.cleanup = append(m.cleanup, cl)
	}
	if pm0, ok := v[":pm0"]; ok {
		r := &semReset{permits: num(pm0), counter: num(v[":c0"])}
		for i := 0; ; i++ {
			e, ok := c.Names["#rx"+strconv.Itoa(i)]
			if !ok {
				break
			}
			r.expired = append(r.expired, slotOf(e, "e"))
		}
		for i := 0; ; i++ {
			name, ok := c.Names["#rm"+strconv.Itoa(i)]
			if !ok {
				break
			}
			r.markers = append(r.markers, name)
		}
		m.reset = r
	}
}

// semItemOf decodes a semaphore item's attributes, and its queue from
// its lists.
func semItemOf(item map[string]string, lists map[string][]map[string]string) *semItem {
	it := &semItem{exists: true, permits: num(item[locklogic.AttrPermits]), counter: num(item[locklogic.AttrCounter]),
		queueUntil: num(item[locklogic.AttrQueueUntil])}
	markers := map[string]string{}
	for name, val := range item {
		if isMarkerName(name) {
			markers[name] = val
		}
	}
	it.markers = encodeMarkers(markers)
	for k := range maxSlots {
		if _, ok := item["o"+strconv.Itoa(k)]; ok {
			it.slots[k] = leaseOf(item, slotNames(k))
		}
	}
	if l, ok := lists[locklogic.AttrQueue]; ok {
		q := make([]qentry, len(l))
		for j, e := range l {
			q[j] = entryOf(e)
		}
		it.queue = encodeQueue(q)
	}
	return it
}

// isMarkerName reports whether an attribute name is an owner marker's:
// "w" and 16 hex digits.
func isMarkerName(name string) bool {
	if len(name) != 17 || name[0] != 'w' {
		return false
	}
	_, err := strconv.ParseUint(name[1:], 16, 64)
	return err == nil
}

// encodeMarkers renders markers comparably: name=value, sorted, joined by
// spaces.
func encodeMarkers(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func decodeMarkers(s string) map[string]string {
	m := map[string]string{}
	if s == "" {
		return m
	}
	for _, p := range strings.Split(s, " ") {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

func (it *semItem) String() string {
	if it == nil || !it.exists {
		return "{absent}"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "{permits:%d counter:%d", it.permits, it.counter)
	for k, l := range it.slots {
		if l.taken() {
			fmt.Fprintf(&b, " slot%d:%s", k, l)
		}
	}
	if it.markers != "" {
		fmt.Fprintf(&b, " markers:%s", it.markers)
	}
	if it.queue != "" {
		fmt.Fprintf(&b, " queue:%s queue_until:%d", queueString(it.queue), it.queueUntil)
	}
	return b.String() + "}"
}

// format renders a semaphore request for an excerpt (the part before the
// answer).
func (m *semOp) format(s *storeOp) string {
	switch s.kind {
	case storeRead:
		if s.full {
			return "GetItem " + s.resource
		}
		return "GetItem (eventually consistent) " + s.resource
	case storeAcquire:
		r := fmt.Sprintf("UpdateItem semaphore-acquire %s slot %d owner:%s :now=%d :iss=%d :exp=%d permits:%d", s.resource, m.slot, s.owner, s.now, s.iss, s.exp, m.n)
		if s.delay != 0 {
			r += fmt.Sprintf(" lock-delay:%d", s.delay)
		}
		if s.ticket != "" {
			r += " (the head's grant, ticket " + s.ticket + ")"
		}
		if m.home >= 0 {
			r += fmt.Sprintf(" (away from home %d)", m.home)
		}
		if m.reset != nil {
			r += fmt.Sprintf(" (N from %d)", m.reset.permits)
		}
		return r
	case storeRenew:
		return fmt.Sprintf("UpdateItem semaphore-renew %s slot %d owner:%s :now=%d :exp=%d%s", s.resource, m.slot, s.owner, s.now, s.exp, tokenArg(s.tok))
	case storeSettle:
		var parts []string
		for _, st := range m.settled {
			parts = append(parts, fmt.Sprintf("slot %d token %d", st.slot, st.tok))
		}
		return fmt.Sprintf("UpdateItem semaphore-expiry-record %s :now=%d %s", s.resource, s.now, strings.Join(parts, ", "))
	case storeForce:
		kind := "semaphore-force-release"
		if s.immediate {
			kind += " (immediate)"
		}
		return fmt.Sprintf("UpdateItem %s %s slot %d :now=%d%s", kind, s.resource, m.slot, s.now, tokenArg(s.tok))
	case storeJoin, storeKeep, storePrune, storeLeave:
		return s.queueFormat()
	}
	return fmt.Sprintf("UpdateItem semaphore-release %s slot %d owner:%s :now=%d%s", s.resource, m.slot, s.owner, s.now, tokenArg(s.tok))
}

// answer renders what the store returned for an applied request.
func (m *semOp) answer(s *storeOp) string {
	switch {
	case m.item == nil && s.kind == storeRead:
		return "no item"
	case m.item == nil:
		return "committed"
	case m.partial:
		return fmt.Sprintf("committed slot %d: %s counter:%d permits:%d", m.slot, m.item.slots[m.slot], m.item.counter, m.item.permits)
	case s.kind == storeRead:
		return m.item.String()
	}
	return "committed " + m.item.String()
}
