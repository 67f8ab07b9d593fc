package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/faultproxy"
)

// Config is one chaos run. Zero values are the defaults.
type Config struct {
	// Endpoint is the store (dynalite) the fault proxy forwards to, and
	// Table the lock table in it (required).
	Endpoint string
	Table    string
	// Seed fixes the fault drawn for the n-th store request and every
	// client's choices (not the interleaving, which is up to the
	// scheduler; a violation's excerpt is its exact reproduction).
	Seed uint64
	// Rates are the per-fault probabilities (none: no faults), MaxDelay
	// the longest drawn delay (faultproxy.DefaultMaxDelay).
	Rates    faultproxy.Rates
	MaxDelay time.Duration
	// Duration is how long the clients run with faults (10 s).
	Duration time.Duration
	// Clients run concurrently (8) on Resources resources (3), each
	// request with a ttl_seconds drawn from TTLs ({1, 2, 3}).
	Clients   int
	Resources int
	TTLs      []int64
	// SharedOwners is how many owner names are each used by two clients
	// (0 by default: every client has its own), as two processes of one
	// worker share a chosen owner (lockctl --owner): clients 2k and 2k+1
	// act as owner wk for k < SharedOwners. One client's waiting acquire
	// can then be in flight while the other acquires, renews or releases
	// the same owner's lease. At most Clients/2.
	SharedOwners int
	// Abandon is the chance (0.1 by default) that a holder, when it
	// picks a resource it holds, works past its lease without renewing or
	// releasing (a stalled process): the lease then ends by expiry and a
	// contender takes it over.
	Abandon float64
	// Waits is the chance (0.25 by default; negative: none) that an
	// acquire of a lock the client does not hold waits at the service,
	// for a round as the clients make them (see client.run).
	Waits float64
	// RandomWaiting turns fair waiting off (locklogic.Config.FairWaiting,
	// on in the service's own setups): waiters poll at random and the
	// first write after a release wins, as before the queue.
	RandomWaiting bool
	// Rounds is the chance (0.75 by default; negative: none) that a waiter
	// whose round ended held comes back at once with its queue_ticket for
	// another round, as the clients do (at most three more); otherwise it
	// leaves, and its place lapses 2 s after the round's end.
	Rounds float64
	// Semaphores are the permits (N) of the semaphores the workers take,
	// renew, release and read beside the locks, one semaphore each ({2}:
	// one semaphore of two permits; an empty, non-nil slice: none), every
	// client with the semaphore's N (at most 8 permits: the checker follows
	// 8 slots).
	Semaphores []int64
	// SemaphoreWaits is the chance that an acquire of a permit the client
	// does not hold waits at the service in the semaphore's queue, as
	// Waits for locks (0.2 by default; negative: none).
	SemaphoreWaits float64
	// SemaphoreWatches is the share of a semaphore's status calls (by a
	// client that holds none of its permits) made as a watch with a 1 s
	// wait and the index of the client's last answer (0.5 by default;
	// negative: none): its record of the expiries it answers (y<k>) is
	// then in the history.
	SemaphoreWatches float64
	// LockDelays is the chance that an acquire (of a lock or a permit)
	// asks for a lock-delay of 1 s (0.1 by default; negative: none): an
	// expired lease then keeps others out a second longer, a released one
	// does not.
	LockDelays float64
	// Instances are the service instances the clients spread their
	// requests over, all over the one proxy (one exact clock by default).
	Instances []Instance
	// StoreBudget is each instance's store budget (api.StoreBudget).
	StoreBudget time.Duration
	// OldItemOnFailure runs the store as DynamoDB answers a refused write
	// (the fault proxy adds the old item: faultproxy's old-item mode) and
	// the instances relying on it (locklogic.Config.OldItemOnFailure): the
	// path AWS takes. Off, the store answers as dynalite does.
	OldItemOnFailure bool
	// Recovery is how long the clients run after the faults stopped
	// (1 s); negative skips the recovery and final phases.
	Recovery time.Duration
	// SetClients are clients that take lock sets of 2 to 4 of the
	// resources (at most Resources; none with fewer than two) and nothing
	// else, each with an owner of its own (sk), after the other clients
	// (2 by default; negative: none): setclient.go.
	SetClients int
	// SetWaits is the chance that a set client's ask waits at the
	// service, as AcquireSet does: a try, then waiting rounds that bring
	// back their ticket, until granted (1 by default; negative: none).
	// Otherwise the ask polls with tries for 1 to 3 s (setclient.go).
	SetWaits float64
	// RWClients are clients that take read/write locks (RWLocks of
	// them, 2 by default) and nothing else, each with an owner of its own
	// (qk), after the set clients (4 by default; negative: none):
	// rwclient.go. RWWrites is the chance that a client asks for the
	// writer's lease rather than a reader's (0.3), RWWaits that it asks
	// with waiting rounds rather than tries (0.5; negative: none).
	RWClients int
	RWLocks   int
	RWWrites  float64
	RWWaits   float64
	// Election, when Election.Candidates is above zero, adds the
	// election workload on a lock of its own (LeaderResource).
	Election Election
	// Name prefixes the resource names (unique per run by default).
	Name string
	// Check configures the checker; its StoreBudget defaults to this
	// StoreBudget.
	Check Options
}

