package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// A lock set's calls in the history (docs/api.md, "Lock sets"). A set is
// no new kind of item: each name is taken with the lock's own acquire
// write, renewed and released with the lock's own writes, so the proxy's
// records of a set's requests are lock writes of its names, and the lock
// model, the fencing, one-holder and fairness rules judge them as they
// are. What the clients were told is per name as well: setMembers turns
// each set call into one lock operation per name, which the workload
// records beside the call (mutual exclusion, no false grant, late write
// and recovery judge those), while the set's own rules (sets.go) judge the
// call.

// decodeSet decodes a set call's 200 answer and checks it against the
// request: a grant lists every name asked for, once, in byte order, each
// lease the caller's with the ttl asked; a refusal names one of the names;
// a renewal's or release's outcomes follow the request's locks.
func (op *Op) decodeSet() error {
	if op.Status == 204 {
		if len(op.Body) != 0 {
			return fmt.Errorf("204 with a body")
		}
		if op.Kind != SetRelease {
			return fmt.Errorf("204 to a %s", op.Kind)
		}
		return nil
	}
	if op.Status != 200 {
		return nil
	}
	switch op.Kind {
	case SetAcquire:
		var b struct {
			Acquired   *bool
			SetID      string `json:"set_id"`
			Locks      []lockJSON
			BlockedBy  string `json:"blocked_by"`
			FreeAt     string `json:"free_at"`
			Unreleased []string
			Ticket     string `json:"queue_ticket"`
		}
		if err := strictJSON(op.Body, &b); err != nil {
			return err
		}
		if b.Acquired == nil {
			return fmt.Errorf("no \"acquired\"")
		}
		if b.Ticket != "" && (op.Wait == 0 || *b.Acquired) {
			return fmt.Errorf("a queue_ticket in the answer to a grant or to a try")
		}
		if !*b.Acquired {
			op.BlockedBy, op.Unreleased, op.Ticket = b.BlockedBy, b.Unreleased, b.Ticket
			if !slices.Contains(op.Names, b.BlockedBy) || len(b.Locks) > 0 || b.SetID != "" {
				return fmt.Errorf("a refusal blocked by %q (not a name asked for), or with locks or a set id", b.BlockedBy)
			}
			return nil
		}
		want := slices.Clone(op.Names)
		slices.Sort(want)
		if !strings.HasPrefix(b.SetID, "set-") || len(b.Locks) != len(want) || len(b.Unreleased) > 0 {
			return fmt.Errorf("a grant of %d names with set_id %q and %d locks (and unreleased %q)", len(want), b.SetID, len(b.Locks), b.Unreleased)
		}
		for i, lj := range b.Locks {
			l, err := lj.lock()
			if err != nil {
				return err
			}
			l.Resource = lj.Resource
			switch {
			case l.Resource != want[i]:
				return fmt.Errorf("lock %d names %q, want %q (the names in byte order)", i, l.Resource, want[i])
			case l.Owner != op.Owner:
				return fmt.Errorf("lock %q names owner %q", l.Resource, l.Owner)
			case l.ExpiresAt-l.AcquiredAt != op.TTL*1000:
				return fmt.Errorf("lock %q: a grant of %d s lasts %d ms", l.Resource, op.TTL, l.ExpiresAt-l.AcquiredAt)
			}
			op.SetLocks = append(op.SetLocks, *l)
		}
		op.Granted = true
	case SetRenew, SetRelease:
		var b struct {
			Renewed  *bool
			Released *bool
			Locks    []struct {
				Resource string
				OK       bool
				Lock     *lockJSON
				Problem  *struct {
					Type   string
					Status int
				}
			}
		}
		if err := strictJSON(op.Body, &b); err != nil {
			return err
		}
		flag := b.Renewed
		if op.Kind == SetRelease {
			flag = b.Released
		}
		if flag == nil || len(b.Locks) != len(op.Names) {
			return fmt.Errorf("no renewed/released flag, or %d outcomes for %d locks", len(b.Locks), len(op.Names))
		}
		all := true
		for i, it := range b.Locks {
			item := SetItem{Resource: it.Resource, OK: it.OK}
			switch {
			case it.Resource != op.Names[i]:
				return fmt.Errorf("outcome %d names %q, want %q (the request's order)", i, it.Resource, op.Names[i])
			case it.OK == (it.Problem != nil):
				return fmt.Errorf("outcome %q: ok:%v with problem %v", it.Resource, it.OK, it.Problem != nil)
			case it.OK && op.Kind == SetRenew:
				if it.Lock == nil {
					return fmt.Errorf("renewed %q without its lease", it.Resource)
				}
				l, err := it.Lock.lock()
				if err != nil {
					return err
				}
				l.Resource = it.Lock.Resource
				if l.Resource != it.Resource || l.Owner != op.Owner || l.Token != op.Tokens[i] {
					return fmt.Errorf("renewed %q answers the lease %+v", it.Resource, *l)
				}
				item.Lock, item.Status = l, 200
			case it.OK:
				item.Status = 204
			default:
				item.Status, item.Slug = it.Problem.Status, it.Problem.Type[strings.LastIndexByte(it.Problem.Type, '/')+1:]
				if item.Slug != slug(Renew, item.Status) {
					return fmt.Errorf("outcome %q: status %d with problem type %q", it.Resource, item.Status, it.Problem.Type)
				}
			}
			all = all && it.OK
			op.Items = append(op.Items, item)
		}
		if *flag != all {
			return fmt.Errorf("renewed/released:%v, but the outcomes say %v", *flag, all)
		}
		if op.Kind == SetRelease && all {
			return fmt.Errorf("200 to a release of every name (want 204)")
		}
	}
	return nil
}

