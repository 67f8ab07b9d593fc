package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// fakeAPI is the lock service's HTTP API in memory, as an http.RoundTripper
// (and an http.Handler for the examples): it answers acquire, renew,
// release, status and watch the way the service does, on the clock of the
// synctest bubble it runs in, and logs every request.
// Tests script failures and delays with intercept.
type fakeAPI struct {
	// intercept, when set, sees every request before it is served. It may
	// block (on channels of the bubble, or the request's context), serve
	// the request itself with serve, and return the answer to give: a
	// response, a transport error, or nil and nil to serve it normally.
	intercept func(c call) (*http.Response, error)
	// refuseWait answers 422 naming wait_seconds to every request that has
	// it, as a service without server-side waiting does.
	refuseWait bool
	// oldStack makes the fake a stack from before the waiting routes: API
	// Gateway answers 404 {"message":"Not Found"} on …/wait, and the try
	// route waits when asked to (wait_seconds). Otherwise the fake is
	// today's service: waiting on …/wait only, and a try-acquire with
	// wait_seconds or queue_ticket is a 422 naming them.
	oldStack bool

	mu      sync.Mutex
	locks   map[string]*fakeLock
	token   int64
	calls   []call
	tickets int // queue tickets given so far
}

// fakeLock is a lease as the fake service stores it.
type fakeLock struct {
	owner     string
	token     int64
	acquired  time.Time
	expires   time.Time
	lockDelay int64 // lock_delay_seconds, 0: none
	released  bool
	// forced: an operator force released it; renewals and releases of it
	// are 404 with force_released.
	forced bool
}

// call is one request the fake API received.
type call struct {
	At       time.Time
	Op       string // acquire, renew, release, status or watch
	Route    string // an acquire's: "try" (POST /locks/{r}) or "wait" (…/wait)
	Resource string
	Owner    string
	Token    int64 // the fencing_token sent, 0 when none
	TTL      time.Duration
	Wait     time.Duration   // wait_seconds, 0 when absent
	Index    int64           // a watch's index
	Delay    int64           // lock_delay_seconds, 0 when absent
	Ticket   string          // queue_ticket, "" when absent
	Ctx      context.Context // the request's
}

// String prints the call for test messages, its time relative to the start
// of the bubble.
func (c call) String() string {
	return fmt.Sprintf("%s %s owner=%q token=%d at %s", c.Op, c.Resource, c.Owner, c.Token, c.At.Sub(bubbleStart))
}

// bubbleStart is the fake clock's time when every synctest bubble starts.
var bubbleStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func newFakeAPI() *fakeAPI {
	return &fakeAPI{locks: map[string]*fakeLock{}, token: 1_000}
}