func (c *Config) defaults() {
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Clients <= 0 {
		c.Clients = 8
	}
	if c.Resources <= 0 {
		c.Resources = 3
	}
	if len(c.TTLs) == 0 {
		c.TTLs = []int64{1, 2, 3}
	}
	if c.Abandon == 0 {
		c.Abandon = 0.1
	}
	if c.Waits == 0 {
		c.Waits = 0.25
	}
	if c.Rounds == 0 {
		c.Rounds = 0.75
	}
	if c.SemaphoreWaits == 0 {
		c.SemaphoreWaits = 0.2
	}
	if c.SemaphoreWatches == 0 {
		c.SemaphoreWatches = 0.5
	}
	if c.LockDelays == 0 {
		c.LockDelays = 0.1
	}
	if c.SetClients == 0 {
		c.SetClients = 2
	}
	if c.SetWaits == 0 {
		c.SetWaits = 1
	}
	if c.RWClients == 0 {
		c.RWClients = 4
	}
	if c.RWLocks <= 0 {
		c.RWLocks = 2
	}
	if c.RWWrites == 0 {
		c.RWWrites = 0.3
	}
	if c.RWWaits == 0 {
		c.RWWaits = 0.5
	}
	if c.Semaphores == nil {
		c.Semaphores = []int64{2}
	}
	if len(c.Instances) == 0 {
		c.Instances = []Instance{{}}
	}
	if c.StoreBudget <= 0 {
		c.StoreBudget = api.StoreBudget
	}
	if c.Recovery == 0 {
		c.Recovery = time.Second
	}
	if c.Name == "" {
		c.Name = fmt.Sprintf("chaos-%d", time.Now().UnixNano())
	}
	if c.Check.StoreBudget <= 0 {
		c.Check.StoreBudget = c.StoreBudget
	}
	c.Election.defaults()
}

// owner is client i's owner name: wk for the two clients of shared owner
// k, ci for the other workers, ek for the election's candidate k, none for
// its observers.
func (c *Config) owner(i int) string {
	switch c.role(i) {
	case roleCandidate:
		return fmt.Sprintf("e%d", i-c.Clients)
	case roleObserver:
		return ""
	case roleSet:
		return fmt.Sprintf("s%d", i-c.setBase())
	case roleRW:
		return fmt.Sprintf("q%d", i-c.rwBase())
	}
	if i < 2*c.SharedOwners {
		return fmt.Sprintf("w%d", i/2)
	}
	return fmt.Sprintf("c%d", i)
}

// Result is a finished run: its history, the checker's report and the
// faults the proxy injected.
type Result struct {
	Config  Config
	History *History
	Report  Report
	Faults  map[faultproxy.Fault]int
}

