package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/ft288/locks/locklogic"
)

// TestResponseEncoding: the hand-written answers are byte for byte what
// encoding/json writes.
func TestResponseEncoding(t *testing.T) {
	lock := LockJSON{Resource: "payment:42", Owner: "w1", FencingToken: 1796212800000001,
		AcquiredAt: "2026-12-02T12:00:00.000Z", ExpiresAt: "2026-12-02T12:00:30.000Z"}
	odd := LockJSON{Resource: `a"b\c<d>e&f` + "\u2028\u2029\x00\x1f\b\f\n\r\t\x7f\xff€😀", Owner: "", FencingToken: -1}
	for name, v := range map[string]jsonAppender{
		"Acquired":     AcquireResponse{Acquired: true, Lock: &lock},
		"Held":         AcquireResponse{Resource: "payment:42"},
		"HeldUntil":    AcquireResponse{Resource: "payment:42", ExpiresAt: "2026-12-02T12:00:30.000Z"},
		"HeldQueued":   AcquireResponse{Resource: "payment:42", ExpiresAt: "2026-12-02T12:00:30.000Z", QueueTicket: "3ryokmsrhxukz"},
		"OddTicket":    AcquireResponse{Resource: "r", QueueTicket: odd.Resource},
		"Renewed":      RenewResponse{Renewed: true, Lock: lock},
		"Status":       lock,
		"OddStrings":   odd,
		"OddInAcquire": AcquireResponse{Acquired: true, Lock: &odd, Resource: odd.Resource, ExpiresAt: odd.Resource},
		"LockDelay":    LockJSON{Resource: "r", Owner: "w", FencingToken: 1, LockDelaySeconds: 300},
	} {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := v.appendJSON(nil); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
	// The answers written straight from a locklogic.Lock are those of
	// the exported shapes.
	l := locklogic.Lock{Resource: "job <7>", Owner: `"w1"`, FencingToken: 42,
		AcquiredAt: time.Date(2026, 12, 2, 12, 0, 0, 5e6, time.FixedZone("x", 3600)), ExpiresAt: time.UnixMilli(1796212830123)}
	lj := lockJSON(l)
	delayed := l
	delayed.LockDelay = 90 * time.Second
	for name, tc := range map[string]struct {
		got  jsonAppender
		want any
	}{
		"StatusFromLock":    {lockBody(l), lj},
		"LockDelayFromLock": {lockBody(delayed), lockJSON(delayed)},
		"AcquiredFromLock":  {acquiredBody(l), AcquireResponse{Acquired: true, Lock: &lj}},
		"RenewedFromLock":   {renewedBody(l), RenewResponse{Renewed: true, Lock: lj}},
	} {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.got.appendJSON(nil); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestAppendTime(t *testing.T) {
	for _, tt := range []time.Time{
		time.UnixMilli(0), time.UnixMilli(1796212830123), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 4, 5, 6, 7, 8e6, time.FixedZone("x", -7*3600)),
	} {
		if got, want := string(appendTime(nil, tt)), tt.UTC().Format(TimeFormat); got != want {
			t.Errorf("%v: got %s, want %s", tt, got, want)
		}
	}
}

// FuzzAppendJSONString: appendString writes what encoding/json writes, with
// and without HTML escaping.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "w1", `"\`, "<&>", "\u2028", "\xff", "\x00\x1f", "é😀", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
		// Without HTML escaping, as aws-lambda-go's Encoder writes a
		// response (appendResponse).
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if got, want := appendString(nil, s, &jsonSafe), bytes.TrimSuffix(buf.Bytes(), []byte("\n")); string(got) != string(want) {
			t.Fatalf("%q without HTML escaping: got %s, want %s", s, got, want)
		}
	})
}
