package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Defaults of a Client.
const (
	// DefaultUserAgent is the User-Agent header sent unless WithUserAgent
	// sets another.
	DefaultUserAgent = "ft288-locks-go-client/1"
	// DefaultBackoffBase is the first retry delay's upper bound.
	DefaultBackoffBase = 50 * time.Millisecond
	// DefaultBackoffMax caps retry delays, and Retry-After with them, so an
	// early release is noticed within about this long.
	DefaultBackoffMax = 2 * time.Second
	// DefaultTimeout bounds one HTTP exchange of the default HTTP client:
	// more than a MaxServerWait round and the service's answer after it.
	DefaultTimeout = 30 * time.Second
	// MaxServerWait is the longest wait_seconds Acquire asks the service
	// for in one request (the service's own maximum). A round is shorter
	// when the lease is short: see Acquire.
	MaxServerWait = 20 * time.Second
	// ReleaseRetryTimeout bounds how long a release retries temporary
	// failures (503, throttling, network) when its context does not end
	// sooner: Lease.Release, and the clean-up release of a grant nobody
	// waited for.
	ReleaseRetryTimeout = 10 * time.Second
	// SigV4Service is the service name requests are signed for.
	SigV4Service = "execute-api"
)

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 1 << 20

// Bounds of the clean-up after an acquire its caller stopped waiting for.
const (
	// lateAnswerTimeout is how long an acquire's answer is still awaited
	// after its caller stopped waiting for it, beyond the wait_seconds it
	// asked the service for: longer than the service takes to decide (its
	// store budget is 3 s).
	lateAnswerTimeout = 10 * time.Second
	// answerMargin is kept between a round's wait_seconds and the HTTP
	// client's timeout: the service answers within wait_seconds plus its
	// store budget (3 s).
	answerMargin = 5 * time.Second
)

// Client talks to one lock service. It is safe for concurrent use; build
// one per process and share it.
type Client struct {
	base      string // scheme://host[/stage], without a trailing slash
	hc        *http.Client
	userAgent string
	backoff   backoff
	margin    time.Duration // 0: min(ttl/10, 1s)
	sign      *sigv4
	noRenew   bool // WithoutKeepAlive: leases start without background renewals
	// pollOnly: Acquire polls instead of asking the service to wait, by
	// choice (WithoutServerWait) or because the service refused
	// wait_seconds once.
	pollOnly atomic.Bool

	cleanups cleanups           // releases of grants nobody waited for
	latest   latestAcquisitions // acquisitions per (resource, chosen owner)
}

type sigv4 struct {
	region string
	creds  aws.CredentialsProvider
	signer *v4.Signer
}

// Option configures a Client in New.
type Option func(*Client) error

// WithHTTPClient sends requests with hc instead of a client with a
// DefaultTimeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("WithHTTPClient: nil *http.Client")
		}
		c.hc = hc
		return nil
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) error {
		c.userAgent = ua
		return nil
	}
}

// WithBackoff sets the retry delays of Acquire and of a lease's renewals:
// the n-th retry waits a random time up to min(max, base·2ⁿ) (full jitter).
// Acquire also waits at least the service's Retry-After, capped at max.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) error {
		if base <= 0 || max < base {
			return fmt.Errorf("WithBackoff(%s, %s): want 0 < base ≤ max", base, max)
		}
		c.backoff = backoff{base: base, max: max}
		return nil
	}
}

// WithLeaseMargin sets how long before the end of its TTL, counted on the
// client's clock from before the request that granted or renewed it, a
// lease is given up when no renewal succeeded. The default is
// min(ttl/10, 1s); a margin of a lease's TTL or more falls back to it. A
// larger margin covers more pause and clock-rate error, and shortens
// Acquire's rounds at the service (see Acquire).
func WithLeaseMargin(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("WithLeaseMargin(%s): want a positive duration", d)
		}
		c.margin = d
		return nil
	}
}

