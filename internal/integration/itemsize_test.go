package integration_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/locklogic"
)

// itemBytes is the size DynamoDB bills for item: each attribute's name
// (UTF-8 bytes) plus its value — a string's UTF-8 bytes, a number's
// significant digits / 2 + 1, a list or map 3 bytes plus 1 per element
// plus the elements (a map's with their names).
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
func itemBytes(item map[string]types.AttributeValue) int {
	total := 0
	for name, v := range item {
		total += utf8.RuneCountInString(name) + valueBytes(v)
	}
	return total
}

func valueBytes(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		digits := strings.Trim(strings.TrimLeft(strings.ReplaceAll(v.Value, ".", ""), "-0"), "0")
		return int(math.Ceil(float64(len(digits))/2)) + 1
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueBytes(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueBytes(e)
		}
		return n
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	}
	panic(fmt.Sprintf("itemBytes: %T", v))
}

// sizeCaller is a realistic IAM caller: an assumed role of an EC2
// instance, the longest principal the docs' sizes assume.
const sizeCaller = "arn:aws:sts::123456789012:assumed-role/lock-workers/i-0123456789abcdef0"

// TestItemSizes measures what the writes of a full semaphore and a queue
// cost by item size (docs/design.md "The bound on N", "What the queue
// costs"): a semaphore of MaxPermits permits held by 100 IAM callers with
// 20-byte owners, and a lock with waiters queued.
func TestItemSizes(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{Identity: func(r *http.Request) *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription {
		return &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: sizeCaller}
	}})
	// Slots are alike: the size of 10 held permits against 30 gives a
	// slot's bytes (with the owner markers of permits away from home),
	// without filling all 100 on a loaded machine.
	const n = 100
	name := res(t)
	var at [2]int
	for i := range 30 {
		semAcquire(t, srv, name, fmt.Sprintf("worker-%03d.example.io", i), 300, n) // 20 bytes
		switch i + 1 {
		case 10:
			at[0] = itemBytes(lockItem(t, srv, "sem/"+name))
		case 30:
			at[1] = itemBytes(lockItem(t, srv, "sem/"+name))
		}
	}
	slot := (at[1] - at[0]) / 20
	full := at[1] + (n-30)*slot
	t.Logf("semaphore: %d bytes with 10 permits, %d with 30: %d a slot; all %d held: %d bytes", at[0], at[1], slot, n, full)
	// docs/design.md "The bound on N" reckons with at most 200 bytes a
	// slot and 20 KB for a full semaphore.
	if slot > 200 || full > 20_000 {
		t.Errorf("a slot is %d bytes and a full semaphore %d; the docs reckon with at most 200 and 20,000", slot, full)
	}

	r0 := res(t)
	acquire(t, srv, r0, "holder-0.example.io1", 300)
	bare := itemBytes(lockItem(t, srv, r0))
	const waiters = 4
	for i := range waiters {
		fifoWait(t, srv, r0, fmt.Sprintf("waiter-%02d.example.io", i), 5, "")
		awaitJoin(t, srv, r0, fmt.Sprintf("waiter-%02d.example.io", i), i+1)
	}
	queued := itemBytes(lockItem(t, srv, r0))
	entry := (queued - bare) / waiters
	t.Logf("lock: %d bytes; with %d waiters queued %d: %d an entry; a full queue (%d) adds %d", bare, waiters, queued, entry, locklogic.MaxQueue, entry*locklogic.MaxQueue)
	// "What the queue costs" reckons with at most 150 bytes an entry.
	if entry > 150 {
		t.Errorf("a queue entry is %d bytes; the docs reckon with at most 150", entry)
	}
}
