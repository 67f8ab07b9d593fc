package locklogic

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDB's limits on expression parameters, as documented in the
// Developer Guide ("Service, account, and table quotas in Amazon DynamoDB",
// section "Expression parameters"; earlier "Limits in DynamoDB"):
// ProjectionExpression, ConditionExpression, UpdateExpression and
// FilterExpression are each held to them. dynalite checks none of them.
const (
	// maxExpressionBytes: "The maximum length of any expression string is
	// 4 KB. For example, the size of the ConditionExpression a=b is 3
	// bytes."
	maxExpressionBytes = 4096
	// maxExpressionOperators: "The maximum number of operators or
	// functions allowed in an UpdateExpression is 300." The issue (and
	// this test) holds every expression to it, not only the update.
	maxExpressionOperators = 300
	// maxInOperands: "The maximum number of operands for the IN
	// comparator is 100."
	maxInOperands = 100
	// maxPlaceholderBytes: "The maximum length of any single expression
	// attribute name or expression attribute value is 255 bytes. For
	// example, #name is 5 bytes; :val is 4 bytes."
	maxPlaceholderBytes = 255
	// maxSubstitutionBytes: "The maximum length of all substitution
	// variables in an expression is 2 MB. This is the sum of the lengths
	// of all ExpressionAttributeNames and ExpressionAttributeValues."
	maxSubstitutionBytes = 2 << 20
)

// operatorRule is how countOperators counts, printed by the test: more
// than DynamoDB may count, never less.
const operatorRule = `operators are counted per expression, conservatively: 1 for each AND, OR, NOT, BETWEEN ` +
	`(its AND counted too) and IN; 1 for each comparator =, <>, <, <=, >, >= (an update's SET a = b counted as one); ` +
	`1 for each function call (any name followed by "(": attribute_exists, attribute_not_exists, attribute_type, ` +
	`begins_with, contains, size, if_not_exists, list_append); 1 for each + and -. Placeholders (#n, :v), attribute ` +
	`paths (a.b, a[0]), parentheses, commas and the keywords SET, REMOVE, ADD, DELETE count 0. IN operands are the ` +
	`comma-separated items of its list; bytes are the expression's UTF-8 length as sent (placeholders not substituted).`

// exprCount is what countOperators found in one expression.
type exprCount struct {
	ops int
	// ins are the operand counts of each IN, in order.
	ins []int
}

// maxIn is the largest IN list of c (0: none).
func (c exprCount) maxIn() int {
	m := 0
	for _, n := range c.ins {
		m = max(m, n)
	}
	return m
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// countOperators counts the operators of a DynamoDB expression by
// operatorRule. It fails on a character the grammar does not have, so a
// form it does not know cannot be counted as free.
func countOperators(expr string) (exprCount, error) {
	var c exprCount
	skipSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n' || expr[i] == '\r') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		ch := expr[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r':
			i++
		case ch == '#' || ch == ':':
			j := i + 1
			for j < len(expr) && isWordByte(expr[j]) {
				j++
			}
			if j == i+1 {
				return c, fmt.Errorf("a lone %q at byte %d", ch, i)
			}
			i = j
		case ch >= '0' && ch <= '9':
			for i < len(expr) && expr[i] >= '0' && expr[i] <= '9' {
				i++
			}
		case isWordByte(ch):
			j := i
			for j < len(expr) && isWordByte(expr[j]) {
				j++
			}
			word, next := strings.ToUpper(expr[i:j]), skipSpace(j)
			switch word {
			case "AND", "OR", "NOT", "BETWEEN":
				c.ops++
			case "IN":
				c.ops++
				if next >= len(expr) || expr[next] != '(' {
					return c, fmt.Errorf("IN at byte %d without a list", i)
				}
				n, depth := 1, 0
				k := next
				for ; k < len(expr); k++ {
					switch expr[k] {
					case '(':
						depth++
					case ')':
						depth--
					case ',':
						if depth == 1 {
							n++
						}
					}
					if depth == 0 {
						break
					}
				}
				if depth != 0 {
					return c, fmt.Errorf("IN at byte %d: its list is not closed", i)
				}
				c.ins = append(c.ins, n)
			default:
				if next < len(expr) && expr[next] == '(' {
					c.ops++ // a function call
				}
				// Else an attribute name, or SET, REMOVE, ADD, DELETE.
			}
			i = j
		case ch == '<':
			if i+1 < len(expr) && (expr[i+1] == '=' || expr[i+1] == '>') {
				i++
			}
			c.ops++
			i++
		case ch == '>':
			if i+1 < len(expr) && expr[i+1] == '=' {
				i++
			}
			c.ops++
			i++
		case ch == '=' || ch == '+' || ch == '-':
			c.ops++
			i++
		case strings.IndexByte("(),[].", ch) >= 0:
			i++
		default:
			return c, fmt.Errorf("unexpected %q at byte %d", ch, i)
		}
	}
	return c, nil
}

