package integration

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/locklogic"
)

// leaseKind is one kind of lease behind one adapter: a lock, the permit of
// a semaphore of 1, slot 2 of a semaphore of 3 (its other slots held for
// the whole test, so that slot 2 is the one lease the owners contend for),
// the writer of a read/write lock, or one reader's slot of a read/write
// lock whose other 63 reader slots are held. Each answers as a lock does:
// every scenario of TestLeaseKinds runs unchanged on each.
type leaseKind struct {
	name    string
	permits int64 // 0: a lock (or a read/write lock, rw set)
	// rw is the read/write lock's lease the kind is: its writer, or a
	// reader (the slot left free, leaseRun.slot); "" for the others.
	rw   locklogic.RWMode
	slot int64
	// owners are the owners a scenario uses: for a semaphore of 3, owners
	// whose home is slot 2, so their acquires go there when it is free.
	owners []string
}

// leaseRun is one scenario's lease: its kind, its name, and the service.
type leaseRun struct {
	t    *testing.T
	kind leaseKind
	name string
	db   locklogic.DynamoDBAPI
	svc  *locklogic.Service
	off  *atomic.Int64 // the service clock's lead over real time, ns
	mode testenv.StoreMode
	slot int64 // the kind's slot: a semaphore's, or the reader's
}

func (r *leaseRun) now() time.Time { return time.Now().Add(time.Duration(r.off.Load())) }

// jump moves the service clock forward by d.
func (r *leaseRun) jump(d time.Duration) { r.off.Add(int64(d)) }

// at returns the service as a request issued at t sees it (a late
// request: its :now was taken then), on the same store.
func (r *leaseRun) at(t time.Time) *locklogic.Service {
	return locklogic.New(r.db, locklogic.Config{Table: testenv.Table, Now: func() time.Time { return t }, FairWaiting: true,
		OldItemOnFailure: r.mode == testenv.StoreOldItem})
}

func (r *leaseRun) owner(i int) string { return r.kind.owners[i] }

// acquire asks for the lease for owner i, issued at issued (zero: now),
// waiting up to wait seconds with ticket.
func (r *leaseRun) acquire(s *locklogic.Service, i int, ttl, delay int64, issued time.Time, wait int64, ticket string) (locklogic.Lock, bool, string, error) {
	r.t.Helper()
	ctx := context.Background()
	c := locklogic.Caller{Owner: r.owner(i)}
	if r.kind.rw != "" {
		res, err := s.AcquireRW(ctx, locklogic.RWAcquireRequest{Name: r.name, Mode: r.kind.rw, Caller: c, TTLSeconds: ttl,
			LockDelaySeconds: delay, Arrived: issued, WaitSeconds: wait, QueueTicket: ticket}, locklogic.Budget{})
		if res.Acquired && r.kind.rw == locklogic.Read && int64(res.Lease.Slot) != r.slot {
			r.t.Fatalf("%s: granted reader slot %d, want slot %d", r.owner(i), res.Lease.Slot, r.slot)
		}
		return res.Lease.Lock, res.Acquired, res.QueueTicket, err
	}
	if r.kind.permits == 0 {
		res, err := s.Acquire(ctx, locklogic.AcquireRequest{Resource: r.name, Caller: c, TTLSeconds: ttl, LockDelaySeconds: delay,
			Arrived: issued, WaitSeconds: wait, QueueTicket: ticket})
		return res.Lock, res.Acquired, res.QueueTicket, err
	}
	res, err := s.AcquireSemaphore(ctx, locklogic.SemaphoreAcquireRequest{Name: r.name, Caller: c, TTLSeconds: ttl,
		Permits: r.kind.permits, LockDelaySeconds: delay, Arrived: issued, WaitSeconds: wait, QueueTicket: ticket}, locklogic.Budget{})
	if res.Acquired && int64(res.Permit.Slot) != r.slot {
		r.t.Fatalf("%s: granted slot %d, want slot %d", r.owner(i), res.Permit.Slot, r.slot)
	}
	return res.Permit.Lock, res.Acquired, res.QueueTicket, err
}

