package locklogic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Fair waiting (Config.FairWaiting): the waiters of a lock queue on the
// lock's own item, so that every decision stays one conditional write on
// one item (docs/design.md#fair-waiting-a-queue-on-the-item).
const (
	// MaxQueue bounds the waiters queued on one lock; more wait without a
	// place (they may take the lock only once the queue is empty).
	MaxQueue = 64
	// QueueGrace is how long after its round's end (arrival plus
	// wait_seconds) a waiter's place is kept for its next round.
	QueueGrace = 2 * time.Second
	// HeadPollInterval is the mean time between the reads of the head of
	// the queue (each uniformly random within ±50 %): it watches closely,
	// and takes the lock within about half of it after a release.
	HeadPollInterval = 30 * time.Millisecond
	// NextPollInterval is the mean time between the reads of the waiter
	// behind the head: it learns that it became the head well within the
	// shortest hold, so it watches closely when that hold ends.
	NextPollInterval = 250 * time.Millisecond
	// QueuePollInterval is the mean time between the reads of the other
	// waiters, and of a waiter without a place.
	QueuePollInterval = time.Second
	// maxPrune bounds the lapsed entries one write removes (the
	// expressions stay far below DynamoDB's 4 KB).
	maxPrune = 16
	// maxTicketBytes bounds a queue ticket sent back by a client.
	maxTicketBytes = 64
)

// The members of a queue entry. owner and principal are the lease's own
// attribute names, so the placeholders #o and #p serve both.
const (
	entryID    = "id"
	entryUntil = "until"
)

// ValidateQueueTicket checks an optional queue ticket sent back by a
// client: "" (none), or 1–64 letters, digits, '-' or '_' (the service's
// own tickets are shorter).
func ValidateQueueTicket(ticket string, v *ValidationError) {
	if ticket == "" {
		return
	}
	if len(ticket) > maxTicketBytes || strings.ContainsFunc(ticket, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) {
		v.Add("queue_ticket", "must be the queue_ticket of an earlier answer: 1 to 64 letters, digits, '-' or '_'")
	}
}

// entry is one waiter in a lock's queue.
type entry struct {
	id, owner, principal string
	until                int64 // epoch ms: the place lapses then
}

// view is what a waiter knows of the lock's item.
type view struct {
	item  map[string]types.AttributeValue // nil: no item
	queue []entry
	// consistent says the view is the item as some write met it or a
	// strongly consistent read returned it, not an eventually
	// consistent hint: only such a view may show that a place is gone.
	consistent bool
}

func newView(item map[string]types.AttributeValue, consistent bool) *view {
	v := &view{item: item, consistent: consistent}
	l, _ := item[AttrQueue].(*types.AttributeValueMemberL)
	if l == nil {
		return v
	}
	for _, e := range l.Value {
		m, _ := e.(*types.AttributeValueMemberM)
		if m == nil {
			continue
		}
		until, _ := n(m.Value, entryUntil)
		v.queue = append(v.queue, entry{id: str(m.Value, entryID), owner: str(m.Value, AttrOwner),
			principal: str(m.Value, AttrPrincipal), until: until})
	}
	return v
}

// lapsedFront counts the entries at the front of the queue whose place
// has lapsed at nowMs, at most maxPrune.
func (v *view) lapsedFront(nowMs int64) int {
	k := 0
	for k < len(v.queue) && k < maxPrune && v.queue[k].until <= nowMs {
		k++
	}
	return k
}

// find returns the index of the caller's live entry with one of tickets,
// and its ticket; -1 when there is none.
func (v *view) find(tickets []string, c Caller, nowMs int64) (int, string) {
	for i, e := range v.queue {
		if e.owner != c.Owner || e.principal != c.Principal || e.until <= nowMs {
			continue
		}
		for _, t := range tickets {
			if e.id == t {
				return i, t
			}
		}
	}
	return -1, ""
}

// orphan returns the index of the earliest live entry of the caller whose
// round has stopped writing (its until is at most QueueGrace + GrantGuard
// away: a round writes until GrantGuard before its end), and its ticket;
// -1 when there is none. A round that brings no ticket takes such a place
// over, as if it had brought its ticket; an entry whose round still runs
// belongs to that round.
func (v *view) orphan(c Caller, nowMs int64) (int, string) {
	for i, e := range v.queue {
		if e.owner == c.Owner && e.principal == c.Principal && e.until > nowMs && e.until-(QueueGrace+GrantGuard).Milliseconds() <= nowMs {
			return i, e.id
		}
	}
	return -1, ""
}