// WithoutKeepAlive makes leases start without background renewals. By
// default every lease renews itself every TTL/3, counted from its grant,
// until it is released or lost, so that no caller can forget to. Without
// keep-alive the caller renews with Lease.Renew, or starts the renewals
// later with Lease.KeepAlive; the lease is lost at its local deadline if
// neither happens in time.
func WithoutKeepAlive() Option {
	return func(c *Client) error {
		c.noRenew = true
		return nil
	}
}

// WithoutServerWait makes Acquire poll, as against a service that does
// not wait: one attempt at a time with backoff in between, instead of
// asking the service to hold each request until the lock is free.
func WithoutServerWait() Option {
	return func(c *Client) error {
		c.pollOnly.Store(true)
		return nil
	}
}

// WithSigV4 signs every request with AWS Signature Version 4 for the
// execute-api service in region, as an API Gateway API with IAM
// authorisation requires. creds is wrapped in an aws.CredentialsCache
// unless it is one.
func WithSigV4(region string, creds aws.CredentialsProvider) Option {
	return func(c *Client) error {
		if region == "" {
			return errors.New("WithSigV4: region is empty")
		}
		if creds == nil {
			return errors.New("WithSigV4: nil credentials provider")
		}
		if _, ok := creds.(*aws.CredentialsCache); !ok {
			creds = aws.NewCredentialsCache(creds)
		}
		c.sign = &sigv4{region: region, creds: creds, signer: v4.NewSigner()}
		return nil
	}
}

// SigV4FromDefaultChain loads credentials from the AWS SDK's default chain
// (environment, shared config and credentials files, SSO, web identity,
// container and instance roles) and returns the WithSigV4 option for them.
// region overrides the region the chain finds (AWS_REGION, the profile);
// one of them must give a region.
func SigV4FromDefaultChain(ctx context.Context, region string) (Option, error) {
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("load AWS config: no region: set AWS_REGION or pass a region")
	}
	if cfg.Credentials == nil {
		return nil, errors.New("load AWS config: no credentials provider")
	}
	// Fail now if there are no credentials at all; later retrieval failures
	// (a refresh hiccup of SSO, STS or the instance role) are retried.
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("load AWS credentials: %w", err)
	}
	return WithSigV4(cfg.Region, cfg.Credentials), nil
}

// New returns a Client of the lock service at baseURL, e.g.
// "http://127.0.0.1:8080" or "https://abc123.execute-api.eu-west-1.amazonaws.com".
// It does not touch the network.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port][/path]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL %q: must not have a query or fragment", baseURL)
	}
	c := &Client{
		base:      strings.TrimRight(u.String(), "/"),
		hc:        &http.Client{Timeout: DefaultTimeout},
		userAgent: DefaultUserAgent,
		backoff:   backoff{base: DefaultBackoffBase, max: DefaultBackoffMax},
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	return c, nil
}

// leaseMargin is the margin of a lease of ttl: WithLeaseMargin's, unless
// it is not below ttl, else min(ttl/10, 1s).
func (c *Client) leaseMargin(ttl time.Duration) time.Duration {
	if c.margin > 0 && c.margin < ttl {
		return c.margin
	}
	return min(ttl/10, time.Second)
}

// AcquireOption shapes one acquire (TryAcquire or Acquire).
type AcquireOption func(*acquireOptions) error

type acquireOptions struct {
	lockDelay time.Duration // 0: none
}

// WithLockDelay asks for a lease with a lock-delay of d, whole seconds (the
// service allows 0 to 300 by default): should the lease expire without a
// release, no other owner can take the lock until d after its expiry, so
// that a holder that is slow rather than dead cannot overlap the next one.
// A release, the clean-up release included, frees the lock at once. The
// lease reports it in Lock().LockDelaySeconds. 0 asks for none.
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < 0 || d%time.Second != 0 {
			return fmt.Errorf("%w: lock delay %s: must be a whole number of seconds, 0 or more", ErrInvalid, d)
		}
		o.lockDelay = d
		return nil
	}
}

