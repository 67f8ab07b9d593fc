package client

import (
	"math/rand/v2"
	"time"
)

// backoff computes retry delays: exponential growth with full jitter.
type backoff struct {
	base, max time.Duration
}

// delay returns how long to wait before retry number attempt (0-based): a
// random duration in [0, min(max, base·2^attempt)], raised to floor when
// floor is larger, but never above max.
func (b backoff) delay(attempt int, floor time.Duration) time.Duration {
	ceil := b.base
	for i := 0; i < attempt && ceil < b.max; i++ {
		if ceil > b.max/2 {
			ceil = b.max
			break
		}
		ceil *= 2
	}
	ceil = min(ceil, b.max)
	d := rand.N(ceil + 1)
	return max(d, min(floor, b.max))
}
