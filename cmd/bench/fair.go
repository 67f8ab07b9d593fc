package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
	"github.com/ft288/locks/locklogic"
)

// goals of issue 18 ("Done when"), for 1, 4 and 16 waiters in the queue,
// and issue 21's for the hot lock.
const (
	goalFairP50  = 25 * time.Millisecond
	goalFairP99  = 100 * time.Millisecond
	goalFIFO     = 99.0 // % of grants to the longest waiter
	goalHotRate  = 30.0 // handoffs per second of the hot lock in the fair queue
	goalSemFree  = 1    // requests of a semaphore acquire on a free permit
	goalSemColl  = 2    // … after a collision, the store returning the old item
	goalSemCollD = 3    // … on dynalite
)

// goalLockReads is the bound on the reads per second of a lock `waiters`
// wait for, however fast its queue moves: locklogic.QueueReadBound,
// 62.5 × H(waiters − 1) (40 for one).
func goalLockReads(waiters int) float64 { return locklogic.QueueReadBound(waiters) }

// goalLockReadsText states goalLockReads.
const goalLockReadsText = "62.5 × (1 + H(waiters − 1))"

// handoffMissed returns the goals the fair queue's handoffs with n waiters
// missed: p50 and p99, and grants to the longest waiter.
func handoffMissed(n int, r handoffResult) []string {
	var missed []string
	p50, p99 := quantile(r.lat, .5), quantile(r.lat, .99)
	if p50 > goalFairP50 || p99 > goalFairP99 {
		missed = append(missed, fmt.Sprintf("handoff p50 ≤ %s and p99 ≤ %s with %d waiter%s (%s / %s)", ms(goalFairP50), ms(goalFairP99), n, plural(n), ms(p50), ms(p99)))
	}
	if r.fifo() < goalFIFO {
		missed = append(missed, fmt.Sprintf("≥ %.0f %% of grants in arrival order with %d waiter%s (%.1f %%, %d of %d)", goalFIFO, n, plural(n), r.fifo(), r.inOrder, r.judged))
	}
	return missed
}

// hotFigure, hotCell and hotGoal are the hot lock's row: the figure, one
// mode's cell (with the fair queue's reads when reads), and the goals.
func hotFigure(h hotRow) string {
	return fmt.Sprintf("hot lock, %d waiters, zero hold: handoffs per second (÷ the store's bare conditional writes of one item, one after another, same SDK client: %.0f/s); handoff p50 / p99; grants to the longest waiter; the fair queue's DynamoDB reads per second (per handoff)", hotWaiters, h.bare)
}

func hotCell(r handoffResult, h hotRow, reads bool) string {
	c := fmt.Sprintf("%.1f/s (%.3f×); %s / %s; %.0f %% (%d/%d)", r.rate, r.rate/h.bare, ms(quantile(r.lat, .5)), ms(quantile(r.lat, .99)), r.fifo(), r.inOrder, r.judged)
	if reads {
		c += fmt.Sprintf("; %.1f reads/s (%.1f)", h.reads, h.reads/r.rate)
	}
	return c
}

func hotGoal() string {
	return fmt.Sprintf("≥ %.0f/s; ≥ %.0f %%; ≤ %.0f reads/s (%s)", goalHotRate, goalFIFO, hotReadBound(), goalLockReadsText)
}

// hotReadBound is the bound on the hot lock's reads per second.
func hotReadBound() float64 { return goalLockReads(hotWaiters) }

// hotMissed returns the goals the fair queue's hot lock missed.
func hotMissed(h hotRow) []string {
	var missed []string
	if h.fair.rate < goalHotRate {
		missed = append(missed, fmt.Sprintf("hot lock ≥ %.0f handoffs/s (%.1f)", goalHotRate, h.fair.rate))
	}
	if h.fair.fifo() < goalFIFO {
		missed = append(missed, fmt.Sprintf("hot lock ≥ %.0f %% of grants in arrival order (%.1f %%, %d of %d)", goalFIFO, h.fair.fifo(), h.fair.inOrder, h.fair.judged))
	}
	if h.reads > hotReadBound() {
		missed = append(missed, fmt.Sprintf("hot lock ≤ %.0f reads/s (%.1f)", hotReadBound(), h.reads))
	}
	return missed
}

