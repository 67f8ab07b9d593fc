// Package testenv gives integration tests real parts: one in-memory
// dynalite per test binary (started by Main from TestMain), the lock table
// in it, and per-test HTTP servers that run the local runner over the real
// handlers, with a swappable clock and a count of the DynamoDB requests the
// SDK sends. Every answer those servers give is held to api/openapi.yaml
// (internal/verify/contract): one it does not describe fails the test.
// A server runs on dynalite's path (a refused write comes back without the
// old item) or on the path AWS takes (StoreOldItem: with it); TESTENV_STORE
// =old-item runs every server and proxy that does not choose on the
// second (StoreEnv).
package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/verify/contract"
	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/local"
	"github.com/ft288/locks/locklogic"
)

// Table is the lock table every test server uses; tests keep apart by using
// their own resource names.
const Table = "locks-test"

var endpoint string

// Main starts dynalite, creates Table, runs the tests and stops dynalite.
// Call it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	d, err := local.StartDynalite(ctx)
	if err != nil {
		cancel()
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer d.Close()
	endpoint = d.Endpoint
	db, err := api.NewDynamoDB(ctx, endpoint)
	if err == nil {
		_, err = local.EnsureTable(ctx, db, Table)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	code := m.Run()
	fmt.Printf("testenv: %d answers checked against api/openapi.yaml\n", contract.Checked())
	return code
}

// Endpoint returns the dynalite URL Main started.
func Endpoint() string { return endpoint }

// Clock is a manual clock for expiry tests: it moves only when told.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock set to the real time now.
func NewClock() *Clock { return &Clock{t: time.Now()} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// OpCounter counts the HTTP requests the DynamoDB client sends, by
// operation (the X-Amz-Target header without its service prefix).
type OpCounter struct {
	mu     sync.Mutex
	counts map[string]int
	next   http.RoundTripper
}

// RoundTrip counts req and passes it on.
func (c *OpCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
	return c.next.RoundTrip(req)
}

// Take returns the counts since the last Take and resets them.
func (c *OpCounter) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

// Options configures a test server. Zero values are the defaults.
type Options struct {
	// Now is the service clock; real time when nil.
	Now func() time.Time
	// MaxTTLSeconds caps ttl_seconds (default 86400).
	MaxTTLSeconds int64
	// Retention is the tombstone retention (default 7 days).
	Retention time.Duration
	// Identity attaches IAM identities to requests (principal tests).
	Identity local.IdentityFunc
	// Admins, when not nil, is the administrators' allowlist
	// (api.Handler.SetAdmins): others get 403 on the admin routes. Nil
	// leaves them open, as the local runner does.
	Admins []string
	// StoreEndpoint is the DynamoDB endpoint the handlers use instead of
	// the test dynalite, e.g. a faultproxy in front of it.
	StoreEndpoint string
	// StoreBudget is the handlers' store budget (api.StoreBudget when 0).
	StoreBudget time.Duration
	// Timeouts overrides route timeouts by route name (the invocation
	// deadline each handler call gets; see local.Runner.Timeouts).
	Timeouts map[string]time.Duration
	// LogTo receives the handlers' log, written by the production logger
	// (api.NewLoggerTo, level info): one JSON line per request with its
	// metrics, and the audit lines. Nil discards it.
	LogTo io.Writer
	// RandomWaiting turns fair waiting off (locklogic.Config.FairWaiting):
	// waiters watch the lock at random, as before the queue. Off by
	// default, as in the service's own setups.
	RandomWaiting bool
	// Capacity is the stack's capacity model the runner applies (route
	// throttles answered 429, function concurrency answered 500; see
	// local.Capacity). The zero value is off: a test is throttled only
	// when it asks to be.
	Capacity local.Capacity
	// Store is how the store answers a write refused by its condition
	// (StoreDefault: the harness's mode, see DefaultStore). In
	// StoreOldItem the service runs with OldItemOnFailure, as in AWS;
	// without StoreEndpoint the server reaches dynalite through a fault
	// proxy of its own in old-item mode, and with one, that endpoint must
	// return the old item itself (NewProxy gives such a proxy).
	Store StoreMode
}

// StoreMode says how the store answers a write refused by its condition.
type StoreMode int

// The store modes.
const (
	// StoreDefault is the harness's mode: DefaultStore.
	StoreDefault StoreMode = iota
	// StoreDynalite answers as dynalite does: the refusal alone, so the
	// service reads the item to explain it (OldItemOnFailure off).
	StoreDynalite
	// StoreOldItem answers as DynamoDB does: the refusal of a write that
	// asks for it carries the old item (a fault proxy reads the item and
	// adds it; see faultproxy.Proxy.SetOldItemOnFailure for how that
	// differs from DynamoDB), and the service relies on it
	// (OldItemOnFailure on): the path AWS takes.
	StoreOldItem
)

// StoreEnv is the environment variable that sets the harness's mode:
// "old-item" runs every server and proxy that does not choose a mode in
// StoreOldItem (a whole suite on the path AWS takes); anything else, or
// unset, in StoreDynalite.
const StoreEnv = "TESTENV_STORE"

// DefaultStore returns the harness's mode, from StoreEnv.
func DefaultStore() StoreMode {
	if os.Getenv(StoreEnv) == "old-item" {
		return StoreOldItem
	}
	return StoreDynalite
}

// Resolve returns m, or the harness's mode for StoreDefault.
func (m StoreMode) Resolve() StoreMode {
	if m == StoreDefault {
		return DefaultStore()
	}
	return m
}

// String names the mode as StoreEnv does.
func (m StoreMode) String() string {
	switch m.Resolve() {
	case StoreOldItem:
		return "old-item"
	default:
		return "dynalite"
	}
}

// NewProxy starts a fault proxy in front of the test dynalite with plan
// (nil: none), in store mode mode (StoreDefault: the harness's), closed
// when tb ends. A server whose StoreEndpoint it is must run in the same
// mode.
func NewProxy(tb testing.TB, mode StoreMode, plan faultproxy.Plan) *faultproxy.Proxy {
	tb.Helper()
	if endpoint == "" {
		tb.Fatal("testenv: dynalite is not running; call testenv.Main from TestMain")
	}
	p, err := faultproxy.New(endpoint, plan)
	if err != nil {
		tb.Fatal(err)
	}
	p.SetOldItemOnFailure(mode.Resolve() == StoreOldItem)
	tb.Cleanup(func() { p.Close() })
	return p
}

// Server is a local runner over the real handlers, served by httptest.
type Server struct {
	// URL is the base URL, e.g. http://127.0.0.1:39211.
	URL string
	// Ops counts the DynamoDB requests this server's handlers send.
	Ops *OpCounter
	// DB is the server's DynamoDB client (for tests that inspect or
	// delete items directly, e.g. to simulate TTL garbage collection).
	DB *dynamodb.Client
	// Store is the mode the server runs in (never StoreDefault).
	Store StoreMode

	runner *local.Runner
}

// Counts returns what the server's runner has counted: requests by route
// key, try-acquires that carried wait_seconds, refusals (local.Counts).
func (s *Server) Counts() local.Counts { return s.runner.Counts() }

// CheckRoutes fails tb unless the server's runner has counted want[key]
// requests on each route key of want and no try-acquire that carried
// wait_seconds, and logs what it counted.
func (s *Server) CheckRoutes(tb testing.TB, want map[string]int64) {
	tb.Helper()
	got := s.Counts()
	for key, n := range want {
		if got.Requests[key] != n {
			tb.Errorf("%s: got %d requests, want %d", key, got.Requests[key], n)
		}
	}
	if got.TryWaitSeconds != 0 {
		tb.Errorf("try-acquires with wait_seconds: got %d, want 0", got.TryWaitSeconds)
	}
	tb.Logf("runner counts: %v, try-acquires with wait_seconds %d", got.Requests, got.TryWaitSeconds)
}

// Start starts a Server that is closed when tb ends.
func Start(tb testing.TB, opt Options) *Server {
	tb.Helper()
	if endpoint == "" {
		tb.Fatal("testenv: dynalite is not running; call testenv.Main from TestMain")
	}
	ops := &OpCounter{counts: map[string]int{}, next: http.DefaultTransport}
	mode := opt.Store.Resolve()
	store := endpoint
	switch {
	case opt.StoreEndpoint != "":
		store = opt.StoreEndpoint
	case mode == StoreOldItem:
		store = NewProxy(tb, mode, nil).URL()
	}
	db, err := api.NewDynamoDB(context.Background(), store, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: ops, Timeout: 10 * time.Second}
	})
	if err != nil {
		tb.Fatalf("dynamodb client: %v", err)
	}
	svc := locklogic.New(db, locklogic.Config{Table: Table, MaxTTLSeconds: opt.MaxTTLSeconds, Retention: opt.Retention, Now: opt.Now,
		FairWaiting: !opt.RandomWaiting, OldItemOnFailure: mode == StoreOldItem})
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if opt.LogTo != nil {
		log = api.NewLoggerTo(opt.LogTo, slog.LevelInfo)
	}
	h := api.NewHandler(svc, log, opt.Now)
	if opt.StoreBudget > 0 {
		h.SetStoreBudget(opt.StoreBudget)
	}
	if opt.Admins != nil {
		h.SetAdmins(opt.Admins)
	}
	runner := local.NewRunner(h, log)
	runner.Identity = opt.Identity
	runner.Timeouts = opt.Timeouts
	runner.Now = opt.Now
	if err := runner.SetCapacity(opt.Capacity); err != nil {
		tb.Fatal(err)
	}
	// Every answer must be one api/openapi.yaml describes (internal/verify/contract).
	doc, err := loadContract()
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(doc.Middleware(runner, func(m *contract.Mismatch) { tb.Errorf("%v", m) }))
	tb.Cleanup(srv.Close)
	return &Server{URL: srv.URL, Ops: ops, DB: db, Store: mode, runner: runner}
}

// loadContract loads api/openapi.yaml once per test binary.
var loadContract = sync.OnceValues(contract.Load)
