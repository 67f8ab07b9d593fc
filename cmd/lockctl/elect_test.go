//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/cmd/lockctl/internal/cli"
	"github.com/ft288/locks/internal/testenv"
)

// watchLine is a line of `lockctl watch`.
type watchLine struct {
	Index        int64   `json:"index"`
	FencingToken int64   `json:"fencing_token"`
	Leader       *string `json:"leader"`
	Skipped      int     `json:"skipped"`
}

// shortWatch gives the watch route a 5 s timeout (Options.Timeouts), so
// that its waits end within 2 s: the local runner, like Lambda, does not
// notice a watcher that leaves, and closing the server waits for them.
var shortWatch = map[string]time.Duration{"watch": 5 * time.Second}

// waitLines waits up to 10s for n complete lines of lockctl's stdout that
// start with prefix, and returns the rest of each.
func (p *proc) waitLines(tb testing.TB, prefix string, n int) []string {
	tb.Helper()
	var got []string
	p.waitOutput(tb, &p.stdout, strconv.Itoa(n)+" lines "+strconv.Quote(prefix), func(out string) (string, bool) {
		got = got[:0]
		for _, line := range strings.SplitAfter(out, "\n") {
			if rest, ok := strings.CutPrefix(line, prefix); ok && strings.HasSuffix(rest, "\n") {
				got = append(got, strings.TrimSuffix(rest, "\n"))
			}
		}
		return "", len(got) >= n
	})
	return got
}

// testWatch: `lockctl watch` prints the state when it starts and each
// change as a JSON line, and exits 0 on SIGINT and SIGTERM.
func testWatch(t *testing.T, bin string) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(strings.ToUpper(unix(sig)), func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{Timeouts: shortWatch})
			res := uniqueName(t)
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			p := startLockctl(t, bin, srv.URL, nil, "watch", res)
			line := func(n int) watchLine {
				t.Helper()
				var l watchLine
				if err := json.Unmarshal([]byte(p.waitLines(t, "", n)[n-1]), &l); err != nil {
					t.Fatalf("line %d: %v", n, err)
				}
				return l
			}
			if l := line(1); l != (watchLine{}) {
				t.Fatalf("line 1: got %+v, want index 0, no leader", l)
			}
			lease, err := c.TryAcquire(context.Background(), res, "w1", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			tok := lease.FencingToken()
			if l := line(2); l.Index != 2*tok || l.FencingToken != tok || l.Leader == nil || *l.Leader != "w1" || l.Skipped != 0 {
				t.Errorf("line 2: got %+v, want index %d, token %d, leader w1", l, 2*tok, tok)
			}
			if err := lease.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if l := line(3); l.Index != 2*tok+1 || l.FencingToken != tok || l.Leader != nil {
				t.Errorf("line 3: got %+v, want index %d, token %d, no leader", l, 2*tok+1, tok)
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 10*time.Second); code != 0 || p.stderr.String() != "" {
				t.Errorf("after %s: exit %d, stderr %q; want 0 and nothing", unix(sig), code, p.stderr.String())
			}
		})
	}
}

