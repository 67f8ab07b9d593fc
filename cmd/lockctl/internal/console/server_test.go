package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/locklogic"
)

// fakeService answers the admin listings and the watches, and counts them.
type fakeService struct {
	lists, watches atomic.Int64
	semLists       atomic.Int64 // of lists, those of the semaphores
	// status answers the listings (200 with one lock when 0).
	status atomic.Int64
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/admin/locks" || r.URL.Path == "/admin/semaphores":
		f.lists.Add(1)
		if r.URL.Path == "/admin/semaphores" {
			f.semLists.Add(1)
		}
		if st := int(f.status.Load()); st != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(st)
			fmt.Fprint(w, `{"message":"Too Many Requests"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/admin/semaphores" {
			fmt.Fprint(w, `{"holders":[]}`)
			return
		}
		fmt.Fprint(w, `{"locks":[{"resource":"a","owner":"o","fencing_token":7,"acquired_at":"2026-01-01T00:00:00Z","expires_at":"2099-01-01T00:00:00Z"}]}`)
	case strings.HasSuffix(r.URL.Path, "/watch"):
		f.watches.Add(1)
		if r.URL.Query().Get("wait_seconds") != "0" {
			<-r.Context().Done() // a long poll that never changes
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"resource":"a","index":15,"changed":true,"fencing_token":7,"lock":{"resource":"a","owner":"o","fencing_token":7,"acquired_at":"2026-01-01T00:00:00Z","expires_at":"2099-01-01T00:00:00Z"}}`)
	default:
		http.NotFound(w, r)
	}
}

// startConsole serves a console over svc's URL, stopped when tb ends; a
// listing or a watch runs on for linger after the last poll.
func startConsole(tb testing.TB, svcURL string, interval, linger time.Duration) *Server {
	tb.Helper()
	c, err := client.New(svcURL, client.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := Listen(Config{Client: c, Endpoint: svcURL, Interval: interval, Linger: linger})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return s
}

// noRedirect is an HTTP client that shows redirects instead of following.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// session exchanges s's token for its cookie and returns the cookie.
func session(tb testing.TB, s *Server) *http.Cookie {
	tb.Helper()
	resp, err := noRedirect.Get(s.URL())
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		tb.Fatalf("token exchange: got %d with cookies %v, want 303 and one cookie", resp.StatusCode, resp.Cookies())
	}
	return resp.Cookies()[0]
}

func TestGuard(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(&fakeService{})
	defer svc.Close()
	s := startConsole(t, svc.URL, time.Hour, time.Second)
	token := s.URL()
	resp, err := noRedirect.Get(token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("token exchange: got %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	if len(resp.Cookies()) != 1 {
		t.Fatalf("token exchange: got cookies %v, want one", resp.Cookies())
	}
	ck := resp.Cookies()[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
		t.Errorf("cookie: got HttpOnly %v, SameSite %v, Path %q; want HttpOnly, Strict, /", ck.HttpOnly, ck.SameSite, ck.Path)
	}
	page := "http://" + s.Addr() + "/"
	for _, tt := range []struct {
		name   string
		url    string
		cookie *http.Cookie
		host   string
		origin string
		want   int
	}{
		{name: "OK", url: page, cookie: ck, want: 200},
		{name: "SameOrigin", url: page, cookie: ck, origin: "http://" + s.Addr(), want: 200},
		{name: "NoCookie", url: page, want: 401},
		{name: "WrongCookie", url: page, cookie: &http.Cookie{Name: ck.Name, Value: "x" + ck.Value}, want: 401},
		{name: "ForgedHost", url: page, cookie: ck, host: "rebound.example:" + strings.Split(s.Addr(), ":")[1], want: 421},
		{name: "LocalhostHost", url: page, cookie: ck, host: "localhost:" + strings.Split(s.Addr(), ":")[1], want: 421},
		{name: "OtherOrigin", url: page, cookie: ck, origin: "http://evil.example", want: 403},
		{name: "OtherPortOrigin", url: page, cookie: ck, origin: "http://127.0.0.1:1", want: 403},
		{name: "NullOrigin", url: page, cookie: ck, origin: "null", want: 403},
		{name: "APIWithoutCookie", url: "http://" + s.Addr() + "/api/status?kind=locks&name=a", want: 401},
		{name: "TokenSpent", url: token, want: 403},
		{name: "TokenSpentWithCookie", url: token, cookie: ck, want: 303},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tt.url, nil)
			if tt.cookie != nil {
				req.AddCookie(tt.cookie)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tt.want)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") {
				t.Errorf("Content-Security-Policy: got %q, want default-src 'self' first", csp)
			}
			if tt.want == 303 && len(resp.Cookies()) != 0 {
				t.Errorf("a spent token set a cookie: %v", resp.Cookies())
			}
		})
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	t.Parallel()
	c, _ := client.New("http://127.0.0.1:1")
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "localhost:0", "example.com:0", "nonsense"} {
		if s, err := Listen(Config{Client: c, Addr: addr}); err == nil {
			s.ln.Close()
			t.Errorf("Listen(%q): got no error, want a refusal", addr)
		}
	}
}

