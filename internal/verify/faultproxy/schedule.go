package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Rates gives, for each fault, the probability that one request gets it;
// the rest of the probability mass forwards the request untouched. The sum
// must not exceed 1.
type Rates map[Fault]float64

// DefaultMaxDelay bounds the delay a Schedule draws for Delay and, after
// the caller gave up, for Late.
const DefaultMaxDelay = 2 * time.Second

// DefaultRates turns every fault on: about one request in three is
// delayed or fails, at most a few percent of them in each way that leaves
// the write's fate unknown to the service.
func DefaultRates() Rates {
	return Rates{
		Delay:              0.10,
		InternalError:      0.03,
		Throttle:           0.03,
		ThroughputExceeded: 0.02,
		AppliedThen500:     0.03,
		AppliedThenReset:   0.03,
		AppliedThenCut:     0.03,
		Blackhole:          0.015,
		Late:               0.03,
	}
}

// Total returns the probability that a request gets some fault.
func (r Rates) Total() float64 {
	var t float64
	for _, p := range r {
		t += p
	}
	return t
}

// String lists the rates as ParseRates reads them, in fault order.
func (r Rates) String() string {
	var parts []string
	for _, f := range Faults() {
		if p := r[f]; p > 0 {
			parts = append(parts, f.String()+"="+strconv.FormatFloat(p, 'g', -1, 64))
		}
	}
	return strings.Join(parts, ",")
}

// ParseRates reads "name=p,name=p" with the fault names of Fault.String
// ("delay=0.1,late=0.03"); "all" is DefaultRates and "none" or "" no
// faults. A name may follow "all" to override its rate
// ("all,late=0.2").
func ParseRates(s string) (Rates, error) {
	r := Rates{}
	byName := map[string]Fault{}
	for _, f := range Faults() {
		byName[f.String()] = f
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		switch part {
		case "", "none":
			continue
		case "all":
			for f, p := range DefaultRates() {
				r[f] = p
			}
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		f, known := byName[name]
		if !ok || !known {
			names := make([]string, 0, len(byName))
			for n := range byName {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("fault rate %q: want name=probability with a name of %s, or all or none", part, strings.Join(names, ", "))
		}
		p, err := strconv.ParseFloat(val, 64)
		if err != nil || p < 0 || p > 1 {
			return nil, fmt.Errorf("fault rate %q: want a probability from 0 to 1", part)
		}
		r[f] = p
	}
	if t := r.Total(); t > 1 {
		return nil, fmt.Errorf("fault rates %s add up to %g, more than 1", r, t)
	}
	return r, nil
}

// Schedule is a seeded random Plan: every request draws one fault with the
// given Rates, and Delay and Late draw a delay from 0 to MaxDelay. The draw
// for a request depends only on Seed and the request's Seq, not on which
// goroutine asks first, so a seed fixes the fault of the n-th request the
// proxy receives (the order in which concurrent requests arrive is up to
// the scheduler).
type Schedule struct {
	Seed  uint64
	Rates Rates
	// MaxDelay bounds the drawn delays; DefaultMaxDelay when zero.
	MaxDelay time.Duration
}

// Random returns the Plan of Schedule{Seed: seed, Rates: rates}.
func Random(seed uint64, rates Rates) Plan {
	return Schedule{Seed: seed, Rates: rates}.Plan()
}

// Plan returns the schedule as a Plan.
func (s Schedule) Plan() Plan {
	maxDelay := s.MaxDelay
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	// Walk the faults in a fixed order so a seed means the same draw
	// whatever the map's iteration order.
	type step struct {
		f    Fault
		upTo float64
	}
	var steps []step
	var acc float64
	for _, f := range Faults() {
		if p := s.Rates[f]; p > 0 {
			acc += p
			steps = append(steps, step{f, acc})
		}
	}
	return func(r Request) Action {
		rng := rand.New(rand.NewPCG(s.Seed, uint64(r.Seq)))
		u := rng.Float64()
		delay := time.Duration(rng.Int64N(int64(maxDelay) + 1))
		for _, st := range steps {
			if u < st.upTo {
				act := Action{Fault: st.f}
				if st.f == Delay || st.f == Late {
					act.Delay = delay
				}
				return act
			}
		}
		return Action{}
	}
}
