package goclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/locklogic"
)

// queuedOwners returns the owners queued on resource, in queue order, from
// a consistent read of the item.
func queuedOwners(tb testing.TB, srv *testenv.Server, resource string) []string {
	tb.Helper()
	out, err := srv.DB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(testenv.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{locklogic.AttrResource: &types.AttributeValueMemberS{Value: resource}}})
	if err != nil {
		tb.Fatal(err)
	}
	l, _ := out.Item[locklogic.AttrQueue].(*types.AttributeValueMemberL)
	if l == nil {
		return nil
	}
	var owners []string
	for _, e := range l.Value {
		owners = append(owners, e.(*types.AttributeValueMemberM).Value[locklogic.AttrOwner].(*types.AttributeValueMemberS).Value)
	}
	return owners
}

// TestAcquireArrivalOrder: three clients' Acquire calls, started in a known
// order (each once the one before it is queued at the service), get the
// lock in that order. Their rounds are short (a 3 s lease: rounds of 1 s),
// so every waiter goes through many rounds, each sending back the place
// the last one answered; holds of 300 ms outlast the next waiter's rounds.
func TestAcquireArrivalOrder(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	c := newClient(t, srv.URL, client.WithoutKeepAlive())
	res := resourceName(t)
	holder := acquire(t, c, res, "holder", 30*time.Second)
	owners := []string{"w0", "w1", "w2"}
	granted := make(chan string, len(owners))
	errs := make(chan error, len(owners))
	ctx := testContext(t, 30*time.Second)
	for i, owner := range owners {
		go func() {
			l, err := c.Acquire(ctx, res, owner, 3*time.Second)
			if err != nil {
				errs <- err
				return
			}
			granted <- owner
			time.Sleep(300 * time.Millisecond)
			if err := l.Release(context.Background()); err != nil {
				errs <- err
			}
		}()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if q := queuedOwners(t, srv, res); len(q) == i+1 && q[i] == owner {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never joined the queue: %v", owner, queuedOwners(t, srv, res))
			}
		}
	}
	// Let every waiter go through a few rounds before the lock comes free.
	time.Sleep(2500 * time.Millisecond)
	if q := queuedOwners(t, srv, res); len(q) != 3 || q[0] != "w0" || q[1] != "w1" || q[2] != "w2" {
		t.Fatalf("queue after some rounds: %v, want [w0 w1 w2]: each round keeps its place", q)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range owners {
		select {
		case o := <-granted:
			order = append(order, o)
		case err := <-errs:
			t.Fatalf("a waiter failed: %v", err)
		}
	}
	for i, o := range order {
		if o != owners[i] {
			t.Fatalf("grant order %v, want the arrival order %v", order, owners)
		}
	}
	if err := c.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
}
