package integration_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// waitKind is a lock, or a semaphore of n permits, for the fair-queue
// tests whose history is the same for both: each method speaks the kind's
// wire (lock or permit) and route.
type waitKind struct {
	sem bool
	n   int // permits: 1 for a lock
}

var (
	lockKind = waitKind{n: 1}
	// semKind(n) is a semaphore of n permits; every waiter asks for n.
	semKind = func(n int) waitKind { return waitKind{sem: true, n: n} }
)

func (k waitKind) String() string {
	if k.sem {
		return fmt.Sprintf("Semaphore%d", k.n)
	}
	return "Lock"
}

// key is the item's key of name, for the queue helpers.
func (k waitKind) key(name string) string {
	if k.sem {
		return locklogic.SemaphorePrefix + name
	}
	return name
}

// hold takes name for owner (ttl 30, with lock-delay delay when above 0)
// and returns the lease, or fails the test.
func (k waitKind) hold(tb testing.TB, srv *testenv.Server, name, owner string, delay int) map[string]any {
	tb.Helper()
	switch {
	case !k.sem && delay > 0:
		return acquireDelay(tb, srv, name, owner, 30, delay)
	case !k.sem:
		return acquire(tb, srv, name, owner, 30)
	case delay == 0:
		return semAcquire(tb, srv, name, owner, 30, k.n)
	}
	r := call(tb, srv, "POST", semPath(name), semBody(map[string]any{"owner": owner, "ttl_seconds": 30, "permits": k.n,
		"lock_delay_seconds": delay}))
	return semGranted(tb, owner, timedReply{reply: r})
}

// wait sends owner's waiting acquire of name in the background; the
// answer arrives on the channel.
func (k waitKind) wait(t *testing.T, srv *testenv.Server, name, owner string, wait int) <-chan timedReply {
	t.Helper()
	if k.sem {
		return semWaitFor(t, srv, name, owner, k.n, wait, "")
	}
	return fifoWait(t, srv, name, owner, wait, "")
}

// granted returns the lease of a granted answer, or fails the test.
func (k waitKind) granted(tb testing.TB, who string, r timedReply) map[string]any {
	tb.Helper()
	if k.sem {
		return semGranted(tb, who, r)
	}
	return granted(tb, who, r)
}

// release releases owner's lease of name, or fails the test.
func (k waitKind) release(tb testing.TB, srv *testenv.Server, name, owner string, lease map[string]any) {
	tb.Helper()
	if k.sem {
		semRelease(tb, srv, name, owner, lease)
		return
	}
	release(tb, srv, name, owner, lease)
}

// forceRelease force-releases lease of name (its slot, for a semaphore)
// and returns the answer, or fails the test unless it is 200.
func (k waitKind) forceRelease(tb testing.TB, srv *testenv.Server, name string, lease map[string]any, immediate bool) reply {
	tb.Helper()
	m, path := map[string]any{"reason": "host gone", "immediate": immediate}, adminPath(name)
	if k.sem {
		m["slot"], path = slotOf(tb, lease), "/admin/semaphores/"+url.PathEscape(name)
	}
	b, _ := json.Marshal(m)
	r := call(tb, srv, "DELETE", path, string(b))
	if r.status != 200 {
		tb.Fatalf("force release: got %d %s", r.status, r.raw)
	}
	return r
}

// holds reports whether the store holds owner's lease of name (in the slot
// it was answered, beside n-1 other permits, for a semaphore), with the
// status answer it judged.
func (k waitKind) holds(tb testing.TB, srv *testenv.Server, name, owner string, lease map[string]any) (bool, reply) {
	tb.Helper()
	if k.sem {
		holders, st := semHolders(tb, srv, name)
		slot, ok := holders[owner]
		return ok && slot == slotOf(tb, lease) && len(holders) == k.n, st
	}
	st := call(tb, srv, "GET", lockPath(name), "")
	return st.status == 200 && token(tb, st.json) == token(tb, lease), st
}

