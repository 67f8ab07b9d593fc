package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
)

// Read/write locks (issue 24): readers' try-acquires on one name against a
// lock's try-acquires on names of their own in the same run, and a
// writer's wait behind readers that keep the name read-held (docs/design.md,
// "Read/write locks", "Waiting: fair, writer-preferring by arrival": a
// queued writer keeps out every reader that arrives after it, so it waits
// only for the leases granted before it joined).

// rwClients is how many clients the reader throughput row runs, on one
// name (fewer than MaxReaders: no try is refused for want of a slot).
const rwClients = 16

// rwReaderTTL is the readers' lease in the writer's-wait row. The goal is
// a writer's wait of at most one such TTL before the last reader's lease
// ends (the readers it waits for were granted before it joined), then the
// queue's handoff, whose own goal is goalFairP99: a reader granted just
// before the writer joined that holds nearly its whole TTL puts the whole
// wait a handoff over one TTL.
const rwReaderTTL = 2 * time.Second

// rwReaderMargin and rwReaderRound are what the Go client uses for a
// lease of rwReaderTTL (client.Client's leaseMargin, min(TTL/10, 1 s), and
// its rounds of ⅔ × (TTL − margin) in whole seconds): the writer's-wait
// readers behave as a client's leases do, each stopping by its local
// deadline, TTL − margin after its request was sent.
const (
	rwReaderMargin = rwReaderTTL / 10
	rwReaderRound  = time.Second
)

// rwWaitReaders is how many readers keep the name read-held in the
// writer's-wait row.
const rwWaitReaders = 4

// rwFigures are the read/write lock rows.
type rwFigures struct {
	// The throughput run, each kind for dur: readers of one name, readers
	// of names of their own (the read route's own cost, without the one
	// item's), and a lock's try-acquires on names of their own (the
	// yardstick).
	dur                 time.Duration
	read, readOwn, lock tryTally
	// The writer's wait: from each ask to its grant; handoffs from the
	// last reader's release (just before its request was sent) to the
	// grant; held counts the asks at which a reader held the name (as the
	// readers know it).
	waits        []time.Duration
	handoffs     []time.Duration
	held         int
	readerGrants int
	waitFor      time.Duration
}

// tryTally is one kind's tries: the grants, the tries refused (acquired
// false) and failed (an error), the latencies of the granted tries with
// their releases, the DynamoDB requests (tries and releases) and the time
// it ran.
type tryTally struct {
	granted, refused, failed int
	lat                      []time.Duration
	reqs                     int
	took                     time.Duration
}

// perGrant is the DynamoDB requests per grant (with its release).
func (t tryTally) perGrant() float64 { return float64(t.reqs) / float64(max(1, t.granted)) }

// row renders t's figures after its grants per second.
func (t tryTally) row() string {
	return fmt.Sprintf("%d, %d; %s / %s; %.2f", t.refused, t.failed, ms(quantile(t.lat, 0.5)), ms(quantile(t.lat, 0.99)), t.perGrant())
}

// The kinds of tries in the throughput run.
type tryKind int

const (
	tryRead    tryKind = iota // a reader of the one name
	tryReadOwn                // a reader of a name of its own
	tryLock                   // a lock on a name of its own
)

func (t tryTally) rate() float64 { return float64(t.granted) / t.took.Seconds() }

type rwLeaseJSON struct {
	Mode         string `json:"mode"`
	Slot         int    `json:"slot"`
	FencingToken int64  `json:"fencing_token"`
}

type rwAnswer struct {
	Acquired    bool        `json:"acquired"`
	Lease       rwLeaseJSON `json:"lease"`
	QueueTicket string      `json:"queue_ticket"`
}

// rwRelease releases the lease l of name held by owner.
func rwRelease(s *service, name, owner string, l rwLeaseJSON) error {
	body := map[string]any{"owner": owner, "mode": l.Mode, "fencing_token": l.FencingToken}
	if l.Mode == "read" {
		body["slot"] = l.Slot
	}
	return setBenchDo(s, "DELETE", "/rwlocks/"+url.PathEscape(name), body, nil)
}

