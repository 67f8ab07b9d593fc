package client

import (
	"context"
	"time"
)

// KeepAlive starts renewing the lease in the background unless that is
// under way, until the lease ends or ctx does. Leases do it from their
// grant unless the Client was made WithoutKeepAlive.
func (l *Lease) KeepAlive(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.kaDone != nil {
		return
	}
	kctx, cancel := context.WithCancel(ctx)
	l.kaCancel, l.kaDone = cancel, make(chan struct{})
	go l.keepAlive(kctx, l.kaDone)
}

// renewedAt returns when the request of the latest grant or renewal was
// sent.
func (l *Lease) renewedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start
}

func (l *Lease) keepAlive(ctx context.Context, done chan struct{}) {
	defer close(done)
	interval := min(l.ttl/3, roundLimit(l.ttl, l.margin))
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		if ctx.Err() != nil || l.ctx.Err() != nil {
			return
		}
		// Look again when the timer fires: a Renew by hand may have moved
		// the start meanwhile.
		if wait := time.Until(l.renewedAt().Add(interval)); wait > 0 {
			if t == nil {
				t = time.NewTimer(wait)
			} else {
				t.Reset(wait)
			}
			select {
			case <-ctx.Done():
			case <-l.ctx.Done():
			case <-t.C:
			}
			continue
		}
		if !l.renewUntilDeadline(ctx, interval) {
			return
		}
	}
}

// renewUntilDeadline renews the lease, retrying temporary failures with
// short backoff until the local deadline. It returns false when the lease
// ended or ctx did.
func (l *Lease) renewUntilDeadline(ctx context.Context, interval time.Duration) bool {
	b := backoff{base: l.c.backoff.base, max: max(l.c.backoff.base, min(l.c.backoff.max, l.ttl/8))}
	for attempt := 0; ; attempt++ {
		deadline := l.Deadline()
		t0 := time.Now()
		if !t0.Before(deadline) || l.ctx.Err() != nil {
			return false
		}
		end := t0.Add(interval)
		if deadline.Before(end) {
			end = deadline
		}
		actx, cancel := context.WithDeadline(ctx, end)
		err := l.Renew(actx)
		cancel()
		if err == nil {
			return true
		}
		if l.ctx.Err() != nil || ctx.Err() != nil {
			return false
		}
		t := time.NewTimer(min(b.delay(attempt, 0), time.Until(deadline)))
		select {
		case <-ctx.Done():
		case <-l.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// stopKeepAlive stops the background renewals and waits for them to end.
func (l *Lease) stopKeepAlive() {
	l.mu.Lock()
	cancel, done := l.kaCancel, l.kaDone
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
