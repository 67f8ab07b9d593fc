package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

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

// WithLeaseMargin sets how long before the end of its TTL (counted from
// before the request that granted or renewed it) a lease is given up when
// no renewal succeeded. Default min(ttl/10, 1s), also for a margin ≥ ttl.
func WithLeaseMargin(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("WithLeaseMargin(%s): want a positive duration", d)
		}
		c.margin = d
		return nil
	}
}

// WithoutKeepAlive makes leases start without background renewals: the
// caller renews with Lease.Renew or starts them with Lease.KeepAlive, or the
// lease is lost at its local deadline.
func WithoutKeepAlive() Option {
	return func(c *Client) error {
		c.noRenew = true
		return nil
	}
}

// WithoutServerWait makes Acquire (and the semaphore's, read/write lock's
// and lock set's waits) poll, as against a service that does
// not wait: one attempt at a time with backoff in between, instead of
// asking the service to hold each request until the lock is free.
func WithoutServerWait() Option {
	return func(c *Client) error {
		c.pollOnly.Store(true)
		c.semPollOnly.Store(true)
		c.rwPollOnly.Store(true)
		c.setPollOnly.Store(true)
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

// AcquireOption shapes one acquire (TryAcquire, Acquire or WithLock, and
// their semaphore counterparts).
type AcquireOption func(*acquireOptions) error

type acquireOptions struct {
	lockDelay time.Duration // 0: none
	ttl       time.Duration // WithTTL; 0: DefaultTTL
	owner     string        // WithOwner; "": a new unique owner
	// wait is WithWait's bound, when waitSet; noWaitLimit is
	// WithoutWaitLimit.
	wait        time.Duration
	waitSet     bool
	noWaitLimit bool
	// setPrefix is WithSetPrefix's (lock sets only); "": the names'
	// longest common prefix.
	setPrefix string
}

// WithLockDelay asks for a lease with a lock-delay of d, whole seconds (0:
// none): if the lease expires unreleased, nobody can take the lock until d
// after its expiry. Lock().LockDelaySeconds reports what was granted.
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < 0 || d%time.Second != 0 {
			return fmt.Errorf("%w: lock delay %s: must be a whole number of seconds, 0 or more", ErrValidation, d)
		}
		o.lockDelay = d
		return nil
	}
}

// WithTTL sets the lease's time-to-live (whole seconds, at least one) of
// WithLock, and of TryAcquire and Acquire when their ttl argument is 0.
// Without it that is DefaultTTL.
func WithTTL(ttl time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if ttl < time.Second || ttl%time.Second != 0 {
			return fmt.Errorf("%w: ttl %s: must be a whole number of seconds, at least 1s", ErrValidation, ttl)
		}
		o.ttl = ttl
		return nil
	}
}

// WithOwner sets the owner of WithLock's lease, and of TryAcquire's and
// Acquire's when their owner argument is "". Without it the client makes
// up an owner no other lease has (see the package documentation on owners).
func WithOwner(owner string) AcquireOption {
	return func(o *acquireOptions) error {
		if strings.TrimSpace(owner) == "" {
			return fmt.Errorf("%w: empty owner", ErrValidation)
		}
		o.owner = owner
		return nil
	}
}

// WithWait bounds how long Acquire (and WithLock) wait for the lock: d
// instead of DefaultAcquireWait, or ctx's deadline if that comes first.
// WithWait(0) asks once, as TryAcquire does. TryAcquire ignores it.
func WithWait(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: wait %s: must not be negative", ErrValidation, d)
		}
		o.wait, o.waitSet, o.noWaitLimit = d, true, false
		return nil
	}
}

// WithoutWaitLimit makes Acquire (and WithLock) wait until ctx ends, even
// when ctx has no deadline, instead of at most DefaultAcquireWait.
func WithoutWaitLimit() AcquireOption {
	return func(o *acquireOptions) error {
		o.wait, o.waitSet, o.noWaitLimit = 0, false, true
		return nil
	}
}
