package goclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// TestKeepAliveWithLocalRunner renews a lease against the real handlers
// and dynalite: with a TTL of 1 s it is renewed every ~333 ms. The
// client's transport holds each renewal request until the test has looked
// at the lease: the keep-alive sends a renewal only after it applied the
// one before, so the lease's expiry is steady while the test looks.
func TestKeepAliveWithLocalRunner(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	renewing := make(chan struct{}) // a renewal request is about to be sent
	proceed := make(chan struct{})  // it may go
	checked := make(chan struct{})  // closed: renewals go unwatched
	defer close(checked)
	c := newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Path, "/renew") {
			select {
			case renewing <- struct{}{}:
				select {
				case <-proceed:
				case <-checked:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			case <-checked:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
		return http.DefaultTransport.RoundTrip(r)
	})}))
	res := resourceName(t)
	l := acquire(t, c, res, "w1", 6*time.Second) // renewed every 2 s, not lost to a stall of seconds
	ctx := testContext(t, 30*time.Second)
	// The lease's expiry before the first, second and third renewal. A
	// renewal whose attempt timed out on a loaded machine is sent again
	// (the expiry unchanged): that is the same renewal, and its first
	// attempt may have landed unseen.
	var expiries []time.Time
	retried := false
	for len(expiries) < 3 {
		select {
		case <-l.Done():
			t.Fatalf("lease lost while kept alive: %v", l.Err())
		case <-ctx.Done():
			t.Fatalf("no two renewals within 30s")
		case <-renewing:
		}
		if n := len(expiries); n > 0 && l.ExpiresAt().Equal(expiries[n-1]) {
			retried = true
			proceed <- struct{}{}
			continue
		}
		expiries = append(expiries, l.ExpiresAt())
		if len(expiries) < 3 {
			proceed <- struct{}{}
		}
	}
	if !expiries[1].After(expiries[0]) || !expiries[2].After(expiries[1]) {
		t.Errorf("expiry after the grant and two renewals: got %v, want each later than the one before", expiries)
	}
	got, err := c.Status(ctx, res)
	if err != nil || got.FencingToken != l.FencingToken() || got.ExpiresAt.Before(l.ExpiresAt()) ||
		(!retried && !got.ExpiresAt.Equal(l.ExpiresAt())) {
		t.Fatalf("Status: got %+v, %v, want the lease with token %d expiring at %s (or later after a retried renewal: %v)",
			got, err, l.FencingToken(), l.ExpiresAt(), retried)
	}
}

func TestReleaseSendsFencingToken(t *testing.T) {
	t.Parallel()
	c := startClient(t, client.WithoutKeepAlive())
	res := resourceName(t)
	old := acquire(t, c, res, "w1", 30*time.Second)
	newer := acquire(t, c, res, "w1", 30*time.Second)
	if err := old.Release(context.Background()); !errors.Is(err, client.ErrStaleToken) {
		t.Errorf("Release of the replaced lease: got %v, want ErrStaleToken", err)
	}
	if got, err := c.Status(context.Background(), res); err != nil || got.FencingToken != newer.FencingToken() {
		t.Errorf("Status: got %+v, %v, want the newer lease (token %d) still live", got, err, newer.FencingToken())
	}
}

// flakyCreds fails Retrieve while failing is set, like an SSO or STS
// refresh that hiccups once.
type flakyCreds struct {
	failing sync.Mutex
	fail    bool
}

func (f *flakyCreds) set(fail bool) { f.failing.Lock(); f.fail = fail; f.failing.Unlock() }

func (f *flakyCreds) Retrieve(context.Context) (aws.Credentials, error) {
	f.failing.Lock()
	defer f.failing.Unlock()
	if f.fail {
		return aws.Credentials{}, errors.New("sts: connection reset")
	}
	// Already expired: the client's credentials cache asks again every time.
	return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET", Source: "test", CanExpire: true, Expires: time.Now()}, nil
}

// TestCredentialHiccupKeepsLease: a renewal that fails because credentials
// could not be retrieved once is temporary; the lease stays held.
func TestCredentialHiccupKeepsLease(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{}) // accepts any signature
	creds := &flakyCreds{}
	c, err := client.New(srv.URL, client.WithSigV4("eu-west-1", creds))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := c.TryAcquire(context.Background(), "creds-"+fmt.Sprint(time.Now().UnixNano()), "w1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	creds.set(true)
	if err := lease.Renew(context.Background()); err == nil || errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("renew without credentials: got %v, want a temporary error", err)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease after a credentials hiccup: got %v, want still held", err)
	}
	creds.set(false)
	if err := lease.Renew(context.Background()); err != nil {
		t.Fatalf("renew after the hiccup: %v", err)
	}
}
