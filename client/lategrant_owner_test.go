package client_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestLateGrantOfChosenOwnerAfterRepeat: a chosen-owner TryAcquire whose
// request reaches the service late (a cold start) is given up and repeated
// by the caller; the repeat is granted first, then the late request lands
// and — same owner — replaces that lease. Releasing the late grant would
// free the lock while the caller still holds its lease, so the client must
// leave it to lapse: nobody else may get the lock while the caller's lease
// is live.
func TestLateGrantOfChosenOwnerAfterRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		var n atomic.Int32
		secondServed := make(chan struct{})
		var once sync.Once
		f.intercept = func(c call) (*http.Response, error) {
			if c.Op != "acquire" {
				return nil, nil
			}
			switch n.Add(1) {
			case 1:
				<-secondServed // the first request reaches the service after the second
				return f.serve(c), nil
			case 2:
				r := f.serve(c)
				once.Do(func() { close(secondServed) })
				return r, nil
			}
			return nil, nil
		}
		c := newFakeClient(t, f)
		ctx1, cancel1 := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel1()
		if _, err := c.TryAcquire(ctx1, "r", "job-1", 30*time.Second); err == nil {
			t.Fatal("first TryAcquire: got a lease, want it to give up after 500ms")
		}
		l, err := c.TryAcquire(context.Background(), "r", "job-1", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rel := f.log("release"); len(rel) != 0 {
			t.Errorf("the client sent %d releases, want none (the late grant replaced the caller's lease)", len(rel))
		}
		if other, err := c.TryAcquire(context.Background(), "r", "", 30*time.Second); err == nil {
			t.Errorf("two holders: the caller's lease (token %d, Err %v) and another owner's (token %d)", l.FencingToken(), l.Err(), other.FencingToken())
			other.Release(context.Background())
		}
		l.Release(context.Background())
	})
}

// TestAcquireWithEndedContextSendsNothing: a request nobody waits for
// would only take the lock for a moment and release it again.
func TestAcquireWithEndedContextSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		c := newFakeClient(t, f)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.TryAcquire(ctx, "r", "", 30*time.Second); err == nil {
			t.Error("TryAcquire with an ended context: got a lease")
		}
		if _, err := c.Acquire(ctx, "r", "", 30*time.Second); err == nil {
			t.Error("Acquire with an ended context: got a lease")
		}
		_ = c.Drain(context.Background())
		if got := f.log("acquire"); len(got) != 0 {
			t.Errorf("sent %d acquire requests, want none: %v", len(got), got)
		}
	})
}