func (r *leaseRun) mustAcquire(i int, ttl, delay int64) locklogic.Lock {
	r.t.Helper()
	l, ok, _, err := r.acquire(r.svc, i, ttl, delay, time.Time{}, 0, "")
	if err != nil || !ok {
		r.t.Fatalf("%s acquires: got %v %v, want the lease", r.owner(i), ok, err)
	}
	return l
}

func (r *leaseRun) renew(s *locklogic.Service, i int, ttl int64, tok *int64) (locklogic.Lock, error) {
	c := locklogic.Caller{Owner: r.owner(i)}
	if r.kind.rw != "" {
		l, err := s.RenewRW(context.Background(), locklogic.RWLeaseRequest{Name: r.name, Caller: c, Mode: r.kind.rw, Slot: r.slot,
			TTLSeconds: ttl, FencingToken: tok})
		return l.Lock, err
	}
	if r.kind.permits == 0 {
		return s.Renew(context.Background(), locklogic.RenewRequest{Resource: r.name, Caller: c, TTLSeconds: ttl, FencingToken: tok})
	}
	p, err := s.RenewSemaphore(context.Background(), locklogic.SemaphoreRenewRequest{Name: r.name, Caller: c, Slot: r.slot,
		TTLSeconds: ttl, FencingToken: tok})
	return p.Lock, err
}

func (r *leaseRun) release(s *locklogic.Service, i int, tok *int64) error {
	c := locklogic.Caller{Owner: r.owner(i)}
	if r.kind.rw != "" {
		return s.ReleaseRW(context.Background(), locklogic.RWLeaseRequest{Name: r.name, Caller: c, Mode: r.kind.rw, Slot: r.slot,
			FencingToken: tok})
	}
	if r.kind.permits == 0 {
		return s.Release(context.Background(), locklogic.ReleaseRequest{Resource: r.name, Caller: c, FencingToken: tok})
	}
	return s.ReleaseSemaphore(context.Background(), locklogic.SemaphoreReleaseRequest{Name: r.name, Caller: c, Slot: r.slot,
		FencingToken: tok})
}

func (r *leaseRun) force(s *locklogic.Service, immediate bool, tok *int64) (locklogic.Lock, error) {
	if r.kind.rw != "" {
		res, err := s.ForceReleaseRW(context.Background(), locklogic.RWForceReleaseRequest{Name: r.name, Mode: r.kind.rw, Slot: r.slot,
			Reason: "test", Immediate: immediate, FencingToken: tok})
		return res.Ended.Lock, err
	}
	if r.kind.permits == 0 {
		res, err := s.ForceRelease(context.Background(), locklogic.ForceReleaseRequest{Resource: r.name, Reason: "test",
			Immediate: immediate, FencingToken: tok})
		return res.Ended, err
	}
	res, err := s.ForceReleaseSemaphore(context.Background(), locklogic.SemaphoreForceReleaseRequest{Name: r.name,
		Slot: r.slot, Reason: "test", Immediate: immediate, FencingToken: tok})
	return res.Ended.Lock, err
}

// watch answers, through a watch's consistent read (which records an
// expiry it answers), the live lease (nil: none).
func (r *leaseRun) watch() *locklogic.Lock {
	r.t.Helper()
	ctx := context.Background()
	if r.kind.rw != "" {
		res, err := r.svc.WatchRW(ctx, locklogic.WatchRequest{Resource: r.name}, locklogic.Budget{})
		if err != nil {
			r.t.Fatal(err)
		}
		return r.rwLease(res.Status)
	}
	if r.kind.permits == 0 {
		res, err := r.svc.Watch(ctx, locklogic.WatchRequest{Resource: r.name}, locklogic.Budget{})
		if err != nil {
			r.t.Fatal(err)
		}
		return res.Lock
	}
	res, err := r.svc.WatchSemaphore(ctx, locklogic.WatchRequest{Resource: r.name}, locklogic.Budget{})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range res.Status.Holders {
		if int64(p.Slot) == r.slot {
			return &p.Lock
		}
	}
	return nil
}

