package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ft288/locks/client"
)

// setStub is a scripted lock set service for the names acct:1 and acct:2
// (prefix "acct:"): acquires are held until grantAt; the waiting route
// answers waitAnswers in order when they are set, and grants once they
// are used up; otherwise it answers refuseWait when it is set, and
// otherwise, when hold is set, keeps the request until hold is closed or
// the request's context ends, then grants. Every request's method, path
// and body are recorded.
type setStub struct {
	mu          sync.Mutex
	grantAt     time.Time
	waitAnswers []func() *http.Response
	refuseWait  func() *http.Response
	hold        chan struct{}
	calls       []rwCall
}

func (s *setStub) RoundTrip(r *http.Request) (*http.Response, error) {
	var body map[string]any
	if r.Body != nil {
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &body)
	}
	s.mu.Lock()
	s.calls = append(s.calls, rwCall{r.Method, r.URL.Path, body})
	grantAt, refuse, hold, scripted := s.grantAt, s.refuseWait, s.hold, s.waitAnswers != nil
	wait := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/wait")
	var next func() *http.Response
	if wait && len(s.waitAnswers) > 0 {
		next, s.waitAnswers = s.waitAnswers[0], s.waitAnswers[1:]
	}
	s.mu.Unlock()
	switch {
	case next != nil:
		return next(), nil
	case wait && scripted:
		// The scripted answers are used up: grant.
	case wait && refuse != nil:
		return refuse(), nil
	case wait && hold != nil:
		select {
		case <-hold:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	case r.Method == http.MethodDelete:
		return &http.Response{StatusCode: 204, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
	case r.Method == http.MethodPost && time.Now().Before(grantAt):
		return jsonResponse(200, nil, map[string]any{"acquired": false, "blocked_by": "acct:1"}), nil
	}
	var locks []map[string]any
	for i, n := range []string{"acct:1", "acct:2"} {
		locks = append(locks, map[string]any{"resource": n, "owner": body["owner"], "fencing_token": 70 + i,
			"acquired_at": time.Now().Format(time.RFC3339Nano), "expires_at": time.Now().Add(time.Minute).Format(time.RFC3339Nano)})
	}
	return jsonResponse(200, nil, map[string]any{"acquired": true, "set_id": "set-1", "locks": locks}), nil
}

func (s *setStub) paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.calls {
		out = append(out, c.method+" "+c.path)
	}
	return out
}

func newSetStubClient(t *testing.T, s *setStub) *client.Client {
	t.Helper()
	c, err := client.New("http://lock.test", client.WithHTTPClient(&http.Client{Transport: s}),
		client.WithBackoff(10*time.Millisecond, 200*time.Millisecond), client.WithoutKeepAlive())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAcquireSetFallsBackToPolling: AcquireSet tries first, then waits on
// /locksets/{prefix}/wait; a service that refuses wait_seconds (422) or a
// stack without the waiting route (API Gateway's 404) is polled on the try
// route from then on, and the client remembers it.
func TestAcquireSetFallsBackToPolling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		refuse func() *http.Response
	}{
		{"Refuses422", func() *http.Response {
			resp := jsonResponse(422, nil, map[string]any{"type": client.ProblemTypeBase + "validation-failed", "status": 422,
				"errors": []map[string]string{{"field": "wait_seconds", "detail": "not supported"}}})
			resp.Header.Set("Content-Type", "application/problem+json")
			return resp
		}},
		{"NoWaitRoute404", func() *http.Response { return gatewayResponse(404, "Not Found") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := &setStub{grantAt: time.Now().Add(time.Second), refuseWait: tt.refuse}
				c := newSetStubClient(t, s)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				set, err := c.AcquireSet(ctx, []string{"acct:1", "acct:2"}, "o1", 30*time.Second)
				if err != nil {
					t.Fatalf("AcquireSet: %v", err)
				}
				if len(set.Leases()) != 2 || set.Lease("acct:2").FencingToken() != 71 {
					t.Errorf("set: %d leases, acct:2's token %d; want 2 and 71", len(set.Leases()), set.Lease("acct:2").FencingToken())
				}
				p := s.paths()
				if len(p) < 4 || p[0] != "POST /locksets/acct:" || p[1] != "POST /locksets/acct:/wait" ||
					slices.Contains(p[2:], "POST /locksets/acct:/wait") {
					t.Errorf("requests: got %v, want a try, one refused wait, then polls on the try route", p)
				}
				for _, call := range s.calls {
					if _, ok := call.body["wait_seconds"]; ok && !strings.HasSuffix(call.path, "/wait") {
						t.Errorf("wait_seconds sent to %s", call.path)
					}
				}
				s.mu.Lock()
				s.grantAt = time.Now().Add(time.Second)
				s.mu.Unlock()
				n := len(s.paths())
				if _, err := c.AcquireSet(ctx, []string{"acct:1", "acct:2"}, "o2", 30*time.Second); err != nil {
					t.Fatalf("second AcquireSet: %v", err)
				}
				if got := s.paths()[n:]; slices.Contains(got, "POST /locksets/acct:/wait") {
					t.Errorf("second AcquireSet: got %v, want polls on the try route only (the refusal remembered)", got)
				}
			})
		})
	}
}

