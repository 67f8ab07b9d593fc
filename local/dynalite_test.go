package local

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// parseCompareJS parses each case with dynalite's own parser and, after
// parseCacheJS wrapped it, twice more (a miss, then a hit with other values
// of the same types), and prints every difference in the trees, the errors
// or the bookkeeping of unused names and values; "OK n" when there is none.
const parseCompareJS = `
const original = require('dynalite/db/conditionParser').parse;
const run = (parse, c, vals) => {
  const ctx = {attrNames: c.names, attrVals: vals, unusedAttrNames: Object.fromEntries(Object.keys(c.names).map((k) => [k, true])),
    unusedAttrVals: Object.fromEntries(Object.keys(vals).map((k) => [k, true])), isKeyCondition: !!c.key,
    isReserved: (n) => n.toUpperCase() === 'NAME', compare: () => false};
  let tree, err;
  try { tree = JSON.stringify(parse(c.expr, {context: ctx})); } catch (e) { err = e.message; }
  return JSON.stringify({tree, err, names: ctx.unusedAttrNames, values: ctx.unusedAttrVals});
};
const cases = JSON.parse(process.argv[1]);
const want = cases.map((c) => c.vals.map((v) => run(original, c, v)));
` + parseCacheJS + `
const parser = require('dynalite/db/conditionParser');
let bad = 0;
cases.forEach((c, i) => c.vals.forEach((v, j) => {
  for (const pass of ['first', 'again']) {
    const got = run(parser.parse, c, v);
    if (got !== want[i][j]) { bad++; console.log('case ' + i + ' values ' + j + ' (' + pass + '): ' + got + ' want ' + want[i][j]); }
  }
}));
if (!bad) console.log('OK ' + cases.length);
`

// TestParseCache: the cached condition parser builds the tree dynalite's
// own builds, with each request's values, and the same errors and
// bookkeeping (an unused value stays an error), for the service's acquire
// condition and for expressions that exercise nested paths, functions,
// size, NOT, IN, key conditions and failures.
func TestParseCache(t *testing.T) {
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	names := `{"#r":"resource","#o":"owner","#p":"principal","#a":"a","#e":"e","#x":"x","#f":"f","#fa":"fa","#gi":"gi","#xa":"xa","#q":"q","#qu":"qu"}`
	acquire := "attribute_not_exists(#r) OR ((attribute_exists(#x) OR (#e <= :now AND (attribute_not_exists(#f) OR #f <= :now))) AND " +
		"(attribute_not_exists(#q[0]) OR #qu <= :now)) OR (#o = :o AND attribute_not_exists(#p) AND attribute_not_exists(#fa) AND " +
		"(#a <= :iss OR #gi = :gid) AND ((attribute_not_exists(#q[0]) OR #qu <= :now) OR (#e > :now AND attribute_not_exists(#x) AND " +
		"attribute_not_exists(#xa))))"
	cases := `[
	  {"expr": "` + acquire + `", "names": ` + names + `, "vals": [
	    {":now": {"N": "1"}, ":o": {"S": "w1"}, ":iss": {"N": "0"}, ":gid": {"S": "g"}},
	    {":now": {"N": "2"}, ":o": {"S": "w2"}, ":iss": {"N": "1"}, ":gid": {"S": "h"}},
	    {":now": {"N": "2"}, ":o": {"S": "w2"}, ":iss": {"N": "1"}, ":gid": {"S": "h"}, ":unused": {"N": "3"}},
	    {":now": {"N": "2"}, ":o": {"S": "w2"}, ":iss": {"N": "1"}}]},
	  {"expr": "#q[1].#o = :o AND size(#q) < :n AND NOT contains(#e, :s) AND #a IN (:n, :m)", "names": {"#q": "q", "#o": "o", "#e": "e", "#a": "a"},
	    "vals": [{":o": {"S": "a"}, ":n": {"N": "1"}, ":s": {"S": "x"}, ":m": {"N": "2"}},
	             {":o": {"S": "b"}, ":n": {"N": "7"}, ":s": {"S": "y"}, ":m": {"N": "8"}},
	             {":o": {"N": "1"}, ":n": {"N": "7"}, ":s": {"S": "y"}, ":m": {"N": "8"}}]},
	  {"expr": "begins_with(#e, :p)", "names": {"#e": "e"}, "vals": [{":p": {"S": "a"}}, {":p": {"N": "1"}}, {":p": {"S": "b"}}]},
	  {"expr": "#e = :v AND #unknown = :v", "names": {"#e": "e"}, "vals": [{":v": {"S": "a"}}, {":v": {"S": "b"}}]},
	  {"expr": "#e = :v", "names": {"#e": "name"}, "vals": [{":v": {"S": "a"}}, {":v": {"S": "b"}}]},
	  {"expr": "name = :v", "names": {}, "vals": [{":v": {"S": "a"}}]},
	  {"expr": "#e = :v AND #f = :w", "names": {"#e": "e", "#f": "f"}, "key": true, "vals": [{":v": {"S": "a"}, ":w": {"N": "1"}}, {":v": {"S": "b"}, ":w": {"N": "2"}}]},
	  {"expr": "attribute_type(#e, :t)", "names": {"#e": "e"}, "vals": [{":t": {"S": "N"}}, {":t": {"S": "X"}}]},
	  {"expr": "#e BETWEEN :a AND :b", "names": {"#e": "e"}, "vals": [{":a": {"N": "1"}, ":b": {"N": "2"}}, {":a": {"N": "3"}, ":b": {"N": "2"}}]},
	  {"expr": "((#e = :v))", "names": {"#e": "e"}, "vals": [{":v": {"S": "a"}}]},
	  {"expr": "#e = ", "names": {"#e": "e"}, "vals": [{":v": {"S": "a"}}]}
	]`
	cmd := exec.Command("node", "-e", parseCompareJS, cases)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "OK 11" {
		t.Fatalf("node: %v\n%s", err, out)
	}
}

