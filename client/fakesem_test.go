package client_test

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ft288/locks/client"
)

// fakeSem is the semaphore routes of the service in memory, as an
// http.RoundTripper: acquire (waiting with queue tickets, as the service
// will once it waits for permits), renew, release, status, watch and the
// admin list and force release. It logs every request; intercept scripts
// failures as fakeAPI's does.
type fakeSem struct {
	// refuseWait answers 422 naming wait_seconds to an acquire that has
	// it, as the service does until it waits for permits.
	refuseWait bool
	// oldStack: a stack from before the waiting routes, as fakeAPI's.
	oldStack  bool
	intercept func(c semCall) (*http.Response, error)

	mu      sync.Mutex
	sems    map[string]*fakeSemaphore
	token   int64
	calls   []semCall
	tickets int
}

type fakeSemaphore struct {
	permits int
	slots   map[int]*fakePermit
	counter int64
}

type fakePermit struct {
	owner    string
	token    int64
	acquired time.Time
	expires  time.Time
	released bool
	forced   bool
}

// semCall is one request fakeSem received.
type semCall struct {
	At      time.Time
	Op      string // acquire, renew, release, status, watch, list, force
	Route   string // an acquire's: "try" or "wait"
	Name    string
	Owner   string
	Permits int
	Slot    int
	Token   int64
	TTL     time.Duration
	Wait    time.Duration
	Ticket  string
	Reason  string
}

func newFakeSem() *fakeSem { return &fakeSem{sems: map[string]*fakeSemaphore{}, token: 5_000} }

func (f *fakeSem) RoundTrip(r *http.Request) (*http.Response, error) {
	var body struct {
		Owner   string `json:"owner"`
		Permits int    `json:"permits"`
		Slot    int    `json:"slot"`
		TTL     int64  `json:"ttl_seconds"`
		Token   int64  `json:"fencing_token"`
		Wait    int64  `json:"wait_seconds"`
		Queue   string `json:"queue_ticket"`
		Reason  string `json:"reason"`
	}
	if err := readBody(r, &body); err != nil {
		return nil, fmt.Errorf("fake semaphores: %w", err)
	}
	c := semCall{At: time.Now(), Owner: body.Owner, Permits: body.Permits, Slot: body.Slot, Token: body.Token,
		TTL: time.Duration(body.TTL) * time.Second, Wait: time.Duration(body.Wait) * time.Second, Ticket: body.Queue, Reason: body.Reason}
	path := r.URL.Path
	switch {
	case path == "/admin/semaphores" && r.Method == http.MethodGet:
		c.Op, c.Name = "list", r.URL.Query().Get("prefix")
	case strings.HasPrefix(path, "/admin/semaphores/") && r.Method == http.MethodDelete:
		c.Op, c.Name = "force", strings.TrimPrefix(path, "/admin/semaphores/")
	case strings.HasPrefix(path, "/semaphores/"):
		c.Name = strings.TrimPrefix(path, "/semaphores/")
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(c.Name, "/renew"):
			c.Op, c.Name = "renew", strings.TrimSuffix(c.Name, "/renew")
		case r.Method == http.MethodPost && strings.HasSuffix(c.Name, "/wait"):
			c.Op, c.Route, c.Name = "acquire", "wait", strings.TrimSuffix(c.Name, "/wait")
		case r.Method == http.MethodPost:
			c.Op, c.Route = "acquire", "try"
		case r.Method == http.MethodDelete:
			c.Op = "release"
		case r.Method == http.MethodGet && strings.HasSuffix(c.Name, "/watch"):
			c.Op, c.Name = "watch", strings.TrimSuffix(c.Name, "/watch")
			w, _ := strconv.ParseInt(r.URL.Query().Get("wait_seconds"), 10, 64)
			c.Wait = time.Duration(w) * time.Second
			c.Token, _ = strconv.ParseInt(r.URL.Query().Get("index"), 10, 64) // the index
		case r.Method == http.MethodGet:
			c.Op = "status"
		}
	}
	if c.Op == "" {
		return nil, fmt.Errorf("fake semaphores: unexpected %s %s", r.Method, r.URL)
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	intercept := f.intercept
	f.mu.Unlock()
	return fakeAnswer(r, intercept, c, func() *http.Response {
		if resp := refusal(c.Route, c.Wait, c.Ticket, f.oldStack, f.refuseWait); c.Op == "acquire" && resp != nil {
			return resp
		}
		return f.serveWait(c)
	})
}