// Lock is a live lease as the service reports it. Its times are the
// service's clock: informational, never a basis for deciding whether the
// lease is still held.
type Lock struct {
	// Resource is the lock's name.
	Resource string `json:"resource"`
	// Owner is who holds the lease.
	Owner string `json:"owner"`
	// FencingToken grows with every acquire of Resource.
	FencingToken int64 `json:"fencing_token"`
	// AcquiredAt is when this lease was taken.
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is when the lease ends unless renewed.
	ExpiresAt time.Time `json:"expires_at"`
	// LockDelaySeconds is the lease's lock-delay, 0 when it has none: if
	// it expires unreleased, others can take the lock only this long after
	// ExpiresAt.
	LockDelaySeconds int64 `json:"lock_delay_seconds,omitempty"`
}

func (l Lock) check(resource string) error {
	if l.FencingToken <= 0 || l.Owner == "" || l.ExpiresAt.IsZero() {
		return fmt.Errorf("malformed lock in response for %q", resource)
	}
	return nil
}

// TryAcquire asks once for a lease of ttl on resource for owner. It returns
// the lease, or a *HeldError (errors.Is(err, ErrHeld)) when another owner
// holds the lock. ttl must be whole seconds, at least one.
//
// An empty owner gets a new unique owner, HOST:PID:RANDOM (see
// Lease.Owner); two leases never share it, so two processes or goroutines
// can never both hold the lock. Choose an owner only to act on the lease
// from elsewhere (renew or release it from another process) or to make an
// acquire repeatable across restarts: an owner that already holds the lock
// gets a new lease with a larger fencing token, so repeating a TryAcquire
// whose answer was lost is safe.
//
// The lease renews itself in the background unless the Client was made
// WithoutKeepAlive. When ctx ends while the request is in flight,
// TryAcquire returns at once; if the service grants the request after
// all, the lease is released in the background (see Drain) — for a chosen
// owner only while this Client has not started another acquire of the
// same resource and owner since: that one may hold a lease the late grant
// replaced, so the late grant is left to lapse at its TTL instead. When the
// outcome is unknown (a network failure or a 5xx answer) and the owner was
// generated, the lease it may have created is released too: nobody else
// could. A context that has already ended sends nothing.
//
// Options: WithLockDelay.
func (c *Client) TryAcquire(ctx context.Context, resource, owner string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	a, err := c.newAcquisition(resource, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	r, abandoned := a.attempt(ctx, 0)
	if abandoned {
		return nil, fmt.Errorf("acquire %q: %w", resource, context.Cause(ctx))
	}
	a.note(r)
	if r.out == granted {
		return newLease(c, r.grant, ttl), nil
	}
	a.abandon(ctx)
	return nil, r.err
}

// Acquire waits for a lease of ttl on resource for owner until ctx ends.
//
// It waits at the service: each request asks the service to hold it while
// the lock is held by someone else, up to wait_seconds = min(20 s, the time
// left until ctx's deadline, ⅔ × (ttl − margin), whole seconds), and to
// grant the lock the moment it is free; a round that ends with the lock
// still held is followed by the next at once, so a waiter sends one request
// per round. The lease's local deadline (ttl − margin, see WithLeaseMargin)
// still counts from before the request was sent, so a round may use at most
// two thirds of it: a grant at the end of a round leaves a third for the
// first renewal, which is then due at once. When that bound, or the time
// left, is under a second, when the service answers that it does not take
// wait_seconds (422 naming it; remembered for the Client's life), or with
// WithoutServerWait, it polls: one attempt at a time without wait_seconds,
// with jittered exponential backoff in between, at least the service's
// Retry-After (capped at the backoff maximum, so an early release is
// noticed) but never past ctx's end. Answers that may be temporary (503,
// API Gateway's throttle answers 429 and 500 {"message"}, other 5xx but the
// service's internal problem, network failures) are retried the same way:
// every attempt asks for the same owner, so one granted unheard is granted
// again. When ctx ends it returns an error that matches both ctx's error
// and the last attempt's (ErrHeld while the lock stayed held).
//
// The owner and the keep-alive are as for TryAcquire. Acquire never leaves
// behind a lease it did not hand out: a grant that arrives after ctx ended
// is released with its fencing token (a round's answer is awaited for its
// wait_seconds and 10 s more), and a lease of a generated owner that an
// attempt with an unknown outcome may have created is released by owner.
// A clean "held" answer needs no clean-up. The releases run in the
// background; Drain waits for them.
//
// Options: WithLockDelay.
func (c *Client) Acquire(ctx context.Context, resource, owner string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	a, err := c.newAcquisition(resource, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	var last error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			a.abandon(ctx)
			return nil, waitErr(ctx, resource, last)
		}
		wait := c.serverWait(ctx, ttl)
		sent := time.Now()
		r, abandoned := a.attempt(ctx, wait)
		if abandoned {
			return nil, waitErr(ctx, resource, last)
		}
		if wait > 0 && refusesWait(r.err) {
			// A service without server-side waiting (or with a lower
			// maximum): poll from now on.
			c.pollOnly.Store(true)
			attempt--
			continue
		}
		a.note(r)
		if r.out == granted {
			return newLease(c, r.grant, ttl), nil
		}
		if !errors.Is(r.err, ErrHeld) && !retryable(r.err) {
			a.abandon(ctx)
			return nil, r.err
		}
		last = r.err
		if wait > 0 && errors.Is(r.err, ErrHeld) && time.Since(sent) >= wait-time.Second {
			// The service waited the whole round: the next one starts at
			// once, and a backoff after it starts small again.
			attempt = -1
			continue
		}
		t := time.NewTimer(c.backoff.delay(attempt, hint(r.err)))
		select {
		case <-ctx.Done():
			t.Stop()
			a.abandon(ctx)
			return nil, waitErr(ctx, resource, last)
		case <-t.C:
		}
	}
}

