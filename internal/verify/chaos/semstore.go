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

// slotLease is one slot of a semaphore item: the permit it holds, or held
// (released, expired), or none (zero).
type slotLease struct {
	owner                                   string
	token, acquiredAt, renewedAt, expiresAt int64
	released, forced                        bool
	gid                                     string
}

func (l slotLease) taken() bool { return l.owner != "" }

// semItem is a semaphore item as the store returned it, or as the model
// holds it. markers are the owner markers, encoded (encodeMarkers).
type semItem struct {
	exists           bool
	permits, counter int64
	slots            [maxSlots]slotLease
	markers          string
}

// semOp is what one store request does to a semaphore.
type semOp struct {
	// slot is the slot an acquire, renew or release writes (-1 for a
	// read).
	slot int
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
		_, base := v[":base"]
		_, k := v[":k"]
		_, ri := v[":ri"]
		switch {
		case base:
			s.kind = storeAcquire
		case k:
			s.kind = storeRenew
		case ri:
			s.kind = storeRelease
		default:
			return fmt.Errorf("a semaphore write of no known kind: %s", c.UpdateExpression)
		}
		m.slot = slotOf(c.Names["#o"], "o")
		if m.slot < 0 || m.slot >= maxSlots {
			return fmt.Errorf("a semaphore write of slot %q, beyond the %d slots the checker follows", c.Names["#o"], maxSlots)
		}
		if s.kind == storeAcquire {
			decodeSemAcquire(m, s, c)
		}
	}
	if c.Item != nil {
		m.item = semItemOf(c.Item)
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
			e, ok := c.Names["#q"+strconv.Itoa(i)]
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

// semItemOf decodes a semaphore item's attributes.
func semItemOf(item map[string]string) *semItem {
	it := &semItem{exists: true, permits: num(item[locklogic.AttrPermits]), counter: num(item[locklogic.AttrCounter])}
	markers := map[string]string{}
	for name, val := range item {
		if isMarkerName(name) {
			markers[name] = val
		}
	}
	it.markers = encodeMarkers(markers)
	for k := range maxSlots {
		i := strconv.Itoa(k)
		o, ok := item["o"+i]
		if !ok {
			continue
		}
		l := slotLease{owner: o, token: num(item["t"+i]), acquiredAt: num(item["a"+i]), renewedAt: num(item["n"+i]),
			expiresAt: num(item["e"+i]), gid: item["g"+i]}
		_, l.released = item["x"+i]
		_, l.forced = item["z"+i]
		it.slots[k] = l
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

// live reports whether the slot's permit is live at now (ms).
func (l slotLease) live(now int64) bool {
	return l.taken() && !l.released && !l.forced && l.expiresAt > now
}

func (l slotLease) String() string {
	if !l.taken() {
		return "-"
	}
	s := fmt.Sprintf("%s/%d acquired_at:%d renewed_at:%d expires_at:%d", l.owner, l.token, l.acquiredAt, l.renewedAt, l.expiresAt)
	if l.released {
		s += " released"
	}
	if l.forced {
		s += " forced"
	}
	return s
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
		if m.home >= 0 {
			r += fmt.Sprintf(" (away from home %d)", m.home)
		}
		if m.reset != nil {
			r += fmt.Sprintf(" (N from %d)", m.reset.permits)
		}
		return r
	case storeRenew:
		return fmt.Sprintf("UpdateItem semaphore-renew %s slot %d owner:%s :now=%d :exp=%d%s", s.resource, m.slot, s.owner, s.now, s.exp, tokenArg(s.tok))
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