// serveWait holds a waiting acquire while the semaphore is full, as the
// service holds a waiting lock acquire, and a watch until the index moves.
func (f *fakeSem) serveWait(c semCall) *http.Response {
	end := c.At.Add(c.Wait - 500*time.Millisecond)
	for c.Op == "acquire" && c.Wait > 0 && time.Now().Before(end) && f.full(c.Name, c.Owner) {
		time.Sleep(10 * time.Millisecond)
	}
	for c.Op == "watch" && time.Now().Before(c.At.Add(c.Wait)) && f.index(c.Name) == c.Token {
		time.Sleep(10 * time.Millisecond)
	}
	return f.serve(c)
}

func (p *fakePermit) live(now time.Time) bool {
	return p != nil && !p.released && now.Before(p.expires)
}

// full reports whether owner would find no slot of name.
func (f *fakeSem) full(name, owner string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sems[name]
	if s == nil {
		return false
	}
	now, n := time.Now(), 0
	for _, p := range s.slots {
		if p.live(now) {
			if p.owner == owner {
				return false
			}
			n++
		}
	}
	return n >= s.permits
}

func (f *fakeSem) index(name string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.indexOf(f.sems[name], time.Now())
}

func (f *fakeSem) indexOf(s *fakeSemaphore, now time.Time) int64 {
	if s == nil || s.counter == 0 {
		return 0
	}
	live := 0
	for _, p := range s.slots {
		if p.live(now) {
			live++
		}
	}
	return 2*s.counter + 1 - int64(live)
}

