//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// pollExit returns once the process pid is gone (or a zombie, seen as
// gone only once reaped), looking every 5 ms, and closes done if not nil:
// Exited's fallback where there is no pidfd.
func pollExit(pid int, done chan<- struct{}) {
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if done != nil {
		close(done)
	}
}