// open reports what queueOpen decides: no live waiter is queued at nowMs.
func (v *view) open(nowMs int64) bool {
	if len(v.queue) == 0 {
		return true
	}
	qu, ok := n(v.item, AttrQueueUntil)
	return ok && qu <= nowMs
}

// newTicket returns a random queue ticket: it only has to differ from the
// other entries of one queue.
func newTicket() string {
	return strconv.FormatUint(rand.Uint64(), 36)
}

// queueNames are the names of the queue's own writes (join, extend,
// prune), each request taking the ones it uses.
func queueNames(placeholders ...string) map[string]string {
	all := map[string]string{"#r": AttrResource, "#q": AttrQueue, "#qu": AttrQueueUntil, "#qi": entryID,
		"#qt": entryUntil, "#o": AttrOwner, "#p": AttrPrincipal}
	out := make(map[string]string, len(placeholders))
	for _, p := range placeholders {
		out[p] = all[p]
	}
	return out
}

// entryCond is the condition "entry i is the caller's live place with
// ticket": its id, owner and principal, and until after :now. It adds
// :tk, :o and :p to values.
func entryCond(i int, c Caller, ticket string, values map[string]types.AttributeValue) string {
	e := "#q[" + strconv.Itoa(i) + "]"
	values[":tk"] = &types.AttributeValueMemberS{Value: ticket}
	values[":o"] = &types.AttributeValueMemberS{Value: c.Owner}
	p := "attribute_not_exists(" + e + ".#p)"
	if c.Principal != "" {
		values[":p"] = &types.AttributeValueMemberS{Value: c.Principal}
		p = e + ".#p = :p"
	}
	return e + ".#qi = :tk AND " + e + ".#o = :o AND " + p + " AND " + e + ".#qt > :now"
}

// queueUntilCond keeps queue_until at least every entry's until: a write
// that sets an entry's until to u sets queue_until to :qu ≥ u, the latest
// it knows, and only if no other write raised it further meanwhile.
const queueUntilCond = "(attribute_not_exists(#qu) OR #qu <= :qu)"

// queueJoin appends the caller's entry with ticket, lapsing at untilMs, to
// the queue it saw in v (a consistent view), with one write conditioned on
// the queue's size being the one v shows: an SDK retry of a join that
// landed fails, and the waiter then finds its ticket in the item.
func (s *Service) queueJoin(ctx context.Context, req AcquireRequest, b Budget, v *view, ticket string, untilMs int64) (*view, error) {
	m := map[string]types.AttributeValue{
		entryID:    &types.AttributeValueMemberS{Value: ticket},
		AttrOwner:  &types.AttributeValueMemberS{Value: req.Caller.Owner},
		entryUntil: num(untilMs),
	}
	if req.Caller.Principal != "" {
		m[AttrPrincipal] = &types.AttributeValueMemberS{Value: req.Caller.Principal}
	}
	qu := untilMs
	if old, ok := n(v.item, AttrQueueUntil); ok && old > qu {
		qu = old
	}
	values := map[string]types.AttributeValue{
		":qe":  &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: m}}},
		":nil": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		":qn":  num(int64(len(v.queue))),
		":qu":  num(qu),
	}
	return s.queueWrite(ctx, b, req.Resource, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #q = list_append(if_not_exists(#q, :nil), :qe), #qu = :qu"),
		ConditionExpression:       aws.String("attribute_exists(#r) AND (attribute_not_exists(#q) OR size(#q) = :qn) AND " + queueUntilCond),
		ExpressionAttributeNames:  queueNames("#r", "#q", "#qu"),
		ExpressionAttributeValues: values,
	})
}

