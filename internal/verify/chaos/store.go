package chaos

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ft288/locks/internal/verify/faultproxy"
	"github.com/ft288/locks/locklogic"
)

// storeKind is what a store request does to a lock.
type storeKind int

const (
	storeAcquire storeKind = iota
	storeRenew
	storeRelease
	storeRead
)

func (k storeKind) String() string {
	return [...]string{"acquire-write", "renew-write", "release-write", "read"}[k]
}

// outcome is what became of a store request.
type outcome int

const (
	// notSent: the proxy answered for the store (a 5xx, throttling) or
	// held the request forever; the store never saw it.
	notSent outcome = iota
	// applied: the store answered 200 (a write committed, a read read).
	applied
	// refused: the condition failed (ConditionalCheckFailedException).
	refused
	// failedOther: any other store error; nothing changed.
	failedOther
	// unknownOutcome: the proxy could not read the store's answer.
	unknownOutcome
)

// storeOp is one proxy record read as a lock operation: which resource,
// with which :now, and whether and what the store committed.
type storeOp struct {
	rec      *faultproxy.Record
	kind     storeKind
	resource string
	owner    string // :o (writes)
	now      int64  // :now, epoch ms of the serving instance's clock
	iss      int64  // :iss (acquire): the request's issue time, for the same-owner branch; :now when absent
	gid      string // :gid (acquire): the request's grant id
	exp      int64  // :exp (acquire, renew)
	base     int64  // :base (acquire): the new counter's start when the item is absent
	tok      int64  // :tok, 0 when the write carries no token
	// full says a read is strongly consistent and returns the whole item
	// (status, and the read that explains a refused renew or release).
	// A waiting acquire's peeks are neither: eventually consistent hints
	// of expires_at and released_at only, never an answer's evidence.
	full    bool
	outcome outcome
	// item is the store's item: what a committed acquire or renew wrote
	// (ReturnValues ALL_NEW), what a read found (nil: absent).
	item *storeItem
}

// storeItem is a lock item as the store returned it.
type storeItem struct {
	owner                                   string
	token, acquiredAt, renewedAt, expiresAt int64
	released                                bool
}

// decodeRecords reads every lock request among recs; requests the service
// never makes (table setup) are skipped.
func decodeRecords(recs []faultproxy.Record) ([]*storeOp, error) {
	var out []*storeOp
	for i := range recs {
		r := &recs[i]
		if r.Op != "UpdateItem" && r.Op != "GetItem" {
			continue
		}
		c, err := r.Decode()
		if err != nil {
			return nil, err
		}
		op := &storeOp{rec: r, resource: c.Key[locklogic.AttrResource]}
		if r.Op == "GetItem" {
			op.kind = storeRead
			op.full = c.ConsistentRead && c.ProjectionExpression == ""
		} else {
			op.kind = writeKind(c)
			op.owner = c.Values[":o"]
			op.now = num(c.Values[":now"])
			op.iss = op.now
			if v, ok := c.Values[":iss"]; ok {
				op.iss = num(v)
			}
			op.gid = c.Values[":gid"]
			op.exp = num(c.Values[":exp"])
			op.base = num(c.Values[":base"])
			op.tok = num(c.Values[":tok"])
		}
		switch {
		case !r.Forwarded:
			op.outcome = notSent
		case r.ForwardErr != "":
			op.outcome = unknownOutcome
		case r.StoreStatus == 200:
			op.outcome = applied
		case c.ErrorType == "ConditionalCheckFailedException":
			op.outcome = refused
		default:
			op.outcome = failedOther
		}
		if c.Item != nil {
			it := &storeItem{
				owner:      c.Item[locklogic.AttrOwner],
				token:      num(c.Item[locklogic.AttrToken]),
				acquiredAt: num(c.Item[locklogic.AttrAcquiredAt]),
				renewedAt:  num(c.Item[locklogic.AttrRenewedAt]),
				expiresAt:  num(c.Item[locklogic.AttrExpiresAt]),
			}
			_, it.released = c.Item[locklogic.AttrReleasedAt]
			op.item = it
		}
		out = append(out, op)
	}
	return out, nil
}

// writeKind tells the three lock writes apart by what they set: only
// acquire bumps the token, only release sets released_at.
func writeKind(c faultproxy.Call) storeKind {
	placeholder := func(attr string) string {
		for p, name := range c.Names {
			if name == attr {
				return p
			}
		}
		return "\x00"
	}
	set, _, _ := strings.Cut(c.UpdateExpression, " REMOVE ")
	switch {
	case strings.Contains(set, placeholder(locklogic.AttrToken)+" = "):
		return storeAcquire
	case strings.Contains(set, placeholder(locklogic.AttrReleasedAt)+" = "):
		return storeRelease
	}
	return storeRenew
}

func num(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// format renders the store request as one excerpt line.
func (s *storeOp) format(start time.Time) string {
	r := s.rec
	var req string
	switch s.kind {
	case storeRead:
		req = "GetItem " + s.resource
		if !s.full {
			req = "GetItem (eventually consistent peek) " + s.resource
		}
	default:
		req = fmt.Sprintf("UpdateItem %s %s owner:%s :now=%d", s.kind, s.resource, s.owner, s.now)
		if s.exp != 0 {
			req += fmt.Sprintf(" :exp=%d", s.exp)
		}
		if s.tok != 0 {
			req += fmt.Sprintf(" :tok=%d", s.tok)
		}
	}
	var ans string
	switch s.outcome {
	case notSent:
		ans = "not sent to the store"
	case unknownOutcome:
		ans = "store unreachable: " + r.ForwardErr
	case refused:
		ans = "store: condition failed"
	case failedOther:
		ans = fmt.Sprintf("store: %d %s", r.StoreStatus, r.StoreBody)
	case applied:
		switch {
		case s.item == nil && s.kind == storeRead:
			ans = "store: no item"
		case s.item == nil:
			ans = "store: committed"
		default:
			ans = "store: " + map[bool]string{true: "committed ", false: ""}[s.kind != storeRead] + s.item.String()
		}
	}
	caller := "caller got no answer"
	if r.CallerStatus != 0 {
		caller = fmt.Sprintf("caller got %d", r.CallerStatus)
	}
	fault := r.Fault.String()
	return fmt.Sprintf("%s..%s  store#%d [%s, %s] %s → %s", at(start, r.Received), at(start, r.Answered), r.Seq, fault, caller, req, ans)
}

func (it *storeItem) String() string {
	s := fmt.Sprintf("{owner:%s token:%d acquired_at:%d renewed_at:%d expires_at:%d", it.owner, it.token, it.acquiredAt, it.renewedAt, it.expiresAt)
	if it.released {
		s += " released"
	}
	return s + "}"
}
