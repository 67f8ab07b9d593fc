package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// rwServer answers every request with status and answer, and records the
// request's method, path with query, and JSON body.
type rwServer struct {
	mu     sync.Mutex
	method string
	target string
	body   map[string]any
}

func (s *rwServer) start(t *testing.T, status int, answer string) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.method, s.target = r.Method, r.URL.RequestURI()
		_ = json.NewDecoder(r.Body).Decode(&s.body)
		ct := "application/json"
		if status >= 400 {
			ct = "application/problem+json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}))
	t.Cleanup(srv.Close)
	return newClient(t, srv.URL, client.WithoutKeepAlive())
}

func (s *rwServer) sent() (method, target string, body map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.method, s.target, s.body
}

const (
	rwReader = `{"name":"cache","mode":"read","slot":5,"owner":"r1","fencing_token":9,"acquired_at":"2026-12-02T13:14:38.318Z","expires_at":"2026-12-02T13:15:08.318Z"}`
	rwWriter = `{"name":"cache","mode":"write","owner":"w1","fencing_token":8,"acquired_at":"2026-12-02T13:14:38.318Z","expires_at":"2026-12-02T13:15:08.318Z","lock_delay_seconds":10,"principal":"arn:aws:iam::1:role/w"}`
)

// TestWatchRWWire: WatchRW asks GET /rwlocks/{name}/watch with the index
// and wait, decodes the writer and the readers (never a nil Readers), and
// refuses an answer whose lease is another name's or mode's.
func TestWatchRWWire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, answer           string
		wantWriter, wantErr    bool
		wantReaders, wantIndex int
	}{
		{name: "NeverTaken", answer: `{"name":"cache","index":0,"changed":false,"readers":[]}`},
		{name: "NoReadersMember", answer: `{"name":"cache","index":17,"changed":true,"writer":` + rwWriter + `,"fencing_token":8}`, wantWriter: true, wantIndex: 17},
		{name: "Readers", answer: `{"name":"cache","index":18,"changed":true,"readers":[` + rwReader + `],"fencing_token":9}`, wantReaders: 1, wantIndex: 18},
		{name: "ErrReaderAsWriter", answer: `{"name":"cache","index":18,"changed":true,"writer":` + rwReader + `,"readers":[]}`, wantErr: true},
		{name: "ErrOtherName", answer: `{"name":"cache","index":18,"changed":true,"readers":[{"name":"other","mode":"read","slot":1,"owner":"r","fencing_token":9,"expires_at":"2026-12-02T13:15:08.318Z"}]}`, wantErr: true},
		{name: "ErrNegativeIndex", answer: `{"name":"cache","index":-1,"changed":true,"readers":[]}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &rwServer{}
			c := s.start(t, 200, tt.answer)
			w, err := c.WatchRW(context.Background(), "cache", 16, 5*time.Second)
			if method, target, _ := s.sent(); method != http.MethodGet || target != "/rwlocks/cache/watch?index=16&wait_seconds=5" {
				t.Errorf("request: got %s %s, want GET /rwlocks/cache/watch?index=16&wait_seconds=5", method, target)
			}
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %+v, want an error for a malformed answer", w)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.Name != "cache" || w.Index != int64(tt.wantIndex) || (w.Writer != nil) != tt.wantWriter || w.Readers == nil || len(w.Readers) != tt.wantReaders {
				t.Errorf("got %+v, want index %d, writer %t, %d readers (never nil)", w, tt.wantIndex, tt.wantWriter, tt.wantReaders)
			}
		})
	}
}

// TestForceReleaseRWWire: ForceReleaseRW sends DELETE /admin/rwlocks/{name}
// with the mode, a reader's slot (the writer has none), the reason and the
// options; it returns the lease ended, ErrNotFound, or ErrStaleToken with
// the read/write lock's current lease (not as a lock's or a permit's).
func TestForceReleaseRWWire(t *testing.T) {
	t.Parallel()
	freeAt := time.Date(2026, 12, 2, 13, 21, 20, 0, time.UTC)
	tests := []struct {
		name        string
		mode        client.RWMode
		slot        int
		opts        []client.ForceReleaseOptions
		status      int
		answer      string
		wantBody    map[string]any
		wantErr     error
		wantCurrent int64
	}{
		{
			name: "Reader", mode: client.ReadMode, slot: 5, status: 200,
			answer:   `{"ended":` + rwReader + `,"reason":"gone","immediate":false,"free_at":"2026-12-02T13:21:20Z"}`,
			wantBody: map[string]any{"mode": "read", "slot": float64(5), "reason": "gone"},
		},
		{
			name: "WriterImmediateWithToken", mode: client.WriteMode, opts: []client.ForceReleaseOptions{{Immediate: true, FencingToken: 8}}, status: 200,
			answer:   `{"ended":` + rwWriter + `,"reason":"gone","immediate":true,"free_at":"2026-12-02T13:21:20Z"}`,
			wantBody: map[string]any{"mode": "write", "reason": "gone", "immediate": true, "fencing_token": float64(8)},
		},
		{
			name: "StaleTokenReader", mode: client.ReadMode, slot: 5, opts: []client.ForceReleaseOptions{{FencingToken: 3}}, status: 409,
			answer:   `{"type":"https://ft288.dev/problems/stale-token","title":"Stale fencing token","status":409,"current":` + rwReader + `}`,
			wantBody: map[string]any{"mode": "read", "slot": float64(5), "reason": "gone", "fencing_token": float64(3)}, wantErr: client.ErrStaleToken, wantCurrent: 9,
		},
		{
			name: "StaleTokenWriter", mode: client.WriteMode, opts: []client.ForceReleaseOptions{{FencingToken: 3}}, status: 409,
			answer:   `{"type":"https://ft288.dev/problems/stale-token","title":"Stale fencing token","status":409,"current":` + rwWriter + `}`,
			wantBody: map[string]any{"mode": "write", "reason": "gone", "fencing_token": float64(3)}, wantErr: client.ErrStaleToken, wantCurrent: 8,
		},
		{
			name: "NotFound", mode: client.WriteMode, status: 404,
			answer:   `{"type":"https://ft288.dev/problems/not-found","title":"Read/write lock lease not found","status":404}`,
			wantBody: map[string]any{"mode": "write", "reason": "gone"}, wantErr: client.ErrNotFound,
		},
		{
			name: "ErrOtherSlotEnded", mode: client.ReadMode, slot: 6, status: 200,
			answer:   `{"ended":` + rwReader + `,"reason":"gone","immediate":false,"free_at":"2026-12-02T13:21:20Z"}`,
			wantBody: map[string]any{"mode": "read", "slot": float64(6), "reason": "gone"}, wantErr: errMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &rwServer{}
			res, err := s.start(t, tt.status, tt.answer).ForceReleaseRW(context.Background(), "cache", tt.mode, tt.slot, "gone", tt.opts...)
			if method, target, body := s.sent(); method != http.MethodDelete || target != "/admin/rwlocks/cache" || !reflect.DeepEqual(body, tt.wantBody) {
				t.Errorf("request: got %s %s %v, want DELETE /admin/rwlocks/cache %v", method, target, body, tt.wantBody)
			}
			if tt.wantErr == errMalformed {
				if err == nil {
					t.Errorf("got %+v, want an error: another slot's lease ended", res)
				}
				return
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				var p *client.ProblemError
				switch {
				case tt.wantCurrent == 0:
				case !errors.As(err, &p) || p.CurrentRWLease == nil || p.Current != nil || p.CurrentPermit != nil:
					t.Errorf("got %v, want a *ProblemError with CurrentRWLease alone", err)
				case p.CurrentRWLease.FencingToken != tt.wantCurrent || p.CurrentRWLease.Mode == "" || p.CurrentRWLease.Owner == "":
					t.Errorf("current lease: got %+v, want token %d with its mode and owner", *p.CurrentRWLease, tt.wantCurrent)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Mode != tt.mode || res.Reason != "gone" || !res.FreeAt.Equal(freeAt) || res.Immediate != (len(tt.opts) > 0 && tt.opts[0].Immediate) {
				t.Errorf("got %+v, want the ended %s lease, free at %s", res, tt.mode, freeAt)
			}
		})
	}
}

// errMalformed marks a case whose answer the client must refuse.
var errMalformed = errors.New("malformed")

// TestRWAdminValidation: WatchRW and ForceReleaseRW refuse bad arguments
// before sending anything.
func TestRWAdminValidation(t *testing.T) {
	t.Parallel()
	s := &rwStub{}
	c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: s}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, err := range map[string]error{
		"WatchNameSlash": func() error { _, err := c.WatchRW(ctx, "a/b", 0, 0); return err }(),
		"WatchNegIndex":  func() error { _, err := c.WatchRW(ctx, "cache", -1, 0); return err }(),
		"WatchLongWait":  func() error { _, err := c.WatchRW(ctx, "cache", 0, client.MaxServerWait+time.Second); return err }(),
		"ForceBadMode":   func() error { _, err := c.ForceReleaseRW(ctx, "cache", "upgrade", 0, "r"); return err }(),
		"ForceSlotTooHigh": func() error {
			_, err := c.ForceReleaseRW(ctx, "cache", client.ReadMode, client.MaxReaders, "r")
			return err
		}(),
		"ForceNoReason": func() error { _, err := c.ForceReleaseRW(ctx, "cache", client.WriteMode, 0, " "); return err }(),
		"ForceNegToken": func() error {
			_, err := c.ForceReleaseRW(ctx, "cache", client.WriteMode, 0, "r", client.ForceReleaseOptions{FencingToken: -1})
			return err
		}(),
	} {
		if !errors.Is(err, client.ErrValidation) {
			t.Errorf("%s: got %v, want ErrValidation", name, err)
		}
	}
	if len(s.calls) != 0 {
		t.Errorf("sent %v, want nothing", s.paths())
	}
}

// rwWatchStub answers read/write watches from a script of states: a
// request from index i gets the first state whose index differs from i,
// the last state unchanged when none does; 503 once before the second
// state, and 500 (a setup error, not retried by WatchRW) once after it.
type rwWatchStub struct {
	mu      sync.Mutex
	states  []string // answers, by index: index i's JSON is states[i]
	indexes []int64
	asked   []string // each request's query
	failed  map[string]bool
}

func (s *rwWatchStub) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := r.URL.Query()
	s.asked = append(s.asked, r.URL.RawQuery)
	from := q.Get("index")
	if !s.failed[from] && from != "0" {
		s.failed[from] = true
		if from == "3" {
			return problemResponse(503, "service-unavailable"), nil
		}
		return problemResponse(500, "internal"), nil
	}
	for i, idx := range s.indexes {
		if strconv.FormatInt(idx, 10) == from && i+1 < len(s.indexes) {
			return jsonResponse(200, nil, json.RawMessage(s.states[i+1])), nil
		}
	}
	if from == "0" {
		return jsonResponse(200, nil, json.RawMessage(s.states[0])), nil
	}
	// Nothing changes: the service waits its wait_seconds, then answers
	// the same state.
	wait, _ := strconv.Atoi(q.Get("wait_seconds"))
	s.mu.Unlock()
	select {
	case <-time.After(time.Duration(wait) * time.Second):
	case <-r.Context().Done():
	}
	s.mu.Lock()
	return jsonResponse(200, nil, json.RawMessage(s.states[len(s.states)-1])), nil
}

// TestObserveRW: ObserveRW sends the first state, then each change in
// order with the index of the one before, through a 503 (retried by
// WatchRW) and a 500 (retried by ObserveRW with backoff); an unchanged
// answer is not sent again, and the channel closes when ctx ends.
func TestObserveRW(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &rwWatchStub{
			states: []string{
				`{"name":"cache","index":3,"changed":true,"readers":[` + rwReader + `],"fencing_token":1}`,
				`{"name":"cache","index":4,"changed":true,"readers":[],"fencing_token":1}`,
				`{"name":"cache","index":5,"changed":true,"writer":` + rwWriter + `,"readers":[],"fencing_token":2}`,
			},
			indexes: []int64{3, 4, 5},
			failed:  map[string]bool{},
		}
		c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: s}), client.WithoutKeepAlive())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := c.ObserveRW(ctx, "cache")
		var got []string
		for range 3 {
			r, ok := <-obs
			if !ok {
				t.Fatalf("closed after %v", got)
			}
			who := "none"
			switch {
			case r.Writer != nil:
				who = "writer " + r.Writer.Owner
			case len(r.Readers) > 0:
				who = "reader " + r.Readers[0].Owner
			}
			got = append(got, strconv.FormatInt(r.Index, 10)+" "+who)
		}
		if want := []string{"3 reader r1", "4 none", "5 writer w1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("states: got %v, want %v", got, want)
		}
		time.Sleep(time.Minute) // unchanged answers, each MaxServerWait long
		select {
		case r := <-obs:
			t.Fatalf("a state with no change: %+v", r)
		default:
		}
		cancel()
		if r, ok := <-obs; ok {
			t.Errorf("after cancel: got %+v, want the channel closed", r)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		// A look at once, then long polls from the last index sent: 3 twice
		// (503), 4 twice (500), then 5.
		want := []string{"index=0&wait_seconds=0", "index=3&wait_seconds=20", "index=3&wait_seconds=20",
			"index=4&wait_seconds=20", "index=4&wait_seconds=20", "index=5&wait_seconds=20"}
		if len(s.asked) < len(want) || !reflect.DeepEqual(s.asked[:len(want)], want) {
			t.Errorf("requests: got %v, want them to begin %v", s.asked, want)
		}
	})
}

// TestListAllRWLocksFollowsCursor: ListAllRWLocks asks GET /admin/rwlocks
// page after page, passing each page's cursor, and returns every row (the
// writer's lease, force released inside its lock-delay, and the queue).
func TestListAllRWLocksFollowsCursor(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		targets []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		targets = append(targets, r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("cursor") == "" {
			_, _ = w.Write([]byte(`{"rwlocks":[{"name":"cache","readers":[` + rwReader + `],"queue":[{"mode":"write","owner":"w2","joined_at":"2026-12-02T13:14:39Z","until":"2026-12-02T13:14:41Z"}],"fencing_token":9}],"cursor":"c 1"}`))
			return
		}
		forced := `{"name":"cache2","mode":"write","owner":"w1","fencing_token":3,"acquired_at":"2026-12-02T13:14:38.318Z","expires_at":"2026-12-02T13:14:39Z","lock_delay_seconds":10,"force_released":true}`
		_, _ = w.Write([]byte(`{"rwlocks":[{"name":"cache2","writer":` + forced + `,"readers":[],"queue":[],"fencing_token":3}]}`))
	}))
	t.Cleanup(srv.Close)
	all, err := newClient(t, srv.URL, client.WithoutKeepAlive()).ListAllRWLocks(context.Background(), "cache")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	wantTargets := []string{"/admin/rwlocks?limit=1000&prefix=cache", "/admin/rwlocks?cursor=c+1&limit=1000&prefix=cache"}
	if !reflect.DeepEqual(targets, wantTargets) {
		t.Errorf("requests: got %q, want %q", targets, wantTargets)
	}
	if len(all) != 2 || len(all[0].Readers) != 1 || len(all[0].Queue) != 1 || all[0].Queue[0].Mode != client.WriteMode ||
		all[1].Writer == nil || !all[1].Writer.ForceReleased || all[1].Writer.FencingToken != 3 {
		t.Errorf("got %+v, want cache's reader and queued writer, then cache2's force released writer", all)
	}
}
