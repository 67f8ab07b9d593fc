package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ft288/locks/locklogic"
	"github.com/ft288/locks/locklogic/dynamofake"
)

// ruleLine is how the generated parser declares a rule (as parserMemoJS
// expects it).
var ruleLine = regexp.MustCompile(`(?m)^  function peg\$parse\w*\(\) \{$`)

// conditionParserRules counts the rules of the installed dynalite's
// condition parser.
func conditionParserRules(tb testing.TB) int {
	tb.Helper()
	root, err := FindRepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "node_modules", "dynalite", "db", "conditionParser.js"))
	if err != nil {
		tb.Fatalf("dynalite's condition parser: %v (run `make deps`)", err)
	}
	return len(ruleLine.FindAll(src, -1))
}

// TestDynaliteMemoizesConditionParser checks that the dynalite StartDynalite
// runs validates requests with the memoized condition parser, every rule of
// it.
func TestDynaliteMemoizesConditionParser(t *testing.T) {
	d, err := StartDynalite(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if want := conditionParserRules(t); want == 0 || d.memoRules != want {
		t.Fatalf("got %d condition parser rules memoized, want all %d", d.memoRules, want)
	}
}

// parserCase is one condition expression with its attribute names and
// values, as dynalite's validation hands them to the parser.
type parserCase struct {
	Name   string                     `json:"name"`
	Expr   string                     `json:"expr"`
	Names  map[string]string          `json:"names"`
	Values map[string]json.RawMessage `json:"values"`
}

// serviceConditions records the conditions the service writes with: a lock
// acquire (without and with a principal and a lock-delay), renew, release
// and a semaphore acquire. The fake store answers every write with an error, so
// each operation stops after its first write.
func serviceConditions(t *testing.T) []parserCase {
	t.Helper()
	db := &dynamofake.DB{
		Update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, errors.New("recorded")
		},
		Get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return &dynamodb.GetItemOutput{}, nil },
	}
	svc := locklogic.New(db, locklogic.Config{Table: "locks", FairWaiting: true})
	ctx := context.Background()
	budget := locklogic.Budget{PerCall: time.Second}
	token := int64(7)
	ops := []struct {
		name string
		do   func()
	}{
		{"Acquire", func() {
			svc.AcquireWait(ctx, locklogic.AcquireRequest{Resource: "r", Caller: locklogic.Caller{Owner: "o"}, TTLSeconds: 30}, budget)
		}},
		{"AcquireWithPrincipalAndDelay", func() {
			svc.AcquireWait(ctx, locklogic.AcquireRequest{Resource: "r", Caller: locklogic.Caller{Owner: "o", Principal: "arn:aws:iam::1:user/u"},
				TTLSeconds: 30, LockDelaySeconds: 5}, budget)
		}},
		{"Renew", func() {
			svc.Renew(ctx, locklogic.RenewRequest{Resource: "r", Caller: locklogic.Caller{Owner: "o"}, TTLSeconds: 30, FencingToken: &token})
		}},
		{"Release", func() {
			svc.Release(ctx, locklogic.ReleaseRequest{Resource: "r", Caller: locklogic.Caller{Owner: "o"}})
		}},
		{"SemaphoreAcquire", func() {
			svc.AcquireSemaphore(ctx, locklogic.SemaphoreAcquireRequest{Name: "s", Caller: locklogic.Caller{Owner: "o"}, TTLSeconds: 30, Permits: 5}, budget)
		}},
	}
	var cases []parserCase
	for _, op := range ops {
		before := len(db.Updates())
		op.do()
		updates := db.Updates()
		if len(updates) == before || updates[before].ConditionExpression == nil {
			t.Fatalf("%s: got no conditional write, want one", op.name)
		}
		in := updates[before]
		c := parserCase{Name: op.name, Expr: *in.ConditionExpression, Names: in.ExpressionAttributeNames, Values: map[string]json.RawMessage{}}
		for k, v := range in.ExpressionAttributeValues {
			c.Values[k] = attributeJSON(t, v)
		}
		cases = append(cases, c)
	}
	return cases
}

