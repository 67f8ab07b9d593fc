package integration_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/local"
)

// loadTally counts what a load's try-acquires were answered.
type loadTally struct {
	requests, throttled, unavailable, refused, granted, held atomic.Int64
	mu                                                       sync.Mutex
	winners                                                  []string
	other                                                    []string // answers no try should get
}

// try sends one try-acquire of resource as owner, retrying a 503 as the
// same owner (an unknown outcome, as a client does: its own lease, if the
// write landed, it takes again), and tallies every answer.
func (l *loadTally) try(t *testing.T, srv *testenv.Server, resource, owner string) reply {
	var r reply
	for attempt := 0; attempt < 6; attempt++ {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		r = call(t, srv, "POST", lockPath(resource), acquireBody(owner, 30))
		l.requests.Add(1)
		switch r.status {
		case 503:
			l.unavailable.Add(1)
			continue
		case 429:
			l.throttled.Add(1)
		case 500:
			l.refused.Add(1)
		}
		break
	}
	switch {
	case r.status == 200 && r.json["acquired"] == true:
		l.granted.Add(1)
		l.mu.Lock()
		l.winners = append(l.winners, owner)
		l.mu.Unlock()
	case r.status == 200 && r.json["acquired"] == false:
		l.held.Add(1)
	default:
		l.mu.Lock()
		l.other = append(l.other, fmt.Sprintf("%s as %s: %d %s", resource, owner, r.status, r.raw))
		l.mu.Unlock()
	}
	return r
}

// TestStackCarriesLoad: the runner with the default stack's capacity model
// (route throttles and Lambda's account pool, as deployed) takes 5 s of
// 100 try-acquires a second on distinct names, then 100 at once on
// distinct names, then 100 at once on one name without a 429 or a 500;
// each grant is real, and exactly one owner wins the one name.
func TestStackCarriesLoad(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Capacity: local.StackCapacity()})
	r0 := res(t)
	var steady, distinct, one loadTally

	// 5 s of 100 a second, each on a name of its own.
	var wg sync.WaitGroup
	tick := time.NewTicker(10 * time.Millisecond)
	for i := range 500 {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			steady.try(t, srv, fmt.Sprintf("%s-steady-%d", r0, i), "w")
		}()
	}
	tick.Stop()
	wg.Wait()

	// 100 at once on distinct names, then 100 at once on one name.
	burst := func(tally *loadTally, name func(i int) string) {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tally.try(t, srv, name(i), fmt.Sprintf("w%d", i))
			}()
		}
		close(start)
		wg.Wait()
	}
	burst(&distinct, func(i int) string { return fmt.Sprintf("%s-distinct-%d", r0, i) })
	burst(&one, func(int) string { return r0 + "-one" })

	for _, p := range []struct {
		name          string
		tally         *loadTally
		granted, held int64
	}{
		{"steady (100/s for 5 s)", &steady, 500, 0},
		{"100 at once, distinct names", &distinct, 100, 0},
		{"100 at once, one name", &one, 1, 99},
	} {
		l := p.tally
		t.Logf("%s: %d requests, %d answered 429, %d answered 503 (retried), %d granted, %d held",
			p.name, l.requests.Load(), l.throttled.Load(), l.unavailable.Load(), l.granted.Load(), l.held.Load())
		if l.throttled.Load() != 0 || l.refused.Load() != 0 || len(l.other) != 0 {
			t.Errorf("%s: %d answered 429 and %d answered 500, want none; %d final answers were not 200, the first: %v", p.name,
				l.throttled.Load(), l.refused.Load(), len(l.other), l.other[:min(3, len(l.other))])
		}
		if l.granted.Load() != p.granted || l.held.Load() != p.held {
			t.Errorf("%s: got %d granted and %d held, want %d and %d", p.name, l.granted.Load(), l.held.Load(), p.granted, p.held)
		}
	}
	if len(one.winners) == 1 {
		if st := call(t, srv, "GET", lockPath(r0+"-one"), ""); st.json["owner"] != one.winners[0] {
			t.Errorf("status of the one name: got owner %v, want the winner %s", st.json["owner"], one.winners[0])
		}
	}
	if c := srv.Counts(); len(c.Throttled) != 0 || len(c.Refused) != 0 {
		t.Errorf("the runner counted refusals %v and %v, want none", c.Throttled, c.Refused)
	}
}
