package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/locklogic"
)

// cannedStore is an in-process HTTP server that answers every request the
// way DynamoDB answers a successful acquire (UpdateItem with ALL_NEW: the
// new lease, its grant id, and the release id an earlier release left): at
// once, with the same bytes, checksum header included.
func cannedStore() (url string, stop func(), err error) {
	body := []byte(`{"Attributes":{"resource":{"S":"payment:42"},"owner":{"S":"w1"},` +
		`"principal":{"S":"arn:aws:sts::123456789012:assumed-role/worker"},"fencing_token":{"N":"1796212800000002"},` +
		`"acquired_at":{"N":"1796212800000"},"renewed_at":{"N":"1796212800000"},"expires_at":{"N":"1796212830000"},` +
		`"ttl":{"N":"1796817630"},"grant_id":{"S":"3w5e11264sgsg"},"release_id":{"S":"0a1b2c3d4e5f60718293a4b5"}}}`)
	sum := strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/x-amz-json-1.0"}
		h["X-Amz-Crc32"] = []string{sum}
		h["X-Amzn-Requestid"] = []string{"BENCH0000000000000000000000000000000000000000000000"}
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// recordingDB is the store of one capturing acquire: it passes every call
// to the SDK client and keeps the last UpdateItemInput.
type recordingDB struct {
	*dynamodb.Client
	last *dynamodb.UpdateItemInput
}

func (r *recordingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.last = in
	return r.Client.UpdateItem(ctx, in, optFns...)
}

var _ locklogic.DynamoDBAPI = (*recordingDB)(nil)

// bareAcquire is the baseline call: the UpdateItem the service sent for the
// recorded event, captured once (table, key, update and condition, names,
// return values), so that the baseline follows the service's expressions as
// they change. Each call builds its own key and values from the captured
// ones, as a minimal acquire function would build them from its request.
type bareAcquire struct {
	in     dynamodb.UpdateItemInput // Key and ExpressionAttributeValues nil
	key    []bareValue
	values []bareValue
}

// bareValue is one captured attribute value: a string, or a number
// formatted afresh on every call (as the service's num does).
type bareValue struct {
	name string
	s    *string // nil: a number
	n    int64
}

// captureAcquire serves ev once through a handler like h, over a recording
// store on db, and returns that acquire's UpdateItem as a bareAcquire.
func captureAcquire(ctx context.Context, db *dynamodb.Client, ev events.APIGatewayV2HTTPRequest) (*bareAcquire, error) {
	rec := &recordingDB{Client: db}
	h := api.NewHandler(locklogic.New(rec, locklogic.Config{Table: "locks", OldItemOnFailure: true}),
		api.NewLoggerTo(io.Discard, slog.LevelInfo), nil)
	resp, err := h.Acquire(ctx, ev)
	if err != nil || resp.StatusCode != 200 || rec.last == nil {
		return nil, fmt.Errorf("capturing the acquire's UpdateItem: answered %d %s (%v)", resp.StatusCode, resp.Body, err)
	}
	b := &bareAcquire{in: *rec.last}
	b.in.Key, b.in.ExpressionAttributeValues = nil, nil
	if b.key, err = bareValues(rec.last.Key); err != nil {
		return nil, err
	}
	if b.values, err = bareValues(rec.last.ExpressionAttributeValues); err != nil {
		return nil, err
	}
	return b, nil
}

func bareValues(m map[string]types.AttributeValue) ([]bareValue, error) {
	var vs []bareValue
	for _, name := range slices.Sorted(maps.Keys(m)) {
		switch v := m[name].(type) {
		case *types.AttributeValueMemberS:
			vs = append(vs, bareValue{name: name, s: &v.Value})
		case *types.AttributeValueMemberN:
			n, err := strconv.ParseInt(v.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("captured value %s: %w", name, err)
			}
			vs = append(vs, bareValue{name: name, n: n})
		default:
			return nil, fmt.Errorf("captured value %s: unexpected type %T", name, v)
		}
	}
	return vs, nil
}

func bareMap(vs []bareValue) map[string]types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(vs))
	for _, v := range vs {
		if v.s != nil {
			m[v.name] = &types.AttributeValueMemberS{Value: *v.s}
		} else {
			m[v.name] = &types.AttributeValueMemberN{Value: strconv.FormatInt(v.n, 10)}
		}
	}
	return m
}

// call is the baseline: one SDK UpdateItem with the acquire's expressions
// and names, its key and values built for this call, and nothing else: no
// event, no parsing, validation, decoding, response or log line.
func (b *bareAcquire) call(ctx context.Context, db *dynamodb.Client) error {
	in := b.in
	in.Key = bareMap(b.key)
	in.ExpressionAttributeValues = bareMap(b.values)
	_, err := db.UpdateItem(ctx, &in)
	return err
}

