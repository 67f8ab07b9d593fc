package locklogic

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ft288/locks/locklogic/dynamofake"
)

// slotView returns slot k of a semaphore item as a lock item, through the
// one table of lease names: a test judges a slot with the lock's judges
// and so checks that both layouts name the same lease.
func slotView(item map[string]types.AttributeValue, k int) map[string]types.AttributeValue {
	if item == nil {
		return nil
	}
	view := make(map[string]types.AttributeValue, 8)
	for _, code := range []string{pOwner, pPrin, pTok, pAcq, pRen, pExp, pDelay, pFree, pRel, pGrant, pRelID, pForce, pFOwn, pFTok, pFAcq, pRec} {
		if v, ok := item[slotNames[k].attr(code)]; ok {
			view[lockLease.attr(code)] = v
		}
	}
	return view
}

// leaseAtoms returns the lease clauses of a condition: its atoms (each
// comparison and function) that name an attribute of lease a, with every
// placeholder of a's attributes written as its code (#e for e2 as for
// expires_at) and slot numbers taken out of value placeholders (:2tok is
// :tok), sorted. Atoms on queue entries (#q[0].#o) are the queue's.
func leaseAtoms(cond string, names map[string]string, a *leaseNames) []string {
	code := map[string]string{}
	for _, c := range []string{pOwner, pPrin, pTok, pAcq, pRen, pExp, pDelay, pFree, pRel, pGrant, pRelID, pForce, pFOwn, pFTok, pFAcq, pRec} {
		code[a.attr(c)] = c
	}
	operand := `[#:][\w.\[\]#]+`
	atomRE := regexp.MustCompile(`\b(?:attribute_exists|attribute_not_exists)\(` + operand + `\)|` + operand + ` (?:<>|<=|>=|=|<|>) ` + operand)
	phRE := regexp.MustCompile(`[#:][\w]+`)
	var out []string
	for _, atom := range atomRE.FindAllString(cond, -1) {
		if strings.Contains(atom, "[") {
			continue
		}
		lease := false
		norm := phRE.ReplaceAllStringFunc(atom, func(ph string) string {
			if ph[0] == ':' {
				return ":" + strings.TrimLeft(ph[1:], "0123456789")
			}
			if c, ok := code[names[ph]]; ok {
				lease = true
				return "#" + c
			}
			return "#?"
		})
		if lease {
			out = append(out, norm)
		}
	}
	slices.Sort(out)
	return out
}

// twin is one lease condition of a lock and its twin on semaphore slot 2,
// and the lease clauses only the slot's has (a slot never taken has no
// expires_at, where a lock has no item; the slot's renewal checks the
// caller's marker names its grant; the head of a semaphore's queue may
// take its own permit again, a lock's head only a free lock).
type twin struct {
	name      string
	lock      func(s *Service)
	slot      func(s *Service)
	slotExtra []string
}

// captureCond returns the condition and names of the one UpdateItem call
// makes.
func captureCond(tb testing.TB, call func(s *Service)) (string, map[string]string) {
	tb.Helper()
	var got []*dynamodb.UpdateItemInput
	db := &dynamofake.DB{Update: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		got = append(got, in)
		return nil, errors.New("captured")
	}}
	call(newTestService(db))
	if len(got) != 1 {
		tb.Fatalf("captured %d writes, want 1", len(got))
	}
	return aws.ToString(got[0].ConditionExpression), got[0].ExpressionAttributeNames
}

