package faultproxy

import (
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// dynaliteLike is a store that refuses every write as dynalite does (a
// ConditionalCheckFailedException without the old item, whatever the
// request asked) and answers GetItem with item (none when nil), each
// answer with DynamoDB's CRC32 header, which the SDK checks. It counts
// the GetItems it answered and keeps their bodies.
type dynaliteLike struct {
	item string // the item's JSON attribute map, "" for none

	mu   sync.Mutex
	gets []string
}

func (d *dynaliteLike) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var out string
	status := 200
	switch op := r.Header.Get("X-Amz-Target"); {
	case strings.HasSuffix(op, ".GetItem"):
		d.mu.Lock()
		d.gets = append(d.gets, string(body))
		d.mu.Unlock()
		out = "{}"
		if d.item != "" {
			out = `{"Item":` + d.item + `}`
		}
	default:
		status = 400
		out = `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}`
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(out))), 10))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, out)
}

func (d *dynaliteLike) getBodies() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.gets...)
}

// TestOldItemOnFailure: in old-item mode a refused write that asked for the
// old item gets it, as the SDK decodes DynamoDB's answer
// (ConditionalCheckFailedException.Item), read with a consistent GetItem
// of the write's table and key; a write that did not ask for it, an absent
// item, and the mode off get the refusal alone.
func TestOldItemOnFailure(t *testing.T) {
	const item = `{"resource":{"S":"r1"},"owner":{"S":"a"},"fencing_token":{"N":"7"},"queue":{"L":[{"M":{"id":{"S":"t1"}}}]}}`
	for _, tc := range []struct {
		name     string
		on       bool
		item     string
		returnOn types.ReturnValuesOnConditionCheckFailure
		wantItem bool
		wantGets int
	}{
		{"OldItemReturned", true, item, types.ReturnValuesOnConditionCheckFailureAllOld, true, 1},
		{"ItemAbsent", true, "", types.ReturnValuesOnConditionCheckFailureAllOld, false, 1},
		{"NotAskedFor", true, item, types.ReturnValuesOnConditionCheckFailureNone, false, 0},
		{"ModeOff", false, item, types.ReturnValuesOnConditionCheckFailureAllOld, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &dynaliteLike{item: tc.item}
			srv := httptest.NewServer(store)
			defer srv.Close()
			p, err := New(srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.SetOldItemOnFailure(tc.on)
			db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(p.URL()),
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")})
			_, err = db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
				TableName:                           aws.String("locks"),
				Key:                                 map[string]types.AttributeValue{"resource": &types.AttributeValueMemberS{Value: "r1"}},
				UpdateExpression:                    aws.String("SET #o = :o"),
				ConditionExpression:                 aws.String("attribute_not_exists(#o)"),
				ExpressionAttributeNames:            map[string]string{"#o": "owner"},
				ExpressionAttributeValues:           map[string]types.AttributeValue{":o": &types.AttributeValueMemberS{Value: "b"}},
				ReturnValuesOnConditionCheckFailure: tc.returnOn,
			})
			var ccf *types.ConditionalCheckFailedException
			if !errors.As(err, &ccf) {
				t.Fatalf("got %v, want a ConditionalCheckFailedException", err)
			}
			rec := p.Records()
			if len(rec) != 1 {
				t.Fatalf("got %d records, want 1 (the proxy's read is none)", len(rec))
			}
			if gets := store.getBodies(); len(gets) != tc.wantGets {
				t.Fatalf("got %d reads of the store, want %d", len(gets), tc.wantGets)
			} else if len(gets) == 1 {
				var g struct {
					TableName      string
					Key            map[string]map[string]string
					ConsistentRead bool
				}
				if err := json.Unmarshal([]byte(gets[0]), &g); err != nil || g.TableName != "locks" || g.Key["resource"]["S"] != "r1" ||
					!g.ConsistentRead {
					t.Errorf("got the read %s, want a consistent GetItem of table locks, key r1", gets[0])
				}
			}
			if !tc.wantItem {
				if ccf.Item != nil || rec[0].OldItem != nil {
					t.Errorf("got the old item %v (record %s), want none", ccf.Item, rec[0].OldItem)
				}
				return
			}
			o, _ := ccf.Item["owner"].(*types.AttributeValueMemberS)
			tok, _ := ccf.Item["fencing_token"].(*types.AttributeValueMemberN)
			q, _ := ccf.Item["queue"].(*types.AttributeValueMemberL)
			if o == nil || o.Value != "a" || tok == nil || tok.Value != "7" || q == nil || len(q.Value) != 1 {
				t.Errorf("got the old item %#v, want owner a, fencing_token 7, a queue of 1", ccf.Item)
			}
			if string(rec[0].OldItem) != item {
				t.Errorf("got Record.OldItem %s, want %s", rec[0].OldItem, item)
			}
			if c, err := rec[0].Decode(); err != nil || c.ErrorType != "ConditionalCheckFailedException" || c.Item != nil {
				t.Errorf("got the record decoded as %+v, %v; want the store's own answer (no item)", c, err)
			}
		})
	}
}