// mode is how waiters wait for a held lock.
type mode int

const (
	// polling: the client polls with plain attempts (WithoutServerWait).
	polling mode = iota
	// random: at the service with the queue off (FairWaiting false): every
	// waiter watches the item at random and the first write after a
	// release wins, as before issue 18.
	random
	// fair: at the service in the lock's queue (FairWaiting), as the
	// service's own setups run.
	fair
)

var modes = []mode{polling, random, fair}

func (m mode) String() string {
	return [...]string{"client polling", "random watch", "fair queue"}[m]
}

func (m mode) serverWait() bool { return m != polling }

// waiterCounts are the numbers of waiters the handoffs and the waiter
// costs are measured with.
var waiterCounts = []int{1, 4, 16}

// joinLog records, from a fair service's hook, when each queue join
// landed — the store's answer to a successful list_append, by lock and
// owner — and the queue version it wrote, which orders the joins of one
// lock as the store applied them (two answers a millisecond apart can
// reach the hook in either order).
type joinLog struct {
	mu sync.Mutex
	at map[[2]string][]arrival
}

// arrival is when a waiter arrived: at its join (joined, with the queue
// version the join wrote), or at its first request.
type arrival struct {
	t       time.Time
	version int64
	joined  bool
}

// before reports whether a arrived before b: by the queue versions their
// joins wrote when both joined the one lock's queue, else by time.
func (a arrival) before(b arrival) bool {
	if a.joined && b.joined {
		return a.version < b.version
	}
	return a.t.Before(b.t)
}

func (j *joinLog) hook(op string, req []byte, status int, at time.Time) {
	if op != "UpdateItem" || status != http.StatusOK || !bytes.Contains(req, []byte("list_append(")) {
		return
	}
	var in struct {
		Key    map[string]struct{ S string }
		Values map[string]struct {
			N string
			L []struct{ M map[string]struct{ S string } }
		} `json:"ExpressionAttributeValues"`
	}
	if json.Unmarshal(req, &in) != nil {
		return
	}
	qe := in.Values[":qe"].L
	version, err := strconv.ParseInt(in.Values[":qv1"].N, 10, 64)
	if len(qe) != 1 || err != nil {
		return
	}
	k := [2]string{in.Key[locklogic.AttrResource].S, qe[0].M[locklogic.AttrOwner].S}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.at == nil {
		j.at = map[[2]string][]arrival{}
	}
	j.at[k] = append(j.at[k], arrival{t: at, version: version, joined: true})
}

// since returns the latest join of owner on resource at or after t0; ok
// false when there is none.
func (j *joinLog) since(resource, owner string, t0 time.Time) (arrival, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	as := j.at[[2]string{resource, owner}]
	if len(as) == 0 || as[len(as)-1].t.Before(t0) {
		return arrival{}, false
	}
	return as[len(as)-1], true
}

// hotRow is the hot lock: 16 waiters and a holder that releases at once.
type hotRow struct {
	random, fair handoffResult
	// reads is the DynamoDB reads per second of the hot lock in the fair
	// queue (every GetItem its service sent during the run's dur).
	reads float64
	// bare is the store's rate of conditional writes of one item, one
	// after another, from the same SDK client on the same dynalite.
	bare float64
}

// hotWaiters is the number of waiters on the hot lock.
const hotWaiters = 16

