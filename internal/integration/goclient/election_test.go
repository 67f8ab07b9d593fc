package goclient_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// TestWatchLocal: Watch against the real handlers answers a lock never
// taken with index 0, then each grant and release as it happens.
func TestWatchLocal(t *testing.T) {
	t.Parallel()
	c := startClient(t)
	ctx := testContext(t, 60*time.Second)
	res := resourceName(t)
	r, err := c.Watch(ctx, res, 0, 0)
	if err != nil || r.Index != 0 || r.Changed || r.Lock != nil || r.FencingToken != 0 {
		t.Fatalf("never taken: got %+v, %v; want index 0, unchanged", r, err)
	}
	l := acquire(t, c, res, "w1", 30*time.Second)
	r, err = c.Watch(ctx, res, 0, 5*time.Second)
	if err != nil || r.Index != 2*l.FencingToken() || !r.Changed || r.Lock == nil || r.Lock.Owner != "w1" {
		t.Fatalf("held: got %+v, %v; want index %d with w1's lease", r, err, 2*l.FencingToken())
	}
	done := make(chan client.WatchResult, 1)
	go func() {
		r, err := c.Watch(ctx, res, r.Index, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Index != 2*l.FencingToken()+1 || r.Lock != nil || r.FencingToken != l.FencingToken() {
		t.Errorf("released: got %+v, want index %d without a lease", r, 2*l.FencingToken()+1)
	}
}

// observer collects an election's Observations.
type observer struct {
	t   *testing.T
	ch  <-chan client.Observation
	got []client.Observation
}

// observe starts observing the election name of c until the test ends.
func observe(t *testing.T, c *client.Client, name string) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &observer{t: t, ch: client.NewElection(c, name).Observe(ctx)}
}

// until reads Observations until one shows owner leading (up to 10 s).
func (o *observer) until(owner string) {
	o.t.Helper()
	// 20 s: a watch answers within ~0.2 s of a change, but the -race
	// suite on two loaded cores has taken over 10 s.
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ob := <-o.ch:
			o.got = append(o.got, ob)
			if ob.Leader != nil && ob.Leader.Owner == owner {
				return
			}
		case <-timeout:
			o.t.Fatalf("no Observation of %q leading within 20s; got %+v", owner, o.got)
		}
	}
}

// check checks that the leaders observed are the terms of leases, in
// order, each after the one before without a term missed (Skipped 0), and
// that each state has a larger index.
func (o *observer) check(leases ...*client.Lease) {
	o.t.Helper()
	var leaders []string
	for i, ob := range o.got {
		if ob.Skipped != 0 {
			o.t.Errorf("Observation %d: skipped %d, want 0", i, ob.Skipped)
		}
		if i > 0 && ob.Index <= o.got[i-1].Index {
			o.t.Errorf("Observation %d: index %d after %d, want it larger", i, ob.Index, o.got[i-1].Index)
		}
		if ob.Leader != nil {
			leaders = append(leaders, ob.Leader.Owner)
		}
	}
	var want []string
	for _, l := range leases {
		want = append(want, l.Owner())
	}
	if strings.Join(leaders, ",") != strings.Join(want, ",") {
		o.t.Errorf("leaders observed: got %v, want %v", leaders, want)
	}
}

// campaignTransport signals on sent each acquire request it sends, and
// fails every renewal while failRenewals is closed.
func campaignTransport(sent chan<- struct{}, failRenewals <-chan struct{}) client.Option {
	return client.WithHTTPClient(&http.Client{Timeout: client.DefaultTimeout, Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/renew") {
			select {
			case <-failRenewals:
				return nil, errors.New("partitioned")
			default:
			}
		} else if r.Method == http.MethodPost {
			select {
			case sent <- struct{}{}:
			default:
			}
		}
		return http.DefaultTransport.RoundTrip(r)
	})})
}

// TestElectionLocal: two candidates against the real handlers, one leader
// at a time; the second takes over when the first resigns, or when the
// first is cut off from the service and its lease runs out (it knows it
// lost before the second is granted); an observer sees the leaders in
// order.
func TestElectionLocal(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Resign", "Loss"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			name := resourceName(t)
			cut := make(chan struct{})
			ca := newClient(t, srv.URL, campaignTransport(make(chan struct{}, 1), cut))
			sentB := make(chan struct{}, 1)
			cb := newClient(t, srv.URL, campaignTransport(sentB, make(chan struct{})))
			obs := observe(t, newClient(t, srv.URL), name)
			ctx := testContext(t, 60*time.Second)

			a, b := client.NewElection(ca, name), client.NewElection(cb, name)
			// 6 s: the observer must see it lead before a stall of seconds
			// could end its lease.
			la, err := a.Campaign(ctx, client.WithTTL(6*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Resign(context.Background())
			obs.until(la.Owner())
			won := make(chan *client.Lease, 1)
			go func() {
				// A longer lease than the first's: its grant may come late
				// on a loaded machine (the round waited for the first's
				// expiry), and the observer must see it lead before it
				// could lapse; the takeover's timing is the first's TTL.
				l, err := b.Campaign(ctx, client.WithTTL(10*time.Second))
				if err != nil {
					t.Errorf("second Campaign: %v", err)
				}
				won <- l
			}()
			<-sentB // the second candidate asks the service
			if l, err := b.Leader(ctx); err != nil || l.Owner != la.Owner() || l.FencingToken != la.FencingToken() {
				t.Fatalf("Leader while the first leads: got %+v, %v; want %q", l, err, la.Owner())
			}
			select {
			case <-won:
				t.Fatal("the second candidate won while the first led")
			default:
			}
			switch how {
			case "Resign":
				if err := a.Resign(ctx); err != nil {
					t.Fatal(err)
				}
			case "Loss":
				close(cut)
			}
			var lb *client.Lease
			select {
			case lb = <-won:
			case <-time.After(15 * time.Second):
				t.Fatal("the second candidate did not take over within 15s")
			}
			if lb == nil {
				return
			}
			defer b.Resign(context.Background())
			// The first knew before the second was granted.
			select {
			case <-la.Done():
			default:
				t.Errorf("the second candidate won while the first still believed it led")
			}
			if how == "Loss" && !errors.Is(la.Err(), client.ErrLeaseExpired) {
				t.Errorf("first lease: got %v, want lost at its local deadline", la.Err())
			}
			if lb.FencingToken() <= la.FencingToken() {
				t.Errorf("second term's token %d, want larger than %d", lb.FencingToken(), la.FencingToken())
			}
			obs.until(lb.Owner())
			obs.check(la, lb)
			if l, err := a.Leader(ctx); err != nil || l.Owner != lb.Owner() {
				t.Errorf("Leader: got %+v, %v; want %q", l, err, lb.Owner())
			}
		})
	}
}
