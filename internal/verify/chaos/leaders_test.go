package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/ft288/locks/internal/verify/faultproxy"
)

// watch adds a watch of client (an observer: no owner) asked with index
// and wait_seconds wait, answered 200 with index and, for a live lease,
// lock (a lockBody).
func (f *fake) watch(client int, inv, ret int, asked, wait, index int64, lock string, mod ...func(*Op)) *Op {
	body := fmt.Sprintf(`{"resource":"r","index":%d,"changed":%v`, index, index != asked)
	if index > 0 {
		body += fmt.Sprintf(`,"fencing_token":%d`, index/2)
	}
	if lock != "" {
		body += `,"lock":` + lock
	}
	return f.op(client, Watch, inv, ret, 200, body+"}", append([]func(*Op){func(o *Op) { o.Owner, o.TTL, o.Index, o.Wait = "", 0, asked, wait }}, mod...)...)
}

// watched is clean() watched by client 5 from the start: never taken,
// c0's lease, its release, c1's lease.
func watched() *fake {
	f := clean()
	f.watch(5, 0, 1, 0, 2, 0, "")
	f.watch(5, 1, 12, 0, 2, 202, f.lockBody("c0", 101, 2, 2000))
	f.watch(5, 12, 210, 202, 2, 203, "")
	f.watch(5, 210, 312, 203, 2, 204, f.lockBody("c1", 102, 301, 2000))
	return f
}

func TestCheckWatchCleanHistory(t *testing.T) {
	rep := check(watched())
	wantOnly(t, rep)
	if rep.Watches != 4 || rep.WatchChanged != 3 || rep.WatchSkipped != 0 || rep.WatchedLeases != 2 {
		t.Errorf("got %d watch answers (%d changed, %d skipped) over %d leases; want 4 (3, 0) over 2", rep.Watches, rep.WatchChanged, rep.WatchSkipped, rep.WatchedLeases)
	}
}

func TestCheckOneHolder(t *testing.T) {
	// c1's acquire commits while c0's lease is live (a broken
	// condition), and c1 is told 503: nobody believes it holds the lock,
	// so mutual exclusion has nothing to say, but the store had two
	// holders.
	f := newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
	f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.op(1, Acquire, 500, 510, 503, problem(503, "service-unavailable"))
	f.write(storeAcquire, "c1", 502, 2000, 502, 508, "committed", 102, faultproxy.AppliedThen500, 500)
	rep := check(f)
	wantOnly(t, rep, RuleOneHolder, RuleLinearizable)
	excerptHas(t, rep, RuleOneHolder, "c1 was granted token 102 while c0's lease (token 101) was live: both held the lock for 1500 ms",
		"store#2", "UpdateItem acquire-write r owner:c1")

	// Taken over at expiry, after a release (however the instances'
	// clocks stamped the two), and by the same owner: one holder.
	f = newFake()
	f.h.Offsets = []time.Duration{0, -40 * time.Millisecond}
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 1000), func(o *Op) { o.TTL = 1 })
	f.write(storeAcquire, "c0", 2, 1000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.op(1, Acquire, 1002, 1010, 200, f.granted("c1", 102, 1002, 1000), func(o *Op) { o.TTL = 1 })
	f.write(storeAcquire, "c1", 1002, 1000, 1003, 1008, "committed", 102, faultproxy.None, 200)
	f.op(1, Acquire, 1100, 1110, 200, f.granted("c1", 103, 1102, 2000))
	f.write(storeAcquire, "c1", 1102, 2000, 1103, 1108, "committed", 103, faultproxy.None, 200)
	f.op(1, Release, 1200, 1210, 204, "", func(o *Op) { o.TTL = 0 })
	f.write(storeRelease, "c1", 1260, 0, 1202, 1208, "committed", 0, faultproxy.None, 200) // an instance ahead
	f.op(0, Acquire, 1220, 1230, 200, f.granted("c0", 104, 1222, 2000), func(o *Op) { o.Instance = 1 })
	f.write(storeAcquire, "c0", 1222, 2000, 1222, 1228, "committed", 104, faultproxy.None, 200)
	rep = check(f)
	if rep.Has(RuleOneHolder) {
		t.Errorf("one holder at a time reported: %v", rep.Violations)
	}
}

