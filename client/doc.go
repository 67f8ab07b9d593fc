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
// safety margin. It renews itself in the background every TTL/3 from its
// grant until it is released (WithoutKeepAlive turns that off). Its Context
// is cancelled the moment the client can no longer be sure it holds the
// lock: a renewal was refused, or no renewal succeeded before that
// deadline. Work done under the lock should run under Lease.Context and
// carry Lease.FencingToken to the systems it writes.
//
// Acquire waits for a held lock at the service: each request asks it to
// hold the request until the lock is free (wait_seconds, in rounds of up
// to 20 s), so the lock changes hands within about a tenth of a second of
// a release, with one request per round. Against a service that does not
// wait it polls with backoff instead. TryAcquire asks once.
//
// An owner names one holder. Acquire with an empty owner and the client
// makes up a unique one per lease (HOST:PID:RANDOM), so the same code
// running on two hosts can never both hold the lock. An acquire whose
// caller stopped waiting never leaves a lease behind: the client releases
// whatever it was granted after all (Drain waits for that).
package client