// serverWait is the wait_seconds of Acquire's next request: at most
// MaxServerWait, no later than ctx's deadline, within the HTTP client's
// timeout, and at most roundLimit, in whole seconds; 0 (one plain attempt)
// when that is under a second or the client polls.
func (c *Client) serverWait(ctx context.Context, ttl time.Duration) time.Duration {
	if c.pollOnly.Load() {
		return 0
	}
	w := min(MaxServerWait, roundLimit(ttl, c.leaseMargin(ttl)))
	if d, ok := ctx.Deadline(); ok {
		w = min(w, time.Until(d))
	}
	if c.hc.Timeout > 0 {
		w = min(w, c.hc.Timeout-answerMargin)
	}
	if w < time.Second {
		return 0
	}
	return w.Truncate(time.Second)
}

// roundLimit is the longest round at the service that a lease of ttl and
// margin allows: two thirds of its local validity (ttl − margin). The local
// deadline counts from before the request was sent and the grant may come
// at the end of the round, so this leaves at least a third of the validity
// for the first renewal (which is then due at once, see Lease.KeepAlive) —
// with lockctl run's largest margin (ttl/2), ttl/6.
func roundLimit(ttl, margin time.Duration) time.Duration {
	return (ttl - margin) * 2 / 3
}

// refusesWait reports whether err is the service's refusal of
// wait_seconds: a 422 naming it (an older service without server-side
// waiting, or one configured with a lower maximum).
func refusesWait(err error) bool {
	var p *ProblemError
	if !errors.As(err, &p) || p.Status != 422 {
		return false
	}
	for _, f := range p.Errors {
		if f.Field == "wait_seconds" {
			return true
		}
	}
	return false
}

// Drain waits until the client has finished releasing leases that were
// granted after their caller stopped waiting (see Acquire), or until ctx
// ends. Call it before the process exits, or such a lease blocks its
// resource until its TTL runs out.
func (c *Client) Drain(ctx context.Context) error {
	return c.cleanups.wait(ctx)
}

// outcome is what one acquire attempt is known to have done at the service.
type outcome int

const (
	// notGranted: a clean answer that the lease was not given (held by
	// another owner, or refused), or a request that was never sent.
	notGranted outcome = iota
	// granted: the answer carried the new lease.
	granted
	// unknown: the request may have been applied but no usable answer came
	// (a network failure, a 5xx, a malformed answer).
	unknown
)