var leaseTwins = func() []twin {
	ctx := context.Background()
	tok := aws.Int64(7)
	semAcq := func(c Caller, ticket string, delay int64) func(s *Service) {
		return func(s *Service) {
			req := SemaphoreAcquireRequest{Name: "s", Caller: c, TTLSeconds: 30, Permits: 3, LockDelaySeconds: delay, Arrived: s.now()}
			w := semWrite{slot: 2, home: 2, guess: true}
			_, _ = s.db.UpdateItem(ctx, s.semAcquireInput(req, s.now(), identityOf(c), "gid", &w, ticket))
		}
	}
	return []twin{
		{"Acquire", func(s *Service) {
			_, _ = s.Acquire(ctx, AcquireRequest{Resource: "r", Caller: anonCaller, TTLSeconds: 30})
		}, semAcq(anonCaller, "", 0), []string{"attribute_not_exists(#e)"}},
		{"AcquireIAMLockDelay", func(s *Service) {
			_, _ = s.Acquire(ctx, AcquireRequest{Resource: "r", Caller: iamCaller, TTLSeconds: 30, LockDelaySeconds: 5})
		}, semAcq(iamCaller, "", 5), []string{"attribute_not_exists(#e)"}},
		{"HeadGrant", func(s *Service) {
			_, _, _ = s.headGrant(ctx, AcquireRequest{Resource: "r", Caller: anonCaller, TTLSeconds: 30, WaitSeconds: 5}, Budget{}, nil, "tk", "gid")
		}, semAcq(anonCaller, "tk", 0), []string{"attribute_not_exists(#e)", "#o = :o", "attribute_not_exists(#p)",
			"attribute_not_exists(#fa)", "#a <= :iss", "attribute_not_exists(#n)", "#n <= :iss", "#gi = :gid"}},
		{"Renew", func(s *Service) {
			_, _ = s.Renew(ctx, RenewRequest{Resource: "r", Caller: iamCaller, TTLSeconds: 30, FencingToken: tok})
		}, func(s *Service) {
			_, _ = s.RenewSemaphore(ctx, SemaphoreRenewRequest{Name: "s", Caller: iamCaller, Slot: 2, TTLSeconds: 30, FencingToken: tok})
		}, []string{"#? = #gi"}},
		{"Release", func(s *Service) {
			_ = s.Release(ctx, ReleaseRequest{Resource: "r", Caller: anonCaller, FencingToken: tok})
		}, func(s *Service) {
			_ = s.ReleaseSemaphore(ctx, SemaphoreReleaseRequest{Name: "s", Caller: anonCaller, Slot: 2, FencingToken: tok})
		}, nil},
		{"ForceRelease", func(s *Service) {
			_, _ = s.ForceRelease(ctx, ForceReleaseRequest{Resource: "r", Reason: "r", FencingToken: tok})
		}, func(s *Service) {
			_, _ = s.ForceReleaseSemaphore(ctx, SemaphoreForceReleaseRequest{Name: "s", Slot: 2, Reason: "r", FencingToken: tok})
		}, nil},
		{"ForceReleaseImmediate", func(s *Service) {
			_, _ = s.ForceRelease(ctx, ForceReleaseRequest{Resource: "r", Reason: "r", Immediate: true})
		}, func(s *Service) {
			_, _ = s.ForceReleaseSemaphore(ctx, SemaphoreForceReleaseRequest{Name: "s", Slot: 2, Reason: "r", Immediate: true})
		}, nil},
		{"ExpiryRecord", func(s *Service) {
			item := map[string]types.AttributeValue{AttrToken: num(7)}
			_, _ = s.settleExpiry(ctx, "r", item, s.now(), Budget{})
		}, func(s *Service) {
			_, _ = s.settlePermits(ctx, "s", map[string]types.AttributeValue{"t2": num(7)}, []int{2}, s.now(), Budget{})
		}, nil},
	}
}()

// TestLeaseClauseParity: every lease condition of a lock and its twin on a
// semaphore slot hold the same lease clauses (TestExpressionListing's
// sibling, over the requests the code builds), but for the ones the slot's
// layout or algorithm adds, listed with the twin. A clause dropped from
// either twin, or written in one twin's own words, fails it.
func TestLeaseClauseParity(t *testing.T) {
	for _, tw := range leaseTwins {
		t.Run(tw.name, func(t *testing.T) {
			lc, ln := captureCond(t, tw.lock)
			sc, sn := captureCond(t, tw.slot)
			lock := leaseAtoms(lc, ln, &lockLease)
			slot := leaseAtoms(sc, sn, &slotNames[2])
			for _, extra := range tw.slotExtra {
				i := slices.Index(slot, extra)
				if i < 0 {
					t.Errorf("the slot's condition lacks its own clause %q: %s", extra, sc)
					continue
				}
				slot = slices.Delete(slot, i, i+1)
			}
			if !slices.Equal(lock, slot) {
				t.Errorf("lease clauses differ:\nlock %q\nslot %q\nlock condition: %s\nslot condition: %s", lock, slot, lc, sc)
			}
		})
	}
}