func TestCheckWatchOrder(t *testing.T) {
	cases := map[string]struct {
		build func(f *fake)
		want  string
	}{
		// The index of c1's lease, then c0's again: back in time (and
		// stale: c1's grant was answered before the call).
		"Back": {func(f *fake) {
			f.watch(5, 320, 330, 204, 2, 202, f.lockBody("c0", 101, 2, 2000))
		}, "answered index 202 to a watcher that had seen 204"},
		// A new watcher is told of c0's lease after c1's replaced it.
		"Stale": {func(f *fake) {
			f.watch(6, 320, 330, 0, 2, 202, f.lockBody("c0", 101, 2, 2000))
		}, "answered token 101 (c0) after token 102 (c1) had replaced it"},
		"NeverTakenAfterGrant": {func(f *fake) {
			f.watch(6, 320, 330, 0, 2, 0, "")
		}, "answered a lock never taken after its first lease was granted"},
		"OtherOwner": {func(f *fake) {
			f.watch(6, 320, 330, 0, 2, 204, f.lockBody("c9", 102, 301, 2000))
		}, "answered a lease of token 102 the store never wrote (owner c9"},
		"NeverGranted": {func(f *fake) {
			f.watch(6, 320, 330, 0, 2, 210, f.lockBody("c1", 105, 301, 2000))
		}, "answered token 105, which the store never granted"},
		// c0's lease ended at 60, before any release of it was sent and
		// long before it expired.
		"EndedEarly": {func(f *fake) {
			f.watch(6, 50, 60, 202, 2, 203, "")
		}, "answered that the lease of token 101 had ended, but no release of it had been sent, no read during the call found its expiry recorded"},
		"ExpiredAsLive": {func(f *fake) {
			f.watch(6, 2400, 2410, 0, 2, 204, f.lockBody("c1", 102, 301, 2000))
		}, "answered token 102 as live though it expired"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := watched()
			tc.build(f)
			rep := check(f)
			wantOnly(t, rep, RuleWatchOrder)
			excerptHas(t, rep, RuleWatchOrder, tc.want)
		})
	}

	// Skipped leases. c1's lease 102 is followed by c2's 103 and c0's
	// 104; a watcher that goes from 102 to 104 reports one skipped, as
	// the history has. One that sees token 104 as the next of 101 after
	// c1's lease went missing from the history (token 102 was never
	// committed: the store jumped from 101 to 103, say) reports two, and
	// the history has one.
	f := watched()
	f.op(2, Acquire, 2400, 2410, 200, f.granted("c2", 103, 2402, 1000), func(o *Op) { o.TTL = 1 })
	f.write(storeAcquire, "c2", 2402, 1000, 2402, 2408, "committed", 103, faultproxy.None, 200)
	f.op(0, Acquire, 3500, 3510, 200, f.granted("c0", 104, 3502, 2000))
	f.write(storeAcquire, "c0", 3502, 2000, 3502, 3508, "committed", 104, faultproxy.None, 200)
	f.watch(5, 312, 3520, 204, 5, 208, f.lockBody("c0", 104, 3502, 2000))
	rep := check(f)
	wantOnly(t, rep)
	if rep.WatchSkipped != 1 {
		t.Errorf("got %d skipped reported, want 1", rep.WatchSkipped)
	}
	f = newFake()
	f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 1000), func(o *Op) { o.TTL = 1 })
	f.write(storeAcquire, "c0", 2, 1000, 2, 8, "committed", 101, faultproxy.None, 200)
	f.op(2, Acquire, 1100, 1110, 200, f.granted("c2", 103, 1102, 1000), func(o *Op) { o.TTL = 1 })
	f.write(storeAcquire, "c2", 1102, 1000, 1102, 1108, "committed", 103, faultproxy.None, 200)
	f.op(0, Acquire, 2200, 2210, 200, f.granted("c0", 104, 2202, 2000))
	f.write(storeAcquire, "c0", 2202, 2000, 2202, 2208, "committed", 104, faultproxy.None, 200)
	f.watch(5, 0, 12, 0, 2, 202, f.lockBody("c0", 101, 2, 1000))
	f.watch(5, 12, 2220, 202, 5, 208, f.lockBody("c0", 104, 2202, 2000))
	rep = check(f)
	wantOnly(t, rep, RuleWatchOrder, RuleLinearizable)
	excerptHas(t, rep, RuleWatchOrder, "from token 101 to token 104 the watcher reports 2 leases skipped; the history has 1 between them")
}

func TestCheckWatchSkewBack(t *testing.T) {
	// c0's lease expires at 1001 by the service's clock. i0, 40 ms
	// ahead, tells the watcher it ended; the watcher's next call goes to
	// i1, 40 ms behind, which still sees it live. The service keeps to
	// what the watcher saw — the same index, no lease, unchanged — and
	// that is no violation; going back to the live lease is, on any
	// instance (the service promises an index that only grows).
	for _, back := range []bool{false, true} {
		f := newFake()
		f.h.Offsets = []time.Duration{40 * time.Millisecond, -40 * time.Millisecond}
		f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 1, 1000), func(o *Op) { o.TTL = 1 })
		f.write(storeAcquire, "c0", 1, 1000, 2, 8, "committed", 101, faultproxy.None, 200)
		f.watch(5, 0, 12, 0, 2, 202, f.lockBody("c0", 101, 1, 1000))
		f.watch(5, 12, 965, 202, 2, 203, "")
		if back {
			f.watch(5, 966, 970, 203, 2, 202, f.lockBody("c0", 101, 1, 1000), func(o *Op) { o.Instance = 1 })
		} else {
			f.watch(5, 966, 970, 203, 2, 203, "", func(o *Op) { o.Instance = 1 })
		}
		rep := check(f)
		if back {
			wantOnly(t, rep, RuleWatchOrder)
			excerptHas(t, rep, RuleWatchOrder, "back to an earlier state")
		} else {
			wantOnly(t, rep)
		}
	}
}