// TestCountOperators checks the counter on hand-made expressions.
func TestCountOperators(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		ops        int
		ins        []int
	}{
		{"DocsExample", "a=b", 1, nil},
		{"DocsUpdateExample", "SET a = :val1 + :val2 + :val3", 3, nil}, // the docs count 2 (+); = is counted too
		{"Comparators", "#a = :a AND #b <> :b AND #c < :c AND #d <= :d AND #e > :e AND #f >= :f", 11, nil},
		{"NoSpaces", "#a<>:b AND #c>=:d", 3, nil},
		{"Functions", "attribute_exists(#a) OR attribute_not_exists(#b) OR begins_with(#r, :p) OR contains(#l, :v)", 7, nil},
		{"SizeAndType", "size(#l) > :n AND attribute_type(#a, :t)", 4, nil},
		{"Not", "NOT (#o = :o AND #e > :now)", 4, nil},
		{"Between", "#a BETWEEN :lo AND :hi", 2, nil},
		{"In", "#pm IN (:h1, :h2, :h3) AND attribute_not_exists(#w)", 3, []int{3}},
		{"TwoIns", "(#a IN (:x) OR #b IN (:y, :z))", 3, []int{1, 2}},
		{"ListPaths", "#q[0].#qi = :tk AND #q[12].#qt > :now", 3, nil},
		{"UpdateFunctions", "SET #q = list_append(if_not_exists(#q, :nil), :qe), #t = if_not_exists(#c, :b) + :one REMOVE #x, #q[0]", 6, nil},
		{"Minus", "SET #a = #b - :one", 2, nil},
		{"Projection", "#e, #x, #f, #q", 0, nil},
		{"KeywordsCaseInsensitive", "#a = :a and not #b = :b", 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := countOperators(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if got.ops != tc.ops || fmt.Sprint(got.ins) != fmt.Sprint(tc.ins) {
				t.Errorf("countOperators(%q): got %d operators, IN %v; want %d, IN %v", tc.expr, got.ops, got.ins, tc.ops, tc.ins)
			}
		})
	}
	for _, bad := range []string{"#a = :a ; #b", "#a IN :x", "#a IN (:x, :y", "# = :a", "#a == :b AND 'x'"} {
		if _, err := countOperators(bad); err == nil {
			t.Errorf("countOperators(%q): got no error, want one", bad)
		}
	}
}

// limitRequest is one request the service sent, as the limits test sees
// it.
type limitRequest struct {
	op     string            // UpdateItem, GetItem, Scan
	exprs  map[string]string // by kind: Condition, Update, Projection, Filter
	names  map[string]string
	values map[string]types.AttributeValue
}

// limitsDB records every request and answers: a write with a failed
// condition and no old item (or, with succeed, success and no
// attributes), a read with no item, a scan with nothing.
type limitsDB struct {
	mu      sync.Mutex
	reqs    []limitRequest
	succeed bool
}

func (d *limitsDB) add(r limitRequest) {
	d.mu.Lock()
	d.reqs = append(d.reqs, r)
	d.mu.Unlock()
}

// take returns the requests recorded since the last take.
func (d *limitsDB) take() []limitRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.reqs
	d.reqs = nil
	return out
}

func exprMap(kv ...*string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] != nil && *kv[i+1] != "" {
			m[*kv[i]] = *kv[i+1]
		}
	}
	return m
}

func (d *limitsDB) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.add(limitRequest{op: "UpdateItem", exprs: exprMap(aws.String("Condition"), in.ConditionExpression, aws.String("Update"), in.UpdateExpression),
		names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues})
	if d.succeed {
		return &dynamodb.UpdateItemOutput{}, nil
	}
	return nil, &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
}

func (d *limitsDB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	d.add(limitRequest{op: "GetItem", exprs: exprMap(aws.String("Projection"), in.ProjectionExpression), names: in.ExpressionAttributeNames})
	return &dynamodb.GetItemOutput{}, nil
}

func (d *limitsDB) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	d.add(limitRequest{op: "Scan", exprs: exprMap(aws.String("Filter"), in.FilterExpression, aws.String("Projection"), in.ProjectionExpression),
		names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues})
	return &dynamodb.ScanOutput{}, nil
}

// attrSize is the size of v by DynamoDB's item-size rules, rounded up: a
// string's UTF-8 bytes, a number's digits, 3 bytes more for each list or
// map and 1 for each element, plus each map key.
func attrSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value) + 1
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + attrSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + attrSize(e)
		}
		return n
	}
	return 400 << 10 // unknown: as large as an item
}