// isHeadGrant reports whether an UpdateItem's body is the head's grant.
func (k waitKind) isHeadGrant(body string) bool {
	if k.sem {
		// The only write conditioned on the head's place that takes a
		// slot (a keep of place 0 sets no token).
		return strings.Contains(body, "#q[0].#qi = :tk") && strings.Contains(body, "if_not_exists")
	}
	// The only write that removes #q[0] along with the lease's attributes.
	return strings.Contains(body, ", #q[0]") && strings.Contains(body, "if_not_exists(#t")
}

// TestFairWaitingForceRelease: a force release while the head waits
// honours the lease's lock-delay (the head takes the lock, or the slot, at
// the free_at the force release answered, not before); an immediate one
// frees it for the head at once. For a lock and a semaphore of 1.
func TestFairWaitingForceRelease(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	for _, k := range []waitKind{lockKind, semKind(1)} {
		for _, immediate := range []bool{false, true} {
			t.Run(k.String()+"/"+map[bool]string{false: "LockDelay", true: "Immediate"}[immediate], func(t *testing.T) {
				t.Parallel()
				name := res(t)
				held := k.hold(t, srv, name, "holder", 2)
				answer := k.wait(t, srv, name, "waiter", 10)
				awaitJoin(t, srv, k.key(name), "waiter", 1)
				fr := k.forceRelease(t, srv, name, held, immediate)
				// free_at as the force release answered it: the head may
				// take the lease (and rewrite free_at) before any read of
				// the item.
				freeAt := msOf(t, fr.json, "free_at")
				at := msOf(t, k.granted(t, "waiter", <-answer), "acquired_at")
				if at < freeAt {
					t.Errorf("the head took the lease %d ms before free_at", freeAt-at)
				}
				if at > freeAt+1500 {
					t.Errorf("the head took the lease %d ms after free_at, want at once (within 1.5 s on a loaded machine)", at-freeAt)
				}
			})
		}
	}
}

// TestFairWaitingHeadGrantSDKRetry: the head's grant lands but its answer
// is lost; the SDK's retry finds the head's entry gone and is refused. The
// waiter must find its own grant (its grant id, in some slot for a
// semaphore) on the item and answer it, not wait on (or join again) behind
// its own lease. For a lock and a semaphore of 2, whose other permit stays
// held.
func TestFairWaitingHeadGrantSDKRetry(t *testing.T) {
	t.Parallel()
	for _, k := range []waitKind{lockKind, semKind(2)} {
		for _, fault := range []faultproxy.Fault{faultproxy.AppliedThen500, faultproxy.AppliedThenReset} {
			t.Run(k.String()+"/"+fault.String(), func(t *testing.T) {
				t.Parallel()
				proxy := newProxy(t)
				srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
				direct := testenv.Start(t, testenv.Options{})
				name := res(t)
				var n atomic.Int32
				proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
					if r.Op == "UpdateItem" && k.isHeadGrant(string(r.Body)) && n.Add(1) == 1 {
						return faultproxy.Action{Fault: fault}
					}
					return faultproxy.Action{}
				})
				held := k.hold(t, direct, name, "holder", 0)
				others := map[string]map[string]any{}
				for i := 1; i < k.n; i++ {
					owner := fmt.Sprintf("other%d", i)
					others[owner] = k.hold(t, direct, name, owner, 0)
				}
				answer := k.wait(t, srv, name, "waiter", 3)
				awaitJoin(t, direct, k.key(name), "waiter", 1)
				k.release(t, direct, name, "holder", held)
				got := <-answer
				if n.Load() == 0 {
					t.Fatal("the head's grant was never sent")
				}
				lease := k.granted(t, "waiter whose grant's answer was lost", got)
				if ok, st := k.holds(t, direct, name, "waiter", lease); !ok {
					t.Errorf("the store holds %d %s; want the lease the waiter was answered, beside %d other holder(s)", st.status, st.raw, len(others))
				}
				if q := queueOf(t, direct, k.key(name)); len(q) != 0 {
					t.Errorf("queue: %+v, want empty (the grant removed the head's entry)", q)
				}
				for owner, lease := range others {
					k.release(t, direct, name, owner, lease)
				}
			})
		}
	}
}
