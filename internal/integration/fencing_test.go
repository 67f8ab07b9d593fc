package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/client"
	"github.com/ft288/locks/client/fence"
	"github.com/ft288/locks/internal/testenv"
)

// The environment of holder A, the test binary run again as a process of
// its own (see TestMain and runHolder).
const (
	holderEnv         = "FENCING_HOLDER" // "fenced" or "unfenced": run as holder A
	holderLocksEnv    = "FENCING_LOCKS_ENDPOINT"
	holderDynamoDBEnv = "FENCING_DYNAMODB_ENDPOINT"
	holderTableEnv    = "FENCING_TABLE"
	holderResourceEnv = "FENCING_RESOURCE"
)

// holderTTL is holder A's lease: short, and renewed by the keep-alive until
// A is paused.
const holderTTL = 2 * time.Second

// invoice is the item both holders write.
const invoice = "invoice-42"

// payment is what a holder writes to the invoice's item, and what the
// item holds afterwards.
type payment struct {
	Payee  string
	Amount int
	Fence  int64 // 0: no fence attribute
}

// TestFencingKleppmann runs Kleppmann's scenario against dynalite: holder A,
// a process of its own, takes the lock (2 s TTL, keep-alive), checks that
// it holds it, and is paused (SIGSTOP) before its write; its lease expires
// and B takes the lock with a larger token and writes the invoice; A
// resumes (SIGCONT) and writes with its old token. With the fence the table
// refuses A's write and the item keeps B's payment. Without it, A's write
// overwrites B's: the scenario does corrupt the item, so the fenced case
// shows the fence at work. Nothing sleeps: B's acquire waits at the service
// for A's lease to run out, which is the pause past the lease.
func TestFencingKleppmann(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		fenced bool
	}{
		{"Fenced", true},
		{"Unfenced", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			aWrite, got, tokA, tokB := kleppmann(t, tt.fenced)
			b := payment{Payee: "B", Amount: 200}
			if tt.fenced {
				b.Fence = tokB
			}
			lost := got.Payee != b.Payee || got.Amount != b.Amount
			t.Logf("tokens A %d, B %d; A's write %s; the item holds %+v; %s", tokA, tokB, aWrite, got, time.Since(start).Round(time.Millisecond))
			switch {
			case tt.fenced && (aWrite != "refused" || got != b):
				t.Errorf("fenced: A's write %s and the item holds %+v; want A refused and B's %+v", aWrite, got, b)
			case !tt.fenced && (aWrite != "written" || !lost):
				t.Errorf("unfenced: A's write %s and the item holds %+v; want A's write to overwrite B's (the corruption the fence prevents)", aWrite, got)
			}
		})
	}
}

