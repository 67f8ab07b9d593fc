package client

// NoWaitRoute is noWaitRoute, for the external tests.
var NoWaitRoute = noWaitRoute

// WithoutGatewayMark returns p without its unexported mark of an API
// Gateway answer, for tests that compare problems field by field.
func WithoutGatewayMark(p ProblemError) ProblemError {
	p.gateway = false
	return p
}
