package integration_test

import (
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// waitBody is an acquire body with wait_seconds.
func waitBody(owner string, ttl, wait int) string {
	b, _ := json.Marshal(map[string]any{"owner": owner, "ttl_seconds": ttl, "wait_seconds": wait})
	return string(b)
}

// timedReply is an answer and when it came.
type timedReply struct {
	reply
	at time.Time
}

// waitFor sends a waiting acquire in the background; the answer arrives on
// the channel.
func waitFor(t *testing.T, srv *testenv.Server, resource, owner string, ttl, wait int) <-chan timedReply {
	t.Helper()
	out := make(chan timedReply, 1)
	go func() {
		r := call(t, srv, "POST", waitPath(resource), waitBody(owner, ttl, wait))
		out <- timedReply{r, time.Now()}
	}()
	return out
}

// TestWaitAfterRelease: a waiter held at the service gets the lock right
// after the holder releases it, with one API request, a few reads and three
// writes (its first attempt, its join of the queue and the grant).
func TestWaitAfterRelease(t *testing.T) {
	t.Parallel()
	proxy := newProxy(t)
	srv := testenv.Start(t, testenv.Options{StoreEndpoint: proxy.URL()})
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 30)
	srv.Ops.Take()
	// The waiter's first read comes after its first write was refused:
	// from then on it is inside its wait.
	reading := make(chan struct{})
	var once sync.Once
	var readAt time.Time // the waiter's first read, set before reading closes
	proxy.SetPlan(func(r faultproxy.Request) faultproxy.Action {
		if r.Op == "GetItem" {
			once.Do(func() { readAt = time.Now(); close(reading) })
		}
		return faultproxy.Action{}
	})
	answer := waitFor(t, srv, r0, "waiter", 30, 5)
	select {
	case <-reading:
	case got := <-answer:
		t.Fatalf("waiter answered %d %s before it read the lock: want it waiting", got.status, got.raw)
	}
	released := time.Now()
	if r := call(t, srv, "DELETE", lockPath(r0), ownerBody("holder", token(t, held))); r.status != 204 {
		t.Fatalf("release: got %d %s", r.status, r.raw)
	}
	got := <-answer
	if got.status != 200 || got.json["acquired"] != true {
		t.Fatalf("waiter: got %d %s, want the lock", got.status, got.raw)
	}
	// The waiter, the head of the queue, reads every 40 ms on average. The bound
	// is far from that, for a loaded machine (-race, 2 cores), yet far
	// below the 4.5 s after which an unwoken wait would answer; make bench
	// measures the real handoff latency.
	if d := got.at.Sub(released); d > 2*time.Second {
		t.Errorf("waiter got the lock %s after the release, want within 2s (woken by the release, not the end of its wait)", d)
	}
	if tok := token(t, got.json["lock"].(map[string]any)); tok <= token(t, held) {
		t.Errorf("waiter's token %d, want more than the holder's %d", tok, token(t, held))
	}
	ops := srv.Ops.Take()
	// Writes: the waiter's first attempt, its join, the release, the
	// grant; reads: the consistent one before the join (dynalite returns
	// no old item), then the head's watch, about 25 a second: at most one
	// per 20 ms of its wait (a slow release lengthens the wait, not the
	// rate), and a few more.
	maxReads := 3 + int(got.at.Sub(readAt)/(20*time.Millisecond))
	t.Logf("DynamoDB requests %v in a wait of %v (at most %d reads)", ops, got.at.Sub(readAt), maxReads)
	if ops["UpdateItem"] != 4 || ops["GetItem"] < 1 || ops["GetItem"] > maxReads {
		t.Errorf("DynamoDB requests: got %v in a wait of %v, want 4 UpdateItem and 1 to %d GetItem (about 25 a second of waiting)",
			ops, got.at.Sub(readAt), maxReads)
	}
}

