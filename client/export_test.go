package client

// StopWatchdog stops l's timer, as a pause does when the work's own timer
// runs before the lease's after the resume: only what reads the clock can
// then see the local deadline pass.
func StopWatchdog(l *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchdog.Stop()
}