// cpuResult compares the handler's CPU per acquire with the bare call's.
type cpuResult struct {
	handler, invoke, bare       time.Duration // CPU per op (median of rounds)
	ratio, invokeRatio          float64       // median of the per-round ratios
	handlerAllocs, invokeAllocs float64
	bareAllocs                  float64
	rounds, perRound            int
}

// measureCPU runs the acquire handler (as h.Acquire, and as the Lambda
// runtime calls the function: event JSON in, response JSON out, through
// api.Invoker as functions/acquire passes it to lambda.Start) and the bare
// UpdateItem in turns against the canned store, on one SDK client, and
// measures the process's CPU time (user + system, the canned store's share
// included: it is the same for both) and allocations per operation.
//
// It runs on one processor (GOMAXPROCS 1): with more, idle processors spin
// looking for work at every network wait, which adds CPU time to both
// sides, and noise, that neither's code causes.
func measureCPU(root string, rounds, perRound int, profile string) (cpuResult, error) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ops, stop, err := newAcquireOps(root)
	if err != nil {
		return cpuResult{}, err
	}
	defer stop()
	for _, name := range []string{"handler", "invoke", "bare"} { // warm up, check
		for range perRound / 4 {
			if err := ops[name](); err != nil {
				return cpuResult{}, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if profile != "" {
		stopProfile, err := startProfile(profile)
		if err != nil {
			return cpuResult{}, err
		}
		for range perRound * 5 {
			_ = ops["handler"]()
		}
		stopProfile()
	}
	cpu := map[string][]time.Duration{}
	allocs := map[string][]float64{}
	var ratios, invokeRatios []float64
	for range rounds {
		for _, name := range []string{"handler", "invoke", "bare"} {
			c, a, err := cpuPerOp(ops[name], perRound)
			if err != nil {
				return cpuResult{}, fmt.Errorf("%s: %w", name, err)
			}
			cpu[name] = append(cpu[name], c)
			allocs[name] = append(allocs[name], a)
		}
		n := len(cpu["bare"]) - 1
		ratios = append(ratios, float64(cpu["handler"][n])/float64(cpu["bare"][n]))
		invokeRatios = append(invokeRatios, float64(cpu["invoke"][n])/float64(cpu["bare"][n]))
	}
	return cpuResult{
		handler: median(cpu["handler"]), invoke: median(cpu["invoke"]), bare: median(cpu["bare"]),
		ratio: median(ratios), invokeRatio: median(invokeRatios),
		handlerAllocs: median(allocs["handler"]), invokeAllocs: median(allocs["invoke"]), bareAllocs: median(allocs["bare"]),
		rounds: rounds, perRound: perRound,
	}, nil
}

// newAcquireOps returns the three operations measureCPU compares, by
// name, over one canned store and SDK client, and the function that stops
// the store: "handler" (h.Acquire on the recorded event), "invoke" (the
// event's JSON through api.Invoker, as functions/acquire passes it to
// lambda.Start) and "bare" (the service's UpdateItem alone, bareAcquire).
func newAcquireOps(root string) (map[string]func() error, func(), error) {
	url, stop, err := cannedStore()
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	fail := func(err error) (map[string]func() error, func(), error) { stop(); return nil, nil, err }
	db, err := api.NewDynamoDB(ctx, url)
	if err != nil {
		return fail(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "api", "testdata", "acquire-iam.json"))
	if err != nil {
		return fail(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		return fail(err)
	}
	// The production handler: its JSON log lines (to nowhere here), DynamoDB's
	// old item on failure, a Lambda-like deadline.
	h := api.NewHandler(locklogic.New(db, locklogic.Config{Table: "locks", OldItemOnFailure: true}),
		api.NewLoggerTo(io.Discard, slog.LevelInfo), nil)
	bare, err := captureAcquire(ctx, db, ev)
	if err != nil {
		return fail(err)
	}
	invoker := api.NewInvoker(h.Acquire)
	lctx, cancel := context.WithTimeout(ctx, time.Hour)
	ops := map[string]func() error{
		"handler": func() error {
			resp, err := h.Acquire(lctx, ev)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("handler answered %d %s", resp.StatusCode, resp.Body)
			}
			return err
		},
		"invoke": func() error {
			out, err := invoker.Invoke(lctx, raw)
			if err == nil && !bytes.HasPrefix(out, []byte(`{"statusCode":200,`)) {
				err = fmt.Errorf("invoke answered %s", out)
			}
			return err
		},
		"bare": func() error { return bare.call(lctx, db) },
	}
	return ops, func() { cancel(); stop() }, nil
}

// cpuPerOp runs op n times and returns the process's CPU time and the
// allocations per call.
func cpuPerOp(op func() error, n int) (time.Duration, float64, error) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := processCPU()
	for range n {
		if err := op(); err != nil {
			return 0, 0, err
		}
	}
	c1 := processCPU()
	runtime.ReadMemStats(&m1)
	return (c1 - c0) / time.Duration(n), float64(m1.Mallocs-m0.Mallocs) / float64(n), nil
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median[T int | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
