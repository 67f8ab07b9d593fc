package locklogic

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
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
	// LoneHeadPollInterval, HeadPollInterval, NextPollInterval,
	// ThirdPollInterval and QueuePollInterval are the mean times between
	// the reads of a queued waiter by its place while the queue does not
	// move (PlacePollInterval; the head's on a fixed cadence from each
	// read's start, the others' each uniformly random within ±50 %, so
	// waiters spread out): the head watches closely — the closest when it
	// waits alone — and takes the item within about half its interval
	// after a release; the second learns that it became the head within
	// 1.5 × NextPollInterval, well within a hold of half a second; the
	// third moves up to second as fast; the others, and a waiter without
	// a place, learn slowly that they moved up, or that the entries ahead
	// have lapsed. A queue that moves reads faster (PaceInterval).
	LoneHeadPollInterval = 25 * time.Millisecond
	HeadPollInterval     = 32 * time.Millisecond
	NextPollInterval     = 200 * time.Millisecond
	ThirdPollInterval    = 300 * time.Millisecond
	QueuePollInterval    = time.Second
	// PaceFloor is, per place, the shortest mean interval between the
	// reads of a waiter: at place i, max(1, i) × PaceFloor (PaceInterval),
	// so the N waiters of one item read at most 62.5 × (1 + H(N − 1))
	// times a second (QueueReadBound), however fast their queue moves.
	PaceFloor = 16 * time.Millisecond
	// refusedBase is the longest pause before a waiter's write after its
	// second refused write in a row (refusedBackoff).
	refusedBase = 20 * time.Millisecond
	// maxPrune bounds the lapsed entries one write removes (the
	// expressions stay far below DynamoDB's 4 KB).
	maxPrune = 16
	// maxTicketBytes bounds a queue ticket sent back by a client.
	maxTicketBytes = 64
	// leaveBudget bounds a wait's leave (its read and its write), which
	// runs detached from the request's cancellation and store budget:
	// the write before it may have spent them (leaveContext).
	leaveBudget = time.Second
)