// attributeJSON is v in DynamoDB's JSON, as dynalite receives it.
func attributeJSON(t *testing.T, v types.AttributeValue) json.RawMessage {
	t.Helper()
	var out any
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		out = map[string]string{"S": v.Value}
	case *types.AttributeValueMemberN:
		out = map[string]string{"N": v.Value}
	case *types.AttributeValueMemberBOOL:
		out = map[string]bool{"BOOL": v.Value}
	case *types.AttributeValueMemberNULL:
		out = map[string]bool{"NULL": v.Value}
	case *types.AttributeValueMemberL:
		var l []json.RawMessage
		for _, e := range v.Value {
			l = append(l, attributeJSON(t, e))
		}
		out = map[string]any{"L": l}
	case *types.AttributeValueMemberM:
		m := map[string]json.RawMessage{}
		for k, e := range v.Value {
			m[k] = attributeJSON(t, e)
		}
		out = map[string]any{"M": m}
	default:
		t.Fatalf("attribute value %T: not converted", v)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parserHarnessJS parses every case of the JSON array in argv[1] with
// dynalite's condition parser as shipped and as memoized (parserMemoJS),
// both counting the calls of rule bodies, and prints one JSON line per
// case: whether the two answered alike (the expression tree, or the
// error; and the names and values left unused) and the two counts.
const parserHarnessJS = parserMemoJS + `
const counted = (src) => src.replace(/^  function (peg\$parse\w*)\(\) \{$/gm, (line) => line + '\n    globalThis.ruleCalls++;');
const shipped = parserFs.readFileSync(parserFile, 'utf8');
const plain = loadParser(counted(shipped), parserFile).exports;
const memo = memoizedParserSource(counted(shipped));
if (memo.rules === 0) throw new Error('parser not memoized');
const memoized = loadParser(memo.src, parserFile).exports;
const reserved = new Set(['OWNER', 'STATUS', 'NAME', 'SIZE', 'VALUE']);
function run(parser, c) {
  const ctx = {attrNames: c.names || {}, attrVals: c.values || {}, unusedAttrNames: Object.assign({}, c.names),
    unusedAttrVals: Object.assign({}, c.values), isReserved: (w) => reserved.has(w.toUpperCase()), compare: () => false};
  globalThis.ruleCalls = 0;
  let out;
  try { out = parser.parse(c.expr, {context: ctx}); } catch (err) { out = {error: err.name + ': ' + err.message}; }
  return {answer: JSON.stringify([out, ctx.unusedAttrNames, ctx.unusedAttrVals]), calls: globalThis.ruleCalls};
}
for (const c of JSON.parse(parserFs.readFileSync(process.argv[1], 'utf8'))) {
  const a = run(plain, c), b = run(memoized, c);
  console.log(JSON.stringify({name: c.name, same: a.answer === b.answer, answer: a.answer, memoAnswer: b.answer,
    plainCalls: a.calls, memoCalls: b.calls, rules: memo.rules}));
}
`

// TestParserMemo checks that the memoized condition parser answers as
// dynalite's own does, on the service's conditions and on expressions
// dynalite rejects, and that it calls each rule at most once per input
// position and mode: linear in the expression's length, where the parser
// as shipped is exponential in the nesting of parentheses.
func TestParserMemo(t *testing.T) {
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cases := serviceConditions(t)
	n := map[string]string{"#a": "a", "#c": "c", "#d": "d", "#q": "q", "#x": "x"}
	v := map[string]json.RawMessage{":b": json.RawMessage(`{"N":"1"}`), ":c": json.RawMessage(`{"N":"2"}`), ":s": json.RawMessage(`{"S":"x"}`), ":t": json.RawMessage(`{"S":"N"}`)}
	for _, c := range []struct{ name, expr string }{
		{"Deep", "#a = :b AND (#c = :b OR (#d = :b AND (#c = :c OR (#d = :c AND (#a = :c OR #c = :b)))))"},
		{"NestedPathsNotBetweenIn", "#q[0].#x = :b AND (NOT #a BETWEEN :b AND :c OR #d IN (:b, :c)) AND size(#c) > :b"},
		{"Functions", "begins_with(#a, :s) AND (contains(#c, :s) OR attribute_type(#d, :t))"},
		{"ErrRedundantParens", "((#a = :b))"},
		{"ErrUnknownFunction", "attribute_nope(#a)"},
		{"ErrReservedWord", "owner = :b"},
		{"ErrSameOperands", "#a = #a"},
		{"ErrSizeAlone", "size(#a)"},
		{"ErrOperandType", "begins_with(#a, :b) AND ((#a = :b) OR #c = :b)"},
		{"ErrUnclosed", "(#a = :b AND (#c = :b"},
		{"ErrTrailingAnd", "#a = :b AND"},
		{"ErrUndefinedValue", "#a = :zz"},
	} {
		cases = append(cases, parserCase{Name: c.name, Expr: c.expr, Names: n, Values: v})
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "cases.json")
	if err := os.WriteFile(file, in, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "-e", parserHarnessJS, file)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("node: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("node: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seen := 0
	for ; dec.More(); seen++ {
		var r struct {
			Name                         string
			Same                         bool
			Answer, MemoAnswer           string
			PlainCalls, MemoCalls, Rules int
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("harness output: %v\n%s", err, out)
		}
		c := cases[seen]
		t.Run(r.Name, func(t *testing.T) {
			if !r.Same {
				t.Errorf("memoized parser answered %s, want dynalite's %s", r.MemoAnswer, r.Answer)
			}
			// Each rule body runs at most once per position (0..len)
			// and mode (silent or not).
			if bound := 2 * r.Rules * (len(c.Expr) + 1); r.MemoCalls > bound {
				t.Errorf("got %d rule calls for %d characters, want at most %d", r.MemoCalls, len(c.Expr), bound)
			}
			t.Logf("%d characters: %d rule calls as shipped, %d memoized; %.120s", len(c.Expr), r.PlainCalls, r.MemoCalls, r.Answer)
		})
	}
	if seen != len(cases) {
		t.Fatalf("got %d answers, want %d\n%s", seen, len(cases), out)
	}
}
