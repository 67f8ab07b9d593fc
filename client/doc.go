// Package client is the Go SDK of the lock service: it takes, renews and
// releases leases over the service's HTTP API, optionally signing requests
// with AWS SigV4 for the IAM-authorised API in AWS.
//
// The lock model: a lock on a named resource is a lease held by one owner
// for a time-to-live of whole seconds. While the lease is live no other
// owner can take it; the holder extends it with renewals, ends it with a
// release, or lets it expire. Every successful acquire of a resource hands
// out a fencing token larger than any issued before for that resource, so a
// system that the lock protects can reject writes from a holder that paused,
// lost its lease and did not notice: it only has to remember the highest
// token it has seen.
//
// A Lease knows its own deadline on the client's monotonic clock, measured
// from before the request that granted or last renewed it was sent, minus a
// safety margin. It renews itself in the background every TTL/3 from that
// request until it is released (WithoutKeepAlive turns that off). Its
// Context is cancelled the moment the client can no longer be sure it
// holds the lock: a renewal was refused, or no renewal succeeded before
// that deadline. A lease an operator force released is lost at its next
// renewal with a LeaseLostError that says so. Work done under the lock
// should run under Lease.Context and carry Lease.FencingToken to the
// systems it writes. Lease.Release retries temporary failures, so one 503
// does not leave the lock held until its TTL runs out.
//
// Acquire waits for a held lock at the service: each request asks it to
// hold the request until the lock is free (wait_seconds), so the lock
// changes hands within about a tenth of a second of a release, with one
// request per round. A round is at most 20 s and at most two thirds of the
// lease's local validity (ttl − margin), so that a grant at the end of a
// round leaves a third of it for the first renewal; when that is under a
// second it polls with backoff instead, as against a service that does not
// wait. TryAcquire asks once. WithLockDelay asks for a lease with a
// lock-delay.
//
// Every call that retries (Acquire, the keep-alive, Lease.Release, the
// clean-up releases) treats 503, API Gateway's throttle answers (429, and
// 500 with a bare {"message"}) and network failures as temporary, and the
// service's own 500 problem (a setup error) as final.
//
// An owner names one holder. Acquire with an empty owner and the client
// makes up a unique one per lease (HOST:PID:RANDOM), so the same code
// running on two hosts can never both hold the lock. An acquire whose
// caller stopped waiting never leaves a lease behind: the client releases
// whatever it was granted after all (Drain waits for that).
package client