// hotLock measures handoffs per second of one lock with hotWaiters waiters
// and zero hold time, in each of ms (random watch, fair queue) for dur,
// with the fair queue's reads per second, and the store's bare
// conditional-write rate of one item for dur/2.
func hotLock(ctx context.Context, svcs map[mode]*service, joins *joinLog, dur time.Duration, which ...mode) (hotRow, error) {
	var row hotRow
	zero := func() time.Duration { return 0 }
	for _, m := range which {
		progress(fmt.Sprintf("hot lock: %d waiters, zero hold, %s, for %s", hotWaiters, m, dur))
		var j *joinLog
		if m == fair {
			j = joins
		}
		// The reads of the run's dur: the service's GetItems from its start
		// until dur has passed (the runs after it, to the rounds' end, are
		// the clean-up).
		svcs[m].ddb.take()
		reads := make(chan int, 1)
		go func() {
			time.Sleep(dur)
			reads <- svcs[m].ddb.take()["GetItem"]
		}()
		r, err := handoffs(svcs[m], m, j, hotWaiters, 1, dur, zero)
		if err != nil {
			return row, fmt.Errorf("hot lock, %s: %w", m, err)
		}
		if m == fair {
			row.reads = float64(<-reads) / dur.Seconds()
		}
		if m == fair {
			row.fair = r
		} else {
			row.random = r
		}
	}
	progress(fmt.Sprintf("bare conditional writes of one item for %s", dur/2))
	rate, err := bareWriteRate(ctx, svcs[fair].db, dur/2)
	row.bare = rate
	return row, err
}

