package client

// NoWaitRoute is noWaitRoute, for the external tests.
var NoWaitRoute = noWaitRoute

// WithoutGatewayMark returns p without its unexported mark of an API
// Gateway answer, for tests that compare problems field by field.
func WithoutGatewayMark(p ProblemError) ProblemError {
	p.gateway = false
	return p
}

// StopWatchdog stops l's timer, as a pause does when the work's own timer
// runs before the lease's after the resume: only what reads the clock can
// then see the local deadline pass.
func StopWatchdog(l *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchdog.Stop()
}
