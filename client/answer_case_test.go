package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// answerTripper answers every POST with body (an acquire's 200) and any
// other request with 204.
type answerTripper struct{ body string }

func (a answerTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	if r.Method != http.MethodPost {
		return &http.Response{StatusCode: 204, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(a.body))}, nil
}

// TestAcquireAnswerLeaseFieldAnyCase: an acquire's 200 answer is decoded
// by encoding/json's rules for every field, the lease's too — a key that
// differs from the lease field's name only in case is that field, as it
// was before the kinds shared one answer sorter (sortAnswer matched the
// lease's key exactly and called such a grant malformed, an unknown
// outcome).
func TestAcquireAnswerLeaseFieldAnyCase(t *testing.T) {
	exp := time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	at := time.Now().UTC().Format(time.RFC3339Nano)
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name, body string
		acquire    func(ctx context.Context, c *client.Client) (*client.Lease, error)
	}{
		{"Lock", enc(map[string]any{"acquired": true, "Lock": map[string]any{"resource": "r", "owner": "o", "fencing_token": 7,
			"acquired_at": at, "expires_at": exp}}),
			func(ctx context.Context, c *client.Client) (*client.Lease, error) {
				return c.TryAcquire(ctx, "r", "o", time.Minute)
			}},
		{"RWLease", enc(map[string]any{"acquired": true, "LEASE": map[string]any{"name": "r", "mode": "write", "owner": "o",
			"fencing_token": 7, "acquired_at": at, "expires_at": exp}}),
			func(ctx context.Context, c *client.Client) (*client.Lease, error) {
				l, err := c.TryAcquireWrite(ctx, "r", "o", time.Minute)
				if err != nil {
					return nil, err
				}
				return l.Lease, nil
			}},
		{"Permit", enc(map[string]any{"acquired": true, "Permit": map[string]any{"name": "r", "slot": 1, "owner": "o",
			"fencing_token": 7, "acquired_at": at, "expires_at": exp}}),
			func(ctx context.Context, c *client.Client) (*client.Lease, error) {
				p, err := c.TryAcquireSemaphore(ctx, "r", 2, "o", time.Minute)
				if err != nil {
					return nil, err
				}
				return p.Lease, nil
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: answerTripper{tc.body}}),
				client.WithBackoff(time.Millisecond, 10*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			l, err := tc.acquire(ctx, c)
			if err != nil {
				t.Fatalf("acquire: %v, want the grant the answer carries", err)
			}
			if l.FencingToken() != 7 {
				t.Errorf("fencing token %d, want 7", l.FencingToken())
			}
			_ = l.Release(ctx)
		})
	}
}

// TestAcquireRefusalWithMistypedLease: an answer whose lease field has
// the wrong type is malformed even when it refuses — not a refusal the
// caller would wait on — as it was before the kinds shared sortAnswer.
func TestAcquireRefusalWithMistypedLease(t *testing.T) {
	c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: answerTripper{`{"acquired":false,"permit":5}`}}),
		client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = c.TryAcquireSemaphore(ctx, "r", 2, "o", time.Minute)
	if full := (*client.FullError)(nil); err == nil || errors.As(err, &full) || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("acquire: %v, want a malformed answer", err)
	}
}