// listed returns the lease the admin listing shows (nil: none).
func (r *leaseRun) listed() *locklogic.Lock {
	r.t.Helper()
	ctx := context.Background()
	if r.kind.rw != "" {
		res, err := r.svc.ListRWLocks(ctx, locklogic.ListRequest{Prefix: r.name}, locklogic.Budget{})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, st := range res.Locks {
			if st.Name == r.name {
				return r.rwLease(st)
			}
		}
		return nil
	}
	if r.kind.permits == 0 {
		res, err := r.svc.List(ctx, locklogic.ListRequest{Prefix: r.name}, locklogic.Budget{})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, l := range res.Locks {
			if l.Resource == r.name {
				return &l
			}
		}
		return nil
	}
	res, err := r.svc.ListSemaphores(ctx, locklogic.ListRequest{Prefix: r.name}, locklogic.Budget{})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range res.Permits {
		if p.Resource == r.name && int64(p.Slot) == r.slot {
			return &p.Lock
		}
	}
	return nil
}

// rwLease returns the kind's lease in a read/write lock's state (nil:
// none).
func (r *leaseRun) rwLease(st locklogic.RWStatus) *locklogic.Lock {
	if r.kind.rw == locklogic.Write {
		if st.Writer == nil {
			return nil
		}
		return &st.Writer.Lock
	}
	for _, l := range st.Readers {
		if int64(l.Slot) == r.slot {
			return &l.Lock
		}
	}
	return nil
}

func wantErr(tb testing.TB, what string, err, want error) {
	tb.Helper()
	if !errors.Is(err, want) {
		tb.Errorf("%s: got %v, want %v", what, err, want)
	}
}

// homeOwners returns n owner names whose home slot among permits is k.
func homeOwners(prefix string, permits int64, k, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		o := fmt.Sprintf("%s-%d", prefix, i)
		if locklogic.HomeSlot(locklogic.Caller{Owner: o}, permits) == k {
			out = append(out, o)
		}
	}
	return out
}

