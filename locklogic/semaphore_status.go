package locklogic

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// decodePermit reads slot k of item as a permit; ok is false when the
// slot holds no lease.
func decodePermit(name string, item map[string]types.AttributeValue, k int) (Permit, bool) {
	lock, ok := slotNames[k].decode(name, item)
	if !ok {
		return Permit{}, false
	}
	return Permit{Lock: lock, Slot: k}, true
}

// holders returns the permits of a semaphore item at now, by slot: the
// live ones, or with blocking those that keep their slot from others (live,
// or expired inside their lock-delay).
func holders(name string, item map[string]types.AttributeValue, now time.Time, blocking bool) []Permit {
	permits, ok := permitsOf(item)
	if !ok {
		return nil
	}
	var out []Permit
	for k := range int(permits) {
		a := &slotNames[k]
		if blocking {
			if _, b := a.blockedUntil(item, now); !b {
				continue
			}
		} else if !a.live(item, now) {
			continue
		}
		if p, ok := a.decode(name, item); ok {
			out = append(out, Permit{Lock: p, Slot: k, Permits: permits})
		}
	}
	return out
}

// SemaphoreStatus is a semaphore as status shows it.
type SemaphoreStatus struct {
	Name string
	// Permits is N; 0 when the semaphore has no record (never taken, or
	// garbage collected).
	Permits int64
	// Holders are the live permits, by slot.
	Holders []Permit
	// Counter is the latest permit's fencing token (0: none).
	Counter int64
}

// SemaphoreStatus returns the live permits of semaphore name with one
// strongly consistent read.
func (s *Service) SemaphoreStatus(ctx context.Context, name string) (SemaphoreStatus, error) {
	var v ValidationError
	ValidateSemaphoreName(name, &v)
	if err := v.Err(); err != nil {
		return SemaphoreStatus{}, err
	}
	item, err := s.semRead(ctx, name, Budget{})
	if err != nil {
		return SemaphoreStatus{}, storeErr("semaphore-status", name, err)
	}
	return statusOf(name, item, s.now()), nil
}

func statusOf(name string, item map[string]types.AttributeValue, now time.Time) SemaphoreStatus {
	st := SemaphoreStatus{Name: name, Holders: holders(name, item, now, false)}
	st.Permits, _ = permitsOf(item)
	st.Counter, _ = n(item, AttrCounter)
	return st
}
