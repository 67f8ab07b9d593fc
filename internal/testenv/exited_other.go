//go:build unix && !linux

package testenv

// Exited returns a channel that is closed once the process pid has ended
// and been reaped. There is no pidfd here: it polls.
func Exited(pid int) <-chan struct{} {
	done := make(chan struct{})
	go pollExit(pid, done)
	return done
}
