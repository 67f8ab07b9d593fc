package chaos

import (
	"fmt"
	"time"
)

// rwLeaseJSON is a read/write lock's lease as the API shows it
// (api.RWLeaseJSON): the writer's (mode "write", no slot) or a reader's in
// its slot.
type rwLeaseJSON struct {
	Name             string `json:"name"`
	Mode             string `json:"mode"`
	Slot             *int   `json:"slot"`
	LockDelaySeconds int64  `json:"lock_delay_seconds"`
	lockJSON
}

// lock decodes l, checking its mode against want ("": either) and that a
// reader's lease has its slot and the writer's none.
func (l *rwLeaseJSON) lock(want string) (*Lock, error) {
	switch {
	case want != "" && l.Mode != want:
		return nil, fmt.Errorf("a %s lease answers a %s call", l.Mode, want)
	case l.Mode == "read" && (l.Slot == nil || *l.Slot < 0):
		return nil, fmt.Errorf("a reader's lease without a slot: %+v", *l)
	case l.Mode == "write" && l.Slot != nil:
		return nil, fmt.Errorf("the writer's lease with a slot: %+v", *l)
	case l.Mode != "read" && l.Mode != "write":
		return nil, fmt.Errorf("mode %q", l.Mode)
	}
	out, err := l.lockJSON.lock()
	if err != nil {
		return nil, err
	}
	out.Resource = l.Name
	if l.Slot != nil {
		out.Slot = *l.Slot
	}
	return out, nil
}

// decodeRW decodes a read/write lock call's 200 answer (api.md, "Read/write
// locks"): an acquire's lease or refusal, a renewal's lease, a status's
// writer (Op.Lock) and readers (Op.Holders).
func (op *Op) decodeRW() error {
	switch op.Kind {
	case RWAcquire:
		var b struct {
			Acquired *bool
			Lease    *rwLeaseJSON
			Name     string
			FreeAt   string `json:"free_at"`
			Ticket   string `json:"queue_ticket"`
		}
		if err := strictJSON(op.Body, &b); err != nil {
			return err
		}
		op.Ticket = b.Ticket
		switch {
		case b.Acquired == nil:
			return fmt.Errorf("no \"acquired\"")
		case b.Ticket != "" && (op.Wait == 0 || *b.Acquired):
			return fmt.Errorf("a queue_ticket in the answer to a grant or to an acquire that did not wait")
		case *b.Acquired && b.Lease == nil:
			return fmt.Errorf("acquired without a lease")
		case *b.Acquired:
			op.Granted = true
			var err error
			op.Lock, err = b.Lease.lock(op.Mode)
			return err
		case b.Name != op.Resource:
			return fmt.Errorf("refusal names read/write lock %q", b.Name)
		case b.FreeAt != "":
			if _, err := time.Parse(time.RFC3339Nano, b.FreeAt); err != nil {
				return fmt.Errorf("free_at %q", b.FreeAt)
			}
		}
	case RWRenew:
		var b struct {
			Renewed bool
			Lease   *rwLeaseJSON
		}
		if err := strictJSON(op.Body, &b); err != nil {
			return err
		}
		if !b.Renewed || b.Lease == nil {
			return fmt.Errorf("200 without renewed:true and a lease")
		}
		var err error
		if op.Lock, err = b.Lease.lock(op.Mode); err == nil && op.Mode == "read" && int64(op.Lock.Slot) != op.Slot {
			err = fmt.Errorf("slot %d renewed, slot %d answered", op.Slot, op.Lock.Slot)
		}
		return err
	case RWStatus:
		var b struct {
			Name    string
			Writer  *rwLeaseJSON
			Readers *[]rwLeaseJSON
		}
		if err := strictJSON(op.Body, &b); err != nil {
			return err
		}
		if b.Name != op.Resource || b.Readers == nil {
			return fmt.Errorf("a status of %q without readers", b.Name)
		}
		if b.Writer != nil {
			l, err := b.Writer.lock("write")
			if err != nil {
				return err
			}
			op.Lock = l
		}
		op.Holders = []Lock{}
		for _, r := range *b.Readers {
			l, err := r.lock("read")
			if err != nil {
				return err
			}
			op.Holders = append(op.Holders, *l)
		}
	}
	return nil
}

// rwSlotArg renders a reader's slot for an excerpt.
func rwSlotArg(op Op) string {
	if op.Mode != "read" {
		return ""
	}
	return fmt.Sprintf(" slot:%d", op.Slot)
}
