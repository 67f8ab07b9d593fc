package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// campaign runs e.Campaign in the background; the lease (or error) comes
// on the channel.
func campaign(e *client.Election, ctx context.Context, opts ...client.AcquireOption) <-chan *client.Lease {
	ch := make(chan *client.Lease, 1)
	go func() {
		l, err := e.Campaign(ctx, opts...)
		if err != nil {
			l = nil
		}
		ch <- l
	}()
	return ch
}

// TestCampaign: of two candidates one leads at a time; the second takes
// over when the first resigns, or when the first loses its lease; each
// term has a larger token.
func TestCampaign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		end  func(t *testing.T, f *fakeAPI, e *client.Election) // ends the first term at 5 s
		// wantFirst is the first lease's error once the term ended.
		wantFirst error
	}{
		{name: "Resign", end: func(t *testing.T, f *fakeAPI, e *client.Election) {
			if err := e.Resign(context.Background()); err != nil {
				t.Errorf("Resign: %v", err)
			}
		}, wantFirst: client.ErrReleased},
		{name: "Loss", end: func(t *testing.T, f *fakeAPI, e *client.Election) { f.forceRelease("leader") }, wantFirst: client.ErrLeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				// Two processes: each its own client.
				e1 := client.NewElection(newFakeClient(t, f), "leader")
				e2 := client.NewElection(newFakeClient(t, f), "leader")
				first, err := e1.Campaign(context.Background(), client.WithTTL(3*time.Second))
				if err != nil {
					t.Fatalf("first Campaign: %v", err)
				}
				second := campaign(e2, context.Background(), client.WithTTL(3*time.Second))
				time.Sleep(5 * time.Second)
				select {
				case l := <-second:
					t.Fatalf("second candidate leads (%v) while the first does", l)
				default:
				}
				if first.Err() != nil {
					t.Fatalf("first term ended before 5 s: %v", first.Err())
				}
				tt.end(t, f, e1)
				l := <-second
				if l == nil {
					t.Fatal("second Campaign failed")
				}
				defer e2.Resign(context.Background())
				<-first.Done() // a loss shows at the next renewal, within 1 s
				if !errors.Is(first.Err(), tt.wantFirst) {
					t.Errorf("first lease: got %v, want %v", first.Err(), tt.wantFirst)
				}
				if l.FencingToken() <= first.FencingToken() || l.Owner() == first.Owner() {
					t.Errorf("second term: token %d owner %q, want a larger token than %d and another owner than %q",
						l.FencingToken(), l.Owner(), first.FencingToken(), first.Owner())
				}
				leader, err := e1.Leader(context.Background())
				if err != nil || leader.Owner != l.Owner() || leader.FencingToken != l.FencingToken() {
					t.Errorf("Leader: got %+v, %v; want %q with token %d", leader, err, l.Owner(), l.FencingToken())
				}
			})
		})
	}
}

// TestCampaignWhileLeading: a Campaign of the Election that leads returns
// its lease without a request; after Resign it campaigns anew.
func TestCampaignWhileLeading(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		e := client.NewElection(newFakeClient(t, f), "leader")
		a, err := e.Campaign(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Campaign(context.Background())
		if err != nil || b != a {
			t.Fatalf("second Campaign: got %p, %v; want the same lease %p", b, err, a)
		}
		if got := f.log("acquire"); len(got) != 1 {
			t.Errorf("acquires: got %v, want one", got)
		}
		if err := e.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := e.Resign(context.Background()); err != nil {
			t.Errorf("Resign when not leading: got %v, want nil", err)
		}
		if got := f.log("release"); len(got) != 1 {
			t.Errorf("releases: got %v, want one", got)
		}
		c, err := e.Campaign(context.Background())
		if err != nil || c == a || c.FencingToken() <= a.FencingToken() {
			t.Fatalf("Campaign after Resign: got %v, %v; want a new term", c, err)
		}
		_ = e.Resign(context.Background())
	})
}

// TestCampaignKeepsAlive: the leadership lease renews itself even from a
// client made WithoutKeepAlive.
func TestCampaignKeepsAlive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		e := client.NewElection(newFakeClient(t, f, client.WithoutKeepAlive()), "leader")
		l, err := e.Campaign(context.Background(), client.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if l.Err() != nil || len(f.log("renew")) < 9 {
			t.Errorf("after 10 s: lease %v, renewals %d; want held, renewed every second", l.Err(), len(f.log("renew")))
		}
		_ = e.Resign(context.Background())
	})
}

// TestCampaignEndsWithContext: a Campaign that does not win before ctx
// ends returns ctx's error.
func TestCampaignEndsWithContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		c := newFakeClient(t, f)
		holder := fakeLease(t, c, "leader", "other")
		defer holder.Release(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := client.NewElection(c, "leader").Campaign(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrHeld) {
			t.Errorf("Campaign: got %v, want the deadline and ErrHeld", err)
		}
		if now := at(time.Now()); now != time.Minute {
			t.Errorf("gave up at %s, want at the deadline, 1m (not DefaultAcquireWait)", now)
		}
	})
}

// TestLeaderNone: nobody leads: ErrNoLeader, which matches ErrNotFound.
func TestLeaderNone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, err := client.NewElection(newFakeClient(t, newFakeAPI()), "leader").Leader(context.Background())
		if !errors.Is(err, client.ErrNoLeader) || !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Leader: got %v, want ErrNoLeader and ErrNotFound", err)
		}
	})
}

// observed is what an Observation says, for comparing.
type observed struct {
	owner   string // "" for no leader
	index   int64
	skipped int
}