// The worst case's inputs: the longest owner, resource and semaphore name
// the service accepts, an IAM principal as long as an IAM user's ARN gets
// (a 512-byte path and a 64-byte name, in the longest partition name), the
// longest queue ticket a client may send back, the longest ttl and
// lock-delay, a fencing token and a counter of 16 digits.
var (
	limitsOwner     = strings.Repeat("o", MaxOwnerBytes-6)
	limitsResource  = strings.Repeat("r", MaxResourceBytes)
	limitsPrincipal = "arn:aws-iso-b:iam::123456789012:user/" + strings.Repeat("p/", 255) + strings.Repeat("u", 64)
	limitsTicket    = strings.Repeat("t", maxTicketBytes)
	limitsToken     = aws.Int64(1_799_999_999_999_999)
	limitsGrant     = strings.Repeat("g", 13) // newGrantID: a uint64 in base 36
	limitsCounter   = int64(1_799_999_999_999_999)
)

// limitsCaller returns a caller with the longest owner and principal,
// whose home slot among permits satisfies ok.
func limitsCaller(tb testing.TB, permits int64, ok func(home int) bool) Caller {
	tb.Helper()
	for i := range 100000 {
		c := Caller{Owner: fmt.Sprintf("%s%06d", limitsOwner, i), Principal: limitsPrincipal}
		if ok(identityOf(c).home(permits)) {
			return c
		}
	}
	tb.Fatal("no caller found")
	return Caller{}
}

// limitsQueue returns a queue of n entries, the first the caller's with
// limitsTicket, each live until t0 + 30 s (or lapsed at t0, lapsed),
// with queue_until an hour later than all of them (so a write that
// removes entries lowers it: lowerUntil).
func limitsQueue(c Caller, n int, lapsed int) map[string]types.AttributeValue {
	var l []types.AttributeValue
	for i := range n {
		until := t0.Add(30 * time.Second)
		if i < lapsed {
			until = t0.Add(-time.Second)
		}
		e := map[string]types.AttributeValue{
			entryID:    &types.AttributeValueMemberS{Value: fmt.Sprintf("%s%02d", limitsTicket[:maxTicketBytes-2], i)},
			AttrOwner:  &types.AttributeValueMemberS{Value: c.Owner},
			entryUntil: num(until.UnixMilli()),
		}
		if i == 0 {
			e[entryID] = &types.AttributeValueMemberS{Value: limitsTicket}
		}
		if c.Principal != "" {
			e[AttrPrincipal] = &types.AttributeValueMemberS{Value: c.Principal}
		}
		l = append(l, &types.AttributeValueMemberM{Value: e})
	}
	return map[string]types.AttributeValue{
		AttrQueue:        &types.AttributeValueMemberL{Value: l},
		AttrQueueUntil:   num(t0.Add(time.Hour).UnixMilli()),
		AttrQueueVersion: num(limitsCounter),
	}
}

// limitsWaiter is a waiter of c on the worst-case lock.
func limitsWaiter(s *Service, c Caller) *waiter {
	return &waiter{key: s.key(limitsResource), op: "acquire", name: limitsResource, caller: c, arrived: t0, waitSeconds: MaxWaitLimit,
		ticket: limitsTicket}
}

// limitsSemReq is a waiting semaphore acquire of c for permits, with the
// longest ttl and lock-delay.
func limitsSemReq(c Caller, permits int64, ticket string) SemaphoreAcquireRequest {
	return SemaphoreAcquireRequest{Name: limitsResource, Caller: c, TTLSeconds: DefaultMaxTTLSeconds, Permits: permits,
		LockDelaySeconds: DefaultMaxLockDelaySeconds, WaitSeconds: MaxWaitLimit, Arrived: t0, QueueTicket: ticket}
}

// changeOfNItem is a semaphore item of from permits, every slot holding
// an ended lease (expired, its lock-delay passed) of another owner, 25
// other callers' markers and, when queued, a full queue with c at its
// head (else a full queue whose places have all lapsed).
func changeOfNItem(c Caller, from int, queued bool) map[string]types.AttributeValue {
	slots := map[int]permitSpec{}
	for k := range from {
		slots[k] = permitSpec{owner: limitsOwner, principal: limitsPrincipal, token: limitsCounter - int64(k),
			exp: t0.Add(-10 * time.Second), free: t0.Add(-5 * time.Second), grant: fmt.Sprintf("%013d", k)}
	}
	it := semItem(int64(from), limitsCounter, slots)
	for i := range 25 {
		it[fmt.Sprintf("%s%016x", markerPrefix, i)] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%013d", i%from)}
	}
	q := limitsQueue(c, MaxQueue, 0)
	if !queued {
		q = limitsQueue(c, MaxQueue, MaxQueue) // every place lapsed: a plain acquire may write
		q[AttrQueueUntil] = num(t0.Add(-time.Second).UnixMilli())
	}
	maps.Copy(it, q)
	return it
}