// measure runs the throughput rows for dur (in two halves of each kind,
// alternating, so a noisy neighbour weighs on both), then rounds of the
// writer's wait.
func (f *rwFigures) measure(ctx context.Context, endpoint string, dur time.Duration, rounds int) error {
	progress(fmt.Sprintf("read/write locks: %d readers on one name against %d lock clients on names of their own for %s each, then %d writers' waits behind %d readers (TTL %s)",
		rwClients, rwClients, dur, rounds, rwWaitReaders, rwReaderTTL))
	s, err := startService(ctx, endpoint, serviceOptions{fair: true})
	if err != nil {
		return err
	}
	defer s.close()
	f.dur = dur
	name := resourceName("rw")
	for range 2 {
		for _, k := range []tryKind{tryLock, tryRead, tryReadOwn} {
			if err := f.tries(ctx, s, k, name, dur/2); err != nil {
				return err
			}
		}
	}
	if f.read.granted == 0 || f.readOwn.granted == 0 || f.lock.granted == 0 {
		return fmt.Errorf("read/write locks: no grant (reads %d, on names of their own %d, locks %d)", f.read.granted, f.readOwn.granted, f.lock.granted)
	}
	return f.writerWait(ctx, s, rounds)
}

// tries runs rwClients clients for dur, each looping a try-acquire of kind k
// and, when granted, its release; name is the one name of tryRead.
func (f *rwFigures) tries(ctx context.Context, s *service, k tryKind, name string, dur time.Duration) error {
	var (
		mu   sync.Mutex
		t    tryTally
		errs atomic.Int64
		wg   sync.WaitGroup
	)
	s.ddb.take()
	start := time.Now()
	end := start.Add(dur)
	prefix := resourceName("rwlock-yardstick")
	for c := range rwClients {
		owner := fmt.Sprintf("bench-%d", c)
		wg.Go(func() {
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				var granted, refused bool
				t0 := time.Now()
				if k != tryLock {
					name := name
					if k == tryReadOwn {
						name = fmt.Sprintf("%s-%d-%d", prefix, c, i)
					}
					var ans rwAnswer
					err := setBenchDo(s, "POST", "/rwlocks/"+url.PathEscape(name)+"/read", map[string]any{"owner": owner, "ttl_seconds": 30}, &ans)
					if err == nil {
						granted, refused = ans.Acquired, !ans.Acquired
						if granted && rwRelease(s, name, owner, ans.Lease) != nil {
							errs.Add(1)
						}
					}
				} else {
					r := fmt.Sprintf("%s-%d-%d", prefix, c, i)
					var ans struct{ Acquired bool }
					err := setBenchDo(s, "POST", "/locks/"+url.PathEscape(r), map[string]any{"owner": owner, "ttl_seconds": 30}, &ans)
					if err == nil {
						granted, refused = ans.Acquired, !ans.Acquired
						if granted && setBenchDo(s, "DELETE", "/locks/"+url.PathEscape(r), map[string]any{"owner": owner}, nil) != nil {
							errs.Add(1)
						}
					}
				}
				took := time.Since(t0)
				mu.Lock()
				switch {
				case granted:
					t.granted++
					t.lat = append(t.lat, took)
				case refused:
					t.refused++
				default:
					t.failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.took = time.Since(start)
	t.reqs = sum(s.ddb.take())
	t.failed += int(errs.Load())
	dst := map[tryKind]*tryTally{tryRead: &f.read, tryReadOwn: &f.readOwn, tryLock: &f.lock}[k]
	dst.granted += t.granted
	dst.refused += t.refused
	dst.failed += t.failed
	dst.lat = append(dst.lat, t.lat...)
	dst.reqs += t.reqs
	dst.took += t.took
	return nil
}

// writerWait keeps a name read-held by rwWaitReaders readers (each waits
// for a reader's lease of rwReaderTTL in rounds of rwReaderRound, holds it
// for half to all of its local validity, TTL − rwReaderMargin from before
// its request was sent, releases it and asks again at once; their holds
// overlap) and, rounds
// times, after a random pause of up to one TTL (a random phase of the
// readers' leases), asks for the writer's lease with a waiting acquire,
// times the ask to the grant and releases it.
func (f *rwFigures) writerWait(ctx context.Context, s *service, rounds int) error {
	name := resourceName("rw-wait")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		holding atomic.Int64 // readers holding a lease, as they know it
		// lastRelease is when the latest reader's release was sent
		// (UnixNano): while the writer waits no reader is granted, so
		// the latest before its grant is the release it waited for.
		lastRelease atomic.Int64
		grants      atomic.Int64
		wg          sync.WaitGroup
	)
	ttl := int(rwReaderTTL / time.Second)
	for r := range rwWaitReaders {
		owner := fmt.Sprintf("reader-%d", r)
		wg.Go(func() {
			// Staggered starts, so that the readers' leases overlap.
			select {
			case <-time.After(time.Duration(r) * rwReaderTTL / rwWaitReaders):
			case <-ctx.Done():
				return
			}
			ticket := ""
			for ctx.Err() == nil {
				var ans rwAnswer
				body := map[string]any{"owner": owner, "ttl_seconds": ttl, "wait_seconds": int(rwReaderRound / time.Second)}
				if ticket != "" {
					body["queue_ticket"] = ticket
				}
				sent := time.Now()
				if err := setBenchDo(s, "POST", "/rwlocks/"+url.PathEscape(name)+"/read/wait", body, &ans); err != nil || !ans.Acquired {
					ticket = ans.QueueTicket
					continue
				}
				ticket = ""
				holding.Add(1)
				grants.Add(1)
				// Half to all of the lease's local validity, from before
				// the request was sent: the client's deadline, by which a
				// reader has stopped (a reader that answered late in its
				// round releases at once if that point has passed).
				validity := rwReaderTTL - rwReaderMargin
				end := sent.Add(validity/2 + rand.N(validity/2))
				select {
				case <-time.After(time.Until(end)):
				case <-ctx.Done():
				}
				holding.Add(-1)
				lastRelease.Store(time.Now().UnixNano())
				_ = rwRelease(s, name, owner, ans.Lease)
			}
		})
	}
	start := time.Now()
	// The readers' first leases overlap from the last one's start.
	time.Sleep(rwReaderTTL)
	for range rounds {
		time.Sleep(rand.N(rwReaderTTL)) // a random phase of the readers' leases
		if holding.Load() > 0 {
			f.held++
		}
		t0 := time.Now()
		ticket := ""
		for {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ans rwAnswer
			body := map[string]any{"owner": "writer", "ttl_seconds": 30, "wait_seconds": 10}
			if ticket != "" {
				body["queue_ticket"] = ticket
			}
			err := setBenchDo(s, "POST", "/rwlocks/"+url.PathEscape(name)+"/write/wait", body, &ans)
			if err != nil {
				return err
			}
			if !ans.Acquired {
				ticket = ans.QueueTicket
				continue
			}
			now := time.Now()
			f.waits = append(f.waits, now.Sub(t0))
			f.handoffs = append(f.handoffs, now.Sub(time.Unix(0, lastRelease.Load())))
			if err := rwRelease(s, name, "writer", ans.Lease); err != nil {
				return err
			}
			break
		}
	}
	f.waitFor = time.Since(start)
	cancel()
	wg.Wait()
	f.readerGrants = int(grants.Load())
	return nil
}

// ratio is the readers' grants per second on one name over the lock's on
// names of their own.
func (f *rwFigures) ratio() float64 { return f.read.rate() / f.lock.rate() }

// waitMax is the writer's longest wait.
func (f *rwFigures) waitMax() time.Duration { return quantile(f.waits, 1) }

// readersMax is the writer's longest wait up to the last reader's release.
func (f *rwFigures) readersMax() time.Duration {
	var m time.Duration
	for i, w := range f.waits {
		m = max(m, w-f.handoffs[i])
	}
	return m
}

// table prints the read/write lock rows and returns the goal missed, if
// any.
func (f *rwFigures) table(p func(string, ...any)) []string {
	p("| read/write locks (issue 24) | value |")
	p("|---|---|")
	p("| reader throughput: %d readers on one name, each a try-read then its release, no pause, %s: read grants/s (refused, failed; p50 / p99 of try + release; DynamoDB requests per grant) | **%.0f/s** (%s) |",
		rwClients, f.dur.Round(time.Second), f.read.rate(), f.read.row())
	p("| … %d readers on names of their own, same run | %.0f/s (%s) |", rwClients, f.readOwn.rate(), f.readOwn.row())
	p("| yardstick, same run: %d clients, a lock's try-acquire then its release on names of their own (the three kinds in turn, two rounds of %s each) | %.0f/s (%s) |",
		rwClients, (f.dur / 2).Round(100*time.Millisecond), f.lock.rate(), f.lock.row())
	p("| read grants/s on one name ÷ lock grants/s on names of their own (readers on names of their own ÷ locks) | **%.2f×** (%.2f×) |", f.ratio(), f.readOwn.rate()/f.lock.rate())
	p("| a writer's wait behind %d readers keeping the name read-held (TTL %s, each holds 50–100 %% of its local validity, TTL − 10 %% from before its request was sent, as the Go client's lease, releases and asks again at once), waiting acquire, ask to grant, %d rounds: p50 / max (goal: until the last reader's release ≤ one reader TTL, then a handoff ≤ %s) | **%s / %s** (until the last reader's release: max %s; after it, the handoff: p50 / max %s / %s; readers held the name at %d of %d asks; %d reader grants in %s) |",
		rwWaitReaders, rwReaderTTL, len(f.waits), ms(goalFairP99), ms(quantile(f.waits, 0.5)), ms(f.waitMax()), ms(f.readersMax()), ms(quantile(f.handoffs, 0.5)), ms(quantile(f.handoffs, 1)), f.held, len(f.waits), f.readerGrants, f.waitFor.Round(time.Second))
	var missed []string
	if f.readersMax() > rwReaderTTL {
		missed = append(missed, fmt.Sprintf("a writer's wait for the readers ≤ one reader TTL (%s)", rwReaderTTL))
	}
	if quantile(f.handoffs, 1) > goalFairP99 {
		missed = append(missed, fmt.Sprintf("a writer's handoff after the last reader ≤ %s", ms(goalFairP99)))
	}
	return missed
}

// summary is the read/write locks' part of the summary line.
func (f *rwFigures) summary() string {
	return fmt.Sprintf("%.0f read grants/s on one name (%.2f× a lock's on names of their own); a writer behind readers waits p50 / max %s / %s (readers' TTL %s; the handoff after the last reader's release at most %s)",
		f.read.rate(), f.ratio(), ms(quantile(f.waits, 0.5)), ms(f.waitMax()), rwReaderTTL, ms(quantile(f.handoffs, 1)))
}

// runRW is `bench -rw`: the read/write lock rows alone.
func runRW(quick bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dur, rounds := 6*time.Second, 12
	if quick {
		dur, rounds = 2*time.Second, 3
	}
	d, err := local.StartDynalite(ctx)
	if err != nil {
		return err
	}
	defer d.Close()
	db, err := api.NewDynamoDB(ctx, d.Endpoint)
	if err != nil {
		return err
	}
	if _, err := local.EnsureTable(ctx, db, table); err != nil {
		return err
	}
	var f rwFigures
	if err := f.measure(ctx, d.Endpoint, dur, rounds); err != nil {
		return err
	}
	p := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	p("")
	p("Machine: %s.", machine())
	p("")
	missed := f.table(p)
	verdict := "goals met"
	if len(missed) > 0 {
		verdict = "goals missed: " + strings.Join(missed, "; ")
	}
	p("")
	p("bench: %s (%s)", f.summary(), verdict)
	return nil
}