// TestLeaseKinds runs the lease scenarios — late writes, fencing, renew
// ordering, lock-delay, force release, a watch and its record, the queue,
// the admin listing — for a lock, a semaphore of 1, slot 2 of a semaphore
// of 3, a read/write lock's writer and one of its reader slots (the other
// 63 held), against dynalite in the harness's store mode, and requires the
// same answers of each.
func TestLeaseKinds(t *testing.T) {
	t.Parallel()
	kinds := []leaseKind{
		{name: "Lock", owners: []string{"a", "b", "c"}},
		{name: "SemaphoreOf1", permits: 1, owners: []string{"a", "b", "c"}},
		{name: "Slot2Of3", permits: 3, slot: 2, owners: homeOwners("o", 3, 2, 3)},
		{name: "RWWriter", rw: locklogic.Write, owners: []string{"a", "b", "c"}},
		{name: "RWReader", rw: locklogic.Read, owners: []string{"a", "b", "c"}},
	}
	scenarios := []struct {
		name string
		run  func(r *leaseRun)
	}{
		{"LateWritesAndFencing", func(r *leaseRun) {
			a := r.mustAcquire(0, 1, 0)
			issued := r.now().Add(500 * time.Millisecond) // A's requests, issued while its lease was live
			r.jump(1500 * time.Millisecond)
			b := r.mustAcquire(1, 30, 0)
			if b.FencingToken <= a.FencingToken {
				r.t.Errorf("B's token %d, want above A's %d", b.FencingToken, a.FencingToken)
			}
			late := r.at(issued)
			_, err := r.renew(late, 0, 30, nil)
			wantErr(r.t, "A's late renew", err, locklogic.ErrForbidden)
			wantErr(r.t, "A's late release", r.release(late, 0, nil), locklogic.ErrForbidden)
			if _, ok, _, err := r.acquire(late, 0, 30, 0, issued, 0, ""); ok || err != nil {
				r.t.Errorf("A's late re-acquire: got %v %v, want refused", ok, err)
			}
			if l := r.watch(); l == nil || l.Owner != r.owner(1) || l.FencingToken != b.FencingToken {
				r.t.Errorf("after A's late writes: got %+v, want B's lease %d", l, b.FencingToken)
			}
			if err := r.release(r.svc, 1, &b.FencingToken); err != nil {
				r.t.Fatal(err)
			}
			c := r.mustAcquire(2, 30, 0)
			if _, err := r.force(r.svc, true, nil); err != nil {
				r.t.Fatal(err)
			}
			d := r.mustAcquire(0, 30, 0)
			if !(a.FencingToken < b.FencingToken && b.FencingToken < c.FencingToken && c.FencingToken < d.FencingToken) {
				r.t.Errorf("tokens %d %d %d %d, want increasing across release and force release", a.FencingToken, b.FencingToken,
					c.FencingToken, d.FencingToken)
			}
		}},
		{"RenewOrdering", func(r *leaseRun) {
			r.mustAcquire(0, 10, 0)
			t0 := r.now()
			r.jump(2 * time.Second)
			later, err := r.renew(r.svc, 0, 10, nil)
			if err != nil {
				r.t.Fatal(err)
			}
			// A renewal stamped before that one lands after it: asking
			// for less, it is answered with the later lease; for more, it
			// raced.
			got, err := r.renew(r.at(t0.Add(time.Second)), 0, 5, nil)
			if err != nil || !got.ExpiresAt.Equal(later.ExpiresAt) {
				r.t.Errorf("an earlier, shorter renewal landing late: got %v %v, want the later lease to %v", got.ExpiresAt, err, later.ExpiresAt)
			}
			_, err = r.renew(r.at(t0.Add(time.Second)), 0, 20, nil)
			wantErr(r.t, "an earlier, longer renewal landing late", err, locklogic.ErrRenewRaced)
		}},
		{"LockDelay", func(r *leaseRun) {
			r.mustAcquire(0, 1, 3)
			r.jump(1500 * time.Millisecond)
			if _, ok, _, err := r.acquire(r.svc, 1, 30, 0, time.Time{}, 0, ""); ok || err != nil {
				r.t.Errorf("B inside A's lock-delay: got %v %v, want refused", ok, err)
			}
			if r.watch() != nil {
				r.t.Error("the watch shows the expired lease live")
			}
			if l := r.listed(); l == nil || l.Owner != r.owner(0) {
				r.t.Errorf("the listing inside the lock-delay: got %+v, want A's lease", l)
			}
			r.jump(3 * time.Second)
			r.mustAcquire(1, 30, 0)
		}},
		{"ForceRelease", func(r *leaseRun) {
			a := r.mustAcquire(0, 30, 5)
			wrong := a.FencingToken + 1
			_, err := r.force(r.svc, false, &wrong)
			wantErr(r.t, "a force release of another token", err, locklogic.ErrStaleToken)
			ended, err := r.force(r.svc, false, nil)
			if err != nil || ended.Owner != r.owner(0) || ended.FencingToken != a.FencingToken {
				r.t.Fatalf("force release: got %+v %v, want A's lease", ended, err)
			}
			_, err = r.renew(r.svc, 0, 30, nil)
			wantErr(r.t, "A's renew after the force release", err, locklogic.ErrForceReleased)
			_, err = r.force(r.svc, false, nil)
			wantErr(r.t, "a second force release", err, locklogic.ErrNothingToForce)
			for i := range 2 {
				if _, ok, _, err := r.acquire(r.svc, i, 30, 0, time.Time{}, 0, ""); ok || err != nil {
					r.t.Errorf("%s inside the lock-delay: got %v %v, want refused", r.owner(i), ok, err)
				}
			}
			if _, err := r.force(r.svc, true, nil); err != nil {
				r.t.Fatalf("immediate force release of the lock-delay: %v", err)
			}
			issued := r.now()
			r.jump(100 * time.Millisecond)
			b := r.mustAcquire(1, 30, 0)
			// A force release issued before B's grant does not end it.
			_, err = r.force(r.at(issued), false, nil)
			wantErr(r.t, "a late force release", err, locklogic.ErrStaleToken)
			if l := r.watch(); l == nil || l.FencingToken != b.FencingToken {
				r.t.Errorf("after the late force release: got %+v, want B's lease", l)
			}
		}},
		{"WatchRecord", func(r *leaseRun) {
			r.mustAcquire(0, 1, 0)
			issued := r.now().Add(500 * time.Millisecond)
			r.jump(1500 * time.Millisecond)
			if r.watch() != nil {
				r.t.Fatal("the watch shows the expired lease live")
			}
			// The watch recorded the expiry: a renewal issued before it,
			// landing now, revives nothing.
			_, err := r.renew(r.at(issued), 0, 30, nil)
			wantErr(r.t, "a late renew after the watched expiry", err, locklogic.ErrNotFound)
			// Nor does a force release issued before it end it again.
			_, err = r.force(r.at(issued), false, nil)
			wantErr(r.t, "a late force release after the watched expiry", err, locklogic.ErrNothingToForce)
			if r.watch() != nil {
				r.t.Error("the late renew revived the lease")
			}
		}},
		{"Queue", func(r *leaseRun) {
			a := r.mustAcquire(0, 30, 0)
			_, ok, ticket, err := r.acquire(r.svc, 1, 30, 0, time.Time{}, 1, "")
			if ok || err != nil || ticket == "" {
				r.t.Fatalf("W's wait behind A: got %v %v ticket %q, want a place", ok, err, ticket)
			}
			if err := r.release(r.svc, 0, &a.FencingToken); err != nil {
				r.t.Fatal(err)
			}
			if _, ok, _, err := r.acquire(r.svc, 2, 30, 0, time.Time{}, 0, ""); ok || err != nil {
				r.t.Errorf("C's plain acquire past W's place: got %v %v, want refused", ok, err)
			}
			w, ok, _, err := r.acquire(r.svc, 1, 30, 0, time.Time{}, 1, ticket)
			if !ok || err != nil || w.Owner != r.owner(1) {
				r.t.Errorf("W's next round with its ticket: got %v %v, want the lease", ok, err)
			}
		}},
		{"Admin", func(r *leaseRun) {
			a := r.mustAcquire(0, 30, 0)
			if l := r.listed(); l == nil || l.Owner != r.owner(0) || l.FencingToken != a.FencingToken {
				r.t.Errorf("the listing: got %+v, want A's lease %d", l, a.FencingToken)
			}
			if err := r.release(r.svc, 0, nil); err != nil {
				r.t.Fatal(err)
			}
			if l := r.listed(); l != nil {
				r.t.Errorf("the listing after the release: got %+v, want none", l)
			}
		}},
	}
	mode := testenv.DefaultStore()
	endpoint := testenv.Endpoint()
	if mode == testenv.StoreOldItem {
		endpoint = testenv.NewProxy(t, mode, nil).URL()
	}
	db, err := api.NewDynamoDB(context.Background(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			for _, k := range kinds {
				t.Run(k.name, func(t *testing.T) {
					r := &leaseRun{t: t, kind: k, name: fmt.Sprintf("lk-%s-%s-%d", sc.name, k.name, time.Now().UnixNano()),
						db: db, off: new(atomic.Int64), mode: mode, slot: k.slot}
					r.svc = locklogic.New(db, locklogic.Config{Table: testenv.Table, Now: r.now, FairWaiting: true,
						OldItemOnFailure: mode == testenv.StoreOldItem})
					if k.permits == 3 {
						// Slots 0 and 1 held for the whole scenario.
						for k2 := range 2 {
							o := homeOwners("fill", 3, k2, 1)[0]
							res, err := r.svc.AcquireSemaphore(context.Background(), locklogic.SemaphoreAcquireRequest{Name: r.name,
								Caller: locklogic.Caller{Owner: o}, TTLSeconds: 3600, Permits: 3}, locklogic.Budget{})
							if err != nil || !res.Acquired || res.Permit.Slot != k2 {
								t.Fatalf("filling slot %d: %+v %v", k2, res, err)
							}
						}
					}
					if k.rw == locklogic.Read {
						r.slot = fillReaders(t, r.svc, r.name)
					}
					sc.run(r)
				})
			}
		})
	}
}