// Run starts a fault proxy in front of cfg.Endpoint and the service
// instances behind it, runs the clients with faults for cfg.Duration, then
// stops the faults, lets every held-back write land, runs the clients a
// little longer (every answer must now be a success), waits until every
// lease the store recorded has expired and has a fresh owner take each
// resource (each must be granted), and checks the whole history.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if cfg.Endpoint == "" || cfg.Table == "" {
		return nil, errors.New("chaos: Endpoint and Table are required")
	}
	if cfg.Waits >= 1 {
		return nil, fmt.Errorf("chaos: Waits %g: want a chance below 1", cfg.Waits)
	}
	for _, n := range cfg.Semaphores {
		if n < 1 || n > maxSlots {
			return nil, fmt.Errorf("chaos: a semaphore of %d permits: want 1 to %d", n, maxSlots)
		}
	}
	if cfg.SemaphoreWaits >= 1 {
		return nil, fmt.Errorf("chaos: SemaphoreWaits %g: want a chance below 1", cfg.SemaphoreWaits)
	}
	if cfg.SharedOwners < 0 || 2*cfg.SharedOwners > cfg.Clients {
		return nil, fmt.Errorf("chaos: SharedOwners %d: want 0 to Clients/2 (%d)", cfg.SharedOwners, cfg.Clients/2)
	}
	proxy, err := faultproxy.New(cfg.Endpoint, nil)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	proxy.SetOldItemOnFailure(cfg.OldItemOnFailure)
	w := &workload{cfg: cfg, start: time.Now()}
	if cfg.Election.on() {
		w.leader = cfg.LeaderResource()
	}
	for _, in := range cfg.Instances {
		s, err := startServer(proxy.URL(), cfg.Table, cfg.StoreBudget, !cfg.RandomWaiting, cfg.OldItemOnFailure, in)
		if err != nil {
			return nil, err
		}
		defer s.close()
		w.urls = append(w.urls, s.url)
		w.offsets = append(w.offsets, in.Offset)
	}
	for i := range cfg.Resources {
		w.resources = append(w.resources, fmt.Sprintf("%s-r%d", cfg.Name, i))
	}
	w.permits = map[string]int64{}
	for i, n := range cfg.Semaphores {
		name := fmt.Sprintf("%s-s%d", cfg.Name, i)
		w.sems = append(w.sems, name)
		w.permits[name] = n
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	defer tr.CloseIdleConnections()
	// Far longer than any answer may take: a slow answer is recorded
	// as such, not cut short.
	longest := time.Duration(slices.Max(cfg.Election.Waits)) * time.Second
	w.http = &http.Client{Transport: tr, Timeout: longest + 3*cfg.StoreBudget + 10*time.Second}

	for i := range cfg.rwLocks() {
		w.rws = append(w.rws, fmt.Sprintf("%s-rw%d", cfg.Name, i))
	}
	n := cfg.rwBase() + cfg.rwClients()
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = &client{w: w, id: i, owner: cfg.owner(i), role: cfg.role(i),
			rng:   rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)),
			views: map[string]*view{}, semIndex: map[string]int64{}, rw: map[string]*rwWant{}}
	}
	if cfg.Rates.Total() > 0 {
		proxy.SetPlan(faultproxy.Schedule{Seed: cfg.Seed, Rates: cfg.Rates, MaxDelay: cfg.MaxDelay}.Plan())
	}
	w.runClients(ctx, clients, PhaseFaults, w.start.Add(cfg.Duration))
	proxy.SetPlan(nil)
	// Every request sent during the faults has now been answered or has
	// reached the store, late writes included.
	proxy.Settle()
	hist := &History{Start: w.start, Offsets: w.offsets}
	if cfg.Recovery > 0 && ctx.Err() == nil {
		hist.RecoveryFrom = time.Now()
		w.runClients(ctx, clients, PhaseRecovery, time.Now().Add(cfg.Recovery))
		for _, c := range clients {
			c.releaseAll(ctx)
		}
		proxy.Settle()
		w.final(ctx, proxy.Records())
	}
	proxy.Settle()
	hist.Ops = w.sortedOps()
	hist.Records = proxy.Records()
	res := &Result{Config: cfg, History: hist, Faults: map[faultproxy.Fault]int{}}
	for f, n := range proxy.Counts() {
		if f != faultproxy.None {
			res.Faults[f] = n
		}
	}
	res.Report = Check(hist, cfg.Check)
	return res, ctx.Err()
}

// workload is the clients' shared state.
type workload struct {
	cfg       Config
	start     time.Time
	urls      []string
	offsets   []time.Duration
	resources []string
	// sems are the semaphores' names, permits their N.
	sems    []string
	permits map[string]int64
	// rws are the read/write locks' names.
	rws []string
	// leader is the election's lock ("" without the election workload).
	leader string
	http   *http.Client

	mu  sync.Mutex
	ops []Op
	// calls numbers the set calls (Op.Call).
	calls int
}

func (w *workload) runClients(ctx context.Context, clients []*client, phase Phase, until time.Time) {
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { c.run(ctx, phase, until) })
	}
	wg.Wait()
}