// TestParseCacheOverHTTP: through the running dynalite, one condition sent
// again with other values decides by the new values, and a request whose
// expression leaves a value unused is refused every time, as DynamoDB
// refuses it.
func TestParseCacheOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := StartDynalite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(d.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")})
	if _, err := EnsureTable(ctx, db, "parse-cache"); err != nil {
		t.Fatal(err)
	}
	write := func(now string, extra bool) error {
		vals := map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: now}, ":v": &types.AttributeValueMemberN{Value: now}}
		if extra {
			vals[":x"] = &types.AttributeValueMemberN{Value: "1"}
		}
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("parse-cache"),
			Key:                       map[string]types.AttributeValue{"resource": &types.AttributeValueMemberS{Value: "k"}},
			UpdateExpression:          aws.String("SET #e = :v"),
			ConditionExpression:       aws.String("attribute_not_exists(#e) OR #e < :now"),
			ExpressionAttributeNames:  map[string]string{"#e": "e"},
			ExpressionAttributeValues: vals})
		return err
	}
	var ccf *types.ConditionalCheckFailedException
	for i, s := range []struct {
		now      string
		extra    bool
		wantFail string // "": written; else the error code
	}{
		{"5", false, ""},
		{"5", false, "ConditionalCheckFailedException"}, // 5 < 5 is false
		{"4", false, "ConditionalCheckFailedException"},
		{"9", false, ""}, // the same expression, decided by :now = 9
		{"20", true, "ValidationException"},
		{"20", true, "ValidationException"},
		{"20", false, ""},
	} {
		err := write(s.now, s.extra)
		var api smithy.APIError
		switch {
		case s.wantFail == "" && err != nil:
			t.Fatalf("write %d (:now %s): %v, want written", i, s.now, err)
		case s.wantFail == "ConditionalCheckFailedException" && !errors.As(err, &ccf):
			t.Fatalf("write %d (:now %s): %v, want the condition to fail", i, s.now, err)
		case s.wantFail == "ValidationException" && (!errors.As(err, &api) || api.ErrorCode() != s.wantFail):
			t.Fatalf("write %d (:now %s, an unused value): %v, want a ValidationException", i, s.now, err)
		}
	}
}
