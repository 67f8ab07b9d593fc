package fence_test

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/ft288/locks/client/fence"
)

// userWrite is a caller's own write, before the fence is merged into it.
type userWrite struct {
	name   string
	e      fence.Expressions
	values map[string]int64
	// ok says whether the caller's own condition lets the write through.
	ok func(before item) bool
	// apply returns the item the caller's write makes of before (without
	// the fence).
	apply func(before item) item
	// put is a PutItem's item (without the fence), when e has no update.
	put item
}

func always(item) bool { return true }

func set(kv ...any) func(item) item {
	return func(before item) item {
		out := before.clone()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(out, kv[i].(string))
				continue
			}
			out[kv[i].(string)] = int64(kv[i+1].(int))
		}
		return out
	}
}

var userWrites = []userWrite{
	{
		name:   "UpdateItem",
		e:      fence.Expressions{Update: "SET amount = :amount, payee = :payee"},
		values: map[string]int64{":amount": 200, ":payee": 2},
		ok:     always,
		apply:  set("amount", 200, "payee", 2),
	},
	{
		name: "UpdateItemWithCondition",
		e: fence.Expressions{
			Condition: "attribute_not_exists(#st) OR #st <> :closed",
			Update:    "SET amount = :amount",
			Names:     map[string]string{"#st": "status"},
		},
		values: map[string]int64{":closed": 1, ":amount": 200},
		ok:     func(it item) bool { s, ok := it["status"]; return !ok || s != 1 },
		apply:  set("amount", 200),
	},
	{
		name:   "SetAfterAnotherClause",
		e:      fence.Expressions{Update: "REMOVE note SET amount = :amount"},
		values: map[string]int64{":amount": 200},
		ok:     always,
		apply:  set("note", nil, "amount", 200),
	},
	{
		name:   "LowerCaseSet",
		e:      fence.Expressions{Update: "set amount = :amount remove note"},
		values: map[string]int64{":amount": 200},
		ok:     always,
		apply:  set("amount", 200, "note", nil),
	},
	{
		name:   "NoSetClause",
		e:      fence.Expressions{Update: "ADD attempts :one"},
		values: map[string]int64{":one": 1},
		ok:     always,
		apply: func(before item) item {
			out := before.clone()
			out["attempts"]++
			return out
		},
	},
	{
		name:   "PutItem",
		e:      fence.Expressions{Condition: "attribute_not_exists(#st) OR #st <> :closed", Names: map[string]string{"#st": "status"}},
		values: map[string]int64{":closed": 1},
		ok:     func(it item) bool { s, ok := it["status"]; return !ok || s != 1 },
		put:    item{"amount": 200},
	},
	{
		name: "PlaceholdersCollide",
		e: fence.Expressions{
			Condition: "attribute_not_exists(#fence) OR #fence <> :fence",
			Update:    "SET #fence = :fence, amount = :fence1",
			Names:     map[string]string{"#fence": "colour"},
		},
		values: map[string]int64{":fence": 3, ":fence1": 200},
		ok:     func(it item) bool { c, ok := it["colour"]; return !ok || c != 3 },
		apply:  set("colour", 3, "amount", 200),
	},
	{
		name: "ExpressionBuilderPlaceholders",
		e: fence.Expressions{
			Condition: "attribute_not_exists(#0) OR #0 < :0",
			Update:    "SET #0 = :0",
			Names:     map[string]string{"#0": "amount"},
		},
		values: map[string]int64{":0": 200},
		ok:     func(it item) bool { a, ok := it["amount"]; return !ok || a < 200 },
		apply:  set("amount", 200),
	},
}

// states are the items a write may find.
var states = []struct {
	name string
	it   item
}{
	{"NoItem", item{}},
	{"NoFence", item{"amount": 100, "note": 1}},
	{"Fence5", item{"amount": 100, "note": 1, "fence": 5}},
	{"Fence5Closed", item{"amount": 100, "fence": 5, "status": 1}},
	{"Fence5Colour3", item{"amount": 100, "fence": 5, "colour": 3}},
}

