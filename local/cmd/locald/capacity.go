package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
)

// capacityFlags are the command-line flags of the capacity model.
type capacityFlags struct {
	mode      string // -capacity: on or off
	reserve   bool   // -reserve
	throttles throttleFlag
	pool      int // -account-concurrency
}

// register defines the flags on fs.
func (f *capacityFlags) register(fs *flag.FlagSet) {
	f.throttles = throttleFlag{}
	fs.StringVar(&f.mode, "capacity", "on", "on: model the stack's route throttles (429) and Lambda concurrency (500); off: no limits (benchmarks)")
	fs.BoolVar(&f.reserve, "reserve", false, "model the stack deployed with -c reserve=true: reserved concurrency (floors and caps) for acquire, wait, watch, renew and release")
	fs.Var(f.throttles, "throttle", "override route throttles by operationId, OPERATION=RATE:BURST[,...] (e.g. acquireWait=30:150), as the stack's -c throttle; repeatable")
	fs.IntVar(&f.pool, "account-concurrency", api.DefaultAccountConcurrency, "the modeled Lambda account concurrency limit")
}

// capacity returns the model the flags ask for: by default the default
// stack's (route throttles, one shared pool), with -reserve the stack's
// with -c reserve=true, with -capacity off none.
func (f capacityFlags) capacity() (local.Capacity, error) {
	switch f.mode {
	case "off":
		if f.reserve || len(f.throttles) > 0 || f.pool != api.DefaultAccountConcurrency {
			return local.Capacity{}, errors.New("-capacity off models no limit: drop -reserve, -throttle and -account-concurrency")
		}
		return local.Capacity{}, nil
	case "on":
	default:
		return local.Capacity{}, fmt.Errorf("-capacity %q: want on or off", f.mode)
	}
	c := local.Capacity{Mode: local.CapacityDefault, Throttles: f.throttles, AccountConcurrency: f.pool}
	if f.pool <= 0 {
		return c, fmt.Errorf("-account-concurrency %d: want at least 1", f.pool)
	}
	if f.reserve {
		c.Mode = local.CapacityReserve
	}
	left, err := c.Unreserved()
	if err != nil {
		return c, err
	}
	// Lambda refuses such reservations, so the stack would not deploy.
	if f.reserve && left < api.UnreservedMinimum {
		return c, fmt.Errorf("-reserve with -account-concurrency %d leaves %d unreserved; Lambda refuses reservations that leave less than %d",
			f.pool, left, api.UnreservedMinimum)
	}
	return c, nil
}

// throttleFlag is -throttle: route throttles by operationId, given as
// OPERATION=RATE:BURST, comma-separated or repeated.
type throttleFlag map[string]api.Throttle

func (t throttleFlag) String() string {
	var out []string
	for op, th := range t {
		out = append(out, fmt.Sprintf("%s=%g:%d", op, th.Rate, th.Burst))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// Set adds the throttles of v, parsed by api.ParseThrottles (the syntax of
// the CDK app's throttle context flag too).
func (t throttleFlag) Set(v string) error {
	parsed, err := api.ParseThrottles(v)
	if err != nil {
		return err
	}
	maps.Copy(t, parsed)
	return nil
}