// queueExtend moves the until of the caller's entry i (ticket) to
// untilMs: one write a round keeps the place.
func (s *Service) queueExtend(ctx context.Context, req AcquireRequest, b Budget, v *view, i int, ticket string, untilMs int64) (*view, error) {
	qu := untilMs
	if old, ok := n(v.item, AttrQueueUntil); ok && old > qu {
		qu = old
	}
	values := map[string]types.AttributeValue{":qt": num(untilMs), ":qu": num(qu), ":now": num(s.now().UnixMilli())}
	cond := entryCond(i, req.Caller, ticket, values)
	names := queueNames("#q", "#qu", "#qi", "#qt", "#o")
	if strings.Contains(cond, "#p") {
		names["#p"] = AttrPrincipal
	}
	return s.queueWrite(ctx, b, req.Resource, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #q[" + strconv.Itoa(i) + "].#qt = :qt, #qu = :qu"),
		ConditionExpression:       aws.String(cond + " AND " + queueUntilCond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
}

// queuePrune removes the k lapsed entries at the front of the queue v
// shows, with one write conditioned on each one's id and lapse (indices in
// descending order: dynalite removes the wrong elements otherwise).
func (s *Service) queuePrune(ctx context.Context, resource string, b Budget, v *view, k int) (*view, error) {
	values := map[string]types.AttributeValue{":now": num(s.now().UnixMilli())}
	var cond, remove strings.Builder
	for j := range k {
		e := "#q[" + strconv.Itoa(j) + "]"
		p := ":q" + strconv.Itoa(j)
		values[p] = &types.AttributeValueMemberS{Value: v.queue[j].id}
		if j > 0 {
			cond.WriteString(" AND ")
		}
		cond.WriteString(e + ".#qi = " + p + " AND " + e + ".#qt <= :now")
	}
	for j := k - 1; j >= 0; j-- {
		if j < k-1 {
			remove.WriteString(", ")
		}
		remove.WriteString("#q[" + strconv.Itoa(j) + "]")
	}
	return s.queueWrite(ctx, b, resource, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("REMOVE " + remove.String()),
		ConditionExpression:       aws.String(cond.String()),
		ExpressionAttributeNames:  queueNames("#q", "#qi", "#qt"),
		ExpressionAttributeValues: values,
	})
}

// queueWrite sends one write of the queue's own (join, extend, prune)
// under its own budget. It returns the item after the write, or, when
// the condition failed, the item the write met if the store returned it,
// else nil: the caller then reads the item.
func (s *Service) queueWrite(ctx context.Context, b Budget, resource string, in *dynamodb.UpdateItemInput) (*view, error) {
	in.TableName = &s.table
	in.Key = s.key(resource)
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.UpdateItem(cctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if s.oldItem {
				return newView(ccf.Item, true), errRefused
			}
			return nil, errRefused
		}
		return nil, storeErr("acquire", resource, err)
	}
	return newView(out.Attributes, true), nil
}

// errRefused is a queue write whose condition failed: the queue changed.
var errRefused = errors.New("queue write refused")

// headGrantExpr are the head's grant, by variant as acquireExpr.
var headGrantExpr = [4]struct{ update, cond string }{
	headGrantExpression(false, false), headGrantExpression(true, false),
	headGrantExpression(false, true), headGrantExpression(true, true),
}

// headGrantExpression is the write of the head of the queue: the lease as
// an acquire writes it and the removal of its own entry, when the entry is
// the head and the lock is free (released, or expired past its
// lock-delay). Taking a free lock needs no issue-time stamp, so no
// same-owner branch: an SDK retry of a grant that landed finds its entry
// gone, and the waiter finds its grant id on the item instead.
func headGrantExpression(withPrincipal, withDelay bool) struct{ update, cond string } {
	e := acquireExpression(withPrincipal, withDelay)
	c := Caller{}
	if withPrincipal {
		c.Principal = "p"
	}
	cond := entryCond(0, c, "", map[string]types.AttributeValue{}) + " AND (attribute_exists(#x) OR " + freeCond + ")"
	return struct{ update, cond string }{e.update + ", #q[0]", cond}
}

// headGrantNames are the names of the head's grant.
var headGrantNames = map[string]string{
	"#o": AttrOwner, "#p": AttrPrincipal, "#t": AttrToken, "#a": AttrAcquiredAt, "#n": AttrRenewedAt,
	"#e": AttrExpiresAt, "#g": AttrTTL, "#x": AttrReleasedAt, "#d": AttrLockDelay, "#f": AttrFreeAt,
	"#fa": AttrForcedAt, "#gi": AttrGrantID, "#q": AttrQueue, "#qi": entryID, "#qt": entryUntil,
}

// headGrant is the head's grant write for ticket, with the request's grant
// id gid. Not granted, it returns the view of the item the write met (nil
// when the store did not return it).
func (s *Service) headGrant(ctx context.Context, req AcquireRequest, b Budget, ticket, gid string) (AcquireResult, *view, error) {
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
	expr := &headGrantExpr[variant]
	out, err := s.db.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.table,
		Key:                                 s.key(req.Resource),
		UpdateExpression:                    &expr.update,
		ConditionExpression:                 &expr.cond,
		ExpressionAttributeNames:            headGrantNames,
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
	lock, ok := decode(resource, item)
	if !ok || !live(item, now) || str(item, AttrGrantID) != gid || lock.Owner != c.Owner || str(item, AttrPrincipal) != c.Principal {
		return Lock{}, false
	}
	return lock, true
}