// stream is a tab as the page runs it: it polls the console and hands on
// each new listing and watch event, in order.
type stream struct {
	done   chan struct{}
	once   sync.Once
	events chan sse
}

// sse is one new listing (kind "listing") or watch event ("watch"), as
// JSON.
type sse struct{ kind, data string }

// pollEvery is the tests' tabs' time between two polls: short against the
// tests' refresh intervals, so that a tab sees every refresh.
const pollEvery = 5 * time.Millisecond

// openStream starts a tab polling /api/poll?query with cookie, as the page
// does (passing on the listing version and the watch events it has); it
// stops when closed, at its first failed poll, and when tb ends.
func openStream(tb testing.TB, s *Server, ck *http.Cookie, query string) *stream {
	tb.Helper()
	st := &stream{done: make(chan struct{}), events: make(chan sse, 100)}
	pollOnce := func(version, wid, wseq int64) (pollAnswer, error) {
		var ans pollAnswer
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/api/poll?%s&version=%d&wid=%d&wseq=%d", s.Addr(), query, version, wid, wseq), nil)
		req.AddCookie(ck)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ans, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return ans, fmt.Errorf("poll: got %d, want 200", resp.StatusCode)
		}
		return ans, json.NewDecoder(resp.Body).Decode(&ans)
	}
	first, err := pollOnce(0, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		defer close(st.events)
		var version, wid, wseq int64
		send := func(kind string, v any) bool {
			b, _ := json.Marshal(v)
			select {
			case st.events <- sse{kind, string(b)}:
				return true
			case <-st.done:
				return false
			}
		}
		for ans := first; ; {
			if ans.Listing != nil {
				version = ans.Listing.Version
				if !send("listing", ans.Listing) {
					return
				}
			}
			if w := ans.Watch; w != nil {
				if w.ID != wid {
					wid, wseq = w.ID, 0
				}
				for _, e := range w.Events {
					if !send("watch", e) {
						return
					}
					wseq = e.Seq
				}
			}
			select {
			case <-st.done:
				return
			case <-time.After(pollEvery):
			}
			if ans, err = pollOnce(version, wid, wseq); err != nil {
				return
			}
		}
	}()
	tb.Cleanup(st.close)
	return st
}

// seen waits until the stream has had an event of each of kinds, in any
// order (a watch's first event may come before the first listing), failing
// tb after 10 s.
func (st *stream) seen(tb testing.TB, kinds ...string) {
	tb.Helper()
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	timeout := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case ev, ok := <-st.events:
			if !ok {
				tb.Fatalf("stream closed waiting for %v", want)
			}
			delete(want, ev.kind)
		case <-timeout:
			tb.Fatalf("no event of %v in 10s", want)
		}
	}
}

// close stops the tab's polls: a tab closed, or gone without a word.
func (st *stream) close() { st.once.Do(func() { close(st.done) }) }

// next returns the stream's next event of kind, failing tb after 10 s.
func (st *stream) next(tb testing.TB, kind string) sse {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-st.events:
			if !ok {
				tb.Fatalf("stream closed waiting for %s", kind)
			}
			if ev.kind == kind {
				return ev
			}
		case <-timeout:
			tb.Fatalf("no %s event in 10s", kind)
		}
	}
}

