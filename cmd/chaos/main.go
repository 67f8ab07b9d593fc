// Command chaos runs the lock service under injected store faults and
// checks what the clients saw: `make chaos`.
//
// By default it starts an in-memory dynalite, a fault proxy in front of it
// (internal/verify/faultproxy, with a seeded random schedule of every fault) and
// service instances over the proxy (the real handlers behind the local
// runner, serving waiters in arrival order unless -random-waiting), runs
// concurrent clients for -duration on locks and semaphores (-semaphores)
// (and, with -candidates, a leader election on a lock of its own, watched
// by -observers), then stops the faults
// and checks recovery, and checks the whole history (internal/verify/chaos). It
// prints the violations with their history excerpts to stderr and one
// summary line to stdout, and exits 1 on any violation.
//
// -save FILE keeps the run's history (JSON), and -check FILE only checks
// a saved history again: a seed fixes the faults and the clients' choices,
// not the timing, so a rare violation may not come back with its seed.
//
// With -proxy it only runs the fault proxy, in front of -target, until
// Ctrl-C, for poking at any DynamoDB-compatible endpoint by hand:
//
//	go run ./cmd/chaos -proxy -target http://127.0.0.1:8000 -addr 127.0.0.1:8001 -rates all
//	DYNAMODB_ENDPOINT=http://127.0.0.1:8001 make run
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/chaos"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/local"
)

func main() {
	var (
		duration  = flag.Duration("duration", 60*time.Second, "how long the clients run with faults")
		seed      = flag.Uint64("seed", 0, "seed of the fault schedule and the clients' choices (0: pick one and print it)")
		rates     = flag.String("rates", "all", "fault rates: all, none, or name=p,… ("+faultNames()+"); all,name=p overrides one")
		maxDelay  = flag.Duration("max-delay", faultproxy.DefaultMaxDelay, "longest injected delay (delay, and late after the caller gave up)")
		clients   = flag.Int("clients", 12, "concurrent clients")
		shared    = flag.Int("shared-owners", 3, "owner names each shared by two clients (two processes of one worker, as with lockctl --owner); 0: every client its own")
		resources = flag.Int("resources", 4, "locks they share")
		ttls      = flag.String("ttls", "1,2,3", "lease lengths in seconds the clients ask for")
		abandon   = flag.Float64("abandon", 0.1, "chance that a holder stalls past its lease instead of renewing or releasing")
		sems      = flag.String("semaphores", "2", "semaphores the workers also take permits of, by their N (comma-separated; \"\": none)")
		semWaits  = flag.Float64("semaphore-waits", 0.2, "chance that a permit's acquire waits at the service in the semaphore's queue (negative: none)")
		semWatch  = flag.Float64("semaphore-watches", 0.5, "share of a semaphore's status calls made as a 1 s watch (negative: none)")
		delays    = flag.Float64("lock-delays", 0.1, "chance that an acquire asks for a 1 s lock-delay (negative: none)")
		oldItem   = flag.Bool("old-item", false, "the store returns the old item with a refused write, as DynamoDB does (the path AWS takes); off: as dynalite does")
		random    = flag.Bool("random-waiting", false, "waiters poll at random instead of queueing in arrival order (locklogic.Config.FairWaiting off)")
		setCls    = flag.Int("set-clients", 2, "lock set workload: clients that take sets of 2 to 4 of the locks, each its own owner (0: none)")
		setWaits  = flag.Float64("set-waits", 1, "chance that a lock set client's ask waits at the service (a try, then waiting rounds with its ticket until granted) rather than polls with tries for 1-3 s (negative: none)")
		setGap    = flag.Duration("set-gap", 10*time.Second, "longest a set owner that keeps asking may go without a grant")
		rwCls     = flag.Int("rw-clients", 4, "read/write lock workload: clients that take readers' and writers' leases, each its own owner (0: none)")
		rwLocks   = flag.Int("rw-locks", 2, "read/write locks they share")
		rwWrites  = flag.Float64("rw-writes", 0.3, "chance that a read/write lock client wants the writer's lease rather than a reader's")
		rwWaits   = flag.Float64("rw-waits", 0.5, "chance that a read/write lock client asks with waiting rounds rather than tries (negative: none)")
		cands     = flag.Int("candidates", 3, "election workload: candidates campaigning for a leadership lock of its own (0: no election workload)")
		observers = flag.Int("observers", 2, "election workload: observers long-polling the leadership lock's watch route")
		instances = flag.Int("instances", 2, "service instances over the one store")
		skew      = flag.Duration("skew", 0, "clock spread of the instances: offsets from -skew/2 to +skew/2")
		budget    = flag.Duration("budget", api.StoreBudget, "each instance's store budget")
		slack     = flag.Duration("slack", 500*time.Millisecond, "how much longer than the store budget an answer may take")
		endpoint  = flag.String("endpoint", "", "DynamoDB-compatible endpoint to use (default: start an in-memory dynalite)")
		table     = flag.String("table", "chaos", "lock table (created when missing)")
		proxy     = flag.Bool("proxy", false, "only run the fault proxy in front of -target until interrupted")
		target    = flag.String("target", "", "with -proxy: the endpoint to forward to")
		addr      = flag.String("addr", "127.0.0.1:0", "with -proxy: the address to listen on")
		save      = flag.String("save", "", "write the run's history to this file (JSON), to check again with -check")
		recheck   = flag.String("check", "", "only check the history saved in this file (-save) with -slack, -set-gap and -budget; exit 1 on a violation")
	)
	flag.Parse()
	r, err := faultproxy.ParseRates(*rates)
	if err != nil {
		fail(err)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())%1_000_000 + 1
	}
	if *recheck != "" {
		code, err := checkSaved(*recheck, chaos.Options{StoreBudget: *budget, Slack: *slack, MaxPerRule: 3, SetGap: *setGap}, os.Stdout, os.Stderr)
		if err != nil {
			fail(err)
		}
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *proxy {
		if err := runProxy(ctx, os.Stdout, *addr, *target, faultproxy.Schedule{Seed: *seed, Rates: r, MaxDelay: *maxDelay}); err != nil {
			fail(err)
		}
		return
	}
	var ts []int64
	for _, s := range strings.Split(*ttls, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 1 {
			fail(fmt.Errorf("-ttls %q: want positive whole seconds", *ttls))
		}
		ts = append(ts, n)
	}
	ns := []int64{}
	for _, s := range strings.Split(*sems, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 1 {
			fail(fmt.Errorf("-semaphores %q: want permits, comma-separated", *sems))
		}
		ns = append(ns, n)
	}
	if *setCls == 0 {
		*setCls = -1 // none (the Config's zero is the default)
	}
	if *rwCls == 0 {
		*rwCls = -1
	}
	if *instances < 1 {
		fail(errors.New("-instances: want at least 1"))
	}
	cfg := chaos.Config{
		Seed: *seed, Rates: r, MaxDelay: *maxDelay, Duration: *duration,
		Clients: *clients, SharedOwners: *shared, Resources: *resources, TTLs: ts, Abandon: *abandon, StoreBudget: *budget, Table: *table,
		Semaphores: ns, SemaphoreWaits: *semWaits, SemaphoreWatches: *semWatch, LockDelays: *delays, OldItemOnFailure: *oldItem, RandomWaiting: *random,
		Election:   chaos.Election{Candidates: *cands, Observers: *observers},
		Check:      chaos.Options{Slack: *slack, MaxPerRule: 3, SetGap: *setGap},
		SetClients: *setCls, SetWaits: *setWaits,
		RWClients: *rwCls, RWLocks: *rwLocks, RWWrites: *rwWrites, RWWaits: *rwWaits,
	}
	for i := range *instances {
		var off time.Duration
		if *instances > 1 {
			off = -*skew/2 + time.Duration(i)*(*skew)/time.Duration(*instances-1)
		}
		cfg.Instances = append(cfg.Instances, chaos.Instance{Offset: off})
	}
	os.Exit(runWorkload(ctx, cfg, *endpoint, *save))
}

