package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ft288/locks/client"
)

func ExampleClient_Acquire() {
	c, err := client.New(endpoint()) // e.g. "http://127.0.0.1:8080"
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Wait up to 10s for the lock; hold it for 30s at a time.
	lease, err := c.Acquire(ctx, "example-nightly-report", "worker-1", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	fmt.Println("holder:", lease.Owner())
	fmt.Println("has a fencing token:", lease.FencingToken() > 0)

	// Another owner is told who is first.
	_, err = c.TryAcquire(ctx, "example-nightly-report", "worker-2", 30*time.Second)
	fmt.Println("worker-2 held off:", errors.Is(err, client.ErrHeld))
	// Output:
	// holder: worker-1
	// has a fencing token: true
	// worker-2 held off: true
}

func ExampleLease_Context() {
	c, err := client.New(endpoint())
	if err != nil {
		log.Fatal(err)
	}
	lease, err := c.TryAcquire(context.Background(), "example-compaction", "worker-1", 3*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Renew every TTL/3 in the background; the lease's context ends if a
	// renewal is refused or none succeeds before the local deadline.
	lease.KeepAlive(context.Background())

	work := func(ctx context.Context, token int64) error {
		// Pass ctx to every call and token to every write the lock guards.
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
			return nil
		}
	}
	if err := work(lease.Context(), lease.FencingToken()); err != nil {
		fmt.Println("stopped:", errors.Is(err, client.ErrLeaseLost))
	}
	if err := lease.Release(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after release:", context.Cause(lease.Context()))
	// Output:
	// after release: lease released
}

func ExampleClient_TryAcquire() {
	c, err := client.New(endpoint())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, err := c.TryAcquire(ctx, "example-retry", "worker-1", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Repeating an acquire whose answer was lost is safe: the same owner
	// gets a new lease with a larger token, and the newest token wins.
	second, err := c.TryAcquire(ctx, "example-retry", "worker-1", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("newer token is larger:", second.FencingToken() > first.FencingToken())
	fmt.Println("old lease release:", errors.Is(first.Release(ctx), client.ErrStaleToken))
	fmt.Println("new lease release:", second.Release(ctx))
	// Output:
	// newer token is larger: true
	// old lease release: true
	// new lease release: <nil>
}