// TestListingSharedAndCapped: three tabs showing the locks get the same
// refreshes, and the service sees at most one listing per interval; a
// kind nobody shows is not refreshed.
func TestListingSharedAndCapped(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	svc := httptest.NewServer(f)
	defer svc.Close()
	const interval = 100 * time.Millisecond
	s := startConsole(t, svc.URL, interval, interval)
	ck := session(t, s)
	start := time.Now()
	tabs := []*stream{openStream(t, s, ck, "view=locks"), openStream(t, s, ck, "view=locks"), openStream(t, s, ck, "view=locks")}
	const refreshes = 8
	versions := make([][]int64, len(tabs))
	var wg sync.WaitGroup
	for i, tab := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(versions[i]) == 0 || versions[i][len(versions[i])-1] < refreshes {
				var snap snapshot
				if err := json.Unmarshal([]byte(tab.next(t, "listing").data), &snap); err != nil {
					t.Error(err)
					return
				}
				if snap.Kind != kindLocks || len(snap.Locks) != 1 || snap.Locks[0].FencingToken != 7 {
					t.Errorf("tab %d: got snapshot %+v, want the fake's lock", i, snap)
				}
				versions[i] = append(versions[i], snap.Version)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	lists := f.lists.Load()
	// The cap: one refresh per interval, from the first one on.
	if max := int64(elapsed/interval) + 1; lists > max {
		t.Errorf("listing requests: got %d in %v, want at most %d (one per %v for all tabs)", lists, elapsed, max, interval)
	}
	if lists < refreshes {
		t.Errorf("listing requests: got %d, want at least %d (the tabs saw version %d)", lists, refreshes, refreshes)
	}
	t.Logf("%d listing requests in %v for %d tabs; versions seen %v", lists, elapsed, len(tabs), versions)
	for _, tab := range tabs {
		tab.close()
	}
	atClose := s.listers[kindLocks].refreshes()
	lockLists := func() int64 { return f.lists.Load() - f.semLists.Load() }
	lockListsAtClose := lockLists()
	// Nobody shows the locks now: a tab on the semaphores gets its own
	// refreshes, and the locks' count stays put (but for one refresh that
	// may have been under way, and one within the linger).
	sem := openStream(t, s, ck, "view=semaphores")
	for range 4 {
		var snap snapshot
		_ = json.Unmarshal([]byte(sem.next(t, "listing").data), &snap)
		if snap.Kind != kindSemaphores {
			t.Fatalf("got a %s listing on the semaphores' stream", snap.Kind)
		}
	}
	// The service's count first: a refresh counted there but not yet by
	// the lister is one under way.
	semLists := f.semLists.Load()
	if semRefreshes := s.listers[kindSemaphores].refreshes(); semLists > semRefreshes+1 {
		t.Errorf("semaphore listings: the service got %d for %d refreshes, want one each (and one under way)", semLists, semRefreshes)
	}
	if got, service := s.listers[kindLocks].refreshes(), lockLists()-lockListsAtClose; got > atClose+2 || service > 2 {
		t.Errorf("after the lock tabs closed: locks refreshed %d times in all (%d when they closed), service lock listings +%d, want at most 2 more",
			got, atClose, service)
	}
}

// TestListingBacksOffOn429: each throttled refresh doubles the time to the
// next, up to the cap; a good one resets it.
func TestListingBacksOffOn429(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	f.status.Store(429)
	svc := httptest.NewServer(f)
	defer svc.Close()
	const interval = 20 * time.Millisecond
	s := startConsole(t, svc.URL, interval, interval)
	s.listers[kindLocks].maxBackoff = 8 * interval
	tab := openStream(t, s, session(t, s), "view=locks")
	// Every refresh answers 429, so the k-th (snapshot version k) says
	// the next comes in 2^k intervals, at most 8: 40, 80, 160, 160 … ms.
	// A tab sees the latest snapshot at each poll, and on a slow machine
	// it may skip one, so each snapshot it sees is checked against its own
	// version, until it has seen three, the fifth or a later one among them.
	want := func(v int64) int64 { return min(interval.Milliseconds()<<v, 8*interval.Milliseconds()) }
	got := map[int64]int64{} // next refresh in (ms), by version
	for last := int64(0); len(got) < 3 || last < 5; {
		var snap snapshot
		_ = json.Unmarshal([]byte(tab.next(t, "listing").data), &snap)
		if snap.Problem == nil || snap.Problem.Status != 429 {
			t.Fatalf("got problem %+v, want the 429", snap.Problem)
		}
		if snap.Version < 1 {
			t.Fatalf("snapshot version %d, want 1 or more", snap.Version)
		}
		got[snap.Version], last = snap.NextInMillis, max(last, snap.Version)
	}
	for v, next := range got {
		if next != want(v) {
			t.Errorf("next refresh in (ms) after refresh %d: got %d, want %d (all seen, by version: %v)", v, next, want(v), got)
		}
	}
	// A refresh sent before the service recovered may still answer 429.
	f.status.Store(0)
	for range 3 {
		var snap snapshot
		_ = json.Unmarshal([]byte(tab.next(t, "listing").data), &snap)
		if snap.Problem != nil {
			continue
		}
		if snap.NextInMillis != interval.Milliseconds() {
			t.Errorf("after a good refresh: next in %d ms, want %d", snap.NextInMillis, interval.Milliseconds())
		}
		return
	}
	t.Errorf("no good refresh in the 3 after the service recovered")
}

// TestWatchOnlyOpenDetails: two tabs on one name share one watch, which
// stops when both close; a listing tab starts none.
func TestWatchOnlyOpenDetails(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	svc := httptest.NewServer(f)
	defer svc.Close()
	s := startConsole(t, svc.URL, time.Hour, time.Second)
	ck := session(t, s)
	openStream(t, s, ck, "view=locks").next(t, "listing")
	a := openStream(t, s, ck, "view=locks&watch=a&wkind=locks")
	b := openStream(t, s, ck, "watch=a&wkind=locks")
	for _, tab := range []*stream{a, b} {
		var e event
		_ = json.Unmarshal([]byte(tab.next(t, "watch").data), &e)
		if len(e.Holders) != 1 || e.Holders[0].FencingToken != 7 {
			t.Errorf("watch event: got %+v, want the holder of token 7", e)
		}
	}
	s.watches.mu.Lock()
	started, open := s.watches.started, len(s.watches.m)
	s.watches.mu.Unlock()
	if started != 1 || open != 1 {
		t.Errorf("watches: got %d started, %d open; want 1 and 1", started, open)
	}
	a.close()
	b.close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.watches.mu.Lock()
		open = len(s.watches.m)
		s.watches.mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch runs on after its tabs closed")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not ordering events
	}
}

