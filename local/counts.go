package local

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ft288/locks/api"
)

// Counts is what a Runner has counted since it started. Tests of the
// clients read it (locald -counts writes it as JSON) to see which routes
// their requests took.
type Counts struct {
	// Requests counts the requests that matched a route, by route key
	// ("POST /locks/{resource}/wait"), whether or not the capacity model
	// let them in.
	Requests map[string]int64 `json:"requests"`
	// TryWaitSeconds counts the try-acquires (POST /locks/{resource}, POST
	// /semaphores/{name}) whose body carried a wait_seconds above 0: the
	// request shape of clients released before the waiting routes, which
	// the service answers 422.
	TryWaitSeconds int64 `json:"try_wait_seconds"`
	// Throttled counts the requests the capacity model answered 429 (a
	// route's throttle), by route key.
	Throttled map[string]int64 `json:"throttled"`
	// Refused counts the requests the capacity model answered 500 (the
	// function's concurrency), by route key.
	Refused map[string]int64 `json:"concurrency_refused"`
}

// counter keeps a Runner's Counts.
type counter struct {
	mu sync.Mutex
	c  Counts
	// tries are the route keys of the try-acquire rows: the rows whose
	// key plus "/wait" is a waiting row's.
	tries map[string]bool
}

func newCounter() *counter {
	waits := map[string]bool{}
	for _, rt := range api.Routes {
		if rt.Waits {
			waits[rt.Key()] = true
		}
	}
	tries := map[string]bool{}
	for _, rt := range api.Routes {
		if waits[rt.Key()+"/wait"] {
			tries[rt.Key()] = true
		}
	}
	return &counter{tries: tries, c: Counts{Requests: map[string]int64{}, Throttled: map[string]int64{}, Refused: map[string]int64{}}}
}

// request counts a request matched to rt with body, and its refusal by
// the capacity model (status 429 or 500; 0 when it was let in).
func (c *counter) request(rt api.Route, body []byte, refused int) {
	if c == nil { // a Runner not made by NewRunner
		return
	}
	key := rt.Key()
	waits := c.tries[key] && carriesWait(body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Requests[key]++
	if waits {
		c.c.TryWaitSeconds++
	}
	switch refused {
	case http.StatusTooManyRequests:
		c.c.Throttled[key]++
	case http.StatusInternalServerError:
		c.c.Refused[key]++
	}
}

// carriesWait reports whether body is a JSON object whose wait_seconds is
// a number above 0 (the last one, if named twice).
func carriesWait(body []byte) bool {
	var b struct {
		Wait json.RawMessage `json:"wait_seconds"`
	}
	if json.Unmarshal(body, &b) != nil || len(b.Wait) == 0 {
		return false
	}
	f, err := strconv.ParseFloat(string(b.Wait), 64)
	return err == nil && f > 0
}

// snapshot returns a copy of the counts.
func (c *counter) snapshot() Counts {
	if c == nil {
		return Counts{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Counts{Requests: maps.Clone(c.c.Requests), TryWaitSeconds: c.c.TryWaitSeconds,
		Throttled: maps.Clone(c.c.Throttled), Refused: maps.Clone(c.c.Refused)}
}

// refusalLog logs the requests the capacity model refuses as one line a
// second at most, with a count per route, instead of a line per request:
// a throttled client retries, and a line each would flood the log.
type refusalLog struct {
	log *slog.Logger
	// every is the window; a second.
	every time.Duration

	mu sync.Mutex
	// pending are the window's counts by status, then route key; nil
	// when no refusal is waiting to be logged.
	pending map[int]map[string]int
}

// add counts a refusal of the route key with status; the first of a
// window schedules its line.
func (l *refusalLog) add(key string, status int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[int]map[string]int{}
		time.AfterFunc(l.every, l.flush)
	}
	if l.pending[status] == nil {
		l.pending[status] = map[string]int{}
	}
	l.pending[status][key]++
}

// flush logs the window's counts.
func (l *refusalLog) flush() {
	l.mu.Lock()
	p := l.pending
	l.pending = nil
	l.mu.Unlock()
	attrs := []any{slog.String("window", l.every.String())}
	if n := p[http.StatusTooManyRequests]; n != nil {
		attrs = append(attrs, slog.Any("too_many_requests", n))
	}
	if n := p[http.StatusInternalServerError]; n != nil {
		attrs = append(attrs, slog.Any("concurrency_refused", n))
	}
	l.log.Info("refused by the capacity model", attrs...)
}