// fenceLets says whether a fence of token stored in attr lets a write to
// it through.
func fenceLets(it item, attr string, token int64) bool {
	stored, ok := it[attr]
	return !ok || stored <= token
}

// TestMerge holds each merged write to what it must do to each item: go
// through when the caller's condition and the fence both let it, and then
// store the token; change nothing otherwise.
func TestMerge(t *testing.T) {
	for _, w := range userWrites {
		for _, s := range states {
			for _, token := range []int64{4, 5, 6} {
				t.Run(fmt.Sprintf("%s/%s/Token%d", w.name, s.name, token), func(t *testing.T) {
					f := fence.NewDynamoDB(token)
					e, err := f.Merge(w.e)
					if err != nil {
						t.Fatalf("Merge: %v", err)
					}
					put := w.put.clone()
					put[f.Attribute()] = token // a PutItem carries the fence itself
					got, ok, err := write(s.it, e, w.values, put)
					if err != nil {
						t.Fatalf("write %+v: %v", e, err)
					}
					wantOK := w.ok(s.it) && fenceLets(s.it, "fence", token)
					if ok != wantOK {
						t.Fatalf("got accepted %t, want %t (merged %+v)", ok, wantOK, e)
					}
					want := s.it
					if wantOK {
						if w.apply != nil {
							want = w.apply(s.it)
						} else {
							want = w.put.clone()
						}
						want["fence"] = token
					}
					if !maps.Equal(got, want) {
						t.Errorf("got item %v, want %v", got, want)
					}
				})
			}
		}
	}
}

// TestMergeTwoFences merges two fences, stored in attributes of their own
// (as a semaphore's slots will), into one write: it goes through only when
// both let it, and stores both tokens.
func TestMergeTwoFences(t *testing.T) {
	user := fence.Expressions{Update: "SET amount = :amount"}
	f0, f1 := fence.NewDynamoDB(7), fence.NewDynamoDB(3).WithAttribute("fence_1")
	e, err := f0.Merge(user)
	if err != nil {
		t.Fatal(err)
	}
	if e, err = f1.Merge(e); err != nil {
		t.Fatal(err)
	}
	if len(e.Names) != 2 || len(e.Values) != 2 {
		t.Fatalf("got names %v and values %v, want two of each", e.Names, e.Values)
	}
	for _, before := range []item{{}, {"fence": 7}, {"fence": 8}, {"fence_1": 3}, {"fence_1": 4}, {"fence": 6, "fence_1": 2}} {
		got, ok, err := write(before, e, map[string]int64{":amount": 1}, nil)
		if err != nil {
			t.Fatalf("write %+v: %v", e, err)
		}
		wantOK := fenceLets(before, "fence", 7) && fenceLets(before, "fence_1", 3)
		if ok != wantOK {
			t.Errorf("%v: got accepted %t, want %t", before, ok, wantOK)
		}
		if ok && (got["fence"] != 7 || got["fence_1"] != 3) {
			t.Errorf("%v: got item %v, want fence 7 and fence_1 3", before, got)
		}
	}
}

// TestFenceAlone checks Condition, Update, Names and Values by themselves,
// as a caller that writes them into a request by hand would use them.
func TestFenceAlone(t *testing.T) {
	f := fence.NewDynamoDB(6).WithAttribute("fence_2")
	if f.Token() != 6 || f.Attribute() != "fence_2" {
		t.Fatalf("got token %d and attribute %q, want 6 and fence_2", f.Token(), f.Attribute())
	}
	if n, err := strconv.ParseInt(f.Number(), 10, 64); err != nil || n != 6 {
		t.Fatalf("got Number %q, want 6 in decimal", f.Number())
	}
	e := fence.Expressions{Condition: f.Condition(), Update: f.Update(), Names: f.Names(), Values: f.Values()}
	for _, before := range []item{{}, {"fence_2": 5}, {"fence_2": 6}, {"fence_2": 7}, {"fence": 9}} {
		got, ok, err := write(before, e, nil, nil)
		if err != nil {
			t.Fatalf("write %+v: %v", e, err)
		}
		if want := fenceLets(before, "fence_2", 6); ok != want {
			t.Errorf("%v: got accepted %t, want %t", before, ok, want)
		}
		if ok && got["fence_2"] != 6 {
			t.Errorf("%v: got item %v, want fence_2 6", before, got)
		}
	}
}

func TestMergeErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		f    fence.DynamoDB
		e    fence.Expressions
	}{
		{"ErrTokenZero", fence.DynamoDB{}, fence.Expressions{}},
		{"ErrTokenNegative", fence.NewDynamoDB(-1), fence.Expressions{}},
		{"ErrAttributeEmpty", fence.NewDynamoDB(1).WithAttribute(""), fence.Expressions{}},
		{"ErrSetsTheAttribute", fence.NewDynamoDB(1), fence.Expressions{Update: "SET a = :a, fence = :x"}},
		{"ErrSetsItThroughAName", fence.NewDynamoDB(1), fence.Expressions{Update: "SET #f = :x", Names: map[string]string{"#f": "fence"}}},
		{"ErrSetsAnElementOfIt", fence.NewDynamoDB(1), fence.Expressions{Update: "SET fence[0] = :x"}},
		{"ErrRemovesIt", fence.NewDynamoDB(1), fence.Expressions{Update: "SET a = :a REMOVE b, fence.c"}},
		{"ErrAddsToIt", fence.NewDynamoDB(1), fence.Expressions{Update: "ADD fence :one"}},
		{"ErrCustomAttribute", fence.NewDynamoDB(1).WithAttribute("fence_3"), fence.Expressions{Update: "DELETE fence_3 :s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if e, err := tt.f.Merge(tt.e); err == nil {
				t.Errorf("Merge(%+v): got %+v, want an error", tt.e, e)
			}
		})
	}

	t.Run("ErrMergedTwice", func(t *testing.T) {
		f := fence.NewDynamoDB(1)
		e, err := f.Merge(fence.Expressions{Update: "SET a = :a"})
		if err != nil {
			t.Fatal(err)
		}
		if e, err := f.Merge(e); err == nil {
			t.Errorf("second Merge: got %+v, want an error: two SETs of the attribute", e)
		}
	})

	// Reading the attribute, or writing another attribute's element of the
	// same name, is no overlap.
	for _, tt := range []struct {
		name string
		e    fence.Expressions
	}{
		{"ReadsItInAnOperand", fence.Expressions{Update: "SET a = if_not_exists(fence, :z), b = list_append(b, :l)"}},
		{"NestedElsewhere", fence.Expressions{Update: "SET a.fence = :x, #b.fence = :y", Names: map[string]string{"#b": "b"}}},
		{"ConditionReadsIt", fence.Expressions{Condition: "fence < :x", Update: "SET a = :a"}},
		{"SimilarName", fence.Expressions{Update: "SET fences = :x, fence_1 = :y"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := fence.NewDynamoDB(1).Merge(tt.e); err != nil {
				t.Errorf("Merge(%+v): %v, want no error", tt.e, err)
			}
		})
	}
}

// TestMergeLeavesItsArgument checks that Merge writes new maps, so one
// set of expressions can be merged with several tokens.
func TestMergeLeavesItsArgument(t *testing.T) {
	names := map[string]string{"#a": "amount"}
	values := map[string]string{":other": "1"}
	e := fence.Expressions{Condition: "#a < :other", Update: "SET #a = :other", Names: names, Values: values}
	m, err := fence.NewDynamoDB(3).Merge(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || len(values) != 1 {
		t.Errorf("Merge changed its argument's maps: names %v, values %v", names, values)
	}
	if m.Values[":other"] != "1" || m.Names["#a"] != "amount" {
		t.Errorf("got names %v and values %v, want the argument's kept", m.Names, m.Values)
	}
	if !strings.Contains(m.Condition, e.Condition) {
		t.Errorf("got condition %q, want one containing the caller's %q", m.Condition, e.Condition)
	}
}