// TestForceReleaseChecks: the page's request must be JSON and carry the
// fencing token of the lease shown and a reason.
func TestForceReleaseChecks(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(&fakeService{})
	defer svc.Close()
	s := startConsole(t, svc.URL, time.Hour, time.Second)
	ck := session(t, s)
	for _, tt := range []struct {
		name, ctype, body string
		want              int
	}{
		{"NotJSON", "text/plain", `{"kind":"locks","name":"a","reason":"r","fencing_token":7}`, 415},
		{"NoToken", "application/json", `{"kind":"locks","name":"a","reason":"r"}`, 400},
		{"NoReason", "application/json", `{"kind":"locks","name":"a","reason":" ","fencing_token":7}`, 400},
		{"UnknownField", "application/json", `{"kind":"locks","name":"a","reason":"r","fencing_token":7,"x":1}`, 400},
		// 167 characters, 501 bytes: the service's bound is in bytes.
		{"ReasonTooLong", "application/json", `{"kind":"locks","name":"a","reason":"` + strings.Repeat("€", 167) + `","fencing_token":7}`, 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/api/force-release", strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ctype)
			req.AddCookie(ck)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}

// TestWatchLingers: a tab's polls keep its detail view's watch running
// past the linger, one watch throughout; once no tab polls, the watch
// stops; a tab polling again gets a new watch (another ID), whose events
// it is given from the first.
func TestWatchLingers(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	svc := httptest.NewServer(f)
	t.Cleanup(svc.Close) // after the console's stop has ended the watch's long poll
	// 1 s: a tab polls every 5 ms, but a loaded machine has left more
	// than 200 ms between two polls.
	const linger = time.Second
	s := startConsole(t, svc.URL, time.Hour, linger)
	ck := session(t, s)
	watching := func() (started int64, open int) {
		s.watches.mu.Lock()
		defer s.watches.mu.Unlock()
		return s.watches.started, len(s.watches.m)
	}
	tab := openStream(t, s, ck, "watch=a&wkind=locks")
	var first event
	_ = json.Unmarshal([]byte(tab.next(t, "watch").data), &first)
	// The watch's requests: a first look, the observer's first answer
	// (the event above), then its long round, which never ends at the fake.
	waitFor(t, "the watch's long round", func() bool { return f.watches.Load() >= 3 })
	watches := f.watches.Load()
	time.Sleep(3 * linger) // a span of real time the tab polls through, not ordering events
	if started, open := watching(); started != 1 || open != 1 {
		t.Errorf("while polled for 3 lingers: got %d watches started, %d open; want 1 and 1", started, open)
	}
	if n := f.watches.Load(); n != watches {
		t.Errorf("watch requests at the service while polled: got %d more, want none (one round that never ends at the fake)", n-watches)
	}
	tab.close()
	waitFor(t, "the watch's stop after the last poll", func() bool { _, open := watching(); return open == 0 })
	again := openStream(t, s, ck, "watch=a&wkind=locks")
	var e event
	_ = json.Unmarshal([]byte(again.next(t, "watch").data), &e)
	if started, _ := watching(); started != 2 || e.Seq != 1 || len(e.Holders) != 1 {
		t.Errorf("polled again: got %d watches started and event %+v; want a second watch and its first event", started, e)
	}
}

// waitFor waits up to 10 s for cond.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not ordering events
	}
}

// TestReasonBoundIsTheServices: the console bounds a reason as the
// service does.
func TestReasonBoundIsTheServices(t *testing.T) {
	if maxReasonBytes != locklogic.MaxReasonBytes {
		t.Errorf("maxReasonBytes: got %d, want the service's %d", maxReasonBytes, locklogic.MaxReasonBytes)
	}
}
