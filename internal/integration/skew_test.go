package integration_test

import (
	"testing"
	"time"

	"github.com/ft288/locks/internal/verify/chaos"
)

// TestSkew runs two service instances over one store with their clocks
// apart, under a workload where most leases end by expiry (holders stall
// past their deadline) and contenders take them over, on 1 s leases: a
// client margin of min(ttl/10, 1 s) = 100 ms.
//
// A grant served by an instance d behind another can be taken over, by a
// request the other instance serves, d before the lease's end on the
// first instance's clock, while its holder relies on it until invoke +
// ttl - margin. So mutual exclusion holds while d < margin (strictly: the
// service truncates :now to milliseconds, so d ≤ margin - 1 ms), here
// below 100 ms; TestChaos runs at 80 ms with every fault on. Past the
// margin the checker must find overlapping holds (of a lock, or more than N
// of a semaphore), and only those: tokens,
// grants and the store's history stay sound, skew costs mutual exclusion
// (and liveness), nothing else.
func TestSkew(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, skew time.Duration, seed uint64) *chaos.Result {
		return runChaos(t, chaos.Config{
			Seed: seed, Duration: 4 * time.Second, Clients: 6, TTLs: []int64{1}, Abandon: 0.6,
			// Set clients poll with tries: a set that waits holds its
			// first names through its rounds (up to 3 s of a 4 s run) and
			// leaves the single-lock clients too few takeovers to judge.
			SetWaits:  -1,
			Instances: []chaos.Instance{{Offset: -skew / 2}, {Offset: skew / 2}},
			Recovery:  -1,
			Check:     chaos.Options{Slack: time.Second},
		})
	}
	// A run on a loaded machine may do too little to mean anything: up to
	// three seeds, until one does (every run's summary is logged).
	t.Run("WithinMargin", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(3) {
			res := run(t, 90*time.Millisecond, 5+seed)
			for _, v := range res.Report.Violations {
				t.Error(v)
			}
			if res.Report.Holds >= 10 {
				return
			}
			t.Logf("only %d holds: too few takeovers to mean anything", res.Report.Holds)
		}
		t.Error("no run of three had 10 holds")
	})
	t.Run("PastMargin", func(t *testing.T) {
		t.Parallel()
		var res *chaos.Result
		for seed := range uint64(3) {
			if res = run(t, 500*time.Millisecond, 5+seed); res.Report.Has(chaos.RuleMutualExclusion) {
				break
			}
		}
		if !res.Report.Has(chaos.RuleMutualExclusion) {
			t.Fatalf("500 ms of skew with a 100 ms margin, three runs: the checker found no overlapping holds (%v)", res.Report.Counts)
		}
		for _, v := range res.Report.Violations {
			// A semaphore's exclusion (at most N holders), a read/write
			// lock's (a writer alone, at most R readers) and a lock set's
			// (each name held from the answer on) are the lock's, per
			// lease: skew breaks them the same way.
			switch v.Rule {
			case chaos.RuleMutualExclusion, chaos.RuleSemaphoreLimit, chaos.RuleRWExclusive, chaos.RuleRWReaders, chaos.RuleSetHeld:
			default:
				t.Errorf("skew should break only mutual exclusion (of locks, a semaphore's N, a read/write lock's), got %v", v)
				continue
			}
			if testing.Verbose() {
				t.Logf("as expected: %v", v)
			}
		}
	})
}
