// Command holder is the holder process of TestPausedHolder: it takes the
// lock -resource (or, with -elect, leads the election of that name) with a
// 1 s lease and runs work steps the way the documentation says, each a
// timer tick, then lease.Check(), then the step: a line "working with token
// N at T" on stdout (T: Unix nanoseconds). When the check refuses a step it
// writes "lost at T: ERR" (with -elect: "not leader at T: ERR") and exits
// 3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ft288/locks/client"
)

func main() {
	resource := flag.String("resource", "", "the lock, or the election, to hold")
	elect := flag.Bool("elect", false, "lead the election -resource rather than take the lock")
	step := flag.Duration("step", 20*time.Millisecond, "time between two work steps")
	flag.Parse()
	c, err := client.FromEnv(client.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if *elect {
		e := client.NewElection(c, *resource)
		lease, err := e.Campaign(ctx, client.WithTTL(time.Second))
		if err != nil {
			log.Fatal(err)
		}
		// "Am I leader?" before each step is the leadership lease's Check.
		if err := work(ctx, lease, *step, "not leader"); errors.Is(err, client.ErrLeaseLost) {
			os.Exit(3)
		}
		log.Fatalf("leader: %v, want the lease's loss", err)
	}
	err = c.WithLock(ctx, *resource, func(ctx context.Context, lease *client.Lease) error {
		return work(ctx, lease, *step, "lost")
	}, client.WithTTL(time.Second), client.WithWait(0))
	if errors.Is(err, client.ErrLeaseLost) {
		os.Exit(3)
	}
	log.Fatalf("WithLock: %v, want the lease's loss", err)
}

// work runs a step every step until the lease's Check (or ctx) refuses one;
// then it writes "LOST at T: ERR" and returns the error.
func work(ctx context.Context, lease *client.Lease, step time.Duration, lost string) (err error) {
	defer func() { fmt.Printf("%s at %d: %v\n", lost, time.Now().UnixNano(), err) }()
	tick := time.NewTicker(step)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
		checked := time.Now()
		if err := lease.Check(); err != nil {
			return err
		}
		left := time.Until(lease.Deadline())
		fmt.Printf("working with token %d at %d (checked at %d, %s left)\n", lease.FencingToken(), time.Now().UnixNano(), checked.UnixNano(), left)
	}
}
