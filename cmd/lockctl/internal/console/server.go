package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ft288/locks/client"
)

// assets are the page: HTML, CSS and plain JavaScript, served as embedded.
//
//go:embed assets
var assets embed.FS

// DefaultAddr is where the console listens without Config.Addr: a free
// port on the loopback interface.
const DefaultAddr = "127.0.0.1:0"

// DefaultInterval is the shortest time between two refreshes of a listing.
const DefaultInterval = 2 * time.Second

// DefaultLinger is how long a listing is refreshed, and a watch kept, after
// the last poll of a tab that shows it.
const DefaultLinger = 5 * time.Second

// maxPollEvery bounds the time between two polls of a tab: a change reaches
// the page within a refresh interval and this.
const maxPollEvery = 500 * time.Millisecond

// maxReasonBytes bounds a force release's reason, in bytes of UTF-8: the
// service's limit (locklogic.MaxReasonBytes; a test keeps them equal).
const maxReasonBytes = 500

// Config configures a Server. Zero values are the defaults.
type Config struct {
	// Client calls the lock service (required).
	Client *client.Client
	// Endpoint is the service's URL, shown on the page.
	Endpoint string
	// Addr is the loopback HOST:PORT to listen on (DefaultAddr).
	Addr string
	// Prefix limits the listings to names that start with it.
	Prefix string
	// Interval is the shortest time between two refreshes of a listing
	// (DefaultInterval).
	Interval time.Duration
	// Linger is how long a listing is refreshed, and a watch kept, after
	// the last poll of a tab that shows it (DefaultLinger).
	Linger time.Duration
}

// Server is a running console.
type Server struct {
	cfg     Config
	ln      net.Listener
	guard   *guard
	listers map[string]*lister
	watches *watches
	srv     *http.Server
}

// Listen binds the console's address (loopback only) and returns the
// Server; Serve serves it.
func Listen(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("console: no client")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultLinger
	}
	if err := checkLoopback(cfg.Addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("--addr %s: %w", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, ln: ln, guard: newGuard(ln.Addr().String()),
		watches: &watches{c: cfg.Client, base: context.Background(), linger: cfg.Linger, m: map[watchKey]*watch{}},
		listers: map[string]*lister{
			kindLocks:      newLister(kindLocks, cfg.Interval, cfg.Linger, fetchLocks(cfg.Client, cfg.Prefix)),
			kindSemaphores: newLister(kindSemaphores, cfg.Interval, cfg.Linger, fetchPermits(cfg.Client, cfg.Prefix)),
			kindRWLocks:    newLister(kindRWLocks, cfg.Interval, cfg.Linger, fetchRWLocks(cfg.Client, cfg.Prefix)),
		}}
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/poll", s.poll)
	mux.HandleFunc("GET /api/status", s.status)
	mux.HandleFunc("POST /api/force-release", s.forceRelease)
	s.srv = &http.Server{Handler: s.guard.wrap(mux), ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// URL is the URL to open, with the per-run token (it works once).
func (s *Server) URL() string { return s.guard.url() }

// Exchanged is closed when the URL's token has been exchanged for the
// session cookie.
func (s *Server) Exchanged() <-chan struct{} { return s.guard.spent }

// Addr is the bound address, HOST:PORT.
func (s *Server) Addr() string { return s.guard.host }

// Serve serves the console until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	for _, l := range s.listers {
		go l.run(ctx)
	}
	s.watches.base = ctx
	// Requests' contexts end with ctx.
	s.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	go func() {
		<-ctx.Done()
		_ = s.srv.Close()
	}()
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// pollAnswer is the answer to a tab's poll: what the page needs to know
// about the server, the listing it shows when it changed since the version
// the tab has, and its detail view's watch events after the tab's last.
type pollAnswer struct {
	Endpoint       string    `json:"endpoint"`
	Prefix         string    `json:"prefix"`
	Now            time.Time `json:"now"`
	IntervalMS     int64     `json:"interval_ms"`
	PollMS         int64     `json:"poll_ms"`
	ReasonMaxBytes int       `json:"reason_max_bytes"`
	// Listing is absent when the tab has its version already.
	Listing *snapshot    `json:"listing,omitempty"`
	Watch   *watchAnswer `json:"watch,omitempty"`
}

// watchAnswer is a watch's events after the tab's last. ID names the watch:
// a watch stopped (no tab polled it for Linger) and started again has
// another ID, and its events are numbered from 1 again.
type watchAnswer struct {
	ID     int64   `json:"id"`
	Events []event `json:"events"`
}

// pollEvery is the time a tab waits between two polls: short against the
// refresh interval, so that a refresh reaches the page soon after it.
func (s *Server) pollEvery() time.Duration {
	return min(s.cfg.Interval/4, maxPollEvery)
}

// poll answers one tab's poll, at once: a short GET, so that no tab holds
// one of the browser's six connections per host and port for long.
// view=locks, semaphores or rwlocks is the listing the tab shows (none when empty)
// and version the version of it the tab has (0: none); watch=NAME and
// wkind=locks or semaphores the detail view it shows, wid the ID of the
// watch it has events of and wseq the last of them. A poll keeps the
// listing refreshed, and the watch running, for Config.Linger.
func (s *Server) poll(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	view, name, wkind := q.Get("view"), q.Get("watch"), q.Get("wkind")
	l := s.listers[view]
	if view != "" && l == nil || name != "" && (wkind != kindLocks && wkind != kindSemaphores) {
		writeProblem(w, &problem{Status: 400, Title: "view must be locks, semaphores or rwlocks, and wkind locks or semaphores"})
		return
	}
	var nums [3]int64
	for i, k := range []string{"version", "wid", "wseq"} {
		if v := q.Get(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				writeProblem(w, &problem{Status: 400, Title: k + " must be a non-negative integer"})
				return
			}
			nums[i] = n
		}
	}
	version, wid, wseq := nums[0], nums[1], nums[2]
	out := pollAnswer{Endpoint: s.cfg.Endpoint, Prefix: s.cfg.Prefix, Now: time.Now(),
		IntervalMS: s.cfg.Interval.Milliseconds(), PollMS: s.pollEvery().Milliseconds(), ReasonMaxBytes: maxReasonBytes}
	if l != nil {
		if snap := l.polled(); snap.Version > 0 && snap.Version != version {
			out.Listing = &snap
		}
	}
	if name != "" {
		wt := s.watches.polled(watchKey{wkind, name})
		if wt.id != wid {
			wseq = 0 // another watch than the one the tab has events of
		}
		out.Watch = &watchAnswer{ID: wt.id, Events: wt.since(wseq)}
	}
	writeJSON(w, http.StatusOK, out)
}

