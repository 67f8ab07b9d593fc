package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ft288/locks/client"
)

// consoleGoroutines returns the stacks of goroutines running the console's
// own code (its listers, watches and handlers), not the test's.
func consoleGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/console.(") && !strings.Contains(g, "_test.go") {
			out = append(out, g)
		}
	}
	return out
}

// TestNoGoroutineLeftAfterServe: once Serve has returned and the tabs are
// gone, no lister, watch or stream of the console runs on.
func TestNoGoroutineLeftAfterServe(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	svc := httptest.NewServer(&fakeService{})
	defer svc.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	c, _ := client.New(svc.URL, client.WithHTTPClient(hc), client.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	s, err := Listen(Config{Client: c, Endpoint: svc.URL, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx); close(done) }()
	ck := session(t, s)
	a := openStream(t, s, ck, "view=locks&watch=a&wkind=locks")
	a.seen(t, "listing", "watch")
	b := openStream(t, s, ck, "view=semaphores&watch=s&wkind=semaphores")
	b.next(t, "listing")
	if len(consoleGoroutines()) == 0 {
		t.Fatal("no console goroutine seen while serving: the check would see no leak either")
	}
	a.close() // a tab that goes away without a word
	cancel()
	<-done
	b.close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := consoleGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the console run on after Serve returned:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not ordering events
	}
}