// TestWaitAfterExpiry: the holder never releases; the waiter gets the lock
// the moment the lease expires (it read the expiry, so it writes then).
func TestWaitAfterExpiry(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	held := acquire(t, srv, r0, "holder", 1)
	exp, err := time.Parse(time.RFC3339, held["expires_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	got := <-waitFor(t, srv, r0, "waiter", 30, 5)
	if got.status != 200 || got.json["acquired"] != true {
		t.Fatalf("waiter: got %d %s, want the lock after the holder's expiry", got.status, got.raw)
	}
	acquired, err := time.Parse(time.RFC3339, got.json["lock"].(map[string]any)["acquired_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if d := acquired.Sub(exp); d < 0 || d > 1500*time.Millisecond {
		t.Errorf("waiter's lease starts %s after the holder's expiry, want within 1.5s (slack for a loaded machine; make bench measures latency)", d)
	}
}

// TestWaitRunsOut: a lock that stays held answers acquired:false half a
// second before wait_seconds, with its place in the queue, after two
// writes (the first attempt and the join), and the lock is untouched.
func TestWaitRunsOut(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	acquire(t, srv, r0, "holder", 30)
	srv.Ops.Take()
	start := time.Now()
	got := <-waitFor(t, srv, r0, "waiter", 30, 2)
	if got.status != 200 || got.json["acquired"] != false || got.json["resource"] != r0 || got.json["queue_ticket"] == nil {
		t.Fatalf("waiter: got %d %s, want 200 acquired:false with a queue_ticket", got.status, got.raw)
	}
	if d := got.at.Sub(start); d < 2*time.Second-locklogic.GrantGuard || d > 2*time.Second {
		t.Errorf("answered after %s, want from %s to 2s", d, 2*time.Second-locklogic.GrantGuard)
	}
	// The head of the queue reads within the queue's read bound for one
	// waiter (QueueReadBound(1) a second: fast while it may be moving,
	// every 25 ms once it stands still), for the 1.5 s of its wait, and
	// once consistently before the join (fewer when a loaded dynalite
	// answers slowly).
	most := int(math.Ceil(locklogic.QueueReadBound(1)*1.5)) + 1
	if ops := srv.Ops.Take(); ops["UpdateItem"] != 2 || ops["GetItem"] < 5 || ops["GetItem"] > most {
		t.Errorf("DynamoDB requests: got %v, want 2 UpdateItem and 5 to %d GetItem", ops, most)
	}
	if st := call(t, srv, "GET", lockPath(r0), ""); st.json["owner"] != "holder" {
		t.Errorf("status after the wait: got %s, want still held by holder", st.raw)
	}
}

// TestWaitEndsBeforeDeadline: the invocation's deadline (the wait
// function's timeout) ends a wait early enough for the last write's budget
// and the reserve, so the caller gets the handler's own answer, not a
// timeout.
func TestWaitEndsBeforeDeadline(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{StoreBudget: 500 * time.Millisecond, Timeouts: map[string]time.Duration{"wait": 2 * time.Second}})

	r0 := res(t)
	acquire(t, srv, r0, "holder", 30)
	start := time.Now()
	got := <-waitFor(t, srv, r0, "waiter", 30, 20)
	if got.status != 200 || got.json["acquired"] != false {
		t.Fatalf("waiter: got %d %s, want 200 acquired:false before the deadline", got.status, got.raw)
	}
	// 2 s timeout − 300 ms reserve − 500 ms for the last write: 1.2 s.
	if d := got.at.Sub(start); d < time.Second || d > 2*time.Second {
		t.Errorf("answered after %s, want about 1.2s: before the 2s deadline", d)
	}
}

// TestChurnWithWaiting: workers that wait at the service take turns on one
// lock, each sending back the queue_ticket of its last held round; no two
// ever hold it at once, and the fencing tokens they get grow in the order
// they got the lock.
func TestChurnWithWaiting(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	r0 := res(t)
	const workers = 8
	var (
		holding  atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		tokens   []int64
		failures []string
		wg       sync.WaitGroup
	)
	stop := time.Now().Add(3 * time.Second)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := "w" + strconv.Itoa(w)
			ticket := ""
			for time.Now().Before(stop) {
				body := waitBody(owner, 5, 2)
				if ticket != "" {
					body = body[:len(body)-1] + `,"queue_ticket":"` + ticket + `"}`
				}
				r := call(t, srv, "POST", waitPath(r0), body)
				if r.status != 200 {
					mu.Lock()
					failures = append(failures, r.raw)
					mu.Unlock()
					return
				}
				ticket = ""
				if r.json["acquired"] != true {
					ticket, _ = r.json["queue_ticket"].(string)
					continue
				}
				if holding.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				tokens = append(tokens, token(t, r.json["lock"].(map[string]any)))
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // the critical section
				holding.Add(-1)
				tok := token(t, r.json["lock"].(map[string]any))
				if rel := call(t, srv, "DELETE", lockPath(r0), ownerBody(owner, tok)); rel.status != 204 {
					mu.Lock()
					failures = append(failures, rel.raw)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("failed answers: %v", failures)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d times two workers held the lock at once", n)
	}
	t.Logf("%d handoffs among %d waiting workers in 3s", len(tokens), workers)
	// Served in arrival order with 10 ms holds, the queue moves as fast as
	// the waiters behind the head learn that they moved up (the second in
	// line every 100 ms, the third every 250 ms, the others every second):
	// several handoffs a second. make bench measures it.
	if len(tokens) < 4 {
		t.Errorf("got %d handoffs in 3s, want at least 4 (a few a second)", len(tokens))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d: fencing tokens must grow with every grant", tokens[i], tokens[i-1])
		}
	}
}
