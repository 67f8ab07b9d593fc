package locklogic

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// rwLimitsCases are the read/write lock's worst cases for
// TestDynamoDBLimits: the writer's grant names every reader slot, and a
// reader granted at the back of a full queue of readers names every entry
// ahead of it.
func rwLimitsCases() []limitsCase {
	ctx := context.Background()
	iam := Caller{Owner: limitsOwner, Principal: limitsPrincipal}
	req := func(mode RWMode) RWAcquireRequest {
		return RWAcquireRequest{Name: limitsResource, Mode: mode, Caller: iam, TTLSeconds: DefaultMaxTTLSeconds,
			LockDelaySeconds: DefaultMaxLockDelaySeconds, WaitSeconds: MaxWaitLimit, Arrived: t0, QueueTicket: limitsTicket}
	}
	plain := func(mode RWMode) RWAcquireRequest {
		r := req(mode)
		r.WaitSeconds, r.QueueTicket = 0, ""
		return r
	}
	// queued is a full queue with the caller's entry (limitsTicket) at
	// place at, every entry a reader's.
	queued := func(at int) *view {
		q := limitsQueue(iam, MaxQueue, 0)
		l := q[AttrQueue].(*types.AttributeValueMemberL).Value
		l[0], l[at] = l[at], l[0]
		return newView(q, true)
	}
	lease := func(mode RWMode, slot int64) RWLeaseRequest {
		return RWLeaseRequest{Name: limitsResource, Caller: iam, Mode: mode, Slot: slot, TTLSeconds: DefaultMaxTTLSeconds,
			FencingToken: limitsToken}
	}
	return []limitsCase{
		{"rwlock write acquire, plain (every reader slot)", false, func(_ testing.TB, s *Service) {
			_, _ = s.AcquireRW(ctx, plain(Write), Budget{})
		}},
		{"rwlock write acquire, head (every reader slot, full queue)", false, func(_ testing.TB, s *Service) {
			t := &rwTarget{s: s, req: req(Write), gid: limitsGrant}
			_, _, _ = t.write(ctx, Budget{}, &rwWrite{ticket: limitsTicket, queued: queued(0)})
		}},
		{"rwlock read acquire, plain (guess, then writes from no item)", false, func(_ testing.TB, s *Service) {
			_, _ = s.AcquireRW(ctx, plain(Read), Budget{})
		}},
		{"rwlock read acquire, batch (place MaxQueue-1 behind readers)", false, func(_ testing.TB, s *Service) {
			t := &rwTarget{s: s, req: req(Read), gid: limitsGrant}
			_, _, _ = t.write(ctx, Budget{}, &rwWrite{slot: MaxReaders - 1, ticket: limitsTicket, queued: queued(MaxQueue - 1)})
		}},
		{"rwlock renew (writer, token)", false, func(_ testing.TB, s *Service) { _, _ = s.RenewRW(ctx, lease(Write, 0)) }},
		{"rwlock renew (reader slot 63, token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.RenewRW(ctx, lease(Read, MaxReaders-1))
		}},
		{"rwlock release (writer, token)", false, func(_ testing.TB, s *Service) { _ = s.ReleaseRW(ctx, lease(Write, 0)) }},
		{"rwlock release (reader slot 63, token)", false, func(_ testing.TB, s *Service) { _ = s.ReleaseRW(ctx, lease(Read, MaxReaders-1)) }},
		{"rwlock status / read", false, func(_ testing.TB, s *Service) { _, _ = s.RWLockStatus(ctx, limitsResource) }},
		{"rwlock force release (writer, immediate, token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ForceReleaseRW(ctx, RWForceReleaseRequest{Name: limitsResource, Mode: Write, Reason: "r", Immediate: true,
				FencingToken: limitsToken})
		}},
		{"rwlock force release (reader slot 63, token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ForceReleaseRW(ctx, RWForceReleaseRequest{Name: limitsResource, Mode: Read, Slot: MaxReaders - 1, Reason: "r",
				FencingToken: limitsToken})
		}},
		{"rwlock watch: record of the writer's and 64 readers' expiries (16-lease writes)", true, func(_ testing.TB, s *Service) {
			item := map[string]types.AttributeValue{AttrToken: num(limitsCounter)}
			for k := range MaxReaders {
				item[slotNames[k].token] = num(limitsCounter - 1 - int64(k))
			}
			_, _ = s.settleLeases(ctx, s.rwKey(limitsResource), item, rwLeases, t0, Budget{})
		}},
		{"rwlock peek", false, func(_ testing.TB, s *Service) { _, _ = s.rwPeek(ctx, limitsResource, Budget{}) }},
		{"rwlock listing (prefix)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ListRWLocks(ctx, ListRequest{Prefix: limitsResource}, Budget{})
		}},
	}
}