// changeOfN plans and sends the change of N from -> to of caller c (the
// head of a full queue with queued, else a plain acquire) on it, an item
// changeOfNItem built for c, from and queued, as take and semAttempt do,
// and checks that the plan is the worst case: every slot of from
// conditioned, the most markers removed, the caller's marker naming a
// slot other than the one written.
func changeOfN(tb testing.TB, s *Service, c Caller, it map[string]types.AttributeValue, from, to int, queued bool) {
	tb.Helper()
	id := identityOf(c)
	home := id.home(int64(to))
	markerSlot := -1
	for k := from - 1; k >= 0; k-- {
		if k != home {
			markerSlot = k
			break
		}
	}
	if markerSlot >= 0 {
		it[id.marker] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%013d", markerSlot)}
		defer delete(it, id.marker)
	}
	ticket := ""
	if queued {
		ticket = limitsTicket
	}
	req := limitsSemReq(c, int64(to), ticket)
	w, _, _, err := planSemaphore(req, it, t0, id, limitsGrant, queued)
	if err != nil || w == nil || w.reset == nil {
		tb.Fatalf("change of N %d -> %d: got plan %+v, %v; want a change of N", from, to, w, err)
	}
	if want := from; len(w.reset.expired) != want || len(w.reset.markers) != maxResetCleanup ||
		(markerSlot >= 0 && w.markerSlot != markerSlot) {
		tb.Fatalf("change of N %d -> %d: got %d slots conditioned, %d markers removed, marker slot %d; want %d, %d, %d",
			from, to, len(w.reset.expired), len(w.reset.markers), w.markerSlot, want, maxResetCleanup, markerSlot)
	}
	if queued {
		w.queued = newView(it, true)
	}
	_, _, _ = s.semAcquireWrite(context.Background(), req, Budget{}, id, limitsGrant, w, ticket)
}

// acquireN100 plans and sends the worst acquire write of a semaphore of
// MaxPermits (a plain acquire's, or with queued the head's): away from
// home (its home is held by another), the caller's marker naming its own
// permit ended by a force release and still in its lock-delay (a
// condition that it stays ended), and maxMarkerCleanup other callers'
// stale markers, each naming an ended permit, removed.
func acquireN100(tb testing.TB, s *Service, queued bool) {
	tb.Helper()
	const n = MaxPermits
	c := limitsCaller(tb, n, func(h int) bool { return h < n-4 })
	id := identityOf(c)
	slots := map[int]permitSpec{}
	for k := range n - 1 { // slot n-1 is free: never taken
		slots[k] = permitSpec{owner: limitsOwner, principal: limitsPrincipal, token: limitsCounter - int64(k), exp: t0.Add(time.Hour),
			grant: fmt.Sprintf("%013d", k)}
	}
	// The caller's own permit in slot n-2, force released: blocked, not
	// the caller's to take again. The permits in n-4 and n-3: expired,
	// in their lock-delay, named by other callers' markers.
	slots[n-2] = permitSpec{owner: c.Owner, principal: c.Principal, token: limitsCounter - 2, exp: t0.Add(-time.Second),
		forced: true, free: t0.Add(time.Hour), grant: limitsGrant[:12] + "o"}
	for _, k := range []int{n - 4, n - 3} {
		p := slots[k]
		p.exp, p.free = t0.Add(-time.Second), t0.Add(time.Hour)
		slots[k] = p
	}
	it := semItem(n, limitsCounter, slots)
	it[id.marker] = &types.AttributeValueMemberS{Value: limitsGrant[:12] + "o"}
	it[markerPrefix+"0000000000000001"] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%013d", n-4)}
	it[markerPrefix+"0000000000000002"] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%013d", n-3)}
	it[markerPrefix+"0000000000000003"] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%013d", 7)} // live: kept
	ticket := ""
	q := limitsQueue(c, MaxQueue, MaxQueue)
	q[AttrQueueUntil] = num(t0.Add(-time.Second).UnixMilli())
	if queued {
		ticket, q = limitsTicket, limitsQueue(c, MaxQueue, 0)
	}
	maps.Copy(it, q)
	req := limitsSemReq(c, n, ticket)
	w, _, _, err := planSemaphore(req, it, t0, id, limitsGrant, queued)
	if err != nil || w == nil {
		tb.Fatalf("acquire at N = %d: got plan %+v, %v; want a write", n, w, err)
	}
	if w.slot != n-1 || w.slot == w.home || w.markerSlot != n-2 || len(w.cleanup) != maxMarkerCleanup || w.reset != nil {
		tb.Fatalf("acquire at N = %d: got slot %d (home %d), marker slot %d, %d markers removed; want slot %d away from home, "+
			"marker slot %d, %d markers removed", n, w.slot, w.home, w.markerSlot, len(w.cleanup), n-1, n-2, maxMarkerCleanup)
	}
	if queued {
		w.queued = newView(it, true)
	}
	_, _, _ = s.semAcquireWrite(context.Background(), req, Budget{}, id, limitsGrant, w, ticket)
}

