package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// TestWithLockDelay: an acquire with WithLockDelay carries
// lock_delay_seconds, and the lease reports the delay the service granted;
// an invalid delay is ErrValidation before anything is sent.
func TestWithLockDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		try       bool // TryAcquire, else Acquire
		opts      []client.AcquireOption
		wantSent  int64 // lock_delay_seconds in the request, 0: absent
		wantErr   error
		wantCalls int
	}{
		{name: "TryAcquire", try: true, opts: []client.AcquireOption{client.WithLockDelay(time.Minute)}, wantSent: 60, wantCalls: 1},
		{name: "Acquire", opts: []client.AcquireOption{client.WithLockDelay(5 * time.Second)}, wantSent: 5, wantCalls: 1},
		{name: "Zero", try: true, opts: []client.AcquireOption{client.WithLockDelay(0)}, wantCalls: 1},
		{name: "None", try: true, wantCalls: 1},
		{name: "ErrFraction", try: true, opts: []client.AcquireOption{client.WithLockDelay(1500 * time.Millisecond)}, wantErr: client.ErrValidation},
		{name: "ErrNegative", opts: []client.AcquireOption{client.WithLockDelay(-time.Second)}, wantErr: client.ErrValidation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPI()
				c := newFakeClient(t, f, client.WithoutKeepAlive())
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				acquire := c.Acquire
				if tt.try {
					acquire = c.TryAcquire
				}
				l, err := acquire(ctx, "r", "", 30*time.Second, tt.opts...)
				calls := f.log("acquire")
				if len(calls) != tt.wantCalls {
					t.Fatalf("acquires: got %v, want %d", calls, tt.wantCalls)
				}
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Errorf("got %v, want %v", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(context.Background())
				if got := calls[0].Delay; got != tt.wantSent {
					t.Errorf("lock_delay_seconds sent: got %d, want %d", got, tt.wantSent)
				}
				if got := l.Lock().LockDelaySeconds; got != tt.wantSent {
					t.Errorf("lease's LockDelaySeconds: got %d, want %d", got, tt.wantSent)
				}
			})
		})
	}
}
