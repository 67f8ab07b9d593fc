package chaos

import (
	"fmt"
	"testing"
	"time"
)

// rwGrant is a granted read/write lock acquire of client c in mode,
// invoked at inv and answered at ret (ms from t0), for ttl seconds.
func rwGrant(t0 time.Time, c int, mode string, slot int, token int64, inv, ret int, ttl int64) Op {
	slotJSON := ""
	if mode == "read" {
		slotJSON = fmt.Sprintf(`"slot":%d,`, slot)
	}
	acq := t0.Add(time.Duration(inv) * time.Millisecond)
	op := Op{Client: c, Owner: fmt.Sprintf("q%d", c), Kind: RWAcquire, Resource: "rw", Mode: mode, TTL: ttl, Status: 200,
		ContentType: "application/json", Invoke: acq, Return: t0.Add(time.Duration(ret) * time.Millisecond),
		Body: fmt.Appendf(nil, `{"acquired":true,"lease":{"name":"rw","mode":%q,%s"owner":"q%d","fencing_token":%d,"acquired_at":%q,"expires_at":%q}}`,
			mode, slotJSON, c, token, acq.UTC().Format(time.RFC3339Nano), acq.Add(time.Duration(ttl)*time.Second).UTC().Format(time.RFC3339Nano))}
	op.decode()
	return op
}

// TestRWHoldRules shows that the read/write lock rules on the clients'
// holds can fail: a writer's hold over a reader's is rw-exclusive's, more
// readers than R at once rw-readers'; readers alone, and a writer after
// the readers' holds ended, are neither.
func TestRWHoldRules(t *testing.T) {
	t0 := time.Now()
	cases := []struct {
		name    string
		readers int
		ops     []Op
		want    string
	}{
		{name: "ReadersShare", readers: 3, ops: []Op{rwGrant(t0, 0, "read", 0, 1, 0, 10, 2), rwGrant(t0, 1, "read", 1, 2, 20, 30, 2), rwGrant(t0, 2, "read", 2, 3, 40, 50, 2)}},
		{name: "WriterAfterReaders", readers: 3, ops: []Op{rwGrant(t0, 0, "read", 0, 1, 0, 10, 1), rwGrant(t0, 1, "write", 0, 2, 1000, 1010, 1)}},
		{name: "WriterOverReader", readers: 3, ops: []Op{rwGrant(t0, 0, "read", 0, 1, 0, 10, 2), rwGrant(t0, 1, "write", 0, 2, 500, 510, 2)}, want: RuleRWExclusive},
		{name: "WriterOverWriter", readers: 3, ops: []Op{rwGrant(t0, 0, "write", 0, 1, 0, 10, 2), rwGrant(t0, 1, "write", 0, 2, 500, 510, 2)}, want: RuleRWExclusive},
		{name: "MoreThanR", readers: 2, ops: []Op{rwGrant(t0, 0, "read", 0, 1, 0, 10, 2), rwGrant(t0, 1, "read", 1, 2, 20, 30, 2), rwGrant(t0, 2, "read", 2, 3, 40, 50, 2)}, want: RuleRWReaders},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.ops {
				tc.ops[i].ID = i
				if tc.ops[i].DecodeErr != "" {
					t.Fatalf("op %d: %s", i, tc.ops[i].DecodeErr)
				}
			}
			rep := Check(&History{Start: t0, Ops: tc.ops}, Options{Readers: tc.readers})
			for _, rule := range []string{RuleRWExclusive, RuleRWReaders} {
				if got, want := rep.Has(rule), rule == tc.want; got != want {
					t.Errorf("%s reported: %v, want %v (%v)", rule, got, want, rep.Violations)
				}
			}
		})
	}
}
