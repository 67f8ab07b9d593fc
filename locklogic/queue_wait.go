package locklogic

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// PlacePollInterval returns the mean time between the reads of the waiter
// at place i of a queue of n waiters (0: the head) while the queue does
// not move: its place's tier.
func PlacePollInterval(i, n int) time.Duration {
	switch i {
	case 0:
		if n <= 1 {
			return LoneHeadPollInterval
		}
		return HeadPollInterval
	case 1:
		return NextPollInterval
	case 2:
		return ThirdPollInterval
	}
	return QueuePollInterval
}

// PaceInterval returns the mean time between the reads of the waiter at
// place i of a queue of n waiters that serves one place every d as the
// waiter saw it (0: not seen yet, taken as fast). Behind the head (i ≥ 1)
// it is half the time until the waiter becomes the head at that pace
// (i × d / 2); the head reads every d / 4, as the release that lets it in
// comes within about d. Either is at least max(1, i) × PaceFloor and at
// most the place's tier (PlacePollInterval): a waiter reads a few times on
// its way to the head of a fast queue, and is watching closely by the time
// it gets there; a slow queue's waiters read at their tiers.
func PaceInterval(i, n int, d time.Duration) time.Duration {
	tier := PlacePollInterval(i, n)
	if i <= 0 {
		return min(tier, max(PaceFloor, d/4))
	}
	return min(tier, max(time.Duration(i)*PaceFloor, time.Duration(i)*d/2))
}

// QueueReadBound returns the most reads a second the n waiters of one
// item make between them (the means of their intervals), however fast
// their queue moves: the waiter at place i at most once every max(1, i) ×
// PaceFloor, or its tier when that is longer (PaceInterval) — 62.5 × (1 +
// H(n − 1)) for 1 to 63 waiters (H(k) = 1 + 1/2 + … + 1/k) — and 1 for
// each one beyond (at place 63 or later, or without a place when MaxQueue
// are queued). It is QueueReadBoundBatch(n, 1): a lock's or a semaphore's
// head alone reads at the head's pace.
func QueueReadBound(n int) float64 { return QueueReadBoundBatch(n, 1) }

// QueueReadBoundBatch is QueueReadBound for a queue whose first batch
// places read at the head's pace: a read/write lock's readers ahead of its
// first queued writer (the head's batch, rwTarget.front), each at most
// once every PaceFloor — 62.5 × batch + 62.5 × (H(n − 1) − H(batch − 1))
// for n ≤ 63 (docs/design.md#read-write-locks).
func QueueReadBoundBatch(n, batch int) float64 {
	sum := 0.0
	for i := range n {
		d := QueuePollInterval // no place: a slow poll
		switch {
		case i >= MaxQueue:
		case i < batch:
			d = min(PlacePollInterval(0, n), PaceFloor)
		default:
			d = min(PlacePollInterval(i, n), time.Duration(max(1, i))*PaceFloor)
		}
		sum += float64(time.Second) / float64(d)
	}
	return sum
}

// refusedBackoff returns the longest pause before a waiter's next write
// after k ≥ 2 of its writes in a row were refused (the queue changed
// under each): refusedBase, doubling with each further refusal, at most
// twice QueuePollInterval. The pause is uniformly random up to it, so
// waiters that joined at the same moment spread out, and a waiter the
// queue keeps refusing writes about once a second.
func refusedBackoff(k int) time.Duration {
	return min(refusedBase<<min(max(k-2, 0), 8), 2*QueuePollInterval)
}

// pace is what a waiter saw of its queue's movement: its place at its
// latest view, and the time the queue took per place.
type pace struct {
	place int       // at the latest view; -1: none yet
	at    time.Time // when the latest view was seen
	// perPlace is the time per place over the latest interval between
	// two views in which the waiter moved up (0: none yet); movedAt is
	// the end of that interval (or the first view).
	perPlace time.Duration
	movedAt  time.Time
}

// see records that the waiter is at place i at now, and returns the time
// the queue takes per place as it saw it: over the latest interval in
// which it moved up, but never less than the time since then (a queue
// that stopped moving is slow), 0 at the first view.
func (p *pace) see(i int, now time.Time) time.Duration {
	switch {
	case p.place < 0:
		p.movedAt = now
	case i < p.place:
		p.perPlace = now.Sub(p.at) / time.Duration(p.place-i)
		p.movedAt = now
	}
	p.place, p.at = i, now
	return max(p.perPlace, now.Sub(p.movedAt))
}

