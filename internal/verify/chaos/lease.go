package chaos

import "time"

// ClientMargin is the Go client's safety margin, min(ttl/10, 1 s): a client
// stops relying on a lease that long before invoke time + ttl. The workload
// uses it, so the tolerated clock skew between service instances is below
// the smallest margin in use (100 ms for 1 s leases; internal/integration/skew_test.go).
func ClientMargin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// Hold is a span during which a client believed, by the documented rules,
// that it held a lease: from the answer that granted it, through every
// renewal, to the earliest of its client-side deadline and the end of the
// client's belief (see view).
type Hold struct {
	Client   int
	Owner    string
	Resource string
	Token    int64
	Start    time.Time
	End      time.Time
	// Ops are the IDs of the operations that made the hold: the grant,
	// the renewals, and the ones that ended it, if any (its client's own,
	// or another client's of the same owner: see holds).
	Ops []int
}

// view is one client's belief about its lease on one resource. The
// client's deadline is measured on the client's own monotonic clock: the
// invoke time of the request that set the lease's expiry (the grant or
// the latest renewal) plus its ttl minus the margin. The service's :now
// is taken after that invoke time, so without clock skew the store's
// expires_at is at least the margin after the deadline. The server's
// expires_at is never used: it is on the serving instance's clock, and a
// client cannot know how far that is from its own (README, Clocks).
//
//   - A grant (acquire answered acquired:true) starts a hold at its answer.
//   - A renew sets expires_at to its :now + ttl, which may shorten the
//     lease, and the store may apply it at any moment of the call (an
//     attempt whose answer was lost, then retried), whatever the answer
//     says in the end. So from its invoke time the deadline is the earlier
//     of the old one and invoke + ttl - margin; a renew answered 200 then
//     sets it to invoke + ttl - margin (an extension counts from the
//     answer) and starts a hold if there was none; a refused renew
//     (403/404/409) ends the hold at its answer; a renew left without an
//     answer (503) leaves the earlier deadline.
//   - A release or a re-acquire ends the hold when it is invoked: the
//     client stops relying on a lease it gives up or replaces.
//   - A status call changes nothing.
type view struct {
	margin func(time.Duration) time.Duration

	held     bool
	token    int64
	deadline time.Time
	cur      Hold
	// slot is a permit's slot (a semaphore's view), from its grant.
	slot int
}

// live reports whether the client believes it holds the lease at t.
func (v *view) live(t time.Time) bool { return v.held && t.Before(v.deadline) }

// end closes the current hold at t (or at its deadline, if earlier) and
// returns it; ok is false when there was none or it was empty.
func (v *view) end(t time.Time, by int) (Hold, bool) {
	if !v.held {
		return Hold{}, false
	}
	v.held = false
	h := v.cur
	h.End = v.deadline
	if t.Before(h.End) {
		h.End = t
	}
	if by >= 0 {
		h.Ops = append(h.Ops, by)
	}
	return h, h.End.After(h.Start)
}

// lapse ends the hold if its deadline passed by t.
func (v *view) lapse(t time.Time) (Hold, bool) {
	if v.held && !t.Before(v.deadline) {
		return v.end(v.deadline, -1)
	}
	return Hold{}, false
}

// before is called as op is invoked; it returns the hold op ends.
func (v *view) before(op *Op) []Hold {
	var out []Hold
	if h, ok := v.lapse(op.Invoke); ok {
		out = append(out, h)
	}
	switch op.Kind.Lock() {
	case Acquire, Release:
		if h, ok := v.end(op.Invoke, op.ID); ok {
			out = append(out, h)
		}
	case Renew:
		ttl := time.Duration(op.TTL) * time.Second
		if d := op.Invoke.Add(ttl - v.margin(ttl)); v.held && d.Before(v.deadline) {
			v.deadline = d
		}
	}
	return out
}

// after is called with op's answer; it returns the holds that ended.
func (v *view) after(op *Op) []Hold {
	var out []Hold
	if h, ok := v.lapse(op.Return); ok {
		out = append(out, h)
	}
	ttl := time.Duration(op.TTL) * time.Second
	deadline := op.Invoke.Add(ttl - v.margin(ttl))
	switch op.Kind.Lock() {
	case Acquire:
		// An acquire left without an answer may have been granted all
		// the same (an unheard grant): nobody relies on that lease.
		if op.Granted && op.Lock != nil {
			v.start(op, deadline)
		}
	case Renew:
		switch {
		case op.Status == 200 && op.Lock != nil:
			if !v.held {
				v.start(op, deadline)
			} else {
				v.deadline, v.token = deadline, op.Lock.Token
				v.cur.Ops = append(v.cur.Ops, op.ID)
			}
		case op.Status == 403 || op.Status == 404 || op.Status == 409:
			if h, ok := v.end(op.Return, op.ID); ok {
				out = append(out, h)
			}
		case v.held:
			// No answer: the deadline set at invoke stands.
			v.cur.Ops = append(v.cur.Ops, op.ID)
		}
	}
	if h, ok := v.lapse(op.Return); ok {
		out = append(out, h)
	}
	return out
}