// kleppmann runs the scenario once and returns how A's write ended
// ("written" or "refused"), what the item holds, and the two tokens.
func kleppmann(t *testing.T, fenced bool) (aWrite string, got payment, tokA, tokB int64) {
	srv := testenv.Start(t, testenv.Options{})
	table := paymentsTable(t, srv.DB)
	resource := res(t)
	mode := "unfenced"
	if fenced {
		mode = "fenced"
	}

	// Holder A: this test binary again (TestMain runs runHolder).
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		holderEnv+"="+mode, holderLocksEnv+"="+srv.URL, holderDynamoDBEnv+"="+testenv.Endpoint(),
		holderTableEnv+"="+table, holderResourceEnv+"="+resource)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	killWithParent(cmd) // a paused A must not outlive a test binary that dies
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{}) // closed once waitErr is set
	var waitErr error
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		waitErr = cmd.Wait() // after the last read, as Wait closes the pipe
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // ends a stopped process too; an error if it has exited
		for range lines {
		}
		<-exited
	})
	// next returns A's next line: an event A reports, waited for with a
	// bound so that a hung A fails the test instead of hanging it.
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("holder A exited before %s:\n%s", what, stderr.String())
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("holder A did not report %s within 30 s:\n%s", what, stderr.String())
		}
		return ""
	}

	// A holds the lock and has checked its lease: it is about to write.
	ready := next("that it holds the lock")
	tokA, err = strconv.ParseInt(strings.TrimPrefix(ready, "ready "), 10, 64)
	if err != nil {
		t.Fatalf("holder A: got %q, want ready TOKEN", ready)
	}
	// The pause: no keep-alive, no write, until SIGCONT.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	// B waits at the service until A's lease has run out, then writes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locks, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Now()
	lease, err := locks.Acquire(ctx, resource, "", 30*time.Second)
	if err != nil {
		t.Fatalf("B: acquire: %v", err)
	}
	defer lease.Release(context.Background())
	tokB = lease.FencingToken()
	t.Logf("B took the lock %s after A's pause", time.Since(waited).Round(time.Millisecond))
	if tokB <= tokA {
		t.Fatalf("B's token %d, want one larger than A's %d", tokB, tokA)
	}
	if err := pay(ctx, srv.DB, table, payment{Payee: "B", Amount: 200}, tokB, fenced); err != nil {
		t.Fatalf("B: write: %v", err)
	}

	// A resumes and goes on with its write, its check long past.
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	aWrite = next("its write's outcome")
	if aWrite != "written" && aWrite != "refused" {
		t.Fatalf("holder A: %s\n%s", aWrite, stderr.String())
	}
	if _, open := <-lines; open {
		t.Fatal("holder A: more output after its write's outcome")
	}
	if <-exited; waitErr != nil {
		t.Fatalf("holder A: %v\n%s", waitErr, stderr.String())
	}
	return aWrite, readPayment(t, srv.DB, table), tokA, tokB
}

// runHolder is holder A of TestFencingKleppmann, in a process of its own
// (the test binary run with holderEnv set): it takes the lock with a short
// TTL and the keep-alive, checks that its lease is live, says "ready
// TOKEN", and waits for its cue on stdin (the test pauses it meanwhile);
// then it writes without looking at the lease again, as a process paused
// between its check and its write does, and says "written" or "refused".
func runHolder() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "holder A:", err); return 1 }
	fenced := os.Getenv(holderEnv) == "fenced"
	ctx := context.Background()
	db, err := api.NewDynamoDB(ctx, os.Getenv(holderDynamoDBEnv))
	if err != nil {
		return fail(err)
	}
	locks, err := client.New(os.Getenv(holderLocksEnv))
	if err != nil {
		return fail(err)
	}
	lease, err := locks.TryAcquire(ctx, os.Getenv(holderResourceEnv), "", holderTTL)
	if err != nil {
		return fail(err)
	}
	if err := lease.Err(); err != nil {
		return fail(fmt.Errorf("lease lost before the write: %w", err))
	}
	fmt.Printf("ready %d\n", lease.FencingToken())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(err)
	}
	// Not lease.Context(): the write is past its check, as one already on
	// the wire would be.
	err = pay(ctx, db, os.Getenv(holderTableEnv), payment{Payee: "A", Amount: 100}, lease.FencingToken(), fenced)
	var refused *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		fmt.Println("written")
	case errors.As(err, &refused):
		fmt.Println("refused")
	default:
		return fail(err)
	}
	return 0
}

// pay writes p to the invoice's item as the holder of token, through the
// fence when fenced: the caller's own update with the fence merged in.
func pay(ctx context.Context, db *dynamodb.Client, table string, p payment, token int64, fenced bool) error {
	e := fence.Expressions{Update: "SET payee = :payee, amount = :amount"}
	values := map[string]types.AttributeValue{
		":payee":  &types.AttributeValueMemberS{Value: p.Payee},
		":amount": &types.AttributeValueMemberN{Value: strconv.Itoa(p.Amount)},
	}
	if fenced {
		var err error
		if e, err = fence.NewDynamoDB(token).Merge(e); err != nil {
			return err
		}
		for k, v := range e.Values {
			values[k] = &types.AttributeValueMemberN{Value: v}
		}
	}
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: invoice}},
		ConditionExpression:       optional(e.Condition),
		UpdateExpression:          aws.String(e.Update),
		ExpressionAttributeNames:  e.Names,
		ExpressionAttributeValues: values,
	})
	return err
}

