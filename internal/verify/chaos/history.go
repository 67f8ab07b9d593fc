package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ft288/locks/internal/verify/faultproxy"
)

// Kind is one of the lock calls.
type Kind int

// The lock calls.
const (
	Acquire Kind = iota
	Renew
	Release
	Status
	// Watch is GET /locks/{resource}/watch?index=I&wait_seconds=N.
	Watch
	// The semaphore calls (/semaphores/{name}): a permit's acquire,
	// renew, release, and the semaphore's status.
	SemAcquire
	SemRenew
	SemRelease
	SemStatus
	// SemWatch is GET /semaphores/{name}/watch?index=I&wait_seconds=N.
	SemWatch
	// The lock set calls (/locksets/{prefix}, Op.Resource the prefix):
	// a set's acquire (a try, or with Wait a waiting round), its renewal
	// and its release. The workload records each with one member
	// operation per name (Op.Member: an Acquire, Renew or Release of that
	// name), so that every lock rule judges a set's names as locks
	// (setMembers).
	SetAcquire
	SetRenew
	SetRelease
	// The read/write lock calls (/rwlocks/{name}, Op.Mode the lease's
	// mode): a reader's or the writer's acquire (a try, or with Wait a
	// waiting round), its renewal and release (a reader's naming its
	// Slot), and the lock's status.
	RWAcquire
	RWRenew
	RWRelease
	RWStatus
)

// Sem reports whether k is a semaphore call.
func (k Kind) Sem() bool { return k >= SemAcquire && k <= SemWatch }

// Set reports whether k is a lock set call.
func (k Kind) Set() bool { return k >= SetAcquire && k <= SetRelease }

// RW reports whether k is a read/write lock call.
func (k Kind) RW() bool { return k >= RWAcquire && k <= RWStatus }

// Lock returns the lock call a semaphore or read/write lock call mirrors
// (k itself for a lock call): a permit, a reader's or a writer's lease is
// held, renewed and released as a lease is.
func (k Kind) Lock() Kind {
	switch k {
	case SemAcquire, RWAcquire:
		return Acquire
	case SemRenew, RWRenew:
		return Renew
	case SemRelease, RWRelease:
		return Release
	case SemStatus, RWStatus:
		return Status
	case SemWatch:
		return Watch
	}
	return k
}