func TestCheckWatchRecordedByInstanceAhead(t *testing.T) {
	// c0's lease expires at 1001 by the service's clock. A watch on i1,
	// 40 ms ahead, records the expiry (:now 1002 on its clock, 962 by the
	// service's); a watch on i0, 40 ms behind, then reads the record (at
	// 965) and answers the end at 970, 931 on its own clock: the record
	// ended the lease, and that is no violation. A record stamped before
	// the expiry (a broken record condition), none, one refused, or one
	// that landed only after the watch's read leaves the answer an end
	// no write or clock made.
	for _, tc := range []struct {
		name     string
		recordAt int    // the record's :now; 0: no record
		result   string // the record's
		recv     int    // when the record reached the store
		want     []string
	}{
		{"Recorded", 1002, "committed", 962, nil},
		{"RecordedEarly", 990, "committed", 962, []string{RuleWatchOrder, RuleLinearizable}},
		{"NotRecorded", 0, "", 0, []string{RuleWatchOrder}},
		{"Refused", 1002, "refused", 962, []string{RuleWatchOrder, RuleLinearizable}},
		{"AfterTheRead", 1002, "committed", 967, []string{RuleWatchOrder}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.h.Offsets = []time.Duration{-40 * time.Millisecond, 40 * time.Millisecond}
			f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 1, 1000), func(o *Op) { o.TTL = 1 })
			f.write(storeAcquire, "c0", 1, 1000, 2, 8, "committed", 101, faultproxy.None, 200)
			f.watch(5, 0, 12, 0, 2, 202, f.lockBody("c0", 101, 1, 1000))
			if tc.recordAt > 0 {
				f.settle(101, tc.recordAt, tc.recv, tc.recv+2, tc.result)
			}
			// i0's watch reads the item at 965: the lease, with the record
			// if one had landed.
			recorded := tc.result == "committed" && tc.recv+2 <= 965
			f.read("c0", 101, 1, 1, 1001, 965, 967)
			if recorded {
				f.setAnswer("expired_at", n(f.now(tc.recordAt)))
			}
			f.watch(5, 12, 970, 202, 2, 203, "")
			rep := check(f)
			wantOnly(t, rep, tc.want...)
			if tc.want != nil {
				excerptHas(t, rep, RuleWatchOrder, "answered that the lease of token 101 had ended, but no release of it had been sent, no read during the call found its expiry recorded")
			}
			if tc.recordAt == 990 {
				excerptHas(t, rep, RuleWatchOrder, "an expiry record of it:")
			}
		})
	}
}

func TestCheckGrantFoundByGrantID(t *testing.T) {
	// c0 and c1 are two processes of owner w. c0 asks for 3 s; its grant
	// commits, but its answer is lost (a 500 after the write); c1 renews
	// the owner's lease for 2 s; the service then finds c0's grant in a
	// consistent read (by its grant id: queue_wait.go, ownGrant) and
	// answers it as found, lasting 2008 ms from its grant. That is no
	// violation (first seen in a 30 s run, 2026-12-07). A grant answered
	// with an expiry no write of the owner made is two: a grant of 3 s
	// that does not last 3 s, and no write that shows it. So is a lease
	// granted before the call, or one another request's grant id wrote,
	// or one whose grant's answer the service got, answered as found.
	for _, tc := range []struct {
		name      string
		ttl       int    // the answered lease's, ms
		invoke    int    // the call's
		readGrant string // the grant id the read finds
		status    int    // what the service got for the grant's write
		want      []string
	}{
		{"AsFound", 2008, 0, "g1", 500, nil},
		{"Invented", 2500, 0, "g1", 500, []string{RuleAnswers, RuleNoFalseGrant}},
		{"GrantedBeforeTheCall", 2008, 9, "g1", 500, []string{RuleNoFalseGrant}},
		{"AnotherGrant", 2008, 0, "g9", 500, []string{RuleNoFalseGrant}},
		{"GrantAnswered", 2008, 0, "g1", 200, []string{RuleNoFalseGrant}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			owner := func(o *Op) { o.Owner = "w" }
			f.op(0, Acquire, tc.invoke, 100, 200, f.granted("w", 101, 2, tc.ttl), owner, func(o *Op) { o.TTL = 3 })
			fault := faultproxy.AppliedThen500
			if tc.status == 200 {
				fault = faultproxy.None
			}
			f.write(storeAcquire, "w", 2, 3000, 2, 8, "committed", 101, fault, tc.status)
			f.setAnswer("grant_id", s("g1"))
			f.op(1, Renew, 9, 20, 200, `{"renewed":true,"lock":`+f.lockBody("w", 101, 2, 2008)+`}`, owner)
			f.write(storeRenew, "w", 10, 2000, 10, 14, "committed", 101, faultproxy.None, 200)
			// The renewal's answer is the whole item: the lease granted at 2.
			f.setAnswer("acquired_at", n(f.now(2)))
			f.setAnswer("grant_id", s("g1"))
			f.read("w", 101, 2, 10, 2010, 40, 42)
			f.setAnswer("grant_id", s(tc.readGrant))
			rep := check(f)
			wantOnly(t, rep, tc.want...)
		})
	}
}