// final waits until every lease the store recorded has expired on every
// instance's clock, then has a fresh owner take and release each resource.
func (w *workload) final(ctx context.Context, recs []faultproxy.Record) {
	ops, err := decodeRecords(recs)
	if err != nil {
		return // the checker reports undecodable records
	}
	// The leases, and the waiters' places in the queues: a plain acquire
	// does not pass a live place.
	// A lease with a lock-delay keeps others out that much longer after
	// its expiry (a renewal keeps the lease's lock-delay).
	var last, delay int64
	for _, s := range ops {
		if (s.outcome == applied || s.outcome == unknownOutcome) && s.kind != storeRead && s.kind != storeRelease {
			last = max(last, s.exp, s.entry.until, s.qt)
			delay = max(delay, s.delay)
		}
	}
	last += delay
	minOff := slicesMin(w.offsets)
	wait := time.Until(time.UnixMilli(last).Add(-minOff).Add(50 * time.Millisecond))
	select {
	case <-ctx.Done():
		return
	case <-time.After(wait):
	}
	p := &client{w: w, id: -1, rng: rand.New(rand.NewPCG(w.cfg.Seed, 0)), views: map[string]*view{}}
	for _, r := range w.all() {
		p.owner = "final-" + r[strings.LastIndexByte(r, '-')+1:]
		op := p.call(ctx, PhaseFinal, Acquire, r, 1, 0)
		if op.Granted {
			p.call(ctx, PhaseFinal, Release, r, 0, op.Lock.Token)
		}
	}
	for _, r := range w.sems {
		p.owner = "final-" + r[strings.LastIndexByte(r, '-')+1:]
		op := p.call(ctx, PhaseFinal, SemAcquire, r, 1, 0)
		if op.Granted {
			p.slot = int64(op.Lock.Slot)
			p.call(ctx, PhaseFinal, SemRelease, r, 0, op.Lock.Token)
		}
	}
	// A read/write lock is free once the writer is granted: no reader's
	// lease, no writer's and no live place keeps it out.
	p.mode = "write"
	for _, r := range w.rws {
		p.owner = "final-" + r[strings.LastIndexByte(r, '-')+1:]
		op := p.call(ctx, PhaseFinal, RWAcquire, r, 1, 0)
		if op.Granted {
			p.call(ctx, PhaseFinal, RWRelease, r, 0, op.Lock.Token)
		}
	}
}

// all returns every resource of the run: the workers' and the election's.
func (w *workload) all() []string {
	if w.leader == "" {
		return w.resources
	}
	return append(slices.Clone(w.resources), w.leader)
}

func slicesMin(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = min(m, d)
	}
	return m
}

func (w *workload) record(op Op) {
	w.mu.Lock()
	w.ops = append(w.ops, op)
	w.mu.Unlock()
}

// sortedOps returns the operations in invoke order, numbered in it.
func (w *workload) sortedOps() []Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	ops := append([]Op(nil), w.ops...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Invoke.Before(ops[j].Invoke) })
	for i := range ops {
		ops[i].ID = i
	}
	return ops
}

// client is one worker process: one request at a time, one owner name
// (its own, or shared with one other client: Config.SharedOwners), its own
// belief about each resource it holds.
type client struct {
	w     *workload
	id    int
	owner string
	role  role
	rng   *rand.Rand
	views map[string]*view
	// wait is the wait_seconds of the next acquire, ticket its
	// queue_ticket.
	wait   int64
	ticket string
	// asks counts a set client's asks (Op.Ask).
	asks int
	// slot is the slot of the next semaphore (or reader's) renew or
	// release, mode the mode of the next read/write lock call.
	slot int64
	mode string
	// rw is a read/write lock client's state, by lock (rwclient.go).
	rw map[string]*rwWant
	// semIndex is the index of the client's last semaphore watch answer,
	// by semaphore.
	semIndex map[string]int64
	// A candidate's lease: its ttl and the invoke time of the request
	// that last set its expiry (the grant or the latest renewal).
	leaseTTL  int64
	renewFrom time.Time
	// index is an observer's last answered index.
	index int64
	// set is a set client's set (nil: none).
	set *heldSet
}

func (c *client) view(r string) *view {
	v := c.views[r]
	if v == nil {
		v = &view{margin: c.w.cfg.Check.margin()}
		c.views[r] = v
	}
	return v
}

