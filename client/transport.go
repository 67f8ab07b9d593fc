package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 1 << 20

type sigv4 struct {
	region string
	creds  aws.CredentialsProvider
	signer *v4.Signer
}

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
			Message *string `json:"message"`
		}
		_ = json.Unmarshal(data, &gw)
		p = &ProblemError{gateway: gw.Message != nil}
		if gw.Message != nil {
			p.Title = *gw.Message
		}
		if p.Title == "" {
			p.Title = http.StatusText(resp.StatusCode)
		}
	}
	p.Status = resp.StatusCode
	p.RetryAfter = parseRetryAfter(resp.Header)
	if !p.gateway {
		var ext struct {
			QueueTicket string `json:"queue_ticket"`
		}
		if json.Unmarshal(data, &ext) == nil {
			p.queueTicket = ext.QueueTicket
		}
	}
	// current is a lock's lease, a read/write lock's (it has a mode), or a
	// semaphore's permit (it has a slot and no mode).
	var cur struct {
		Current *struct {
			Slot *int    `json:"slot"`
			Mode *RWMode `json:"mode"`
		} `json:"current"`
	}
	if p.Current != nil && json.Unmarshal(data, &cur) == nil && cur.Current != nil {
		switch {
		case cur.Current.Mode != nil:
			p.Current, p.CurrentRWLease = nil, currentOf[AdminRWLease](data)
		case cur.Current.Slot != nil:
			p.Current, p.CurrentPermit = nil, currentOf[AdminPermit](data)
		}
	}
	return p
}

// currentOf decodes a problem's current member as an L; nil when it is
// not one.
func currentOf[L any](data []byte) *L {
	var c struct {
		Current L `json:"current"`
	}
	if json.Unmarshal(data, &c) != nil {
		return nil
	}
	return &c.Current
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
