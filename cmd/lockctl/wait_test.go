//go:build unix

package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ft288/locks/client"
	"github.com/ft288/locks/internal/testenv"
)

// testAcquireWaitSignals: `lockctl acquire --wait` tries, finds the lock
// held and waits at the service with one round (…/wait). A signal stops
// the wait; lockctl then waits for that
// round's answer, a grant it releases, and a second signal cuts that
// clean-up short.
func testAcquireWaitSignals(t *testing.T, bin string) {
	for _, second := range []bool{false, true} {
		name := "FirstWaitsForTheRound"
		if second {
			name = "SecondCutsTheCleanUpShort"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.Start(t, testenv.Options{})
			var acquires, releases atomic.Int32
			arrived := make(chan struct{})
			var once sync.Once
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPost && !strings.HasSuffix(r.URL.Path, "/renew"):
					acquires.Add(1)
					if strings.HasSuffix(r.URL.Path, "/wait") {
						once.Do(func() { close(arrived) })
					}
				case r.Method == http.MethodDelete:
					releases.Add(1)
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
			select {
			case <-arrived: // lockctl waits at the service
			case <-p.done:
				t.Fatalf("lockctl exited %d before it asked for the lock; stderr %q", p.code, p.stderr.String())
			}
			_ = p.cmd.Process.Signal(syscall.SIGINT)
			// lockctl reports the interrupted wait, then waits for the
			// round's answer.
			p.waitOutput(t, &p.stderr, "a report of the interrupted wait", func(out string) (string, bool) {
				return "", strings.Contains(out, "lockctl: ")
			})
			select {
			case <-p.done:
				t.Fatalf("lockctl exited %d at once; want it to wait for the round's answer (stderr %q)", p.code, p.stderr.String())
			default:
			}

			if second {
				start := time.Now()
				_ = p.cmd.Process.Signal(syscall.SIGINT)
				if code := p.wait(t, 5*time.Second); code == 0 {
					t.Errorf("exit code 0 after a signal; stderr %q", p.stderr.String())
				}
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("lockctl exited %s after the second signal, want at once", took)
				}
			} else {
				// The lock comes free: the round grants it to lockctl, which
				// releases that grant and exits.
				if err := holder.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				if code := p.wait(t, 10*time.Second); code == 0 {
					t.Errorf("exit code 0 after a signal; stderr %q", p.stderr.String())
				}
				if n := releases.Load(); n != 1 {
					t.Errorf("lockctl sent %d releases, want 1: of the grant that came after the signal", n)
				}
				if st, err := c.Status(context.Background(), res); !errors.Is(err, client.ErrNotFound) {
					t.Errorf("status after lockctl exited: got %+v, %v; want no lease left behind", st, err)
				}
			}
			if n := acquires.Load(); n != 2 {
				t.Errorf("lockctl sent %d acquire requests, want 2: its try and one round", n)
			}
		})
	}
}