// grant is a granted acquire: the service's lease and when the request was
// sent.
type grant struct {
	lock Lock
	t0   time.Time
}

// attemptResult is the answer to one acquire request.
type attemptResult struct {
	out   outcome
	grant grant // when out is granted
	err   error // otherwise
}

// acquisition is one call of TryAcquire or Acquire: its arguments, and
// whether an attempt may have created a lease nobody heard of.
type acquisition struct {
	c         *Client
	resource  string
	owner     string
	ttl       time.Duration
	opt       acquireOptions
	generated bool   // owner is new, unique to this call
	gen       uint64 // this acquisition's number for (resource, owner) in c.latest
	// unsure: an attempt's outcome is unknown and no later answer settled
	// it (a grant replaces it, "held" shows it is not live).
	unsure bool
}

func (c *Client) newAcquisition(resource, owner string, ttl time.Duration, opts []AcquireOption) (*acquisition, error) {
	a := &acquisition{c: c, resource: resource, owner: owner, ttl: ttl}
	if owner == "" {
		a.owner, a.generated = newOwner(), true
	}
	if err := checkArgs(resource, a.owner, ttl); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", resource, err)
	}
	for _, o := range opts {
		if err := o(&a.opt); err != nil {
			return nil, fmt.Errorf("acquire %q: %w", resource, err)
		}
	}
	if !a.generated {
		a.gen = c.latest.next(resource, a.owner)
	}
	return a, nil
}

// latestAcquisitions numbers the acquisitions of each (resource, chosen
// owner), so a late grant is released only while no newer acquisition of
// the same owner has started: a newer one may hold a lease that the late
// grant replaced (same-owner re-acquire), and releasing the late grant
// would then end the lease the caller holds.
type latestAcquisitions struct {
	mu   sync.Mutex
	last map[[2]string]uint64
}

func (l *latestAcquisitions) next(resource, owner string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[[2]string]uint64{}
	}
	k := [2]string{resource, owner}
	l.last[k]++
	return l.last[k]
}

func (l *latestAcquisitions) isLatest(resource, owner string, gen uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[[2]string{resource, owner}] == gen
}

