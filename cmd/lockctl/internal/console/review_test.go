package console

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// TestGuardFetchMetadata: a page on another port of 127.0.0.1 is same-site
// with the console (sites ignore ports), so the browser sends it the
// SameSite=Strict cookie; a no-cors GET (<img>, <script>) carries no
// Origin. Chromium marks such a request Sec-Fetch-Site: same-site (or
// cross-site), and the console must refuse it: it would open a listing
// stream or start a watch of any name the other page picks. The page's own
// requests are same-origin, and opening the printed URL is "none".
func TestGuardFetchMetadata(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(&fakeService{})
	defer svc.Close()
	s := startConsole(t, svc.URL, time.Hour, time.Second)
	ck := session(t, s)
	base := "http://" + s.Addr()
	for _, tt := range []struct {
		name, path, site string
		want             int
	}{
		{"SameOrigin", "/api/status?kind=locks&name=a", "same-origin", http.StatusNotFound}, // the fake has no status route: it reached the service
		{"UserNavigation", "/", "none", http.StatusOK},
		{"NoHeader", "/", "", http.StatusOK}, // a browser without fetch metadata
		{"SameSiteWatch", "/api/events?watch=victim&wkind=locks", "same-site", http.StatusForbidden},
		{"SameSiteStatus", "/api/status?kind=locks&name=a", "same-site", http.StatusForbidden},
		{"CrossSitePage", "/", "cross-site", http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", base+tt.path, nil)
			req.AddCookie(ck)
			if tt.site != "" {
				req.Header.Set("Sec-Fetch-Site", tt.site)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("Sec-Fetch-Site %q: got %d, want %d", tt.site, resp.StatusCode, tt.want)
			}
		})
	}
	s.watches.mu.Lock()
	started := s.watches.started
	s.watches.mu.Unlock()
	if started != 0 {
		t.Errorf("watches started by other sites' requests: got %d, want 0", started)
	}
}

// TestStatusInvalidName: a name the client refuses before sending (empty,
// or with a "/") is the operator's mistake, not an unreachable service: the
// page must not say "the lock service could not be reached" (502).
func TestStatusInvalidName(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(&fakeService{})
	defer svc.Close()
	s := startConsole(t, svc.URL, time.Hour, time.Second)
	ck := session(t, s)
	for _, name := range []string{"a%2Fb", ""} {
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/api/status?kind=locks&name="+name, nil)
		req.AddCookie(ck)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status of %q: got %d, want 400 (the name is invalid; the service was never asked)", name, resp.StatusCode)
		}
	}
}

// TestToProblemServiceValidation: the service's own validation problem
// (which errors.Is ErrValidation too) keeps its status and title.
func TestToProblemServiceValidation(t *testing.T) {
	t.Parallel()
	pe := &client.ProblemError{Status: 400, Type: client.ProblemTypeBase + "validation-failed", Title: "Validation failed", Detail: "reason: too long"}
	p := toProblem(fmt.Errorf("force-release %q: %w", "a", pe))
	if p.Status != 400 || p.Title != "Validation failed" || p.Slug != "validation-failed" {
		t.Errorf("got %+v, want the service's 400 Validation failed", p)
	}
}

// TestGuardLauncherNavigation: `lockctl ui --open` opens a file that leads
// to the token URL, a navigation from another site (file:). The token
// exchange alone is let through as such a top-level navigation, answered
// with a page that moves on to "/" (no redirect: a cross-site redirect
// chain would not carry the SameSite=Strict cookie); any other request
// from another site is refused and spends no token.
func TestGuardLauncherNavigation(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(&fakeService{})
	defer svc.Close()
	s := startConsole(t, svc.URL, time.Hour, time.Second)
	get := func(url, mode, dest string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Sec-Fetch-Mode", mode)
		req.Header.Set("Sec-Fetch-Dest", dest)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tt := range []struct{ name, path, mode, dest string }{
		{"Frame", s.URL(), "navigate", "iframe"},
		{"Image", s.URL(), "no-cors", "image"},
		{"PageNavigation", "http://" + s.Addr() + "/", "navigate", "document"},
		{"APINavigation", "http://" + s.Addr() + "/api/poll?token=x", "navigate", "document"},
	} {
		resp := get(tt.path, tt.mode, tt.dest)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: got %d, want 403", tt.name, resp.StatusCode)
		}
	}
	select {
	case <-s.Exchanged():
		t.Fatal("the token was spent by a refused request")
	default:
	}
	resp := get(s.URL(), "navigate", "document")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(resp.Cookies()) != 1 || !strings.Contains(string(body), `http-equiv="refresh" content="0;url=/"`) {
		t.Errorf("launcher navigation: got %d, cookies %v, page %q; want 200, the cookie, and a page that moves on to /", resp.StatusCode, resp.Cookies(), body)
	}
	select {
	case <-s.Exchanged():
	default:
		t.Error("Exchanged is not closed after the exchange")
	}
}
