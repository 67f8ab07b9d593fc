package chaos

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/internal/verify/faultproxy"
)

func TestSaveHistoryChecksTheSame(t *testing.T) {
	// A history with a violation (c1 granted while c0's lease was live)
	// and one without it: each, saved and loaded, gets the same report.
	for _, broken := range []bool{true, false} {
		f := newFake()
		f.op(0, Acquire, 0, 10, 200, f.granted("c0", 101, 2, 2000))
		f.write(storeAcquire, "c0", 2, 2000, 2, 8, "committed", 101, faultproxy.None, 200)
		at := 500
		if !broken {
			at = 2100
		}
		f.op(1, Acquire, at, at+10, 200, f.granted("c1", 102, at+2, 2000))
		f.write(storeAcquire, "c1", at+2, 2000, at+2, at+8, "committed", 102, faultproxy.None, 200)
		want := check(f)
		var buf bytes.Buffer
		if err := SaveHistory(&buf, &f.h); err != nil {
			t.Fatal(err)
		}
		h, err := LoadHistory(&buf)
		if err != nil {
			t.Fatal(err)
		}
		got := Check(h, Options{StoreBudget: time.Second, Slack: 500 * time.Millisecond})
		if broken != want.Has(RuleOneHolder) {
			t.Fatalf("broken %v: the original history's report: %v", broken, want.Violations)
		}
		str := func(r Report) []string {
			var s []string
			for _, v := range r.Violations {
				s = append(s, v.String())
			}
			return s
		}
		if !slices.Equal(str(got), str(want)) || got.Total() != want.Total() {
			t.Errorf("broken %v: loaded history's report %q, want %q", broken, str(got), str(want))
		}
	}
	if _, err := LoadHistory(strings.NewReader(`{"Version":2,"History":{}}`)); err == nil {
		t.Error("a history of another version loaded")
	}
}