// newOwner returns an owner no other lease has: HOST:PID:RANDOM.
func newOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	if len(host) > 200 { // owners are at most 255 bytes
		host = host[:200]
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// note records what r says about leases earlier attempts may have left.
func (a *acquisition) note(r attemptResult) {
	switch {
	case r.out == granted, errors.Is(r.err, ErrHeld):
		a.unsure = false
	case r.out == unknown:
		a.unsure = true
	}
}

// abandon is called when the acquisition ends without handing out a lease:
// if an attempt may have created one for a generated owner, it releases
// that owner's lease in the background. Nobody else knows the owner, so
// this can only end a lease of this acquisition. A chosen owner's lease is
// left alone: releasing it without a token could end a lease the caller
// took meanwhile, and the caller can repeat the acquire or release it.
func (a *acquisition) abandon(ctx context.Context) {
	if a.unsure && a.generated {
		a.c.releaseLater(ctx, a.resource, a.owner, 0)
	}
}

// attempt sends one acquire request, asking the service to wait up to
// wait for a held lock. The request does not end with ctx: when ctx ends
// first, attempt returns abandoned and a background goroutine waits for the
// answer (up to wait and lateAnswerTimeout more), then releases what it
// granted (with its fencing token) or abandons the acquisition.
func (a *acquisition) attempt(ctx context.Context, wait time.Duration) (r attemptResult, abandoned bool) {
	if ctx.Err() != nil {
		return attemptResult{}, true // never send a request nobody waits for
	}
	if ctx.Done() == nil {
		return a.c.acquireOnce(ctx, a, wait), false
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	answer := make(chan attemptResult, 1)
	go func() { answer <- a.c.acquireOnce(rctx, a, wait) }()
	select {
	case r := <-answer:
		cancel()
		return r, false
	case <-ctx.Done():
	}
	a.c.cleanups.add()
	giveUp := time.AfterFunc(wait+lateAnswerTimeout, cancel)
	go func() {
		defer a.c.cleanups.done()
		r := <-answer
		giveUp.Stop()
		cancel()
		a.note(r)
		if r.out == granted {
			// A generated owner is this acquisition's alone. A chosen owner
			// may have been acquired again meanwhile; then this grant may
			// have replaced that lease, so it is left to lapse at its TTL
			// (a repeated acquire of the owner takes it over anyway).
			if a.generated || a.c.latest.isLatest(a.resource, a.owner, a.gen) {
				a.c.release(ctx, a.resource, r.grant.lock.Owner, r.grant.lock.FencingToken)
			}
			return
		}
		a.abandon(ctx)
	}()
	return attemptResult{}, true
}

// acquireOnce sends one acquire request of a (with wait_seconds when wait
// is a second or more) and sorts its answer.
func (c *Client) acquireOnce(ctx context.Context, a *acquisition, wait time.Duration) attemptResult {
	resource := a.resource
	fail := func(out outcome, err error) attemptResult {
		return attemptResult{out: out, err: fmt.Errorf("acquire %q: %w", resource, err)}
	}
	req := map[string]any{"owner": a.owner, "ttl_seconds": int64(a.ttl / time.Second)}
	if wait >= time.Second {
		req["wait_seconds"] = int64(wait / time.Second)
	}
	if a.opt.lockDelay > 0 {
		req["lock_delay_seconds"] = int64(a.opt.lockDelay / time.Second)
	}
	// t0 is taken before sending: the lease cannot have started earlier.
	// After a wait at the service it is older than it need be, which only
	// makes the lease's local deadline earlier (safe, see serverWait).
	t0 := time.Now()
	resp, err := c.send(ctx, http.MethodPost, lockPath(resource), req)
	if err != nil {
		return fail(outcomeOf(err), err)
	}
	var body struct {
		Acquired  bool   `json:"acquired"`
		Lock      *Lock  `json:"lock"`
		ExpiresAt string `json:"expires_at"`
	}
	if err := resp.decode(&body); err != nil {
		return fail(unknown, err)
	}
	if !body.Acquired {
		held := &HeldError{Resource: resource, RetryAfter: resp.retryAfter()}
		if body.ExpiresAt != "" {
			held.ExpiresAt, _ = time.Parse(time.RFC3339, body.ExpiresAt)
		}
		return attemptResult{out: notGranted, err: held}
	}
	if body.Lock == nil {
		return fail(unknown, errors.New("malformed response: acquired without a lock"))
	}
	if err := body.Lock.check(resource); err != nil {
		return fail(unknown, err)
	}
	return attemptResult{out: granted, grant: grant{lock: *body.Lock, t0: t0}}
}

// outcomeOf sorts a failed request: never sent or cleanly refused
// (notGranted), or possibly applied (unknown).
func outcomeOf(err error) outcome {
	var unsent *unsentError
	if errors.As(err, &unsent) {
		return notGranted
	}
	var p *ProblemError
	if errors.As(err, &p) && p.Status < 500 {
		return notGranted
	}
	return unknown
}

// releaseLater releases owner's lease on resource (token 0: whichever is
// live) in the background, retrying temporary failures for up to
// ReleaseRetryTimeout. Drain waits for it.
func (c *Client) releaseLater(ctx context.Context, resource, owner string, token int64) {
	c.cleanups.add()
	go func() {
		defer c.cleanups.done()
		c.release(ctx, resource, owner, token)
	}()
}

// release is the clean-up release: ctx only lends its values; temporary
// failures are retried for up to ReleaseRetryTimeout; the rest are ignored
// (the lease runs out by itself).
func (c *Client) release(ctx context.Context, resource, owner string, token int64) {
	_ = c.releaseRetrying(context.WithoutCancel(ctx), resource, owner, token, time.Time{}, new(atomic.Bool))
}

// releaseRetrying releases owner's lease on resource, retrying temporary
// failures (503, throttling, network) with backoff until ctx ends,
// ReleaseRetryTimeout has passed, or (when it is not zero) until, when the
// lease has run out anyway; it returns the last attempt's error. unsure
// records that an attempt's outcome is unknown (it may have
// released the lease unheard): a later 404 then counts as released, unless
// the service says an operator force released the lease. It lives as long
// as the lease, so that a Release called again keeps it.
func (c *Client) releaseRetrying(ctx context.Context, resource, owner string, token int64, until time.Time, unsure *atomic.Bool) error {
	ctx, cancel := context.WithTimeout(ctx, ReleaseRetryTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := c.Release(ctx, resource, owner, token)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrNotFound) && unsure.Load() && !forceReleased(err):
			return nil
		case !retryable(err):
			return err
		}
		if outcomeOf(err) == unknown {
			unsure.Store(true)
		}
		delay := c.backoff.delay(attempt, hint(err))
		if !until.IsZero() && time.Now().Add(delay).After(until) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// cleanups counts the clean-up releases under way, for Drain.
type cleanups struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (p *cleanups) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		p.idle = make(chan struct{})
	}
	p.n++
}

