//go:build unix

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// testAcquireWaitSignals: `lockctl acquire --wait` waits at the service
// with one request. A signal stops the wait; lockctl then waits for that
// round's answer (a grant it would have to release), and a second signal
// cuts that clean-up short.
func testAcquireWaitSignals(t *testing.T, bin string) {
	srv := testenv.Start(t, testenv.Options{})
	var acquires atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && !strings.HasSuffix(r.URL.Path, "/renew") {
			acquires.Add(1)
		}
		proxyTo(t, srv.URL, w, r)
	}))
	t.Cleanup(proxy.Close)
	res := uniqueName(t)
	c, err := client.New(srv.URL, client.WithoutKeepAlive())
	if err != nil {
		t.Fatal(err)
	}
	holder, err := c.TryAcquire(context.Background(), res, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())

	// One round of min(20 s, --wait 30 s, ttl/2 = 15 s).
	p := startLockctl(t, bin, proxy.URL, nil, "acquire", res, "--wait", "30", "--ttl", "30")
	time.Sleep(time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		t.Fatalf("lockctl exited %d at once; want it to wait for the round's answer (stderr %q)", p.code, p.stderr.String())
	case <-time.After(700 * time.Millisecond):
	}
	second := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code == 0 {
		t.Errorf("exit code 0 after a signal; stderr %q", p.stderr.String())
	}
	if took := time.Since(second); took > 2*time.Second {
		t.Errorf("lockctl exited %s after the second signal, want at once", took)
	}
	if n := acquires.Load(); n != 1 {
		t.Errorf("lockctl sent %d acquire requests in its round, want 1", n)
	}
}
