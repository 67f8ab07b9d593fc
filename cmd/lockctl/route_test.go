//go:build unix

package main

import (
	"context"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// The acquire rows' route keys, as the runner counts them.
const (
	lockTry  = "POST /locks/{resource}"
	lockWait = "POST /locks/{resource}/wait"
	semTry   = "POST /semaphores/{name}"
	semWait  = "POST /semaphores/{name}/wait"
)

// testWaitRoute counts at the runner what lockctl sends. Every waiting
// acquire (acquire --wait, run, run -n, elect) tries first: of a free lock
// or semaphore that one try is all and nothing reaches …/wait; of a held
// one the try is followed by a round on the waiting route (…/wait), here
// one (the holder lets go once it arrived). A --wait 0 is one try, and no
// wait_seconds reaches a try route.
func testWaitRoute(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	c, err := client.New(srv.URL, client.WithoutKeepAlive())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	holdLock := func(res string) func(context.Context) error {
		l, err := c.TryAcquire(ctx, res, "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return l.Release
	}
	holdSem := func(res string) func(context.Context) error {
		p, err := c.TryAcquireSemaphore(ctx, res, 1, "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return p.Release
	}
	tests := []struct {
		name string
		hold func(res string) func(context.Context) error // holds res first (not counted)
		wait string                                       // the held one's round: released once it arrived
		args []string                                     // lockctl's, after the command and name
		cmd  string
		want map[string]int64
	}{
		{name: "AcquireHeld", cmd: "acquire", args: []string{"--wait", "15", "--ttl", "30"}, hold: holdLock, wait: lockWait,
			want: map[string]int64{lockTry: 1, lockWait: 1}},
		{name: "AcquireFree", cmd: "acquire", args: []string{"--wait", "10", "--ttl", "30"}, want: map[string]int64{lockTry: 1}},
		{name: "AcquireNoWait", cmd: "acquire", args: []string{"--wait", "0", "--ttl", "30"}, want: map[string]int64{lockTry: 1}},
		{name: "RunFree", cmd: "run", args: []string{"--wait", "10", "--ttl", "5", "--", "true"}, want: map[string]int64{lockTry: 1}},
		{name: "RunHeld", cmd: "run", args: []string{"--wait", "15", "--ttl", "5", "--", "true"}, hold: holdLock, wait: lockWait,
			want: map[string]int64{lockTry: 1, lockWait: 1}},
		{name: "ElectFree", cmd: "elect", args: []string{"--ttl", "5", "--", "true"}, want: map[string]int64{lockTry: 1}},
		{name: "RunSemaphoreFree", cmd: "run", args: []string{"-n", "2", "--wait", "10", "--ttl", "5", "--", "true"}, want: map[string]int64{semTry: 1}},
		{name: "RunSemaphoreHeld", cmd: "run", args: []string{"-n", "1", "--wait", "15", "--ttl", "5", "--", "true"}, hold: holdSem, wait: semWait,
			want: map[string]int64{semTry: 1, semWait: 1}},
		{name: "AcquireSemaphoreNoWait", cmd: "acquire", args: []string{"-n", "2", "--wait", "0", "--ttl", "30"}, want: map[string]int64{semTry: 1}},
	}
	// One after another: each reads the counts' change its lockctl made.
	for _, tt := range tests {
		res := uniqueName(t)
		var release func(context.Context) error
		if tt.hold != nil {
			release = tt.hold(res)
		}
		before := srv.Counts().Requests
		args := append([]string{tt.cmd, res}, tt.args...)
		p := startLockctl(t, bin, srv.URL, nil, args...)
		if release != nil {
			for srv.Counts().Requests[tt.wait] == before[tt.wait] {
				select {
				case <-p.done:
					t.Fatalf("%s: lockctl exited %d before it waited; stderr: %s", tt.name, p.code, p.stderr.String())
				case <-time.After(5 * time.Millisecond):
				}
			}
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("lockctl %q: exit %d, want 0; stderr: %s", args, code, p.stderr.String())
		}
		after := srv.Counts().Requests
		for _, key := range []string{lockTry, lockWait, semTry, semWait} {
			if got := after[key] - before[key]; got != tt.want[key] {
				t.Errorf("%s: %s: got %d requests, want %d", tt.name, key, got, tt.want[key])
			}
		}
	}
	// The per-call counts are checked above; here the whole run's: no
	// wait_seconds reached a try route.
	srv.CheckRoutes(t, nil)
}