// headGrantExpr are the head's grant, by variant as acquireExpr: the
// update, the condition on the head's entry (headGrantCond joins it to the
// lock being free), the lease's two clauses of free, and the names.
var headGrantExpr = [4]headGrantParts{
	headGrantExpression(false, false), headGrantExpression(true, false),
	headGrantExpression(false, true), headGrantExpression(true, true),
}

type headGrantParts struct {
	update, entry, released, byClock string
	names                            map[string]string
}

// headGrantExpression is the write of the head of a lock's queue: the
// lease as an acquire writes it and the removal of its own entry, when the
// entry is the head and the lock is free (released, or expired past its
// lock-delay: headGrantCond). Taking a free lock needs no issue-time
// stamp, so no same-owner branch: an SDK retry of a grant that landed
// finds its entry gone, and the waiter finds its grant id on the item
// instead.
func headGrantExpression(withPrincipal, withDelay bool) headGrantParts {
	x := newExpr()
	l := x.lease(&lockLease, "")
	c := Caller{}
	if withPrincipal {
		c.Principal = "p"
	}
	h := headGrantParts{update: acquireSet(l, withPrincipal, withDelay) + ", " + x.n("#q", AttrQueue) + "[0]",
		released: l.released(), byClock: l.freeByClock()}
	x.n("#qi", entryID)
	x.n("#qt", entryUntil)
	h.entry = entryCond(0, c, "", map[string]types.AttributeValue{}, l.n(pOwner), l.n(pPrin))
	h.names = x.names
	return h
}

// headGrantCond is the head's grant's condition: entry (the head's place,
// and what else the write assumes) and the lock released, or entry and
// free by the clock — entry AND (released OR free), written out so that
// the parentheses nest one level less: dynalite's parser takes time that
// grows steeply with their depth (5.8 ms against 1.8 ms for this one with
// 16 entries queued, on every handoff); DynamoDB reads both alike.
func headGrantCond(h headGrantParts) string {
	return h.entry + " AND " + h.released + " OR " + h.entry + " AND " + h.byClock
}

// headGrant is the head's grant write for ticket, with the request's grant
// id gid, from the view v (nil: unknown); it lowers queue_until to the
// entries behind the head when v shows it later than all of them
// (lowerUntil). Not granted, it returns the view of the item the write met
// (nil when the store did not return it).
func (s *Service) headGrant(ctx context.Context, req AcquireRequest, b Budget, v *view, ticket, gid string) (AcquireResult, *view, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	now := s.now()
	nowMs := now.UnixMilli()
	expMs := nowMs + req.TTLSeconds*1000
	delayMs := req.LockDelaySeconds * 1000
	values := make(map[string]types.AttributeValue, 10)
	values[":o"] = &types.AttributeValueMemberS{Value: req.Caller.Owner}
	values[":now"] = num(nowMs)
	values[":exp"] = num(expMs)
	values[":gc"] = num(s.gcAt(expMs + delayMs))
	values[":base"] = num(now.UnixMicro())
	values[":one"] = one
	values[":gid"] = &types.AttributeValueMemberS{Value: gid}
	values[":tk"] = &types.AttributeValueMemberS{Value: ticket}
	variant := 0
	if req.Caller.Principal != "" {
		variant |= 1
		values[":p"] = &types.AttributeValueMemberS{Value: req.Caller.Principal}
	}
	if delayMs > 0 {
		variant |= 2
		values[":d"] = num(delayMs)
		values[":f"] = num(expMs + delayMs)
	}
	expr := headGrantExpr[variant]
	names := expr.names
	if v != nil && len(v.queue) > 0 {
		lowered := maps.Clone(expr.names)
		if set, vc := lowerUntil(v, v.queue[1:], lowered, values); set != "" {
			upd, rm, _ := strings.Cut(expr.update, " REMOVE ")
			expr.update, expr.entry, names = upd+", "+set+" REMOVE "+rm, expr.entry+" AND "+vc, lowered
		}
	}
	cond := headGrantCond(expr)
	out, err := s.db.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.table,
		Key:                                 s.key(req.Resource),
		UpdateExpression:                    &expr.update,
		ConditionExpression:                 &cond,
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if s.oldItem {
				return AcquireResult{}, newView(ccf.Item, true), nil
			}
			return AcquireResult{}, nil, nil
		}
		return AcquireResult{}, nil, storeErr("acquire", req.Resource, err)
	}
	lock, ok := decode(req.Resource, out.Attributes)
	if !ok {
		return AcquireResult{}, nil, fmt.Errorf("acquire %q: store returned an incomplete item", req.Resource)
	}
	return AcquireResult{Acquired: true, Lock: lock}, nil, nil
}