// setMembers returns the lock operations a set call stands for, one per
// name, each as the lock's own route would have answered for that name:
//
//   - a granted acquire: a granted Acquire of each name with its lease (a
//     refused or failed one: none; nobody relies on what it may hold);
//   - a renewal: a Renew of each name with its token and its outcome, or
//     the call's own answer when the call failed (503, no answer);
//   - a release: a Release of each name likewise (204 when all were).
//
// Members carry the call's client, owner, ttl, instance, phase, times and
// Call; they have no body.
func setMembers(op Op) []Op {
	base := Op{Client: op.Client, Owner: op.Owner, TTL: op.TTL, Instance: op.Instance, Phase: op.Phase,
		Invoke: op.Invoke, Return: op.Return, Member: true, Call: op.Call, Err: op.Err}
	var out []Op
	switch op.Kind {
	case SetAcquire:
		for i := range op.SetLocks {
			m := base
			m.Kind, m.Resource, m.Status, m.Granted = Acquire, op.SetLocks[i].Resource, 200, true
			l := op.SetLocks[i]
			m.Lock = &l
			out = append(out, m)
		}
	case SetRenew, SetRelease:
		for i, name := range op.Names {
			m := base
			m.Kind, m.Resource, m.Token, m.Status = Renew, name, op.Tokens[i], op.Status
			if op.Kind == SetRelease {
				m.Kind, m.TTL = Release, 0
			}
			switch {
			case op.Status == 200 && i < len(op.Items):
				it := op.Items[i]
				m.Status, m.Lock, m.Slug = it.Status, it.Lock, it.Slug
			case op.Status == 200:
				m.Status = 0 // malformed: the call's answers rule reports it
			}
			out = append(out, m)
		}
	}
	return out
}

// setLocksArg renders a renewal's or release's locks for an excerpt.
func setLocksArg(op Op) string {
	parts := make([]string, len(op.Names))
	for i, n := range op.Names {
		parts[i] = fmt.Sprintf("%q:%d", n, op.Tokens[i])
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// setBody is a set call's request body.
func setBody(op *Op) map[string]any {
	body := map[string]any{"owner": op.Owner}
	switch op.Kind {
	case SetAcquire:
		body["ttl_seconds"], body["names"] = op.TTL, op.Names
		if op.Wait > 0 {
			body["wait_seconds"] = op.Wait
		}
		if op.LockDelay > 0 {
			body["lock_delay_seconds"] = op.LockDelay
		}
		if op.QueueTicket != "" {
			body["queue_ticket"] = op.QueueTicket
		}
	case SetRenew, SetRelease:
		locks := make([]map[string]any, len(op.Names))
		for i, n := range op.Names {
			locks[i] = map[string]any{"resource": n, "fencing_token": op.Tokens[i]}
		}
		body["locks"] = locks
		if op.Kind == SetRenew {
			body["ttl_seconds"] = op.TTL
		}
	}
	return body
}
