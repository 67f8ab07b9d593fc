package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ft288/locks/internal/verify/faultproxy"
)

// Summary is the run's one-line summary: what ran, how many operations by
// kind and outcome, the faults injected by kind, the late writes and
// unheard grants, the shared owners' conflicts, porcupine's verdict and the
// violations by rule.
func (r *Result) Summary() string {
	c, rep := r.Config, r.Report
	var b strings.Builder
	fmt.Fprintf(&b, "chaos seed=%d duration=%v clients=%d resources=%d instances=%d", c.Seed, c.Duration, c.Clients, c.Resources, len(c.Instances))
	if c.RandomWaiting {
		b.WriteString(" random-waiting")
	}
	if sk := skew(c.Instances); sk > 0 {
		fmt.Fprintf(&b, " skew=%v", sk)
	}
	if c.SharedOwners > 0 {
		fmt.Fprintf(&b, " shared-owners=%d", c.SharedOwners)
	}
	total := 0
	for _, n := range rep.Ops {
		total += n
	}
	watch := ""
	if n := rep.Ops[Watch]; n > 0 {
		watch = fmt.Sprintf(" watch=%d", n)
	}
	sem := ""
	if n := rep.Ops[SemAcquire] + rep.Ops[SemRenew] + rep.Ops[SemRelease] + rep.Ops[SemStatus] + rep.Ops[SemWatch]; n > 0 {
		sem = fmt.Sprintf(" semaphore: acquire=%d of which waiting=%d, renew=%d release=%d status=%d watch=%d", rep.Ops[SemAcquire], rep.SemWaiting,
			rep.Ops[SemRenew], rep.Ops[SemRelease], rep.Ops[SemStatus], rep.Ops[SemWatch])
	}
	fmt.Fprintf(&b, " ops=%d (acquire=%d of which waiting=%d, renew=%d release=%d status=%d%s%s; %s)", total,
		rep.Ops[Acquire], rep.Waiting, rep.Ops[Renew], rep.Ops[Release], rep.Ops[Status], watch, sem, counts(rep.Outcomes))
	if rep.LockDelays+rep.ExpiryRecords+rep.SemQueueWrites > 0 {
		fmt.Fprintf(&b, " lock-delays=%d expiry-records=%d semaphore-queue-writes=%d semaphore-head-grants=%d", rep.LockDelays, rep.ExpiryRecords, rep.SemQueueWrites, rep.SemHeadGrants)
	}
	faults := 0
	var parts []string
	for _, f := range faultproxy.Faults() {
		if n := r.Faults[f]; n > 0 {
			faults += n
			parts = append(parts, fmt.Sprintf("%s=%d", f, n))
		}
	}
	fmt.Fprintf(&b, " faults=%d (%s)", faults, strings.Join(parts, " "))
	fmt.Fprintf(&b, " late-writes=%d (applied=%d) unheard-grants=%d holds=%d", rep.LateWrites, rep.LateApplied, rep.UnheardGrants, rep.Holds)
	if len(c.Semaphores) > 0 {
		fmt.Fprintf(&b, " semaphores=%v permit-holds=%d", c.Semaphores, rep.PermitHolds)
	}
	if c.SharedOwners > 0 || rep.CoOwnerWaits+rep.CoOwnerReplaced > 0 {
		fmt.Fprintf(&b, " co-owner: grants-during-waits=%d replaced=%d", rep.CoOwnerWaits, rep.CoOwnerReplaced)
	}
	if n := rep.Ops[SetAcquire] + rep.Ops[SetRenew] + rep.Ops[SetRelease]; n > 0 {
		fmt.Fprintf(&b, " sets: clients=%d acquire=%d of which waiting=%d (granted=%d refused=%d late-grants=%d) renew=%d release=%d max-wait=%v (%s)",
			c.setClients(), rep.Ops[SetAcquire], rep.SetWaiting, rep.SetGrants, rep.SetRefusals, rep.SetLateGrants, rep.Ops[SetRenew], rep.Ops[SetRelease],
			rep.SetMaxWait.Round(time.Millisecond), rep.SetMaxWaitOwner)
	}
	if n := rep.Ops[RWAcquire] + rep.Ops[RWRenew] + rep.Ops[RWRelease] + rep.Ops[RWStatus]; n > 0 {
		fmt.Fprintf(&b, " rwlocks: clients=%d locks=%d acquire=%d of which waiting=%d (committed read=%d write=%d) renew=%d release=%d status=%d holds=%d max-readers=%d writer-waits=%d max-writer-wait=%v",
			c.rwClients(), c.rwLocks(), rep.Ops[RWAcquire], rep.RWWaiting, rep.RWReadGrants, rep.RWWriteGrants, rep.Ops[RWRenew], rep.Ops[RWRelease], rep.Ops[RWStatus],
			rep.RWHolds, rep.RWMaxReaders, len(rep.RWWriterWaits), rep.RWWriterMaxWait.Round(time.Millisecond))
	}
	if e := c.Election; e.on() {
		fmt.Fprintf(&b, " election: candidates=%d observers=%d leases=%d watch-answers=%d (changed=%d) skipped-reported=%d",
			e.Candidates, e.Observers, rep.WatchedLeases, rep.Watches, rep.WatchChanged, rep.WatchSkipped)
	}
	if rep.QueueJoins+rep.HeadGrants > 0 {
		fmt.Fprintf(&b, " queue: joins=%d keeps=%d prunes=%d head-grants=%d longest-waiter=%d/%d (own-lease re-acquires %d)", rep.QueueJoins, rep.QueueKeeps,
			rep.QueuePrunes, rep.HeadGrants, rep.LongestWaiterGrants, rep.ContestedGrants, rep.ContestedReacquires)
	}
	fmt.Fprintf(&b, " linearizable=%s", verdict(rep.Linearizable))
	fmt.Fprintf(&b, " violations=%d", rep.Total())
	if rep.Total() > 0 {
		fmt.Fprintf(&b, " (%s)", counts(rep.Counts))
	}
	return b.String()
}

// skew is the largest clock difference between two instances.
func skew(in []Instance) time.Duration {
	if len(in) == 0 {
		return 0
	}
	lo, hi := in[0].Offset, in[0].Offset
	for _, i := range in[1:] {
		lo, hi = min(lo, i.Offset), max(hi, i.Offset)
	}
	return hi - lo
}

// verdict folds porcupine's per-resource verdicts into one word: illegal
// if any is, else unknown if any is, else ok.
func verdict(m map[string]string) string {
	out := "ok"
	for _, v := range m {
		switch {
		case v == "illegal":
			return v
		case v == "unknown":
			out = v
		}
	}
	if len(m) == 0 {
		return "-"
	}
	return out
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