func (p *cleanups) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n--; p.n == 0 {
		close(p.idle)
	}
}

func (p *cleanups) wait(ctx context.Context) error {
	p.mu.Lock()
	idle := p.idle
	n := p.n
	p.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain: %w", context.Cause(ctx))
	}
}

func waitErr(ctx context.Context, resource string, last error) error {
	cause := context.Cause(ctx)
	if last == nil {
		return fmt.Errorf("acquire %q: %w", resource, cause)
	}
	return fmt.Errorf("acquire %q: gave up waiting: %w (last attempt: %w)", resource, cause, last)
}

// hint is the earliest the service suggested trying again after err.
func hint(err error) time.Duration {
	var held *HeldError
	if errors.As(err, &held) {
		if held.RetryAfter > 0 {
			return held.RetryAfter
		}
		if !held.ExpiresAt.IsZero() {
			return time.Until(held.ExpiresAt)
		}
	}
	var p *ProblemError
	if errors.As(err, &p) {
		return p.RetryAfter
	}
	return 0
}

// Status returns the live lease on resource, or ErrNotFound when there is
// none.
func (c *Client) Status(ctx context.Context, resource string) (Lock, error) {
	if resource == "" || strings.Contains(resource, "/") {
		return Lock{}, fmt.Errorf("status %q: %w: resource must be non-empty and without \"/\"", resource, ErrInvalid)
	}
	resp, err := c.send(ctx, http.MethodGet, lockPath(resource), nil)
	if err != nil {
		return Lock{}, fmt.Errorf("status %q: %w", resource, err)
	}
	var lock Lock
	if err := resp.decode(&lock); err != nil {
		return Lock{}, fmt.Errorf("status %q: %w", resource, err)
	}
	if err := lock.check(resource); err != nil {
		return Lock{}, fmt.Errorf("status %q: %w", resource, err)
	}
	return lock, nil
}

// Renew extends owner's live lease on resource to ttl from now. With token
// non-zero the live lease must carry that fencing token (ErrStaleToken
// otherwise). A lease that expired cannot be renewed (ErrNotFound): acquire
// it again. Leases renew themselves; Lease.Renew renews one by hand.
func (c *Client) Renew(ctx context.Context, resource, owner string, ttl time.Duration, token int64) (Lock, error) {
	if err := checkArgs(resource, owner, ttl); err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	req := map[string]any{"owner": owner, "ttl_seconds": int64(ttl / time.Second)}
	if token != 0 {
		req["fencing_token"] = token
	}
	resp, err := c.send(ctx, http.MethodPost, lockPath(resource)+"/renew", req)
	if err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	var body struct {
		Renewed bool `json:"renewed"`
		Lock    Lock `json:"lock"`
	}
	if err := resp.decode(&body); err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	if !body.Renewed {
		return Lock{}, fmt.Errorf("renew %q: malformed response: renewed is false", resource)
	}
	if err := body.Lock.check(resource); err != nil {
		return Lock{}, fmt.Errorf("renew %q: %w", resource, err)
	}
	return body.Lock, nil
}

