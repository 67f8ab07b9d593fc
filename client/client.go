package client

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults of a Client.
const (
	// DefaultEndpoint is the service FromEnv talks to when LOCKS_ENDPOINT
	// is unset: the local runner of `make run`.
	DefaultEndpoint = "http://127.0.0.1:8080"
	// DefaultTTL is a lease's time-to-live when an acquire asks for 0 (and
	// no WithTTL): long enough that a renewal every DefaultTTL/3 rides out
	// a few seconds of trouble, short enough that a crashed holder blocks
	// others for at most half a minute.
	DefaultTTL = 30 * time.Second
	// DefaultAcquireWait bounds Acquire's wait when its context has no
	// deadline and no WithWait or WithoutWaitLimit says otherwise, so that
	// a forgotten deadline cannot leave a caller waiting forever for a
	// lock someone keeps renewing.
	DefaultAcquireWait = 30 * time.Second
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
	// when the lease is short: see the package documentation.
	MaxServerWait = 20 * time.Second
	// ReleaseRetryTimeout bounds how long a release retries temporary
	// failures (503, throttling, network) when its context does not end
	// sooner: Lease.Release, and the clean-up release of a grant nobody
	// waited for.
	ReleaseRetryTimeout = 10 * time.Second
	// DeliveryAllowance is how long before the local deadline a lease's
	// timer ends it, so that the asynchronous signal (Done, the Context)
	// normally arrives before the deadline; Check and Err compare the clock
	// with the deadline itself. The same in every client: docs/clients.md.
	DeliveryAllowance = 5 * time.Millisecond
	// SigV4Service is the service name requests are signed for.
	SigV4Service = "execute-api"
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
	// semPollOnly is pollOnly for semaphore acquires: a service may wait
	// for locks and not (yet) for permits.
	semPollOnly atomic.Bool
	// rwPollOnly is pollOnly for read/write lock acquires.
	rwPollOnly atomic.Bool
	// setPollOnly is pollOnly for lock sets: AcquireSet polls the try
	// route once the service refused wait_seconds, or its stack has no
	// …/wait route for sets (API Gateway's 404).
	setPollOnly atomic.Bool
	// tryRouteWaits: the stack predates the waiting routes (its …/wait
	// answered API Gateway's 404), so waiting rounds go to the try route
	// with wait_seconds, as before the split; remembered for the client's
	// life.
	tryRouteWaits atomic.Bool

	cleanups cleanups           // releases of grants nobody waited for
	latest   latestAcquisitions // acquisitions per (resource, chosen owner)
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
