// Package client is the Go client of the lock service: it takes, renews and
// releases leases over the service's HTTP API, optionally signing requests
// with AWS SigV4 for the IAM-authorised API in AWS (WithSigV4; the nested
// module github.com/ft288/locks/client/awsauth makes that option from the
// AWS SDK's default credential chain).
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
// # Names, defaults and the environment
//
// The Go, TypeScript and Python clients share their vocabulary and
// defaults (docs/clients.md shows them side by side). FromEnv builds a
// Client of LOCKS_ENDPOINT (DefaultEndpoint, the local runner of `make
// run`, when unset); it does not sign, and says so when LOCKS_SIGV4 asks
// for signing: awsauth.FromEnv does, with the AWS default credential
// chain. A ttl of 0 is DefaultTTL (or WithTTL's), an owner of "" a new
// unique one (or WithOwner's). WithLock acquires, runs a function under the
// lease and releases it.
//
// # Owners
//
// An owner names one holder. Acquire with an empty owner and the client
// makes up a unique one per lease (HOST:PID:RANDOM, see Lease.Owner), so
// the same code running on two hosts, or in two goroutines, can never both
// hold the lock. Choose an owner only to act on the lease from elsewhere
// (renew or release it from another process) or to make an acquire
// repeatable across restarts: an owner that already holds the lock gets a
// new lease with a larger fencing token, so repeating a TryAcquire whose
// answer was lost is safe.
//
// # Waiting for a lock
//
// TryAcquire asks once. Acquire waits until ctx ends and, when ctx has no
// deadline, for at most DefaultAcquireWait, so that a forgotten deadline
// cannot wait forever; WithWait sets another bound (0: ask once) and
// WithoutWaitLimit none. When the wait runs out while the lock is held the
// error is a *HeldError (matching ErrHeld, and ctx's error too when ctx
// ended it). TryAcquire, and every attempt that does not wait, is POST
// /locks/{resource}. Acquire tries first: its first request is that try,
// so an uncontended Acquire is one request on the quick route and never
// spends the waiting route's smaller throttle. Only when the try answers
// that the lock is held does it wait at the service: each request, to the
// waiting route POST /locks/{resource}/wait, asks
// the service to hold it while the lock is held by someone else, up to
// wait_seconds = min(MaxServerWait, the time left until ctx's deadline,
// ⅔ × (ttl − margin), whole seconds), and to grant the lock the moment it
// is free, so the lock changes hands within about a tenth of a second of a
// release. A round that ends with the lock still held is followed by the
// next at once, so a waiter sends one request per round. The lease's local
// deadline (ttl − margin, see WithLeaseMargin) still counts from before the
// request was sent, so a round may use at most two thirds of it: a grant at
// the end of a round leaves a third for the first renewal, which is then
// due at once.
//
// A stack that predates the waiting routes answers …/wait with API
// Gateway's own 404 {"message":"Not Found"} (not the service's
// problem+json not-found): Acquire then sends its rounds as before, to
// POST /locks/{resource} with wait_seconds, for the Client's life.
// When that bound, or the time left, is under a second, when the service
// answers that it does not take wait_seconds (422 naming it: an older
// service, or waiting turned off; remembered for the Client's life), or
// with WithoutServerWait, Acquire polls: one attempt at a time without
// wait_seconds, with jittered exponential backoff
// in between (WithBackoff), at least the service's Retry-After (capped at
// the backoff maximum, so an early release is noticed) but never past ctx's
// end. Every attempt asks for the same owner, so one granted unheard is
// granted again.
// WithLockDelay asks for a lease with a lock-delay: should it expire
// without a release, nobody can take the lock until the delay after its
// expiry, so that a holder that is slow rather than dead cannot overlap the
// next one; a release frees the lock at once.
//
// # Leases and the keep-alive
//
// A Lease knows its own deadline on the client's monotonic clock, measured
// from before the request that granted or last renewed it was sent, minus a
// safety margin (min(ttl/10, 1s) unless WithLeaseMargin sets another; a
// larger margin covers more pause and clock-rate error, and shortens
// Acquire's rounds). The service's clock never decides whether the client
// believes it holds the lock.
//
// A lease renews itself in the background every min(TTL/3, ⅔ × (TTL −
// margin)) — TTL/3 unless the margin is over TTL/2 — counted from when the
// request of the grant or of the latest renewal was sent (at once if that
// time has passed), so each renewal has at least a third of the lease's
// local validity to get through. Temporary failures are retried quickly
// until the local deadline. The renewals go on until the lease is released
// or lost. WithoutKeepAlive turns them off: the caller renews with
// Lease.Renew, or starts the renewals later with Lease.KeepAlive; the lease
// is lost at its local deadline if neither happens in time. Release every
// lease: one that is dropped renews on until the process exits.
//
// A lease's Context is cancelled the moment the client can no longer be
// sure it holds the lock: a renewal was refused (ErrNotFound, ErrForbidden,
// ErrStaleToken, or another answer renewing cannot get past, such as the
// service's internal problem), or no renewal succeeded before the local
// deadline (ErrLeaseExpired). A lease an operator force released is lost at
// its next renewal with a LeaseLostError that says so. Work done under the
// lock should run under Lease.Context and carry Lease.FencingToken to the
// systems it writes.
//
// # Pauses: the clock is the truth
//
// Lease.Check (and Err, Done, and the Context's Err, Done and Value) read
// the monotonic clock when called: past the local deadline they end the
// lease right then, as the lease's timer would. After a pause (a long GC,
// a stopped VM, SIGSTOP) the work's own timer may run before the lease's,
// so a step that first calls Check is refused, while one that only waits
// for Done may run. Call Check before each step that touches the protected
// resource. The timer ends the lease DeliveryAllowance (5 ms) before the
// local deadline, so Done is normally closed by then. A pause between the
// Check and the write is stopped only by fencing: the protected system
// refuses the old token. docs/clients.md, "What a pause does", has the
// measured figures.
//
// # Releasing
//
// Lease.Release sends the lease's fencing token, so a newer lease of the
// same owner is left alone. It retries temporary failures with backoff
// until ctx ends, for at most ReleaseRetryTimeout, and not past the lease's
// end by the client's clock (its TTL after the request of the grant or
// latest renewal was sent: the lease has run out at the service by then),
// so one 503 does not leave the lock held until its TTL runs out. A 404
// after an attempt whose outcome is unknown (a 5xx, a timeout, a dropped
// connection) counts as released, since that attempt may have released
// it; a 404 that says an operator force released the lease does not.
//
// # Acquires nobody waits for
//
// An acquire whose caller stopped waiting never leaves a lease behind.
// When ctx ends while a request is in flight, TryAcquire and Acquire return
// at once; the answer is still awaited (for the round's wait_seconds and 10
// s more), and a grant that arrives is released with its fencing token. For
// a chosen owner that happens only while this Client has not started
// another acquire of the same resource and owner since: that one may hold a
// lease the late grant replaced, so the late grant is left to lapse at its
// TTL instead. When an attempt's outcome is unknown (a network failure or a
// 5xx answer) and the owner was generated, the lease it may have created is
// released by owner: nobody else could. A clean "held" answer needs no
// clean-up, and a context that has already ended sends nothing. These
// releases run in the background; Drain waits for them.
//
// # Retries
//
// Every call that retries (Acquire, the keep-alive, Lease.Release, the
// clean-up releases) treats 503, API Gateway's throttle answers (429, and
// 500 with a bare {"message"}), other 5xx answers and network failures as
// temporary, and the service's own 500 problem (a setup error) as final.
//
// # Watching a lock
//
// Watch is one blocking status: it answers as soon as the lock's state
// differs from the index the caller last saw (a grant, a release, an
// expiry, a force release; not a renewal), or when its wait (up to
// MaxServerWait) runs out, with the index to pass next time. The service
// watches with reads about ten times a second, so a lease that begins and
// ends between two reads is missed; fencing tokens grow by one per grant,
// so the token of the next answer tells how many were.
//
// # Electing a leader
//
// An Election is a lock used to choose one leader: its name is the lock's
// resource, so every candidate campaigning on that name, from any client
// or `lockctl elect`, competes for one lock, and the leader is its holder.
// Campaign waits at the service (as Acquire does, but until ctx ends) and
// returns the leadership lease, which renews itself; its Check says whether
// this candidate still leads, by the clock, and its Context ends when the
// leadership is lost; its fencing token grows with every term, so
// the leader's writes can be fenced. Resign releases it; Leader says who
// leads now. The service never lets two candidates hold the lease at once,
// but a leader learns of its loss only at its next renewal or local
// deadline: beliefs may overlap briefly, which is what fencing tokens are
// for.
//
// Observe streams the leadership: the state when it starts, then each
// change in order, long-polling with Watch and reconnecting with backoff.
// Terms that began and ended between two answers are not seen; each
// Observation counts them in Skipped.
//
// # Semaphores
//
// A semaphore of N permits lets at most N holders in at once.
// TryAcquireSemaphore and AcquireSemaphore take one of its permits (every
// acquirer gives the same N, else ErrPermitsMismatch), with the options,
// owners, waiting and clean-up of TryAcquire and Acquire; WithSemaphore is
// WithLock for a permit. A *Permit is a Lease in a slot of its own (Slot):
// it renews itself by slot, its Context ends the moment it is lost, and
// Release frees the slot at once. A full semaphore is a *FullError
// (ErrFull, which matches ErrHeld too). Each permit's fencing token is
// larger than every token of the semaphore before it, so a protected
// resource fences per slot, with one attribute per slot (fence_0, fence_1,
// …: see package fence): one "largest token" would refuse the other live
// permits. SemaphoreStatus lists the live permits, WatchSemaphore waits for
// a change, and ListSemaphores and ForceReleasePermit are the admin calls.
// AcquireSemaphore waits on POST /semaphores/{name}/wait, with the
// fallbacks of Acquire; against a service that does not wait for permits
// (it answers 422 to wait_seconds) it polls.
//
// # Read/write locks
//
// A read/write lock is held by up to MaxReaders readers or by one writer
// (docs/design.md#readwrite-locks). TryAcquireRead, AcquireRead,
// TryAcquireWrite and AcquireWrite take a reader's or the writer's lease
// with the options, owners, waiting and clean-up of TryAcquire and Acquire
// (rounds on …/read/wait or …/write/wait, in the lock's one queue: a queued
// writer keeps later readers out); WithReadLock and WithWriteLock are
// WithLock for them. An *RWLease is a Lease that renews and releases by
// mode, slot (a reader's) and token. Every grant's token, read or write, is
// larger than every earlier one of the name: a reader that finds a writer's
// token above its own knows a writer came after its grant. RWStatus reads
// the writer, the readers and the queue, WatchRW waits for a change and
// ObserveRW follows every change, and ListRWLocks and ForceReleaseRW are
// the admin calls.
//
// # Operators
//
// List, ListAll and ForceRelease call the admin routes. In AWS only
// identities whose IAM policy allows execute-api:Invoke on the /admin
// routes may call them; a lock user's call is answered 403 by API Gateway
// (a *ProblemError). List returns one page of the leases that keep others
// from their lock; the service scans its table, so a page may hold fewer
// than its limit, even none, and still have a cursor. ForceRelease ends
// whichever lease blocks a lock, for a holder that is gone: by default the
// lease expires now but keeps its lock-delay, so nobody, not even the
// evicted owner, may take the lock until ForceReleased.FreeAt;
// ForceReleaseOptions.Immediate frees it at once, and
// ForceReleaseOptions.FencingToken ends only the lease the operator saw.
// The service writes the reason to its audit log with the caller's
// identity. The fencing counter survives: the next grant gets a larger
// token, and the ended holder's renewals fail (its lease is lost with a
// *LeaseLostError whose ForceReleased is set).
package client
