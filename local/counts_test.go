package local

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/api"
)

// TestCounts: the runner counts every request matched to a route by its
// key, refused or not, the try-acquires whose body carried wait_seconds
// above 0, and the capacity model's 429s and 500s by route.
func TestCounts(t *testing.T) {
	rn := NewRunner(newFuzzHandler(), slog.New(slog.DiscardHandler))
	if err := rn.SetCapacity(Capacity{Mode: CapacityDefault, Throttles: map[string]api.Throttle{"status": {Rate: 0, Burst: 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/locks/a", `{"owner":"w1","ttl_seconds":30}`, 200},
		{"POST", "/locks/a", `{"owner":"w1","ttl_seconds":30,"wait_seconds":5}`, 422}, // counted: the old shape
		{"POST", "/locks/a", `{"owner":"w1","ttl_seconds":30,"wait_seconds":0}`, 200},
		{"POST", "/locks/a", `{"owner":"w1","ttl_seconds":30,"wait_seconds":"5"}`, 422}, // not a number above 0
		{"POST", "/semaphores/s", `{"owner":"w1","ttl_seconds":30,"permits":2,"wait_seconds":1}`, 422},
		{"POST", "/locks/a/wait", `{"owner":"w1","ttl_seconds":30,"wait_seconds":5}`, 200},  // the waiting route
		{"POST", "/locks/a/renew", `{"owner":"w1","ttl_seconds":30,"wait_seconds":5}`, 422}, // not a try
		{"GET", "/locks/a", "", 200},
		{"GET", "/locks/a", "", 429},
		{"GET", "/nowhere", "", 404}, // no route: not counted
	} {
		rec := httptest.NewRecorder()
		rn.ServeHTTP(rec, httptest.NewRequest(r.method, r.path, strings.NewReader(r.body)))
		if rec.Code != r.want {
			t.Fatalf("%s %s %s: got %d %s, want %d", r.method, r.path, r.body, rec.Code, rec.Body, r.want)
		}
	}
	got := rn.Counts()
	want := Counts{
		Requests: map[string]int64{"POST /locks/{resource}": 4, "POST /semaphores/{name}": 1, "POST /locks/{resource}/wait": 1,
			"POST /locks/{resource}/renew": 1, "GET /locks/{resource}": 2},
		TryWaitSeconds: 2,
		Throttled:      map[string]int64{"GET /locks/{resource}": 1},
		Refused:        map[string]int64{},
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Errorf("got counts %s, want %s", gb, wb)
	}
	// The snapshot is a copy.
	got.Requests["GET /locks/{resource}"] = 99
	if rn.Counts().Requests["GET /locks/{resource}"] != 2 {
		t.Error("Counts returned the runner's own map")
	}
}

// TestRefusalLog: refused requests are logged at info level as one line
// per second with a count per route and answer, not one line each; a
// quiet second logs nothing.
func TestRefusalLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var buf bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&lockedBuffer{mu: &mu, b: &buf}, &slog.HandlerOptions{Level: slog.LevelInfo}))
		rn := NewRunner(newFuzzHandler(), log)
		if err := rn.SetCapacity(Capacity{Mode: CapacityDefault,
			Throttles: map[string]api.Throttle{"status": {Rate: 0, Burst: 1}, "semaphoreStatus": {Rate: 0, Burst: 1}}}); err != nil {
			t.Fatal(err)
		}
		get := func(path string, want int) {
			t.Helper()
			rec := httptest.NewRecorder()
			rn.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if rec.Code != want {
				t.Fatalf("GET %s: got %d, want %d", path, rec.Code, want)
			}
		}
		get("/locks/a", http.StatusOK)
		get("/semaphores/s", http.StatusOK)
		for range 5 {
			get("/locks/a", http.StatusTooManyRequests)
		}
		get("/semaphores/s", http.StatusTooManyRequests)
		lines := func() []map[string]any {
			mu.Lock()
			defer mu.Unlock()
			var out []map[string]any
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "refused by the capacity model" {
					out = append(out, m)
				}
			}
			return out
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if n := len(lines()); n != 0 {
			t.Fatalf("got %d lines before the second ended, want 0", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		got := lines()
		if len(got) != 1 || got[0]["level"] != "INFO" {
			t.Fatalf("got %v, want one INFO line for the second", got)
		}
		n, _ := got[0]["too_many_requests"].(map[string]any)
		if n["GET /locks/{resource}"] != 5.0 || n["GET /semaphores/{name}"] != 1.0 || len(n) != 2 {
			t.Errorf("got counts %v, want 5 on GET /locks/{resource} and 1 on GET /semaphores/{name}", got[0])
		}
		time.Sleep(5 * time.Second) // quiet: nothing more
		synctest.Wait()
		get("/locks/a", http.StatusTooManyRequests)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := lines(); len(got) != 2 {
			t.Errorf("got %d lines, want 2 (none for the quiet seconds)", len(got))
		}
	})
}

// lockedBuffer is a buffer the logger and the test share.
type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
