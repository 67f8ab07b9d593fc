package api

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ft288/locks/locklogic"
)

// cannedDB answers every write with out and keeps nothing.
type cannedDB struct{ out *dynamodb.UpdateItemOutput }

func (c cannedDB) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return c.out, nil
}

func (c cannedDB) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{}, nil
}

func (c cannedDB) Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return &dynamodb.ScanOutput{}, nil
}

// BenchmarkAcquireHandler measures what the acquire handler costs on top of
// its one store call: the store here answers at once from memory, so the
// figure is the handler's own work (event body, validation, the write's
// expressions, the item's decoding, the response and the log line). make
// bench compares the whole with a bare SDK call.
func BenchmarkAcquireHandler(b *testing.B) {
	out := &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 1796212800000001, t0.Add(30*time.Second))}
	h := NewHandler(locklogic.New(cannedDB{out}, locklogic.Config{Table: "locks", OldItemOnFailure: true}), NewLoggerTo(io.Discard, slog.LevelInfo), nil)
	ev := loadEvent(b, "acquire-iam.json")
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if resp, _ := h.Acquire(ctx, ev); resp.StatusCode != 200 {
			b.Fatalf("got %d %s", resp.StatusCode, resp.Body)
		}
	}
}

// BenchmarkAcquireInvoked is BenchmarkAcquireHandler as the Lambda runtime
// calls the function: the recorded event's JSON through Invoker, the
// response's JSON out. The difference is what decodeEvent and
// appendResponse cost.
func BenchmarkAcquireInvoked(b *testing.B) {
	out := &dynamodb.UpdateItemOutput{Attributes: lockItem("w1", 1796212800000001, t0.Add(30*time.Second))}
	h := NewHandler(locklogic.New(cannedDB{out}, locklogic.Config{Table: "locks", OldItemOnFailure: true}), NewLoggerTo(io.Discard, slog.LevelInfo), nil)
	payload, err := os.ReadFile("testdata/acquire-iam.json")
	if err != nil {
		b.Fatal(err)
	}
	inv := NewInvoker(h.Acquire)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if resp, err := inv.Invoke(ctx, payload); err != nil || !bytes.HasPrefix(resp, []byte(`{"statusCode":200,`)) {
			b.Fatalf("got %s (%v)", resp, err)
		}
	}
}

// BenchmarkDecodeEvent is decodeEvent alone on the recorded acquire event.
func BenchmarkDecodeEvent(b *testing.B) {
	payload, err := os.ReadFile("testdata/acquire-iam.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		var ev events.APIGatewayV2HTTPRequest
		if err := decodeEvent(payload, &ev); err != nil {
			b.Fatal(err)
		}
	}
}
