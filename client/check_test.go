package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// TestCheckReadsTheClock: every way of asking whether a lease is held reads
// the clock at the call. The lease's timer is stopped (a pause after which
// the work's own timer ran first) and no renewal gets through, so only the
// clock can tell: held an instant before the local deadline, lost at it
// with ErrLeaseExpired, the loss recorded once, and Done closed.
func TestCheckReadsTheClock(t *testing.T) {
	t.Parallel()
	// asker asks once whether lease l is held (nil: held); fctx is the
	// context WithLock gave fn, e the Election that won l.
	type asker func(l *client.Lease, fctx context.Context, e *client.Election) error
	campaign := func(e *client.Election) (*client.Lease, error) {
		return e.Campaign(context.Background(), client.WithTTL(3*time.Second), client.WithOwner("w1"))
	}
	tests := []struct {
		name string
		ask  asker
		// wantErr checks the answer at the deadline (nil: any error).
		wantErr func(error) bool
	}{
		{name: "Check", ask: func(l *client.Lease, _ context.Context, _ *client.Election) error { return l.Check() }, wantErr: isExpiry},
		{name: "Err", ask: func(l *client.Lease, _ context.Context, _ *client.Election) error { return l.Err() }, wantErr: isExpiry},
		{name: "Done", ask: func(l *client.Lease, _ context.Context, _ *client.Election) error { return closed(l.Done()) }},
		{name: "ContextErr", ask: func(l *client.Lease, _ context.Context, _ *client.Election) error { return l.Context().Err() }, wantErr: isCanceled},
		{name: "ContextDone", ask: func(l *client.Lease, _ context.Context, _ *client.Election) error { return closed(l.Context().Done()) }},
		{name: "ContextCause", ask: func(l *client.Lease, _ context.Context, _ *client.Election) error { return context.Cause(l.Context()) }, wantErr: isExpiry},
		{name: "WithLockContextErr", ask: func(_ *client.Lease, fctx context.Context, _ *client.Election) error { return fctx.Err() }, wantErr: isCanceled},
		{name: "WithLockContextCause", ask: func(_ *client.Lease, fctx context.Context, _ *client.Election) error { return context.Cause(fctx) }, wantErr: isExpiry},
		{
			// Campaign returns the leadership this Election holds, but
			// not once its deadline has passed: then it campaigns anew.
			name: "CampaignWhileLeading",
			ask: func(l *client.Lease, _ context.Context, e *client.Election) error {
				got, err := campaign(e)
				switch {
				case err != nil:
					return err
				case got != l:
					return errors.New("a new term")
				}
				return nil
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				f.intercept = hangRenewals
				c := newFakeClient(t, f, client.WithoutKeepAlive())
				// check asks tt's question an instant before l's local
				// deadline and at it.
				check := func(l *client.Lease, fctx context.Context, e *client.Election) {
					client.StopWatchdog(l)
					time.Sleep(time.Until(l.Deadline()) - time.Nanosecond)
					if err := tt.ask(l, fctx, e); err != nil {
						t.Errorf("an instant before the local deadline: got %v, want held", err)
					}
					time.Sleep(time.Nanosecond)
					err := tt.ask(l, fctx, e)
					switch {
					case err == nil:
						t.Errorf("at the local deadline: got held, want the loss")
					case tt.wantErr != nil && !tt.wantErr(err):
						t.Errorf("at the local deadline: got %v, want the loss", err)
					}
					if closed(l.Done()) == nil {
						t.Error("Done still open after the loss")
					}
					if first, again := l.Err(), l.Err(); first != again || !isExpiry(first) {
						t.Errorf("Err twice: got %v and %v, want one ErrLeaseExpired loss", first, again)
					}
				}
				switch {
				case strings.HasPrefix(tt.name, "WithLock"):
					err := c.WithLock(context.Background(), "r", func(fctx context.Context, l *client.Lease) error {
						check(l, fctx, nil)
						return fctx.Err()
					}, client.WithTTL(3*time.Second))
					// The loss, not "context canceled" (fn returned ctx.Err()).
					if !isExpiry(err) || strings.Contains(err.Error(), "context canceled") {
						t.Errorf("WithLock: got %q, want the loss alone", err)
					}
				case strings.HasPrefix(tt.name, "Campaign"):
					e := client.NewElection(c, "r")
					l, err := campaign(e)
					if err != nil {
						t.Fatal(err)
					}
					check(l, nil, e)
					f.intercept = nil
					if err := e.Resign(context.Background()); err != nil {
						t.Errorf("Resign: %v", err)
					}
				default:
					check(fakeLease(t, c, "r", "w1"), nil, nil)
				}
				f.intercept = nil
			})
		})
	}
}

// hangRenewals is a fakeAPI intercept under which every renewal waits
// until its caller gives up.
func hangRenewals(c call) (*http.Response, error) {
	if c.Op != "renew" {
		return nil, nil
	}
	<-c.Ctx.Done()
	return nil, c.Ctx.Err()
}

func isExpiry(err error) bool {
	return errors.Is(err, client.ErrLeaseLost) && errors.Is(err, client.ErrLeaseExpired)
}

func isCanceled(err error) bool { return errors.Is(err, context.Canceled) }

// closed is nil while ch is open, and an error once it is closed.
func closed(ch <-chan struct{}) error {
	select {
	case <-ch:
		return errors.New("closed")
	default:
		return nil
	}
}

// TestDeliveryDelay measures, on the real clock, when the asynchronous
// signal (Done) of many leases arrives relative to their local deadlines,
// and logs the figures (docs/clients.md quotes them). It asserts only what
// cannot flake: no signal comes before deadline − DeliveryAllowance, and a
// Check made once the deadline has passed reports the loss even when the
// lease's timer is stopped.
func TestDeliveryDelay(t *testing.T) {
	t.Parallel()
	const n = 200 // leases of each kind, 1 s each, at once
	c := newFakeClient(t, newFakeAPI(), client.WithoutKeepAlive())
	late := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		async, err := c.TryAcquire(context.Background(), fmt.Sprintf("async-%d", i), "w", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held, err := c.TryAcquire(context.Background(), fmt.Sprintf("sync-%d", i), "w", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		client.StopWatchdog(held)
		wg.Go(func() {
			<-async.Done()
			late[i] = time.Since(async.Deadline())
		})
		wg.Go(func() {
			time.Sleep(time.Until(held.Deadline()))
			if err := held.Check(); !isExpiry(err) {
				t.Errorf("Check past the local deadline: got %v, want ErrLeaseExpired", err)
			}
		})
	}
	wg.Wait()
	slices.Sort(late)
	after := n - sort.Search(n, func(i int) bool { return late[i] > 0 })
	t.Logf("Done relative to the local deadline, %d leases of 1 s (DeliveryAllowance %s): min %s, median %s, p90 %s, p99 %s, max %s; %d after the deadline",
		n, client.DeliveryAllowance, late[0], late[n/2], late[n*9/10], late[n*99/100], late[n-1], after)
	if late[0] < -client.DeliveryAllowance {
		t.Errorf("a Done came %s before the local deadline, want at most DeliveryAllowance (%s) before", -late[0], client.DeliveryAllowance)
	}
}
