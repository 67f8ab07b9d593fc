package locklogic

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// identity is a caller as a semaphore sees it: the hash its home slot is
// taken from, and the name of its owner marker.
type identity struct {
	hash   uint64
	marker string
}

// markerPrefix starts every owner marker's attribute name.
const markerPrefix = "w"

// identityOf hashes a caller: owner and principal together, since the same
// owner string under another principal is another owner.
func identityOf(c Caller) identity {
	sum := sha256.Sum256([]byte(c.Principal + "\x00" + c.Owner))
	return identity{hash: binary.BigEndian.Uint64(sum[:8]), marker: markerPrefix + hex.EncodeToString(sum[8:16])}
}

// HomeSlot returns the slot an acquire by c of a semaphore of permits
// permits tries first (with one write, when it is free): the same for
// every acquire of that owner and principal.
func HomeSlot(c Caller, permits int64) int {
	if permits < 1 {
		return 0
	}
	return identityOf(Caller{Owner: strings.TrimSpace(c.Owner), Principal: c.Principal}).home(permits)
}

// home is the caller's guess among n slots.
func (id identity) home(n int64) int { return int(id.hash % uint64(n)) }

// isMarker reports whether an attribute name is an owner marker's.
func isMarker(name string) bool {
	if len(name) != 1+16 || !strings.HasPrefix(name, markerPrefix) {
		return false
	}
	_, err := hex.DecodeString(name[1:])
	return err == nil
}

// staleMarker is another caller's marker whose grant holds no live permit.
type staleMarker struct {
	name, value string
	slot        int // the slot of its grant, -1 when no slot holds it
}

// staleMarkers returns up to maxMarkerCleanup markers of other callers on
// item whose grant holds no live permit among its n slots, in name order.
func staleMarkers(item map[string]types.AttributeValue, n int, now time.Time, own string) []staleMarker {
	var names []string
	for name := range item {
		if isMarker(name) && name != own {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []staleMarker
	for _, name := range names {
		gid := str(item, name)
		m := staleMarker{name: name, value: gid, slot: -1}
		for k := range n {
			if str(item, slotNames[k].grant) == gid {
				m.slot = k
				break
			}
		}
		if m.slot >= 0 && slotNames[m.slot].live(item, now) {
			continue
		}
		if out = append(out, m); len(out) == maxMarkerCleanup {
			break
		}
	}
	return out
}

// markerCondition is the condition under which a write may extend or
// revive the caller's (id's) permit in slot k: the caller's marker names
// that permit's grant (k away from home), or the caller has no marker and k
// is its home under the item's N (permits one of the Ns whose home for id
// is k, at most MaxPermits values: a condition cannot take a hash modulo
// N). It adds its names and values.
//
// One permit per owner rests on the marker: an acquire's guess of its home
// slot requires no marker, so a caller's permit away from home must keep
// its marker while live. An expired permit may come back, though: a
// renewal's :now is taken once per request, and one that lands late (an
// SDK retry, a delayed packet) revives the permit it renews if its :now
// was before the permit's end. Meanwhile another acquire may have judged
// the permit ended and removed its marker (staleMarkers), or the caller
// may have taken another permit (moving its marker, or removing it at
// home). No timing rule tells when a revival can no longer come (a request
// may land at any time); a condition on the renewal does: once the marker
// is gone or moved, the old permit stays ended (the renewal is 404), and a
// write that relies on a marked permit staying ended requires it still not
// live (semAcquireInput). A permit at home needs the marker absent: the
// caller holds no permit away from home.
func markerCondition(id identity, k int, x *expr) string {
	cond := x.n("#w", id.marker) + " = " + x.lease(&slotNames[k], "").n(pGrant)
	var homes []string
	for n := k + 1; n <= MaxPermits; n++ {
		if id.home(int64(n)) == k {
			homes = append(homes, x.v(":h"+strconv.Itoa(n), num(int64(n))))
		}
	}
	if len(homes) > 0 {
		cond = "((#pm IN (" + strings.Join(homes, ", ") + ") AND attribute_not_exists(#w)) OR " + cond + ")"
	}
	return cond
}

// markerAllows reports whether item meets markerCondition for id and k.
func markerAllows(item map[string]types.AttributeValue, id identity, k int) bool {
	if _, ok := item[id.marker]; ok {
		return str(item, id.marker) == str(item, slotNames[k].grant)
	}
	permits, ok := permitsOf(item)
	return ok && id.home(permits) == k
}
