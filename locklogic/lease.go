package locklogic

// Lease clauses shared by the lock's conditions and every semaphore
// slot's: each takes the placeholders of the lease's attribute names (the
// lock's #e, #x, … or slot k's), so the rule is written once for both.

// liveClause is the condition "the lease is live at :now", as live judges
// it: not expired by :now, not released, and no watch answered its expiry
// (a watcher was told it ended, so it stays ended whatever a late
// request's :now says). e, x and xa are the placeholders of its
// expires_at, released_at and expired_at. A force release is judged by
// the caller's own clause (an owner's branch refuses it outright).
func liveClause(e, x, xa string) string {
	return e + " > :now AND attribute_not_exists(" + x + ") AND attribute_not_exists(" + xa + ")"
}

// stillExpired is the condition "the lease a view saw expired (and not
// released, force released or recorded expired by a watch) is still not
// live at :now": only a late renewal could revive it, and one that makes
// it live at :now sets expires_at (e) after :now. It is the minimal form, one comparison,
// for conditions that name many slots at once (a change of N).
func stillExpired(e string) string { return e + " <= :now" }
