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
// # Late writes
//
// A request's times (:now, and expires_at = :now + ttl) are fixed when it
// starts, but its write can reach DynamoDB much later: held in the network,
// retried by the SDK, or landing after the caller was already answered 503
// and retried successfully. The rule is that a request may act only on the
// lease that existed when it was issued. Every item carries acquired_at (the
// :now of the grant) and renewed_at (the :now of the latest acquire or
// renew, the write that last set expires_at). Every write that acts on a
// live lease requires acquired_at <= :now — renew, release, and an acquire
// by the lease's own owner (which replaces it) — and those that set
// expires_at (renew, re-acquire) also require renewed_at <= :now. A newer
// grant or renewal is stamped with a later :now, so a write issued before it
// fails its condition when it lands afterwards instead of ending or
// shortening the newer lease (TestLateWriteCannotTouchNewerLease). A
// waiting acquire writes several times over up to 20 s: each write stamps
// its own :now (expiry is judged then, and the grant is stamped then), but
// its same-owner branch compares with :iss, the request's arrival (API
// Gateway's timeEpoch), so a wait issued before a lease of its own owner
// was granted cannot replace that lease however late it writes
// (TestWaitCannotReplaceNewerSameOwnerLease). A release
// checks only acquired_at: a renewal racing the owner's own release must not
// keep the lock alive. Two renewals of one lease in flight at once (a
// keep-alive and a renew by hand) may land in either order: the earlier one,
// landing second, finds its own lease renewed by a later request and is
// answered with that lease if it runs at least as far as asked, or told to
// retry (ErrUnavailable) if not — never ErrNotFound for a live lease. Taking a free lock (absent, released, or expired by
// the request's own clock) needs no stamp: it ends nobody's lease, and a late
// grant there only holds the lock, until its TTL, for a caller that was told
// 503 — like any grant whose answer is lost. The clients in this repository
// release such grants when they can (a late answer, with its token; a
// generated owner after an unknown outcome); otherwise it lapses at its TTL.
//
// Clock skew. The stamps come from the clocks of the instances that served
// the requests. If two instances differ by at most d, a newer grant or
// renewal is stamped after a late request's :now whenever it happened more
// than d after that request was issued, and then the late write is refused.
// A same-owner retry comes only after the caller gave up on the first try
// (its own timeout, or the service's 503 after the 3 s store budget), so
// the rule holds for any skew below that gap; Lambda instances are
// NTP-synchronized to about a millisecond. The price of skew is liveness,
// never safety: a renew or same-owner re-acquire served by an instance up to
// d behind the one that stamped the lease, within d of that stamp, is refused
// (404 / acquired: false) and can be retried. Expiry itself compares
// expires_at with the serving instance's clock, so a lease may end up to d
// early by another instance's clock; clients keep a safety margin
// (the Go client's is min(ttl/10, 1 s)) that must exceed d.
//
// # Lock-delay
//
// An acquire may give its lease a lock-delay (Chubby's, Consul's): when the
// lease expires without a release, others may take the lock only
// lock_delay after expires_at, since a holder that is slow rather than gone
// may still be writing to a resource that cannot check fencing tokens. A
// release ends it at once. Conditions cannot add, so the item keeps the sum:
// free_at = expires_at + lock_delay, written by acquire (or removed, with
// lock_delay, for a lease without one), moved by renew in its update
// expression (free_at = :exp + lock_delay), set to now by release. Another
// owner's acquire requires expires_at <= :now AND (no free_at OR free_at <=
// :now): an item written before free_at existed is free once expired, and a
// free_at left stale by such a writer can never free a lease that has not
// expired. A refused acquire reports free_at as the holder's expiry, and a
// waiting acquire wakes at it. The late-write rule needs nothing new: a
// late acquire's :now is older than the lease it meets, so it fails during
// the delay as it fails during the lease.
//
// # Administration
//
// List scans the table (there is no index of live leases: one would cost a
// second write per operation) with a filter, page by page within a budget,
// and returns a cursor to go on from. ForceRelease ends any holder's live
// lease with one conditional write that keeps the fencing counter. It
// honours the lease's lock-delay, as Consul does when a session is
// destroyed: the lease expires now (expires_at = :now, free_at = :now +
// lock_delay) and is marked forced_at, which keeps its owner out too until
// free_at (the same-owner branch requires no forced_at) and answers the
// evicted holder's renewals and releases with ErrForceReleased. It does not
// set released_at, since acquire's released branch frees a lock whatever
// free_at says; an immediate force release does, and frees the lock at
// once. It stamps renewed_at = :now, so a renewal issued before it cannot
// revive the lease on an instance whose clock lags. With an expected token
// that is not the lease's, or a lease granted after the request was issued,
// it refuses with the lease that stayed (LeaseChangedError), never "retry",
// which could end a lease the operator never saw.
//
// The package knows nothing of HTTP or API Gateway: it validates inputs,
// talks to DynamoDB through the narrow DynamoDBAPI interface and reports
// outcomes as values (AcquireResult) or sentinel errors (ErrNotFound,
// ErrForbidden, ErrStaleToken, ErrUnavailable, *ValidationError).
package locklogic