// optional returns nil for "", the SDK's "none", and &s otherwise.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// paymentsTable creates a table of payments (partition key "id") for the
// test and returns its name.
func paymentsTable(tb testing.TB, db *dynamodb.Client) string {
	tb.Helper()
	table := fmt.Sprintf("payments-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		tb.Fatalf("create table %s: %v", table, err)
	}
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			tb.Fatalf("describe table %s: %v", table, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			break
		}
		select { // dynalite (createTableMs 0) makes it active in a moment
		case <-ctx.Done():
			tb.Fatalf("table %s is not active: %v", table, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	tb.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	return table
}

// readPayment reads the invoice's item (a strong read).
func readPayment(tb testing.TB, db *dynamodb.Client, table string) payment {
	tb.Helper()
	return readItem(tb, db, table, invoice)
}

// readItem reads the payment of item id (a strong read); the zero payment
// when there is none.
func readItem(tb testing.TB, db *dynamodb.Client, table, id string) payment {
	tb.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		tb.Fatalf("read %s: %v", id, err)
	}
	var p payment
	if s, ok := out.Item["payee"].(*types.AttributeValueMemberS); ok {
		p.Payee = s.Value
	}
	if n, ok := out.Item["amount"].(*types.AttributeValueMemberN); ok {
		p.Amount, _ = strconv.Atoi(n.Value)
	}
	if n, ok := out.Item[fence.DefaultAttribute].(*types.AttributeValueMemberN); ok {
		p.Fence, _ = strconv.ParseInt(n.Value, 10, 64)
	}
	return p
}

// TestFenceDynamoDB holds the fence, merged into an UpdateItem and a
// PutItem and built with the SDK's expression builder, to what DynamoDB
// (dynalite, which has no transactions) does with it: each write finds an item with no fence, an equal, a larger
// or a smaller token, or one the caller's own condition refuses, and goes
// through only when both the caller's condition and the fence let it.
func TestFenceDynamoDB(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	db := srv.DB
	table := paymentsTable(t, db)
	ctx := context.Background()
	key := func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
	}
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	// The caller's own condition: the invoice is not closed.
	const userCondition = "attribute_not_exists(#st) OR #st <> :closed"
	userNames := map[string]string{"#st": "status"}
	userValues := func() map[string]types.AttributeValue {
		return map[string]types.AttributeValue{":closed": s("closed"), ":payee": s("B"), ":amount": n(200)}
	}
	// merged returns the caller's expressions with the fence of token and
	// every value they use.
	merged := func(t *testing.T, e fence.Expressions, values map[string]types.AttributeValue, token int64) (fence.Expressions, map[string]types.AttributeValue) {
		e, err := fence.NewDynamoDB(token).Merge(e)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range e.Values {
			values[k] = &types.AttributeValueMemberN{Value: v}
		}
		return e, values
	}
	// builder builds the caller's condition and update, plus the fence's
	// when fenced, with the SDK's expression builder.
	builder := func(t *testing.T, token int64, fenced bool) expression.Expression {
		st := expression.Name("status")
		cond := st.AttributeNotExists().Or(st.NotEqual(expression.Value("closed")))
		update := expression.Set(expression.Name("payee"), expression.Value("B")).Set(expression.Name("amount"), expression.Value(200))
		if fenced {
			f := fence.NewDynamoDB(token)
			name, tok := expression.Name(f.Attribute()), expression.Value(f.Token())
			cond = cond.And(name.AttributeNotExists().Or(name.LessThanEqual(tok)))
			update = update.Set(name, tok)
		}
		e, err := expression.NewBuilder().WithCondition(cond).WithUpdate(update).Build()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	writes := []struct {
		name  string
		write func(t *testing.T, id string, token int64) error
	}{
		{"UpdateItem", func(t *testing.T, id string, token int64) error {
			e, values := merged(t, fence.Expressions{Condition: userCondition, Update: "SET payee = :payee, amount = :amount", Names: userNames}, userValues(), token)
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key(id),
				ConditionExpression: optional(e.Condition), UpdateExpression: optional(e.Update),
				ExpressionAttributeNames: e.Names, ExpressionAttributeValues: values,
			})
			return err
		}},
		{"PutItem", func(t *testing.T, id string, token int64) error {
			values := userValues()
			delete(values, ":payee")
			delete(values, ":amount")
			f := fence.NewDynamoDB(token)
			e, values := merged(t, fence.Expressions{Condition: userCondition, Names: userNames}, values, token)
			_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(table),
				Item: map[string]types.AttributeValue{
					"id": s(id), "payee": s("B"), "amount": n(200),
					f.Attribute(): &types.AttributeValueMemberN{Value: f.Number()}, // a put carries the fence itself
				},
				ConditionExpression: optional(e.Condition), ExpressionAttributeNames: e.Names, ExpressionAttributeValues: values,
			})
			return err
		}},
		{"ExpressionBuilder", func(t *testing.T, id string, token int64) error {
			e := builder(t, token, true)
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key(id),
				ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
				ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
			})
			return err
		}},
		{"ExpressionBuilderMerged", func(t *testing.T, id string, token int64) error {
			b := builder(t, token, false)
			e, values := merged(t, fence.Expressions{Condition: *b.Condition(), Update: *b.Update(), Names: b.Names()}, maps.Clone(b.Values()), token)
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key(id),
				ConditionExpression: optional(e.Condition), UpdateExpression: optional(e.Update),
				ExpressionAttributeNames: e.Names, ExpressionAttributeValues: values,
			})
			return err
		}},
	}
	states := []struct {
		name   string
		item   map[string]types.AttributeValue // nil: no item
		userOK bool
		fence  int64 // 0: none
	}{
		{"NoItem", nil, true, 0},
		{"NoFence", map[string]types.AttributeValue{"payee": s("A"), "amount": n(100)}, true, 0},
		{"Fence5", map[string]types.AttributeValue{"payee": s("A"), "amount": n(100), "fence": n(5)}, true, 5},
		{"Fence5Closed", map[string]types.AttributeValue{"payee": s("A"), "amount": n(100), "fence": n(5), "status": s("closed")}, false, 5},
	}
	for _, w := range writes {
		for _, st := range states {
			for _, token := range []int64{4, 5, 6} {
				t.Run(fmt.Sprintf("%s/%s/Token%d", w.name, st.name, token), func(t *testing.T) {
					id := strings.ReplaceAll(t.Name(), "/", ":")
					if st.item != nil {
						it := maps.Clone(st.item)
						it["id"] = s(id)
						if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
							t.Fatal(err)
						}
					}
					before := readItem(t, db, table, id)
					err := w.write(t, id, token)
					wantOK := st.userOK && (st.fence == 0 || st.fence <= token)
					if refused := isRefused(err); err != nil && !refused {
						t.Fatalf("write: %v", err)
					}
					if got := err == nil; got != wantOK {
						t.Fatalf("got accepted %t (%v), want %t", got, err, wantOK)
					}
					want := before
					if wantOK {
						want = payment{Payee: "B", Amount: 200, Fence: token}
					}
					if got := readItem(t, db, table, id); got != want {
						t.Errorf("got item %+v, want %+v", got, want)
					}
				})
			}
		}
	}
}

// isRefused reports whether err is a write's condition refusing it.
func isRefused(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}