// ownGrant reports whether item holds, live at now, the lease this
// request's grant id gid wrote for the caller: an SDK retry of the head's
// grant whose first attempt landed but whose answer was lost.
func ownGrant(resource string, item map[string]types.AttributeValue, c Caller, gid string, now time.Time) (Lock, bool) {
	if !lockLease.ownGrant(item, c, gid, now) {
		return Lock{}, false
	}
	return decode(resource, item)
}

// queueTarget is what waitFair needs of the item a waiter queues on — a
// lock's (lockTarget) or a semaphore's (semTarget) — beyond the queue,
// which is the same on both.
type queueTarget interface {
	// judge says whether the caller could take the item as item shows it
	// at now (queued waiters aside), and otherwise until when it stays
	// blocked for the caller (zero: unknown). judge is monotone in now: an
	// item it finds free stays free later. own says that what blocks the
	// caller is its own owner's grant made after the round arrived, which
	// the round may not replace (a semaphore's one permit per owner under
	// the late-write rule): the head then answers at once, as a plain
	// acquire would, rather than hold up the queue behind it while others
	// could be served. An error ends the wait.
	judge(item map[string]types.AttributeValue, now time.Time) (until time.Time, blocked, own bool, err error)
	// take makes the write that takes the item as v shows it: as the
	// head of the queue with ticket, conditioned on that place, or with
	// ticket "" as a plain acquire (taking nothing while a live waiter is
	// queued). Not granted, it returns the view of the item the write met
	// (nil: the store did not return it).
	take(ctx context.Context, b Budget, v *view, ticket string) (granted bool, met *view, err error)
	// own reports whether item holds, live at now, the grant this very
	// request wrote (an SDK retry of a head's grant that landed finds its
	// entry gone), and keeps it as the wait's grant.
	own(item map[string]types.AttributeValue, now time.Time) bool
	// peek reads the item with an eventually consistent GetItem: what the
	// waiter needs to judge it, and the queue.
	peek(ctx context.Context, b Budget) (*view, error)
	// front reports whether the waiter at place i of v's queue may take
	// the item as the head does (take with its ticket): the head alone,
	// but for a read/write lock's readers, each of which ahead of the first
	// writer may (the head's batch).
	front(v *view, i int) bool
}

// fairOutcome is how a fair wait ended.
type fairOutcome struct {
	// granted: the target holds the grant.
	granted bool
	// ticket is the waiter's place when not granted ("" for none).
	ticket string
	// freeAt is, when not granted, when the item comes free for the
	// waiter as it last saw it; zero when unknown, past, or not to be
	// reported (a lock on a store that does not report holders).
	freeAt time.Time
	waited time.Duration
	// writes and reads are the store calls the wait made.
	writes, reads int
}

