// Command worker is the command TestPause runs under lockctl: it works
// under the lock until it is killed. It writes "ready PID", then every 20
// ms a step "working with token N at T" (N: LOCK_FENCING_TOKEN, T: Unix
// nanoseconds). It traps SIGTERM, writing "term at T" and working on, so
// only SIGKILL ends it; with WORKER_STEPS=n it exits 0 after n steps. One
// process, no children: a stopped worker shows state T.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	steps, _ := strconv.Atoi(os.Getenv("WORKER_STEPS"))
	token := os.Getenv("LOCK_FENCING_TOKEN")
	fmt.Printf("ready %d\n", os.Getpid())
	tick := time.NewTicker(20 * time.Millisecond)
	for n := 0; ; {
		select {
		case <-term:
			fmt.Printf("term at %d\n", time.Now().UnixNano())
		case <-tick.C:
			fmt.Printf("working with token %s at %d\n", token, time.Now().UnixNano())
			if n++; n == steps {
				return
			}
		}
	}
}