// status is the live lease of a lock (kind=locks) or the permits of a
// semaphore (kind=semaphores) called name: for a name typed in by a caller
// who may not list.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var (
		out any
		err error
	)
	switch q.Get("kind") {
	case kindLocks:
		out, err = s.cfg.Client.Status(ctx, q.Get("name"))
	case kindSemaphores:
		out, err = s.cfg.Client.SemaphoreStatus(ctx, q.Get("name"))
	default:
		err = &client.ProblemError{Status: 400, Title: "kind must be locks or semaphores"}
	}
	if err != nil {
		writeProblem(w, toProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// forceRequest is the body of POST /api/force-release: what the
// confirmation showed and the operator chose.
type forceRequest struct {
	Kind         string `json:"kind"`
	Name         string `json:"name"`
	Slot         int    `json:"slot"`
	Reason       string `json:"reason"`
	Immediate    bool   `json:"immediate"`
	FencingToken int64  `json:"fencing_token"`
}

// forceRelease ends the lease the confirmation showed, and only it: the
// fencing token is required, so a lease that replaced it meanwhile is
// refused (stale-token, with the lease that holds the name now).
func (s *Server) forceRelease(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeProblem(w, &problem{Status: 415, Title: "Content-Type must be application/json"})
		return
	}
	var req forceRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, &problem{Status: 400, Title: "malformed request", Detail: err.Error()})
		return
	}
	if req.FencingToken <= 0 {
		writeProblem(w, &problem{Status: 400, Title: "fencing_token is required: the token of the lease shown"})
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		writeProblem(w, &problem{Status: 400, Title: "a reason is required"})
		return
	}
	if len(req.Reason) > maxReasonBytes {
		writeProblem(w, &problem{Status: 400, Title: fmt.Sprintf("the reason is at most %d bytes of UTF-8", maxReasonBytes),
			Detail: fmt.Sprintf("it is %d bytes", len(req.Reason))})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	opt := client.ForceReleaseOptions{Immediate: req.Immediate, FencingToken: req.FencingToken}
	var (
		out any
		err error
	)
	switch req.Kind {
	case kindLocks:
		out, err = s.cfg.Client.ForceRelease(ctx, req.Name, req.Reason, opt)
	case kindSemaphores:
		out, err = s.cfg.Client.ForceReleasePermit(ctx, req.Name, req.Slot, req.Reason, opt)
	default:
		err = &client.ProblemError{Status: 400, Title: "kind must be locks or semaphores"}
	}
	if err != nil {
		writeProblem(w, toProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// problem is a failure as the page shows it: the service's problem (its
// title first), or what kept the request from the service.
type problem struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail,omitempty"`
	// Slug is the service's problem type ("not-an-administrator",
	// "stale-token", ...); empty for others.
	Slug string `json:"slug,omitempty"`
	// Current is the lease that holds the name now, on a stale-token
	// refusal of a force release.
	Current any `json:"current,omitempty"`
}

// toProblem is err as the page shows it.
func toProblem(err error) *problem {
	var pe *client.ProblemError
	if !errors.As(err, &pe) && errors.Is(err, client.ErrValidation) {
		// The client refused it before sending: the operator's input, not
		// the service, is at fault. (The service's own validation problems
		// are ProblemErrors, shown with their title below.)
		return &problem{Status: http.StatusBadRequest, Title: "invalid request", Detail: err.Error()}
	}
	if pe == nil {
		return &problem{Status: http.StatusBadGateway, Title: "the lock service could not be reached", Detail: err.Error()}
	}
	p := &problem{Status: pe.Status, Title: pe.Title, Detail: pe.Detail, Slug: pe.Slug()}
	switch {
	case pe.Current != nil:
		p.Current = pe.Current
	case pe.CurrentPermit != nil:
		p.Current = pe.CurrentPermit
	}
	if p.Title == "" {
		p.Title = http.StatusText(pe.Status)
	}
	return p
}

// writeProblem answers p.
func writeProblem(w http.ResponseWriter, p *problem) {
	status := p.Status
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	writeJSON(w, status, p)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
