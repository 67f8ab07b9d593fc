package integration_test

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
)

// A queue that moves fast, on dynalite: waiters that arrive at once all get
// a place, and a waiter far back reads more often as the queue serves the
// places ahead of it, so it takes the lock about as soon after a release
// as a lone waiter does (locklogic.PaceInterval).

// zeroHold runs waiters+1 workers on one lock: each takes it with waiting
// acquires through the API (sending its queue ticket back when a round
// ends held), releases it at once, and waits again only once another
// worker was granted, so that at every release `waiters` wait. It returns
// n handoff gaps after the first skip grants: from just before a release
// was sent to the next grant's answer; and the handoffs per second over
// them.
func zeroHold(t *testing.T, srv *testenv.Server, waiters, skip, n int) ([]time.Duration, float64) {
	t.Helper()
	r0 := res(t)
	var (
		mu         sync.Mutex
		cond       = sync.NewCond(&mu)
		grants     int
		releasedAt time.Time
		gaps       []time.Duration
		first      time.Time // the grant that opened the gaps counted
		last       time.Time
		done       bool
		wg         sync.WaitGroup
	)
	stop := func() {
		mu.Lock()
		done = true
		cond.Broadcast()
		mu.Unlock()
	}
	for w := range waiters + 1 {
		wg.Go(func() {
			owner := "w" + strconv.Itoa(w)
			ticket := ""
			for {
				r := call(t, srv, "POST", waitPath(r0), fifoBody(owner, 30, 10, ticket))
				got := time.Now()
				if r.status != 200 {
					t.Errorf("%s's waiting acquire: got %d %s, want 200", owner, r.status, r.raw)
					stop()
					return
				}
				if r.json["acquired"] != true {
					ticket, _ = r.json["queue_ticket"].(string)
					mu.Lock()
					over := done
					mu.Unlock()
					if over {
						return
					}
					continue
				}
				ticket = ""
				lock := r.json["lock"].(map[string]any)
				mu.Lock()
				grants++
				mine := grants
				switch {
				case grants == skip+1:
					first = got
				case grants > skip+1 && len(gaps) < n:
					gaps = append(gaps, got.Sub(releasedAt))
					last = got
				}
				if len(gaps) >= n {
					done = true
				}
				over := done
				releasedAt = time.Now()
				cond.Broadcast()
				mu.Unlock()
				release(t, srv, r0, owner, lock)
				if over {
					return
				}
				mu.Lock()
				for grants == mine && !done {
					cond.Wait()
				}
				over = done
				mu.Unlock()
				if over {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(gaps) < n {
		t.Fatalf("%d handoffs with %d waiters, want %d", len(gaps), waiters, n)
	}
	return gaps, float64(len(gaps)) / last.Sub(first).Seconds()
}

func median(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestFairWaitingFastQueueFollowed: with zero hold time, a lock that 8
// wait for passes from one waiter to the next about as fast as a lock
// that one waits for: each waiter reads more often as the places ahead of
// it are served, so it is watching closely when it becomes the head. A
// ratio in one run: at the tiers alone (the 4th place on reading once a
// second), a waiter learned of its promotion up to 1.5 s late and the
// median handoff took ~10× the lone waiter's.
func TestFairWaitingFastQueueFollowed(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	lone, loneRate := zeroHold(t, srv, 1, 2, 20)
	many, manyRate := zeroHold(t, srv, 8, 9, 40)
	t.Logf("handoff median: 1 waiter %v (%.1f/s), 8 waiters %v (%.1f/s)", median(lone), loneRate, median(many), manyRate)
	if median(many) > 3*median(lone) {
		t.Errorf("the median handoff with 8 waiters took %v, want at most 3× the lone waiter's %v", median(many), median(lone))
	}
}

// TestFairWaitingHerdJoins: 12 waiters that arrive at the same moment on a
// held lock all get a place in their first round: their joins collide
// (each is conditioned on the queue version), and a refused join is tried
// again after a random pause that grows with each refusal. Before, a
// waiter gave up after three refused joins and waited its whole round
// without a place, able to take the lock only once the queue was empty.
// Then every one of them is served.
func TestFairWaitingHerdJoins(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 30)
	const n = 12
	answers := make([]<-chan timedReply, n)
	for i := range n {
		answers[i] = fifoWait(t, srv, r0, "w"+strconv.Itoa(i), 20, "")
	}
	q := awaitQueue(t, srv, r0, strconv.Itoa(n)+" entries", func(q []qEntry) bool { return len(q) == n })
	t.Logf("queue: %d entries", len(q))
	release(t, srv, r0, "holder", held)
	pending := map[int]bool{}
	for i := range n {
		pending[i] = true
	}
	for len(pending) > 0 {
		got := -1
		var answer timedReply
		for got < 0 {
			for j := range pending {
				select {
				case answer = <-answers[j]:
					got = j
				default:
				}
				if got >= 0 {
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
		delete(pending, got)
		owner := "w" + strconv.Itoa(got)
		release(t, srv, r0, owner, granted(t, owner, answer))
	}
}
