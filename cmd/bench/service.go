package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/client"
	"github.com/ft288/locks/local"
	"github.com/ft288/locks/locklogic"
)

// table is the lock table the bench creates in its dynalite.
const table = "locks-bench"

// counter counts events by name.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

// take returns the counts since the last take and resets them.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// service is the local runner over the real handlers and dynalite, as
// `make run` serves it, with counts of the API requests it answers (by
// route) and of the DynamoDB requests its SDK sends (by operation).
type service struct {
	url string
	api counter
	ddb counter
	// store counts, over a store that returns the old item (oldItem), the
	// calls the service makes to it (the wrapper's own reads of the old
	// item are in ddb only).
	store counter
	// db is the service's SDK client (through the counting transport).
	db  *dynamodb.Client
	srv *http.Server
	// hook, when set before the first request, sees every DynamoDB
	// request's body and the store's status when its answer arrived; the
	// GetItems are then also counted as GetItem/strong and
	// GetItem/eventual.
	hook func(op string, req []byte, status int, at time.Time)
}

// serviceOptions are how a bench service differs from another.
type serviceOptions struct {
	// fair turns the lock queue on (locklogic.Config.FairWaiting), as the
	// service's own setups do; off, waiters watch the lock at random, as
	// before issue 18.
	fair bool
	// oldItem puts the service over a store that returns the old item
	// with a failed condition, as DynamoDB does (oldItemStore), with
	// OldItemOnFailure set.
	oldItem bool
	// hook is service.hook.
	hook func(op string, req []byte, status int, at time.Time)
}

// startService serves the lock API on a loopback port over the dynalite at
// endpoint.
func startService(ctx context.Context, endpoint string, opt serviceOptions) (*service, error) {
	s := &service{hook: opt.hook}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	count := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		op := r.Header.Get("X-Amz-Target")
		op = op[strings.LastIndexByte(op, '.')+1:]
		s.ddb.add(op)
		if s.hook == nil {
			return tr.RoundTrip(r)
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if op == "GetItem" {
			s.ddb.add(map[bool]string{true: "GetItem/strong", false: "GetItem/eventual"}[bytes.Contains(body, []byte(`"ConsistentRead":true`))])
		}
		resp, err := tr.RoundTrip(r)
		if err == nil {
			s.hook(op, body, resp.StatusCode, time.Now())
		}
		return resp, err
	})
	db, err := api.NewDynamoDB(ctx, endpoint, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: count}
	})
	if err != nil {
		return nil, err
	}
	s.db = db
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	// dynalite does not return the old item with a failed condition (as
	// locald finds out by asking it): OldItemOnFailure only over the
	// wrapper that adds it.
	var store locklogic.DynamoDBAPI = db
	if opt.oldItem {
		store = &oldItemStore{Client: db, calls: &s.store}
	}
	h := api.NewHandler(locklogic.New(store, locklogic.Config{Table: table, FairWaiting: opt.fair, OldItemOnFailure: opt.oldItem}), log, nil)
	runner := local.NewRunner(h, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := map[string]string{"POST": "acquire", "GET": "status", "DELETE": "release"}[r.Method]
		switch {
		case strings.HasSuffix(r.URL.Path, "/renew"):
			name = "renew"
		case strings.HasSuffix(r.URL.Path, "/wait"):
			name = "wait" // a waiting round (issue 21: after one try on the try route)
		}
		s.api.add(name)
		runner.ServeHTTP(w, r)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// oldItemStore is DynamoDB as it answers a failed condition, over
// dynalite, which ignores ReturnValuesOnConditionCheckFailure: it reads
// the old item itself and returns it with the failure, as
// internal/integration's TestSemaphoreRequestCounts does. calls counts the
// requests the service makes, by operation, not the wrapper's reads.
type oldItemStore struct {
	*dynamodb.Client
	calls *counter
}

func (s *oldItemStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	s.calls.add("UpdateItem")
	out, err := s.Client.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) && ccf.Item == nil && in.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld {
		got, gerr := s.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
		if gerr != nil {
			return nil, gerr
		}
		ccf.Item = got.Item
	}
	return out, err
}

func (s *oldItemStore) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	s.calls.add("GetItem")
	return s.Client.GetItem(ctx, in, opts...)
}

func (s *oldItemStore) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	s.calls.add("Scan")
	return s.Client.Scan(ctx, in, opts...)
}

func (s *service) close() { _ = s.srv.Close() }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// clientTransport is shared by the bench's clients: enough idle
// connections that no waiter dials anew for every request.
var clientTransport = func() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	return tr
}()

// newClient returns a client of s that waits at the service (serverWait)
// or polls with the client's default backoff (50 ms doubling to 2 s).
func (s *service) newClient(serverWait bool) *client.Client {
	opts := []client.Option{
		client.WithHTTPClient(&http.Client{Transport: clientTransport, Timeout: client.DefaultTimeout}),
		client.WithoutKeepAlive(),
	}
	if !serverWait {
		opts = append(opts, client.WithoutServerWait())
	}
	c, err := client.New(s.url, opts...)
	if err != nil {
		panic(err) // the URL is ours
	}
	return c
}

