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

// rwTwin is a twin's request on a read/write lock: for its writer (the
// lock's attribute names) and for its reader in slot 2, the lease clauses
// only each has, and the lock twin whose lease clauses they must hold
// (against; "" for the twin of the same name).
type rwTwin struct {
	writer, reader           func(s *Service)
	writerExtra, readerExtra []string
	against                  string
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

// rwTwins are leaseTwins' read/write lock requests, by twin name: each
// twin's writer and reader (slot 2) request, and the clauses that are
// theirs alone. A read/write lock's acquire has no same-owner branch (an
// owner's second reader takes another slot; the writer is not
// re-entrant; an SDK retry finds its grant by grant id), so every acquire
// holds the lock's free branch, the head's grant's clauses, plus "never
// taken" (attribute_not_exists(#e), as a slot's); each renewal has the
// clause that keeps a late renewal from reviving a lease the other kind's
// grant ended (notEndedByGrant: the counter still at the writer's token,
// the writer's token below the reader's).
func rwTwins() map[string]rwTwin {
	ctx := context.Background()
	tok := aws.Int64(7)
	rwAcq := func(mode RWMode, c Caller, ticket string, delay int64) func(s *Service) {
		return func(s *Service) {
			req := RWAcquireRequest{Name: "rw", Mode: mode, Caller: c, TTLSeconds: 30, LockDelaySeconds: delay, Arrived: s.now()}
			w := &rwWrite{slot: 2, ticket: ticket}
			if ticket != "" {
				w.queued = newView(map[string]types.AttributeValue{AttrQueue: &types.AttributeValueMemberL{Value: []types.AttributeValue{
					&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{entryID: &types.AttributeValueMemberS{Value: ticket},
						AttrOwner: &types.AttributeValueMemberS{Value: c.Owner}, entryUntil: num(s.now().UnixMilli() + 60000)}},
				}}}, true)
			}
			_, _ = s.db.UpdateItem(ctx, s.rwAcquireInput(req, s.now(), "gid", w))
		}
	}
	lease := func(mode RWMode, c Caller, renew bool) func(s *Service) {
		return func(s *Service) {
			req := RWLeaseRequest{Name: "rw", Caller: c, Mode: mode, Slot: 2, TTLSeconds: 30, FencingToken: tok}
			if renew {
				_, _ = s.RenewRW(ctx, req)
			} else {
				_ = s.ReleaseRW(ctx, req)
			}
		}
	}
	force := func(mode RWMode, immediate bool, tok *int64) func(s *Service) {
		return func(s *Service) {
			_, _ = s.ForceReleaseRW(ctx, RWForceReleaseRequest{Name: "rw", Mode: mode, Slot: 2, Reason: "r", Immediate: immediate,
				FencingToken: tok})
		}
	}
	record := func(r recorded, tokAttr string) func(s *Service) {
		return func(s *Service) {
			_, _ = s.settleLeases(ctx, s.rwKey("rw"), map[string]types.AttributeValue{tokAttr: num(7)}, []recorded{r}, s.now(), Budget{})
		}
	}
	vacant := []string{"attribute_not_exists(#e)"}
	rw := map[string]rwTwin{
		"Acquire": {writer: rwAcq(Write, anonCaller, "", 0), reader: rwAcq(Read, anonCaller, "", 0),
			writerExtra: vacant, readerExtra: vacant, against: "HeadGrant"},
		"AcquireIAMLockDelay": {writer: rwAcq(Write, iamCaller, "", 5), reader: rwAcq(Read, iamCaller, "", 5),
			writerExtra: vacant, readerExtra: vacant, against: "HeadGrant"},
		"HeadGrant": {writer: rwAcq(Write, anonCaller, "tk", 0), reader: rwAcq(Read, anonCaller, "tk", 0),
			writerExtra: vacant, readerExtra: vacant},
		"Renew": {writer: lease(Write, iamCaller, true), reader: lease(Read, iamCaller, true),
			writerExtra: []string{"#? = #t"}, readerExtra: []string{"#? < #t"}},
		"Release":               {writer: lease(Write, anonCaller, false), reader: lease(Read, anonCaller, false)},
		"ForceRelease":          {writer: force(Write, false, tok), reader: force(Read, false, tok)},
		"ForceReleaseImmediate": {writer: force(Write, true, nil), reader: force(Read, true, nil)},
		"ExpiryRecord":          {writer: record(recorded{&lockLease, ""}, AttrToken), reader: record(slotLeases[2], "t2")},
	}
	return rw
}

// leaseClauses returns the lease clauses of the condition call makes on
// lease a, with extras (the clauses only it has) taken out; it reports an
// extra that is missing.
func leaseClauses(tb testing.TB, call func(s *Service), a *leaseNames, extras []string) []string {
	tb.Helper()
	c, names := captureCond(tb, call)
	atoms := leaseAtoms(c, names, a)
	for _, extra := range extras {
		i := slices.Index(atoms, extra)
		if i < 0 {
			tb.Errorf("the condition lacks its own clause %q: %s", extra, c)
			continue
		}
		atoms = slices.Delete(atoms, i, i+1)
	}
	return atoms
}

// TestLeaseClauseParity: every lease condition of a lock and its twin on a
// semaphore slot hold the same lease clauses (TestExpressionListing's
// sibling, over the requests the code builds), but for the ones the slot's
// layout or algorithm adds, listed with the twin; and so do the same
// requests on a read/write lock's writer and on its reader in slot 2
// (rwTwins, their own clauses listed there). A clause dropped from any
// twin, or written in one twin's own words, fails it.
func TestLeaseClauseParity(t *testing.T) {
	rws := rwTwins()
	lockTwin := map[string]func(s *Service){}
	for _, tw := range leaseTwins {
		lockTwin[tw.name] = tw.lock
	}
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
			rt, ok := rws[tw.name]
			if !ok {
				t.Fatal("no read/write lock twin")
			}
			want := lock
			if rt.against != "" {
				want = leaseClauses(t, lockTwin[rt.against], &lockLease, nil)
			}
			if w := leaseClauses(t, rt.writer, &lockLease, rt.writerExtra); !slices.Equal(want, w) {
				t.Errorf("lease clauses differ:\nlock   %q\nwriter %q", want, w)
			}
			if r := leaseClauses(t, rt.reader, &slotNames[2], rt.readerExtra); !slices.Equal(want, r) {
				t.Errorf("lease clauses differ:\nlock   %q\nreader %q", want, r)
			}
		})
	}
}