func summary(o client.Observation) observed {
	s := observed{index: o.Index, skipped: o.Skipped}
	if o.Leader != nil {
		s.owner = o.Leader.Owner
	}
	return s
}

// TestObserve: the first Observation is the state at the start; then each
// change comes in order, terms that began and ended unseen counted in
// Skipped; the channel closes when ctx ends.
func TestObserve(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		c := newFakeClient(t, f, client.WithoutKeepAlive())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := client.NewElection(c, "leader").Observe(ctx)
		next := func(t *testing.T, want observed) {
			t.Helper()
			o, ok := <-obs
			if got := summary(o); !ok || got != want {
				t.Fatalf("Observation: got %+v (open %t), want %+v", got, ok, want)
			}
			if o.Leader != nil && o.Leader.FencingToken != o.Index/2 {
				t.Errorf("leader's token %d, want index/2 = %d", o.Leader.FencingToken, o.Index/2)
			}
			synctest.Wait() // the observer watches again
		}
		take := func(owner string) *client.Lease { return fakeLease(t, c, "leader", owner) }
		next(t, observed{index: 0})

		a := take("a") // token 1001
		next(t, observed{owner: "a", index: 2002})
		_ = a.Release(context.Background())
		next(t, observed{index: 2003})
		// b's term begins and ends at one instant, before c's: unseen.
		_ = take("b").Release(context.Background())
		cl := take("c") // 1003
		next(t, observed{owner: "c", index: 2006, skipped: 1})
		// c and d end, d unseen: the next state is d's end.
		_ = cl.Release(context.Background())
		_ = take("d").Release(context.Background()) // 1004
		next(t, observed{index: 2009, skipped: 1})
		// A renewal is no change.
		e, err := c.TryAcquire(context.Background(), "leader", "e", 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		next(t, observed{owner: "e", index: 2010})
		time.Sleep(time.Minute)
		if err := e.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		select {
		case o := <-obs:
			t.Fatalf("Observation after a renewal: %+v", summary(o))
		default:
		}
		// The lease expires: no client writes, the watch answers it.
		time.Sleep(time.Minute)
		next(t, observed{index: 2011})

		cancel()
		if o, ok := <-obs; ok {
			t.Errorf("after cancel: got %+v, want the channel closed", summary(o))
		}
		// One long poll per state, each asking with the last index.
		for _, cl := range f.log("watch")[1:] {
			if cl.Wait != client.MaxServerWait {
				t.Errorf("watch %v: wait %s, want %s", cl, cl.Wait, client.MaxServerWait)
			}
		}
	})
}

// TestObserveReconnects: failures, temporary or not, do not end Observe:
// it watches again with backoff and reports what changed meanwhile.
func TestObserveReconnects(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		c := newFakeClient(t, f, client.WithoutKeepAlive())
		fails := 0
		f.intercept = func(cl call) (*http.Response, error) {
			if cl.Op != "watch" || cl.Index == 0 || fails >= 4 {
				return nil, nil
			}
			// Once the observer has seen a leader: every failure once.
			fails++
			switch fails {
			case 1:
				return nil, errors.New("connection reset by peer")
			case 2:
				return problemResponse(500, "internal"), nil
			case 3:
				return gatewayResponse(403, "Forbidden"), nil
			}
			return problemResponse(503, "service-unavailable"), nil
		}
		a := fakeLease(t, c, "leader", "a")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := client.NewElection(c, "leader").Observe(ctx)
		if o := <-obs; summary(o) != (observed{owner: "a", index: 2002}) {
			t.Fatalf("first Observation: got %+v, want a's term", summary(o))
		}
		_ = a.Release(context.Background())
		b := fakeLease(t, c, "leader", "b")
		defer b.Release(context.Background())
		if o := <-obs; summary(o) != (observed{owner: "b", index: 2004}) {
			t.Errorf("after the failures: got %+v, want b's term", summary(o))
		}
		if fails != 4 {
			t.Errorf("failures served: %d, want 4", fails)
		}
		cancel()
		for range obs { // the observer's last watch runs out
		}
	})
}

// TestObserveLowerMaxWait: a service that refuses a 20 s wait (a lower
// MAX_WAIT_SECONDS) is watched with shorter ones.
func TestObserveLowerMaxWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.intercept = func(cl call) (*http.Response, error) {
			if cl.Op == "watch" && cl.Wait > 5*time.Second {
				return jsonResponse(422, nil, map[string]any{
					"type": client.ProblemTypeBase + "validation-failed", "title": "validation-failed", "status": 422,
					"errors": []map[string]string{{"field": "wait_seconds", "detail": "must be at most 5"}},
				}), nil
			}
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for range client.NewElection(newFakeClient(t, f), "leader").Observe(ctx) {
		}
		var waits []time.Duration
		for _, cl := range f.log("watch") {
			waits = append(waits, cl.Wait)
		}
		// 0 (the state now), 20 and 10 refused, then 5 s rounds.
		if len(waits) < 10 || waits[1] != 20*time.Second || waits[2] != 10*time.Second || waits[len(waits)-1] != 5*time.Second {
			t.Errorf("waits asked: got %v, want 0, 20 s, 10 s, then 5 s rounds", waits)
		}
	})
}

// TestObserveInvalidName: a name the client refuses closes the channel at
// once, without a request.
func TestObserveInvalidName(t *testing.T) {
	t.Parallel()
	f := newFakeAPI()
	for range client.NewElection(newFakeClient(t, f), "a/b").Observe(context.Background()) {
		t.Error("got an Observation, want none")
	}
	if calls := f.log(); len(calls) != 0 {
		t.Errorf("requests: got %v, want none", calls)
	}
}