// waitFair is the wait of a waiting acquire with the queue, after a first
// attempt found the item held (or waiters queued); v is the item as that
// attempt met it (nil: unknown, read it), freeAt when the attempt saw it
// come free, and reports whether the answer may tell it. It runs until end
// by the service clock:
//
//   - It removes lapsed entries at the front of the queue it sees, finds
//     its place (the round's ticket) and moves its until to this round's
//     end plus QueueGrace, or joins at the back (a new ticket); a full
//     queue leaves it without a place, watching slowly.
//   - Every waiter reads at the pace of its place and of the queue as it
//     saw it move (PaceInterval): the head closely, waking when the item
//     comes free when it knows that time, and takes it with the removal of
//     its entry in one write as soon as it is free; the others more often
//     the faster the places ahead of them are served.
//
// Every write is conditioned on what it assumes, so a stale read only
// costs a refused write (from the second refusal in a row on, a random
// pause first: refusedBackoff); no write starts after end. A wait that
// ends without a grant keeps its place for the next round only when its
// round ran out; any other end (an error, a 409, a head blocked by its own
// owner's newer grant) removes its entry first (queueLeave).
func (s *Service) waitFair(ctx context.Context, w *waiter, t queueTarget, b Budget, v *view, exp time.Time, reports bool, end time.Time) (out fairOutcome, err error) {
	start := s.now()
	var (
		tickets []string // the tickets this wait may hold a place with
		seen    *view    // the latest view of the item, for the leave
		leave   bool     // the wait ends without a place for a next round
		unknown bool     // a write's outcome is unknown: the views predate it
	)
	defer func() {
		if (err != nil || leave) && !out.granted {
			if v != nil {
				seen = v
			}
			// An error that leaves the caller a place it could not
			// remove carries the place's ticket (a 503's queue_ticket):
			// its next round reclaims the place instead of joining
			// behind its own ghost.
			if tk := s.leaveQueue(ctx, w, b, seen, tickets, unknown, &out); tk != "" && errors.Is(err, ErrUnavailable) {
				err = &QueueTicketError{Ticket: tk, Err: err}
			}
		}
		out.waited = max(s.now().Sub(start), 0)
	}()
	sctx, cancel := context.WithTimeout(ctx, max(end.Sub(start), 0))
	defer cancel()

	untilMs := w.arrived.Add(time.Duration(w.waitSeconds)*time.Second + QueueGrace).UnixMilli()
	if w.ticket != "" {
		tickets = append(tickets, w.ticket)
	}
	ticket := ""      // the place the wait holds, once a consistent view showed it
	extended := false // the place was moved to this round's until
	refused := 0      // writes refused in a row
	backoff := false  // a write was refused again: pause before the next
	joins := 0        // joins sent
	readFails := 0
	seenPace := pace{place: -1} // the queue's movement as this wait saw it
	// pause sleeps d, or until end; false when the wait is over.
	pause := func(d time.Duration) bool {
		now := s.now()
		wake := now.Add(d)
		if wake.After(end) {
			wake = end
		}
		return s.sleep(sctx, wake.Sub(now)) == nil && s.now().Before(end)
	}
	jitter := func(d time.Duration) time.Duration { return d/2 + randUpTo(d) }
	// failedRead handles a read's error: nil (and a back-off) when it is
	// worth trying again.
	failedRead := func(err error) error {
		if !transient(err) {
			return storeErr(w.op, w.name, err)
		}
		readFails++
		pause(jitter(min(PollInterval<<readFails, MaxPollInterval)))
		return nil
	}
	// peek refreshes v with an eventually consistent read (after a read
	// failure: keeps v and backs off).
	var lastPeek time.Time // when the latest peek started
	peek := func() error {
		out.reads++
		lastPeek = s.now()
		nv, err := t.peek(ctx, b)
		if err != nil {
			return failedRead(err)
		}
		readFails = 0
		refused = 0 // the waiter waited and looked again: its writes are paced
		v = nv
		return nil
	}
	// write applies a queue write's outcome to the loop's state.
	write := func(nv *view, err error) error {
		out.writes++
		if errors.Is(err, errRefused) {
			refused++
			backoff = refused >= 2
			v = nv // the item the write met, or nil: read it
			return nil
		}
		if err != nil {
			unknown = true
			return err
		}
		refused = 0
		v = nv
		return nil
	}
	// take makes the write that takes the item; granted, the wait is
	// over. A refused write may be an SDK retry of this very grant whose
	// first attempt landed (a head's finds its entry gone; a semaphore's
	// away from home, its marker set): the item it met, or a consistent
	// read, then shows the grant, which is the wait's whatever its clock
	// says (t.own).
	take := func(tk string) (bool, error) {
		out.writes++
		granted, nv, err := t.take(ctx, b, v, tk)
		if err != nil {
			unknown = true
		}
		if err != nil || granted {
			return granted, err
		}
		refused++
		backoff = refused >= 2
		v = nv
		if v == nil {
			out.reads++
			if v, err = s.readView(ctx, w.key, b); err != nil {
				if !transient(err) {
					return false, storeErr(w.op, w.name, err)
				}
				v = nil
			}
		}
		return v != nil && t.own(v.item, s.now()), nil
	}
	for {
		now := s.now()
		if !now.Before(end) {
			break
		}
		nowMs := now.UnixMilli()
		if v != nil {
			seen = v
		}
		if v == nil {
			out.reads++
			nv, err := s.readView(ctx, w.key, b)
			if err != nil {
				if err := failedRead(err); err != nil {
					return fairOutcome{}, err
				}
				continue
			}
			readFails = 0
			v = nv
			continue // the read took time: the clock again before any write
		}
		until, blocked, own, err := t.judge(v.item, now)
		if err != nil {
			return out, err
		}
		if blocked && !until.IsZero() {
			exp = until
		}
		if backoff {
			// The item keeps changing under this waiter's writes: from the
			// second refusal in a row on, it pauses a random time, up to
			// twice as long with each refusal, before it reads the item
			// again and writes anew (refusedBackoff).
			backoff = false
			if !pause(randUpTo(refusedBackoff(refused))) {
				break
			}
			v = nil
			continue
		}
		if k := v.lapsedFront(nowMs); k > 0 {
			if err := write(s.queuePrune(ctx, w, b, v, k)); err != nil {
				return fairOutcome{}, err
			}
			continue
		}
		i, tk := v.find(tickets, w.caller, w.writer, nowMs)
		if i < 0 && w.ticket == "" && joins == 0 && !extended {
			// A round without a ticket (a client that predates it) takes
			// over its owner's place whose round has ended.
			if i, tk = v.orphan(w.caller, w.writer, nowMs); i >= 0 {
				tickets = append(tickets, tk)
			}
		}
		if i < 0 && ticket != "" && !v.consistent {
			v = nil // a hint that the place is gone: confirm it
			continue
		}
		if i < 0 {
			ticket = ""
			switch {
			case !blocked && v.open(nowMs):
				// Free, and no live waiter queued: take it as any acquire.
				granted, err := take("")
				if err != nil || granted {
					out.granted = granted
					return out, err
				}
			case len(v.queue) >= MaxQueue:
				// Full: wait without a place, and join when there is room.
				if !pause(jitter(QueuePollInterval)) {
					return s.fairHeld(out, "", reports, exp), nil
				}
				v = nil // a consistent read: the join needs one
			case !v.consistent:
				v = nil // join only on what the item really holds
			default:
				nt := newTicket()
				tickets = append(tickets, nt)
				joins++
				if err := write(s.queueJoin(ctx, w, b, v, nt, untilMs)); err != nil {
					return fairOutcome{}, err
				}
				if refused == 0 {
					// The join landed: the place is this wait's from now on,
					// and its answer reports it even if the wait ends before
					// the next look finds it (a slow scheduler, or a clock
					// that moved past the end meanwhile).
					ticket = nt
				}
				extended = true
			}
			continue
		}
		ticket = tk
		if !extended && v.queue[i].until < untilMs {
			if err := write(s.queueExtend(ctx, w, b, v, i, ticket, untilMs)); err != nil {
				return fairOutcome{}, err
			}
			if v != nil && refused == 0 {
				extended = true
			}
			continue
		}
		extended = true
		d := seenPace.see(i, now)
		if !t.front(v, i) {
			// Behind the head: at its tier's pace, jittered so that waiters
			// spread out; faster when the queue moves, then exactly at half
			// its expected wait, as a jittered read could come after it
			// became the head.
			wake := PaceInterval(i, len(v.queue), d)
			if wake >= PlacePollInterval(i, len(v.queue)) {
				wake = jitter(wake)
			}
			if !pause(wake) {
				break
			}
			if err := peek(); err != nil {
				return fairOutcome{}, err
			}
			continue
		}
		// The head: take the item once it is free.
		if blocked && own {
			if !v.consistent {
				v = nil // answer only on what the item really holds
				continue
			}
			// Its owner's newer grant blocks it, for as long as the owner
			// keeps it: answer as a plain acquire would, and give the
			// place up to the waiters behind.
			leave = true
			return s.fairHeld(out, "", reports, exp), nil
		}
		if blocked {
			// The head reads on a fixed cadence, counted from each read's
			// start: it alone watches closely, so there is nobody to
			// spread out from, and a release waits for its next read half
			// an interval on average (a jittered pause after each read
			// made it 0.54 of an interval plus a read's time).
			wake := max(PaceInterval(0, len(v.queue), d)-now.Sub(lastPeek), 0)
			atExpiry := !until.IsZero() && !until.After(now.Add(wake))
			if atExpiry {
				wake = until.Sub(now)
			}
			if !pause(wake) {
				break
			}
			if !atExpiry {
				if err := peek(); err != nil {
					return fairOutcome{}, err
				}
				continue
			}
		}
		if !s.now().Before(end) {
			break // a slow read or a late wake-up took the last moments: no write now
		}
		granted, err := take(ticket)
		if err != nil || granted {
			out.granted = granted
			return out, err
		}
	}
	return s.fairHeld(out, ticket, reports, exp), nil
}

