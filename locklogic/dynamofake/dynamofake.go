// Package dynamofake is a scriptable stand-in for the DynamoDB calls the
// lock service makes (locklogic.DynamoDBAPI), for unit tests of failure paths
// a real server does not produce on demand: throttling, retries exhausted,
// the old item returned with a failed condition (which dynalite never does).
// Integration tests use a real DynamoDB-compatible server instead.
package dynamofake

import (
	"context"
	"errors"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DB answers UpdateItem, GetItem and Scan with the functions the test sets
// and records every call. A call whose function is nil fails with an error.
type DB struct {
	Update func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
	Get    func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	// ScanFunc answers Scan calls.
	ScanFunc func(*dynamodb.ScanInput) (*dynamodb.ScanOutput, error)

	mu      sync.Mutex
	updates []*dynamodb.UpdateItemInput
	gets    int
	scans   []*dynamodb.ScanInput
}

// Scan records in and answers with ScanFunc.
func (f *DB) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	f.mu.Lock()
	f.scans = append(f.scans, in)
	f.mu.Unlock()
	if f.ScanFunc == nil {
		return nil, errors.New("dynamofake: unexpected Scan")
	}
	return f.ScanFunc(in)
}

// Scans returns the Scan inputs received so far.
func (f *DB) Scans() []*dynamodb.ScanInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*dynamodb.ScanInput(nil), f.scans...)
}

// UpdateItem records in and answers with Update.
func (f *DB) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	f.updates = append(f.updates, in)
	f.mu.Unlock()
	if f.Update == nil {
		return nil, errors.New("dynamofake: unexpected UpdateItem")
	}
	return f.Update(in)
}

// GetItem counts the call and answers with Get.
func (f *DB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.mu.Lock()
	f.gets++
	f.mu.Unlock()
	if f.Get == nil {
		return nil, errors.New("dynamofake: unexpected GetItem")
	}
	return f.Get(in)
}

// Updates returns the UpdateItem inputs received so far.
func (f *DB) Updates() []*dynamodb.UpdateItemInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*dynamodb.UpdateItemInput(nil), f.updates...)
}

// Gets returns how many GetItem calls were received.
func (f *DB) Gets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}
