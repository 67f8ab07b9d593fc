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
	Owner    string
	Resource string
	Token    int64
	Start    time.Time
	End      time.Time
	// Ops are the IDs of the operations that made the hold: the grant,
	// the renewals, and the one that ended it, if any.
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
	switch op.Kind {
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
	switch op.Kind {
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
	v.held, v.token, v.deadline = true, op.Lock.Token, deadline
	v.cur = Hold{Owner: op.Owner, Resource: op.Resource, Token: op.Lock.Token, Start: op.Return, Ops: []int{op.ID}}
}

// holds replays every client's operations through a view and returns all
// holds, grouped by resource.
func holds(ops []Op, margin func(time.Duration) time.Duration) map[string][]Hold {
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
	return out
}
