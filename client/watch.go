package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WatchResult is one answer of Watch: the state of a lock as a watcher
// sees it.
type WatchResult struct {
	// Resource is the lock's name.
	Resource string `json:"resource"`
	// Index identifies the state: 0 for a lock never taken, else 2 × the
	// latest fencing token, plus 1 once that lease has ended. It only
	// grows, and changes exactly when a lease is granted or ends (a
	// renewal is no change). Pass it to the next Watch.
	Index int64 `json:"index"`
	// Changed reports whether Index differs from the index asked with.
	Changed bool `json:"changed"`
	// FencingToken is the latest lease's token, live or not; 0 for a lock
	// never taken.
	FencingToken int64 `json:"fencing_token,omitempty"`
	// Lock is the live lease; nil when there is none.
	Lock *Lock `json:"lock,omitempty"`
}

// Watch asks once for the state of resource as soon as it differs from
// index (the Index of the last answer; 0 for none), waiting at the service
// for up to wait (whole seconds, 0 to MaxServerWait; 0 answers at once,
// and the HTTP client's timeout may shorten it). Answers of a service that
// could not decide (ErrUnavailable: 503, API Gateway's throttles and
// gateway errors) are retried with backoff until ctx ends; other failures
// are returned.
func (c *Client) Watch(ctx context.Context, resource string, index int64, wait time.Duration) (WatchResult, error) {
	if err := checkWatch(resource, index, wait); err != nil {
		return WatchResult{}, fmt.Errorf("watch %q: %w", resource, err)
	}
	path := lockPath(resource) + "/watch?" + c.watchQuery(index, wait)
	var r WatchResult
	err := c.watchRetrying(ctx, fmt.Sprintf("watch %q", resource), path, func(resp *response) (err error) {
		r, err = watchResult(resp, resource)
		return err
	})
	return r, err
}

// watchQuery is a watch request's query: index, and wait shortened by
// watchWait.
func (c *Client) watchQuery(index int64, wait time.Duration) string {
	return "index=" + strconv.FormatInt(index, 10) + "&wait_seconds=" + strconv.FormatInt(int64(c.watchWait(wait)/time.Second), 10)
}

// watchWait shortens a watch's wait to leave the answer time to arrive
// within the HTTP client's timeout.
func (c *Client) watchWait(wait time.Duration) time.Duration {
	if c.hc.Timeout > 0 {
		wait = max(0, min(wait, (c.hc.Timeout-answerMargin).Truncate(time.Second)))
	}
	return wait
}

// watchRetrying sends the watch request of path until it gets an answer,
// which decode reads, retrying ErrUnavailable answers with backoff until
// ctx ends; label names the call in errors.
func (c *Client) watchRetrying(ctx context.Context, label, path string, decode func(*response) error) error {
	var last error // the latest answer retried
	gaveUp := func() error {
		if last == nil {
			return fmt.Errorf("%s: %w", label, context.Cause(ctx))
		}
		return fmt.Errorf("%s: gave up: %w (last attempt: %w)", label, context.Cause(ctx), last)
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.send(ctx, http.MethodGet, path, nil)
		switch {
		case err == nil:
			return decode(resp)
		case ctx.Err() != nil:
			return gaveUp()
		case !errors.Is(err, ErrUnavailable):
			return fmt.Errorf("%s: %w", label, err)
		}
		last = err
		if !sleepCtx(ctx, c.backoff.delay(attempt, hint(err))) {
			return gaveUp()
		}
	}
}

// checkWatch checks Watch's arguments.
func checkWatch(resource string, index int64, wait time.Duration) error {
	switch {
	case resource == "" || strings.Contains(resource, "/"):
		return fmt.Errorf("%w: resource must be non-empty and without \"/\"", ErrValidation)
	case index < 0:
		return fmt.Errorf("%w: index %d: want 0 or the Index of an answer", ErrValidation, index)
	case wait < 0 || wait > MaxServerWait || wait%time.Second != 0:
		return fmt.Errorf("%w: wait %s: want whole seconds from 0 to %s", ErrValidation, wait, MaxServerWait)
	}
	return nil
}

// watchResult decodes and checks a watch answer.
func watchResult(resp *response, resource string) (WatchResult, error) {
	var r WatchResult
	if err := resp.decode(&r); err != nil {
		return WatchResult{}, fmt.Errorf("watch %q: %w", resource, err)
	}
	malformed := r.Index < 0 || r.FencingToken < 0
	if r.Lock != nil {
		malformed = malformed || r.Lock.check(resource) != nil
	}
	if malformed {
		return WatchResult{}, fmt.Errorf("watch %q: malformed response: %s", resource, resp.body)
	}
	if r.Resource == "" {
		r.Resource = resource
	}
	return r, nil
}