func (k Kind) String() string {
	switch k {
	case SemAcquire:
		return "semaphore-acquire"
	case SemRenew:
		return "semaphore-renew"
	case SemRelease:
		return "semaphore-release"
	case SemStatus:
		return "semaphore-status"
	case SemWatch:
		return "semaphore-watch"
	case SetAcquire:
		return "set-acquire"
	case SetRenew:
		return "set-renew"
	case SetRelease:
		return "set-release"
	case RWAcquire:
		return "rw-acquire"
	case RWRenew:
		return "rw-renew"
	case RWRelease:
		return "rw-release"
	case RWStatus:
		return "rw-status"
	case Acquire:
		return "acquire"
	case Renew:
		return "renew"
	case Release:
		return "release"
	case Status:
		return "status"
	case Watch:
		return "watch"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Phase says when in a run an operation was invoked.
type Phase int

// The phases of a run.
const (
	// PhaseFaults: the proxy injects faults.
	PhaseFaults Phase = iota
	// PhaseRecovery: faults have stopped and every held-back write has
	// landed; every answer must be a success.
	PhaseRecovery
	// PhaseFinal: after every lease the store recorded has expired, a
	// fresh owner takes each resource; it must be granted.
	PhaseFinal
)

// Lock is a lease as an answer shows it, or a semaphore's permit (its
// Resource the semaphore's name, in slot Slot); times are epoch
// milliseconds of the serving instance's clock.
type Lock struct {
	Resource   string
	Owner      string
	Token      int64
	AcquiredAt int64
	ExpiresAt  int64
	Slot       int
}

// Op is one request of a history: what a client sent, when (invoke and
// return on the client's monotonic clock), and what it got back.
type Op struct {
	ID       int
	Client   int // -1 for the final prober
	Owner    string
	Kind     Kind
	Resource string
	// TTL is ttl_seconds (acquire, renew).
	TTL int64
	// Wait is an acquire's wait_seconds: how long the service may wait
	// for a held lock inside the request (0: it answers at once); for a
	// watch, its wait_seconds.
	Wait int64
	// Index is a watch's index query parameter: the index of the
	// watcher's last answer (0: none).
	Index int64
	// Token is the fencing_token sent (renew, release); 0 for none.
	Token int64
	// LockDelay is an acquire's lock_delay_seconds (0: none).
	LockDelay int64
	// QueueTicket is the queue_ticket a waiting acquire sent back: its
	// place in the lock's queue, from its previous round's answer.
	QueueTicket string
	// Permits is the N a semaphore acquire sent; Slot the slot a
	// semaphore renew or release named.
	Permits int64
	Slot    int64
	// Mode is a read/write lock call's "read" or "write" (its acquire's,
	// renewal's or release's lease).
	Mode     string
	Instance int
	Phase    Phase
	// Names are a set call's names as sent (a set acquire's names, a
	// renewal's or release's locks); Tokens, for a renewal or a release,
	// each lock's fencing_token.
	Names  []string
	Tokens []int64
	// Member marks the operation that one name of a set call stands for
	// (setMembers): the checker judges it as that lock's acquire, renew
	// or release, and the set call's answer on the call itself. Call is
	// the same nonzero number on a set call and its members.
	Member bool
	Call   int
	// Ask numbers a set client's asks (nonzero on its set acquires): the
	// acquires of one ask are for the same names, from its first try to
	// its grant (setclient.go).
	Ask int

	Invoke, Return time.Time

	// Err is set when no answer arrived (a dropped connection, a
	// timeout); Status is then 0.
	Err         string
	Status      int
	ContentType string
	RetryAfter  string
	Body        []byte

	// Decoded answer. Granted is acquire's "acquired": true; Lock is the
	// lease of a grant, a renew 200, a status 200 or a watch 200 (its live
	// lease); Watched is a watch 200's state; DecodeErr says the body did
	// not have the documented shape.
	Granted bool
	// Holders are a semaphore status's permits, SemPermits its N (0:
	// absent, the semaphore has no record).
	Holders    []Lock
	SemPermits int64
	// Ticket is a waiting acquire's queue_ticket when it ended held: its
	// place, for its next round.
	Ticket  string
	Lock    *Lock
	Watched *WatchAnswer
	// SetLocks are a granted set's leases (in name order); BlockedBy and
	// Unreleased a refused set's answer (Unreleased also a failed set
	// request's problem); Items a set renewal's or release's per-name
	// outcomes.
	SetLocks   []Lock
	BlockedBy  string
	Unreleased []string
	Items      []SetItem
	ProblemOK  bool // a problem+json body with this status and a type
	Slug       string
	DecodeErr  string
}

// WatchAnswer is the state a watch answered with (its Lock is Op.Lock).
type WatchAnswer struct {
	// Index is the state's index: 0 for a lock never taken, else 2 ×
	// Token, plus 1 once that lease has ended.
	Index   int64
	Changed bool
	// Token is the latest lease's fencing token (0: never taken).
	Token int64
}

// History is everything a run observed: the clients' operations and the
// proxy's records of the store requests, on one monotonic clock.
type History struct {
	// Start is when the run began; excerpts print times from it.
	Start time.Time
	Ops   []Op
	// Records are the proxy's records, with the store's real answers.
	Records []faultproxy.Record
	// RecoveryFrom is when faults stopped and every held write had
	// landed (zero: the run had no recovery phase).
	RecoveryFrom time.Time
	// Offsets are the instances' clock offsets from real time.
	Offsets []time.Duration
}

// SetItem is one name's outcome in a set renewal's or release's answer:
// Status is the status the lock's own route would have answered (200 or
// 204 when OK, else the problem's), Lock a renewal's renewed lease.
type SetItem struct {
	Resource string
	OK       bool
	Status   int
	Slug     string
	Lock     *Lock
}

// decode fills op's decoded fields from its body.
func (op *Op) decode() {
	if op.Err != "" {
		return
	}
	if op.Status >= 400 {
		var p struct {
			Type       string
			Status     int
			Title      string
			Detail     string
			Unreleased []string
		}
		if strings.HasPrefix(op.ContentType, "application/problem+json") && json.Unmarshal(op.Body, &p) == nil {
			op.Slug = p.Type[strings.LastIndexByte(p.Type, '/')+1:]
			op.ProblemOK = p.Status == op.Status && p.Type != "" && p.Title != "" && p.Detail != ""
			op.Unreleased = p.Unreleased
		}
		return
	}
	if op.Kind.Set() {
		if err := op.decodeSet(); err != nil {
			op.DecodeErr = err.Error()
		}
		return
	}
	var err error
	switch {
	case op.Status == 204:
		if len(op.Body) != 0 {
			err = fmt.Errorf("204 with a body")
		}
	case op.Status != 200:
	case op.Kind == Acquire:
		var b struct {
			Acquired *bool
			Lock     *lockJSON
			Resource string
			Ticket   string `json:"queue_ticket"`
		}
		if err = strictJSON(op.Body, &b); err == nil {
			op.Ticket = b.Ticket
			switch {
			case b.Ticket != "" && (op.Wait == 0 || (b.Acquired != nil && *b.Acquired)):
				err = fmt.Errorf("a queue_ticket in the answer to a grant or to an acquire that did not wait")
			case b.Acquired == nil:
				err = fmt.Errorf("no \"acquired\"")
			case *b.Acquired && b.Lock == nil:
				err = fmt.Errorf("acquired without a lock")
			case *b.Acquired:
				op.Granted = true
				op.Lock, err = b.Lock.lock()
			case b.Resource != op.Resource:
				err = fmt.Errorf("refusal names resource %q", b.Resource)
			}
		}
	case op.Kind == Renew:
		var b struct {
			Renewed bool
			Lock    *lockJSON
		}
		if err = strictJSON(op.Body, &b); err == nil {
			if !b.Renewed || b.Lock == nil {
				err = fmt.Errorf("200 without renewed:true and a lock")
			} else {
				op.Lock, err = b.Lock.lock()
			}
		}
	case op.Kind == Status:
		var b lockJSON
		if err = strictJSON(op.Body, &b); err == nil {
			op.Lock, err = b.lock()
		}
	case op.Kind == Watch:
		err = op.decodeWatch()
	case op.Kind.Sem():
		err = op.decodeSemaphore()
	case op.Kind.RW():
		err = op.decodeRW()
	}
	if err != nil {
		op.DecodeErr = err.Error()
	}
}

// decodeWatch decodes a watch 200 and checks that its fields agree with
// each other and with the request, as documented (api.md#watch): the index
// is 2 × fencing_token (+1 once the lease ended, 0 and no token for a lock
// never taken), the live lease is there exactly when the index is even and
// carries that token, and changed says the index differs from the one
// asked with.
func (op *Op) decodeWatch() error {
	var b struct {
		Resource string
		Index    *int64
		Changed  *bool
		Token    int64     `json:"fencing_token"`
		Lock     *lockJSON `json:"lock"`
	}
	if err := strictJSON(op.Body, &b); err != nil {
		return err
	}
	if b.Index == nil || b.Changed == nil {
		return fmt.Errorf("no \"index\" or \"changed\"")
	}
	a := &WatchAnswer{Index: *b.Index, Changed: *b.Changed, Token: b.Token}
	if b.Lock != nil {
		l, err := b.Lock.lock()
		if err != nil {
			return err
		}
		op.Lock = l
	}
	switch {
	case b.Resource != op.Resource:
		return fmt.Errorf("the answer names resource %q", b.Resource)
	case a.Index < 0:
		return fmt.Errorf("index %d", a.Index)
	case a.Index == 0 && (a.Token != 0 || op.Lock != nil):
		return fmt.Errorf("index 0 (never taken) with a token or a lease")
	case a.Index > 0 && a.Token != a.Index/2:
		return fmt.Errorf("index %d with fencing_token %d, not index/2", a.Index, a.Token)
	case a.Index > 0 && a.Index%2 == 0 && op.Lock == nil:
		return fmt.Errorf("index %d (a live lease) without the lease", a.Index)
	case a.Index%2 == 1 && op.Lock != nil:
		return fmt.Errorf("index %d (the lease ended) with a lease", a.Index)
	case op.Lock != nil && op.Lock.Token != a.Token:
		return fmt.Errorf("the lease carries token %d, the answer %d", op.Lock.Token, a.Token)
	case a.Changed != (a.Index != op.Index):
		return fmt.Errorf("changed:%v for index %d asked with index %d", a.Changed, a.Index, op.Index)
	}
	op.Watched = a
	return nil
}

// decodeSemaphore decodes a semaphore call's 200 answer (api.md,
// "Semaphores").
func (op *Op) decodeSemaphore() error {
	switch op.Kind {
	case SemAcquire:
		var b struct {
			Acquired *bool
			Permit   *permitJSON
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
		case *b.Acquired && b.Permit == nil:
			return fmt.Errorf("acquired without a permit")
		case *b.Acquired:
			op.Granted = true
			var err error
			op.Lock, err = b.Permit.lock()
			return err
		case b.Name != op.Resource:
			return fmt.Errorf("refusal names semaphore %q", b.Name)
		case b.FreeAt != "":
			if _, err := time.Parse(time.RFC3339Nano, b.FreeAt); err != nil {
				return fmt.Errorf("free_at %q", b.FreeAt)
			}
		}
	case SemRenew:
		var b struct {
			Renewed bool
			Permit  *permitJSON
		}
		if err := strictJSON(op.Body, &b); err != nil {
			return err
		}
		if !b.Renewed || b.Permit == nil {
			return fmt.Errorf("200 without renewed:true and a permit")
		}
		var err error
		op.Lock, err = b.Permit.lock()
		return err
	case SemStatus, SemWatch:
		// A watch answers the status, with its index (api.md#watch-a-semaphore).
		var b struct {
			Name    string
			Permits int64
			Holders *[]permitJSON
			Index   *int64
			Changed *bool
			Token   int64 `json:"fencing_token"`
		}
		if err := strictJSON(op.Body, &b); err != nil {
			return err
		}
		if b.Name != op.Resource || b.Holders == nil {
			return fmt.Errorf("a status of %q without holders", b.Name)
		}
		if op.Kind == SemWatch {
			switch {
			case b.Index == nil || b.Changed == nil:
				return fmt.Errorf("no \"index\" or \"changed\"")
			case *b.Index < 0 || *b.Changed != (*b.Index != op.Index):
				return fmt.Errorf("changed:%v for index %d asked with index %d", *b.Changed, *b.Index, op.Index)
			}
			op.Watched = &WatchAnswer{Index: *b.Index, Changed: *b.Changed, Token: b.Token}
		}
		op.SemPermits = b.Permits
		op.Holders = []Lock{}
		for _, h := range *b.Holders {
			l, err := h.lock()
			if err != nil {
				return err
			}
			op.Holders = append(op.Holders, *l)
		}
	}
	return nil
}

type permitJSON struct {
	Name string `json:"name"`
	Slot *int   `json:"slot"`
	lockJSON
}

func (p *permitJSON) lock() (*Lock, error) {
	if p.Slot == nil || *p.Slot < 0 {
		return nil, fmt.Errorf("a permit without a slot: %+v", *p)
	}
	l, err := p.lockJSON.lock()
	if err != nil {
		return nil, err
	}
	l.Resource, l.Slot = p.Name, *p.Slot
	return l, nil
}

type lockJSON struct {
	Resource     string `json:"resource"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencing_token"`
	AcquiredAt   string `json:"acquired_at"`
	ExpiresAt    string `json:"expires_at"`
}

func (l *lockJSON) lock() (*Lock, error) {
	acq, err1 := time.Parse(time.RFC3339Nano, l.AcquiredAt)
	exp, err2 := time.Parse(time.RFC3339Nano, l.ExpiresAt)
	if err1 != nil || err2 != nil || l.FencingToken <= 0 || l.Owner == "" {
		return nil, fmt.Errorf("malformed lock %+v", *l)
	}
	return &Lock{Resource: l.Resource, Owner: l.Owner, Token: l.FencingToken, AcquiredAt: acq.UnixMilli(), ExpiresAt: exp.UnixMilli()}, nil
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	return d.Decode(v)
}

// at formats t as seconds since start.
func at(start, t time.Time) string {
	if t.IsZero() {
		return "      -"
	}
	return fmt.Sprintf("%+8.3fs", t.Sub(start).Seconds())
}

// format renders op as one excerpt line: times, who, what was sent, what
// came back.
func (op Op) format(start time.Time) string {
	var req string
	switch op.Kind {
	case Acquire:
		req = fmt.Sprintf("POST /locks/%s {owner:%s ttl:%d}", op.Resource, op.Owner, op.TTL)
		if op.Wait > 0 {
			req = fmt.Sprintf("POST /locks/%s/wait {owner:%s ttl:%d wait:%d}", op.Resource, op.Owner, op.TTL, op.Wait)
		}
		if op.QueueTicket != "" {
			req = fmt.Sprintf("POST /locks/%s/wait {owner:%s ttl:%d wait:%d ticket:%s}", op.Resource, op.Owner, op.TTL, op.Wait, op.QueueTicket)
		}
	case Renew:
		req = fmt.Sprintf("POST /locks/%s/renew {owner:%s ttl:%d%s}", op.Resource, op.Owner, op.TTL, tokenArg(op.Token))
	case Release:
		req = fmt.Sprintf("DELETE /locks/%s {owner:%s%s}", op.Resource, op.Owner, tokenArg(op.Token))
	case Status:
		req = fmt.Sprintf("GET /locks/%s", op.Resource)
	case Watch:
		req = fmt.Sprintf("GET /locks/%s/watch?index=%d&wait_seconds=%d", op.Resource, op.Index, op.Wait)
	case SemAcquire:
		req = fmt.Sprintf("POST /semaphores/%s {owner:%s ttl:%d permits:%d}", op.Resource, op.Owner, op.TTL, op.Permits)
		if op.Wait > 0 {
			req = fmt.Sprintf("POST /semaphores/%s/wait {owner:%s ttl:%d permits:%d wait:%d%s}", op.Resource, op.Owner, op.TTL, op.Permits, op.Wait,
				map[bool]string{true: " ticket:" + op.QueueTicket}[op.QueueTicket != ""])
		}
	case SemRenew:
		req = fmt.Sprintf("POST /semaphores/%s/renew {owner:%s slot:%d ttl:%d%s}", op.Resource, op.Owner, op.Slot, op.TTL, tokenArg(op.Token))
	case SemRelease:
		req = fmt.Sprintf("DELETE /semaphores/%s {owner:%s slot:%d%s}", op.Resource, op.Owner, op.Slot, tokenArg(op.Token))
	case SemStatus:
		req = fmt.Sprintf("GET /semaphores/%s", op.Resource)
	case SemWatch:
		req = fmt.Sprintf("GET /semaphores/%s/watch?index=%d&wait_seconds=%d", op.Resource, op.Index, op.Wait)
	case SetAcquire:
		req = fmt.Sprintf("POST /locksets/%s {owner:%s ttl:%d names:%q}", op.Resource, op.Owner, op.TTL, op.Names)
		if op.Wait > 0 {
			req = fmt.Sprintf("POST /locksets/%s/wait {owner:%s ttl:%d names:%q wait:%d}", op.Resource, op.Owner, op.TTL, op.Names, op.Wait)
		}
	case SetRenew:
		req = fmt.Sprintf("POST /locksets/%s/renew {owner:%s ttl:%d locks:%s}", op.Resource, op.Owner, op.TTL, setLocksArg(op))
	case SetRelease:
		req = fmt.Sprintf("DELETE /locksets/%s {owner:%s locks:%s}", op.Resource, op.Owner, setLocksArg(op))
	case RWAcquire:
		req = fmt.Sprintf("POST /rwlocks/%s/%s {owner:%s ttl:%d}", op.Resource, op.Mode, op.Owner, op.TTL)
		if op.Wait > 0 {
			req = fmt.Sprintf("POST /rwlocks/%s/%s/wait {owner:%s ttl:%d wait:%d%s}", op.Resource, op.Mode, op.Owner, op.TTL, op.Wait,
				map[bool]string{true: " ticket:" + op.QueueTicket}[op.QueueTicket != ""])
		}
	case RWRenew:
		req = fmt.Sprintf("POST /rwlocks/%s/renew {owner:%s mode:%s%s ttl:%d%s}", op.Resource, op.Owner, op.Mode, rwSlotArg(op), op.TTL, tokenArg(op.Token))
	case RWRelease:
		req = fmt.Sprintf("DELETE /rwlocks/%s {owner:%s mode:%s%s%s}", op.Resource, op.Owner, op.Mode, rwSlotArg(op), tokenArg(op.Token))
	case RWStatus:
		req = fmt.Sprintf("GET /rwlocks/%s", op.Resource)
	}
	if op.Member {
		req = fmt.Sprintf("(a name of set call %d) ", op.Call) + req
	}
	if op.LockDelay > 0 {
		req += fmt.Sprintf(" lock-delay:%d", op.LockDelay)
	}
	var ans string
	switch {
	case op.Err != "":
		ans = "no answer: " + op.Err
	default:
		body := string(op.Body)
		if len(body) > 260 {
			body = body[:260] + "…"
		}
		ans = fmt.Sprintf("%d %s", op.Status, body)
		if op.RetryAfter != "" {
			ans += " [Retry-After: " + op.RetryAfter + "]"
		}
	}
	who := fmt.Sprintf("c%d", op.Client)
	if op.Client < 0 {
		who = "final"
	}
	return fmt.Sprintf("%s..%s  op#%d %s@i%d %s → %s", at(start, op.Invoke), at(start, op.Return), op.ID, who, op.Instance, req, ans)
}

func tokenArg(tok int64) string {
	if tok == 0 {
		return ""
	}
	return fmt.Sprintf(" token:%d", tok)
}