func (f *fakeSem) serve(c semCall) *http.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	s := f.sems[c.Name]
	switch c.Op {
	case "acquire":
		if s == nil {
			s = &fakeSemaphore{permits: c.Permits, slots: map[int]*fakePermit{}}
			f.sems[c.Name] = s
		}
		free, mine, live := -1, -1, 0
		for k := 0; k < s.permits; k++ {
			p := s.slots[k]
			switch {
			case p.live(now) && p.owner == c.Owner:
				mine = k
				live++
			case p.live(now):
				live++
			case free < 0:
				free = k
			}
		}
		if c.Permits != s.permits {
			if live > 0 {
				return jsonResponse(409, nil, map[string]any{"type": client.ProblemTypeBase + "permits-mismatch",
					"title": "Semaphore permits mismatch", "status": 409, "permits": s.permits})
			}
			s.permits, s.slots, free, mine = c.Permits, map[int]*fakePermit{}, 0, -1
		}
		k := mine
		if k < 0 {
			k = free
		}
		if k < 0 {
			var freeAt time.Time
			for _, p := range s.slots {
				if freeAt.IsZero() || p.expires.Before(freeAt) {
					freeAt = p.expires
				}
			}
			full := map[string]any{"acquired": false, "name": c.Name, "free_at": freeAt.Format(time.RFC3339Nano)}
			if c.Wait > 0 {
				ticket := c.Ticket
				if ticket == "" {
					f.tickets++
					ticket = "st" + strconv.Itoa(f.tickets)
				}
				full["queue_ticket"] = ticket
			}
			secs := int(freeAt.Sub(now).Seconds()) + 1
			return jsonResponse(200, map[string]string{"Retry-After": strconv.Itoa(secs)}, full)
		}
		f.token++
		s.counter = f.token
		s.slots[k] = &fakePermit{owner: c.Owner, token: f.token, acquired: now, expires: now.Add(c.TTL)}
		return jsonResponse(200, nil, map[string]any{"acquired": true, "permit": s.slots[k].json(c.Name, k)})
	case "status", "watch":
		holders := []map[string]any{}
		body := map[string]any{"name": c.Name, "holders": &holders}
		if s != nil {
			body["permits"] = s.permits
			for _, k := range sortedSlots(s) {
				if s.slots[k].live(now) {
					holders = append(holders, s.slots[k].json(c.Name, k))
				}
			}
			if c.Op == "watch" && s.counter > 0 {
				body["fencing_token"] = s.counter
			}
		}
		if c.Op == "watch" {
			idx := f.indexOf(s, now)
			body["index"], body["changed"] = idx, idx != c.Token
		}
		return jsonResponse(200, nil, body)
	case "list":
		rows := []map[string]any{}
		for _, name := range sortedNames(f.sems) {
			if !strings.HasPrefix(name, c.Name) {
				continue
			}
			for _, k := range sortedSlots(f.sems[name]) {
				if p := f.sems[name].slots[k]; p.live(now) {
					row := p.json(name, k)
					row["permits"] = f.sems[name].permits
					rows = append(rows, row)
				}
			}
		}
		return jsonResponse(200, nil, map[string]any{"holders": rows})
	case "force":
		var p *fakePermit
		if s != nil {
			p = s.slots[c.Slot]
		}
		if !p.live(now) {
			return problemResponse(404, "not-found")
		}
		ended := p.json(c.Name, c.Slot)
		ended["permits"] = s.permits
		if c.Token != 0 && c.Token != p.token {
			return jsonResponse(409, nil, map[string]any{"type": client.ProblemTypeBase + "stale-token",
				"title": "stale-token", "status": 409, "current": ended})
		}
		p.expires, p.forced = now, true
		return jsonResponse(200, nil, map[string]any{"ended": ended, "reason": c.Reason, "immediate": true,
			"free_at": now.Format(time.RFC3339Nano)})
	}
	// renew and release
	var p *fakePermit
	if s != nil && c.Slot < s.permits {
		p = s.slots[c.Slot]
	}
	switch {
	case p != nil && p.forced && p.owner == c.Owner:
		return jsonResponse(404, nil, map[string]any{"type": client.ProblemTypeBase + "not-found", "title": "Not found",
			"status": 404, "force_released": true})
	case !p.live(now):
		return problemResponse(404, "not-found")
	case p.owner != c.Owner:
		return problemResponse(403, "forbidden")
	case c.Token != 0 && c.Token != p.token:
		return problemResponse(409, "stale-token")
	}
	if c.Op == "release" {
		p.released = true
		return &http.Response{StatusCode: 204, Header: http.Header{}, Body: http.NoBody}
	}
	p.expires = now.Add(c.TTL)
	return jsonResponse(200, nil, map[string]any{"renewed": true, "permit": p.json(c.Name, c.Slot)})
}

func (p *fakePermit) json(name string, slot int) map[string]any {
	return map[string]any{"name": name, "slot": slot, "owner": p.owner, "fencing_token": p.token,
		"acquired_at": p.acquired.Format(time.RFC3339Nano), "expires_at": p.expires.Format(time.RFC3339Nano)}
}

func sortedSlots(s *fakeSemaphore) []int {
	var ks []int
	for k := range s.slots {
		if k < s.permits {
			ks = append(ks, k)
		}
	}
	sort.Ints(ks)
	return ks
}

func sortedNames(m map[string]*fakeSemaphore) []string {
	var ns []string
	for n := range m {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// live returns the owners of name's live permits by slot.
func (f *fakeSem) live(name string) map[int]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]string{}
	if s := f.sems[name]; s != nil {
		for k, p := range s.slots {
			if p.live(time.Now()) {
				out[k] = p.owner
			}
		}
	}
	return out
}

// forceRelease ends the permit in slot as an operator's force release does.
func (f *fakeSem) forceRelease(name string, slot int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.sems[name].slots[slot]; p != nil {
		p.expires, p.forced = time.Now(), true
	}
}

// log returns the requests received so far with Op among ops (all when
// none is given).
func (f *fakeSem) log(ops ...string) []semCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []semCall
	for _, c := range f.calls {
		if len(ops) == 0 || contains(ops, c.Op) {
			out = append(out, c)
		}
	}
	return out
}