// testElectOneAtATime: two `lockctl elect` of one name; the second runs
// its command only once the first's has ended, with a larger token.
func testElectOneAtATime(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	// In front of the service for the second candidate: its acquires.
	asked := make(chan struct{}, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && !strings.HasSuffix(r.URL.Path, "/renew") {
			select {
			case asked <- struct{}{}:
			default:
			}
		}
		proxyTo(t, srv.URL, w, r)
	}))
	t.Cleanup(front.Close)
	dir, res := t.TempDir(), uniqueName(t)
	log := filepath.Join(dir, "log")
	const script = `echo "start $LOCK_FENCING_TOKEN" >> "$LOG"; echo ready $LOCK_FENCING_TOKEN; ` +
		`while [ ! -e "$GO" ]; do sleep 0.02; done; echo "end $LOCK_FENCING_TOKEN" >> "$LOG"`
	start := func(endpoint, goFile string) *proc {
		return startLockctl(t, bin, endpoint, []string{"LOG=" + log, "GO=" + filepath.Join(dir, goFile)},
			"elect", res, "--ttl", "5", "--", "sh", "-c", script)
	}
	a := start(srv.URL, "go-a")
	tokA := atoi(t, a.waitLine(t, "ready "))
	b := start(front.URL, "go-b")
	<-asked // the second candidate campaigns
	if out := b.stdout.String(); out != "" {
		t.Fatalf("the second candidate ran its command while the first led: %q", out)
	}
	if err := os.WriteFile(filepath.Join(dir, "go-a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, 10*time.Second); code != 0 {
		t.Errorf("first: exit %d, want its command's 0; stderr: %s", code, a.stderr.String())
	}
	tokB := atoi(t, b.waitLine(t, "ready "))
	if err := os.WriteFile(filepath.Join(dir, "go-b"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, 10*time.Second); code != 0 {
		t.Errorf("second: exit %d, want its command's 0; stderr: %s", code, b.stderr.String())
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "start " + strconv.Itoa(tokA) + "\nend " + strconv.Itoa(tokA) + "\nstart " + strconv.Itoa(tokB) + "\nend " + strconv.Itoa(tokB) + "\n"
	if string(data) != want || tokB <= tokA {
		t.Errorf("terms: got %q, want %q with the second token larger", data, want)
	}
}

// testElectLoss: the service stops renewing the leader's lease. lockctl
// stops the command and campaigns again, running it anew (larger token)
// once it leads again; with --once it exits 76 instead.
func testElectLoss(t *testing.T, bin string) {
	for _, once := range []bool{false, true} {
		name := "CampaignsAgain"
		if once {
			name = "Once"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			var down atomic.Bool
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if down.Load() && strings.HasSuffix(r.URL.Path, "/renew") {
					http.Error(w, `{"message":"Service Unavailable"}`, http.StatusServiceUnavailable)
					return
				}
				proxyTo(t, srv.URL, w, r)
			}))
			t.Cleanup(front.Close)
			res := uniqueName(t)
			args := []string{"elect", res, "--ttl", "3"}
			if once {
				args = append(args, "--once")
			}
			script := `trap 'echo term; exit 143' TERM; echo ready $LOCK_FENCING_TOKEN $$; while :; do sleep 0.05; done`
			p := startLockctl(t, bin, front.URL, nil, append(args, "--", "sh", "-c", script)...)
			first := strings.Fields(p.waitLine(t, "ready "))
			t.Cleanup(func() { _ = syscall.Kill(-atoi(t, first[1]), syscall.SIGKILL) })
			down.Store(true)
			p.waitLine(t, "term")
			down.Store(false)
			if once {
				if code := p.wait(t, 10*time.Second); code != cli.ExitLeaseLost {
					t.Errorf("exit code: got %d, want %d; stderr: %s", code, cli.ExitLeaseLost, p.stderr.String())
				}
				return
			}
			second := strings.Fields(p.waitLines(t, "ready ", 2)[1])
			t.Cleanup(func() { _ = syscall.Kill(-atoi(t, second[1]), syscall.SIGKILL) })
			if atoi(t, second[0]) <= atoi(t, first[0]) {
				t.Errorf("second term's token %s, want larger than %s", second[0], first[0])
			}
			if !strings.Contains(p.stderr.String(), "campaigning again") {
				t.Errorf("stderr: got %q, want it to say it campaigns again", p.stderr.String())
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 10*time.Second); code != 143 {
				t.Errorf("exit code: got %d, want the command's 143; stderr: %s", code, p.stderr.String())
			}
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Status(context.Background(), res); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("status after lockctl exited: got %v, want ErrNotFound (resigned)", err)
			}
		})
	}
}

// testElectSignalWhileCampaigning: a signal while another candidate leads
// stops lockctl with 128+n, without running the command or touching the
// leader's lease.
func testElectSignalWhileCampaigning(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	res := uniqueName(t)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.TryAcquire(context.Background(), res, "leader", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Release(context.Background())
	asked := make(chan struct{}, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			select {
			case asked <- struct{}{}:
			default:
			}
		}
		proxyTo(t, srv.URL, w, r)
	}))
	t.Cleanup(front.Close)
	// --ttl 3: rounds of 1 s at the service, so the answer of the round a
	// signal interrupts (which lockctl awaits) comes soon.
	p := startLockctl(t, bin, front.URL, nil, "elect", res, "--ttl", "3", "--", "sh", "-c", "echo ran")
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatalf("no campaign within 10s; stderr: %s", p.stderr.String())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code: got %d, want %d; stderr: %s", code, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	if out := p.stdout.String(); out != "" {
		t.Errorf("the command ran: %q", out)
	}
	if st, err := c.Status(context.Background(), res); err != nil || st.Owner != "leader" {
		t.Errorf("status: got %+v, %v; want the leader's lease untouched", st, err)
	}
}
