//go:build unix

package main

import (
	"context"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// testWaitRoute counts at the runner what lockctl sends: every waiting
// acquire (acquire --wait, run, run -n, elect) goes to the waiting route
// (…/wait), one request each here (a free lock, or one released while the
// round waits), a --wait 0 to the try route, and no wait_seconds reaches a
// try route.
func testWaitRoute(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL, client.WithoutKeepAlive())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held := uniqueName(t)
	holder, err := c.TryAcquire(ctx, held, "holder", time.Minute) // try
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		p := startLockctl(t, bin, srv.URL, nil, args...)
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("lockctl %q: exit %d, want 0; stderr: %s", args, code, p.stderr.String())
		}
	}

	// Waits for a held lock: released once its round reached the runner.
	p := startLockctl(t, bin, srv.URL, nil, "acquire", held, "--wait", "15", "--ttl", "30") // wait
	for srv.Counts().Requests["POST /locks/{resource}/wait"] == 0 {
		select {
		case <-p.done:
			t.Fatalf("lockctl exited %d before it waited; stderr: %s", p.code, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("lockctl acquire --wait 15: exit %d, want 0; stderr: %s", code, p.stderr.String())
	}
	run("acquire", uniqueName(t), "--wait", "10", "--ttl", "30")                     // wait
	run("acquire", uniqueName(t), "--wait", "0", "--ttl", "30")                      // try
	run("run", uniqueName(t), "--wait", "10", "--ttl", "5", "--", "true")            // wait
	run("elect", uniqueName(t), "--ttl", "5", "--", "true")                          // wait
	run("run", uniqueName(t), "-n", "2", "--wait", "10", "--ttl", "5", "--", "true") // semaphore wait
	run("acquire", uniqueName(t), "-n", "2", "--wait", "0", "--ttl", "30")           // semaphore try

	srv.CheckRoutes(t, map[string]int64{
		"POST /locks/{resource}":       2,
		"POST /locks/{resource}/wait":  4,
		"POST /semaphores/{name}":      1,
		"POST /semaphores/{name}/wait": 1,
	})
}