// run runs the client's role until the time is up: a worker picks a
// resource and an action that fits what it believes about it; candidates
// and observers run the election (election.go).
func (c *client) run(ctx context.Context, phase Phase, until time.Time) {
	switch c.role {
	case roleCandidate:
		c.campaign(ctx, phase, until)
		return
	case roleObserver:
		c.observe(ctx, phase, until)
		return
	case roleSet:
		c.runSets(ctx, phase, until)
		return
	case roleRW:
		c.runRW(ctx, phase, until)
		return
	}
	cfg := c.w.cfg
	for ctx.Err() == nil && time.Now().Before(until) {
		r := c.pick()
		v := c.view(r)
		ttl := cfg.TTLs[c.rng.IntN(len(cfg.TTLs))]
		tok := int64(0)
		if c.rng.IntN(2) == 0 {
			tok = v.token // the last token this client held, if any
		}
		// A semaphore's permit is taken, renewed, released and read as a
		// lease is; renew and release name the slot of the client's last
		// permit (a random one when it had none).
		acquire, renew, release, status, waits := Acquire, Renew, Release, Status, cfg.Waits
		if n, sem := c.w.permits[r]; sem {
			acquire, renew, release, status, waits = SemAcquire, SemRenew, SemRelease, SemStatus, cfg.SemaphoreWaits
			c.slot = int64(v.slot)
			if v.token == 0 {
				c.slot = c.rng.Int64N(n)
			}
		}
		x := c.rng.Float64()
		if v.live(time.Now()) {
			switch {
			case x < cfg.Abandon:
				// A stalled holder: no renewal, no release, and by the
				// time it looks again its lease has ended by expiry.
				sleepUntil(ctx, v.deadline.Add(time.Duration(c.rng.IntN(100))*time.Millisecond))
				v.held = false
			case x < cfg.Abandon+0.1:
				// Work under the lease a little, within its deadline.
				sleepUntil(ctx, minTime(v.deadline, time.Now().Add(time.Duration(c.rng.IntN(200))*time.Millisecond)))
			case x < 0.5:
				c.call(ctx, phase, renew, r, ttl, tok)
			case x < 0.82:
				c.call(ctx, phase, release, r, 0, tok)
			case x < 0.92:
				c.call(ctx, phase, status, r, 0, 0)
			default:
				c.call(ctx, phase, acquire, r, ttl, 0) // a re-acquire replaces the lease
			}
		} else {
			// The other actions keep their proportions whatever share
			// waits (y is x when Waits is 0.25).
			w := max(waits, 0)
			y := 0.25 + (x-w)/(1-w)*0.75
			switch {
			case x < w:
				// Wait at the service for a held lock, as the clients
				// do: a round of at most ⅔ of the lease's local validity
				// (ttl − margin), whole seconds, so a grant at its end
				// still leaves a third of the lease (none under 1 s).
				lease := time.Duration(ttl) * time.Second
				c.wait = int64((lease - cfg.Check.margin()(lease)) * 2 / 3 / time.Second)
				// A round that ends held with a place comes back with
				// its ticket (most of the time), or leaves it to lapse.
				for round := 0; ; round++ {
					op := c.call(ctx, phase, acquire, r, ttl, 0)
					c.ticket = ""
					if op.Ticket == "" || round == 3 || c.rng.Float64() >= cfg.Rounds || !time.Now().Before(until) {
						break
					}
					c.ticket = op.Ticket
				}
				c.wait = 0
			case y < 0.7:
				if op := c.call(ctx, phase, acquire, r, ttl, 0); op.Status == 200 && !op.Granted {
					// Held by someone else (or full): back off a little,
					// as a real client would.
					sleepUntil(ctx, time.Now().Add(time.Duration(c.rng.IntN(50))*time.Millisecond))
				}
			case y < 0.85 && status == SemStatus && c.rng.Float64() < cfg.SemaphoreWatches:
				// A semaphore's watch, as a client waiting for a change
				// makes it: its wait, the index of its last answer.
				c.wait = 1
				if op := c.call(ctx, phase, SemWatch, r, 0, 0); op.Watched != nil && op.Watched.Index > c.semIndex[r] {
					c.semIndex[r] = op.Watched.Index
				}
				c.wait = 0
			case y < 0.85:
				c.call(ctx, phase, status, r, 0, 0)
			case y < 0.93:
				c.call(ctx, phase, renew, r, ttl, tok) // of a lease it lost, or an unheard grant
			default:
				c.call(ctx, phase, release, r, 0, tok)
			}
		}
		sleepUntil(ctx, time.Now().Add(time.Duration(c.rng.IntN(20))*time.Millisecond))
	}
}

