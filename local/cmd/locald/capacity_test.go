package main

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
)

// TestCapacityFlags: the flags select the model (default stack, reserve,
// off) and its overrides, and refuse what the stack could not be.
func TestCapacityFlags(t *testing.T) {
	cases := []struct {
		name           string
		args           []string
		wantErr        bool
		wantMode       local.CapacityMode
		wantUnreserved int
		wantThrottles  map[string]api.Throttle
	}{
		{name: "Default", wantMode: local.CapacityDefault, wantUnreserved: api.DefaultAccountConcurrency},
		{name: "Reserve", args: []string{"-reserve"}, wantMode: local.CapacityReserve,
			wantUnreserved: api.DefaultAccountConcurrency - api.AcquireReserve - api.WaitReserve - api.RenewReserve - api.ReleaseReserve - api.WatchReserve -
				api.LockSetReserve - api.LockSetWaitReserve},
		{name: "Off", args: []string{"-capacity", "off"}, wantMode: local.CapacityOff},
		{name: "Throttles", args: []string{"-throttle", "status=0:1,acquire=2.5:10", "-throttle", "renew=1:1", "-account-concurrency", "50"},
			wantMode: local.CapacityDefault, wantUnreserved: 50,
			wantThrottles: map[string]api.Throttle{"status": {Rate: 0, Burst: 1}, "acquire": {Rate: 2.5, Burst: 10}, "renew": {Rate: 1, Burst: 1}}},
		{name: "ErrOffWithReserve", args: []string{"-capacity", "off", "-reserve"}, wantErr: true},
		{name: "ErrOffWithThrottle", args: []string{"-capacity", "off", "-throttle", "status=1:1"}, wantErr: true},
		{name: "ErrMode", args: []string{"-capacity", "reserve"}, wantErr: true},
		{name: "ErrUnknownOperation", args: []string{"-throttle", "lock=1:1"}, wantErr: true},
		{name: "ErrThrottleSyntax", args: []string{"-throttle", "status=1"}, wantErr: true},
		{name: "ErrNegativeBurst", args: []string{"-throttle", "status=1:-1"}, wantErr: true},
		{name: "ErrZeroBurst", args: []string{"-throttle", "status=1:0"}, wantErr: true},
		{name: "ErrRateNaN", args: []string{"-throttle", "status=NaN:1"}, wantErr: true},
		{name: "WaitingRoute", args: []string{"-throttle", "acquireWait=30:150"}, wantMode: local.CapacityDefault,
			wantUnreserved: api.DefaultAccountConcurrency, wantThrottles: map[string]api.Throttle{"acquireWait": {Rate: 30, Burst: 150}}},
		{name: "ErrNoPool", args: []string{"-account-concurrency", "0"}, wantErr: true},
		// Lambda keeps api.UnreservedMinimum unreserved: such a stack
		// would not deploy.
		{name: "ErrReserveTooSmallAccount", args: []string{"-reserve", "-account-concurrency", "200"}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("locald", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var cf capacityFlags
			cf.register(fs)
			err := fs.Parse(tc.args)
			var c local.Capacity
			if err == nil {
				c, err = cf.capacity()
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if c.Mode != tc.wantMode {
				t.Errorf("got mode %s, want %s", c.Mode, tc.wantMode)
			}
			if left, _ := c.Unreserved(); tc.wantMode != local.CapacityOff && left != tc.wantUnreserved {
				t.Errorf("got %d unreserved, want %d", left, tc.wantUnreserved)
			}
			if len(c.Throttles) != len(tc.wantThrottles) {
				t.Errorf("got throttles %v, want %v", c.Throttles, tc.wantThrottles)
			}
			for op, th := range tc.wantThrottles {
				if c.Throttles[op] != th {
					t.Errorf("got throttles %v, want %v", c.Throttles, tc.wantThrottles)
				}
			}
		})
	}
}

// TestCapacityModel starts the binary with capacity flags: it logs the
// model it applies, and a route whose bucket is empty answers API
// Gateway's 429 {"message":"Too Many Requests"} (application/json) while
// the model is on.
func TestCapacityModel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		args           []string
		wantMode       string
		wantUnreserved int
		want429        bool
	}{
		// The status route admits one request, then none (rate 0).
		{"DefaultStack", []string{"-throttle", "status=0:1"}, "default", api.DefaultAccountConcurrency, true},
		{"Reserve", []string{"-reserve", "-throttle", "status=0:1"}, "reserve",
			api.DefaultAccountConcurrency - api.AcquireReserve - api.WaitReserve - api.RenewReserve - api.ReleaseReserve - api.WatchReserve -
				api.LockSetReserve - api.LockSetWaitReserve, true},
		{"Off", []string{"-capacity", "off"}, "off", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startLocaldArgs(t, tc.args)
			var model struct {
				Capacity struct {
					Mode       string
					Unreserved int
					Throttles  string
				}
			}
			for _, line := range strings.Split(p.Stdout(), "\n") {
				var l logLine
				if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "capacity model" {
					if err := json.Unmarshal([]byte(line), &model); err != nil {
						t.Fatal(err)
					}
				}
			}
			if c := model.Capacity; c.Mode != tc.wantMode || c.Unreserved != tc.wantUnreserved {
				t.Errorf("logged capacity model %+v, want mode %s and %d unreserved\nlog:\n%s", c, tc.wantMode, tc.wantUnreserved, p.Stdout())
			}
			if tc.want429 && !strings.Contains(model.Capacity.Throttles, "status=0/s burst 1") {
				t.Errorf("logged throttles %q, want status=0/s burst 1", model.Capacity.Throttles)
			}

			for i := range 3 {
				resp, err := http.Get(p.URL + "/locks/capacity-model")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := http.StatusNotFound // the absent lock
				if tc.want429 && i > 0 {
					want = http.StatusTooManyRequests
				}
				if resp.StatusCode != want {
					t.Fatalf("GET %d: got %d %s, want %d", i, resp.StatusCode, body, want)
				}
				if want != http.StatusTooManyRequests {
					continue
				}
				if string(body) != `{"message":"Too Many Requests"}` || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("GET %d: got %q (%s), want API Gateway's {\"message\":\"Too Many Requests\"} (application/json)",
						i, body, resp.Header.Get("Content-Type"))
				}
			}
		})
	}
}
