// Package locklogic holds the lock rules of the service: leased, owner-checked
// locks on named resources, kept in DynamoDB, where every outcome is decided by
// one conditional write.
//
// A lock is one item per resource. A lease is live while the server's clock is
// before the item's expires_at and no release has marked the item
// (released_at); both are decided inside the condition
// expression, never by DynamoDB's TTL, which only garbage-collects idle items
// (its deletions may lag by days). Acquire succeeds when there is no live lease,
// the lease has expired, or the caller already owns it; every successful
// acquire bumps the item's fencing token, so tokens for one resource only ever
// grow. Release does not delete the item: it ends the lease and keeps the
// record (a tombstone), so the token counter survives release and expiry. When
// garbage collection finally deletes an idle record, a fresh counter starts
// above the clock in microseconds, which is higher than any token the old
// counter could have reached (one item takes at most ~1,000 writes a second).
//
// The condition and update expressions of every operation are listed in
// docs/design.md ("The expressions"), rendered from the requests this
// package builds by TestExpressionListing, which fails when the listing and
// the code differ; the reasons for each clause are there too. This comment
// gives the rules in words.
//
// # Late writes
//
// A request's times (:now, and expires_at = :now + ttl) are fixed when it
// starts, but its write can reach DynamoDB much later: held in the network,
// retried by the SDK, or landing after the caller was already answered 503
// and retried successfully. The rule is that a request may act only on the
// lease that existed when it was issued. Every item carries acquired_at (the
// :now of the grant) and renewed_at (the :now of the latest acquire or
// renew, the write that last set expires_at). A write that acts on a live
// lease requires the lease's grant, and for writes that set expires_at its
// latest renewal too, to be no newer than the request (notNewer), so a write
// issued before a newer grant or renewal fails its condition when it lands
// afterwards instead of ending or shortening the newer lease
// (TestLateWriteCannotTouchNewerLease). A waiting acquire compares with its
// arrival rather than each write's :now, so a wait issued before a lease of
// its own owner was granted cannot replace that lease however late it
// writes (TestWaitCannotReplaceNewerSameOwnerLease). A release checks only
// the grant: a renewal racing the owner's own release must not keep the
// lock alive. Two renewals of one lease in flight at once may land in either
// order: the earlier one, landing second, finds its own lease renewed by a
// later request and is answered with that lease if it runs at least as far
// as asked, or told to retry (ErrRenewRaced) if not — never ErrNotFound for
// a live lease. Taking a free lock (absent, released, or expired by the
// request's own clock) needs no stamp: it ends nobody's lease.
//
// Clock skew. The stamps come from the clocks of the instances that served
// the requests. If two instances differ by at most d, the late-write rule
// holds whenever the newer request came more than d after the late one was
// issued; a same-owner retry comes only after the caller gave up on the
// first try (its own timeout, or the 503 after the 3 s store budget).
// Lambda instances are NTP-synchronized to about a millisecond. The price of
// skew is liveness, never safety: a renew or same-owner re-acquire served
// by an instance up to d behind the one that stamped the lease, within d of
// that stamp, is refused and can be retried. Expiry itself compares
// expires_at with the serving instance's clock, so a lease may end up to d
// early by another instance's clock; clients keep a safety margin (the Go
// client's is min(ttl/10, 1 s)) that must exceed d.
//
// # Lock-delay
//
// An acquire may give its lease a lock-delay (Chubby's, Consul's): when the
// lease expires without a release, others may take the lock only
// lock_delay after expires_at, since a holder that is slow rather than gone
// may still be writing to a resource that cannot check fencing tokens. A
// release ends it at once. Conditions cannot add, so the item keeps the sum,
// free_at, written by every write that sets expires_at (freeCond says how
// acquire reads it). A refused acquire reports free_at as the holder's
// expiry, and a waiting acquire wakes at it.
//
// # Administration
//
// List scans the table (there is no index of live leases: one would cost a
// second write per operation) with a filter, page by page within a budget,
// and returns a cursor to go on from. ForceRelease ends any holder's live
// lease with one conditional write that keeps the fencing counter. It
// honours the lease's lock-delay, as Consul does when a session is
// destroyed: the lease expires now and is marked forced_at, which keeps its
// owner out too until free_at and answers the evicted holder's renewals and
// releases with ErrForceReleased; an immediate force release makes a
// tombstone and frees the lock at once. With an expected token that is not
// the lease's, or a lease granted after the request was issued, it refuses
// with the lease that stayed (LeaseChangedError), never "retry", which could
// end a lease the operator never saw.
//
// The package knows nothing of HTTP or API Gateway: it validates inputs,
// talks to DynamoDB through the narrow DynamoDBAPI interface and reports
// outcomes as values (AcquireResult) or sentinel errors (ErrNotFound,
// ErrForbidden, ErrStaleToken, ErrUnavailable, *ValidationError).
package locklogic
