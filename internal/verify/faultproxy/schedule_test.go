package faultproxy

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestScheduleIsSeeded(t *testing.T) {
	const n = 20000
	rates := DefaultRates()
	a, b, other := Random(7, rates), Random(7, rates), Random(8, rates)
	counts := map[Fault]int{}
	same := 0
	// a is asked from the last request down, b from the first up: the
	// draw depends on Seq alone, not on the order of the calls.
	for i := n; i >= 1; i-- {
		x := a(Request{Seq: i})
		if x != a(Request{Seq: i}) {
			t.Fatalf("seq %d: two draws differ", i)
		}
		if x == other(Request{Seq: i}) {
			same++
		}
		counts[x.Fault]++
		switch x.Fault {
		case Delay, Late:
			if x.Delay < 0 || x.Delay > DefaultMaxDelay {
				t.Errorf("seq %d: %s delay %v, want 0..%v", i, x.Fault, x.Delay, DefaultMaxDelay)
			}
		default:
			if x.Delay != 0 {
				t.Errorf("seq %d: %s with a delay %v", i, x.Fault, x.Delay)
			}
		}
	}
	for i := 1; i <= 100; i++ {
		if a(Request{Seq: i}) != b(Request{Seq: i}) {
			t.Fatalf("seq %d: the same seed drew %v and %v", i, a(Request{Seq: i}), b(Request{Seq: i}))
		}
	}
	if same == n {
		t.Errorf("seeds 7 and 8 drew the same schedule")
	}
	for _, f := range Faults() {
		want := rates[f] * n
		if got := float64(counts[f]); math.Abs(got-want) > 4*math.Sqrt(want)+1 {
			t.Errorf("%s: drawn %v times in %d, want about %v", f, got, n, want)
		}
	}
	if got, want := float64(counts[None]), (1-rates.Total())*n; math.Abs(got-want) > 4*math.Sqrt(want) {
		t.Errorf("no fault: drawn %v times in %d, want about %v", got, n, want)
	}
}

func TestScheduleMaxDelay(t *testing.T) {
	p := Schedule{Seed: 1, Rates: Rates{Delay: 1}, MaxDelay: 10 * time.Millisecond}.Plan()
	for i := 1; i <= 1000; i++ {
		if a := p(Request{Seq: i}); a.Fault != Delay || a.Delay > 10*time.Millisecond {
			t.Fatalf("seq %d: got %+v, want a delay of at most 10ms", i, a)
		}
	}
}

func TestParseRates(t *testing.T) {
	cases := []struct {
		in   string
		want Rates
		err  string
	}{
		{in: "", want: Rates{}},
		{in: "none", want: Rates{}},
		{in: "all", want: DefaultRates()},
		{in: "delay=0.5,late=0.25", want: Rates{Delay: 0.5, Late: 0.25}},
		{in: "all,late=0.2", want: func() Rates { r := DefaultRates(); r[Late] = 0.2; return r }()},
		{in: "applied-cut=1", want: Rates{AppliedThenCut: 1}},
		{in: "bogus=0.1", err: "want name=probability"},
		{in: "delay", err: "want name=probability"},
		{in: "delay=2", err: "from 0 to 1"},
		{in: "delay=0.6,late=0.6", err: "more than 1"},
	}
	for _, tc := range cases {
		got, err := ParseRates(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRates(%q): got error %v, want one with %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("ParseRates(%q): %v", tc.in, err)
		case got.String() != tc.want.String():
			t.Errorf("ParseRates(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if r, _ := ParseRates(DefaultRates().String()); r.String() != DefaultRates().String() {
		t.Errorf("String does not round-trip: %s", r)
	}
}

func TestDecode(t *testing.T) {
	r := Record{
		Op:        "UpdateItem",
		Body:      []byte(`{"Key":{"resource":{"S":"r1"}},"UpdateExpression":"SET #e = :exp","ConditionExpression":"#o = :o","ExpressionAttributeNames":{"#e":"expires_at","#o":"owner"},"ExpressionAttributeValues":{":exp":{"N":"42"},":o":{"S":"w1"},":b":{"BOOL":true}}}`),
		Forwarded: true, StoreStatus: 200,
		StoreBody: []byte(`{"Attributes":{"resource":{"S":"r1"},"expires_at":{"N":"42"}}}`),
	}
	c, err := r.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if c.Key["resource"] != "r1" || c.Values[":exp"] != "42" || c.Values[":o"] != "w1" || c.Values[":b"] != "true" || c.Names["#e"] != "expires_at" {
		t.Errorf("request decoded as %+v", c)
	}
	if c.Item["expires_at"] != "42" || c.ErrorType != "" {
		t.Errorf("answer decoded as %+v", c)
	}
	r.StoreStatus, r.StoreBody = 400, []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}`)
	if c, _ := r.Decode(); c.ErrorType != "ConditionalCheckFailedException" || c.Item != nil {
		t.Errorf("failed condition decoded as %+v", c)
	}
	r.Forwarded = false
	if c, _ := r.Decode(); c.ErrorType != "" || c.Item != nil {
		t.Errorf("an unforwarded request has an answer: %+v", c)
	}
}