// The members of a queue entry. owner and principal are the lease's own
// attribute names, so the placeholders #o and #p serve both.
const (
	entryID    = "id"
	entryUntil = "until"
	// entryJoined is when the waiter joined (epoch ms), for the admin
	// listings; two bytes of name keep an entry within its 150 bytes.
	entryJoined = "at"
	// entryKind is a read/write lock's writer entry's kind, entryWriter;
	// absent on a reader's (and on every lock's and semaphore's) entry.
	entryKind   = "k"
	entryWriter = "w"
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

// entry is one waiter in a queue.
type entry struct {
	id, owner, principal string
	until                int64 // epoch ms: the place lapses then
	joined               int64 // epoch ms: when it joined (0: unknown, an entry of an older service)
	writer               bool  // a read/write lock's writer (entryKind)
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
		joined, _ := n(m.Value, entryJoined)
		v.queue = append(v.queue, entry{id: str(m.Value, entryID), owner: str(m.Value, AttrOwner),
			principal: str(m.Value, AttrPrincipal), until: until, joined: joined, writer: str(m.Value, entryKind) == entryWriter})
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

// find returns the index of the caller's live entry of kind writer with
// one of tickets, and its ticket; -1 when there is none. A place keeps the
// kind it joined as: a read/write lock's round of the other mode (a ticket
// brought from a read wait to a write wait) does not find it, and joins.
func (v *view) find(tickets []string, c Caller, writer bool, nowMs int64) (int, string) {
	for i, e := range v.queue {
		if e.owner != c.Owner || e.principal != c.Principal || e.writer != writer || e.until <= nowMs {
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
// belongs to that round, and an entry of the other kind (writer) to a
// round of the other mode.
func (v *view) orphan(c Caller, writer bool, nowMs int64) (int, string) {
	for i, e := range v.queue {
		if e.owner == c.Owner && e.principal == c.Principal && e.writer == writer && e.until > nowMs &&
			e.until-(QueueGrace+GrantGuard).Milliseconds() <= nowMs {
			return i, e.id
		}
	}
	return -1, ""
}

// version returns the queue version v shows (0: none yet).
func (v *view) version() int64 {
	ver, _ := n(v.item, AttrQueueVersion)
	return ver
}

// latestUntil returns the latest until of entries (0: none).
func latestUntil(entries []entry) int64 {
	var u int64
	for _, e := range entries {
		u = max(u, e.until)
	}
	return u
}

// versionCond pins the queue version to the one v shows, adding :qv to
// values: no entry was added and no until moved since v (joins and keeps
// are the only writes that do, and each raises the version).
func versionCond(v *view, values map[string]types.AttributeValue) string {
	ver := v.version()
	if ver == 0 {
		return "attribute_not_exists(#qv)"
	}
	values[":qv"] = num(ver)
	return "#qv = :qv"
}

// nextVersion is the update of a join or keep: the version v shows plus
// one (the write pins the version, so this is the stored one plus one).
func nextVersion(v *view, values map[string]types.AttributeValue) string {
	values[":qv1"] = num(v.version() + 1)
	return "#qv = :qv1"
}

// lowerUntil is the part of a write that removes entries (the head's
// grant, a prune, a leave) and leaves the entries left of the queue v
// shows: when v's queue_until is later than every until of left, the
// write sets queue_until to the latest of them (:qu), conditioned on the
// version v shows, so that a plain acquire is kept out only by entries
// still queued — not by a served head's until, nor by one that left
// (docs/design.md#departed-waiters). It returns "" and "" when there is
// nothing to lower (no entry left: an empty queue is open whatever
// queue_until says, and the next join sets it afresh). It adds #qu and #qv
// to names, :qu and :qv to values.
func lowerUntil(v *view, left []entry, names map[string]string, values map[string]types.AttributeValue) (set, cond string) {
	if v == nil || len(left) == 0 {
		return "", ""
	}
	qu, ok := n(v.item, AttrQueueUntil)
	latest := latestUntil(left)
	if !ok || qu <= latest {
		return "", ""
	}
	names["#qu"], names["#qv"] = AttrQueueUntil, AttrQueueVersion
	values[":qu"] = num(latest)
	return "#qu = :qu", versionCond(v, values)
}

// open reports what queueOpen decides: no live waiter is queued at nowMs.
func (v *view) open(nowMs int64) bool { return itemOpen(v.item, nowMs) }

// itemOpen reports what queueOpen decides for item at nowMs: its queue is
// absent or empty, or every place in it has lapsed (queue_until passed).
func itemOpen(item map[string]types.AttributeValue, nowMs int64) bool {
	if l, _ := item[AttrQueue].(*types.AttributeValueMemberL); l == nil || len(l.Value) == 0 {
		return true
	}
	qu, ok := n(item, AttrQueueUntil)
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
	all := map[string]string{"#r": AttrResource, "#q": AttrQueue, "#qu": AttrQueueUntil, "#qv": AttrQueueVersion,
		"#qi": entryID, "#qt": entryUntil, "#o": AttrOwner, "#p": AttrPrincipal}
	out := make(map[string]string, len(placeholders))
	for _, p := range placeholders {
		out[p] = all[p]
	}
	return out
}

// entryCond is the condition "entry i is the caller's live place with
// ticket": its id, owner and principal, and until after :now. owner and
// principal are the placeholders of the entry's members (a lock's write
// shares #o and #p with the lease's attributes of the same names; a
// semaphore's names its slot's attributes with those). It adds :tk, :o
// and :p to values.
func entryCond(i int, c Caller, ticket string, values map[string]types.AttributeValue, owner, principal string) string {
	e := "#q[" + strconv.Itoa(i) + "]"
	values[":tk"] = &types.AttributeValueMemberS{Value: ticket}
	values[":o"] = &types.AttributeValueMemberS{Value: c.Owner}
	p := "attribute_not_exists(" + e + "." + principal + ")"
	if c.Principal != "" {
		values[":p"] = &types.AttributeValueMemberS{Value: c.Principal}
		p = e + "." + principal + " = :p"
	}
	return e + ".#qi = :tk AND " + e + "." + owner + " = :o AND " + p + " AND " + e + ".#qt > :now"
}

// waiter is one waiting acquire as the queue sees it: the item it queues
// on, who waits, and its round.
type waiter struct {
	key    map[string]types.AttributeValue
	op     string // the operation its errors name: "acquire", "acquire-semaphore"
	name   string // the lock's or the semaphore's name, for errors
	caller Caller
	// arrived and waitSeconds are the round's: its place lapses
	// QueueGrace after arrived + waitSeconds.
	arrived     time.Time
	waitSeconds int64
	// ticket is the queue_ticket the round brought back ("" for none).
	ticket string
	// writer marks a read/write lock's writer: its entry has entryKind.
	writer bool
}

// queueJoin appends the caller's entry with ticket, lapsing at untilMs, to
// the queue it saw in v (a consistent view), with one write conditioned on
// the queue version v shows, which the join raises: an SDK retry of a join
// that landed fails — even after the head was served and the queue has
// the size it had — and the waiter then finds its ticket in the item. As
// the version pins the entries, queue_until is set to the latest until of
// the queue with the new entry.
func (s *Service) queueJoin(ctx context.Context, w *waiter, b Budget, v *view, ticket string, untilMs int64) (*view, error) {
	m := map[string]types.AttributeValue{
		entryID:     &types.AttributeValueMemberS{Value: ticket},
		AttrOwner:   &types.AttributeValueMemberS{Value: w.caller.Owner},
		entryUntil:  num(untilMs),
		entryJoined: num(s.now().UnixMilli()),
	}
	if w.caller.Principal != "" {
		m[AttrPrincipal] = &types.AttributeValueMemberS{Value: w.caller.Principal}
	}
	if w.writer {
		m[entryKind] = &types.AttributeValueMemberS{Value: entryWriter}
	}
	values := map[string]types.AttributeValue{
		":qe":  &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: m}}},
		":nil": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		":qu":  num(max(untilMs, latestUntil(v.queue))),
	}
	cond := "attribute_exists(#r) AND " + versionCond(v, values)
	return s.queueWrite(ctx, w, b, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #q = list_append(if_not_exists(#q, :nil), :qe), #qu = :qu, " + nextVersion(v, values)),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  queueNames("#r", "#q", "#qu", "#qv"),
		ExpressionAttributeValues: values,
	})
}

// queueExtend moves the until of the caller's entry i (ticket) to
// untilMs: one write a round keeps the place. Like a join it pins the
// queue version v shows and raises it, and sets queue_until to the latest
// until of the entries v shows with the moved one.
func (s *Service) queueExtend(ctx context.Context, w *waiter, b Budget, v *view, i int, ticket string, untilMs int64) (*view, error) {
	others := slices.Delete(slices.Clone(v.queue), i, i+1)
	values := map[string]types.AttributeValue{":qt": num(untilMs), ":qu": num(max(untilMs, latestUntil(others))),
		":now": num(s.now().UnixMilli())}
	cond := entryCond(i, w.caller, ticket, values, "#o", "#p") + " AND " + versionCond(v, values)
	names := queueNames("#q", "#qu", "#qv", "#qi", "#qt", "#o", "#p")
	return s.queueWrite(ctx, w, b, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #q[" + strconv.Itoa(i) + "].#qt = :qt, #qu = :qu, " + nextVersion(v, values)),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
}

// queuePrune removes the k lapsed entries at the front of the queue v
// shows, with one write conditioned on each one's id and lapse (indices in
// descending order: dynalite removes the wrong elements otherwise), and
// lowers queue_until to the entries left (lowerUntil).
func (s *Service) queuePrune(ctx context.Context, w *waiter, b Budget, v *view, k int) (*view, error) {
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
	names := queueNames("#q", "#qi", "#qt")
	update := "REMOVE " + remove.String()
	if set, vc := lowerUntil(v, v.queue[k:], names, values); set != "" {
		update = "SET " + set + " " + update
		cond.WriteString(" AND " + vc)
	}
	return s.queueWrite(ctx, w, b, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond.String()),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
}

// queueLeave removes the caller's entry i (ticket) from the queue v shows,
// and lowers queue_until to the entries left (lowerUntil): a wait that
// ends without a grant and without keeping its place for a next round (an
// error, a 409, a head that cannot be served) must not leave a live entry
// that blocks everyone behind it until its round's end plus QueueGrace.
// One write, under ctx (leaveContext): when it is refused (the entry
// moved, or the queue changed under the lowering) the entry lapses by
// itself.
func (s *Service) queueLeave(ctx context.Context, w *waiter, v *view, i int, ticket string) error {
	values := map[string]types.AttributeValue{}
	e := "#q[" + strconv.Itoa(i) + "]"
	values[":tk"] = &types.AttributeValueMemberS{Value: ticket}
	values[":o"] = &types.AttributeValueMemberS{Value: w.caller.Owner}
	cond := e + ".#qi = :tk AND " + e + ".#o = :o AND attribute_not_exists(" + e + ".#p)"
	if w.caller.Principal != "" {
		values[":p"] = &types.AttributeValueMemberS{Value: w.caller.Principal}
		cond = e + ".#qi = :tk AND " + e + ".#o = :o AND " + e + ".#p = :p"
	}
	names := queueNames("#q", "#qi", "#o", "#p")
	update := "REMOVE " + e
	if set, vc := lowerUntil(v, slices.Delete(slices.Clone(v.queue), i, i+1), names, values); set != "" {
		update = "SET " + set + " " + update
		cond += " AND " + vc
	}
	_, err := s.queueWrite(ctx, w, Budget{}, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	return err
}

// leaveContext returns the context of a wait's leave: not the request's
// cancellation, nor its store budget (a write that timed out may have
// spent it, and the leave must still run), but leaveBudget of its own,
// never past ctx's deadline (the invocation's) minus b.Reserve.
func leaveContext(ctx context.Context, b Budget) (context.Context, context.CancelFunc) {
	d := time.Now().Add(leaveBudget)
	if deadline, ok := ctx.Deadline(); ok && deadline.Add(-b.Reserve).Before(d) {
		d = deadline.Add(-b.Reserve)
	}
	return context.WithDeadline(context.WithoutCancel(ctx), d)
}

// leaveQueue is the leave of a wait that ends without a grant and without
// keeping its place: it removes the caller's entry with one of tickets
// from the queue v shows (nil: unknown). After a write whose outcome is
// unknown (unknown: a join that landed and answered 500, say), no view
// the wait holds can show what that write did, so it reads the item
// first and leaves what it finds. It returns the ticket of a place the
// caller may still hold — the read failed, or the place was found and
// not removed — so that the answer can give it to the next round, which
// reclaims it instead of queueing behind it; "" when none.
func (s *Service) leaveQueue(ctx context.Context, w *waiter, b Budget, v *view, tickets []string, unknown bool, out *fairOutcome) string {
	lctx, cancel := leaveContext(ctx, b)
	defer cancel()
	if unknown {
		out.reads++
		nv, err := s.readView(lctx, w.key, Budget{})
		if err != nil {
			if len(tickets) == 0 {
				return ""
			}
			return tickets[len(tickets)-1] // the latest: a join's, or the place the round held
		}
		v = nv
	}
	if v == nil {
		return ""
	}
	i, tk := v.find(tickets, w.caller, w.writer, s.now().UnixMilli())
	if i < 0 {
		return ""
	}
	out.writes++
	if err := s.queueLeave(lctx, w, v, i, tk); err != nil {
		return tk
	}
	return ""
}

// queueWrite sends one write of the queue's own (join, extend, prune)
// under its own budget. It returns the item after the write, or, when
// the condition failed, the item the write met if the store returned it,
// else nil: the caller then reads the item.
func (s *Service) queueWrite(ctx context.Context, w *waiter, b Budget, in *dynamodb.UpdateItemInput) (*view, error) {
	in.TableName = &s.table
	in.Key = w.key
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
		if invalidListPath(err) {
			return nil, errRefused // the queue shrank under an index: a stale view, read it
		}
		return nil, storeErr(w.op, w.name, err)
	}
	return newView(out.Attributes, true), nil
}

// errRefused is a queue write whose condition failed: the queue changed.
var errRefused = errors.New("queue write refused")

// invalidListPath reports whether err is DynamoDB's refusal of an update
// expression's document path, which a queue write meets when an entry's
// index is gone (queueExtend's SET #q[i].#qt after a grant or a prune
// shortened the list). Whether DynamoDB checks the path before the
// condition (which would fail too) is not documented, so either answer
// means the same: the view was stale.
func invalidListPath(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException" &&
		strings.Contains(apiErr.ErrorMessage(), "document path")
}

// queuePeekNames are the attributes a lock's queued waiter reads: the
// lease's state and the queue, with its queue_until and version (the
// head's grant lowers queue_until from them: lowerUntil).
var queuePeekNames = map[string]string{"#e": AttrExpiresAt, "#x": AttrReleasedAt, "#f": AttrFreeAt, "#q": AttrQueue,
	"#qu": AttrQueueUntil, "#qv": AttrQueueVersion}

// queuePeek reads the lease state and the queue of resource with an
// eventually consistent GetItem: a hint, which the conditional writes
// check.
func (s *Service) queuePeek(ctx context.Context, resource string, b Budget) (*view, error) {
	item, err := s.project(ctx, resource, b, "#e, #x, #f, #q, #qu, #qv", queuePeekNames)
	if err != nil {
		return nil, err
	}
	return newView(item, false), nil
}

// readView reads the whole item of key strongly consistently: the view a
// waiter needs before it joins, and to find its own grant.
func (s *Service) readView(ctx context.Context, key map[string]types.AttributeValue, b Budget) (*view, error) {
	cctx, cancel := b.Context(ctx)
	defer cancel()
	out, err := s.db.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return newView(out.Item, true), nil
}

// QueueEntry is a waiter in a lock's or a semaphore's queue, as the admin
// listings show it.
type QueueEntry struct {
	Owner     string
	Principal string
	// JoinedAt is when the waiter joined; zero for an entry written by a
	// service that did not record it.
	JoinedAt time.Time
	// Until is when its place lapses unless its next round keeps it.
	Until time.Time
	// Writer marks a read/write lock's writer (its readers' entries and
	// every other kind's are false).
	Writer bool
}

// queueEntries returns the places of item's queue that have not lapsed at
// now, in queue order; nil for none.
func queueEntries(item map[string]types.AttributeValue, now time.Time) []QueueEntry {
	var out []QueueEntry
	for _, e := range newView(item, false).queue {
		if e.until <= now.UnixMilli() {
			continue
		}
		q := QueueEntry{Owner: e.owner, Principal: e.principal, Until: time.UnixMilli(e.until).UTC(), Writer: e.writer}
		if e.joined > 0 {
			q.JoinedAt = time.UnixMilli(e.joined).UTC()
		}
		out = append(out, q)
	}
	return out
}