// saveHistory writes h to file (-save).
func saveHistory(file string, h *chaos.History) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := chaos.SaveHistory(f, h); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", file, err)
	}
	return f.Close()
}

// checkSaved checks the history saved in file (-save) again, prints its
// violations to stderr and a count of them to stdout, and returns the
// exit code: 1 on a violation.
func checkSaved(file string, opt chaos.Options, stdout, stderr io.Writer) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h, err := chaos.LoadHistory(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	rep := chaos.Check(h, opt)
	for _, v := range rep.Violations {
		fmt.Fprintln(stderr, "VIOLATION", v)
	}
	fmt.Fprintf(stdout, "chaos: %s: %d operations, %d store requests, violations=%d\n", file, len(h.Ops), len(h.Records), rep.Total())
	if rep.Total() > 0 {
		return 1, nil
	}
	return 0, nil
}

func runWorkload(ctx context.Context, cfg chaos.Config, endpoint, save string) int {
	if endpoint == "" {
		d, err := local.StartDynalite(ctx)
		if err != nil {
			fail(err)
		}
		defer d.Close()
		endpoint = d.Endpoint
	}
	db, err := api.NewDynamoDB(ctx, endpoint)
	if err != nil {
		fail(err)
	}
	if _, err := local.EnsureTable(ctx, db, cfg.Table); err != nil {
		fail(err)
	}
	cfg.Endpoint = endpoint
	fmt.Fprintf(os.Stderr, "chaos: seed %d, faults %s, %v with faults, store %s\n", cfg.Seed, cfg.Rates, cfg.Duration, endpoint)
	res, err := chaos.Run(ctx, cfg)
	if res == nil {
		fail(err)
	}
	if save != "" {
		if err := saveHistory(save, res.History); err != nil {
			fail(err)
		}
	}
	for _, v := range res.Report.Violations {
		fmt.Fprintln(os.Stderr, "VIOLATION", v)
	}
	fmt.Println(res.Summary())
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos: interrupted:", err)
		return 1
	case res.Report.Total() > 0:
		return 1
	}
	return 0
}

// runProxy serves the fault proxy on addr in front of target until ctx
// ends, then prints how many requests got which fault.
func runProxy(ctx context.Context, out io.Writer, addr, target string, s faultproxy.Schedule) error {
	if target == "" {
		return errors.New("-proxy needs -target, the endpoint to forward to")
	}
	p, err := faultproxy.Listen(addr, target, s.Plan())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "faultproxy %s → %s (seed %d, faults %s); Ctrl-C stops it\n", p.URL(), target, s.Seed, s.Rates)
	<-ctx.Done()
	p.Close()
	var parts []string
	total := 0
	counts := p.Counts()
	for f, n := range counts {
		total += n
		if f != faultproxy.None {
			parts = append(parts, fmt.Sprintf("%s=%d", f, n))
		}
	}
	sort.Strings(parts)
	fmt.Fprintf(out, "faultproxy: %d requests, faults: %s\n", total, strings.Join(parts, " "))
	return nil
}

func faultNames() string {
	var names []string
	for _, f := range faultproxy.Faults() {
		names = append(names, f.String())
	}
	return strings.Join(names, ", ")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	os.Exit(2)
}
