package integration_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/internal/testenv"
	"github.com/ft288/locks/locklogic"
)

// readCounter is an oldItemStore that counts the service's reads apart.
type readCounter struct {
	*oldItemStore
	gets atomic.Int32
}

func (s *readCounter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	s.gets.Add(1)
	return s.oldItemStore.GetItem(ctx, in, opts...)
}

// TestTryAcquireNeverReads: over a store that returns the old item with a
// failed condition, as DynamoDB does (the stack's
// DYNAMODB_RETURNS_OLD_ITEM=true), the try routes (the acquire function)
// answer every state of a lock and of a semaphore without a GetItem: the
// function's role has UpdateItem only (infra.DynamoDBActions), and a read
// there would be an AccessDenied.
func TestTryAcquireNeverReads(t *testing.T) {
	t.Parallel()
	srv := testenv.Start(t, testenv.Options{})
	store := &readCounter{oldItemStore: &oldItemStore{Client: srv.DB}}
	svc := locklogic.New(store, locklogic.Config{Table: testenv.Table, OldItemOnFailure: true, FairWaiting: true})
	h := api.NewHandler(svc, slog.New(slog.DiscardHandler), nil)
	try := func(route, name, body string) map[string]any {
		t.Helper()
		param, path := "resource", "/locks/"
		if strings.HasPrefix(route, "POST /semaphores/") {
			param, path = "name", "/semaphores/"
		}
		resp, _ := h.Acquire(context.Background(), events.APIGatewayV2HTTPRequest{RouteKey: route, RawPath: path + name,
			PathParameters: map[string]string{param: name}, Body: body})
		var m map[string]any
		if resp.StatusCode != 200 || json.Unmarshal([]byte(resp.Body), &m) != nil {
			t.Fatalf("%s %s: got %d %s", route, body, resp.StatusCode, resp.Body)
		}
		return m
	}
	r0 := res(t)
	lock, sem, queued := r0+"-lock", r0+"-sem", r0+"-queued"
	acquire(t, srv, queued, "holder", 30)
	waiter := waitFor(t, srv, queued, "waiter", 30, 3)
	// b's guessed slot is a's: its second write plans from the first's old
	// item.
	a, b, c := semOwner(t, "a", 2, 0, false), semOwner(t, "b", 2, 0, false), semOwner(t, "c", 2, 0, false)
	awaitJoin(t, srv, queued, "waiter", 1)
	for _, s := range []struct {
		name, route, resource, body string
		acquired                    bool
	}{
		{"LockFree", "POST /locks/{resource}", lock, acquireBody("w1", 30), true},
		{"LockSameOwner", "POST /locks/{resource}", lock, acquireBody("w1", 30), true},
		{"LockHeld", "POST /locks/{resource}", lock, acquireBody("w2", 30), false},
		{"LockQueued", "POST /locks/{resource}", queued, acquireBody("w3", 30), false},
		{"SemaphoreFree", "POST /semaphores/{name}", sem, semAcquireBody(a, 30, 2), true},
		{"SemaphoreCollided", "POST /semaphores/{name}", sem, semAcquireBody(b, 30, 2), true},
		{"SemaphoreFull", "POST /semaphores/{name}", sem, semAcquireBody(c, 30, 2), false},
	} {
		store.gets.Store(0)
		m := try(s.route, s.resource, s.body)
		if m["acquired"] != s.acquired {
			t.Errorf("%s: got %v, want acquired %v", s.name, m, s.acquired)
		}
		if n := store.gets.Load(); n != 0 {
			t.Errorf("%s: the try made %d GetItem, want none", s.name, n)
		}
	}
	<-waiter
}