var runSeq atomic.Int64

// resourceName returns a lock name no other run of this process uses.
func resourceName(what string) string {
	return fmt.Sprintf("bench-%s-%d-%d", what, time.Now().UnixNano(), runSeq.Add(1))
}

// handoffResult is what the handoffs on some locks showed.
type handoffResult struct {
	// lat are the handoff latencies: from just before the release request
	// was sent to the moment the next Acquire returned.
	lat []time.Duration
	// judged are the grants after a release, inOrder those of them that
	// went to the longest waiter (arrivals as arrivalOf says).
	judged, inOrder int
	// rate is the handoffs per second of one lock (the mean over the
	// locks): grants after the first, over the time from the first grant
	// to the last.
	rate float64
}

func (r *handoffResult) add(o handoffResult) {
	r.lat = append(r.lat, o.lat...)
	r.judged += o.judged
	r.inOrder += o.inOrder
	r.rate += o.rate
}

// fifo is the share of grants that went to the longest waiter, in %.
func (r handoffResult) fifo() float64 {
	if r.judged == 0 {
		return 100
	}
	return 100 * float64(r.inOrder) / float64(r.judged)
}

// benchHold is how long a handoff run's holder keeps the lock: 0.5-1.5 s,
// long enough for a polling waiter's backoff to grow, as it does whenever
// a lock is held for a while.
func benchHold() time.Duration { return 500*time.Millisecond + rand.N(time.Second) }

// handoffs measures how soon a released lock reaches the next waiter. On
// each of `arenas` locks at once, waiters+1 workers take turns for dur: the
// holder keeps the lock for hold(), notes the time and releases it; the
// others wait for it (m: polling, or at the service as s waits). A worker
// that released rejoins the queue only once another one got the lock, so
// at every release exactly `waiters` workers are waiting. joins, when not
// nil, is the log of s's queue joins (a fair service): a waiter then
// arrives at its join; otherwise at its first request.
func handoffs(s *service, m mode, joins *joinLog, waiters, arenas int, dur time.Duration, hold func() time.Duration) (handoffResult, error) {
	var (
		mu   sync.Mutex
		out  handoffResult
		errs []error
		wg   sync.WaitGroup
	)
	for range arenas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := arena(s, m, joins, waiters, dur, hold)
			mu.Lock()
			defer mu.Unlock()
			out.add(r)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	out.rate /= float64(arenas)
	return out, errors.Join(errs...)
}

// arena is one lock of handoffs.
func arena(s *service, m mode, joins *joinLog, waiters int, dur time.Duration, hold func() time.Duration) (handoffResult, error) {
	res := resourceName("handoff")
	start := time.Now()
	stopAt := start.Add(dur)
	// Rounds end with the run: every request the service holds is answered
	// soon after, so nothing lingers into the next measurement.
	ctx, cancel := context.WithDeadline(context.Background(), stopAt.Add(2*time.Second))
	defer cancel()
	var (
		mu         sync.Mutex
		cond       = sync.NewCond(&mu)
		grants     int
		releasedAt time.Time
		out        handoffResult
		first      time.Time // the first grant
		last       time.Time // the latest grant before stopAt
		counted    int       // grants after the first, before stopAt
		since      = make([]time.Time, waiters+1)
		errs       []error
		wg         sync.WaitGroup
		clients    []*client.Client
	)
	owner := func(w int) string { return fmt.Sprintf("w%d", w) }
	// arrivalOf is when worker w, waiting since t0, arrived: at its join when
	// the queue is on (ok false when it has not joined yet: it has not
	// arrived), else at its first request.
	arrivalOf := func(w int, t0 time.Time) (arrival, bool) {
		if joins == nil {
			return arrival{t: t0}, true
		}
		return joins.since(res, owner(w), t0)
	}
	for w := range waiters + 1 {
		c := s.newClient(m.serverWait())
		clients = append(clients, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				since[w] = time.Now()
				mu.Unlock()
				l, err := c.Acquire(ctx, res, owner(w), 30*time.Second)
				got := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					return
				}
				mu.Lock()
				if first.IsZero() {
					first = got
				} else if got.Before(stopAt) {
					last = got
					counted++
				}
				if !releasedAt.IsZero() && got.Before(stopAt) {
					out.lat = append(out.lat, got.Sub(releasedAt))
					// Did it go to the longest waiter? The grantee arrived
					// at its join, or at its first request when it took a
					// free lock without joining.
					mine, ok := arrivalOf(w, since[w])
					if !ok {
						mine = arrival{t: since[w]}
					}
					longest := true
					for o, t0 := range since {
						if o == w || t0.IsZero() {
							continue
						}
						if a, ok := arrivalOf(o, t0); ok && a.before(mine) {
							longest = false
						}
					}
					out.judged++
					if longest {
						out.inOrder++
					}
				}
				since[w] = time.Time{}
				releasedAt = time.Time{}
				grants++
				mine := grants
				cond.Broadcast()
				mu.Unlock()
				if d := hold(); d > 0 {
					time.Sleep(d)
				}
				stop := time.Now().After(stopAt)
				mu.Lock()
				if !stop {
					releasedAt = time.Now()
				}
				mu.Unlock()
				if err := l.Release(context.Background()); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if stop {
					return
				}
				mu.Lock()
				for grants == mine && ctx.Err() == nil {
					cond.Wait()
				}
				mu.Unlock()
			}
		}()
	}
	// Wake workers that wait for a grant that will not come.
	go func() {
		<-ctx.Done()
		mu.Lock()
		cond.Broadcast()
		mu.Unlock()
	}()
	wg.Wait()
	drainAll(clients)
	if counted > 0 {
		out.rate = float64(counted) / last.Sub(first).Seconds()
	}
	return out, errors.Join(errs...)
}