// pick chooses the resource to act on: mostly one the client holds, if
// any, so that holders renew and release as well as contend.
func (c *client) pick() string {
	var held []string
	now := time.Now()
	all := append(slices.Clone(c.w.resources), c.w.sems...)
	for _, r := range all {
		if c.view(r).live(now) {
			held = append(held, r)
		}
	}
	if len(held) > 0 && c.rng.Float64() < 0.7 {
		return held[c.rng.IntN(len(held))]
	}
	return all[c.rng.IntN(len(all))]
}

// releaseAll releases every lease the client believes it holds.
func (c *client) releaseAll(ctx context.Context) {
	if c.role == roleSet {
		c.releaseSet(ctx)
		return
	}
	if c.role == roleRW {
		c.releaseRW(ctx)
		return
	}
	for _, r := range c.w.all() {
		if v := c.view(r); v.live(time.Now()) {
			c.call(ctx, PhaseRecovery, Release, r, 0, v.token)
		}
	}
	for _, r := range c.w.sems {
		if v := c.view(r); v.live(time.Now()) {
			c.slot = int64(v.slot)
			c.call(ctx, PhaseRecovery, SemRelease, r, 0, v.token)
		}
	}
}

// call sends one request, records it with its times and answer, and
// updates the client's belief.
func (c *client) call(ctx context.Context, phase Phase, kind Kind, resource string, ttl, token int64) Op {
	inst := c.rng.IntN(len(c.w.urls))
	op := Op{Client: c.id, Owner: c.owner, Kind: kind, Resource: resource, TTL: ttl, Token: token, Instance: inst, Phase: phase}
	method, path, body := "POST", "/locks/"+url.PathEscape(resource), map[string]any{"owner": c.owner}
	switch kind {
	case Acquire:
		body["ttl_seconds"] = ttl
		if c.wait > 0 { // a waiting acquire: its own route
			path += "/wait"
			body["wait_seconds"] = c.wait
			op.Wait = c.wait
		}
	case Renew:
		path += "/renew"
		body["ttl_seconds"] = ttl
	case Release:
		method = "DELETE"
	case Status:
		method, body = "GET", nil
	case Watch:
		method, body = "GET", nil
		path += fmt.Sprintf("/watch?index=%d&wait_seconds=%d", c.index, c.wait)
		op.Index, op.Wait = c.index, c.wait
	case SemAcquire:
		path = "/semaphores/" + url.PathEscape(resource)
		op.Permits = c.w.permits[resource]
		body["ttl_seconds"], body["permits"] = ttl, op.Permits
		if c.wait > 0 {
			path += "/wait"
			body["wait_seconds"] = c.wait
			op.Wait = c.wait
		}
	case SemRenew:
		path = "/semaphores/" + url.PathEscape(resource) + "/renew"
		body["ttl_seconds"], body["slot"] = ttl, c.slot
		op.Slot = c.slot
	case SemRelease:
		method, path = "DELETE", "/semaphores/"+url.PathEscape(resource)
		body["slot"] = c.slot
		op.Slot = c.slot
	case SemStatus:
		method, path, body = "GET", "/semaphores/"+url.PathEscape(resource), nil
	case SemWatch:
		op.Index, op.Wait = c.semIndex[resource], c.wait
		method, path, body = "GET", "/semaphores/"+url.PathEscape(resource)+fmt.Sprintf("/watch?index=%d&wait_seconds=%d", op.Index, op.Wait), nil
	case RWAcquire, RWRenew, RWRelease, RWStatus:
		method, path, body = c.rwRequest(&op, body)
	}
	if (kind == Acquire || kind == SemAcquire || kind == RWAcquire) && phase != PhaseFinal && c.w.cfg.LockDelays > 0 && c.rng.Float64() < c.w.cfg.LockDelays {
		body["lock_delay_seconds"] = 1
		op.LockDelay = 1
	}
	if op.Wait > 0 && c.ticket != "" {
		body["queue_ticket"] = c.ticket
		op.QueueTicket = c.ticket
	}
	if token != 0 {
		body["fencing_token"] = token
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, c.w.urls[inst]+path, rd)
	if err != nil {
		panic(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	v := c.view(resource)
	op.Invoke = time.Now()
	op.ID = -1
	v.before(&op)
	resp, err := c.w.http.Do(req)
	if err == nil {
		op.Body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		op.Status = resp.StatusCode
		op.ContentType = resp.Header.Get("Content-Type")
		op.RetryAfter = resp.Header.Get("Retry-After")
	}
	op.Return = time.Now()
	if err != nil {
		op.Err, op.Status = err.Error(), 0
	}
	op.decode()
	v.after(&op)
	c.w.record(op)
	return op
}

func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
