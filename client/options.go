package client

import (
	"errors"
	"fmt"
	"net/http"
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

// AcquireOption shapes one acquire (TryAcquire or Acquire).
type AcquireOption func(*acquireOptions) error

type acquireOptions struct {
	lockDelay time.Duration // 0: none
}

// WithLockDelay asks for a lease with a lock-delay of d, whole seconds (0:
// none): if the lease expires unreleased, nobody can take the lock until d
// after its expiry. Lock().LockDelaySeconds reports what was granted.
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < 0 || d%time.Second != 0 {
			return fmt.Errorf("%w: lock delay %s: must be a whole number of seconds, 0 or more", ErrInvalid, d)
		}
		o.lockDelay = d
		return nil
	}
}