// limitsCase is one request of the package at its worst: run makes the
// calls, whose requests the test checks.
type limitsCase struct {
	name    string
	succeed bool // the fake answers writes with success (settlePermits goes on only then)
	run     func(tb testing.TB, s *Service)
}

func limitsCases() []limitsCase {
	ctx := context.Background()
	iam := Caller{Owner: limitsOwner, Principal: limitsPrincipal}
	lockReq := AcquireRequest{Resource: limitsResource, Caller: iam, TTLSeconds: DefaultMaxTTLSeconds,
		LockDelaySeconds: DefaultMaxLockDelaySeconds, WaitSeconds: MaxWaitLimit, Arrived: t0, QueueTicket: limitsTicket}
	plain := lockReq
	plain.WaitSeconds, plain.QueueTicket = 0, ""
	// queueView is a full queue (lapsed entries first, when lapsed > 0)
	// on a lock held for an hour.
	queueView := func(n, lapsed int) *view {
		it := item(limitsOwner, limitsPrincipal, *limitsToken, t0.Add(time.Hour))
		maps.Copy(it, limitsQueue(iam, n, lapsed))
		return newView(it, true)
	}
	cases := []limitsCase{
		{"lock acquire (IAM principal, lock-delay)", false, func(_ testing.TB, s *Service) { _, _ = s.Acquire(ctx, plain) }},
		{"lock acquire (no principal, no lock-delay)", false, func(_ testing.TB, s *Service) {
			r := plain
			r.Caller, r.LockDelaySeconds = Caller{Owner: limitsOwner}, 0
			_, _ = s.Acquire(ctx, r)
		}},
		{"lock head grant (full queue, queue_until lowered)", false, func(_ testing.TB, s *Service) {
			_, _, _ = s.headGrant(ctx, lockReq, Budget{}, queueView(MaxQueue, 0), limitsTicket, limitsGrant)
		}},
		{"lock renew (token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.Renew(ctx, RenewRequest{Resource: limitsResource, Caller: iam, TTLSeconds: DefaultMaxTTLSeconds, FencingToken: limitsToken})
		}},
		{"lock release (token)", false, func(_ testing.TB, s *Service) {
			_ = s.Release(ctx, ReleaseRequest{Resource: limitsResource, Caller: iam, FencingToken: limitsToken})
		}},
		{"lock force release (token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ForceRelease(ctx, ForceReleaseRequest{Resource: limitsResource, Reason: "r", FencingToken: limitsToken})
		}},
		{"lock force release (immediate, token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ForceRelease(ctx, ForceReleaseRequest{Resource: limitsResource, Reason: "r", Immediate: true, FencingToken: limitsToken})
		}},
		{"lock watch: record of an expiry (settle)", false, func(_ testing.TB, s *Service) {
			_, _ = s.settleExpiry(ctx, limitsResource, item(limitsOwner, limitsPrincipal, *limitsToken, t0.Add(-time.Second)), t0, Budget{})
		}},
		{"lock status / waiter's consistent read", false, func(_ testing.TB, s *Service) { _, _ = s.Status(ctx, limitsResource) }},
		{"lock waiter's peek (projection)", false, func(_ testing.TB, s *Service) { _, _ = s.peek(ctx, limitsResource, Budget{}) }},
		{"lock watch peek (projection)", false, func(_ testing.TB, s *Service) { _, _ = s.watchPeek(ctx, limitsResource, Budget{}) }},
		{"queued waiter's peek (projection)", false, func(_ testing.TB, s *Service) { _, _ = s.queuePeek(ctx, limitsResource, Budget{}) }},
		{"lock listing (prefix)", false, func(_ testing.TB, s *Service) {
			_, _ = s.List(ctx, ListRequest{Prefix: limitsResource}, Budget{})
		}},
		{"queue join (MaxQueue-1 entries)", false, func(_ testing.TB, s *Service) {
			_, _ = s.queueJoin(ctx, limitsWaiter(s, iam), Budget{}, queueView(MaxQueue-1, 0), limitsTicket, t0.Add(22*time.Second).UnixMilli())
		}},
		{"queue extend (entry MaxQueue-1)", false, func(_ testing.TB, s *Service) {
			_, _ = s.queueExtend(ctx, limitsWaiter(s, iam), Budget{}, queueView(MaxQueue, 0), MaxQueue-1, limitsTicket,
				t0.Add(22*time.Second).UnixMilli())
		}},
		{"queue prune (maxPrune entries, queue_until lowered)", false, func(tb testing.TB, s *Service) {
			v := queueView(MaxQueue, maxPrune+2)
			if k := v.lapsedFront(t0.UnixMilli()); k != maxPrune {
				tb.Fatalf("lapsedFront: got %d, want %d", k, maxPrune)
			}
			_, _ = s.queuePrune(ctx, limitsWaiter(s, iam), Budget{}, v, maxPrune)
		}},
		{"queue leave (entry MaxQueue-1, queue_until lowered)", false, func(_ testing.TB, s *Service) {
			_ = s.queueLeave(ctx, limitsWaiter(s, iam), queueView(MaxQueue, 0), MaxQueue-1, limitsTicket)
		}},
		{"semaphore acquire: the guess, then writes from no item", false, func(_ testing.TB, s *Service) {
			r := limitsSemReq(iam, MaxPermits, "")
			r.WaitSeconds = 0
			_, _ = s.AcquireSemaphore(ctx, r, Budget{})
		}},
		{"semaphore acquire N=100, plain (away from home, marker, 2 stale markers)", false, func(tb testing.TB, s *Service) {
			acquireN100(tb, s, false)
		}},
		{"semaphore acquire N=100, head (away from home, marker, 2 stale markers, full queue)", false, func(tb testing.TB, s *Service) {
			acquireN100(tb, s, true)
		}},
		{"semaphore change of N 100->1, plain (100 slots, 20 markers)", false, func(tb testing.TB, s *Service) {
			c := limitsCaller(tb, 1, func(int) bool { return true })
			changeOfN(tb, s, c, changeOfNItem(c, MaxPermits, false), MaxPermits, 1, false)
		}},
		{"semaphore change of N 100->1, head (100 slots, 20 markers, full queue)", false, func(tb testing.TB, s *Service) {
			c := limitsCaller(tb, 1, func(int) bool { return true })
			changeOfN(tb, s, c, changeOfNItem(c, MaxPermits, true), MaxPermits, 1, true)
		}},
		{"semaphore renew (slot 0, token; the caller's own IN list)", false, func(_ testing.TB, s *Service) {
			_, _ = s.RenewSemaphore(ctx, SemaphoreRenewRequest{Name: limitsResource, Caller: iam, Slot: 0, TTLSeconds: DefaultMaxTTLSeconds,
				FencingToken: limitsToken})
		}},
		{"semaphore renew (slot 99, token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.RenewSemaphore(ctx, SemaphoreRenewRequest{Name: limitsResource, Caller: iam, Slot: MaxPermits - 1,
				TTLSeconds: DefaultMaxTTLSeconds, FencingToken: limitsToken})
		}},
		{"semaphore release (slot 99, token)", false, func(_ testing.TB, s *Service) {
			_ = s.ReleaseSemaphore(ctx, SemaphoreReleaseRequest{Name: limitsResource, Caller: iam, Slot: MaxPermits - 1, FencingToken: limitsToken})
		}},
		{"semaphore force release (slot 99, token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ForceReleaseSemaphore(ctx, SemaphoreForceReleaseRequest{Name: limitsResource, Slot: MaxPermits - 1, Reason: "r",
				FencingToken: limitsToken})
		}},
		{"semaphore force release (slot 99, immediate, token)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ForceReleaseSemaphore(ctx, SemaphoreForceReleaseRequest{Name: limitsResource, Slot: MaxPermits - 1, Reason: "r",
				Immediate: true, FencingToken: limitsToken})
		}},
		{"semaphore watch: record of 100 expiries (16-slot writes)", true, func(_ testing.TB, s *Service) {
			slots := map[int]permitSpec{}
			var all []int
			for k := range MaxPermits {
				slots[k] = permitSpec{owner: limitsOwner, token: limitsCounter - int64(k), exp: t0.Add(-time.Second)}
				all = append(all, k)
			}
			_, _ = s.settlePermits(ctx, limitsResource, semItem(MaxPermits, limitsCounter, slots), all, t0, Budget{})
		}},
		{"semaphore status / read", false, func(_ testing.TB, s *Service) { _, _ = s.SemaphoreStatus(ctx, limitsResource) }},
		{"semaphore peek", false, func(_ testing.TB, s *Service) { _, _ = s.semPeek(ctx, limitsResource, Budget{}) }},
		{"semaphore listing (prefix)", false, func(_ testing.TB, s *Service) {
			_, _ = s.ListSemaphores(ctx, ListRequest{Prefix: limitsResource}, Budget{})
		}},
	}
	return append(cases, rwLimitsCases()...)
}

