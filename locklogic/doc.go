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
// The package knows nothing of HTTP or API Gateway: it validates inputs,
// talks to DynamoDB through the narrow DynamoDBAPI interface and reports
// outcomes as values (AcquireResult) or sentinel errors (ErrNotFound,
// ErrForbidden, ErrStaleToken, ErrUnavailable, *ValidationError).
package locklogic
