package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
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

	// Wait up to 10s for the lock; hold it for 30s at a time, renewed in
	// the background every 10s until Release. No owner: the client makes
	// up one that no other lease has (HOST:PID:RANDOM).
	lease, err := c.Acquire(ctx, "example-nightly-report", "", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	fmt.Println("owner has host, pid and random parts:", strings.Count(lease.Owner(), ":") >= 2)
	fmt.Println("has a fencing token:", lease.FencingToken() > 0)

	// The same code elsewhere (another host, another goroutine) is held off.
	_, err = c.TryAcquire(ctx, "example-nightly-report", "", 30*time.Second)
	fmt.Println("second acquire held off:", errors.Is(err, client.ErrHeld))
	// Output:
	// owner has host, pid and random parts: true
	// has a fencing token: true
	// second acquire held off: true
}

func ExampleLease_Context() {
	c, err := client.New(endpoint())
	if err != nil {
		log.Fatal(err)
	}
	// The lease renews itself every TTL/3; its context ends if a renewal is
	// refused or none succeeds before the local deadline.
	lease, err := c.TryAcquire(context.Background(), "example-compaction", "", 3*time.Second)
	if err != nil {
		log.Fatal(err)
	}

	work := func(ctx context.Context, token int64) error {
		// Pass ctx to every call and token to every write the lock guards.
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
		// The timer above may fire first after a pause (GC, a stopped VM):
		// Check reads the clock before the step.
		if err := lease.Check(); err != nil {
			return err
		}
		return nil // the step, with token
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

func ExampleLease_Check() {
	c, err := client.New(endpoint())
	if err != nil {
		log.Fatal(err)
	}
	lease, err := c.TryAcquire(context.Background(), "example-check", "", 3*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	for part := range 3 {
		// Before each step: nil while the lease is held by the clock now.
		// After a pause past the local deadline (GC, a stopped VM) it
		// returns the loss at once, whichever timer runs first.
		if err := lease.Check(); err != nil {
			fmt.Println("stopped:", errors.Is(err, client.ErrLeaseLost))
			return
		}
		// The step: a write that carries lease.FencingToken().
		fmt.Printf("part %d written with the fencing token\n", part)
	}
	// Output:
	// part 0 written with the fencing token
	// part 1 written with the fencing token
	// part 2 written with the fencing token
}

func ExampleClient_TryAcquire() {
	c, err := client.New(endpoint())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// A chosen owner names the holder across retries and restarts.
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

func ExampleClient_WithLock() {
	c, err := client.New(endpoint()) // or client.FromEnv(): LOCKS_ENDPOINT
	if err != nil {
		log.Fatal(err)
	}
	// Acquire (waiting up to DefaultAcquireWait, as the context has no
	// deadline), run, release. ctx ends the moment the lease may be lost;
	// lease.Check() reads the clock before each step.
	err = c.WithLock(context.Background(), "example-with-lock", func(ctx context.Context, lease *client.Lease) error {
		if err := lease.Check(); err != nil {
			return err // the loss: WithLock returns it
		}
		fmt.Println("has a fencing token:", lease.FencingToken() > 0)
		fmt.Println("default TTL:", lease.TTL())
		return ctx.Err()
	})
	fmt.Println("done:", err)
	// Output:
	// has a fencing token: true
	// default TTL: 30s
	// done: <nil>
}

func ExampleElection() {
	c, err := client.New(endpoint())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// One candidate: it leads at once, the lock being free. The leadership
	// lease renews itself; its Context ends if the leadership is lost.
	e := client.NewElection(c, "example-leader")
	lease, err := e.Campaign(ctx, client.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	leader, err := e.Leader(ctx)
	fmt.Println("leads:", err == nil && leader.Owner == lease.Owner())
	// "Am I still leader?" by this candidate's own clock, before each step.
	fmt.Println("leads by its lease:", lease.Check() == nil)

	// Another candidate campaigns until its context ends.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	_, err = client.NewElection(c, "example-leader").Campaign(short)
	fmt.Println("second candidate still waiting at its deadline:", errors.Is(err, context.DeadlineExceeded))

	if err := e.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	// The second candidate's request may still be waiting at the service
	// (a service-side wait outlives its caller's deadline) and take the
	// lock at once: the leader now is nobody, or that one — never this
	// candidate.
	leader, err = e.Leader(ctx)
	stillLeads := err == nil && leader.Owner == lease.Owner()
	failed := err != nil && !errors.Is(err, client.ErrNoLeader)
	fmt.Println("leads after Resign:", stillLeads || failed)
	// Output:
	// leads: true
	// leads by its lease: true
	// second candidate still waiting at its deadline: true
	// leads after Resign: false
}