// limitsRow is one expression's measure.
type limitsRow struct {
	request, kind string
	bytes         int
	count         exprCount
}

// checkLimits checks every expression of r against DynamoDB's limits and
// returns its rows.
func checkLimits(tb testing.TB, name string, r limitRequest) []limitsRow {
	tb.Helper()
	var rows []limitsRow
	kinds := make([]string, 0, len(r.exprs))
	for k := range r.exprs {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		expr := r.exprs[kind]
		c, err := countOperators(expr)
		if err != nil {
			tb.Errorf("%s: %s expression: %v: %s", name, kind, err, expr)
			continue
		}
		rows = append(rows, limitsRow{request: name, kind: kind, bytes: len(expr), count: c})
		if len(expr) > maxExpressionBytes {
			tb.Errorf("%s: %s expression: got %d bytes, want at most %d", name, kind, len(expr), maxExpressionBytes)
		}
		if c.ops > maxExpressionOperators {
			tb.Errorf("%s: %s expression: got %d operators, want at most %d", name, kind, c.ops, maxExpressionOperators)
		}
		if c.maxIn() > maxInOperands {
			tb.Errorf("%s: %s expression: got an IN of %d operands, want at most %d", name, kind, c.maxIn(), maxInOperands)
		}
	}
	// DynamoDB refuses a request that defines a name or value its
	// expressions do not use, or uses one it does not define.
	used := map[string]bool{}
	for _, expr := range r.exprs {
		for _, ph := range placeholder.FindAllString(expr, -1) {
			used[ph] = true
		}
	}
	for ph := range used {
		_, n := r.names[ph]
		_, v := r.values[ph]
		if !n && !v {
			tb.Errorf("%s: %s is used but not defined", name, ph)
		}
	}
	for ph := range r.names {
		if !used[ph] {
			tb.Errorf("%s: name %s is defined but unused", name, ph)
		}
	}
	for ph := range r.values {
		if !used[ph] {
			tb.Errorf("%s: value %s is defined but unused", name, ph)
		}
	}
	total := 0
	for ph, n := range r.names {
		total += len(ph) + len(n)
		if len(ph) > maxPlaceholderBytes {
			tb.Errorf("%s: name placeholder %s: got %d bytes, want at most %d", name, ph, len(ph), maxPlaceholderBytes)
		}
	}
	for ph, v := range r.values {
		total += len(ph) + attrSize(v)
		if len(ph) > maxPlaceholderBytes {
			tb.Errorf("%s: value placeholder %s: got %d bytes, want at most %d", name, ph, len(ph), maxPlaceholderBytes)
		}
	}
	if total > maxSubstitutionBytes {
		tb.Errorf("%s: names and values: got %d bytes, want at most %d", name, total, maxSubstitutionBytes)
	}
	return rows
}