func (v *view) start(op *Op, deadline time.Time) {
	v.held, v.token, v.deadline, v.slot = true, op.Lock.Token, deadline, op.Lock.Slot
	v.cur = Hold{Client: op.Client, Owner: op.Owner, Resource: op.Resource, Token: op.Lock.Token, Start: op.Return, Ops: []int{op.ID}}
}

// holds replays every client's operations through a view and returns all
// holds, grouped by resource, cut short where another client of the same
// owner may have ended or shortened the lease (coOwnerCuts). ops must be
// in invoke order, each op's ID its index.
func holds(ops []Op, margin func(time.Duration) time.Duration, offsets []time.Duration) map[string][]Hold {
	type key struct {
		client   int
		owner    string
		resource string
	}
	views := map[key]*view{}
	out := map[string][]Hold{}
	// ops is in invoke order, and one client runs one op at a time, so
	// each client's ops arrive here in its own order.
	for i := range ops {
		op := &ops[i]
		k := key{op.Client, op.Owner, op.Resource}
		v := views[k]
		if v == nil {
			v = &view{margin: margin}
			views[k] = v
		}
		for _, h := range append(v.before(op), v.after(op)...) {
			out[h.Resource] = append(out[h.Resource], h)
		}
	}
	for _, v := range views {
		if h, ok := v.end(v.deadline, -1); ok {
			out[h.Resource] = append(out[h.Resource], h)
		}
	}
	coOwnerCuts(ops, out, margin, offsets)
	return out
}

// coOwnerCuts shortens the holds of owners that several clients share.
// The lease belongs to the owner, not to a process: another client of the
// same owner may replace it (a re-acquire), shorten it (a renewal with a
// shorter ttl, or a re-acquire's shorter lease) or end it (a release),
// and the holder is not told. That is the documented meaning of sharing an
// owner, not a breach, so a hold ends where such a write of a co-owner may
// have taken effect:
//
//   - a release ends it at the release's invoke time;
//   - a renew or an acquire (whatever its answer: a write whose answer was
//     lost may have landed, an SDK retry may have met a changed lease) at
//     its invoke time + its ttl - margin, as the client's own renew does;
//
// unless the write cannot have touched the lease: one issued before the
// lease was granted (its :now, at most its return time on its instance's
// clock, is before the lease's acquired_at: the late-write rule refuses it,
// and the linearizable and late-write rules check that it does), one
// invoked after the hold ended, or one answered before the hold's lease
// was written. A write with another fencing token counts too: a co-owner's
// re-acquire may have replaced the lease, and that client's release with
// its own token ends the owner's lease all the same. A cut hold is not
// extended again: from there on the owner's lease may be another client's.
func coOwnerCuts(ops []Op, byRes map[string][]Hold, margin func(time.Duration) time.Duration, offsets []time.Duration) {
	clients := map[string]map[int]bool{}
	for i := range ops {
		op := &ops[i]
		if clients[op.Owner] == nil {
			clients[op.Owner] = map[int]bool{}
		}
		clients[op.Owner][op.Client] = true
	}
	off := func(op *Op) time.Duration {
		if op.Instance < len(offsets) {
			return offsets[op.Instance]
		}
		return 0
	}
	for r, hs := range byRes {
		kept := hs[:0]
		for _, h := range hs {
			if len(clients[h.Owner]) > 1 {
				first := &ops[h.Ops[0]]
				for i := range ops {
					x := &ops[i]
					if x.Owner != h.Owner || x.Client == h.Client || x.Resource != r || x.Kind.Lock() == Status || x.Kind.Lock() == Watch || !x.Invoke.Before(h.End) {
						continue
					}
					if first.Lock != nil && x.Return.Add(off(x)).UnixMilli() < first.Lock.AcquiredAt {
						continue // issued before the lease was granted
					}
					if x.Err == "" && x.Status != 503 && x.Return.Before(first.Invoke) {
						continue // landed before the lease was written
					}
					cut := x.Invoke
					if x.Kind.Lock() != Release {
						ttl := time.Duration(x.TTL) * time.Second
						cut = x.Invoke.Add(ttl - margin(ttl))
					}
					if cut.Before(h.End) {
						h.End = cut
						h.Ops = append(h.Ops, x.ID)
					}
				}
			}
			if h.End.After(h.Start) {
				kept = append(kept, h)
			}
		}
		byRes[r] = kept
	}
}
