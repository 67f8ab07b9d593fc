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

// goals of issue 18 ("Done when"), for 1, 4 and 16 waiters in the queue.
const (
	goalFairP50  = 25 * time.Millisecond
	goalFairP99  = 100 * time.Millisecond
	goalFIFO     = 99.0 // % of grants to the longest waiter
	goalSemFree  = 1    // requests of a semaphore acquire on a free permit
	goalSemColl  = 2    // … after a collision, the store returning the old item
	goalSemCollD = 3    // … on dynalite
)

// goalLockReads is the bound on the reads per second of a lock `waiters`
// wait for: 40 + 1 × (waiters − 1).
func goalLockReads(waiters int) float64 { return 40 + float64(waiters-1) }

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
// landed: the store's answer to a successful list_append, by lock and
// owner.
type joinLog struct {
	mu sync.Mutex
	at map[[2]string][]time.Time
}

func (j *joinLog) hook(op string, req []byte, status int, at time.Time) {
	if op != "UpdateItem" || status != http.StatusOK || !bytes.Contains(req, []byte("list_append(")) {
		return
	}
	var in struct {
		Key    map[string]struct{ S string }
		Values map[string]struct {
			L []struct{ M map[string]struct{ S string } }
		} `json:"ExpressionAttributeValues"`
	}
	if json.Unmarshal(req, &in) != nil {
		return
	}
	qe := in.Values[":qe"].L
	if len(qe) != 1 {
		return
	}
	k := [2]string{in.Key[locklogic.AttrResource].S, qe[0].M[locklogic.AttrOwner].S}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.at == nil {
		j.at = map[[2]string][]time.Time{}
	}
	j.at[k] = append(j.at[k], at)
}

// since returns the latest join of owner on resource at or after t0; ok
// false when there is none.
func (j *joinLog) since(resource, owner string, t0 time.Time) (time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	ts := j.at[[2]string{resource, owner}]
	if len(ts) == 0 || ts[len(ts)-1].Before(t0) {
		return time.Time{}, false
	}
	return ts[len(ts)-1], true
}

// hotRow is the hot lock: 16 waiters and a holder that releases at once.
type hotRow struct {
	random, fair handoffResult
	// bare is the store's rate of conditional writes of one item, one
	// after another, from the same SDK client on the same dynalite.
	bare float64
}

// hotWaiters is the number of waiters on the hot lock.
const hotWaiters = 16

// hotLock measures handoffs per second of one lock with hotWaiters waiters
// and zero hold time, random watch and fair queue, each for dur, and the
// store's bare conditional-write rate of one item for dur/2.
func hotLock(ctx context.Context, svcs map[mode]*service, joins *joinLog, dur time.Duration) (hotRow, error) {
	var row hotRow
	zero := func() time.Duration { return 0 }
	for _, m := range []mode{random, fair} {
		progress(fmt.Sprintf("hot lock: %d waiters, zero hold, %s, for %s", hotWaiters, m, dur))
		var j *joinLog
		if m == fair {
			j = joins
		}
		r, err := handoffs(svcs[m], m, j, hotWaiters, 1, dur, zero)
		if err != nil {
			return row, fmt.Errorf("hot lock, %s: %w", m, err)
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
	q.hot, err = hotLock(ctx, svcs, joins, set.hot)
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
		if p50 > goalFairP50 || p99 > goalFairP99 {
			missed = append(missed, fmt.Sprintf("handoff p50 ≤ %s and p99 ≤ %s with %d waiter%s (%s / %s)", ms(goalFairP50), ms(goalFairP99), h.waiters, plural(h.waiters), ms(p50), ms(p99)))
		}
		if h.waiters == 4 && (p50 > goalP50 || p99 > goalP99) {
			missed = append(missed, fmt.Sprintf("issue 9's handoff p50 ≤ %s and p99 ≤ %s with 4 waiters", ms(goalP50), ms(goalP99)))
		}
		fifoText = append(fifoText, fmt.Sprintf("%.1f %%", f.fifo()))
		if f.fifo() < goalFIFO {
			missed = append(missed, fmt.Sprintf("≥ %.0f %% of grants in arrival order with %d waiter%s (%.1f %%, %d of %d)", goalFIFO, h.waiters, plural(h.waiters), f.fifo(), f.inOrder, f.judged))
		}
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
	}, "≤ "+strings.Join(bounds, " / ")+" (40 + 1 × (waiters − 1))")
	if q.cost[fair][4].perWaiter > 1 {
		missed = append(missed, "one request per round")
	}
	row(fmt.Sprintf("hot lock, %d waiters, zero hold: handoffs per second (÷ the store's bare conditional writes of one item, one after another, same SDK client: %.0f/s); handoff p50 / p99", hotWaiters, q.hot.bare),
		func(m mode) string {
			var r handoffResult
			switch m {
			case random:
				r = q.hot.random
			case fair:
				r = q.hot.fair
			default:
				return "–"
			}
			return fmt.Sprintf("%.1f/s (%.3f×); %s / %s", r.rate, r.rate/q.hot.bare, ms(quantile(r.lat, .5)), ms(quantile(r.lat, .99)))
		}, "–")
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
	text := fmt.Sprintf("in the fair queue a released lock reaches the next waiter in p50 / p99 %s (random watch with 4: %s / %s; client polling %s / %s), %s of grants to the longest waiter, %s reads/s on the waited-on lock (≤ %s); a waiter sends %.3f requests/s; hot lock %.1f handoffs/s (random watch %.1f) vs %.0f bare conditional writes/s; semaphore acquire free / collided / full %d / %d / %d requests (dynalite %d / %d / %d)",
		strings.Join(fairHand, ", "), ms(quantile(four.by[random].lat, .5)), ms(quantile(four.by[random].lat, .99)),
		ms(quantile(four.by[polling].lat, .5)), ms(quantile(four.by[polling].lat, .99)),
		strings.Join(fifoText, " / "), strings.Join(lockReads, " / "), strings.Join(bounds, " / "), q.cost[fair][4].api,
		q.hot.fair.rate, q.hot.random.rate, q.hot.bare, sem[1].free, sem[1].collided, sem[1].full, sem[0].free, sem[0].collided, sem[0].full)
	return text, missed
}