// fillReaders takes all but one of read/write lock name's reader slots for
// the whole scenario and returns the one left free.
func fillReaders(tb testing.TB, svc *locklogic.Service, name string) int64 {
	tb.Helper()
	held := map[int]bool{}
	for i := range locklogic.MaxReaders - 1 {
		res, err := svc.AcquireRW(context.Background(), locklogic.RWAcquireRequest{Name: name, Mode: locklogic.Read,
			Caller: locklogic.Caller{Owner: fmt.Sprint("fill-", i)}, TTLSeconds: 3600}, locklogic.Budget{})
		if err != nil || !res.Acquired {
			tb.Fatalf("filling reader %d: %+v %v", i, res, err)
		}
		held[res.Lease.Slot] = true
	}
	for k := range locklogic.MaxReaders {
		if !held[k] {
			return int64(k)
		}
	}
	tb.Fatal("no reader slot left free")
	return 0
}

// TestSemaphoreChangeOfNTwiceLateRenew: a renewal issued while its permit
// was live, delayed across two changes of N (3 to 1, then back to 3),
// lands after both: it must not revive the permit. The first change of N
// judged it ended; the second, growing, conditions nothing it did not see
// below its old N — so the change of N records the expiry of every lease
// it judged ended (as a watch does), and the renewal is refused.
func TestSemaphoreChangeOfNTwiceLateRenew(t *testing.T) {
	t.Parallel()
	mode := testenv.DefaultStore()
	endpoint := testenv.Endpoint()
	if mode == testenv.StoreOldItem {
		endpoint = testenv.NewProxy(t, mode, nil).URL()
	}
	db, err := api.NewDynamoDB(context.Background(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	r := &leaseRun{t: t, kind: leaseKind{name: "Slot2Of3", permits: 3, slot: 2, owners: homeOwners("n", 3, 2, 1)},
		name: fmt.Sprintf("lk-n-twice-%d", time.Now().UnixNano()), db: db, off: new(atomic.Int64), mode: mode, slot: 2}
	r.svc = locklogic.New(db, locklogic.Config{Table: testenv.Table, Now: r.now, FairWaiting: true, OldItemOnFailure: mode == testenv.StoreOldItem})
	ctx := context.Background()
	a := r.mustAcquire(0, 1, 0)
	issued := r.now().Add(500 * time.Millisecond) // A's renewal, issued while its permit was live
	r.jump(1500 * time.Millisecond)
	for _, n := range []int64{1, 3} {
		c := locklogic.Caller{Owner: homeOwners(fmt.Sprint("x", n), 3, 0, 1)[0]} // not slot 2: a grant there would end A's lease anyway
		res, err := r.svc.AcquireSemaphore(ctx, locklogic.SemaphoreAcquireRequest{Name: r.name, Caller: c, TTLSeconds: 30, Permits: n},
			locklogic.Budget{})
		if err != nil || !res.Acquired {
			t.Fatalf("the change of N to %d: got %+v %v", n, res, err)
		}
		if err := r.svc.ReleaseSemaphore(ctx, locklogic.SemaphoreReleaseRequest{Name: r.name, Caller: c, Slot: int64(res.Permit.Slot)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = r.renew(r.at(issued), 0, 30, &a.FencingToken)
	wantErr(t, "A's renewal landing after both changes of N", err, locklogic.ErrNotFound)
	st, err := r.svc.SemaphoreStatus(ctx, r.name)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 0 {
		t.Errorf("after the late renewal: got holders %+v, want none", st.Holders)
	}
}
