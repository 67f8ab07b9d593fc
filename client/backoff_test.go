package client

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := backoff{base: 50 * time.Millisecond, max: 2 * time.Second}
	tests := []struct {
		name     string
		attempt  int
		floor    time.Duration
		min, max time.Duration
	}{
		{"FirstUpToBase", 0, 0, 0, 50 * time.Millisecond},
		{"Doubles", 3, 0, 0, 400 * time.Millisecond},
		{"Capped", 10, 0, 0, 2 * time.Second},
		{"HugeAttemptCapped", 1000, 0, 0, 2 * time.Second},
		{"FloorIsLowerBound", 0, time.Second, time.Second, time.Second},
		{"FloorCappedAtMax", 0, 30 * time.Second, 2 * time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var seen time.Duration
			for range 200 {
				d := b.delay(tt.attempt, tt.floor)
				if d < tt.min || d > tt.max {
					t.Fatalf("delay(%d, %s): got %s, want in [%s, %s]", tt.attempt, tt.floor, d, tt.min, tt.max)
				}
				seen = max(seen, d)
			}
			if tt.min == 0 && seen < tt.max/2 {
				t.Errorf("delay(%d, %s): largest of 200 draws %s, want jitter spread up to %s", tt.attempt, tt.floor, seen, tt.max)
			}
		})
	}
}