// bareWriteRate is the rate of conditional UpdateItems of one item, each
// conditioned on the value the one before wrote (a chain, as handoffs of
// one lock are), sent one after another on db for dur.
func bareWriteRate(ctx context.Context, db *dynamodb.Client, dur time.Duration) (float64, error) {
	key := map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: resourceName("bare")}}
	names := map[string]string{"#v": "v"}
	start := time.Now()
	n := 0
	for time.Since(start) < dur {
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                aws.String(table),
			Key:                      key,
			UpdateExpression:         aws.String("SET #v = :next"),
			ConditionExpression:      aws.String("attribute_not_exists(#v) OR #v = :prev"),
			ExpressionAttributeNames: names,
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":prev": &types.AttributeValueMemberN{Value: strconv.Itoa(n)},
				":next": &types.AttributeValueMemberN{Value: strconv.Itoa(n + 1)},
			},
		})
		if err != nil {
			return 0, fmt.Errorf("bare write %d: %w", n, err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// semCounts are the DynamoDB requests of semaphore operations.
type semCounts struct {
	free, collided, full, release int
}

func (c semCounts) String() string {
	return fmt.Sprintf("%d / %d / %d, %d", c.free, c.collided, c.full, c.release)
}

// semaphoreRequests counts the DynamoDB requests of a semaphore acquire
// whose guessed (home) slot is free, one whose guess collides with a held
// slot while the other is free, one of a full semaphore, and a release,
// through s's API (2 permits). Over a service with oldItem the count is the
// service's calls to the store (the wrapper's reads of the old item
// excluded); on dynalite, every request its SDK sends.
func semaphoreRequests(s *service, oldItem bool) (semCounts, error) {
	const permits = 2
	owner := func(prefix string) string {
		for i := range 1000 {
			o := fmt.Sprintf("%s-%d", prefix, i)
			if locklogic.HomeSlot(locklogic.Caller{Owner: o}, permits) == 0 {
				return o
			}
		}
		panic("no owner with home slot 0")
	}
	a, b, c := owner("a"), owner("b"), owner("c")
	name := resourceName("sem")
	base := s.url + "/semaphores/" + url.PathEscape(name)
	hc := &http.Client{Transport: clientTransport, Timeout: 10 * time.Second}
	ctx := context.Background()
	take := func() int {
		n := 0
		cnt := &s.ddb
		if oldItem {
			cnt = &s.store
		}
		for k, v := range cnt.take() {
			if k == "GetItem" || k == "UpdateItem" || k == "DeleteItem" || k == "PutItem" {
				n += v
			}
		}
		return n
	}
	type acquired struct {
		Acquired bool
		Permit   *struct{ Slot int }
	}
	acquire := func(o string, want bool) (int, int, error) {
		take()
		var r acquired
		err := postJSON(ctx, hc, "POST", base, fmt.Sprintf(`{"owner":%q,"ttl_seconds":30,"permits":%d}`, o, permits), &r)
		if err == nil && r.Acquired != want {
			err = fmt.Errorf("semaphore acquire as %s: acquired %v, want %v", o, r.Acquired, want)
		}
		slot := -1
		if r.Permit != nil {
			slot = r.Permit.Slot
		}
		return take(), slot, err
	}
	var out semCounts
	var errs []error
	var slotA int
	var err error
	out.free, slotA, err = acquire(a, true)
	errs = append(errs, err)
	out.collided, _, err = acquire(b, true)
	errs = append(errs, err)
	out.full, _, err = acquire(c, false)
	errs = append(errs, err)
	take()
	errs = append(errs, postJSON(ctx, hc, "DELETE", base, fmt.Sprintf(`{"owner":%q,"slot":%d}`, a, slotA), nil))
	out.release = take()
	return out, errors.Join(errs...)
}

// waiterCostsAll measures the waiter costs of every mode with each number
// of waiters at once, each on its own runner (so the counts stay apart)
// over the same dynalite: client polling with 4 waiters, random watch and
// fair queue with 1, 4 and 16.
func waiterCostsAll(ctx context.Context, endpoint string, window time.Duration) (map[mode]map[int]costRow, error) {
	out := map[mode]map[int]costRow{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, m := range modes {
		out[m] = map[int]costRow{}
		counts := waiterCounts
		if m == polling {
			counts = []int{4}
		}
		for _, n := range counts {
			s, err := startService(ctx, endpoint, serviceOptions{fair: m == fair})
			if err != nil {
				return nil, err
			}
			defer s.close()
			wg.Go(func() {
				row, err := waiterCost(s, m, n, window)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("waiter cost, %s, %d waiters: %w", m, n, err))
				}
				out[m][n] = row
			})
		}
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// queueFigures are the figures of issue 18: requests per operation (locks
// and semaphores), the waiter costs, the handoffs of every mode and the
// hot lock.
type queueFigures struct {
	ops  []opCount
	sem  [2]semCounts // on dynalite; over a store that returns the old item
	cost map[mode]map[int]costRow
	hand []handoffRow
	hot  hotRow
}

// count counts the DynamoDB requests per operation on the service as it
// is served (the queue on): locks, and semaphores on dynalite and over a
// store that returns the old item, as DynamoDB does.
func (q *queueFigures) count(ctx context.Context, endpoint string) error {
	progress("counting DynamoDB requests per operation: locks, and semaphores on dynalite and over a store that returns the old item")
	svc, err := startService(ctx, endpoint, serviceOptions{fair: true})
	if err != nil {
		return err
	}
	defer svc.close()
	oldSvc, err := startService(ctx, endpoint, serviceOptions{fair: true, oldItem: true})
	if err != nil {
		return err
	}
	defer oldSvc.close()
	if q.ops, err = requestsPerOperation(svc); err != nil {
		return err
	}
	if q.sem[0], err = semaphoreRequests(svc, false); err != nil {
		return err
	}
	q.sem[1], err = semaphoreRequests(oldSvc, true)
	return err
}

// measure measures the waiter costs, the handoffs of every mode with 1, 4
// and 16 waiters, and the hot lock, one after another.
func (q *queueFigures) measure(ctx context.Context, endpoint string, set settings) error {
	progress(fmt.Sprintf("waiter cost: 1, 4 and 16 waiters on held locks for %s, random watch and fair queue (4 client polling), all at once", set.costWindow))
	var err error
	if q.cost, err = waiterCostsAll(ctx, endpoint, set.costWindow); err != nil {
		return err
	}
	// Polling and random watch on a service with the queue off, the fair
	// queue on one with it on, whose joins are logged (a waiter arrives
	// at its join there).
	joins := &joinLog{}
	randomSvc, err := startService(ctx, endpoint, serviceOptions{})
	if err != nil {
		return err
	}
	defer randomSvc.close()
	fairSvc, err := startService(ctx, endpoint, serviceOptions{fair: true, hook: joins.hook})
	if err != nil {
		return err
	}
	defer fairSvc.close()
	svcs := map[mode]*service{polling: randomSvc, random: randomSvc, fair: fairSvc}
	for _, n := range waiterCounts {
		row := handoffRow{waiters: n, arenas: arenas[n], by: map[mode]handoffResult{}}
		for _, m := range modes {
			progress(fmt.Sprintf("handoffs with %d waiters on each of %d locks, %s, for %s", n, arenas[n], m, set.handoff))
			var j *joinLog
			if m == fair {
				j = joins
			}
			r, err := handoffs(svcs[m], m, j, n, arenas[n], set.handoff, benchHold)
			if err != nil {
				return fmt.Errorf("handoffs with %d waiters, %s: %w", n, m, err)
			}
			if len(r.lat) == 0 {
				return fmt.Errorf("handoffs with %d waiters, %s: none in %s", n, m, set.handoff)
			}
			row.by[m] = r
		}
		q.hand = append(q.hand, row)
	}
	q.hot, err = hotLock(ctx, svcs, joins, set.hot, random, fair)
	return err
}

// runQueue is bench -queue: issue 18's figures alone, on a dynalite of
// their own.
func runQueue(quick bool) error {
	started := time.Now()
	set := settings{handoff: 12 * time.Second, hot: 6 * time.Second, costWindow: 19 * time.Second}
	if quick {
		set = settings{handoff: 2 * time.Second, hot: 2 * time.Second, costWindow: 4 * time.Second}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
	var q queueFigures
	if err := q.count(ctx, d.Endpoint); err != nil {
		return err
	}
	if err := q.measure(ctx, d.Endpoint, set); err != nil {
		return err
	}
	p := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	p("")
	p("Machine: %s. Run took %s.", machine(), time.Since(started).Round(time.Second))
	p("")
	text, missed := q.table(p)
	p("")
	verdict := "all goals met"
	if len(missed) > 0 {
		verdict = "goals missed: " + strings.Join(missed, "; ")
	}
	p("bench: %s; %s", text, verdict)
	return nil
}

// table prints the table of issue 18's figures (every mode side by side,
// and the goals) and returns the summary line's part and the goals
// missed (issue 18's, and issue 9's handoff and one request per round).
func (q queueFigures) table(p func(string, ...any)) (string, []string) {
	// row joins one cell per mode (client polling, random watch, fair
	// queue) and the goal into a row.
	row := func(figure string, cell func(m mode) string, goal string) {
		c := []string{figure}
		for _, m := range modes {
			c = append(c, cell(m))
		}
		p("| %s | %s |", strings.Join(c, " | "), goal)
	}
	perCount := func(m mode, f func(costRow) string) string {
		var xs []string
		for _, n := range waiterCounts {
			if r, ok := q.cost[m][n]; ok {
				xs = append(xs, f(r))
			} else {
				xs = append(xs, "–")
			}
		}
		return strings.Join(xs, " / ")
	}
	p("| figure | client polling | random watch (FairWaiting off: before) | fair queue (after: as served) | goal |")
	p("|---|---|---|---|---|")
	var missed, fairHand, fifoText []string
	for _, h := range q.hand {
		row(fmt.Sprintf("handoff after a release, %d waiter%s (%d locks at once, holds 0.5–1.5 s): p50 / p99", h.waiters, plural(h.waiters), h.arenas),
			func(m mode) string {
				r := h.by[m]
				return fmt.Sprintf("%s / %s (n=%d)", ms(quantile(r.lat, .5)), ms(quantile(r.lat, .99)), len(r.lat))
			}, fmt.Sprintf("≤ %s / ≤ %s", ms(goalFairP50), ms(goalFairP99)))
		f := h.by[fair]
		p50, p99 := quantile(f.lat, .5), quantile(f.lat, .99)
		fairHand = append(fairHand, fmt.Sprintf("%d: %s / %s", h.waiters, ms(p50), ms(p99)))
		missed = append(missed, handoffMissed(h.waiters, f)...)
		if h.waiters == 4 && (p50 > goalP50 || p99 > goalP99) {
			missed = append(missed, fmt.Sprintf("issue 9's handoff p50 ≤ %s and p99 ≤ %s with 4 waiters", ms(goalP50), ms(goalP99)))
		}
		fifoText = append(fifoText, fmt.Sprintf("%.1f %%", f.fifo()))
	}
	row("grants that went to the longest waiter, 1 / 4 / 16 waiters (arrival: its join in the queue; with the queue off, its first request)", func(m mode) string {
		var xs []string
		for _, h := range q.hand {
			r := h.by[m]
			xs = append(xs, fmt.Sprintf("%.0f %% (%d/%d)", r.fifo(), r.inOrder, r.judged))
		}
		return strings.Join(xs, " / ")
	}, fmt.Sprintf("≥ %.0f %%", goalFIFO))
	row("API requests per waiter per second of waiting, 1 / 4 / 16 waiters", func(m mode) string {
		return perCount(m, func(r costRow) string { return fmt.Sprintf("%.3f", r.api) })
	}, "–")
	row("requests a waiter sent in the window (shorter than one 20 s round): tries + rounds on …/wait, 1 / 4 / 16 waiters", func(m mode) string {
		return perCount(m, func(r costRow) string { return fmt.Sprintf("%.2f + %.2f", r.tries, r.rounds) })
	}, "1 try + ≤ 1 round")
	row("DynamoDB reads per waiter per second, 1 / 4 / 16 waiters", func(m mode) string {
		return perCount(m, func(r costRow) string { return fmt.Sprintf("%.2f", r.reads) })
	}, "–")
	row("DynamoDB writes per waiter per second, 1 / 4 / 16 waiters", func(m mode) string {
		return perCount(m, func(r costRow) string { return fmt.Sprintf("%.3f", r.writes) })
	}, "–")
	var bounds, lockReads []string
	for _, n := range waiterCounts {
		bounds = append(bounds, fmt.Sprintf("%.0f", goalLockReads(n)))
		got := q.cost[fair][n].lockReads
		lockReads = append(lockReads, fmt.Sprintf("%.1f", got))
		if got > goalLockReads(n) {
			missed = append(missed, fmt.Sprintf("≤ %.0f reads/s on a lock %d wait for (%.1f)", goalLockReads(n), n, got))
		}
	}
	row("DynamoDB reads per second on the waited-on lock, 1 / 4 / 16 waiters", func(m mode) string {
		if m == polling {
			return "–"
		}
		return perCount(m, func(r costRow) string { return fmt.Sprintf("%.1f", r.lockReads) })
	}, "≤ "+strings.Join(bounds, " / ")+" ("+goalLockReadsText+")")
	if c := q.cost[fair][4]; c.tries > 1 || c.rounds > 1 {
		missed = append(missed, fmt.Sprintf("one try, then one request per round (%.2f tries and %.2f rounds a waiter)", c.tries, c.rounds))
	}
	row(hotFigure(q.hot), func(m mode) string {
		switch m {
		case random:
			return hotCell(q.hot.random, q.hot, false)
		case fair:
			return hotCell(q.hot.fair, q.hot, true)
		}
		return "–"
	}, hotGoal())
	missed = append(missed, hotMissed(q.hot)...)
	semCell := func(c semCounts) func(mode) string {
		return func(m mode) string {
			if m != fair {
				return "–"
			}
			return c.String()
		}
	}
	sem := q.sem
	row("semaphore DynamoDB requests, store returning the old item (as DynamoDB): acquire free / collided / full, release", semCell(sem[1]), fmt.Sprintf("free %d, collided %d", goalSemFree, goalSemColl))
	row("… on dynalite (a failed write's old item costs a read)", semCell(sem[0]), fmt.Sprintf("free %d, collided %d", goalSemFree, goalSemCollD))
	if sem[1].free != goalSemFree || sem[0].free != goalSemFree {
		missed = append(missed, fmt.Sprintf("a semaphore acquire on a free permit %d request (%d; dynalite %d)", goalSemFree, sem[1].free, sem[0].free))
	}
	if sem[1].collided != goalSemColl || sem[0].collided != goalSemCollD {
		missed = append(missed, fmt.Sprintf("after a collision %d requests, %d on dynalite (%d, %d)", goalSemColl, goalSemCollD, sem[1].collided, sem[0].collided))
	}
	var four handoffRow
	for _, h := range q.hand {
		if h.waiters == 4 {
			four = h
		}
	}
	text := fmt.Sprintf("in the fair queue a released lock reaches the next waiter in p50 / p99 %s (random watch with 4: %s / %s; client polling %s / %s), %s of grants to the longest waiter, %s reads/s on the waited-on lock (≤ %s); a waiter sends %.3f requests/s; hot lock %.1f handoffs/s (random watch %.1f) vs %.0f bare conditional writes/s, %.1f %% to the longest waiter, %.1f reads/s (≤ %.0f); semaphore acquire free / collided / full %d / %d / %d requests (dynalite %d / %d / %d)",
		strings.Join(fairHand, ", "), ms(quantile(four.by[random].lat, .5)), ms(quantile(four.by[random].lat, .99)),
		ms(quantile(four.by[polling].lat, .5)), ms(quantile(four.by[polling].lat, .99)),
		strings.Join(fifoText, " / "), strings.Join(lockReads, " / "), strings.Join(bounds, " / "), q.cost[fair][4].api,
		q.hot.fair.rate, q.hot.random.rate, q.hot.bare, q.hot.fair.fifo(), q.hot.reads, hotReadBound(), sem[1].free, sem[1].collided, sem[1].full, sem[0].free, sem[0].collided, sem[0].full)
	return text, missed
}

// runHandoff is bench -handoff: the fair queue's handoff rows (1, 4 and 16
// waiters) and the hot lock alone, on a dynalite of their own — the rows
// the queue's pacing decides, for tuning it.
func runHandoff(quick bool) error {
	started := time.Now()
	set := settings{handoff: 12 * time.Second, hot: 6 * time.Second}
	if quick {
		set = settings{handoff: 2 * time.Second, hot: 2 * time.Second}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
	joins := &joinLog{}
	fairSvc, err := startService(ctx, d.Endpoint, serviceOptions{fair: true, hook: joins.hook})
	if err != nil {
		return err
	}
	defer fairSvc.close()
	var q queueFigures
	for _, n := range waiterCounts {
		progress(fmt.Sprintf("handoffs with %d waiters on each of %d locks, %s, for %s", n, arenas[n], fair, set.handoff))
		r, err := handoffs(fairSvc, fair, joins, n, arenas[n], set.handoff, benchHold)
		if err != nil {
			return fmt.Errorf("handoffs with %d waiters: %w", n, err)
		}
		if len(r.lat) == 0 {
			return fmt.Errorf("handoffs with %d waiters: none in %s", n, set.handoff)
		}
		q.hand = append(q.hand, handoffRow{waiters: n, arenas: arenas[n], by: map[mode]handoffResult{fair: r}})
	}
	if q.hot, err = hotLock(ctx, map[mode]*service{fair: fairSvc}, joins, set.hot, fair); err != nil {
		return err
	}
	p := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	p("")
	p("Machine: %s. Run took %s.", machine(), time.Since(started).Round(time.Second))
	p("")
	p("| figure | fair queue | goal |")
	p("|---|---|---|")
	var missed []string
	for _, h := range q.hand {
		r := h.by[fair]
		p50, p99 := quantile(r.lat, .5), quantile(r.lat, .99)
		p("| handoff after a release, %d waiter%s (%d locks at once, holds 0.5–1.5 s): p50 / p99; grants to the longest waiter | %s / %s (n=%d); %.0f %% (%d/%d) | ≤ %s / ≤ %s; ≥ %.0f %% |",
			h.waiters, plural(h.waiters), h.arenas, ms(p50), ms(p99), len(r.lat), r.fifo(), r.inOrder, r.judged, ms(goalFairP50), ms(goalFairP99), goalFIFO)
		missed = append(missed, handoffMissed(h.waiters, r)...)
	}
	h := q.hot
	p("| %s | %s | %s |", hotFigure(h), hotCell(h.fair, h, true), hotGoal())
	missed = append(missed, hotMissed(h)...)
	verdict := "all goals met"
	if len(missed) > 0 {
		verdict = "goals missed: " + strings.Join(missed, "; ")
	}
	p("")
	p("bench -handoff: hot lock %.1f handoffs/s, %.1f %% to the longest waiter, %.1f reads/s (%.1f a handoff; bound %.0f); %s", h.fair.rate, h.fair.fifo(), h.reads, h.reads/h.fair.rate, hotReadBound(), verdict)
	return nil
}