// fairHeld is a wait's outcome when not granted: the waiter's place, and
// when the item comes free where the answer may tell it (as for one
// attempt).
func (s *Service) fairHeld(out fairOutcome, ticket string, reports bool, exp time.Time) fairOutcome {
	out.ticket = ticket
	if reports && exp.After(s.now()) {
		out.freeAt = exp
	}
	return out
}

// lockTarget is a lock's item as waitFair queues on it.
type lockTarget struct {
	s   *Service
	req AcquireRequest
	gid string
	// issued is the issue time of a plain take's write (the late-write
	// rule): req.Arrived for a lock's wait, setIssued for a set's.
	issued time.Time
	// ttl, when set, is the TTL of a take's write, computed as it is sent
	// (a waiting set's name held through the wait runs until the wait's
	// end plus the set's TTL, however long it waited for the name); else
	// req.TTLSeconds.
	ttl func() int64
	res AcquireResult // the grant, once granted
	// took says a take was sent: a grant may have landed unheard.
	took bool
}

// judge never says own for a lock: a lease of the caller's owner newer
// than the round blocks everyone behind the head as much as the head, so
// the head waits it out as it waits out any other holder.
func (l *lockTarget) judge(item map[string]types.AttributeValue, now time.Time) (time.Time, bool, bool, error) {
	until, blocked := blockedUntil(item, now)
	return until, blocked, false, nil
}