// TestAcquireSetBringsBackTicket: each waiting round sends back the last
// round's queue_ticket, the set's place in the queue it waited in
// (docs/api.md, "Lock sets"); the try before them sends none. A round
// answered 503 (it may still be running at the service) leaves the ticket
// as it was; a refused round without one (it ran out before it queued)
// clears it.
func TestAcquireSetBringsBackTicket(t *testing.T) {
	t.Parallel()
	refused := func(ticket string) func() *http.Response {
		return func() *http.Response {
			body := map[string]any{"acquired": false, "blocked_by": "acct:2"}
			if ticket != "" {
				body["queue_ticket"] = ticket
			}
			return jsonResponse(200, nil, body)
		}
	}
	s := &setStub{grantAt: time.Now().Add(time.Hour), waitAnswers: []func() *http.Response{
		refused("t1"),
		func() *http.Response { return problemResponse(503, "service-unavailable") },
		refused(""),
		refused("t4"),
	}}
	c := newSetStubClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.AcquireSet(ctx, []string{"acct:1", "acct:2"}, "o1", 30*time.Second); err != nil {
		t.Fatalf("AcquireSet: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var sent []any // each acquire's queue_ticket (nil: none)
	for _, call := range s.calls {
		if call.method == http.MethodPost {
			sent = append(sent, call.body["queue_ticket"])
		}
	}
	if want := []any{nil, nil, "t1", "t1", nil, "t4"}; !slices.Equal(sent, want) {
		t.Errorf("queue_ticket of each acquire: got %v, want %v", sent, want)
	}
}

// TestAcquireSetReleasesLateGrant: when AcquireSet's wait ends with a
// waiting round in flight, the round is not cancelled; it grants after
// all, and the client releases that set by its tokens (Drain waits for
// it), so that it does not block the names until its TTL.
func TestAcquireSetReleasesLateGrant(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &setStub{grantAt: time.Now().Add(time.Hour), hold: make(chan struct{})}
		c := newSetStubClient(t, s)
		_, err := c.AcquireSet(context.Background(), []string{"acct:1", "acct:2"}, "o1", 30*time.Second, client.WithWait(3*time.Second))
		if !errors.Is(err, client.ErrHeld) {
			t.Fatalf("AcquireSet: %v, want the wait's end while held (ErrHeld)", err)
		}
		if p := s.paths(); len(p) != 2 || p[1] != "POST /locksets/acct:/wait" {
			t.Fatalf("requests: got %v, want a try and a waiting round still in flight", p)
		}
		close(s.hold) // the round grants after its caller stopped waiting
		if err := c.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		last := s.calls[len(s.calls)-1]
		if last.method != http.MethodDelete || last.path != "/locksets/acct:" || last.body["owner"] != "o1" {
			t.Fatalf("last request: %s %s %v, want the late set's release", last.method, last.path, last.body)
		}
		locks, _ := json.Marshal(last.body["locks"])
		if string(locks) != `[{"fencing_token":70,"resource":"acct:1"},{"fencing_token":71,"resource":"acct:2"}]` {
			t.Errorf("release's locks: %s, want both names by their tokens", locks)
		}
	})
}