// spliceWorstIn returns r, a captured RenewSemaphore of slot 0, with the
// caller's IN list (markerCondition) replaced by the longest one any
// caller can have: an owner whose hash is 0 has slot 0 as its home under
// every N, so its list names all MaxPermits of them. (The list's length
// depends on the owner's hash, and no findable owner has that hash.)
func spliceWorstIn(tb testing.TB, r limitRequest, c Caller) limitRequest {
	tb.Helper()
	id := identityOf(c)
	ownX, worstX := newExpr(), newExpr()
	own := markerCondition(id, 0, ownX)
	worst := markerCondition(identity{hash: 0, marker: id.marker}, 0, worstX)
	ownValues, worstValues := ownX.values, worstX.values
	cond := r.exprs["Condition"]
	if !strings.Contains(cond, own) {
		tb.Fatalf("semaphore renew: the condition %q does not hold the caller's marker clause %q", cond, own)
	}
	out := r
	out.exprs = maps.Clone(r.exprs)
	out.exprs["Condition"] = strings.Replace(cond, own, worst, 1)
	out.values = maps.Clone(r.values)
	for ph := range ownValues {
		delete(out.values, ph)
	}
	maps.Copy(out.values, worstValues)
	return out
}

// TestDynamoDBLimits builds the worst case of every request the package
// sends — the longest owner, name, principal and ticket, the longest ttl
// and lock-delay, a full queue, MaxPermits slots, the most stale markers,
// every change of N — captures the request the code really builds, and
// holds each expression to DynamoDB's limits, which dynalite does not
// check: at most 4,096 bytes, 300 operators (counted conservatively) and
// 100 IN operands; and the names and values to theirs. It logs the
// counting rule and each request's margins (go test -v -run
// TestDynamoDBLimits ./locklogic).
func TestDynamoDBLimits(t *testing.T) {
	db := &limitsDB{}
	s := New(db, Config{Table: "locks", Now: func() time.Time { return t0 }, OldItemOnFailure: true, FairWaiting: true})
	t.Logf("counting rule: %s", operatorRule)
	var rows []limitsRow
	for _, tc := range limitsCases() {
		db.take()
		db.succeed = tc.succeed
		tc.run(t, s)
		reqs := db.take()
		if len(reqs) == 0 {
			t.Errorf("%s: made no store request", tc.name)
		}
		for i, r := range reqs {
			name := tc.name
			if len(reqs) > 1 {
				name = fmt.Sprintf("%s #%d", tc.name, i+1)
			}
			rows = append(rows, checkLimits(t, name, r)...)
			if strings.HasPrefix(tc.name, "semaphore renew (slot 0") && r.op == "UpdateItem" {
				rows = append(rows, checkLimits(t, "semaphore renew (slot 0, token; the longest IN list: owner hash 0)",
					spliceWorstIn(t, r, Caller{Owner: limitsOwner, Principal: limitsPrincipal}))...)
			}
		}
	}
	db.succeed = false

	// Every change of N, plain and the head's: the condition names each
	// slot of the old N whose ended lease a late renewal could revive,
	// so it grows with from. The worst of each kind is logged.
	worst := map[string]limitsRow{}
	for _, queued := range []bool{false, true} {
		variant := "plain"
		if queued {
			variant = "head"
		}
		c := limitsCaller(t, 1, func(int) bool { return true })
		for from := 1; from <= MaxPermits; from++ {
			it := changeOfNItem(c, from, queued)
			for to := 1; to <= MaxPermits; to++ {
				if from == to {
					continue
				}
				changeOfN(t, s, c, it, from, to, queued)
				name := fmt.Sprintf("semaphore change of N %d->%d, %s", from, to, variant)
				for _, r := range db.take() {
					for _, row := range checkLimits(t, name, r) {
						if w, ok := worst[variant+" "+row.kind+" bytes"]; !ok || row.bytes > w.bytes {
							worst[variant+" "+row.kind+" bytes"] = row
						}
						if w, ok := worst[variant+" "+row.kind+" ops"]; !ok || row.count.ops > w.count.ops {
							worst[variant+" "+row.kind+" ops"] = row
						}
					}
				}
			}
		}
	}
	// A growing change of N over stale slots above the old N: a shrink
	// made before changes of N recorded what they ended (7a1f62e) left
	// every slot above its new N unrecorded, so the change of N 1 ->
	// MaxPermits conditions (and records) all MaxPermits of them.
	for _, queued := range []bool{false, true} {
		c := limitsCaller(t, 1, func(int) bool { return true })
		it := changeOfNItem(c, MaxPermits, queued)
		it[AttrPermits] = num(1)
		ticket := ""
		if queued {
			ticket = limitsTicket
		}
		req := limitsSemReq(c, MaxPermits, ticket)
		id := identityOf(c)
		w, _, _, err := planSemaphore(req, it, t0, id, limitsGrant, queued)
		if err != nil || w == nil || w.reset == nil || len(w.reset.expired) != MaxPermits {
			t.Fatalf("change of N 1 -> %d over stale slots: got plan %+v, %v; want a change of N conditioning %d slots", MaxPermits, w, err, MaxPermits)
		}
		if queued {
			w.queued = newView(it, true)
		}
		_, _, _ = s.semAcquireWrite(context.Background(), req, Budget{}, id, limitsGrant, w, ticket)
		for _, r := range db.take() {
			rows = append(rows, checkLimits(t, fmt.Sprintf("semaphore change of N 1->%d over %d stale slots above, queued %v", MaxPermits, MaxPermits-1, queued), r)...)
		}
	}

	keys := make([]string, 0, len(worst))
	for k := range worst {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	shown := map[string]bool{}
	for _, k := range keys {
		w := worst[k]
		w.request = "worst of every change of N: " + w.request
		if !shown[w.request+w.kind] {
			shown[w.request+w.kind] = true
			rows = append(rows, w)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n%-92s %-10s %5s %6s %4s %6s %3s %6s\n", "request", "expression", "bytes", "margin", "ops", "margin", "IN", "margin")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-92s %-10s %5d %6d %4d %6d %3d %6d\n", r.request, r.kind, r.bytes, maxExpressionBytes-r.bytes,
			r.count.ops, maxExpressionOperators-r.count.ops, r.count.maxIn(), maxInOperands-r.count.maxIn())
	}
	t.Log(b.String())
}

// Compile-time check: the recording fake is a store.
var _ DynamoDBAPI = (*limitsDB)(nil)

// settlePermits (tests) records the expiry of the permits in slots of item (read
// at now) before a watch answers them (settleLeases), so that no renewal
// landing late revives a permit a watcher was told had ended (the renew
// condition refuses a recorded slot).
func (s *Service) settlePermits(ctx context.Context, name string, item map[string]types.AttributeValue, slots []int, now time.Time, b Budget) (bool, error) {
	leases := make([]recorded, len(slots))
	for i, k := range slots {
		leases[i] = slotLeases[k]
	}
	return s.settleLeases(ctx, s.semKey(name), item, leases, now, b)
}