// newFakeClient returns a client of f with fast retries and opts.
func newFakeClient(tb testing.TB, f *fakeAPI, opts ...client.Option) *client.Client {
	tb.Helper()
	opts = append([]client.Option{
		client.WithHTTPClient(&http.Client{Transport: f}),
		client.WithBackoff(10*time.Millisecond, 200*time.Millisecond),
	}, opts...)
	c, err := client.New("http://lock.test", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// RoundTrip answers r like the lock service.
func (f *fakeAPI) RoundTrip(r *http.Request) (*http.Response, error) {
	var body struct {
		Owner string `json:"owner"`
		TTL   int64  `json:"ttl_seconds"`
		Token int64  `json:"fencing_token"`
		Wait  int64  `json:"wait_seconds"`
		Delay int64  `json:"lock_delay_seconds"`
		Queue string `json:"queue_ticket"`
	}
	if err := readBody(r, &body); err != nil {
		return nil, fmt.Errorf("fake API: %w", err)
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/locks/")
	if !ok {
		return nil, fmt.Errorf("fake API: unexpected path %q", r.URL.Path)
	}
	c := call{At: time.Now(), Resource: path, Owner: body.Owner, Token: body.Token, TTL: time.Duration(body.TTL) * time.Second,
		Wait: time.Duration(body.Wait) * time.Second, Delay: body.Delay, Ticket: body.Queue, Ctx: r.Context()}
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/renew"):
		c.Op, c.Resource = "renew", strings.TrimSuffix(path, "/renew")
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/wait"):
		c.Op, c.Route, c.Resource = "acquire", "wait", strings.TrimSuffix(path, "/wait")
	case r.Method == http.MethodPost:
		c.Op, c.Route = "acquire", "try"
	case r.Method == http.MethodDelete:
		c.Op = "release"
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/watch"):
		c.Op, c.Resource = "watch", strings.TrimSuffix(path, "/watch")
		q := r.URL.Query()
		c.Index, _ = strconv.ParseInt(q.Get("index"), 10, 64)
		w, _ := strconv.ParseInt(q.Get("wait_seconds"), 10, 64)
		c.Wait = time.Duration(w) * time.Second
	case r.Method == http.MethodGet:
		c.Op = "status"
	default:
		return nil, fmt.Errorf("fake API: unexpected %s %s", r.Method, r.URL.Path)
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	intercept := f.intercept
	f.mu.Unlock()
	return fakeAnswer(r, intercept, c, func() *http.Response {
		if resp := refusal(c.Route, c.Wait, c.Ticket, f.oldStack, f.refuseWait); resp != nil {
			return resp
		}
		return f.serveWait(c)
	})
}

// readBody reads r's JSON body, if it has one, into v.
func readBody(r *http.Request, v any) error {
	if r.Body == nil {
		return nil
	}
	data, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil || len(data) == 0 {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

// fakeAnswer is a fake's answer to r, logged as c: intercept's (nil: none),
// unless it gives none, else serve's.
func fakeAnswer[C any](r *http.Request, intercept func(C) (*http.Response, error), c C, serve func() *http.Response) (*http.Response, error) {
	var resp *http.Response
	if intercept != nil {
		var err error
		if resp, err = intercept(c); err != nil {
			return nil, err
		}
	}
	if resp == nil {
		resp = serve()
	}
	resp.Request = r
	return resp, nil
}

// refusal is the answer to an acquire on route ("try" or "wait"; "" for
// other requests) with wait and ticket that a stack refuses before it
// looks at the lock: API Gateway's 404 for a route an old stack does not
// have, or a 422 naming the fields the route does not take; nil when the
// request is served. refuseWait refuses every wait_seconds.
func refusal(route string, wait time.Duration, ticket string, oldStack, refuseWait bool) *http.Response {
	var bad []map[string]string
	switch {
	case route == "wait" && oldStack:
		return jsonResponse(404, nil, map[string]any{"message": "Not Found"})
	case wait > 0 && refuseWait:
		bad = append(bad, map[string]string{"field": "wait_seconds", "detail": "is not a known member"})
	case route == "wait" && wait == 0:
		bad = append(bad, map[string]string{"field": "wait_seconds", "detail": "is required on the waiting route"})
	case route == "try" && !oldStack && wait > 0:
		bad = append(bad, map[string]string{"field": "wait_seconds", "detail": "this route does not wait: send waiting acquires to the waiting route"})
	}
	if route == "try" && !oldStack && ticket != "" {
		bad = append(bad, map[string]string{"field": "queue_ticket", "detail": "only waiting acquires queue"})
	}
	if len(bad) == 0 {
		return nil
	}
	resp := jsonResponse(422, nil, map[string]any{
		"type": client.ProblemTypeBase + "validation-failed", "title": "validation-failed", "status": 422, "errors": bad,
	})
	resp.Header.Set("Content-Type", "application/problem+json")
	return resp
}

// ServeHTTP serves the fake API over HTTP, for the examples: they run
// outside a synctest bubble, on the real clock.
func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := f.RoundTrip(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// serveWait serves c; an acquire with wait_seconds that finds the lock held
// by another owner is held, as the service holds it, until the lock is
// free or until half a second before wait_seconds have passed, and a watch
// until the lock's index differs from the one asked with or wait_seconds
// have passed (looking every 10 ms: a lease that begins and ends at one
// instant is missed). Like a Lambda function, it does not notice a client
// that gives up.
func (f *fakeAPI) serveWait(c call) *http.Response {
	for c.Op == "watch" && time.Now().Before(c.At.Add(c.Wait)) && f.index(c.Resource) == c.Index {
		time.Sleep(10 * time.Millisecond)
	}
	end := c.At.Add(c.Wait - 500*time.Millisecond)
	for c.Op == "acquire" && c.Wait > 0 && time.Now().Before(end) {
		if owner, _, ok := f.holder(c.Resource); !ok || owner == c.Owner {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return f.serve(c)
}

// serve applies c to the fake service's state and returns its answer.
func (f *fakeAPI) serve(c call) *http.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	l := f.locks[c.Resource]
	live := l != nil && !l.released && now.Before(l.expires)
	switch c.Op {
	case "acquire":
		if live && l.owner != c.Owner {
			secs := math.Ceil(l.expires.Sub(now).Seconds())
			held := map[string]any{"acquired": false, "resource": c.Resource, "expires_at": l.expires.Format(time.RFC3339Nano)}
			if c.Wait > 0 {
				// A waiting round that ends held has a place in the queue:
				// the one it was sent with, or a new one.
				ticket := c.Ticket
				if ticket == "" {
					f.tickets++
					ticket = "tk" + strconv.Itoa(f.tickets)
				}
				held["queue_ticket"] = ticket
			}
			return jsonResponse(200, map[string]string{"Retry-After": strconv.Itoa(int(secs))}, held)
		}
		f.token++
		l = &fakeLock{owner: c.Owner, token: f.token, acquired: now, expires: now.Add(c.TTL), lockDelay: c.Delay}
		f.locks[c.Resource] = l
		return jsonResponse(200, nil, map[string]any{"acquired": true, "lock": l.json(c.Resource)})
	case "status":
		if !live {
			return problemResponse(404, "not-found")
		}
		return jsonResponse(200, nil, l.json(c.Resource))
	case "watch":
		index := indexOf(l, now)
		body := map[string]any{"resource": c.Resource, "index": index, "changed": index != c.Index}
		if l != nil {
			body["fencing_token"] = l.token
		}
		if live {
			body["lock"] = l.json(c.Resource)
		}
		return jsonResponse(200, nil, body)
	}
	switch { // renew and release
	case l != nil && l.forced && l.owner == c.Owner && (c.Token == 0 || c.Token == l.token):
		resp := jsonResponse(404, nil, map[string]any{
			"type": client.ProblemTypeBase + "not-found", "title": "Lock not found", "status": 404,
			"detail": "An operator force released the lease.", "force_released": true,
		})
		resp.Header.Set("Content-Type", "application/problem+json")
		return resp
	case !live:
		return problemResponse(404, "not-found")
	case l.owner != c.Owner:
		return problemResponse(403, "forbidden")
	case c.Token != 0 && c.Token != l.token:
		return problemResponse(409, "stale-token")
	}
	if c.Op == "release" {
		l.released = true
		return &http.Response{StatusCode: 204, Header: http.Header{}, Body: http.NoBody}
	}
	l.expires = now.Add(c.TTL)
	return jsonResponse(200, nil, map[string]any{"renewed": true, "lock": l.json(c.Resource)})
}

func (l *fakeLock) json(resource string) map[string]any {
	m := map[string]any{
		"resource": resource, "owner": l.owner, "fencing_token": l.token,
		"acquired_at": l.acquired.Format(time.RFC3339Nano), "expires_at": l.expires.Format(time.RFC3339Nano),
	}
	if l.lockDelay > 0 {
		m["lock_delay_seconds"] = l.lockDelay
	}
	return m
}

// forceRelease ends the lease on resource as an operator's immediate force
// release does: its holder's renewals and releases are then 404 with
// force_released.
func (f *fakeAPI) forceRelease(resource string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.locks[resource]; l != nil {
		l.expires, l.forced = time.Now(), true
	}
}

// index returns resource's watch index now.
func (f *fakeAPI) index(resource string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return indexOf(f.locks[resource], time.Now())
}

// indexOf is the watch index of l at now: 0 for none, else 2 × its token,
// plus 1 once it has ended.
func indexOf(l *fakeLock, now time.Time) int64 {
	switch {
	case l == nil:
		return 0
	case l.released || !now.Before(l.expires):
		return 2*l.token + 1
	}
	return 2 * l.token
}

// expireAll ends every lease by the fake service's clock, as if the
// service's clock had run ahead.
func (f *fakeAPI) expireAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.locks {
		l.expires = time.Now()
	}
}

// holder returns the live lease's owner and token on resource; ok is false
// when there is none.
func (f *fakeAPI) holder(resource string) (owner string, token int64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.locks[resource]
	if l == nil || l.released || !time.Now().Before(l.expires) {
		return "", 0, false
	}
	return l.owner, l.token, true
}

// record returns the fake service's record of resource, live or not.
func (f *fakeAPI) record(resource string) fakeLock {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.locks[resource]; l != nil {
		return *l
	}
	return fakeLock{}
}

// log returns the requests received so far with Op among ops (all when
// none is given).
func (f *fakeAPI) log(ops ...string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if len(ops) == 0 || contains(ops, c.Op) {
			out = append(out, c)
		}
	}
	return out
}

func jsonResponse(status int, header map[string]string, v any) *http.Response {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	for k, v := range header {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(string(data)))}
}

// problemResponse is the service's problem answer with slug.
func problemResponse(status int, slug string) *http.Response {
	resp := jsonResponse(status, nil, map[string]any{
		"type": client.ProblemTypeBase + slug, "title": slug, "status": status,
	})
	resp.Header.Set("Content-Type", "application/problem+json")
	if status == 503 {
		resp.Header.Set("Retry-After", "1")
	}
	return resp
}