// drainAll waits for the clean-up releases of every client.
func drainAll(clients []*client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range clients {
		_ = c.Drain(ctx)
	}
}

// waiterCost holds a lock for window while `waiters` clients wait for it,
// and returns what one waiter sent per second of waiting: API requests,
// DynamoDB reads and writes (all the service's DynamoDB requests in the
// window are the waiters').
func waiterCost(s *service, m mode, waiters int, window time.Duration) (costRow, error) {
	res := resourceName("cost")
	holder, err := s.newClient(false).TryAcquire(context.Background(), res, "holder", time.Minute)
	if err != nil {
		return costRow{}, err
	}
	defer holder.Release(context.Background())
	s.api.take()
	s.ddb.take()
	// A deadline past the window: the first round is a full 20 s one.
	ctx, cancel := context.WithTimeout(context.Background(), window+10*time.Second)
	var clients []*client.Client
	var wg sync.WaitGroup
	for w := range waiters {
		c := s.newClient(m.serverWait())
		clients = append(clients, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Acquire(ctx, res, fmt.Sprintf("waiter%d", w), time.Minute)
		}()
	}
	time.Sleep(window)
	apiN, ddbN := s.api.take(), s.ddb.take()
	cancel()
	wg.Wait()
	drainAll(clients)
	secs := float64(waiters) * window.Seconds()
	return costRow{
		api: float64(apiN["acquire"]+apiN["wait"]) / secs, reads: float64(ddbN["GetItem"]) / secs, writes: float64(ddbN["UpdateItem"]) / secs,
		tries: float64(apiN["acquire"]) / float64(waiters), rounds: float64(apiN["wait"]) / float64(waiters),
		lockReads: float64(ddbN["GetItem"]) / window.Seconds(),
	}, nil
}

// opCount is the number of DynamoDB requests one API operation sent.
type opCount struct {
	name string
	n    int
}

// requestsPerOperation sends each operation once on its own lock and counts
// the DynamoDB requests the service sent for it.
func requestsPerOperation(s *service) ([]opCount, error) {
	ctx := context.Background()
	c := s.newClient(true)
	var out []opCount
	var errs []error
	measure := func(name string, do func() error) {
		s.ddb.take()
		if err := do(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		n := 0
		for _, v := range s.ddb.take() {
			n += v
		}
		out = append(out, opCount{name, n})
	}
	res := resourceName("ops")
	var l *client.Lease
	measure("acquire (free)", func() (err error) { l, err = c.TryAcquire(ctx, res, "a", 30*time.Second); return err })
	measure("acquire (same owner again)", func() (err error) { l, err = c.TryAcquire(ctx, res, "a", 30*time.Second); return err })
	measure("acquire (held by another)", func() error {
		if _, err := c.TryAcquire(ctx, res, "b", 30*time.Second); !errors.Is(err, client.ErrHeld) {
			return fmt.Errorf("got %v, want held", err)
		}
		return nil
	})
	measure("renew", func() error { return l.Renew(ctx) })
	measure("status", func() error { _, err := c.Status(ctx, res); return err })
	measure("release", func() error { return l.Release(ctx) })
	measure("waiting acquire (free: its try)", func() error {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		l, err = c.Acquire(wctx, res, "a", 30*time.Second)
		return err
	})
	if l != nil {
		_ = l.Release(ctx)
	}
	short := resourceName("ops-expiry")
	if _, err := c.TryAcquire(ctx, short, "a", time.Second); err != nil {
		errs = append(errs, err)
	}
	time.Sleep(1100 * time.Millisecond)
	l = nil
	measure("acquire (takeover after expiry)", func() (err error) { l, err = c.TryAcquire(ctx, short, "b", 30*time.Second); return err })
	if l != nil {
		_ = l.Release(ctx)
	}
	return out, errors.Join(errs...)
}
