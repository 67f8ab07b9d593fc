package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// The security model (docs/console.md#security-model): the server binds
// loopback only; the URL it prints carries a random per-run token that the
// first GET of the page exchanges for an HttpOnly, SameSite=Strict session
// cookie (the token is then spent); every other request needs that cookie,
// a Host equal to the bound address (a rebound DNS name carries another
// Host), when the browser sends an Origin, the bound origin and, when it
// sends Sec-Fetch-Site, same-origin or none. The last one matters because
// a page on another port of 127.0.0.1 is same-site with the console: the
// browser sends it the SameSite=Strict cookie, and a no-cors GET (an <img>,
// a <script>) carries no Origin. One request is let through from another
// site: the token exchange as a top-level navigation (Sec-Fetch-Mode
// navigate, Sec-Fetch-Dest document), which is how the browser opens the
// launcher file of `lockctl ui --open` (WriteLauncher); it is answered with a
// page that moves on to "/" itself, a same-origin navigation that carries
// the SameSite=Strict cookie, where a redirect would keep the cross-site
// chain the browser withholds it from.

// securityHeaders are set on every answer: the page loads only its own
// embedded assets and talks only to this server.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
	"X-Content-Type-Options":  "nosniff",
	"X-Frame-Options":         "DENY",
	"Referrer-Policy":         "no-referrer",
	"Cache-Control":           "no-store",
}

// guard admits the requests of the browser that exchanged the token.
type guard struct {
	host   string // the bound address, "127.0.0.1:PORT": the only Host admitted
	origin string // "http://" + host
	cookie string // the session cookie's name, per port: cookies ignore ports

	mu      sync.Mutex
	token   string        // "" once exchanged
	spent   chan struct{} // closed when the token is exchanged
	session string        // the cookie's value
}

// newGuard returns the guard of a server bound to addr, with a fresh token
// and session secret.
func newGuard(addr string) *guard {
	_, port, _ := net.SplitHostPort(addr)
	return &guard{host: addr, origin: "http://" + addr, cookie: "lockctl_ui_" + port, token: secret(), spent: make(chan struct{}), session: secret()}
}

// secret is 32 random bytes, base64url.
func secret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// url is the URL to open: the page with the token.
func (g *guard) url() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("%s/?token=%s", g.origin, g.token)
}

// wrap admits a request to next only with the session cookie, the bound
// Host, no foreign Origin and no other site's Sec-Fetch-Site; a GET of "/" with the unspent token sets the
// cookie and redirects to "/".
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		if r.Host != g.host {
			http.Error(w, "wrong Host: open the URL lockctl ui printed", http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != g.origin {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		tok := r.URL.Query().Get("token")
		isExchange := tok != "" && r.Method == http.MethodGet && r.URL.Path == "/"
		navigation := r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
		if crossSite(r) && !(isExchange && navigation) {
			http.Error(w, "request from another site refused: open the URL lockctl ui printed from the address bar", http.StatusForbidden)
			return
		}
		if isExchange {
			g.exchange(w, r, tok)
			return
		}
		if !g.hasSession(r) {
			http.Error(w, "no session: open the URL lockctl ui printed (its token works once)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossSite reports whether r says it comes from another site: a
// Sec-Fetch-Site other than same-origin or none (a page on another port of
// 127.0.0.1 is same-site).
func crossSite(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	return site != "" && site != "same-origin" && site != "none"
}

// exchange spends the token for the session cookie. A browser that has the
// cookie already (the printed URL opened twice) is sent on to the page.
// A navigation from another site (the launcher file) is sent on by a page
// (onwardPage), so that the browser's request of "/" is same-origin and
// carries the cookie.
func (g *guard) exchange(w http.ResponseWriter, r *http.Request, tok string) {
	g.mu.Lock()
	ok := g.token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(g.token)) == 1
	if ok {
		g.token = ""
		close(g.spent)
	}
	g.mu.Unlock()
	if !ok && !g.hasSession(r) {
		http.Error(w, "this token is spent or wrong: restart lockctl ui for a new URL", http.StatusForbidden)
		return
	}
	if ok {
		http.SetCookie(w, &http.Cookie{Name: g.cookie, Value: g.session, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	if crossSite(r) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, onwardPage)
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// onwardPage moves the browser on to "/" from the token exchange of a
// navigation from another site.
const onwardPage = `<!doctype html>
<meta charset="utf-8">
<meta http-equiv="refresh" content="0;url=/">
<title>lockctl ui</title>
<p><a href="/">Open the console</a></p>
`

// hasSession reports whether r carries the session cookie.
func (g *guard) hasSession(r *http.Request) bool {
	c, err := r.Cookie(g.cookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.session)) == 1
}

// checkLoopback refuses an address to listen on that is not a loopback IP.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: want HOST:PORT, e.g. 127.0.0.1:8700", addr)
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--addr %q: the console listens on a loopback address only (127.0.0.1 or [::1])", addr)
	}
	return nil
}

// WriteLauncher writes a page that sends the browser on to url (the URL
// with the token) into a new directory only the user can enter (0700; the
// file is 0600), and returns the file's path and a func that removes both.
// Opening the file's path instead of url keeps the token off command
// lines, which every user can read (/proc/PID/cmdline).
func WriteLauncher(url string) (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "lockctl-ui-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	path = filepath.Join(dir, "open.html")
	u := html.EscapeString(url)
	page := `<!doctype html>
<meta charset="utf-8">
<meta http-equiv="refresh" content="0;url=` + u + `">
<title>lockctl ui</title>
<p><a href="` + u + `">Open lockctl ui</a></p>
`
	if err := os.WriteFile(path, []byte(page), 0o600); err != nil {
		remove()
		return "", nil, err
	}
	return path, remove, nil
}