// queuePeekNames are the attributes a queued waiter reads: the lease's
// state and the queue.
var queuePeekNames = map[string]string{"#e": AttrExpiresAt, "#x": AttrReleasedAt, "#f": AttrFreeAt, "#q": AttrQueue}

// queuePeek reads the lease state and the queue of resource with an
// eventually consistent GetItem: a hint, which the conditional writes
// check.
func (s *Service) queuePeek(ctx context.Context, resource string, b Budget) (*view, error) {
	item, err := s.project(ctx, resource, b, "#e, #x, #f, #q", queuePeekNames)
	if err != nil {
		return nil, err
	}
	return newView(item, false), nil
}

// readView reads the whole item of resource strongly consistently: the
// view a waiter needs before it joins, and to find its own grant.
func (s *Service) readView(ctx context.Context, resource string, b Budget) (*view, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	item, err := s.get(cctx, resource)
	if err != nil {
		return nil, err
	}
	return newView(item, true), nil
}

// waitFair is the wait of AcquireWait with FairWaiting, after a first
// attempt answered held; old is the item that attempt met, when the store
// returned it. It runs until end by the service clock:
//
//   - It removes lapsed entries at the front of the queue it sees, finds
//     its place (the request's ticket) and moves its until to this
//     round's end plus QueueGrace, or joins at the back (a new ticket);
//     a full queue leaves it without a place, watching slowly.
//   - The head watches closely (HeadPollInterval), waking at the holder's
//     expiry when it knows it, and takes the lock with the removal of its
//     entry in one write as soon as it is free; the next in line watches
//     at NextPollInterval, the others at QueuePollInterval.
//
// Every write is conditioned on what it assumes, so a stale read only
// costs a refused write; no write starts after end.
func (s *Service) waitFair(ctx context.Context, req AcquireRequest, b Budget, held AcquireResult, old map[string]types.AttributeValue, end time.Time, gid string) (res AcquireResult, err error) {
	start := s.now()
	defer func() { res.Waited = max(s.now().Sub(start), 0) }()
	sctx, cancel := context.WithTimeout(ctx, max(end.Sub(start), 0))
	defer cancel()

	untilMs := req.Arrived.Add(time.Duration(req.WaitSeconds)*time.Second + QueueGrace).UnixMilli()
	var v *view
	if s.oldItem {
		v = newView(old, true)
	}
	var tickets []string // the tickets this wait may hold a place with
	if req.QueueTicket != "" {
		tickets = append(tickets, req.QueueTicket)
	}
	ticket := ""      // the place the wait holds, once a consistent view showed it
	extended := false // the place was moved to this round's until
	refused := 0      // queue writes refused in a row
	joins := 0        // joins sent: a round joins once, and retries a refused join twice at most
	exp := held.HolderExpiresAt
	reports := s.oldItem || !exp.IsZero()
	readFails := 0
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
	// peek refreshes v with an eventually consistent read (after a read
	// failure: keeps v and backs off).
	peek := func() error {
		nv, err := s.queuePeek(ctx, req.Resource, b)
		if err != nil {
			if !transient(err) {
				return storeErr("acquire", req.Resource, err)
			}
			readFails++
			pause(jitter(min(PollInterval<<readFails, MaxPollInterval)))
			return nil
		}
		readFails = 0
		refused = 0 // the waiter waited and looked again: its writes are paced
		v = nv
		return nil
	}
	for {
		now := s.now()
		if !now.Before(end) {
			break
		}
		nowMs := now.UnixMilli()
		if v == nil {
			nv, err := s.readView(ctx, req.Resource, b)
			if err != nil {
				if !transient(err) {
					return AcquireResult{}, storeErr("acquire", req.Resource, err)
				}
				readFails++
				if !pause(jitter(min(PollInterval<<readFails, MaxPollInterval))) {
					break
				}
				continue
			}
			readFails = 0
			v = nv
			continue // the read took time: the clock again before any write
		}
		if until, blocked := blockedUntil(v.item, now); blocked {
			exp = until
		}
		if refused >= 3 {
			// The queue keeps changing under this waiter's writes: wait a
			// slow poll before the next, so its writes stay bounded.
			refused = 0
			if !pause(jitter(QueuePollInterval)) {
				break
			}
			v = nil
			continue
		}
		// write applies a queue write's outcome to the loop's state.
		write := func(nv *view, err error) error {
			if errors.Is(err, errRefused) {
				refused++
				v = nv // the item the write met, or nil: read it
				return nil
			}
			if err != nil {
				return err
			}
			refused = 0
			v = nv
			return nil
		}
		if k := v.lapsedFront(nowMs); k > 0 {
			if err := write(s.queuePrune(ctx, req.Resource, b, v, k)); err != nil {
				return AcquireResult{}, err
			}
			continue
		}
		i, tk := v.find(tickets, req.Caller, nowMs)
		if i < 0 && req.QueueTicket == "" && joins == 0 && !extended {
			// A round without a ticket (a client that predates it) takes
			// over its owner's place whose round has ended.
			if i, tk = v.orphan(req.Caller, nowMs); i >= 0 {
				tickets = append(tickets, tk)
			}
		}
		if i < 0 && ticket != "" && !v.consistent {
			v = nil // a hint that the place is gone: confirm it
			continue
		}
		if i < 0 {
			ticket = ""
			_, blocked := blockedUntil(v.item, now)
			switch {
			case !blocked && v.open(nowMs):
				// Free, and no live waiter queued: take it as any acquire.
				cctx, cancel := b.Context(ctx)
				r, item, err := s.acquireWrite(cctx, req, req.Arrived, gid)
				cancel()
				if err != nil || r.Acquired {
					return r, err
				}
				refused++
				v = nil
				if s.oldItem {
					v = newView(item, true)
				}
			case len(v.queue) >= MaxQueue || joins >= 3:
				// Full: wait without a place, and join when there is room.
				if !pause(jitter(QueuePollInterval)) {
					return s.heldAnswer(held, "", reports, exp), nil
				}
				v = nil // a consistent read: the join needs one
			case !v.consistent:
				v = nil // join only on what the item really holds
			default:
				t := newTicket()
				tickets = append(tickets, t)
				joins++
				if err := write(s.queueJoin(ctx, req, b, v, t, untilMs)); err != nil {
					return AcquireResult{}, err
				}
				extended = true
			}
			continue
		}
		ticket = tk
		if !extended && v.queue[i].until < untilMs {
			if err := write(s.queueExtend(ctx, req, b, v, i, ticket, untilMs)); err != nil {
				return AcquireResult{}, err
			}
			if v != nil && refused == 0 {
				extended = true
			}
			continue
		}
		extended = true
		if i > 0 {
			interval := QueuePollInterval
			if i == 1 {
				interval = NextPollInterval
			}
			if !pause(jitter(interval)) {
				break
			}
			if err := peek(); err != nil {
				return AcquireResult{}, err
			}
			continue
		}
		// The head: take the lock once it is free.
		if until, blocked := blockedUntil(v.item, now); blocked {
			wake := jitter(HeadPollInterval)
			atExpiry := !until.After(now.Add(wake))
			if atExpiry {
				wake = until.Sub(now)
			}
			if !pause(wake) {
				break
			}
			if !atExpiry {
				if err := peek(); err != nil {
					return AcquireResult{}, err
				}
				continue
			}
		}
		if !s.now().Before(end) {
			break // a slow read or a late wake-up took the last moments: no write now
		}
		r, nv, err := s.headGrant(ctx, req, b, ticket, gid)
		if err != nil || r.Acquired {
			return r, err
		}
		refused++
		if nv == nil {
			if nv, err = s.readView(ctx, req.Resource, b); err != nil {
				if !transient(err) {
					return AcquireResult{}, storeErr("acquire", req.Resource, err)
				}
				nv = nil
			}
		}
		if nv != nil {
			// An SDK retry of this very grant, whose first attempt landed,
			// finds the entry gone and the grant in place.
			if lock, ok := ownGrant(req.Resource, nv.item, req.Caller, gid, s.now()); ok {
				return AcquireResult{Acquired: true, Lock: lock}, nil
			}
		}
		v = nv
	}
	return s.heldAnswer(held, ticket, reports, exp), nil
}

// heldAnswer is a wait's "held" answer: with the waiter's place, and the
// holder's expiry where the store reports holders (as for one attempt).
func (s *Service) heldAnswer(held AcquireResult, ticket string, reports bool, exp time.Time) AcquireResult {
	held.HolderExpiresAt = time.Time{}
	if reports && exp.After(s.now()) {
		held.HolderExpiresAt = exp
	}
	held.QueueTicket = ticket
	return held
}