// Release ends owner's live lease on resource. With token non-zero the live
// lease must carry that fencing token. It returns ErrNotFound when there is
// no live lease (it expired or was released), ErrForbidden when another
// owner holds it and ErrStaleToken when a newer lease replaced token's.
func (c *Client) Release(ctx context.Context, resource, owner string, token int64) error {
	if resource == "" || strings.Contains(resource, "/") || strings.TrimSpace(owner) == "" {
		return fmt.Errorf("release %q: %w: resource and owner must not be empty, and resource has no \"/\"", resource, ErrInvalid)
	}
	req := map[string]any{"owner": owner}
	if token != 0 {
		req["fencing_token"] = token
	}
	if _, err := c.send(ctx, http.MethodDelete, lockPath(resource), req); err != nil {
		return fmt.Errorf("release %q: %w", resource, err)
	}
	return nil
}

func checkArgs(resource, owner string, ttl time.Duration) error {
	switch {
	case resource == "":
		return fmt.Errorf("%w: empty resource", ErrInvalid)
	case strings.Contains(resource, "/"):
		// The server refuses it too, but an API Gateway may route an
		// encoded "/" elsewhere before the server sees it.
		return fmt.Errorf("%w: resource must not contain \"/\"", ErrInvalid)
	case strings.TrimSpace(owner) == "":
		return fmt.Errorf("%w: empty owner", ErrInvalid)
	case ttl < time.Second || ttl%time.Second != 0:
		return fmt.Errorf("%w: ttl %s: must be a whole number of seconds, at least 1s", ErrInvalid, ttl)
	}
	return nil
}

func lockPath(resource string) string { return "/locks/" + url.PathEscape(resource) }

// response is a successful (2xx) answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) decode(v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("malformed %d response: %w", r.status, err)
	}
	return nil
}

func (r *response) retryAfter() time.Duration { return parseRetryAfter(r.header) }

// send makes one request and returns the 2xx answer, a *ProblemError for
// any other status, or the transport's error.
func (c *Client) send(ctx context.Context, method, path string, payload any) (*response, error) {
	var body []byte
	if payload != nil {
		var err error
		if body, err = json.Marshal(payload); err != nil {
			return nil, &unsentError{&permanentError{fmt.Errorf("encode request: %w", err)}}
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, &unsentError{&permanentError{fmt.Errorf("build request: %w", err)}}
	}
	if body == nil {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if c.sign != nil {
		if err := c.sign.sign(ctx, req, body); err != nil {
			return nil, &unsentError{err}
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("read %d response: %w", resp.StatusCode, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, problem(resp, data)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// sign adds the SigV4 headers, with the payload hash of body.
func (s *sigv4) sign(ctx context.Context, req *http.Request, body []byte) error {
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		// Temporary as far as the lease is concerned: a credentials
		// refresh that fails once must not end a healthy lease; renewals
		// retry until the lease's local deadline.
		return fmt.Errorf("sigv4: retrieve credentials: %w", err)
	}
	if err := s.signer.SignHTTP(ctx, creds, req, hash, SigV4Service, s.region, time.Now()); err != nil {
		return &permanentError{fmt.Errorf("sigv4: sign: %w", err)}
	}
	return nil
}

// problem turns an error answer into a *ProblemError: the problem document
// when there is one, else API Gateway's {"message"} or the status text.
func problem(resp *http.Response, data []byte) *ProblemError {
	p := &ProblemError{}
	if json.Unmarshal(data, p) != nil || (p.Type == "" && p.Title == "") {
		var gw struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &gw)
		p = &ProblemError{Title: gw.Message}
		if p.Title == "" {
			p.Title = http.StatusText(resp.StatusCode)
		}
	}
	p.Status = resp.StatusCode
	p.RetryAfter = parseRetryAfter(resp.Header)
	return p
}

// parseRetryAfter reads a Retry-After header of delay-seconds or an
// HTTP-date; zero when absent or malformed.
func parseRetryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}
