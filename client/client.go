package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
	// DefaultTimeout bounds one HTTP exchange of the default HTTP client.
	DefaultTimeout = 30 * time.Second
	// SigV4Service is the service name requests are signed for.
	SigV4Service = "execute-api"
)

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 1 << 20

// Client talks to one lock service. It is safe for concurrent use; build
// one per process and share it.
type Client struct {
	base      string // scheme://host[/stage], without a trailing slash
	hc        *http.Client
	userAgent string
	backoff   backoff
	margin    time.Duration // 0: min(ttl/10, 1s)
	sign      *sigv4
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
// larger margin covers more pause and clock-rate error.
func WithLeaseMargin(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("WithLeaseMargin(%s): want a positive duration", d)
		}
		c.margin = d
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
}

func (l Lock) check(resource string) error {
	if l.FencingToken <= 0 || l.Owner == "" || l.ExpiresAt.IsZero() {
		return fmt.Errorf("malformed lock in response for %q", resource)
	}
	return nil
}

// TryAcquire asks once for a lease of ttl on resource for owner. It returns
// the lease, or a *HeldError (errors.Is(err, ErrHeld)) when another owner
// holds the lock. ttl must be whole seconds, at least one. An owner that
// already holds the lock gets a new lease with a larger fencing token, so
// repeating a TryAcquire whose answer was lost is safe.
func (c *Client) TryAcquire(ctx context.Context, resource, owner string, ttl time.Duration) (*Lease, error) {
	if err := checkArgs(resource, owner, ttl); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", resource, err)
	}
	return c.tryAcquire(ctx, resource, owner, ttl)
}

func (c *Client) tryAcquire(ctx context.Context, resource, owner string, ttl time.Duration) (*Lease, error) {
	t0 := time.Now() // before sending: the lease cannot have started earlier
	resp, err := c.send(ctx, http.MethodPost, lockPath(resource), map[string]any{
		"owner": owner, "ttl_seconds": int64(ttl / time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", resource, err)
	}
	var body struct {
		Acquired  bool   `json:"acquired"`
		Lock      *Lock  `json:"lock"`
		ExpiresAt string `json:"expires_at"`
	}
	if err := resp.decode(&body); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", resource, err)
	}
	if !body.Acquired {
		held := &HeldError{Resource: resource, RetryAfter: resp.retryAfter()}
		if body.ExpiresAt != "" {
			held.ExpiresAt, _ = time.Parse(time.RFC3339, body.ExpiresAt)
		}
		return nil, held
	}
	if body.Lock == nil {
		return nil, fmt.Errorf("acquire %q: malformed response: acquired without a lock", resource)
	}
	if err := body.Lock.check(resource); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", resource, err)
	}
	return newLease(c, *body.Lock, ttl, t0), nil
}

// Acquire waits for a lease of ttl on resource for owner until ctx ends.
// Between attempts it waits with jittered exponential backoff, at least the
// service's Retry-After (capped at the backoff maximum, so an early release
// is noticed) but never past ctx's end. Answers that may be temporary (503,
// other 5xx, network failures) are retried the same way. When ctx ends it
// returns an error that matches both ctx's error and the last attempt's
// (ErrHeld while the lock stayed held).
func (c *Client) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (*Lease, error) {
	if err := checkArgs(resource, owner, ttl); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", resource, err)
	}
	var last error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, waitErr(ctx, resource, last)
		}
		lease, err := c.tryAcquire(ctx, resource, owner, ttl)
		if err == nil {
			return lease, nil
		}
		if ctx.Err() != nil {
			if last == nil || errors.Is(err, ErrHeld) {
				last = err
			}
			return nil, waitErr(ctx, resource, last)
		}
		if !errors.Is(err, ErrHeld) && !retryable(err) {
			return nil, err
		}
		last = err
		t := time.NewTimer(c.backoff.delay(attempt, hint(err)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, waitErr(ctx, resource, last)
		case <-t.C:
		}
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
// it again. Most callers use Lease.Renew or Lease.KeepAlive instead.
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
			return nil, &permanentError{fmt.Errorf("encode request: %w", err)}
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, &permanentError{fmt.Errorf("build request: %w", err)}
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
			return nil, err
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