func (l *lockTarget) take(ctx context.Context, b Budget, v *view, ticket string) (bool, *view, error) {
	l.took = true
	req := l.req
	if l.ttl != nil {
		req.TTLSeconds = l.ttl()
	}
	if ticket != "" {
		r, nv, err := l.s.headGrant(ctx, req, b, v, ticket, l.gid)
		l.res = r
		return r.Acquired, nv, err
	}
	cctx, cancel := b.Context(ctx)
	defer cancel()
	r, item, err := l.s.acquireWrite(cctx, req, l.issued, l.gid)
	if err != nil || r.Acquired {
		l.res = r
		return r.Acquired, nil, err
	}
	if l.s.oldItem {
		return false, newView(item, true), nil
	}
	return false, nil, nil
}

func (l *lockTarget) own(item map[string]types.AttributeValue, now time.Time) bool {
	lock, ok := ownGrant(l.req.Resource, item, l.req.Caller, l.gid, now)
	if ok {
		l.res = AcquireResult{Acquired: true, Lock: lock}
	}
	return ok
}

func (l *lockTarget) peek(ctx context.Context, b Budget) (*view, error) {
	return l.s.queuePeek(ctx, l.req.Resource, b)
}

func (l *lockTarget) front(_ *view, i int) bool { return i == 0 }

// waitFairLock is the wait of AcquireWait with FairWaiting, after a first
// attempt answered held; old is the item that attempt met, when the store
// returned it.
func (s *Service) waitFairLock(ctx context.Context, req AcquireRequest, b Budget, held AcquireResult, old map[string]types.AttributeValue, end time.Time, gid string) (AcquireResult, error) {
	w := &waiter{key: s.key(req.Resource), op: "acquire", name: req.Resource, caller: req.Caller, arrived: req.Arrived,
		waitSeconds: req.WaitSeconds, ticket: req.QueueTicket}
	t := &lockTarget{s: s, req: req, gid: gid, issued: req.Arrived}
	var v *view
	if s.oldItem {
		v = newView(old, true)
	}
	exp := held.HolderExpiresAt
	out, err := s.waitFair(ctx, w, t, b, v, exp, s.oldItem || !exp.IsZero(), end)
	if err != nil {
		return AcquireResult{}, err
	}
	if out.granted {
		t.res.Waited = out.waited
		return t.res, nil
	}
	held.HolderExpiresAt, held.QueueTicket, held.Waited = out.freeAt, out.ticket, out.waited
	return held, nil
}
